#include "base/build_info.h"

#include <string>
#include <vector>

#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

// Written by //base:build_info_stamp from Bazel's status files.
extern const char kPsBuildCommit[];
extern const char kPsBuildTime[];

namespace ps {

absl::string_view BuildCommit() { return kPsBuildCommit; }

absl::string_view BuildTime() { return kPsBuildTime; }

std::string VersionLine(absl::string_view program) {
  return absl::StrCat(program, " ", BuildCommit(), " (built ", BuildTime(),
                      ")");
}

void SetVersionFlag(absl::string_view program,
                    std::vector<std::string> flag_files) {
  absl::FlagsUsageConfig config;
  config.version_string = [line = VersionLine(program)] { return line + "\n"; };
  flag_files.push_back(absl::StrCat(program, "_main.cc"));
  // Whole path components only: "worker/x.cc" is not "otherworker/x.cc".
  for (std::string& file : flag_files) file = absl::StrCat("/", file);
  config.contains_help_flags = [flag_files](absl::string_view path) {
    for (const std::string& file : flag_files) {
      if (absl::EndsWith(absl::StrCat("/", path), file)) return true;
    }
    return false;
  };
  absl::SetFlagsUsageConfig(config);
}

}  // namespace ps
