// clicklog_gen: writes a synthetic click log (Criteo's layout or another) with
// its hidden ground truth. See worker/datagen/clicklog_generator.h and --help.

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/build_info.h"
#include "base/exit_codes.h"
#include "base/lock_mode.h"
#include "nlohmann/json.hpp"
#include "worker/datagen/clicklog_generator.h"
#include "worker/evaluation.h"
#include "worker/input/layout_flags.h"

ABSL_FLAG(std::string, out, "",
          "Click log to write; gzip'd if it ends in .gz. Required.");
ABSL_FLAG(int64_t, lines, 1000000, "Lines to write.");
ABSL_FLAG(uint64_t, seed, 1,
          "Seed of the hidden model. Train and test files must share it.");
ABSL_FLAG(uint64_t, sample_seed, 0,
          "Seed of which lines are drawn; give train and test different ones.");
ABSL_FLAG(std::string, truth_out, "",
          "If set, writes each line's true click probability, one per line.");
ABSL_FLAG(
    std::string, summary_out, "",
    "If set, writes JSON: lines, click rate, and the AUC and logloss of "
    "the true probabilities (the best any model can reach on this file).");
ABSL_FLAG(int64_t, max_vocabulary, 2000000, "Largest categorical vocabulary.");
ABSL_FLAG(double, zipf_exponent, 1.1,
          "Power-law exponent of value frequencies.");
ABSL_FLAG(double, drift, 0.0,
          "New values per categorical field per 1000 lines: each enters as "
          "its field's most frequent value and fades as newer ones arrive "
          "(0: no drift).");
ABSL_FLAG(int64_t, first_line, 0,
          "With --drift: the stream position of the first line, so that a "
          "test file of the most recent data starts where training ended.");
ABSL_FLAG(double, negative_keep_rate, 1.0,
          "Keep each line without a click with this probability, in (0, 1] "
          "(down-sampled negatives, as CTR logs often are); a weight column "
          "then holds 1/rate on the negatives kept (1 on clicks), so that "
          "training weighted by it sees the drawn click rate. --lines counts "
          "the lines written; --summary_out's truth AUC and logloss are "
          "over them, unweighted, and --drift's stream counts every line "
          "drawn.");
ABSL_FLAG(int32_t, tasks, 1,
          "Labels per line: 1 (a click) or 2 (a click, then a conversion that "
          "only a click can have, with drivers of its own). With 2, a "
          "--columns of one plain label gets two, label:click,label:convert, "
          "in its place; --summary_out gives each label's rate and its "
          "truth's best AUC and logloss under \"tasks\".");
ABSL_FLAG(int32_t, sequence_length, 0,
          "The most recent items each line carries (0 to this many, oldest "
          "first, separated by --multi_separator, from the first categorical "
          "field's vocabulary): the click then depends on how related the "
          "line's first categorical value is to them. Written in the first "
          "seq column of --columns; with none there, appended as the last "
          "column. 0: none.");
ABSL_FLAG(int32_t, multi_fields, 0,
          "Multi-valued fields per line (1 to 8 values each, every value with "
          "an effect on the click). Written where --columns has multi "
          "columns; with none there, appended as the last columns.");

namespace {

// Writes to a plain or gzip file.
class Output {
 public:
  static std::unique_ptr<Output> Open(const std::string& path) {
    auto output = std::unique_ptr<Output>(new Output());
    if (absl::EndsWith(path, ".gz")) {
      output->gz_ = gzopen(path.c_str(), "wb1");
      if (output->gz_ == nullptr) return nullptr;
    } else {
      output->file_ = std::fopen(path.c_str(), "w");
      if (output->file_ == nullptr) return nullptr;
    }
    return output;
  }
  ~Output() { Close(); }
  // Flushes and closes the file; false when a write that was buffered
  // failed (a full disk). Idempotent.
  bool Close() {
    bool ok = true;
    if (gz_ != nullptr) ok = gzclose(gz_) == Z_OK;
    if (file_ != nullptr) ok = std::fclose(file_) == 0;
    gz_ = nullptr;
    file_ = nullptr;
    return ok;
  }
  bool Write(const std::string& text) {
    if (gz_ != nullptr)
      return gzwrite(gz_, text.data(), text.size()) ==
             static_cast<int>(text.size());
    return std::fwrite(text.data(), 1, text.size(), file_) == text.size();
  }

