// Fuzz target: one line of a click log through the parser, in Criteo's
// layout and in one with a multi field and a cross. A line that parses must
// give a label of 0 or 1, finite non-negative dense features, and a slot
// structure that covers its keys.

#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "absl/strings/string_view.h"
#include "model/input/line_parser.h"

namespace {

void Check(absl::string_view line, const ps::model::InputLayout& layout) {
  ps::model::Example example;
  const absl::Status parsed = ps::model::ParseLine(line, layout, &example);
  if (parsed.ok()) {
    if (example.label != 0.0f && example.label != 1.0f) std::abort();
    if (static_cast<int>(example.dense.size()) != layout.dense_features())
      std::abort();
    for (double value : example.dense) {
      if (!std::isfinite(value)) std::abort();
    }
    if (example.slots() != layout.slots()) std::abort();
    uint32_t previous = 0;
    for (uint32_t end : example.slot_end) {
      if (end <= previous) std::abort();  // every slot holds a key
      previous = end;
    }
    if (previous != example.keys.size()) std::abort();
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
