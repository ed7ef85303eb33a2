// File: tests/test_files.h
//
// Small helpers for tests that read what processes wrote: a whole file, a
// wait for a line a process logs, and one number from the flat JSON objects
// ps_worker writes (--metrics_out).

#ifndef PS_TESTS_TEST_FILES_H_
#define PS_TESTS_TEST_FILES_H_

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/time/time.h"
#include "base/wait_until.h"

namespace ps::testing {

// The contents of `path`; empty if it cannot be read.
inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Whether `path` comes to hold `text` within `timeout`: how a test waits
// for a process to say it got somewhere (a worker's progress line, a
// coordinator's wait) instead of sleeping for as long as that usually takes.
inline bool WaitForText(const std::string& path, const std::string& text,
                        absl::Duration timeout) {
  return WaitUntil(
      [&] { return ReadFile(path).find(text) != std::string::npos; }, timeout,
      absl::Milliseconds(50));
}

// The number after "key": in a flat JSON object; NaN if absent.
inline double Metric(const std::string& json, const std::string& key) {
  const std::string needle = "\"" + key + "\": ";
  const size_t at = json.find(needle);
  if (at == std::string::npos) return std::nan("");
  return std::strtod(json.c_str() + at + needle.size(), nullptr);
}

}  // namespace ps::testing

#endif  // PS_TESTS_TEST_FILES_H_
