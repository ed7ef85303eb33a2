// File: base/build_info.h
//
// What build a binary is: the commit it was built from (with "-dirty" for a
// tree with uncommitted changes, "unknown" outside a git checkout) and when
// that commit was first built here, stamped in by Bazel's workspace status
// (third_party/workspace_status.sh). Every binary answers --version with
// VersionLine(); shards also report it in ShardStats and as the
// ps_build_info metric. Thread-safe (constants).

#ifndef PS_BASE_BUILD_INFO_H_
#define PS_BASE_BUILD_INFO_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace ps {

// The commit, e.g. "1a2b3c4d5e6f".
absl::string_view BuildCommit();

// When the build was stamped, RFC 3339 in UTC ("unknown" if Bazel gave no
// time).
absl::string_view BuildTime();

// "PROGRAM COMMIT (built TIME)".
std::string VersionLine(absl::string_view program);

// Makes --version print VersionLine(program) and exit 0, and --help list
// the flags of `program`'s main file (PROGRAM_main.cc) and of the files
// named in `flag_files` (paths from the workspace root, such as
// "worker/trainer_flags.cc"), where a binary's flags live beside its main.
// Call before absl::ParseCommandLine.
void SetVersionFlag(absl::string_view program,
                    std::vector<std::string> flag_files = {});

}  // namespace ps

#endif  // PS_BASE_BUILD_INFO_H_
