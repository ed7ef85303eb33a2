#include "tests/etcd_process.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "base/test_dirs.h"
#include "cluster/etcd_store.h"
#include "net/etcd_client.h"

namespace ps::testing {

std::vector<int> UnusedLoopbackPorts(int count) {
  std::vector<int> fds, ports;
  for (int i = 0; i < count; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address = {};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = 0;
    socklen_t length = sizeof(address);
    int port = 0;
    if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
      port = ntohs(address.sin_port);
    }
    fds.push_back(fd);
    ports.push_back(port);
  }
  for (int fd : fds) close(fd);
  return ports;
}

int UnusedLoopbackPort() { return UnusedLoopbackPorts(1)[0]; }

namespace {

// Whether something accepts TCP connections on loopback `port`.
bool Accepts(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address = {};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(port);
  const bool connected =
      connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  close(fd);
  return connected;
}

}  // namespace

absl::StatusOr<std::unique_ptr<EtcdProcess>> EtcdProcess::Start(
    const std::string& name, const EtcdSecurity& security) {
  const std::string binary = "/usr/bin/etcd";
  if (!std::filesystem::exists(binary)) {
    return absl::FailedPreconditionError(
        "/usr/bin/etcd is missing: run deploy/setup.sh (etcd-server)");
  }
  const std::string dir = FreshTestDir(name);
  const std::vector<int> ports = UnusedLoopbackPorts(2);
  const int client_port = ports[0];
  const int peer_port = ports[1];
  const bool tls = !security.cert.empty();
  const std::string client_url =
      absl::StrCat(tls ? "https" : "http", "://127.0.0.1:", client_port);
  const std::string peer_url = absl::StrCat("http://127.0.0.1:", peer_port);
  auto etcd = std::unique_ptr<EtcdProcess>(new EtcdProcess());
  etcd->endpoint_ = absl::StrCat("127.0.0.1:", client_port);
  etcd->client_tls_ = security.client_tls;
  std::vector<std::string> argv = {binary,
                                   "--name=" + name,
                                   "--data-dir=" + dir + "/data",
                                   "--listen-client-urls=" + client_url,
                                   "--advertise-client-urls=" + client_url,
                                   "--listen-peer-urls=" + peer_url,
                                   "--initial-advertise-peer-urls=" + peer_url,
                                   "--initial-cluster=" + name + "=" + peer_url,
                                   "--initial-cluster-state=new",
                                   "--log-level=error"};
  if (tls) {
    argv.push_back("--cert-file=" + security.cert);
    argv.push_back("--key-file=" + security.key);
  }
  if (!security.client_ca.empty()) {
    argv.push_back("--client-cert-auth");
    argv.push_back("--trusted-ca-file=" + security.client_ca);
  }
  argv.insert(argv.end(), security.more_flags.begin(),
              security.more_flags.end());
  etcd->argv_ = std::move(argv);
  etcd->dir_ = dir;
  etcd->client_port_ = client_port;
  RETURN_IF_ERROR(etcd->Launch());
  return etcd;
}

absl::Status EtcdProcess::Restart() { return Launch(); }

absl::Status EtcdProcess::Launch() {
  absl::StatusOr<std::unique_ptr<ChildProcess>> process =
      ChildProcess::Start(argv_, /*capture_stdout=*/false, dir_ + "/etcd.log");
  if (!process.ok()) return process.status();
  process_ = *std::move(process);
  // First the port, so that the client's channel connects at its first try
  // rather than after gRPC's reconnect backoff.
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (!Accepts(client_port_) && absl::Now() < deadline)
    absl::SleepFor(absl::Milliseconds(20));
  net::EtcdOptions options;
  options.endpoints = {endpoint_};
  options.call_timeout = absl::Seconds(1);
  options.tls = client_tls_;
  absl::StatusOr<std::unique_ptr<net::EtcdClient>> client =
      net::EtcdClient::Connect(options);
  if (!client.ok()) return client.status();
  absl::Status last;
  while (absl::Now() < deadline) {
    last = (*client)->Put("/ps_test/ready", "1").status();
    if (last.ok()) return absl::OkStatus();
    absl::SleepFor(absl::Milliseconds(100));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("etcd did not answer on ", endpoint_, " within 30 s (",
                   last.ToString(), "); its log: ", dir_, "/etcd.log"));
}

void EtcdProcess::Stop(int signal) {
  if (process_ != nullptr) process_->SignalAndWait(signal);
  process_.reset();
}

absl::StatusOr<std::unique_ptr<cluster::CoordinationStore>>
EtcdProcess::Connect() const {
  net::EtcdOptions options;
  options.endpoints = {endpoint_};
  options.tls = client_tls_;
  return cluster::EtcdStore::Connect(options);
}

}  // namespace ps::testing
