// File: base/usable_cores.h
//
// How many cores this process may use: its CPU affinity (a container's
// cpuset, not the node's core count), capped by a cgroup v2 CPU quota
// (/sys/fs/cgroup/cpu.max, a Kubernetes CPU limit) rounded up; at least 1.
// For sizing thread pools whose default is "every core".

#ifndef PS_BASE_USABLE_CORES_H_
#define PS_BASE_USABLE_CORES_H_

#include <sched.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <string>
#include <thread>

namespace ps {

// The cores a cgroup v2 cpu.max line ("QUOTA PERIOD", or "max PERIOD")
// allows, rounded up; 0 for no quota or a line that is not one.
inline int CoresOfCpuMax(const std::string& quota, int64_t period) {
  if (quota == "max" || period <= 0) return 0;
  int64_t microseconds = 0;
  for (char c : quota) {
    if (c < '0' || c > '9') return 0;
    microseconds = microseconds * 10 + (c - '0');
    if (microseconds > (int64_t{1} << 40)) return 0;
  }
  if (microseconds <= 0) return 0;
  return static_cast<int>((microseconds + period - 1) / period);
}

inline int UsableCores() {
  int cores = 0;
  cpu_set_t cpus;
  if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0) {
    cores = CPU_COUNT(&cpus);
  } else {
    cores = static_cast<int>(std::thread::hardware_concurrency());
  }
  std::ifstream cpu_max("/sys/fs/cgroup/cpu.max");
  std::string quota;
  int64_t period = 0;
  if (cpu_max >> quota >> period) {
    if (const int allowed = CoresOfCpuMax(quota, period); allowed > 0) {
      cores = cores > 0 ? std::min(cores, allowed) : allowed;
    }
  }
  return std::max(1, cores);
}

}  // namespace ps

#endif  // PS_BASE_USABLE_CORES_H_
