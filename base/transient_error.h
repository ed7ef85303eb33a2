// File: base/transient_error.h
//
// Errors that go away on their own, such as a shard's full disk that an
// operator frees: the shard keeps its canonical code (RESOURCE_EXHAUSTED)
// and marks the status with a payload, its gRPC edge sends the mark as
// trailing metadata, and clients retry such calls with backoff as they
// retry UNAVAILABLE ones. Pure functions; thread-safe.

#ifndef PS_BASE_TRANSIENT_ERROR_H_
#define PS_BASE_TRANSIENT_ERROR_H_

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/string_view.h"

namespace ps {

// The payload's type URL on an absl::Status.
inline constexpr char kTransientPayload[] = "ps.transient";
// The trailing metadata key ("1") on a gRPC reply.
inline constexpr char kTransientMetadata[] = "ps-transient";

// `status` marked transient (OK stays OK).
inline absl::Status MarkTransient(absl::Status status) {
  if (!status.ok()) status.SetPayload(kTransientPayload, absl::Cord("1"));
  return status;
}

inline bool IsTransient(const absl::Status& status) {
  return status.GetPayload(kTransientPayload).has_value();
}

// `status` with `message` instead of its own, keeping code and payloads.
inline absl::Status WithMessage(const absl::Status& status,
                                absl::string_view message) {
  absl::Status result(status.code(), message);
  status.ForEachPayload(
      [&result](absl::string_view type_url, const absl::Cord& payload) {
        result.SetPayload(type_url, payload);
      });
  return result;
}

}  // namespace ps

#endif  // PS_BASE_TRANSIENT_ERROR_H_
