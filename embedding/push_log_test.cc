#include "embedding/push_log.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "base/status_macros.h"
#include "base/status_matchers.h"
#include "base/test_dirs.h"
#include "base/transient_error.h"
#include "gtest/gtest.h"

namespace ps::embedding {
namespace {

std::unique_ptr<PushLog> OpenLog(const std::string& dir,
                                 uint64_t segment_bytes) {
  PushLogOptions options;
  options.dir = dir;
  options.segment_bytes = segment_bytes;
  auto log = PushLog::Open(options);
  EXPECT_OK(log);
  return std::move(log).value();
}

std::string Record(int i) { return std::string(10 + i % 37, 'a' + i % 26); }

std::vector<std::string> ReadAll(PushLog& log, uint64_t run) {
  auto reader = log.ReadRun(run);
  EXPECT_OK(reader);
  std::vector<std::string> records;
  EXPECT_OK(
      (*reader)->ForEach([&](PushLog::Location, absl::string_view payload) {
        records.emplace_back(payload);
        return absl::OkStatus();
      }));
  return records;
}

std::vector<std::string> SegmentFiles(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

uint64_t FileBytes(const std::string& dir) {
  uint64_t total = 0;
  for (const auto& file : SegmentFiles(dir))
    total += std::filesystem::file_size(file);
  return total;
}

TEST(PushLogTest, RecordsComeBackInOrderAcrossSegments) {
  const std::string dir = FreshTestDir("push_log_order");
  auto log = OpenLog(dir, /*segment_bytes=*/200);
  log->StartRun(3);
  std::vector<std::string> written;
  for (int i = 0; i < 60; ++i) {
    written.push_back(Record(i));
    ASSERT_OK(log->Append(written.back()));
  }
  EXPECT_GT(log->current_segment(), 5u);
  EXPECT_EQ(log->live_bytes(), FileBytes(dir));
  EXPECT_EQ(ReadAll(*log, 3), written);
  EXPECT_TRUE(ReadAll(*log, 2).empty());
  auto runs = log->ListRuns();
  ASSERT_OK(runs);
  EXPECT_EQ(*runs, std::vector<uint64_t>{3});

  // ReadAt returns part of the record ForEach located.
  auto reader = log->ReadRun(3);
  ASSERT_OK(reader);
  int index = 0;
  ASSERT_OK((*reader)->ForEach(
      [&](PushLog::Location location, absl::string_view) -> absl::Status {
        std::string part;
        RETURN_IF_ERROR((*reader)->ReadAt(location, 3, 5, &part));
        EXPECT_EQ(part, written[index++].substr(3, 5));
        return absl::OkStatus();
      }));
  EXPECT_EQ(index, 60);
}

// The bytes of disk the only segment in `dir` takes (0, with a test
// failure, if there is not exactly one), and its size into `*size`.
uint64_t OnlySegmentBlockBytes(const std::string& dir, uint64_t* size) {
  const std::vector<std::string> files = SegmentFiles(dir);
  EXPECT_EQ(files.size(), 1u);
  struct stat info;
  if (files.size() != 1 || stat(files[0].c_str(), &info) != 0) return 0;
  *size = static_cast<uint64_t>(info.st_size);
  return static_cast<uint64_t>(info.st_blocks) * 512;
}

// A new segment's blocks are reserved up front, where the file system can,
// while its size stays the bytes written: replay reads a segment to its size.
TEST(PushLogTest, SegmentBlocksAreReservedButSizeIsWhatWasWritten) {
  const std::string dir = FreshTestDir("push_log_reserved");
  {
    const std::string probe = dir + "/probe";
    const int fd = open(probe.c_str(), O_WRONLY | O_CREAT, 0644);
    ASSERT_GE(fd, 0);
    const bool reserves = fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, 1 << 20) == 0;
    close(fd);
    std::filesystem::remove(probe);
    if (!reserves) GTEST_SKIP() << "this file system has no fallocate";
  }
  constexpr uint64_t kSegmentBytes = 4 << 20;
  auto log = OpenLog(dir, kSegmentBytes);
  log->StartRun(1);
  ASSERT_OK(log->Append(Record(1)));
  uint64_t size = 0;
  EXPECT_GE(OnlySegmentBlockBytes(dir, &size), kSegmentBytes);
  EXPECT_EQ(size, log->live_bytes());
  EXPECT_LT(size, 100u);
  EXPECT_EQ(ReadAll(*log, 1), std::vector<std::string>{Record(1)});
  // Closed short, it gives the reserved blocks back.
  log.reset();
  EXPECT_LT(OnlySegmentBlockBytes(dir, &size), uint64_t{1} << 20);
  EXPECT_LT(size, 100u);
}

// Near a full disk a segment is not reserved: here, one of half the free
// space.
TEST(PushLogTest, NoSegmentIsReservedPastAQuarterOfTheFreeSpace) {
  const std::string dir = FreshTestDir("push_log_unreserved");
  struct statvfs file_system;
  ASSERT_EQ(statvfs(dir.c_str(), &file_system), 0);
  const uint64_t free_bytes =
      static_cast<uint64_t>(file_system.f_bavail) * file_system.f_frsize;
  auto log = OpenLog(dir, free_bytes / 2);
  log->StartRun(1);
  ASSERT_OK(log->Append(Record(1)));
  uint64_t size = 0;
  EXPECT_LT(OnlySegmentBlockBytes(dir, &size), uint64_t{1} << 20);
  EXPECT_EQ(ReadAll(*log, 1), std::vector<std::string>{Record(1)});
}

// Writes four records into two segments of run 1 in `dir`; returns the
// segment files.
std::vector<std::string> WriteTwoSegments(const std::string& dir) {
  // 30 bytes: two records per segment (8 bytes of magic, 12 of frame header).
  auto log = OpenLog(dir, /*segment_bytes=*/30);
  log->StartRun(1);
  for (const char* record : {"first", "second", "third", "fourth"})
    EXPECT_OK(log->Append(record));
  log.reset();
  return SegmentFiles(dir);
}

// Overwrites one byte of `path` at `offset`.
void Damage(const std::string& path, uint64_t offset) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekp(offset);
  file.put('X');
}

TEST(PushLogTest, TheTornEndOfTheLogIsDropped) {
  const std::string dir = FreshTestDir("push_log_torn");
  const std::vector<std::string> segments = WriteTwoSegments(dir);
  ASSERT_EQ(segments.size(), 2u);
  // A crash in the middle of the last append: its frame is cut short.
  std::filesystem::resize_file(segments[1],
                               std::filesystem::file_size(segments[1]) - 2);
  auto log = OpenLog(dir, 30);
  EXPECT_EQ(ReadAll(*log, 1),
            (std::vector<std::string>{"first", "second", "third"}));
  // Zeros where the last write did not land are a torn end too.
  std::filesystem::resize_file(segments[1], 8 + 12 + 5);  // "third" only
  std::filesystem::resize_file(segments[1], 8 + 12 + 5 + 40);
  EXPECT_EQ(ReadAll(*log, 1),
            (std::vector<std::string>{"first", "second", "third"}));
}

TEST(PushLogTest, DamageInTheMiddleIsDataLossNamingTheFile) {
  const std::string dir = FreshTestDir("push_log_middle");
  const std::vector<std::string> segments = WriteTwoSegments(dir);
  ASSERT_EQ(segments.size(), 2u);
  Damage(segments[0], 8 + 12 + 5 + 12 + 1);  // into "second"
  auto log = OpenLog(dir, 30);
  auto reader = log->ReadRun(1);
  ASSERT_OK(reader);
  std::vector<std::string> records;
  const absl::Status read =
      (*reader)->ForEach([&](PushLog::Location, absl::string_view payload) {
        records.emplace_back(payload);
        return absl::OkStatus();
      });
  EXPECT_EQ(read.code(), absl::StatusCode::kDataLoss) << read;
  EXPECT_NE(read.message().find(segments[0]), std::string::npos) << read;
  EXPECT_NE(read.message().find("1 later segments"), std::string::npos) << read;
}

TEST(PushLogTest, DamageBeforeTheLastRecordIsNotATornEnd) {
  const std::string dir = FreshTestDir("push_log_middle_of_last");
  const std::vector<std::string> segments = WriteTwoSegments(dir);
  Damage(segments[1], 8 + 12 + 1);  // into "third", "fourth" follows
  auto log = OpenLog(dir, 30);
  auto reader = log->ReadRun(1);
  ASSERT_OK(reader);
  EXPECT_EQ((*reader)
                ->ForEach([](PushLog::Location, absl::string_view) {
                  return absl::OkStatus();
                })
                .code(),
            absl::StatusCode::kDataLoss);
}

TEST(PushLogTest, PointInTimeRecoveryReplaysWhatPrecedesTheDamage) {
  const std::string dir = FreshTestDir("push_log_point_in_time");
  const std::vector<std::string> segments = WriteTwoSegments(dir);
  Damage(segments[0], 8 + 12 + 5 + 12 + 1);  // into "second"
  auto log = OpenLog(dir, 30);
  auto reader = log->ReadRun(1);
  ASSERT_OK(reader);
  std::vector<std::string> records;
  ASSERT_OK((*reader)->ForEach(
      [&](PushLog::Location, absl::string_view payload) {
        records.emplace_back(payload);
        return absl::OkStatus();
      },
      PushLogRecovery::kPointInTime));
  // "third" and "fourth" are intact but come after the damage: dropped.
  EXPECT_EQ(records, std::vector<std::string>{"first"});
  EXPECT_EQ((*reader)->dropped_bytes(),
            std::filesystem::file_size(segments[0]) - (8 + 12 + 5) +
                std::filesystem::file_size(segments[1]));
}

TEST(PushLogTest, EachSegmentOpensWithThePreamble) {
  const std::string dir = FreshTestDir("push_log_preamble");
  PushLogOptions options;
  options.dir = dir;
  // The preamble (30 bytes with magic and frame header) and two records.
  options.segment_bytes = 50;
  int calls = 0;
  options.segment_preamble = [&calls] {
    return "preamble " + std::to_string(calls++);
  };
  auto log = PushLog::Open(options);
  ASSERT_OK(log);
  (*log)->StartRun(1);
  int written_calls = 0;
  for (const char* record : {"a", "b", "c"}) {
    auto ticket = (*log)->Write(record, [&] { ++written_calls; });
    ASSERT_OK(ticket);
    ASSERT_OK((*log)->Sync(*ticket));
  }
  EXPECT_EQ(written_calls, 3);
  EXPECT_EQ(ReadAll(**log, 1), (std::vector<std::string>{"preamble 0", "a", "b",
                                                         "preamble 1", "c"}));
}

TEST(PushLogTest, AFileThatIsNotASegmentIsDataLoss) {
  const std::string dir = FreshTestDir("push_log_magic");
  {
    std::ofstream file(dir + "/0000000001-0000000000.pushlog");
    file << "not a push log at all";
  }
  auto log = OpenLog(dir, 1 << 20);
  auto reader = log->ReadRun(1);
  ASSERT_OK(reader);
  const absl::Status read = (*reader)->ForEach(
      [](PushLog::Location, absl::string_view) { return absl::OkStatus(); });
  EXPECT_EQ(read.code(), absl::StatusCode::kDataLoss) << read;
}

TEST(PushLogTest, DeletingSegmentsKeepsTheOpenOneAndOtherRunsGoAtOnce) {
  const std::string dir = FreshTestDir("push_log_delete");
  auto log = OpenLog(dir, /*segment_bytes=*/100);
  log->StartRun(1);
  for (int i = 0; i < 10; ++i) ASSERT_OK(log->Append(std::string(150, 'x')));
  log->StartRun(2);
  for (int i = 0; i < 10; ++i) ASSERT_OK(log->Append(std::string(60, 'y')));
  ASSERT_OK(log->Append("open"));
  const uint64_t current = log->current_segment();
  EXPECT_EQ(log->live_bytes(), FileBytes(dir) - 10 * (8 + 12 + 150));

  // Every closed segment of run 2 below the current one, and nothing of
  // run 1 (other runs are DeleteRunsBefore's).
  ASSERT_OK(log->DeleteSegmentsBefore(current + 10));
  EXPECT_EQ(ReadAll(*log, 2), std::vector<std::string>{"open"});
  EXPECT_EQ(ReadAll(*log, 1).size(), 10u);
  EXPECT_EQ(log->live_bytes(), 8 + 12 + 4u);

  ASSERT_OK(log->DeleteRunsBefore(2));
  EXPECT_TRUE(ReadAll(*log, 1).empty());
  EXPECT_EQ(SegmentFiles(dir).size(), 1u);
  EXPECT_EQ(log->live_bytes(), FileBytes(dir));
}

TEST(PushLogTest, TheLastClosedSegmentStaysUntilTheNextOneExists) {
  // Each segment opens with the preamble; between a segment closing and the
  // next one being created, the closed one (and its preamble) is all there
  // is of what the preambles record, so deleting must leave it.
  const std::string dir = FreshTestDir("push_log_last_closed");
  PushLogOptions options;
  options.dir = dir;
  options.segment_bytes = 40;  // magic, preamble, one record
  options.segment_preamble = [] { return std::string("p"); };
  auto log = PushLog::Open(options);
  ASSERT_OK(log);
  (*log)->StartRun(1);
  ASSERT_OK((*log)->Append(std::string(10, 'a')));  // closes segment 0
  ASSERT_EQ((*log)->current_segment(), 1u);
  ASSERT_OK((*log)->DeleteSegmentsBefore(1));
  EXPECT_EQ(SegmentFiles(dir).size(), 1u) << "the only preamble was deleted";
  ASSERT_OK((*log)->Append("b"));  // creates segment 1, with its preamble
  ASSERT_OK((*log)->DeleteSegmentsBefore(1));
  EXPECT_EQ(ReadAll(**log, 1), (std::vector<std::string>{"p", "b"}));
}

TEST(PushLogTest, AFullDiskIsTransientForEveryWriteUntilRecovered) {
  const std::string dir = FreshTestDir("push_log_full");
  auto child = [&] {
    auto log = OpenLog(dir, /*segment_bytes=*/1 << 20);
    log->StartRun(1);
    // No file of this process may grow past 16 kB (EFBIG, as a full disk).
    std::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit = {16 << 10, RLIM_INFINITY};
    if (setrlimit(RLIMIT_FSIZE, &limit) != 0) std::_Exit(1);
    absl::Status failed;
    for (int i = 0; i < 100 && failed.ok(); ++i)
      failed = log->Append(std::string(1000, 'r'));
    if (failed.ok() || !IsTransient(failed)) std::_Exit(2);
    // A write that comes after (another pusher's, say) is refused just as
    // transiently, without trying.
    if (absl::Status again = log->Append("x");
        again.ok() || !IsTransient(again))
      std::_Exit(3);
    if (!IsTransient(log->health())) std::_Exit(4);
    const rlimit lifted = {RLIM_INFINITY, RLIM_INFINITY};
    if (setrlimit(RLIMIT_FSIZE, &lifted) != 0) std::_Exit(5);
    if (!log->Recover().ok() || !log->Append("after").ok()) std::_Exit(6);
    std::_Exit(0);
  };
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(0), "");
  // What was written before the disk filled, then "after": no torn frame.
  auto log = OpenLog(dir, 1 << 20);
  const std::vector<std::string> records = ReadAll(*log, 1);
  ASSERT_FALSE(records.empty());
  EXPECT_EQ(records.back(), "after");
}

