// File: base/status_macros.h
//
// RETURN_IF_ERROR and ASSIGN_OR_RETURN with the meaning Abseil gives them in
// later releases (Debian's Abseil 20220623 has neither), so that an upgrade is
// a rename. Both return early from the enclosing function on a non-OK status.
//
//   RETURN_IF_ERROR(store->Flush());
//   ASSIGN_OR_RETURN(std::unique_ptr<Table> table, Table::Open(options));

#ifndef PS_BASE_STATUS_MACROS_H_
#define PS_BASE_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define PS_STATUS_CONCAT_INNER_(a, b) a##b
#define PS_STATUS_CONCAT_(a, b) PS_STATUS_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status) and returns it if it is not OK.
#define RETURN_IF_ERROR(expr)                           \
  do {                                                  \
    ::absl::Status ps_status_return_if_error_ = (expr); \
    if (!ps_status_return_if_error_.ok()) {             \
      return ps_status_return_if_error_;                \
    }                                                   \
  } while (false)

// Evaluates `rexpr` (an absl::StatusOr<T>); returns its status if not OK,
// otherwise moves its value into `lhs`, which may be a declaration.
#define ASSIGN_OR_RETURN(lhs, rexpr)                                        \
  PS_ASSIGN_OR_RETURN_IMPL_(PS_STATUS_CONCAT_(ps_statusor_, __LINE__), lhs, \
                            rexpr)

#define PS_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                              \
  if (!statusor.ok()) {                                 \
    return std::move(statusor).status();                \
  }                                                     \
  lhs = std::move(statusor).value()

#endif  // PS_BASE_STATUS_MACROS_H_
