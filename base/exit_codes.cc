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

}  // namespace ps

// Abseil calls this (a weak symbol of its own otherwise) for a fatal flag
// error, having printed it, before it exits with 1: exit with 64 instead.
extern "C" void ABSL_INTERNAL_C_SYMBOL(AbslInternalReportFatalUsageError)(
    absl::string_view) {
  std::fflush(stderr);
  std::_Exit(ps::kExitUsage);
}
