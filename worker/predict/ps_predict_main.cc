// ps_predict: scores click logs with an export (ps_admin export), with no
// shard running: one probability per input line, in input order, and the
// AUC and logloss of the lines that carry labels (a line may leave the label
// column out). See README.md and --help.

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/build_info.h"
#include "base/exit_codes.h"
#include "base/flag_alias.h"
#include "base/lock_mode.h"
#include "base/usable_cores.h"
#include "glog/logging.h"
#include "kernels/backend.h"
#include "model/batch_inputs.h"
#include "model/exported_model.h"
#include "model/model_graph.h"
#include "worker/bounded_queue.h"
#include "worker/evaluation.h"
#include "worker/input/clicklog_reader.h"
#include "worker/input/layout_flags.h"

ABSL_FLAG(std::string, export, "",
          "The export to score with (ps_admin export --dir). Required.");
ABSL_FLAG(std::string, model, "", "Deprecated: use --export.");
ABSL_FLAG(std::string, input, "",
          "Click logs in the training layout (the export's, unless --format, "
          "--columns, ... say otherwise), with or without the label column: "
          "comma-separated paths or globs, plain or gzip. Required.");
ABSL_FLAG(std::string, out, "",
          "Where the probabilities go, one per input line, in input order; "
          "\"ID<TAB>probability\" when the layout has an id column; for a "
          "model of several tasks, one tab-separated column per task, under "
          "a header line that names them. Written "
          "aside and renamed into place once every line is scored, so that a "
          "run that fails leaves no half-written file (and an earlier one as "
          "it was). Default: none (only the AUC and logloss are printed).");
ABSL_FLAG(int32_t, batch_size, 4096, "Lines scored per step.");
ABSL_FLAG(int64_t, max_memory_mb, 1024,
          "The export's embedding and wide tables are read into memory at "
          "start, over a delta's whole chain, if their rows fit in this many "
          "MiB (21-43 bytes of index per row more): a lookup is then a "
          "hash probe, not a seek in each export of the chain. 0: never.");
ABSL_FLAG(bool, huge_pages, true,
          "Keep the tables read into memory (--max_memory_mb) on transparent "
          "huge pages (madvise), where random lookups miss the TLB less; "
          "false: the heap's memory, not advised (4 KiB pages unless THP is "
          "`always`), for a kernel whose huge-page compaction stalls page "
          "faults.");
ABSL_FLAG(std::string, cpu_threads, "auto",
          "Threads of the model's GEMMs on the CPU, or auto: every core this "
          "process may use. A thread of its own prepares the next batch "
          "(hashes its features, fetches its rows) and the reader thread "
          "parses meanwhile; the GEMM threads share only GEMMs and gathers "
          "large enough to split, and sleep between them.");
ABSL_FLAG(int64_t, max_bad_lines, 0,
          "Malformed lines tolerated (each is skipped, so the output no longer "
          "has a line per input line). Default 0: the first one is an error "
          "naming its file and line.");

