#include "server/call_stats.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/support/interceptor.h"

namespace ps::server {
namespace {

// Services whose methods are counted by name, besides every ps.* service.
constexpr const char* kOtherMethods[] = {
    "/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch",
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"};

// Times one call from its start to the status it sends.
class CallInterceptor : public grpc::experimental::Interceptor {
 public:
  CallInterceptor(CallStats* stats, const CallStats::Observer* observer,
                  int method)
      : stats_(stats),
        observer_(observer),
        method_(method),
        start_(absl::Now()) {}

  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::StatusCode code = methods->GetSendStatus().error_code();
      const absl::Duration latency = absl::Now() - start_;
      stats_->Observe(method_, code == grpc::StatusCode::OK, latency);
      if (*observer_) (*observer_)(method_, code, latency);
    }
    methods->Proceed();
  }

 private:
  CallStats* const stats_;
  const CallStats::Observer* const observer_;
  const int method_;
  const absl::Time start_;
};

class CallInterceptorFactory
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  CallInterceptorFactory(CallStats* stats, CallStats::Observer observer)
      : stats_(stats), observer_(std::move(observer)) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new CallInterceptor(stats_, &observer_,
                               stats_->MethodIndex(info->method()));
  }

 private:
  CallStats* const stats_;
  const CallStats::Observer observer_;
};

}  // namespace

const std::vector<double>& CallStats::LatencyBoundsSeconds() {
  static const std::vector<double>* bounds = [] {
    auto* bounds = new std::vector<double>;
    for (int i = 0; i <= 120; ++i)
      bounds->push_back(1e-5 * std::pow(2.0, i / 4.0));
    return bounds;
  }();
  return *bounds;
}

CallStats::CallStats() {
  const google::protobuf::DescriptorPool* pool =
      google::protobuf::DescriptorPool::generated_pool();
  for (const char* service : {"ps.ParameterServer", "ps.Admin"}) {
    const google::protobuf::ServiceDescriptor* descriptor =
        pool->FindServiceByName(service);
    if (descriptor == nullptr) continue;
    for (int m = 0; m < descriptor->method_count(); ++m) {
      methods_.push_back(
          absl::StrCat("/", service, "/", descriptor->method(m)->name()));
    }
  }
  for (const char* other : kOtherMethods) methods_.push_back(other);
  for (size_t i = 0; i < methods_.size(); ++i)
    index_[methods_[i]] = static_cast<int>(i);
  methods_.push_back("unknown");
  counts_ = std::vector<Counts>(methods_.size());
  const size_t buckets = LatencyBoundsSeconds().size() + 1;
  for (Counts& counts : counts_) {
    counts.buckets.reset(new std::atomic<uint64_t>[buckets]);
    for (size_t b = 0; b < buckets; ++b) counts.buckets[b].store(0);
  }
}

int CallStats::MethodIndex(const char* path) const {
  if (path != nullptr) {
    auto found = index_.find(absl::string_view(path));
    if (found != index_.end()) return found->second;
  }
  return static_cast<int>(methods_.size() - 1);
}

void CallStats::Observe(int method, bool ok, absl::Duration latency) {
  Counts& counts = counts_[method];
  counts.calls.fetch_add(1, std::memory_order_relaxed);
  if (!ok) counts.errors.fetch_add(1, std::memory_order_relaxed);
  const std::vector<double>& bounds = LatencyBoundsSeconds();
  const double seconds = absl::ToDoubleSeconds(latency);
  const size_t bucket =
      std::lower_bound(bounds.begin(), bounds.end(), seconds) - bounds.begin();
  counts.buckets[bucket].fetch_add(1, std::memory_order_relaxed);
}

std::vector<CallStats::Method> CallStats::Snapshot() const {
  std::vector<Method> snapshot;
  const size_t buckets = LatencyBoundsSeconds().size() + 1;
  for (size_t i = 0; i < methods_.size(); ++i) {
    const Counts& counts = counts_[i];
    Method method;
    method.calls = counts.calls.load(std::memory_order_relaxed);
    if (method.calls == 0) continue;
    method.name = methods_[i];
    method.errors = counts.errors.load(std::memory_order_relaxed);
    for (size_t b = 0; b < buckets; ++b)
      method.latency_buckets.push_back(counts.buckets[b].load());
    snapshot.push_back(std::move(method));
  }
  return snapshot;
}

std::vector<
    std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
CallStats::Interceptors(Observer observer) {
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      creators;
  creators.push_back(
      std::make_unique<CallInterceptorFactory>(this, std::move(observer)));
  return creators;
}

}  // namespace ps::server
