// The transport ceiling for serving_bench: a ParameterServer that does no
// work. Pull answers rows of zeros of the declared dim in a PullResponse
// (serialized by protobuf, where ps_server writes the reply's bytes itself),
// Push checks the lengths and answers the count.
// Same gRPC API (callback), build and channel settings as ps_server, so
// ps_server's rate over this one's is the share of what gRPC on this machine
// allows that the store keeps.
//
//   grpc_ceiling_server --listen=127.0.0.1:0

#include <cstdio>
#include <limits>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/synchronization/mutex.h"
#include "base/lock_mode.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "proto/ps.grpc.pb.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:0", "Address to listen on.");

namespace {

class CeilingService final : public ps::ParameterServer::CallbackService {
 public:
  grpc::ServerUnaryReactor* DeclareTable(
      grpc::CallbackServerContext* context,
      const ps::DeclareTableRequest* request,
      ps::DeclareTableResponse* response) override {
    absl::MutexLock lock(&mu_);
    response->set_created(
        dims_.emplace(request->table().name(), request->table().dim()).second);
    return Done(context, grpc::Status::OK);
  }

  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* context,
                                 const ps::PullRequest* request,
                                 ps::PullResponse* response) override {
    const uint32_t dim = Dim(request->table());
    if (dim == 0) return Done(context, UnknownTable());
    const size_t keys = request->keys().size() / sizeof(uint64_t);
    std::string* values = response->mutable_values();
    values->assign(keys * dim * sizeof(float), '\0');
    response->set_dim(dim);
    return Done(context, grpc::Status::OK);
  }

  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* context,
                                 const ps::PushRequest* request,
                                 ps::PushResponse* response) override {
    const uint32_t dim = Dim(request->table());
    if (dim == 0) return Done(context, UnknownTable());
    const size_t keys = request->keys().size() / sizeof(uint64_t);
    if (request->gradients().size() != keys * dim * sizeof(float)) {
      return Done(context, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                        "wrong gradient length"));
    }
    response->set_rows_updated(static_cast<uint32_t>(keys));
    return Done(context, grpc::Status::OK);
  }

 private:
  static grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* context,
                                        const grpc::Status& status) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(status);
    return reactor;
  }
  static grpc::Status UnknownTable() {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown table");
  }
  uint32_t Dim(const std::string& table) {
    absl::MutexLock lock(&mu_);
    auto it = dims_.find(table);
    return it == dims_.end() ? 0 : it->second;
  }

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, uint32_t> dims_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

int main(int argc, char** argv) {
  ps::UseReleaseLocks();
  absl::ParseCommandLine(argc, argv);
  CeilingService service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(absl::GetFlag(FLAGS_listen),
                           grpc::InsecureServerCredentials(), &port);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(std::numeric_limits<int>::max());
  builder.SetMaxSendMessageSize(std::numeric_limits<int>::max());
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::fprintf(stderr, "cannot listen on %s\n",
                 absl::GetFlag(FLAGS_listen).c_str());
    return 2;
  }
  const std::string listen = absl::GetFlag(FLAGS_listen);
  std::printf("grpc_ceiling_server listening on %s:%d\n",
              listen.substr(0, listen.rfind(':')).c_str(), port);
  std::fflush(stdout);
  server->Wait();  // until killed
  return 0;
}
