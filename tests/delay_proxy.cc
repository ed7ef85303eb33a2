#include "tests/delay_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace ps::testing {
namespace {

absl::Status Errno(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

sockaddr_in Loopback(int port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  return address;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DelayProxy>> DelayProxy::Start(
    const std::string& target, absl::Duration delay) {
  auto proxy = std::unique_ptr<DelayProxy>(new DelayProxy());
  proxy->delay_ = delay;
  if (!absl::SimpleAtoi(target.substr(target.rfind(':') + 1),
                        &proxy->target_port_)) {
    return absl::InvalidArgumentError("not HOST:PORT: " + target);
  }
  proxy->listener_ = socket(AF_INET, SOCK_STREAM, 0);
  if (proxy->listener_ < 0) return Errno("socket");
  sockaddr_in address = Loopback(0);
  if (bind(proxy->listener_, reinterpret_cast<sockaddr*>(&address),
           sizeof(address)) != 0 ||
      listen(proxy->listener_, 16) != 0) {
    return Errno("listening on loopback");
  }
  socklen_t length = sizeof(address);
  getsockname(proxy->listener_, reinterpret_cast<sockaddr*>(&address), &length);
  proxy->address_ = absl::StrCat("127.0.0.1:", ntohs(address.sin_port));
  DelayProxy* raw = proxy.get();
  proxy->acceptor_ = std::thread([raw] { raw->Accept(); });
  return proxy;
}

DelayProxy::~DelayProxy() {
  std::vector<std::thread> pumps;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (int socket : sockets_) shutdown(socket, SHUT_RDWR);
    pumps.swap(pumps_);
  }
  shutdown(listener_, SHUT_RDWR);
  if (acceptor_.joinable()) acceptor_.join();
  close(listener_);
  for (std::thread& pump : pumps) pump.join();
  absl::MutexLock lock(&mu_);
  for (int socket : sockets_) close(socket);
}

void DelayProxy::Accept() {
  while (true) {
    pollfd waiting{listener_, POLLIN, 0};
    if (poll(&waiting, 1, 100) < 0 && errno != EINTR) return;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
    }
    if (!(waiting.revents & POLLIN)) continue;
    const int client = accept(listener_, nullptr, nullptr);
    if (client < 0) continue;
    const int upstream = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address = Loopback(target_port_);
    if (upstream < 0 || connect(upstream, reinterpret_cast<sockaddr*>(&address),
                                sizeof(address)) != 0) {
      close(client);
      if (upstream >= 0) close(upstream);
      continue;
    }
    const int one = 1;
    setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(upstream, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      close(client);
      close(upstream);
      return;
    }
    sockets_.push_back(client);
    sockets_.push_back(upstream);
    pumps_.emplace_back([this, client, upstream] { Pump(client, upstream); });
    pumps_.emplace_back([this, client, upstream] { Pump(upstream, client); });
  }
}

void DelayProxy::Pump(int from, int to) {
  // Chunks read, with the time each may go on; a writer thread sends them.
  struct Chunk {
    absl::Time due;
    std::string bytes;
  };
  absl::Mutex queue_mu;
  absl::CondVar queued;
  std::deque<Chunk> queue;
  bool done = false;
  std::thread writer([&] {
    while (true) {
      Chunk chunk;
      {
        absl::MutexLock lock(&queue_mu);
        while (queue.empty() && !done) queued.Wait(&queue_mu);
        if (queue.empty()) return;
        chunk = std::move(queue.front());
        queue.pop_front();
      }
      absl::SleepFor(chunk.due - absl::Now());
      size_t sent = 0;
      while (sent < chunk.bytes.size()) {
        const ssize_t n = send(to, chunk.bytes.data() + sent,
                               chunk.bytes.size() - sent, MSG_NOSIGNAL);
        if (n <= 0) {
          shutdown(from, SHUT_RDWR);
          return;
        }
        sent += static_cast<size_t>(n);
      }
    }
  });
  char buffer[64 * 1024];
  while (true) {
    const ssize_t n = recv(from, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    absl::MutexLock lock(&queue_mu);
    queue.push_back({absl::Now() + delay_, std::string(buffer, n)});
    queued.Signal();
  }
  {
    absl::MutexLock lock(&queue_mu);
    done = true;
    queued.Signal();
  }
  writer.join();
  shutdown(to, SHUT_WR);
}

}  // namespace ps::testing
