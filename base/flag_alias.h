// File: base/flag_alias.h
//
// A renamed flag keeps its old name working for a while. The old name is
// defined beside the new one, its help "Deprecated: use --NEW.", and the
// code that parses flags reads both with FlagOrAlias(), which prints a
// deprecation line when the old name was given. Only for `main`s and
// their *_flags.cc.

#ifndef PS_BASE_FLAG_ALIAS_H_
#define PS_BASE_FLAG_ALIAS_H_

#include <cstdio>
#include <string>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace ps {

// `flag`'s value, or an old name's when that one was set off its default
// (a line on stderr says it is deprecated). INVALID_ARGUMENT when two of
// the names were. A flag renamed twice gives both of its old names.
// (Abseil does not tell a flag given its default from one not given.)
template <typename T, typename... OlderNames>
absl::StatusOr<T> FlagOrAlias(const absl::Flag<T>& flag,
                              const absl::Flag<T>& old_name,
                              const OlderNames&... older_names) {
  const absl::Flag<T>* names[] = {&flag, &old_name, &older_names...};
  const absl::Flag<T>* given = nullptr;
  for (const absl::Flag<T>* name : names) {
    const absl::CommandLineFlag& handle = absl::GetFlagReflectionHandle(*name);
    if (handle.CurrentValue() == handle.DefaultValue()) continue;
    if (given != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("give --", absl::GetFlagReflectionHandle(flag).Name(),
                       " or one of its old names, not both --",
                       absl::GetFlagReflectionHandle(*given).Name(), " and --",
                       handle.Name()));
    }
    given = name;
  }
  if (given == nullptr) return absl::GetFlag(flag);
  if (given != &flag) {
    std::fprintf(stderr, "--%s is deprecated: use --%s\n",
                 absl::GetFlagReflectionHandle(*given).Name().data(),
                 absl::GetFlagReflectionHandle(flag).Name().data());
  }
  return absl::GetFlag(*given);
}

}  // namespace ps

#endif  // PS_BASE_FLAG_ALIAS_H_
