#include "net/message_bytes.h"

#include <algorithm>
#include <climits>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/wire_format_lite.h"
#include "grpcpp/support/proto_buffer_reader.h"

namespace ps::net {
namespace {

using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;
using google::protobuf::io::CodedOutputStream;
using google::protobuf::io::StringOutputStream;

absl::Status NotAMessage(absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("not a protobuf message: ", what));
}

// How deep protobuf's parser lets groups nest (its default recursion
// limit).
constexpr int kMaxGroupDepth = 100;

// A length-delimited field's length, as protobuf's parser takes one: under
// 2 GiB, in at most 5 bytes.
bool ReadLength(CodedInputStream& in, uint32_t* length) {
  uint64_t value = 0;
  const int before = in.CurrentPosition();
  if (!in.ReadVarint64(&value) || value > INT_MAX ||
      in.CurrentPosition() - before > 5) {
    return false;
  }
  *length = static_cast<uint32_t>(value);
  return true;
}

// A tag as protobuf's parser takes one: in at most 5 bytes (CodedInputStream
// takes 10, dropping the high bits); false for one spelled longer. *tag is
// 0 at the end of the input or for a tag of 0.
bool ReadTag(CodedInputStream& in, uint32_t* tag) {
  const int before = in.CurrentPosition();
  *tag = in.ReadTag();
  return in.CurrentPosition() - before <= 5;
}

// Copies the field whose `tag` was just read from `in` to `out` (tag and
// value), as protobuf's parser reads an unknown field; false where it
// would refuse it. `depth`: the groups it lies in.
bool CopyField(CodedInputStream& in, uint32_t tag, CodedOutputStream& out,
               int depth) {
  if (WireFormatLite::GetTagFieldNumber(tag) == 0) return false;
  switch (WireFormatLite::GetTagWireType(tag)) {
    case WireFormatLite::WIRETYPE_VARINT: {
      uint64_t value = 0;
      if (!in.ReadVarint64(&value)) return false;
      out.WriteTag(tag);
      out.WriteVarint64(value);
      return true;
    }
    case WireFormatLite::WIRETYPE_FIXED64: {
      uint64_t value = 0;
      if (!in.ReadLittleEndian64(&value)) return false;
      out.WriteTag(tag);
      out.WriteLittleEndian64(value);
      return true;
    }
    case WireFormatLite::WIRETYPE_FIXED32: {
      uint32_t value = 0;
      if (!in.ReadLittleEndian32(&value)) return false;
      out.WriteTag(tag);
      out.WriteLittleEndian32(value);
      return true;
    }
    case WireFormatLite::WIRETYPE_LENGTH_DELIMITED: {
      uint32_t length = 0;
      std::string value;
      if (!ReadLength(in, &length) ||
          !in.ReadString(&value, static_cast<int>(length))) {
        return false;
      }
      out.WriteTag(tag);
      out.WriteVarint32(length);
      out.WriteString(value);
      return true;
    }
    case WireFormatLite::WIRETYPE_START_GROUP: {
      if (depth >= kMaxGroupDepth) return false;
      out.WriteTag(tag);
      while (true) {
        uint32_t inner = 0;
        if (!ReadTag(in, &inner) || inner == 0) return false;
        if (WireFormatLite::GetTagWireType(inner) ==
            WireFormatLite::WIRETYPE_END_GROUP) {
          // Ends only the group it opened.
          if (WireFormatLite::GetTagFieldNumber(inner) !=
              WireFormatLite::GetTagFieldNumber(tag)) {
            return false;
          }
          out.WriteTag(inner);
          return true;
        }
        if (!CopyField(in, inner, out, depth + 1)) return false;
      }
    }
    default:  // an END_GROUP outside its group; wire types 6 and 7
      return false;
  }
}

}  // namespace

absl::Status SplitMessage(const grpc::ByteBuffer& message,
                          absl::Span<const int> bulk_fields,
                          absl::Span<FieldBytes> bulk, std::string* rest) {
  std::fill(bulk.begin(), bulk.end(), FieldBytes());
  // The reader shares the message's slices.
  grpc::ByteBuffer shared(message);
  grpc::ProtoBufferReader reader(&shared);
  CodedInputStream in(&reader);
  // A message is parsed whatever its size (gRPC has bounded it already).
  in.SetTotalBytesLimit(INT_MAX);
  StringOutputStream rest_stream(rest);
  CodedOutputStream out(&rest_stream);
  while (true) {
    uint32_t tag = 0;
    if (!ReadTag(in, &tag))
      return NotAMessage("a tag spelled in more than 5 bytes");
    if (tag == 0) break;
    const int field = WireFormatLite::GetTagFieldNumber(tag);
    const auto bulk_field =
        std::find(bulk_fields.begin(), bulk_fields.end(), field);
    if (bulk_field == bulk_fields.end() ||
        WireFormatLite::GetTagWireType(tag) !=
            WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      // To `rest`, tag and value.
      if (!CopyField(in, tag, out, /*depth=*/0))
        return NotAMessage(absl::StrCat("a bad field ", field));
      continue;
    }
    uint32_t length = 0;
    if (!ReadLength(in, &length))
      return NotAMessage(absl::StrCat("a bad length of field ", field));
    bulk[bulk_field - bulk_fields.begin()] = {
        static_cast<size_t>(in.CurrentPosition()), length};
    if (!in.Skip(static_cast<int>(length)))
      return NotAMessage(absl::StrCat("field ", field, " past its end"));
  }
  if (!in.ConsumedEntireMessage()) return NotAMessage("a bad tag");
  return absl::OkStatus();
}

absl::Status ForEachRun(
    const grpc::ByteBuffer& message, size_t offset, size_t items,
    size_t item_bytes,
    absl::FunctionRef<void(size_t first, size_t count, const char* bytes)>
        on_run) {
  grpc::ByteBuffer shared(message);
  grpc::ProtoBufferReader reader(&shared);
  CodedInputStream in(&reader);
  in.SetTotalBytesLimit(INT_MAX);
  const auto ended = [&](size_t item) {
    return absl::OutOfRangeError(
        absl::StrCat("the message ends in item ", item, " of ", items, " (",
                     item_bytes, " bytes each, from byte ", offset, ")"));
  };
  if (offset > INT_MAX || item_bytes == 0 || item_bytes > INT_MAX ||
      !in.Skip(static_cast<int>(offset))) {
    return items == 0 ? absl::OkStatus() : ended(0);
  }
  std::string straddling;
  size_t item = 0;
  while (item < items) {
    const void* data = nullptr;
    int size = 0;
    const size_t whole =
        in.GetDirectBufferPointer(&data, &size)
            ? std::min(items - item, static_cast<size_t>(size) / item_bytes)
            : 0;
    if (whole > 0) {
      on_run(item, whole, static_cast<const char*>(data));
      in.Skip(static_cast<int>(whole * item_bytes));  // within the buffer
      item += whole;
      continue;
    }
    straddling.resize(item_bytes);
    if (!in.ReadRaw(straddling.data(), static_cast<int>(item_bytes)))
      return ended(item);
    on_run(item, 1, straddling.data());
    ++item;
  }
  return absl::OkStatus();
}

}  // namespace ps::net
