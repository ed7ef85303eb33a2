#include "base/exit_codes.h"

#include <cstdio>
#include <cstdlib>

#include "absl/flags/usage_config.h"
#include "absl/strings/string_view.h"

namespace ps {

int ExitCodeFor(const absl::Status& status) {
  if (status.ok()) return kExitDone;
  if (absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status))
    return kExitUnavailable;
  return kExitFailed;
}

int FailUsage(absl::string_view program, absl::string_view message) {
  std::fprintf(stderr, "%.*s: %.*s\n", static_cast<int>(program.size()),
               program.data(), static_cast<int>(message.size()),
               message.data());
  return kExitUsage;
}

int FailWith(absl::string_view program, const absl::Status& status) {
  std::fprintf(stderr, "%.*s: %s\n", static_cast<int>(program.size()),
               program.data(), status.ToString().c_str());
  return ExitCodeFor(status);
}

int FailFor(absl::string_view program, const absl::Status& status) {
  if (absl::IsInvalidArgument(status)) {
    return FailUsage(program, status.message());
  }
  return FailWith(program, status);
}

}  // namespace ps

// Abseil calls this (a weak symbol of its own otherwise) for a fatal flag
// error, having printed it, before it exits with 1: exit with 64 instead.
extern "C" void ABSL_INTERNAL_C_SYMBOL(AbslInternalReportFatalUsageError)(
    absl::string_view) {
  std::fflush(stderr);
  std::_Exit(ps::kExitUsage);
}
