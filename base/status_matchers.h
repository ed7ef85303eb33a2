// File: base/status_matchers.h
//
// GoogleTest matchers for absl::Status and absl::StatusOr<T> (Debian's Abseil
// 20220623 ships none). Match the exact code, never just "not OK":
//
//   EXPECT_THAT(table.Push(keys, grads),
//   StatusIs(absl::StatusCode::kInvalidArgument));
//   EXPECT_THAT(store.Open(path), IsOk());

#ifndef PS_BASE_STATUS_MATCHERS_H_
#define PS_BASE_STATUS_MATCHERS_H_

#include <ostream>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"

namespace ps {
namespace internal {

inline const absl::Status& GetStatus(const absl::Status& status) {
  return status;
}

template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

}  // namespace internal

MATCHER(IsOk, "is OK") {
  const absl::Status& status = internal::GetStatus(arg);
  if (!status.ok()) *result_listener << "status is " << status;
  return status.ok();
}

MATCHER_P(StatusIs, code, "has status code " + absl::StatusCodeToString(code)) {
  const absl::Status& status = internal::GetStatus(arg);
  *result_listener << "status is " << status;
  return status.code() == code;
}

// Whether `status` is INVALID_ARGUMENT whose message names `flag` (or says
// `flag`, any text): a bad command line, as the *_flags.cc parsers answer.
inline ::testing::AssertionResult IsUsageError(const absl::Status& status,
                                               absl::string_view flag) {
  if (status.code() == absl::StatusCode::kInvalidArgument &&
      status.message().find(flag) != absl::string_view::npos) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << status << " is not INVALID_ARGUMENT naming " << flag;
}

}  // namespace ps

// Asserts that `expr` (a Status or StatusOr) is OK, printing it otherwise.
#define ASSERT_OK(expr) ASSERT_THAT(expr, ::ps::IsOk())
#define EXPECT_OK(expr) EXPECT_THAT(expr, ::ps::IsOk())

#endif  // PS_BASE_STATUS_MATCHERS_H_