namespace {

// Exits: 64 for a bad flag or input layout, else ExitCodeFor()'s
// (base/exit_codes.h).
constexpr char kProgram[] = "ps_predict";

// What a run has scored: how many lines, and the labeled lines' scores and
// labels, for AUC and logloss.
struct ScoredLines {
  explicit ScoredLines(std::vector<std::string> tasks)
      : scores(std::move(tasks)) {}
  int64_t lines = 0;
  // Each task's scores of the lines whose label it has.
  ps::worker::TaskScores scores;
};

// The export to score with: --export, or its old name --model. The first
// of --export, --input and --batch_size that is missing or bad is
// INVALID_ARGUMENT with a message for the user.
absl::StatusOr<std::string> ExportFromFlags() {
  absl::StatusOr<std::string> dir = ps::FlagOrAlias(FLAGS_export, FLAGS_model);
  if (!dir.ok()) return dir.status();
  if (dir->empty()) return absl::InvalidArgumentError("--export is required");
  if (absl::GetFlag(FLAGS_input).empty())
    return absl::InvalidArgumentError("--input is required");
  if (absl::GetFlag(FLAGS_batch_size) < 1)
    return absl::InvalidArgumentError("--batch_size must be >= 1");
  return dir;
}

// The categorical, multi and seq columns of `layout`, in order.
std::vector<ps::model::ColumnKind> FieldKinds(
    const ps::model::InputLayout& layout) {
  std::vector<ps::model::ColumnKind> kinds;
  for (ps::model::ColumnKind kind : layout.columns) {
    if (kind == ps::model::ColumnKind::kCategorical ||
        kind == ps::model::ColumnKind::kMulti ||
        kind == ps::model::ColumnKind::kSequence) {
      kinds.push_back(kind);
    }
  }
  return kinds;
}

// The layout to read the input in: the one the model was trained on
// (`trained`), unless the layout flags in `argv` give another, which must
// lay out the same features. INVALID_ARGUMENT, with a message for the user,
// for a bad layout flag or other features.
absl::StatusOr<ps::model::InputLayout> InputLayoutForModel(
    const ps::model::InputLayout& trained, int argc, char** argv) {
  bool layout_flags_given = false;
  absl::StatusOr<ps::model::InputLayout> given =
      ps::worker::InputLayoutOverFlags(trained, argc, argv,
                                       &layout_flags_given);
  if (!given.ok() || !layout_flags_given) return given;
  const ps::model::InputLayout& layout = *given;
  if (FieldKinds(layout) != FieldKinds(trained) ||
      layout.label_names != trained.label_names ||
      layout.sequence_key_fields != trained.sequence_key_fields ||
      layout.dense_features() != trained.dense_features() ||
      layout.crosses != trained.crosses ||
      layout.multi_pooling != trained.multi_pooling) {
    return absl::InvalidArgumentError(
        "the layout flags give " + ps::model::LayoutText(layout) +
        ", but the model was trained on " + ps::model::LayoutText(trained) +
        ": the labels (by name, in order), fields (cat, multi or seq, in "
        "order), dense features, crosses and pooling must match");
  }
  return given;
}

// A reader of --input in `layout`, labels optional.
absl::StatusOr<std::unique_ptr<ps::worker::ClickLogReader>> OpenInput(
    const ps::model::InputLayout& layout) {
  ps::worker::ReaderOptions reader_options;
  reader_options.layout = layout;
  reader_options.files = absl::GetFlag(FLAGS_input);
  reader_options.batch_size = absl::GetFlag(FLAGS_batch_size);
  reader_options.max_bad_lines = absl::GetFlag(FLAGS_max_bad_lines);
  reader_options.label = ps::model::LabelColumn::kOptional;
  return ps::worker::ClickLogReader::Open(reader_options);
}

// The header line of a model of several tasks (their names, after "id" when
// `with_id`); none for a model of one.
std::string HeaderLine(const ps::model::ModelPlan& plan, bool with_id) {
  if (plan.tasks().size() == 1) return "";
  std::vector<std::string> names;
  if (with_id) names.push_back("id");
  for (const ps::model::PlanTask& task : plan.tasks())
    names.push_back(task.name);
  return absl::StrCat(absl::StrJoin(names, "\t"), "\n");
}

// Writes one line per example to `out`: its probability per task
// (`probabilities` is tasks x examples, task-major), tab-separated, after
// its id and a tab when `with_id`.
void WriteProbabilities(const std::vector<ps::model::Example>& examples,
                        const std::vector<float>& probabilities, bool with_id,
                        std::FILE* out) {
  const size_t batch = examples.size();
  const size_t tasks = batch == 0 ? 0 : probabilities.size() / batch;
  std::string line;
  for (size_t i = 0; i < batch; ++i) {
    line.clear();
    if (with_id) absl::StrAppend(&line, examples[i].id, "\t");
    for (size_t t = 0; t < tasks; ++t) {
      absl::StrAppendFormat(&line, "%s%.9g", t == 0 ? "" : "\t",
                            probabilities[t * batch + i]);
    }
    line.push_back('\n');
    std::fputs(line.c_str(), out);
  }
}

// A batch on its way through ScoreInput: its lines, and its model inputs
// with the rows fetched.
struct PreparedBatch {
  std::vector<ps::model::Example> examples;
  std::unique_ptr<ps::model::BatchInputs> inputs;
};

// Scores every line of `reader` (in `layout`) with `model`'s rows and
// `graph`, writing the probabilities to `out` unless it is null; counts the
// lines in `scored` and adds the labeled ones' scores and labels there. The
// reader's, the export's and the model's errors.
//
// A thread of its own prepares each batch (hashes its features, fetches and
// pools its rows) while this one scores the batch before: two batches are
// in flight, and a third is being written.
absl::Status ScoreInput(ps::worker::ClickLogReader* reader,
                        ps::model::ExportedModel* model,
                        ps::model::ModelGraph* graph,
                        const ps::model::InputLayout& layout, std::FILE* out,
                        ScoredLines* scored) {
  constexpr int kBatchesInFlight = 3;
  ps::worker::BoundedQueue<std::unique_ptr<PreparedBatch>> free_batches(
      kBatchesInFlight);
  ps::worker::BoundedQueue<std::unique_ptr<PreparedBatch>> prepared(
      kBatchesInFlight);
  for (int b = 0; b < kBatchesInFlight; ++b) {
    auto batch = std::make_unique<PreparedBatch>();
    // The model's columns are positions in the layout it was trained on;
    // `layout` orders the same fields and dense columns alike.
    batch->inputs = std::make_unique<ps::model::BatchInputs>(&model->plan(),
                                                             model->layout());
    free_batches.Push(std::move(batch));
  }
  absl::Status input_status;  // written by the thread, read after its join
  std::thread preparer([&] {
    std::unique_ptr<PreparedBatch> batch;
    while (free_batches.Pop(&batch)) {
      absl::StatusOr<bool> more = reader->Next(&batch->examples);
      if (!more.ok() || !*more) {
        if (!more.ok()) input_status = more.status();
        break;
      }
      batch->inputs->Prepare(batch->examples);
      if (absl::Status fetched = model->Fetch(batch->inputs.get());
          !fetched.ok()) {
        input_status = fetched;
        break;
      }
      if (!prepared.Push(std::move(batch))) break;
    }
    prepared.Close();
  });
  absl::Status status;
  std::vector<float> batch_scores;
  std::unique_ptr<PreparedBatch> batch;
  while (status.ok() && prepared.Pop(&batch)) {
    status = graph->Predict(batch->inputs->Inputs(), &batch_scores);
    if (!status.ok()) break;
    if (out != nullptr)
      WriteProbabilities(batch->examples, batch_scores, layout.has_id(), out);
    scored->lines += static_cast<int64_t>(batch->examples.size());
    scored->scores.Add(batch->inputs->batch, batch_scores,
                       batch->inputs->labels, batch->inputs->label_known);
    free_batches.Push(std::move(batch));
  }
  // On an error here the preparer finishes the batch it holds, if any, and
  // stops: the free batches are taken back, so its next Pop() finds none.
  free_batches.Close();
  while (free_batches.TryPop(&batch)) {
  }
  prepared.Close();
  preparer.join();
  return status.ok() ? input_status : status;
}

// What the report says of the scores' quality: AUC and logloss, over which
// lines if not all carry labels; for several tasks, each task's, the first
// one's first ("AUC ..., logloss ... (task ctr); task cvr: AUC ...").
std::string QualityText(const ScoredLines& scored) {
  const std::vector<ps::worker::TaskMetrics> tasks = scored.scores.Metrics();
  std::vector<std::string> parts;
  for (size_t t = 0; t < tasks.size(); ++t) {
    const ps::worker::TaskMetrics& task = tasks[t];
    std::string part =
        t == 0 ? std::string() : absl::StrCat("task ", task.task, ": ");
    if (task.examples == 0) {
      absl::StrAppend(&part, "no labels, so no AUC or logloss");
    } else {
      absl::StrAppendFormat(&part, "AUC %.6f, logloss %.6f", task.auc,
                            task.logloss);
      if (task.examples < scored.lines)
        absl::StrAppend(&part, " over the ", task.examples, " labeled lines");
    }
    if (t == 0 && tasks.size() > 1)
      absl::StrAppend(&part, " (task ", task.task, ")");
    parts.push_back(std::move(part));
  }
  return absl::StrJoin(parts, "; ");
}

}  // namespace

