#include "client/pull_reply.h"

#include "absl/strings/str_cat.h"
#include "net/message_bytes.h"

namespace ps::client {

absl::StatusOr<PullReplyFields> ReadPullReply(const grpc::ByteBuffer& reply) {
  constexpr int kValues[] = {PullResponse::kValuesFieldNumber};
  net::FieldBytes values;
  std::string rest;
  PullResponse parsed;
  if (absl::Status split =
          net::SplitMessage(reply, kValues, absl::MakeSpan(&values, 1), &rest);
      !split.ok() || !parsed.ParseFromString(rest)) {
    return absl::InternalError(
        absl::StrCat("a pull's reply that is not a ps.PullResponse",
                     split.ok() ? "" : absl::StrCat(": ", split.message())));
  }
  PullReplyFields fields;
  fields.dim = parsed.dim();
  fields.format = parsed.format();
  fields.state_floats = parsed.state_floats();
  fields.has_optimizer = parsed.has_optimizer();
  fields.optimizer = parsed.optimizer();
  fields.learning_rate_multiplier = parsed.learning_rate_multiplier();
  fields.values_offset = values.offset;
  fields.values_bytes = values.size;
  return fields;
}

absl::Status ForEachPulledRow(
    const grpc::ByteBuffer& reply, size_t offset, size_t rows, size_t row_bytes,
    absl::FunctionRef<void(size_t first, size_t count, const char* bytes)>
        on_rows) {
  const absl::Status read =
      net::ForEachRun(reply, offset, rows, row_bytes, on_rows);
  if (read.ok()) return read;
  return absl::InternalError(
      absl::StrCat("a pull's reply whose rows are cut: ", read.message()));
}

}  // namespace ps::client