 private:
  Output() = default;
  gzFile gz_ = nullptr;
  FILE* file_ = nullptr;
};

constexpr char kUsage[] =
    "Writes a synthetic click log with a hidden ground truth: Criteo's "
    "layout (label, 13 integers, 26 hex categoricals) unless --format, "
    "--header, --columns and --multi_fields ask for another.\n\nExample:\n"
    "  clicklog_gen --out=train.tsv --lines=1000000 --seed=1 --sample_seed=1 "
    "--truth_out=train.truth\n  clicklog_gen --out=train.csv --format=csv "
    "--header --columns=skip,label,cat*26,dense*13 --multi_fields=2";

// What the flags ask for: `lines` lines drawn with `options`, written to
// `out_path` in `layout`.
struct Generation {
  std::string out_path;
  int64_t lines = 0;
  double negative_keep_rate = 1.0;
  uint64_t sample_seed = 0;
  ps::worker::GeneratorOptions options;
  ps::model::InputLayout layout;
};

// The true click probabilities, the labels and the weights of the lines
// written, for --summary_out; with --tasks=2, the conversions' too.
struct Truths {
  std::vector<float> probabilities;
  std::vector<float> labels;
  std::vector<float> weights;
  std::vector<float> convert_probabilities;
  std::vector<float> converts;
};

// The generator's options as the flags give them, unchecked.
ps::worker::GeneratorOptions GeneratorOptionsFromFlags() {
  ps::worker::GeneratorOptions options;
  options.seed = absl::GetFlag(FLAGS_seed);
  options.max_vocabulary = absl::GetFlag(FLAGS_max_vocabulary);
  options.zipf_exponent = absl::GetFlag(FLAGS_zipf_exponent);
  options.multi_fields = absl::GetFlag(FLAGS_multi_fields);
  options.tasks = absl::GetFlag(FLAGS_tasks);
  options.sequence_length = absl::GetFlag(FLAGS_sequence_length);
  options.drift = absl::GetFlag(FLAGS_drift);
  options.first_line = absl::GetFlag(FLAGS_first_line);
  return options;
}

// Warns when `layout`'s columns and what the generator draws differ in
// number. Columns the generator has no values for are written empty; values
// the layout has no column for are left out, while their effects stay in the
// true probabilities (so --summary_out's best AUC is out of reach).
void WarnOnColumnMismatch(const ps::model::InputLayout& layout,
                          int multi_fields) {
  const int multi_columns =
      static_cast<int>(std::count(layout.columns.begin(), layout.columns.end(),
                                  ps::model::ColumnKind::kMulti));
  const int categorical_columns =
      static_cast<int>(std::count(layout.columns.begin(), layout.columns.end(),
                                  ps::model::ColumnKind::kCategorical));
  if (layout.dense_features() != ps::worker::kGeneratedDense ||
      categorical_columns != ps::worker::kGeneratedCategorical ||
      multi_columns != multi_fields) {
    std::fprintf(stderr,
                 "clicklog_gen: warning: --columns has %d dense, %d cat and %d "
                 "multi columns; the generator draws %d, %d and %d "
                 "(--multi_fields): extra columns are written empty, values "
                 "without a column are left out but still move the click\n",
                 layout.dense_features(), categorical_columns, multi_columns,
                 ps::worker::kGeneratedDense, ps::worker::kGeneratedCategorical,
                 multi_fields);
  }
}

// With two tasks, a layout of one plain label gets two named ones in its
// place (label:click,label:convert). INVALID_ARGUMENT when the layout has
// more label columns than there are tasks.
absl::Status FitLabels(int tasks, ps::model::InputLayout* layout) {
  if (layout->labels() > tasks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--columns has ", layout->labels(), " label columns; --tasks=", tasks,
        " draws ",
        tasks == 1 ? "one (a click)" : "two (a click, a conversion)"));
  }
  if (tasks == 2 && layout->labels() == 1 && !layout->label_may_be_unknown(0)) {
    const auto label = std::find(layout->columns.begin(), layout->columns.end(),
                                 ps::model::ColumnKind::kLabel);
    layout->columns.insert(label, ps::model::ColumnKind::kLabel);
    layout->label_names = {"click", "convert"};
  }
  return absl::OkStatus();
}

