#include "net/process_metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "net/one_sample_family.h"

namespace ps {
namespace {

absl::StatusOr<std::string> ReadFile(const char* path) {
  std::ifstream file(path);
  if (!file) return absl::InternalError(absl::StrCat("cannot read ", path));
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

// The fields of /proc/self/stat after the command's name (which may hold
// spaces and parentheses: it ends at the last ')'), so that field N of
// proc(5) is fields[N - 3].
absl::StatusOr<std::vector<std::string>> StatFields() {
  absl::StatusOr<std::string> stat = ReadFile("/proc/self/stat");
  if (!stat.ok()) return stat.status();
  const size_t name_end = stat->rfind(')');
  if (name_end == std::string::npos || name_end + 2 > stat->size()) {
    return absl::InternalError("/proc/self/stat has no command name");
  }
  return std::vector<std::string>(absl::StrSplit(
      absl::string_view(*stat).substr(name_end + 2), ' ', absl::SkipEmpty()));
}

// "btime" of /proc/stat: when the machine booted, in seconds since the epoch.
absl::StatusOr<uint64_t> BootTime() {
  absl::StatusOr<std::string> stat = ReadFile("/proc/stat");
  if (!stat.ok()) return stat.status();
  for (absl::string_view line : absl::StrSplit(*stat, '\n')) {
    if (!absl::ConsumePrefix(&line, "btime ")) continue;
    uint64_t seconds = 0;
    if (absl::SimpleAtoi(line, &seconds)) return seconds;
  }
  return absl::InternalError("/proc/stat has no btime");
}

// Entries of /proc/self/fd, less the one that lists them.
absl::StatusOr<uint64_t> OpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return absl::InternalError("cannot list /proc/self/fd");
  uint64_t entries = 0;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++entries;
  }
  closedir(dir);
  return entries > 0 ? entries - 1 : 0;
}

}  // namespace

absl::StatusOr<ProcessFigures> ReadProcessFigures() {
  absl::StatusOr<std::vector<std::string>> fields = StatFields();
  if (!fields.ok()) return fields.status();
  // utime (14), stime (15), starttime (22), vsize (23), rss (24).
  if (fields->size() < 22) {
    return absl::InternalError("/proc/self/stat has too few fields");
  }
  uint64_t user_ticks = 0, system_ticks = 0, start_ticks = 0;
  uint64_t virtual_bytes = 0, resident_pages = 0;
  if (!absl::SimpleAtoi((*fields)[11], &user_ticks) ||
      !absl::SimpleAtoi((*fields)[12], &system_ticks) ||
      !absl::SimpleAtoi((*fields)[19], &start_ticks) ||
      !absl::SimpleAtoi((*fields)[20], &virtual_bytes) ||
      !absl::SimpleAtoi((*fields)[21], &resident_pages)) {
    return absl::InternalError("/proc/self/stat has a field not a number");
  }
  absl::StatusOr<uint64_t> boot_time = BootTime();
  if (!boot_time.ok()) return boot_time.status();
  absl::StatusOr<uint64_t> open_fds = OpenFds();
  if (!open_fds.ok()) return open_fds.status();
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) != 0) {
    return absl::InternalError("getrlimit(RLIMIT_NOFILE) failed");
  }
  const double ticks_per_second = static_cast<double>(sysconf(_SC_CLK_TCK));
  ProcessFigures figures;
  figures.cpu_seconds = (user_ticks + system_ticks) / ticks_per_second;
  figures.resident_bytes =
      resident_pages * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  figures.virtual_bytes = virtual_bytes;
  figures.open_fds = *open_fds;
  figures.max_fds = files.rlim_cur;
  figures.start_time_seconds = *boot_time + start_ticks / ticks_per_second;
  return figures;
}

std::vector<prometheus::MetricFamily> ProcessMetrics::Collect() const {
  absl::StatusOr<ProcessFigures> figures = ReadProcessFigures();
  if (!figures.ok()) return {};
  using prometheus::MetricType;
  return {
      OneSampleFamily("process_cpu_seconds_total",
                      "CPU seconds this process has used, user and system.",
                      MetricType::Counter, figures->cpu_seconds),
      OneSampleFamily("process_resident_memory_bytes",
                      "Bytes of this process's memory in RAM.",
                      MetricType::Gauge,
                      static_cast<double>(figures->resident_bytes)),
      OneSampleFamily("process_virtual_memory_bytes",
                      "Bytes of address space this process has mapped.",
                      MetricType::Gauge,
                      static_cast<double>(figures->virtual_bytes)),
      OneSampleFamily(
          "process_open_fds", "File descriptors this process holds open.",
          MetricType::Gauge, static_cast<double>(figures->open_fds)),
      OneSampleFamily(
          "process_max_fds",
          "File descriptors this process may open (its soft limit).",
          MetricType::Gauge, static_cast<double>(figures->max_fds)),
      OneSampleFamily(
          "process_start_time_seconds",
          "When this process started, in seconds since the Unix epoch.",
          MetricType::Gauge, figures->start_time_seconds),
  };
}

}  // namespace ps
