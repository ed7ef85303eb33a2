// File: base/usable_cores.h
//
// How many cores this process may run on: its CPU affinity (a container's
// cpuset, not the node's core count), at least 1. For sizing thread pools
// whose default is "every core".

#ifndef PS_BASE_USABLE_CORES_H_
#define PS_BASE_USABLE_CORES_H_

#include <sched.h>

#include <algorithm>
#include <thread>

namespace ps {

inline int UsableCores() {
  cpu_set_t cpus;
  if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0) {
    return std::max(1, CPU_COUNT(&cpus));
  }
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace ps

#endif  // PS_BASE_USABLE_CORES_H_