// The run the flags ask for, or the first bad flag's error, whose message is
// for the user; checked in this order: --out and --lines, --drift and
// --first_line, --multi_fields, --tasks, --negative_keep_rate, the layout
// flags (as many labels as tasks at most; a weight column where negatives
// are down-sampled), then (after
// WarnOnColumnMismatch) --max_vocabulary and --zipf_exponent. A layout
// without multi columns gets --multi_fields of them, appended.
absl::StatusOr<Generation> GenerationFromFlags() {
  Generation generation;
  generation.out_path = absl::GetFlag(FLAGS_out);
  generation.lines = absl::GetFlag(FLAGS_lines);
  if (generation.out_path.empty() || generation.lines < 0) {
    return absl::InvalidArgumentError(
        "--out is required and --lines must be >= 0");
  }
  generation.options = GeneratorOptionsFromFlags();
  const ps::worker::GeneratorOptions& options = generation.options;
  if (!(options.drift >= 0.0) || options.drift > 1e6 ||
      options.first_line < 0) {
    return absl::InvalidArgumentError(
        "--drift must be in [0, 1e6] and --first_line >= 0");
  }
  if (options.multi_fields < 0 || options.multi_fields > 64) {
    return absl::InvalidArgumentError("--multi_fields must be in [0, 64]");
  }
  if (options.tasks != 1 && options.tasks != 2) {
    return absl::InvalidArgumentError("--tasks must be 1 or 2");
  }
  if (options.sequence_length < 0 || options.sequence_length > 1000) {
    return absl::InvalidArgumentError("--sequence_length must be in [0, 1000]");
  }
  generation.negative_keep_rate = absl::GetFlag(FLAGS_negative_keep_rate);
  if (!(generation.negative_keep_rate > 0.0) ||
      generation.negative_keep_rate > 1.0) {
    return absl::InvalidArgumentError("--negative_keep_rate must be in (0, 1]");
  }
  generation.sample_seed = absl::GetFlag(FLAGS_sample_seed);
  absl::StatusOr<ps::model::InputLayout> layout =
      ps::worker::InputLayoutFromFlags();
  if (!layout.ok()) return layout.status();
  if (layout->tfrecord) {
    return absl::InvalidArgumentError(
        "--format=tfrecord: clicklog_gen writes lines (tsv or csv)");
  }
  generation.layout = *std::move(layout);
  if (absl::Status labels = FitLabels(options.tasks, &generation.layout);
      !labels.ok()) {
    return labels;
  }
  if (generation.negative_keep_rate < 1.0 && !generation.layout.has_weight()) {
    return absl::InvalidArgumentError(
        "--negative_keep_rate needs a weight column in --columns (the "
        "weights that undo the down-sampling)");
  }
  if (!generation.layout.has_multi()) {
    generation.layout.columns.insert(generation.layout.columns.end(),
                                     options.multi_fields,
                                     ps::model::ColumnKind::kMulti);
  }
  if (options.sequence_length > 0 && !generation.layout.has_sequence()) {
    // The items are the first categorical field's values: seq:0 shares its
    // keys.
    const int field = generation.layout.fields();
    generation.layout.columns.push_back(ps::model::ColumnKind::kSequence);
    if (field > 0) generation.layout.sequence_key_fields[field] = 0;
  }
  WarnOnColumnMismatch(generation.layout, options.multi_fields);
  if (options.max_vocabulary < 10 || options.zipf_exponent <= 1.0) {
    return absl::InvalidArgumentError(
        "--max_vocabulary must be >= 10 and --zipf_exponent > 1");
  }
  return generation;
}

