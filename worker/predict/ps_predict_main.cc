// ps_predict: scores click logs with an export (ps_admin export), with no
// shard running: one probability per input line, in input order, and the
// AUC and logloss of the lines that carry labels (a line may leave the label
// column out). See README.md and --help.

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/build_info.h"
#include "base/exit_codes.h"
#include "glog/logging.h"
#include "kernels/backend.h"
#include "kernels/ctr_model.h"
#include "worker/evaluation.h"
#include "worker/input/clicklog_reader.h"
#include "worker/input/layout_flags.h"
#include "worker/model_inputs.h"
#include "worker/predict/exported_model.h"

ABSL_FLAG(std::string, model, "",
          "The export to score with (ps_admin export --dir). Required.");
ABSL_FLAG(std::string, input, "",
          "Click logs in the training layout (the export's, unless --format, "
          "--columns, ... say otherwise), with or without the label column: "
          "comma-separated paths or globs, plain or gzip. Required.");
ABSL_FLAG(std::string, out, "",
          "Where the probabilities go, one per input line, in input order; "
          "\"ID<TAB>probability\" when the layout has an id column. Default: "
          "none (only the AUC and logloss are printed).");
ABSL_FLAG(int32_t, batch_size, 4096, "Lines scored per step.");
ABSL_FLAG(int32_t, cpu_threads, 1, "Threads of the model's GEMMs.");
ABSL_FLAG(int64_t, max_bad_lines, 0,
          "Malformed lines tolerated (each is skipped, so the output no longer "
          "has a line per input line). Default 0: the first one is an error "
          "naming its file and line.");

namespace {

// A bad flag or input layout: exit 64.
int Fail(const std::string& message) {
  std::fprintf(stderr, "ps_predict: %s\n", message.c_str());
  return ps::kExitUsage;
}

// A run that failed (an unreadable export or input, a bad line): 70.
int Fail(const absl::Status& status) {
  std::fprintf(stderr, "ps_predict: %s\n", status.ToString().c_str());
  return ps::ExitCodeFor(status);
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Scores click logs with an exported model, no shard needed.\n\n"
      "Example:\n  ps_predict --model=/exports/wide_deep --input=test.tsv "
      "--out=scores.txt");
  ps::SetVersionFlag("ps_predict", {"worker/input/layout_flags.cc"});
  absl::ParseCommandLine(argc, argv);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  if (absl::GetFlag(FLAGS_model).empty()) return Fail("--model is required");
  if (absl::GetFlag(FLAGS_input).empty()) return Fail("--input is required");
  if (absl::GetFlag(FLAGS_batch_size) < 1)
    return Fail("--batch_size must be >= 1");

  auto model = ps::worker::ExportedModel::Open(absl::GetFlag(FLAGS_model));
  if (!model.ok()) return Fail(model.status());
  ps::kernels::CpuOptions cpu_options;
  cpu_options.threads = absl::GetFlag(FLAGS_cpu_threads);
  std::unique_ptr<ps::kernels::Backend> backend;
  if (const ps::kernels::Status created =
          ps::kernels::NewCpuBackend(cpu_options, &backend);
      !created.ok()) {
    return Fail("--cpu_threads: " + created.message());
  }
  ps::kernels::CtrModel ctr((*model)->config(), backend.get());

