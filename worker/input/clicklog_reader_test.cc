#include "worker/input/clicklog_reader.h"

#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/status_matchers.h"
#include "gtest/gtest.h"
#include "worker/datagen/clicklog_generator.h"

namespace ps::worker {
namespace {

std::string TestDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return tmp ? tmp : "/tmp";
}

std::vector<std::string> GenerateLines(int count) {
  ClickLogGenerator generator(GeneratorOptions(), 9);
  std::vector<std::string> lines(count);
  double probability;
  for (auto& line : lines) generator.Next(&line, &probability);
  return lines;
}

void WritePlain(const std::string& path,
                const std::vector<std::string>& lines) {
  std::ofstream out(path);
  for (const auto& line : lines) out << line << "\n";
}

void WriteGzip(const std::string& path, const std::vector<std::string>& lines) {
  gzFile out = gzopen(path.c_str(), "wb");
  for (const auto& line : lines) {
    gzwrite(out, line.data(), line.size());
    gzwrite(out, "\n", 1);
  }
  gzclose(out);
}

std::vector<model::Example> ReadAll(const ReaderOptions& options,
                                    int64_t* bad_lines = nullptr) {
  auto reader = ClickLogReader::Open(options);
  EXPECT_OK(reader);
  std::vector<model::Example> all, batch;
  while (true) {
    auto more = (*reader)->Next(&batch);
    EXPECT_OK(more);
    if (!more.ok() || !*more) break;
    EXPECT_LE(batch.size(), static_cast<size_t>(options.batch_size));
    all.insert(all.end(), batch.begin(), batch.end());
  }
  if (bad_lines != nullptr) *bad_lines = (*reader)->bad_lines();
  return all;
}

bool SameExample(const model::Example& a, const model::Example& b) {
  return a.label == b.label && a.keys == b.keys && a.dense == b.dense &&
         a.slot_end == b.slot_end;
}

TEST(ClickLogReaderTest, GzipInputEqualsPlainInput) {
  const std::vector<std::string> lines = GenerateLines(1000);
  WritePlain(TestDir() + "/plain.tsv", lines);
  WriteGzip(TestDir() + "/packed.tsv.gz", lines);
  ReaderOptions options;
  options.batch_size = 64;
  options.files = TestDir() + "/plain.tsv";
  const std::vector<model::Example> plain = ReadAll(options);
  options.files = TestDir() + "/packed.tsv.gz";
  const std::vector<model::Example> gzip = ReadAll(options);
  ASSERT_EQ(plain.size(), 1000u);
  ASSERT_EQ(gzip.size(), plain.size());
  for (size_t i = 0; i < plain.size(); ++i)
    ASSERT_TRUE(SameExample(plain[i], gzip[i])) << i;
}

TEST(ClickLogReaderTest, WorkersSplitLinesOverManyFilesWithoutOverlap) {
  const std::vector<std::string> lines = GenerateLines(301);
  std::filesystem::create_directories(TestDir() + "/parts");
  WritePlain(TestDir() + "/parts/part-0.tsv",
             std::vector<std::string>(lines.begin(), lines.begin() + 100));
  WriteGzip(TestDir() + "/parts/part-1.tsv.gz",
            std::vector<std::string>(lines.begin() + 100, lines.end()));
  ReaderOptions options;
  options.files = TestDir() + "/parts/part-*";
  options.batch_size = 10;
  options.num_workers = 3;
  size_t total = 0;
  for (int w = 0; w < 3; ++w) {
    options.worker_index = w;
    const std::vector<model::Example> mine = ReadAll(options);
    total += mine.size();
    // Worker w takes global lines w, w + 3, ...
    ReaderOptions single;
    single.files = TestDir() + "/parts/part-*";
    const std::vector<model::Example> everything = ReadAll(single);
    for (size_t i = 0; i < mine.size(); ++i) {
      ASSERT_TRUE(SameExample(mine[i], everything[w + 3 * i])) << w << " " << i;
    }
  }
  EXPECT_EQ(total, 301u);
}

TEST(ClickLogReaderTest, EpochsRepeatTheData) {
  WritePlain(TestDir() + "/epochs.tsv", GenerateLines(50));
  ReaderOptions options;
  options.files = TestDir() + "/epochs.tsv";
  options.epochs = 3;
  options.batch_size = 16;
  EXPECT_EQ(ReadAll(options).size(), 150u);
}

TEST(ClickLogReaderTest, MalformedLinesAreCountedAndSkipped) {
  std::vector<std::string> lines = GenerateLines(200);
  lines[3] = "garbage";
  lines[50] = "2" + lines[50].substr(1);  // bad label
  lines[120] = "";
  WritePlain(TestDir() + "/bad.tsv", lines);
  ReaderOptions options;
  options.files = TestDir() + "/bad.tsv";
  int64_t bad = 0;
  EXPECT_EQ(ReadAll(options, &bad).size(), 197u);
  EXPECT_EQ(bad, 3);
}

TEST(ClickLogReaderTest, TooManyMalformedLinesStopWithAClearError) {
  std::vector<std::string> lines = GenerateLines(100);
  for (int i = 0; i < 10; ++i) lines[i * 7] = "not\ta\tclick\tlog";
  WritePlain(TestDir() + "/worse.tsv", lines);
  ReaderOptions options;
  options.files = TestDir() + "/worse.tsv";
  options.max_bad_lines = 5;
  auto reader = ClickLogReader::Open(options);
  ASSERT_OK(reader);
  std::vector<model::Example> batch;
  absl::StatusOr<bool> more = true;
  while (more.ok() && *more) more = (*reader)->Next(&batch);
  EXPECT_THAT(more, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_NE(more.status().message().find("max_bad_lines"), std::string::npos);
}

TEST(ClickLogReaderTest, MissingFilesAndBadOptionsAreErrors) {
  ReaderOptions options;
  options.files = TestDir() + "/does-not-exist-*.tsv";
  EXPECT_THAT(ClickLogReader::Open(options),
              StatusIs(absl::StatusCode::kNotFound));
  WritePlain(TestDir() + "/ok.tsv", GenerateLines(1));
  options.files = TestDir() + "/ok.tsv";
  options.worker_index = 2;
  options.num_workers = 2;
  EXPECT_THAT(ClickLogReader::Open(options),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// A key that identifies an example (its first field's key and the second's
// are drawn from vocabularies of millions, so lines rarely share both).
std::multiset<std::pair<uint64_t, uint64_t>> Identities(
    const std::vector<model::Example>& examples) {
  std::multiset<std::pair<uint64_t, uint64_t>> identities;
  for (const model::Example& example : examples) {
    std::pair<uint64_t, uint64_t> identity = {0, 0};
    for (size_t k = 0; k < example.keys.size(); ++k) {
      identity.first = identity.first * 31 + example.keys[k];
      identity.second ^= example.keys[k] * (k + 1);
    }
    identities.insert(identity);
  }
  return identities;
}

TEST(ClickLogReaderTest, WorkersTakeWholeFilesWhenThereAreEnough) {
  const std::vector<std::string> lines = GenerateLines(90);
  std::filesystem::create_directories(TestDir() + "/many");
  for (int f = 0; f < 5; ++f) {
    WritePlain(TestDir() + "/many/part-" + std::to_string(f) + ".tsv",
               std::vector<std::string>(lines.begin() + 18 * f,
                                        lines.begin() + 18 * (f + 1)));
  }
  ReaderOptions options;
  options.files = TestDir() + "/many/part-*.tsv";
  options.num_workers = 2;
  options.batch_size = 7;
  std::vector<model::Example> everything;
  for (int w = 0; w < 2; ++w) {
    options.worker_index = w;
    auto reader = ClickLogReader::Open(options);
    ASSERT_OK(reader);
    EXPECT_EQ((*reader)->share_mode(), ShareMode::kWholeFiles);
    const std::vector<model::Example> mine = ReadAll(options);
    // Worker 0: files 0, 2, 4; worker 1: files 1, 3.
    ASSERT_EQ(mine.size(), w == 0 ? 54u : 36u);
    ReaderOptions file;
    file.files = TestDir() + "/many/part-" + std::to_string(w) + ".tsv";
    const std::vector<model::Example> first = ReadAll(file);
    for (size_t i = 0; i < first.size(); ++i)
      ASSERT_TRUE(SameExample(mine[i], first[i])) << w << " " << i;
    everything.insert(everything.end(), mine.begin(), mine.end());
  }
  ReaderOptions single;
  single.files = options.files;
  EXPECT_EQ(Identities(everything), Identities(ReadAll(single)));
}

TEST(ClickLogReaderTest, WorkersTakeByteRangesOfOnePlainFile) {
  const std::vector<std::string> lines = GenerateLines(1001);
  WritePlain(TestDir() + "/one.tsv", lines);
  ReaderOptions single;
  single.files = TestDir() + "/one.tsv";
  const std::vector<model::Example> all = ReadAll(single);
  ASSERT_EQ(all.size(), 1001u);
  for (int workers : {2, 3, 7}) {
    ReaderOptions options = single;
    options.num_workers = workers;
    options.batch_size = 50;
    std::vector<model::Example> everything;
    for (int w = 0; w < workers; ++w) {
      options.worker_index = w;
      auto reader = ClickLogReader::Open(options);
      ASSERT_OK(reader);
      EXPECT_EQ((*reader)->share_mode(), ShareMode::kByteRanges);
      const std::vector<model::Example> mine = ReadAll(options);
      // About an equal share, and consecutive lines of the file.
      EXPECT_NEAR(mine.size(), 1001.0 / workers, 1001.0 / workers / 5);
      everything.insert(everything.end(), mine.begin(), mine.end());
    }
    ASSERT_EQ(everything.size(), all.size()) << workers;
    for (size_t i = 0; i < all.size(); ++i)
      ASSERT_TRUE(SameExample(everything[i], all[i])) << workers << " " << i;
  }
}

TEST(ClickLogReaderTest, WorkersStrideOverOneGzipFile) {
  // A gzip stream cannot be entered in the middle: each of n workers
  // decompresses it and keeps lines i, i + n, ...
  const std::vector<std::string> lines = GenerateLines(301);
  WriteGzip(TestDir() + "/one.tsv.gz", lines);
  ReaderOptions single;
  single.files = TestDir() + "/one.tsv.gz";
  const std::vector<model::Example> all = ReadAll(single);
  ASSERT_EQ(all.size(), 301u);
  const int workers = 3;
  for (int w = 0; w < workers; ++w) {
    ReaderOptions options = single;
    options.num_workers = workers;
    options.worker_index = w;
    options.batch_size = 40;
    auto reader = ClickLogReader::Open(options);
    ASSERT_OK(reader);
    EXPECT_EQ((*reader)->share_mode(), ShareMode::kLineStride);
    const std::vector<model::Example> mine = ReadAll(options);
    ASSERT_EQ(mine.size(), (all.size() - w + workers - 1) / workers) << w;
    for (size_t i = 0; i < mine.size(); ++i) {
      ASSERT_TRUE(SameExample(mine[i], all[w + i * workers]))
          << "worker " << w << " line " << i;
    }
  }
}

TEST(ClickLogReaderTest, AHeaderIsSkippedOncePerFile) {
  const std::vector<std::string> lines = GenerateLines(40);
  std::vector<std::string> with_header = {"label\tI1\t...\tC26"};
  with_header.insert(with_header.end(), lines.begin(), lines.end());
  WritePlain(TestDir() + "/header.tsv", with_header);
  WriteGzip(TestDir() + "/header.tsv.gz", with_header);
  ReaderOptions options;
  options.layout.header = true;
  options.files = TestDir() + "/header.tsv," + TestDir() + "/header.tsv.gz";
  int64_t bad = -1;
  EXPECT_EQ(ReadAll(options, &bad).size(), 80u);
  EXPECT_EQ(bad, 0);
  // Split in byte ranges, only the first range starts at the header.
  options.files = TestDir() + "/header.tsv";
  options.num_workers = 3;
  size_t total = 0;
  for (int w = 0; w < 3; ++w) {
    options.worker_index = w;
    total += ReadAll(options, &bad).size();
    EXPECT_EQ(bad, 0);
  }
  EXPECT_EQ(total, 40u);
}

TEST(ClickLogReaderTest, AShuffleBufferReordersEachEpochDifferently) {
  WritePlain(TestDir() + "/shuffle.tsv", GenerateLines(300));
  ReaderOptions options;
  options.files = TestDir() + "/shuffle.tsv";
  options.batch_size = 32;
  const std::vector<model::Example> ordered = ReadAll(options);
  options.shuffle_buffer = 64;
  options.epochs = 2;
  const std::vector<model::Example> shuffled = ReadAll(options);
  ASSERT_EQ(shuffled.size(), 600u);
  const std::vector<model::Example> first(shuffled.begin(),
                                          shuffled.begin() + 300);
  const std::vector<model::Example> second(shuffled.begin() + 300,
                                           shuffled.end());
  // Each epoch holds every example once, in an order of its own.
  EXPECT_EQ(Identities(first), Identities(ordered));
  EXPECT_EQ(Identities(second), Identities(ordered));
  auto same_order = [](const std::vector<model::Example>& a,
                       const std::vector<model::Example>& b) {
    for (size_t i = 0; i < a.size(); ++i)
      if (!SameExample(a[i], b[i])) return false;
    return true;
  };
  EXPECT_FALSE(same_order(first, ordered));
  EXPECT_FALSE(same_order(first, second));
  // The same seed repeats it; another seed does not.
  const std::vector<model::Example> again = ReadAll(options);
  EXPECT_TRUE(same_order(again, shuffled));
  options.shuffle_seed = 2;
  EXPECT_FALSE(same_order(ReadAll(options), shuffled));
}

TEST(ClickLogReaderTest, ARangeThatStartsAtALineStartKeepsThatLine) {
  // Twelve lines of equal length: three workers' ranges start exactly at
  // lines 4 and 8.
  std::vector<std::string> lines;
  for (int i = 0; i < 12; ++i) {
    std::string line = "1";
    for (int d = 0; d < 13; ++d) line += "\t7";
    for (int c = 0; c < 26; ++c) line += "\tv" + std::to_string(100 + i);
    lines.push_back(line);
  }
  WritePlain(TestDir() + "/even.tsv", lines);
  ReaderOptions options;
  options.files = TestDir() + "/even.tsv";
  options.num_workers = 3;
  for (int w = 0; w < 3; ++w) {
    options.worker_index = w;
    const std::vector<model::Example> mine = ReadAll(options);
    ASSERT_EQ(mine.size(), 4u) << w;
    EXPECT_EQ(mine[0].keys[0],
              model::FeatureKey(0, "v" + std::to_string(100 + 4 * w)));
  }
}

}  // namespace
}  // namespace ps::worker