// Writes generation.lines lines from `generator` to `log`, and each line's
// true probability to `truth` unless it is null, in blocks of about 1 MiB;
// reports every millionth line on stderr. Adds each line's probability,
// label and weight to `truths` unless it is null. Negatives dropped by
// --negative_keep_rate are drawn but not written (nor counted).
absl::Status WriteLines(const Generation& generation,
                        ps::worker::ClickLogGenerator* generator, Output* log,
                        Output* truth, Truths* truths) {
  std::string line, text, truth_text;
  if (generation.layout.header) {
    absl::StrAppend(&text, ps::worker::HeaderLine(generation.layout), "\n");
  }
  ps::worker::GeneratedExample example;
  // Which negatives are kept: drawn apart from the lines themselves.
  std::mt19937_64 keep(generation.sample_seed ^ 0x6b656570ULL);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  for (int64_t i = 0; i < generation.lines; ++i) {
    double probability = 0, convert_probability = 0;
    generator->Next(&example, &probability, &convert_probability);
    if (!example.click && generation.negative_keep_rate < 1.0) {
      if (uniform(keep) >= generation.negative_keep_rate) {
        --i;  // not written: draw another
        continue;
      }
      example.weight = 1.0 / generation.negative_keep_rate;
    }
    ps::worker::FormatLine(example, generation.layout, i, &line);
    text.append(line);
    text.push_back('\n');
    if (truth != nullptr)
      absl::StrAppendFormat(&truth_text, "%.6f\n", probability);
    if (truths != nullptr) {
      truths->probabilities.push_back(static_cast<float>(probability));
      truths->labels.push_back(example.click ? 1.0f : 0.0f);
      truths->weights.push_back(static_cast<float>(example.weight));
      if (generation.options.tasks > 1) {
        truths->convert_probabilities.push_back(
            static_cast<float>(convert_probability));
        truths->converts.push_back(example.convert ? 1.0f : 0.0f);
      }
    }
    if (text.size() > (1 << 20)) {
      if (!log->Write(text) || (truth != nullptr && !truth->Write(truth_text)))
        return absl::InternalError("write failed");
      text.clear();
      truth_text.clear();
    }
    if ((i + 1) % 1000000 == 0) {
      std::fprintf(stderr, "clicklog_gen: %lld lines\n",
                   static_cast<long long>(i + 1));
    }
  }
  // The last block (the header alone for --lines=0).
  if (!log->Write(text) || (truth != nullptr && !truth->Write(truth_text)))
    return absl::InternalError("write failed");
  return absl::OkStatus();
}

// Writes to `path` the JSON of --summary_out for `lines` lines with
// `truths`, written in `layout`.
absl::Status WriteSummary(const std::string& path, int64_t lines,
                          const Truths& truths,
                          const ps::model::InputLayout& layout) {
  double clicks = 0, weight = 0;
  for (size_t i = 0; i < truths.labels.size(); ++i) {
    clicks += truths.labels[i];
    weight += truths.weights[i];
  }
  // Six decimals, as in ps_worker's metrics.
  auto rounded = [](double value) { return std::round(value * 1e6) / 1e6; };
  nlohmann::ordered_json summary_json = {
      {"lines", lines},
      {"click_rate", rounded(lines > 0 ? clicks / lines : 0.0)},
      // The click rate of the lines drawn, before negatives were dropped.
      {"weighted_click_rate", rounded(weight > 0 ? clicks / weight : 0.0)},
      {"truth_auc",
       rounded(ps::worker::ExactAuc(truths.probabilities, truths.labels))},
      {"truth_logloss",
       rounded(ps::worker::MeanLogLoss(truths.probabilities, truths.labels))},
      // What reads the file back (ps_worker --format, --header, --columns).
      {"format", layout.delimiter == ',' ? "csv" : "tsv"},
      {"header", layout.header},
      {"columns", ps::model::ColumnsSpec(layout)},
  };
  if (!truths.converts.empty()) {
    double converts = 0;
    for (float convert : truths.converts) converts += convert;
    summary_json["tasks"] = {
        {{"task", layout.label_names[0]},
         {"rate", summary_json["click_rate"]},
         {"truth_auc", summary_json["truth_auc"]},
         {"truth_logloss", summary_json["truth_logloss"]}},
        {{"task", layout.labels() > 1 ? layout.label_names[1] : "convert"},
         {"rate", rounded(lines > 0 ? converts / lines : 0.0)},
         {"truth_auc", rounded(ps::worker::ExactAuc(
                           truths.convert_probabilities, truths.converts))},
         {"truth_logloss",
          rounded(ps::worker::MeanLogLoss(truths.convert_probabilities,
                                          truths.converts))}},
    };
  }
  const std::string json =
      summary_json.dump(2, ' ', /*ensure_ascii=*/false,
                        nlohmann::ordered_json::error_handler_t::replace) +
      "\n";
  FILE* summary = std::fopen(path.c_str(), "w");
  if (summary == nullptr)
    return absl::InternalError("cannot write the summary " + path);
  const bool written = std::fputs(json.c_str(), summary) >= 0;
  if (std::fclose(summary) != 0 || !written)
    return absl::InternalError("cannot write the summary " + path);
  return absl::OkStatus();
}

