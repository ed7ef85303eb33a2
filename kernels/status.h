// File: kernels/status.h
//
// The kernels' own small status (kernels/ builds with plain nvcc and no
// Abseil, so it cannot use absl::Status). worker/ converts it to absl::Status
// in one function. A CUTLASS-style code plus a message that says which call
// failed, where.

#ifndef PS_KERNELS_STATUS_H_
#define PS_KERNELS_STATUS_H_

#include <string>
#include <utility>

namespace ps::kernels {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,
  // No device, or the device is not usable.
  kUnavailable,
  kCudaError,
  kCublasError,
  kOutOfMemory,
};

class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message)
      : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

}  // namespace ps::kernels

// Returns from the enclosing function if `expr` (a kernels::Status) fails.
#define KERNELS_RETURN_IF_ERROR(expr)                  \
  do {                                                 \
    ::ps::kernels::Status kernels_status_ = (expr);    \
    if (!kernels_status_.ok()) return kernels_status_; \
  } while (false)

#endif  // PS_KERNELS_STATUS_H_