int main(int argc, char** argv) {
  ps::UseReleaseLocks();
  absl::SetProgramUsageMessage(
      "Scores click logs with an exported model, no shard needed.\n\n"
      "Example:\n  ps_predict --export=/exports/wide_deep --input=test.tsv "
      "--out=scores.txt");
  ps::SetVersionFlag("ps_predict", {"worker/input/layout_flags.cc"});
  absl::ParseCommandLine(argc, argv);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  const absl::StatusOr<std::string> export_dir = ExportFromFlags();
  if (!export_dir.ok())
    return ps::FailUsage(kProgram, export_dir.status().message());

  if (absl::GetFlag(FLAGS_max_memory_mb) < 0 ||
      absl::GetFlag(FLAGS_max_memory_mb) > (int64_t{1} << 30)) {
    return ps::FailUsage(kProgram, "--max_memory_mb must be in [0, 2^30]");
  }
  ps::kernels::CpuOptions cpu_options;
  const std::string threads = absl::GetFlag(FLAGS_cpu_threads);
  if (threads == "auto") {
    cpu_options.threads = std::max(1, ps::UsableCores());
  } else if (!absl::SimpleAtoi(threads, &cpu_options.threads) ||
             cpu_options.threads < 1) {
    return ps::FailUsage(
        kProgram,
        "--cpu_threads must be auto or a number >= 1, not " + threads);
  }
  ps::model::ExportedModelOptions model_options;
  model_options.max_memory_bytes =
      static_cast<size_t>(absl::GetFlag(FLAGS_max_memory_mb)) << 20;
  model_options.huge_pages = absl::GetFlag(FLAGS_huge_pages);
  auto model = ps::model::ExportedModel::Open(*export_dir, model_options);
  if (!model.ok()) return ps::FailWith(kProgram, model.status());
  std::unique_ptr<ps::kernels::Backend> backend;
  if (const ps::kernels::Status created =
          ps::kernels::NewCpuBackend(cpu_options, &backend);
      !created.ok()) {
    return ps::FailUsage(kProgram, "--cpu_threads: " + created.message());
  }
  ps::model::ModelGraph graph(&(*model)->plan(), backend.get());
  absl::StatusOr<ps::model::InputLayout> layout =
      InputLayoutForModel((*model)->layout(), argc, argv);
  if (!layout.ok()) return ps::FailUsage(kProgram, layout.status().message());
  auto reader = OpenInput(*layout);
  if (!reader.ok()) return ps::FailWith(kProgram, reader.status());

  const std::string out_path = absl::GetFlag(FLAGS_out);
  const std::string scratch_path = out_path + ".partial";
  std::FILE* out = nullptr;
  if (!out_path.empty()) {
    out = std::fopen(scratch_path.c_str(), "w");
    if (out == nullptr) {
      return ps::FailWith(kProgram, absl::InternalError(absl::StrCat(
                                        "cannot write ", scratch_path, ": ",
                                        std::strerror(errno))));
    }
  }
  std::vector<std::string> tasks;
  for (const ps::model::PlanTask& task : (*model)->plan().tasks())
    tasks.push_back(task.name);
  ScoredLines scored(std::move(tasks));
  if (out != nullptr) {
    std::fputs(HeaderLine((*model)->plan(), layout->has_id()).c_str(), out);
  }
  const absl::Time start = absl::Now();
  if (absl::Status status = ScoreInput(reader->get(), model->get(), &graph,
                                       *layout, out, &scored);
      !status.ok()) {
    if (out != nullptr) {
      std::fclose(out);
      std::remove(scratch_path.c_str());
    }
    return ps::FailWith(kProgram, status);
  }
  if (out != nullptr) {
    const bool written = std::fflush(out) == 0 && fsync(fileno(out)) == 0;
    const int error = errno;
    if (std::fclose(out) != 0 || !written ||
        std::rename(scratch_path.c_str(), out_path.c_str()) != 0) {
      const int cause = written ? errno : error;
      std::remove(scratch_path.c_str());
      return ps::FailWith(kProgram, absl::InternalError(absl::StrCat(
                                        "cannot write ", out_path, ": ",
                                        std::strerror(cause))));
    }
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  std::printf(
      "scored %lld lines in %.2f s (%.0f lines/s); %s; bad lines %lld\n",
      static_cast<long long>(scored.lines), seconds,
      seconds > 0 ? scored.lines / seconds : 0, QualityText(scored).c_str(),
      static_cast<long long>((*reader)->bad_lines()));
  return 0;
}
