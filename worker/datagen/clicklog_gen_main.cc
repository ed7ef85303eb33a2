// clicklog_gen: writes a synthetic click log (Criteo's layout or another) with
// its hidden ground truth. See worker/datagen/clicklog_generator.h and --help.

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/build_info.h"
#include "base/exit_codes.h"
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
  ~Output() {
    if (gz_ != nullptr) gzclose(gz_);
    if (file_ != nullptr) std::fclose(file_);
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

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Writes a synthetic click log with a hidden ground truth: Criteo's "
      "layout (label, 13 integers, 26 hex categoricals) unless --format, "
      "--header, --columns and --multi_fields ask for another.\n\nExample:\n"
      "  clicklog_gen --out=train.tsv --lines=1000000 --seed=1 --sample_seed=1 "
      "--truth_out=train.truth\n  clicklog_gen --out=train.csv --format=csv "
      "--header --columns=skip,label,cat*26,dense*13 --multi_fields=2");
  ps::SetVersionFlag("clicklog_gen", {"worker/input/layout_flags.cc"});
  absl::ParseCommandLine(argc, argv);
  const std::string out_path = absl::GetFlag(FLAGS_out);
  const int64_t lines = absl::GetFlag(FLAGS_lines);
  if (out_path.empty() || lines < 0) {
    std::fprintf(stderr,
                 "clicklog_gen: --out is required and --lines must be >= 0\n");
    return ps::kExitUsage;
  }
  ps::worker::GeneratorOptions options;
  options.seed = absl::GetFlag(FLAGS_seed);
  options.max_vocabulary = absl::GetFlag(FLAGS_max_vocabulary);
  options.zipf_exponent = absl::GetFlag(FLAGS_zipf_exponent);
  options.multi_fields = absl::GetFlag(FLAGS_multi_fields);
  options.drift = absl::GetFlag(FLAGS_drift);
  options.first_line = absl::GetFlag(FLAGS_first_line);
  if (!(options.drift >= 0.0) || options.drift > 1e6 ||
      options.first_line < 0) {
    std::fprintf(stderr,
                 "clicklog_gen: --drift must be in [0, 1e6] and --first_line "
                 ">= 0\n");
    return ps::kExitUsage;
  }
  if (options.multi_fields < 0 || options.multi_fields > 64) {
    std::fprintf(stderr, "clicklog_gen: --multi_fields must be in [0, 64]\n");
    return ps::kExitUsage;
  }
  absl::StatusOr<ps::worker::InputLayout> layout =
      ps::worker::InputLayoutFromFlags();
  if (!layout.ok()) {
    std::fprintf(stderr, "clicklog_gen: %s\n",
                 std::string(layout.status().message()).c_str());
    return ps::kExitUsage;
  }
  if (!layout->has_multi()) {
    layout->columns.insert(layout->columns.end(), options.multi_fields,
                           ps::worker::ColumnKind::kMulti);
  }
  // Columns the generator has no values for are written empty; values the
  // layout has no column for are left out, while their effects stay in the
  // true probabilities (so --summary_out's best AUC is out of reach).
  const int multi_columns =
      layout->fields() - static_cast<int>(std::count(
                             layout->columns.begin(), layout->columns.end(),
                             ps::worker::ColumnKind::kCategorical));
  const int categorical_columns = layout->fields() - multi_columns;
  if (layout->dense_features() != ps::worker::kGeneratedDense ||
      categorical_columns != ps::worker::kGeneratedCategorical ||
      multi_columns != options.multi_fields) {
    std::fprintf(stderr,
                 "clicklog_gen: warning: --columns has %d dense, %d cat and %d "
                 "multi columns; the generator draws %d, %d and %d "
                 "(--multi_fields): extra columns are written empty, values "
                 "without a column are left out but still move the click\n",
                 layout->dense_features(), categorical_columns, multi_columns,
                 ps::worker::kGeneratedDense, ps::worker::kGeneratedCategorical,
                 options.multi_fields);
  }
  if (options.max_vocabulary < 10 || options.zipf_exponent <= 1.0) {
    std::fprintf(stderr,
                 "clicklog_gen: --max_vocabulary must be >= 10 and "
                 "--zipf_exponent > 1\n");
    return ps::kExitUsage;
  }
  ps::worker::ClickLogGenerator generator(options,
                                          absl::GetFlag(FLAGS_sample_seed));

  auto output = Output::Open(out_path);
  if (output == nullptr) {
    std::fprintf(stderr, "clicklog_gen: cannot write %s\n", out_path.c_str());
    return ps::kExitFailed;
  }
  std::unique_ptr<Output> truth;
  if (!absl::GetFlag(FLAGS_truth_out).empty()) {
    truth = Output::Open(absl::GetFlag(FLAGS_truth_out));
    if (truth == nullptr) {
      std::fprintf(stderr, "clicklog_gen: cannot write %s\n",
                   absl::GetFlag(FLAGS_truth_out).c_str());
      return ps::kExitFailed;
    }
  }
  const bool want_summary = !absl::GetFlag(FLAGS_summary_out).empty();
  std::vector<float> probabilities, labels;
  std::string line, text, truth_text;
  if (layout->header) absl::StrAppend(&text, HeaderLine(*layout), "\n");
  ps::worker::GeneratedExample example;
  const absl::Time start = absl::Now();
  for (int64_t i = 0; i < lines; ++i) {
    double probability = 0;
    generator.Next(&example, &probability);
    FormatLine(example, *layout, i, &line);
    text.append(line);
    text.push_back('\n');
    if (truth != nullptr)
      absl::StrAppendFormat(&truth_text, "%.6f\n", probability);
    if (want_summary) {
      probabilities.push_back(static_cast<float>(probability));
      labels.push_back(example.click ? 1.0f : 0.0f);
    }
    if (text.size() > (1 << 20) || i + 1 == lines) {
      if (!output->Write(text) ||
          (truth != nullptr && !truth->Write(truth_text))) {
        std::fprintf(stderr, "clicklog_gen: write failed\n");
        return ps::kExitFailed;
      }
      text.clear();
      truth_text.clear();
    }
    if ((i + 1) % 1000000 == 0) {
      std::fprintf(stderr, "clicklog_gen: %lld lines\n",
                   static_cast<long long>(i + 1));
    }
  }
  output.reset();
  truth.reset();
  if (want_summary) {
    double clicks = 0;
    for (float label : labels) clicks += label;
    // Six decimals, as in ps_worker's metrics.
    auto rounded = [](double value) { return std::round(value * 1e6) / 1e6; };
    const nlohmann::ordered_json summary_json = {
        {"lines", lines},
        {"click_rate", rounded(lines > 0 ? clicks / lines : 0.0)},
        {"truth_auc", rounded(ps::worker::ExactAuc(probabilities, labels))},
        {"truth_logloss",
         rounded(ps::worker::MeanLogLoss(probabilities, labels))},
    };
    const std::string json =
        summary_json.dump(2, ' ', /*ensure_ascii=*/false,
                          nlohmann::ordered_json::error_handler_t::replace) +
        "\n";
    FILE* summary = std::fopen(absl::GetFlag(FLAGS_summary_out).c_str(), "w");
    if (summary == nullptr || std::fputs(json.c_str(), summary) < 0) {
      std::fprintf(stderr, "clicklog_gen: cannot write the summary\n");
      return ps::kExitFailed;
    }
    std::fclose(summary);
  }
  std::fprintf(stderr, "clicklog_gen: wrote %lld lines to %s in %.1f s\n",
               static_cast<long long>(lines), out_path.c_str(),
               absl::ToDoubleSeconds(absl::Now() - start));
  return 0;
}
