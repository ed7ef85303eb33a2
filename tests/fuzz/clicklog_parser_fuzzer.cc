// Fuzz target: one line of a click log through the parser. A line that
// parses must give a label of 0 or 1 and finite dense features.

#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "absl/strings/string_view.h"
#include "worker/criteo_parser.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ps::worker::Example example;
  const absl::Status parsed = ps::worker::ParseCriteoLine(
      absl::string_view(reinterpret_cast<const char*>(data), size), &example);
  if (parsed.ok()) {
    if (example.label != 0.0f && example.label != 1.0f) std::abort();
    for (float value : example.dense) {
      if (!std::isfinite(value) || value < 0.0f) std::abort();
    }
  } else if (parsed.code() != absl::StatusCode::kInvalidArgument) {
    std::abort();
  }
  return 0;
}
