// File: base/exit_codes.h
//
// The exit codes of every binary, with sysexits.h's meanings, so that an
// orchestrator (or a script) can tell a mistake in the command from a
// cluster that is not there and from a worker stopped before its end:
//
//   0   done
//   64  bad flags or input layout (EX_USAGE): fix the command, do not retry
//   69  a shard unreachable past --retry_for_s (EX_UNAVAILABLE): retry later
//   70  anything else (EX_SOFTWARE)
//   75  ps_worker stopped by SIGTERM or SIGINT before its input ended, every
//       step whole on every shard (EX_TEMPFAIL): restart it to go on. A
//       drain that outlasts --drain_seconds, or a second signal, exits 70
//       (a step may be on some shards only), or 0 once training was done.
//
// Abseil's --help exits 1, its own choice; --version exits 0.
//
// Linking :exit_codes also makes Abseil's flag errors (an unknown flag, a
// value that does not parse) exit 64 instead of 1.

#ifndef PS_BASE_EXIT_CODES_H_
#define PS_BASE_EXIT_CODES_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace ps {

inline constexpr int kExitDone = 0;
inline constexpr int kExitUsage = 64;
inline constexpr int kExitUnavailable = 69;
inline constexpr int kExitFailed = 70;
inline constexpr int kExitDrained = 75;

// The exit code for a run that ended with `status`: 0 for OK, 69 for
// UNAVAILABLE or DEADLINE_EXCEEDED (what a shard that stays unreachable
// leaves once retries give up), 70 otherwise.
int ExitCodeFor(const absl::Status& status);

// What a main returns when it cannot go on, having printed "PROGRAM: WHY"
// on stderr: kExitUsage for a bad command line (`message`), ExitCodeFor()
// for a failure (`status`, printed with its code).
int FailUsage(absl::string_view program, absl::string_view message);
int FailWith(absl::string_view program, const absl::Status& status);
// FailUsage() for INVALID_ARGUMENT (what the *_flags.h parsers return for a
// bad flag or layout), FailWith() for anything else.
int FailFor(absl::string_view program, const absl::Status& status);

}  // namespace ps

#endif  // PS_BASE_EXIT_CODES_H_