TEST(PushLogTest, SyncedAppendsFromManyThreadsAllLand) {
  const std::string dir = FreshTestDir("push_log_sync");
  PushLogOptions options;
  options.dir = dir;
  options.segment_bytes = 64 << 10;  // rotations while threads sync
  options.sync = true;
  auto log = PushLog::Open(options);
  ASSERT_OK(log);
  (*log)->StartRun(1);
  constexpr int kThreads = 6, kRecords = 150;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRecords; ++i) {
        // Distinct, self-describing records of varying size.
        const std::string record =
            std::to_string(t) + ":" + std::to_string(i) + ":" +
            std::string(100 + (t * 37 + i * 11) % 400, 'a' + t);
        EXPECT_OK((*log)->Append(record));
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_GE((*log)->syncs(), 1u);
  EXPECT_LE((*log)->syncs(), uint64_t{kThreads * kRecords});
  std::vector<std::string> records = ReadAll(**log, 1);
  ASSERT_EQ(records.size(), size_t{kThreads * kRecords});
  std::sort(records.begin(), records.end());
  EXPECT_EQ(std::unique(records.begin(), records.end()), records.end());
  for (const std::string& record : records) {
    const int t = record[0] - '0';
    const size_t tail = record.rfind(':') + 1;
    EXPECT_EQ(record.substr(tail), std::string(record.size() - tail, 'a' + t));
  }
  // The same count again after a restart with the same run's files.
  log->reset();
  EXPECT_EQ(ReadAll(*OpenLog(dir, 64 << 10), 1).size(),
            size_t{kThreads * kRecords});
}

TEST(PushLogTest, AnOversizedPayloadIsRefused) {
  const std::string dir = FreshTestDir("push_log_oversized");
  auto log = OpenLog(dir, 1 << 20);
  log->StartRun(1);
  // A view that claims 4 GiB: Append must refuse before touching the bytes.
  const char byte = 0;
  const absl::Status appended =
      log->Append(absl::string_view(&byte, uint64_t{1} << 32));
  EXPECT_EQ(appended.code(), absl::StatusCode::kInvalidArgument) << appended;
  EXPECT_EQ(log->live_bytes(), 0u);
}

}  // namespace
}  // namespace ps::embedding
