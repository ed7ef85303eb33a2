// File: tests/serve_process.h
//
// ps_serve as a real child process for the tests, on a loopback port it
// picks itself: started, and its address read from its first stdout line.

#ifndef PS_TESTS_SERVE_PROCESS_H_
#define PS_TESTS_SERVE_PROCESS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tests/child_process.h"

namespace ps::testing {

struct ServeProcess {
  // Killed when destroyed (ChildProcess).
  std::unique_ptr<ChildProcess> process;
  // HOST:PORT on loopback.
  std::string address;
};

// Starts ps_serve on `model_dir` (--listen=127.0.0.1:0 --poll_ms=100, then
// `extra`), its stderr into `log`, and waits up to 60 s for it to listen.
// An error with the log's text if it does not.
absl::StatusOr<ServeProcess> StartServe(
    const std::string& model_dir, const std::string& log,
    const std::vector<std::string>& extra = {});

}  // namespace ps::testing

#endif  // PS_TESTS_SERVE_PROCESS_H_
