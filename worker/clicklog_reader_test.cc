#include "worker/clicklog_reader.h"

#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/status_matchers.h"
#include "gtest/gtest.h"
#include "worker/clicklog_generator.h"

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

std::vector<Example> ReadAll(const ReaderOptions& options,
                             int64_t* bad_lines = nullptr) {
  auto reader = ClickLogReader::Open(options);
  EXPECT_OK(reader);
  std::vector<Example> all, batch;
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

bool SameExample(const Example& a, const Example& b) {
  return a.label == b.label &&
         std::equal(a.keys, a.keys + kCategoricalFields, b.keys) &&
         std::equal(a.dense, a.dense + kDenseFeatures, b.dense);
}

TEST(ClickLogReaderTest, GzipInputEqualsPlainInput) {
  const std::vector<std::string> lines = GenerateLines(1000);
  WritePlain(TestDir() + "/plain.tsv", lines);
  WriteGzip(TestDir() + "/packed.tsv.gz", lines);
  ReaderOptions options;
  options.batch_size = 64;
  options.files = TestDir() + "/plain.tsv";
  const std::vector<Example> plain = ReadAll(options);
  options.files = TestDir() + "/packed.tsv.gz";
  const std::vector<Example> gzip = ReadAll(options);
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
    const std::vector<Example> mine = ReadAll(options);
    total += mine.size();
    // Worker w takes global lines w, w + 3, ...
    ReaderOptions single;
    single.files = TestDir() + "/parts/part-*";
    const std::vector<Example> everything = ReadAll(single);
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
  std::vector<Example> batch;
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

}  // namespace
}  // namespace ps::worker
