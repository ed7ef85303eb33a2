// File: model/kernel_status.h
//
// The one place a kernels::Status (kernels/ has no Abseil) becomes an
// absl::Status.

#ifndef PS_MODEL_KERNEL_STATUS_H_
#define PS_MODEL_KERNEL_STATUS_H_

#include "absl/status/status.h"
#include "kernels/status.h"

namespace ps::model {

absl::Status FromKernels(const kernels::Status& status);

}  // namespace ps::model

// Returns FromKernels(expr) from the enclosing function if it fails.
#define MODEL_RETURN_IF_KERNEL_ERROR(expr)                   \
  do {                                                       \
    ::ps::kernels::Status model_kernel_status_ = (expr);     \
    if (!model_kernel_status_.ok())                          \
      return ::ps::model::FromKernels(model_kernel_status_); \
  } while (false)

#endif  // PS_MODEL_KERNEL_STATUS_H_
