#include "net/metrics_endpoint.h"

#include <dlfcn.h>
#include <pthread.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <exception>

#include "CivetServer.h"
#include "absl/strings/str_cat.h"

// civetweb (Debian's 1.15) starts its threads with a fixed 100 KiB stack.
// glibc places a thread's static TLS on its stack, and in a process whose
// libraries hold more than that (ps_worker: cuBLASLt, glog and cuBLAS,
// about 140 KiB) pthread_create fails, so no metrics. This definition in
// the executable takes the place of glibc's for every library: a stack
// asked for below 1 MiB gets 1 MiB; larger requests are unchanged.
extern "C" int pthread_attr_setstacksize(pthread_attr_t* attr, size_t size) {
  using Function = int (*)(pthread_attr_t*, size_t);
  static const Function glibc =
      reinterpret_cast<Function>(dlsym(RTLD_NEXT, "pthread_attr_setstacksize"));
  if (glibc == nullptr) return EINVAL;
  constexpr size_t kSmallestStack = size_t{1} << 20;
  return glibc(attr, std::max(size, kSmallestStack));
}

namespace ps {
namespace {

// civetweb's reason for a failed start, written by its log callback on the
// thread that starts it.
// civetweb's messages: while this thread starts an endpoint, its reason for
// a failed start; afterwards (on civetweb's threads) errors worth a line on
// stderr.
thread_local bool starting = false;
thread_local std::string start_error;

int LogMessage(const mg_connection*, const char* message) {
  if (starting) {
    start_error = message;
  } else {
    std::fprintf(stderr, "metrics endpoint: %s\n", message);
  }
  return 1;  // handled: civetweb prints nothing itself
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    const std::string& listen) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon + 1 == listen.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address \"", listen, "\" must be HOST:PORT"));
  }
  auto endpoint = std::unique_ptr<MetricsEndpoint>(new MetricsEndpoint());
  CivetCallbacks callbacks{};
  callbacks.log_message = LogMessage;
  start_error.clear();
  starting = true;
  try {
    // One thread: a scrape is cheap, and the process's cores are for work.
    endpoint->exposer_ =
        std::make_unique<prometheus::Exposer>(listen, 1, &callbacks);
  } catch (const std::exception& e) {
    starting = false;
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", listen, ": ",
                     start_error.empty() ? e.what() : start_error));
  }
  starting = false;
  const std::vector<int> ports = endpoint->exposer_->GetListeningPorts();
  if (ports.empty()) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", listen));
  }
  endpoint->exposer_->RegisterCollectable(endpoint->process_);
  endpoint->port_ = ports[0];
  endpoint->address_ =
      absl::StrCat(listen.substr(0, colon), ":", endpoint->port_);
  return endpoint;
}

void MetricsEndpoint::Register(
    const std::weak_ptr<prometheus::Collectable>& collectable) {
  exposer_->RegisterCollectable(collectable);
}

}  // namespace ps
