#include "worker/training_metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace ps::worker {
namespace {

// The body of GET /metrics from `address` (HOST:PORT on loopback, as
// TrainingMetrics::address() says it), or "" if it cannot be read.
std::string Scrape(const std::string& address) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port)) {
    return "";
  }
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in server{};
  server.sin_family = AF_INET;
  server.sin_port = htons(static_cast<uint16_t>(port));
  server.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  if (connect(fd, reinterpret_cast<sockaddr*>(&server), sizeof(server)) == 0) {
    const std::string request =
        "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n";
    if (write(fd, request.data(), request.size()) ==
        static_cast<ssize_t>(request.size())) {
      char buffer[4096];
      for (ssize_t n; (n = read(fd, buffer, sizeof(buffer))) > 0;)
        response.append(buffer, n);
    }
  }
  close(fd);
  return response;
}

TEST(TrainingMetricsTest, EachTasksFiguresCarryItsName) {
  auto metrics = TrainingMetrics::Start("127.0.0.1:0", 2);
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  // No evaluation yet: no test gauge at all (no 0 that reads as a result).
  std::string text = Scrape((*metrics)->address());
  ASSERT_NE(text.find("ps_worker_train_loss"), std::string::npos) << text;
  EXPECT_EQ(text.find("ps_worker_test_auc{"), std::string::npos) << text;

  (*metrics)->SetRecent(0.5, {{"ctr", 10, 0.71, 0.4}, {"cvr", 4, 0.62, 0.2}});
  (*metrics)->SetTest({{"ctr", 100, 0.75, 0.45}, {"cvr", 40, 0.66, 0.12}});
  (*metrics)->SetProgressiveValidation({{"ctr", 9, 0.7, 0.5}});
  text = Scrape((*metrics)->address());
  for (const char* line :
       {"ps_worker_train_auc{worker=\"2\",task=\"cvr\"} 0.62",
        "ps_worker_test_auc{worker=\"2\",task=\"ctr\"} 0.75",
        "ps_worker_test_auc{worker=\"2\",task=\"cvr\"} 0.66",
        "ps_worker_test_logloss{worker=\"2\",task=\"cvr\"} 0.12",
        "ps_worker_progressive_auc{worker=\"2\",task=\"ctr\"} 0.7",
        "ps_worker_progressive_logloss{worker=\"2\",task=\"ctr\"} 0.5"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  }
}

}  // namespace
}  // namespace ps::worker
