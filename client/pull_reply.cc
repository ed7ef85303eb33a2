#include "client/pull_reply.h"

#include <algorithm>
#include <climits>
#include <string>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"
#include "grpcpp/support/proto_buffer_reader.h"

namespace ps::client {
namespace {

using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;

absl::Status NotAReply(absl::string_view what) {
  return absl::InternalError(
      absl::StrCat("a pull's reply that is not a ps.PullResponse: ", what));
}

}  // namespace

absl::StatusOr<PullReplyFields> ReadPullReply(const grpc::ByteBuffer& reply) {
  // The reader shares the reply's slices.
  grpc::ByteBuffer shared(reply);
  grpc::ProtoBufferReader reader(&shared);
  CodedInputStream in(&reader);
  PullReplyFields fields;
  // A length-delimited field's length: under 2 GiB, in at most 5 bytes.
  const auto read_length = [&in](uint32_t* length) {
    uint64_t value = 0;
    const int before = in.CurrentPosition();
    if (!in.ReadVarint64(&value) || value > INT_MAX ||
        in.CurrentPosition() - before > 5) {
      return false;
    }
    *length = static_cast<uint32_t>(value);
    return true;
  };
  while (const uint32_t tag = in.ReadTag()) {
    const int field = WireFormatLite::GetTagFieldNumber(tag);
    const WireFormatLite::WireType type = WireFormatLite::GetTagWireType(tag);
    if (field == 0) return NotAReply("field number 0");
    uint32_t varint = 0;
    if (type == WireFormatLite::WIRETYPE_VARINT &&
        (field == PullResponse::kDimFieldNumber ||
         field == PullResponse::kFormatFieldNumber ||
         field == PullResponse::kStateFloatsFieldNumber)) {
      if (!in.ReadVarint32(&varint)) return NotAReply("a cut varint");
      if (field == PullResponse::kDimFieldNumber) fields.dim = varint;
      if (field == PullResponse::kFormatFieldNumber)
        fields.format = static_cast<WireFormat>(varint);
      if (field == PullResponse::kStateFloatsFieldNumber)
        fields.state_floats = varint;
    } else if (type == WireFormatLite::WIRETYPE_LENGTH_DELIMITED &&
               field == PullResponse::kValuesFieldNumber) {
      if (!read_length(&varint)) return NotAReply("a bad length");
      fields.values_offset = static_cast<size_t>(in.CurrentPosition());
      fields.values_bytes = varint;
      if (!in.Skip(static_cast<int>(varint)))
        return NotAReply("values past its end");
    } else if (type == WireFormatLite::WIRETYPE_LENGTH_DELIMITED &&
               field == PullResponse::kOptimizerFieldNumber) {
      std::string optimizer;
      if (!read_length(&varint) ||
          !in.ReadString(&optimizer, static_cast<int>(varint)) ||
          !fields.optimizer.MergeFromString(optimizer)) {
        return NotAReply("a bad optimizer");
      }
      fields.has_optimizer = true;
    } else if (type == WireFormatLite::WIRETYPE_FIXED32 &&
               field == PullResponse::kLearningRateMultiplierFieldNumber) {
      uint32_t bits = 0;
      if (!in.ReadLittleEndian32(&bits)) return NotAReply("a cut float");
      fields.learning_rate_multiplier = WireFormatLite::DecodeFloat(bits);
    } else if (!WireFormatLite::SkipField(&in, tag)) {
      return NotAReply(absl::StrCat("a bad field ", field));
    }
  }
  if (!in.ConsumedEntireMessage()) return NotAReply("a bad tag");
  return fields;
}

absl::Status ForEachPulledRow(
    const grpc::ByteBuffer& reply, size_t offset, size_t rows, size_t row_bytes,
    absl::FunctionRef<void(size_t first, size_t count, const char* bytes)>
        on_rows) {
  grpc::ByteBuffer shared(reply);
  grpc::ProtoBufferReader reader(&shared);
  CodedInputStream in(&reader);
  const auto ended = [&](size_t row) {
    return absl::InternalError(
        absl::StrCat("a pull's reply ends in row ", row, " of ", rows, " (",
                     row_bytes, " bytes each, from byte ", offset, ")"));
  };
  if (offset > INT_MAX || row_bytes == 0 || row_bytes > INT_MAX ||
      !in.Skip(static_cast<int>(offset))) {
    return rows == 0 ? absl::OkStatus() : ended(0);
  }
  std::string straddling;
  size_t row = 0;
  while (row < rows) {
    const void* data = nullptr;
    int size = 0;
    const size_t whole =
        in.GetDirectBufferPointer(&data, &size)
            ? std::min(rows - row, static_cast<size_t>(size) / row_bytes)
            : 0;
    if (whole > 0) {
      on_rows(row, whole, static_cast<const char*>(data));
      in.Skip(static_cast<int>(whole * row_bytes));  // within the buffer
      row += whole;
      continue;
    }
    straddling.resize(row_bytes);
    if (!in.ReadRaw(straddling.data(), static_cast<int>(row_bytes)))
      return ended(row);
    on_rows(row, 1, straddling.data());
    ++row;
  }
  return absl::OkStatus();
}

}  // namespace ps::client
