#include "server/received_push.h"

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/wire_format.h"
#include "glog/logging.h"
#include "grpcpp/support/slice.h"

namespace ps::server {

absl::StatusOr<ReceivedPush> ReceivedPush::Read(const grpc::ByteBuffer& wire) {
  constexpr int kBulk[] = {PushRequest::kKeysFieldNumber,
                           PushRequest::kGradientsFieldNumber};
  ReceivedPush push;
  net::FieldBytes bulk[2];
  std::string rest;
  if (absl::Status split =
          net::SplitMessage(wire, kBulk, absl::MakeSpan(bulk), &rest);
      !split.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a push request that is not a ps.PushRequest: ", split.message()));
  }
  if (!push.fields_.ParseFromString(rest)) {
    return absl::InvalidArgumentError(
        "a push request that is not a ps.PushRequest");
  }
  push.wire_ = wire;
  push.keys_ = bulk[0];
  push.gradients_ = bulk[1];
  return push;
}

ReceivedPush ReceivedPush::FromRequest(const PushRequest& request) {
  grpc::Slice slice(request.SerializeAsString());
  absl::StatusOr<ReceivedPush> push = Read(grpc::ByteBuffer(&slice, 1));
  CHECK(push.ok()) << "a serialized PushRequest that does not read back: "
                   << push.status();
  return *std::move(push);
}

void ReceivedPush::UnpackKeys(std::vector<uint64_t>* keys) const {
  keys->resize(keys_.size / sizeof(uint64_t));
  char* out = reinterpret_cast<char*>(keys->data());
  const absl::Status read =
      net::ForEachRun(wire_, keys_.offset, keys->size(), sizeof(uint64_t),
                      [&](size_t first, size_t count, const char* bytes) {
                        std::memcpy(out + first * sizeof(uint64_t), bytes,
                                    count * sizeof(uint64_t));
                      });
  // Read() found them whole in the message.
  CHECK(read.ok()) << read;
}

void ReceivedPush::DecodeGradients(WireFormat format, float scale,
                                   absl::Span<float> gradients) const {
  const size_t value_bytes = WireValueBytes(format);
  CHECK_EQ(gradients.size() * value_bytes, gradients_.size);
  const absl::Status read = net::ForEachRun(
      wire_, gradients_.offset, gradients.size(), value_bytes,
      [&](size_t first, size_t count, const char* bytes) {
        DecodeWireValues(format, bytes, gradients.subspan(first, count), scale);
      });
  CHECK(read.ok()) << read;
}

}  // namespace ps::server
