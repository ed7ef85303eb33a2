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

// `flag`'s value, or `old_name`'s when that one was set off its default (a
// line on stderr says it is deprecated). INVALID_ARGUMENT when both were.
// (Abseil does not tell a flag given its default from one not given.)
template <typename T>
absl::StatusOr<T> FlagOrAlias(const absl::Flag<T>& flag,
                              const absl::Flag<T>& old_name) {
  const absl::CommandLineFlag& alias = absl::GetFlagReflectionHandle(old_name);
  if (alias.CurrentValue() == alias.DefaultValue()) return absl::GetFlag(flag);
  const absl::CommandLineFlag& current = absl::GetFlagReflectionHandle(flag);
  std::fprintf(stderr, "--%s is deprecated: use --%s\n", alias.Name().data(),
               current.Name().data());
  if (current.CurrentValue() != current.DefaultValue()) {
    return absl::InvalidArgumentError(absl::StrCat("give --", current.Name(),
                                                   " or its old name --",
                                                   alias.Name(), ", not both"));
  }
  return absl::GetFlag(old_name);
}

}  // namespace ps

#endif  // PS_BASE_FLAG_ALIAS_H_
