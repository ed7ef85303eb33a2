// File: net/grpc_server_metrics.h
//
// GrpcServerMetrics counts the calls a gRPC server answers, under the names
// and labels stock gRPC dashboards and alerts read:
//
//   grpc_server_handled_total{grpc_service, grpc_method, grpc_type,
//                             grpc_code}
//   grpc_server_handling_seconds{grpc_service, grpc_method, grpc_type}
//                                                      (histogram)
//
// grpc_type is unary, client_stream, server_stream or bidi_stream;
// grpc_code is the canonical code's name as gRPC's spec and its C++ and
// Java libraries write it ("OK", "UNAVAILABLE"; Go's interceptors write
// "Unavailable": a panel that filters on a failed code by name needs the
// case changed, one on grpc_code!="OK" does not). Both
// ps_server and ps_serve count their calls here, so one dashboard query
// reads either. The methods are fixed when it is made (a server knows the
// services it serves); a call only increments series made before or on a
// code's first call, with no lock.
//
// Thread-safe. The registry must outlive it.

#ifndef PS_NET_GRPC_SERVER_METRICS_H_
#define PS_NET_GRPC_SERVER_METRICS_H_

#include <array>
#include <atomic>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "grpcpp/support/status.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace ps {

// The service and method of a gRPC path: "/ps.Admin/GetRow" is
// {"ps.Admin", "GetRow"}; anything else (e.g. "unknown") is {"unknown",
// path}.
std::pair<std::string, std::string> GrpcServiceAndMethod(
    const std::string& path);

// The kind of method a path names, from its protobuf descriptor (unary for
// one not known).
std::string GrpcMethodType(const std::string& path);

class GrpcServerMetrics {
 public:
  // Registers both families in `registry`, each series labelled with
  // `constant_labels` too (a shard's index, or none). `method_paths` are
  // the paths Observe()'s `method` indexes.
  GrpcServerMetrics(prometheus::Registry* registry,
                    const std::map<std::string, std::string>& constant_labels,
                    const std::vector<std::string>& method_paths);

  GrpcServerMetrics(const GrpcServerMetrics&) = delete;
  GrpcServerMetrics& operator=(const GrpcServerMetrics&) = delete;

  // Counts one answered call of method_paths[method].
  void Observe(int method, grpc::StatusCode code, absl::Duration latency);

  // Upper bounds of the latency buckets, in seconds: from 100 us doubling
  // to about 1.9 h (a pull takes milliseconds, a snapshot minutes).
  static std::vector<double> LatencyBoundsSeconds();

 private:
  struct Method {
    std::string service;
    std::string name;
    std::string type;
    prometheus::Histogram* latency = nullptr;
    // By gRPC code (the last slot for codes past UNAUTHENTICATED), made on
    // a code's first call.
    std::array<std::atomic<prometheus::Counter*>, 18> handled_by_code;
  };

  prometheus::Family<prometheus::Counter>* handled_ = nullptr;
  prometheus::Family<prometheus::Histogram>* handling_seconds_ = nullptr;
  std::vector<Method> methods_;
};

}  // namespace ps

#endif  // PS_NET_GRPC_SERVER_METRICS_H_
