#include "worker/input/follow_reader.h"

#include <zlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_matchers.h"
#include "gtest/gtest.h"

namespace ps::worker {
namespace {

// A fresh directory for one test.
std::string FreshDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp ? tmp : "/tmp", "/", name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// Lines "<label>\t<id>\t<category>" whose ids are `prefix`0 .. `prefix`n-1.
std::vector<std::string> Lines(const std::string& prefix, int count) {
  std::vector<std::string> lines;
  for (int i = 0; i < count; ++i) {
    lines.push_back(absl::StrCat(i % 2, "\t", prefix, i, "\tc", i % 7));
  }
  return lines;
}

// Writes `lines` to dir/name (gzip'd if it ends in .gz), then its marker
// unless `complete` is false.
void WriteFile(const std::string& dir, const std::string& name,
               const std::vector<std::string>& lines, bool complete = true) {
  const std::string path = dir + "/" + name;
  if (name.size() > 3 && name.substr(name.size() - 3) == ".gz") {
    gzFile out = gzopen(path.c_str(), "wb");
    for (const std::string& line : lines) {
      gzwrite(out, line.data(), line.size());
      gzwrite(out, "\n", 1);
    }
    gzclose(out);
  } else {
    std::ofstream out(path);
    for (const std::string& line : lines) out << line << "\n";
  }
  if (complete) std::ofstream(path + ".done");
}

FollowOptions Options(const std::string& dir) {
  FollowOptions options;
  options.dir = dir;
  options.poll = absl::Milliseconds(10);
  absl::StatusOr<model::InputLayout> layout =
      model::MakeInputLayout("tsv", false, "label,id,cat", "|", "sum", "");
  EXPECT_OK(layout);
  options.reader.layout = *layout;
  options.reader.batch_size = 4;
  return options;
}

// What `reader` gives until it ends: "<file>:<id>" per example; and, if
// `ends` is given, the files whose last batch said so.
std::vector<std::string> ReadToEnd(FollowReader& reader,
                                   std::vector<std::string>* ends = nullptr) {
  std::vector<std::string> read;
  std::vector<model::Example> batch;
  while (true) {
    absl::StatusOr<bool> more = reader.Next(&batch);
    EXPECT_OK(more);
    if (!more.ok() || !*more) break;
    for (const model::Example& example : batch) {
      read.push_back(absl::StrCat(reader.batch_file(), ":", example.id));
    }
    if (ends != nullptr && reader.batch_ends_file())
      ends->push_back(absl::StrCat(reader.batch_file(), "@", read.size()));
  }
  return read;
}

std::vector<std::string> Tagged(const std::string& file,
                                const std::string& prefix, int count) {
  std::vector<std::string> tagged;
  for (int i = 0; i < count; ++i)
    tagged.push_back(absl::StrCat(file, ":", prefix, i));
  return tagged;
}

TEST(FollowReaderTest, TakesCompleteFilesInNameOrderAndWaitsForNewOnes) {
  const std::string dir = FreshDir("in_order");
  WriteFile(dir, "02.tsv", Lines("b", 5));
  WriteFile(dir, "01.tsv.gz", Lines("a", 6));
  // Not complete yet, and never data: a hidden file and a marker alone.
  WriteFile(dir, "03.tsv", Lines("c", 3), /*complete=*/false);
  WriteFile(dir, ".04.tsv", Lines("x", 3));
  std::ofstream(dir + "/05.tsv.done");
  FollowOptions options = Options(dir);
  options.until = "06.tsv";
  absl::StatusOr<std::unique_ptr<FollowReader>> reader =
      FollowReader::Open(options);
  ASSERT_OK(reader);
  // 03 completes and 06 arrives while the reader waits.
  std::thread writer([&] {
    absl::SleepFor(absl::Milliseconds(200));
    std::ofstream(dir + "/03.tsv.done");
    absl::SleepFor(absl::Milliseconds(200));
    WriteFile(dir, "06.tsv", Lines("f", 2));
  });
  std::vector<std::string> ends;
  const std::vector<std::string> read = ReadToEnd(**reader, &ends);
  writer.join();
  // Each file's last batch says so, as it is returned.
  EXPECT_EQ(ends, std::vector<std::string>(
                      {"01.tsv.gz@6", "02.tsv@11", "03.tsv@14", "06.tsv@16"}));
  std::vector<std::string> expected = Tagged("01.tsv.gz", "a", 6);
  for (const auto& more : {Tagged("02.tsv", "b", 5), Tagged("03.tsv", "c", 3),
                           Tagged("06.tsv", "f", 2)}) {
    expected.insert(expected.end(), more.begin(), more.end());
  }
  EXPECT_EQ(read, expected);
  EXPECT_EQ((*reader)->files_taken(), 4);
  EXPECT_EQ((*reader)->lines(), 16);
}

TEST(FollowReaderTest, EveryWorkerReadsItsShareOfEveryFile) {
  const std::string dir = FreshDir("shares");
  WriteFile(dir, "a.tsv", Lines("a", 23));
  WriteFile(dir, "b.tsv.gz", Lines("b", 17));
  std::multiset<std::string> all;
  for (int worker = 0; worker < 3; ++worker) {
    FollowOptions options = Options(dir);
    options.until = "b.tsv.gz";
    options.reader.worker_index = worker;
    options.reader.num_workers = 3;
    absl::StatusOr<std::unique_ptr<FollowReader>> reader =
        FollowReader::Open(options);
    ASSERT_OK(reader);
    const std::vector<std::string> read = ReadToEnd(**reader);
    std::set<std::string> files;
    for (const std::string& example : read) {
      files.insert(example.substr(0, example.find(':')));
    }
    // Each worker has lines of both files.
    EXPECT_EQ(files.size(), 2u) << worker;
    all.insert(read.begin(), read.end());
  }
  std::vector<std::string> expected = Tagged("a.tsv", "a", 23);
  const std::vector<std::string> b = Tagged("b.tsv.gz", "b", 17);
  expected.insert(expected.end(), b.begin(), b.end());
  EXPECT_EQ(all, std::multiset<std::string>(expected.begin(), expected.end()));
}

TEST(FollowReaderTest, GoesOnFromAPositionWithoutReadingEarlierFiles) {
  const std::string dir = FreshDir("position");
  WriteFile(dir, "1.tsv", Lines("a", 10));
  WriteFile(dir, "2.tsv", Lines("b", 10));
  WriteFile(dir, "3.tsv", Lines("c", 3));
  FollowOptions options = Options(dir);
  options.until = "3.tsv";
  options.start = {"2.tsv", 8};  // two whole batches of 4
  absl::StatusOr<std::unique_ptr<FollowReader>> reader =
      FollowReader::Open(options);
  ASSERT_OK(reader);
  std::vector<std::string> expected = {"2.tsv:b8", "2.tsv:b9"};
  const std::vector<std::string> c = Tagged("3.tsv", "c", 3);
  expected.insert(expected.end(), c.begin(), c.end());
  EXPECT_EQ(ReadToEnd(**reader), expected);
  // 1.tsv was not read at all.
  EXPECT_EQ((*reader)->lines(), 13);

  // A position that is not on a batch boundary of the file is refused.
  options.start = {"2.tsv", 7};
  reader = FollowReader::Open(options);
  ASSERT_OK(reader);
  std::vector<model::Example> batch;
  absl::StatusOr<bool> more = (*reader)->Next(&batch);
  EXPECT_EQ(more.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(more.status().message().find("7 examples of"), std::string::npos)
      << more.status();
}

TEST(FollowReaderTest, AFileThatArrivesAfterALaterNameIsLeftOut) {
  const std::string dir = FreshDir("late");
  WriteFile(dir, "10.tsv", Lines("a", 2));
  FollowOptions options = Options(dir);
  options.until = "30.tsv";
  absl::StatusOr<std::unique_ptr<FollowReader>> reader =
      FollowReader::Open(options);
  ASSERT_OK(reader);
  std::vector<model::Example> batch;
  ASSERT_OK((*reader)->Next(&batch));
  EXPECT_EQ((*reader)->batch_file(), "10.tsv");
  // 05 comes after 10 was taken; 30 ends the run.
  WriteFile(dir, "05.tsv", Lines("late", 2));
  WriteFile(dir, "30.tsv", Lines("c", 1));
  std::vector<std::string> rest = ReadToEnd(**reader);
  EXPECT_EQ(rest, std::vector<std::string>({"30.tsv:c0"}));
  EXPECT_EQ((*reader)->late_files(), 1);
}

TEST(FollowReaderTest, CancelEndsAWait) {
  const std::string dir = FreshDir("cancel");
  FollowOptions options = Options(dir);
  options.poll = absl::Seconds(30);
  absl::StatusOr<std::unique_ptr<FollowReader>> reader =
      FollowReader::Open(options);
  ASSERT_OK(reader);
  std::thread canceller([&] {
    absl::SleepFor(absl::Milliseconds(100));
    (*reader)->Cancel();
  });
  const absl::Time start = absl::Now();
  std::vector<model::Example> batch;
  absl::StatusOr<bool> more = (*reader)->Next(&batch);
  canceller.join();
  ASSERT_OK(more);
  EXPECT_FALSE(*more);
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
}

TEST(FollowReaderTest, BadOptionsAreErrors) {
  FollowOptions options = Options(FreshDir("bad"));
  options.dir += "/missing";
  EXPECT_EQ(FollowReader::Open(options).status().code(),
            absl::StatusCode::kNotFound);
  options = Options(FreshDir("bad"));
  options.reader.worker_index = 2;
  options.reader.num_workers = 2;
  EXPECT_EQ(FollowReader::Open(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps::worker