  // The layout the model was trained on, unless the flags give another
  // (the same features laid out differently).
  bool layout_flags_given = false;
  absl::StatusOr<ps::worker::InputLayout> given =
      ps::worker::InputLayoutOverFlags((*model)->layout(), argc, argv,
                                       &layout_flags_given);
  if (!given.ok()) return Fail(std::string(given.status().message()));
  const ps::worker::InputLayout& layout = *given;
  if (layout_flags_given) {
    auto field_kinds = [](const ps::worker::InputLayout& of) {
      std::vector<ps::worker::ColumnKind> kinds;
      for (ps::worker::ColumnKind kind : of.columns) {
        if (kind == ps::worker::ColumnKind::kCategorical ||
            kind == ps::worker::ColumnKind::kMulti) {
          kinds.push_back(kind);
        }
      }
      return kinds;
    };
    const ps::worker::InputLayout& trained = (*model)->layout();
    if (field_kinds(layout) != field_kinds(trained) ||
        layout.dense_features() != trained.dense_features() ||
        layout.crosses != trained.crosses ||
        layout.multi_pooling != trained.multi_pooling) {
      return Fail("the layout flags give " + ps::worker::LayoutText(layout) +
                  ", but the model was trained on " +
                  ps::worker::LayoutText(trained) +
                  ": the fields (cat or multi, in order), dense features, "
                  "crosses and pooling must match");
    }
  }
  const int embedding_dim =
      (*model)->config().kind == ps::kernels::ModelKind::kLogisticRegression
          ? 0
          : (*model)->config().embedding_dim;

  ps::worker::ReaderOptions reader_options;
  reader_options.layout = layout;
  reader_options.files = absl::GetFlag(FLAGS_input);
  reader_options.batch_size = absl::GetFlag(FLAGS_batch_size);
  reader_options.max_bad_lines = absl::GetFlag(FLAGS_max_bad_lines);
  reader_options.label = ps::worker::LabelColumn::kOptional;
  auto reader = ps::worker::ClickLogReader::Open(reader_options);
  if (!reader.ok()) return Fail(reader.status());

  std::FILE* out = nullptr;
  if (const std::string path = absl::GetFlag(FLAGS_out); !path.empty()) {
    out = std::fopen(path.c_str(), "w");
    if (out == nullptr)
      return Fail(absl::InternalError("cannot write " + path));
  }
  // The labeled lines' scores and labels, for AUC and logloss.
  std::vector<float> scores, labels, batch_scores;
  int64_t lines = 0;
  std::vector<ps::worker::Example> examples;
  ps::worker::ModelInputs inputs;
  const absl::Time start = absl::Now();
  while (true) {
    absl::StatusOr<bool> more = (*reader)->Next(&examples);
    if (!more.ok()) return Fail(more.status());
    if (!*more) break;
    inputs.Prepare(examples, layout, embedding_dim);
    if (absl::Status fetched = (*model)->Fetch(&inputs); !fetched.ok())
      return Fail(fetched);
    if (absl::Status predicted =
            ps::worker::FromKernels(ctr.Predict(inputs.Step(), &batch_scores));
        !predicted.ok()) {
      return Fail(predicted);
    }
    if (out != nullptr && layout.has_id()) {
      for (size_t i = 0; i < examples.size(); ++i) {
        std::fprintf(out, "%s\t%.9g\n", examples[i].id.c_str(),
                     batch_scores[i]);
      }
    } else if (out != nullptr) {
      for (float score : batch_scores) std::fprintf(out, "%.9g\n", score);
    }
    lines += static_cast<int64_t>(examples.size());
    for (size_t i = 0; i < examples.size(); ++i) {
      if (!examples[i].has_label) continue;
      scores.push_back(batch_scores[i]);
      labels.push_back(examples[i].label);
    }
  }
  if (out != nullptr && std::fclose(out) != 0)
    return Fail(
        absl::InternalError("cannot write " + absl::GetFlag(FLAGS_out)));
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  std::string quality = "no labels, so no AUC or logloss";
  if (!scores.empty()) {
    quality = absl::StrFormat("AUC %.6f, logloss %.6f",
                              ps::worker::ExactAuc(scores, labels),
                              ps::worker::MeanLogLoss(scores, labels));
    if (static_cast<int64_t>(scores.size()) < lines) {
      absl::StrAppend(&quality, " over the ", scores.size(), " labeled lines");
    }
  }
  std::printf(
      "scored %lld lines in %.2f s (%.0f lines/s); %s; bad lines %lld\n",
      static_cast<long long>(lines), seconds, seconds > 0 ? lines / seconds : 0,
      quality.c_str(), static_cast<long long>((*reader)->bad_lines()));
  return 0;
}
