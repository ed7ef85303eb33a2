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

#include "absl/strings/string_view.h"

namespace ps {

// The commit, e.g. "1a2b3c4d5e6f".
absl::string_view BuildCommit();

// When the build was stamped, RFC 3339 in UTC ("unknown" if Bazel gave no
// time).
absl::string_view BuildTime();

// "PROGRAM COMMIT (built TIME)".
std::string VersionLine(absl::string_view program);

// Makes --version print VersionLine(program) and exit 0. Call before
// absl::ParseCommandLine.
void SetVersionFlag(absl::string_view program);

}  // namespace ps

#endif  // PS_BASE_BUILD_INFO_H_
