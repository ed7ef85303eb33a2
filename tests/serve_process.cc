#include "tests/serve_process.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/test_files.h"

namespace ps::testing {

absl::StatusOr<ServeProcess> StartServe(const std::string& model_dir,
                                        const std::string& log,
                                        const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {BinaryPath("server/ps_serve"),
                                   "--model_dir=" + model_dir,
                                   "--listen=127.0.0.1:0", "--poll_ms=100"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  absl::StatusOr<std::unique_ptr<ChildProcess>> process =
      ChildProcess::Start(argv, /*capture_stdout=*/true, log);
  if (!process.ok()) return process.status();
  absl::StatusOr<std::string> line =
      (*process)->ReadLine(absl::Now() + absl::Seconds(60));
  constexpr absl::string_view kPrefix = "ps_serve listening on ";
  if (!line.ok() || !absl::StartsWith(*line, kPrefix)) {
    return absl::UnavailableError(
        absl::StrCat("ps_serve did not start listening: ",
                     line.ok() ? *line : std::string(line.status().message()),
                     "\n", ReadFile(log)));
  }
  ServeProcess serve;
  serve.process = *std::move(process);
  serve.address = line->substr(kPrefix.size());
  return serve;
}

}  // namespace ps::testing