// Writes `generation`'s click log with `generator`, and --truth_out and
// --summary_out where set, then reports on stderr how long that took. An
// error's message is for the user.
absl::Status Generate(const Generation& generation,
                      ps::worker::ClickLogGenerator* generator) {
  std::unique_ptr<Output> log = Output::Open(generation.out_path);
  if (log == nullptr)
    return absl::InternalError("cannot write " + generation.out_path);
  std::unique_ptr<Output> truth;
  if (const std::string truth_path = absl::GetFlag(FLAGS_truth_out);
      !truth_path.empty()) {
    truth = Output::Open(truth_path);
    if (truth == nullptr)
      return absl::InternalError("cannot write " + truth_path);
  }
  const std::string summary_path = absl::GetFlag(FLAGS_summary_out);
  Truths truths;
  const absl::Time start = absl::Now();
  if (absl::Status written =
          WriteLines(generation, generator, log.get(), truth.get(),
                     summary_path.empty() ? nullptr : &truths);
      !written.ok()) {
    return written;
  }
  if (!log->Close())
    return absl::InternalError("writing " + generation.out_path + " failed");
  if (truth != nullptr && !truth->Close())
    return absl::InternalError("writing " + absl::GetFlag(FLAGS_truth_out) +
                               " failed");
  if (!summary_path.empty()) {
    if (absl::Status summarized = WriteSummary(summary_path, generation.lines,
                                               truths, generation.layout);
        !summarized.ok()) {
      return summarized;
    }
  }
  std::fprintf(stderr, "clicklog_gen: wrote %lld lines to %s in %.1f s\n",
               static_cast<long long>(generation.lines),
               generation.out_path.c_str(),
               absl::ToDoubleSeconds(absl::Now() - start));
  const ps::model::InputLayout& layout = generation.layout;
  std::fprintf(
      stderr, "clicklog_gen: read it with --format=%s%s --columns=%s\n",
      layout.delimiter == ',' ? "csv" : "tsv", layout.header ? " --header" : "",
      ps::model::ColumnsSpec(layout).c_str());
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  ps::UseReleaseLocks();
  absl::SetProgramUsageMessage(kUsage);
  ps::SetVersionFlag("clicklog_gen", {"worker/input/layout_flags.cc"});
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<Generation> generation = GenerationFromFlags();
  if (!generation.ok()) {
    std::fprintf(stderr, "clicklog_gen: %s\n",
                 std::string(generation.status().message()).c_str());
    return ps::kExitUsage;
  }
  ps::worker::ClickLogGenerator generator(generation->options,
                                          absl::GetFlag(FLAGS_sample_seed));
  if (const absl::Status generated = Generate(*generation, &generator);
      !generated.ok()) {
    std::fprintf(stderr, "clicklog_gen: %s\n",
                 std::string(generated.message()).c_str());
    return ps::kExitFailed;
  }
  return 0;
}
