#include "server/bearer_token.h"

#include "absl/strings/str_cat.h"

namespace ps::server {

absl::Status CheckBearerToken(const grpc::CallbackServerContext& context,
                              const std::string& expected,
                              absl::string_view what) {
  if (expected.empty()) return absl::OkStatus();
  const auto& metadata = context.client_metadata();
  auto found = metadata.find("authorization");
  if (found == metadata.end()) {
    return absl::UnauthenticatedError(absl::StrCat(
        "this call needs ", what, ": send 'authorization: Bearer <token>'"));
  }
  const std::string bearer = "Bearer " + expected;
  const grpc::string_ref& given = found->second;
  // Constant time over the expected length: no early exit on a mismatch.
  unsigned char difference = given.size() == bearer.size() ? 0 : 1;
  for (size_t i = 0; i < bearer.size(); ++i) {
    const char c = i < given.size() ? given.data()[i] : 0;
    difference |= static_cast<unsigned char>(c ^ bearer[i]);
  }
  if (difference != 0)
    return absl::UnauthenticatedError(absl::StrCat("wrong token: ", what));
  return absl::OkStatus();
}

}  // namespace ps::server
