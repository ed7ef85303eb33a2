#include "base/metrics_endpoint.h"

#include <exception>

#include "absl/strings/str_cat.h"

namespace ps {

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    const std::string& listen) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon + 1 == listen.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics address \"", listen, "\" must be HOST:PORT"));
  }
  auto endpoint = std::unique_ptr<MetricsEndpoint>(new MetricsEndpoint());
  try {
    // One thread: a scrape is cheap, and the process's cores are for work.
    endpoint->exposer_ = std::make_unique<prometheus::Exposer>(listen, 1);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", listen, ": ", e.what()));
  }
  const std::vector<int> ports = endpoint->exposer_->GetListeningPorts();
  if (ports.empty()) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", listen));
  }
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
