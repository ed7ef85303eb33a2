// File: tests/chaos_rows.h
//
// Rows of deploy/chaos.sh's table from tests outside the fault matrix
// (tests/replication_test, tests/failover_test): each appends one row to
// the file $CHAOS_ROWS names, if set. For tests only.

#ifndef PS_TESTS_CHAOS_ROWS_H_
#define PS_TESTS_CHAOS_ROWS_H_

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace ps::testing {

// deploy/chaos.sh's table: appends a row to $CHAOS_ROWS, if set: the
// fault, what the clients saw, acknowledged updates lost and doubled (by
// every value against the count; up to `in_flight` pushes applied but
// never answered are not doubles), and how it ended.
inline void AddChaosRow(const std::string& fault, const std::string& saw,
                        const std::vector<float>& values, int acknowledged,
                        const std::string& outcome, int in_flight = 0) {
  const char* path = std::getenv("CHAOS_ROWS");
  if (path == nullptr) return;
  float least = acknowledged, most = acknowledged;
  for (float value : values) {
    least = std::min(least, value);
    most = std::max(most, value);
  }
  std::ofstream(path, std::ios::app)
      << "| " << fault << " | " << saw << " | " << acknowledged - least << " | "
      << std::max(0.0f, most - acknowledged - in_flight) << " | " << outcome
      << " |\n";
}

}  // namespace ps::testing

#endif  // PS_TESTS_CHAOS_ROWS_H_
