#include "net/grpc_server_metrics.h"

#include <algorithm>
#include <tuple>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"

namespace ps {

std::pair<std::string, std::string> GrpcServiceAndMethod(
    const std::string& path) {
  const size_t slash = path.rfind('/');
  if (path.size() < 4 || path[0] != '/' || slash == 0 ||
      slash + 1 == path.size()) {
    return {"unknown", path};
  }
  return {path.substr(1, slash - 1), path.substr(slash + 1)};
}

std::string GrpcMethodType(const std::string& path) {
  const auto [service, method] = GrpcServiceAndMethod(path);
  const google::protobuf::MethodDescriptor* descriptor =
      google::protobuf::DescriptorPool::generated_pool()->FindMethodByName(
          absl::StrCat(service, ".", method));
  if (descriptor != nullptr) {
    if (descriptor->client_streaming()) {
      return descriptor->server_streaming() ? "bidi_stream" : "client_stream";
    }
    return descriptor->server_streaming() ? "server_stream" : "unary";
  }
  // gRPC's health service is compiled without protobuf's descriptors.
  if (path == "/grpc.health.v1.Health/Watch") return "server_stream";
  return "unary";
}

std::vector<double> GrpcServerMetrics::LatencyBoundsSeconds() {
  std::vector<double> bounds;
  for (double bound = 1e-4; bound < 8000; bound *= 2) bounds.push_back(bound);
  return bounds;
}

GrpcServerMetrics::GrpcServerMetrics(
    prometheus::Registry* registry,
    const std::map<std::string, std::string>& constant_labels,
    const std::vector<std::string>& method_paths)
    : methods_(method_paths.size()) {
  handled_ = &prometheus::BuildCounter()
                  .Name("grpc_server_handled_total")
                  .Help("gRPC calls answered, by service, method and code.")
                  .Labels(constant_labels)
                  .Register(*registry);
  handling_seconds_ =
      &prometheus::BuildHistogram()
           .Name("grpc_server_handling_seconds")
           .Help(
               "Time from a call's start to its status, by service and "
               "method (ps.Admin's SnapshotShard and ExportShard: "
               "checkpoints and exports).")
           .Labels(constant_labels)
           .Register(*registry);
  const std::vector<double> bounds = LatencyBoundsSeconds();
  for (size_t i = 0; i < method_paths.size(); ++i) {
    Method& method = methods_[i];
    std::tie(method.service, method.name) =
        GrpcServiceAndMethod(method_paths[i]);
    method.type = GrpcMethodType(method_paths[i]);
    method.latency = &handling_seconds_->Add({{"grpc_service", method.service},
                                              {"grpc_method", method.name},
                                              {"grpc_type", method.type}},
                                             bounds);
    for (auto& counter : method.handled_by_code) counter.store(nullptr);
  }
}

void GrpcServerMetrics::Observe(int method_index, grpc::StatusCode code,
                                absl::Duration latency) {
  Method& method = methods_[method_index];
  const size_t slot = std::min<size_t>(static_cast<size_t>(code),
                                       method.handled_by_code.size() - 1);
  prometheus::Counter* counter = method.handled_by_code[slot].load();
  if (counter == nullptr) {
    // Family::Add returns the series a racing thread may have added.
    const bool canonical = slot + 1 < method.handled_by_code.size();
    counter = &handled_->Add(
        {{"grpc_service", method.service},
         {"grpc_method", method.name},
         {"grpc_type", method.type},
         {"grpc_code", canonical ? absl::StatusCodeToString(
                                       static_cast<absl::StatusCode>(code))
                                 : std::string("OTHER")}});
    method.handled_by_code[slot].store(counter);
  }
  counter->Increment();
  method.latency->Observe(absl::ToDoubleSeconds(latency));
}

}  // namespace ps
