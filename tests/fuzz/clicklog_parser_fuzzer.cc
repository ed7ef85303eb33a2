// Fuzz target: one line of a click log through the parser, in Criteo's
// layout and in one with a multi field and a cross. A line that parses must
// give a label of 0 or 1, finite non-negative dense features, and a slot
// structure that covers its keys.

#include <cstdint>
#include <cstdlib>

#include "absl/strings/string_view.h"
#include "model/input/line_parser.h"
#include "tests/fuzz/example_checks.h"

namespace {

void Check(absl::string_view line, const ps::model::InputLayout& layout) {
  ps::model::Example example;
  const absl::Status parsed = ps::model::ParseLine(line, layout, &example);
  if (parsed.ok()) {
    ps::fuzz::CheckParsedExample(example, layout);
  } else if (parsed.code() != absl::StatusCode::kInvalidArgument) {
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ps::model::InputLayout criteo = ps::model::InputLayout::Criteo();
  static const ps::model::InputLayout mixed = *ps::model::MakeInputLayout(
      "tsv", false, "skip,multi,label,dense*2,cat", "|", "mean", "0:1");
  const absl::string_view line(reinterpret_cast<const char*>(data), size);
  Check(line, criteo);
  Check(line, mixed);
  return 0;
}
