// ModelDirectory: the export written last is served, whatever its cut; a
// bad export is refused and the one serving goes on; when the export
// serving is deleted, the newest one left is served.

#include "server/model_directory.h"

#include <filesystem>
#include <string>

#include "absl/time/clock.h"
#include "base/manifest.h"
#include "base/wait_until.h"
#include "gtest/gtest.h"
#include "model/export_test_util.h"

namespace ps::server {
namespace {

using model::HandmadeExport;

// Writes an export of cut `cut`, written at `written_ms` (Unix
// milliseconds) by job `job`, into `dir`.
void WriteExport(const std::string& dir, int64_t cut, int64_t written_ms,
                 const std::string& job, bool damaged = false) {
  model::HandmadeExport model(1);
  model.AddRows({1, 2, 3});
  model.manifest.set_cut(cut);
  model.manifest.set_created_at_unix_ms(written_ms);
  model.manifest.set_job(job);
  if (damaged) model.manifest.mutable_model()->set_dense_chunk_floats(0);
  ASSERT_TRUE(model::WriteHandmadeExport(dir, model).ok());
}

// The version serving once it is `version`, or the last one seen after
// 20 s.
std::string AwaitVersion(const ModelDirectory& directory,
                         const std::string& version) {
  std::string serving;
  WaitUntil(
      [&] {
        std::shared_ptr<ServingModel> current = directory.current();
        serving = current == nullptr ? "" : current->version();
        return serving == version;
      },
      absl::Seconds(20));
  return serving;
}

TEST(ModelDirectoryTest, ServesTheExportWrittenLastWhateverItsCut) {
  const std::string dir = ::testing::TempDir() + "/models";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const int64_t now_ms = absl::ToUnixMillis(absl::Now());
  WriteExport(dir + "/first", 100, now_ms - 60000, "job-a");
  ModelDirectoryOptions options;
  options.dir = dir;
  options.poll = absl::Milliseconds(10);
  auto directory = ModelDirectory::Start(options);
  ASSERT_TRUE(directory.ok()) << directory.status();
  ASSERT_EQ(AwaitVersion(**directory, "first"), "first");
  EXPECT_EQ((*directory)->current()->job(), "job-a");

  // The job restored from an older checkpoint exports a lower cut, later.
  WriteExport(dir + "/restored", 50, now_ms - 30000, "job-a");
  EXPECT_EQ(AwaitVersion(**directory, "restored"), "restored");
  EXPECT_EQ((*directory)->current()->cut(), 50);

  // An export written before the one serving is not served.
  WriteExport(dir + "/late-copy", 500, now_ms - 45000, "job-a");
  // A newer export that does not load: refused, the one serving goes on.
  WriteExport(dir + "/damaged", 60, now_ms - 1000, "job-b", true);
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_EQ((*directory)->current()->version(), "restored");

  // Another job, into the same directory: served from its first export.
  WriteExport(dir + "/next-job", 3, now_ms, "job-b");
  EXPECT_EQ(AwaitVersion(**directory, "next-job"), "next-job");
  EXPECT_EQ((*directory)->current()->job(), "job-b");

  // The export serving is pruned: the newest one left is served.
  std::filesystem::remove_all(dir + "/next-job");
  EXPECT_EQ(AwaitVersion(**directory, "restored"), "restored");
}

}  // namespace
}  // namespace ps::server
