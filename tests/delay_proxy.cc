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
  proxy->set_delay(delay);
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
  std::list<std::unique_ptr<Connection>> connections;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (const auto& connection : connections_) {
      shutdown(connection->client, SHUT_RDWR);
      shutdown(connection->upstream, SHUT_RDWR);
    }
  }
  shutdown(listener_, SHUT_RDWR);
  if (acceptor_.joinable()) acceptor_.join();
  close(listener_);
  {
    absl::MutexLock lock(&mu_);
    connections.swap(connections_);
  }
  for (const auto& connection : connections) {
    connection->to_upstream.join();
    connection->to_client.join();
    close(connection->client);
    close(connection->upstream);
  }
}

void DelayProxy::set_delay(absl::Duration delay) {
  absl::MutexLock lock(&mu_);
  delay_ = delay;
}

absl::Duration DelayProxy::delay() {
  absl::MutexLock lock(&mu_);
  return delay_;
}

void DelayProxy::ReapClosed() {
  std::list<std::unique_ptr<Connection>> closed;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = connections_.begin(); it != connections_.end();) {
      if ((*it)->pumps_done.load() == 2) {
        closed.push_back(std::move(*it));
        it = connections_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (const auto& connection : closed) {
    connection->to_upstream.join();
    connection->to_client.join();
    close(connection->client);
    close(connection->upstream);
  }
}

void DelayProxy::Accept() {
  while (true) {
    pollfd waiting{listener_, POLLIN, 0};
    if (poll(&waiting, 1, 100) < 0 && errno != EINTR) return;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
    }
    ReapClosed();
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
    auto connection = std::make_unique<Connection>();
    connection->client = client;
    connection->upstream = upstream;
    Connection* raw = connection.get();
    connection->to_upstream = std::thread([this, raw] {
      Pump(raw->client, raw->upstream);
      ++raw->pumps_done;
    });
    connection->to_client = std::thread([this, raw] {
      Pump(raw->upstream, raw->client);
      ++raw->pumps_done;
    });
    connections_.push_back(std::move(connection));
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
    const absl::Time due = absl::Now() + delay();
    absl::MutexLock lock(&queue_mu);
    queue.push_back({due, std::string(buffer, n)});
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
