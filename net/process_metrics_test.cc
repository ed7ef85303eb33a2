#include "net/process_metrics.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstring>
#include <ctime>
#include <memory>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "net/metrics_endpoint.h"
#include "net/metrics_scrape.h"

namespace ps {
namespace {

double ProcessCpuSeconds() {
  timespec now{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return now.tv_sec + now.tv_nsec * 1e-9;
}

TEST(ProcessMetricsTest, FiguresFollowWhatTheProcessDoes) {
  absl::StatusOr<ProcessFigures> before = ReadProcessFigures();
  ASSERT_TRUE(before.ok()) << before.status();

  // Half a second of CPU (by the kernel's clock of this process's CPU time,
  // however busy the machine), 64 MiB touched, one more file open.
  const double cpu_start = ProcessCpuSeconds();
  volatile uint64_t spin = 0;
  while (ProcessCpuSeconds() < cpu_start + 0.5) spin = spin + 1;
  std::vector<char> memory(64 << 20);
  std::memset(memory.data(), 1, memory.size());
  const int fd = open("/proc/self/stat", O_RDONLY);
  ASSERT_GE(fd, 0);

  absl::StatusOr<ProcessFigures> after = ReadProcessFigures();
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_GE(after->cpu_seconds - before->cpu_seconds, 0.4);
  EXPECT_GE(after->resident_bytes, before->resident_bytes + (60 << 20));
  EXPECT_GE(after->virtual_bytes, after->resident_bytes);
  EXPECT_EQ(after->open_fds, before->open_fds + 1);
  // Counted another way: each descriptor number the kernel knows.
  uint64_t valid = 0;
  for (int each = 0; each < 65536; ++each) valid += fcntl(each, F_GETFD) != -1;
  EXPECT_EQ(after->open_fds, valid);
  close(fd);
  EXPECT_EQ(ReadProcessFigures()->open_fds, before->open_fds);

  rlimit files{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &files), 0);
  EXPECT_EQ(after->max_fds, files.rlim_cur);
  // Started this test run: within the last ten minutes, not in the future.
  const double now = absl::ToUnixSeconds(absl::Now());
  EXPECT_LE(after->start_time_seconds, now + 1);
  EXPECT_GE(after->start_time_seconds, now - 600);
  EXPECT_EQ(after->start_time_seconds, before->start_time_seconds);
}

TEST(ProcessMetricsTest, EveryEndpointServesThem) {
  absl::StatusOr<std::unique_ptr<MetricsEndpoint>> endpoint =
      MetricsEndpoint::Start("127.0.0.1:0");
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  const std::string text = ScrapeMetrics((*endpoint)->address());
  for (const char* line :
       {"# TYPE process_cpu_seconds_total counter",
        "# TYPE process_resident_memory_bytes gauge",
        "# TYPE process_virtual_memory_bytes gauge",
        "# TYPE process_open_fds gauge", "# TYPE process_max_fds gauge",
        "# TYPE process_start_time_seconds gauge"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  }
}

}  // namespace
}  // namespace ps
