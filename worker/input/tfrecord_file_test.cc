#include "worker/input/tfrecord_file.h"

#include <zlib.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_matchers.h"
#include "base/test_dirs.h"
#include "gtest/gtest.h"
#include "proto/tf_example.pb.h"
#include "worker/input/clicklog_reader.h"

namespace ps::worker {
namespace {

std::string LittleEndian(uint64_t value, int bytes) {
  std::string out;
  for (int i = 0; i < bytes; ++i)
    out.push_back(static_cast<char>(value >> (8 * i)));
  return out;
}

// One record as TFRecord frames it.
std::string Frame(const std::string& data) {
  const std::string length = LittleEndian(data.size(), 8);
  return length + LittleEndian(MaskCrc(Crc32c(length)), 4) + data +
         LittleEndian(MaskCrc(Crc32c(data)), 4);
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

void WriteGzip(const std::string& path, const std::string& bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr);
  ASSERT_EQ(gzwrite(file, bytes.data(), bytes.size()),
            static_cast<int>(bytes.size()));
  gzclose(file);
}

// The records of `path` until the end or a broken frame, with each bad one
// as "bad@OFFSET" or "lost@OFFSET".
std::vector<std::string> ReadAll(const std::string& path, bool gzip) {
  auto file = TfRecordFile::Open(path, gzip);
  EXPECT_TRUE(file.ok()) << file.status();
  std::vector<std::string> records;
  std::string record, why;
  while (true) {
    const TfRecordFile::Outcome outcome = (*file)->Next(&record, &why);
    if (outcome == TfRecordFile::Outcome::kEnd) break;
    if (outcome == TfRecordFile::Outcome::kRecord) {
      records.push_back(record);
    } else if (outcome == TfRecordFile::Outcome::kBadRecord) {
      records.push_back(absl::StrCat("bad@", (*file)->record_offset()));
    } else {
      records.push_back(absl::StrCat("lost@", (*file)->record_offset()));
      break;
    }
  }
  return records;
}

TEST(TfRecordFileTest, Crc32cIsCastagnolis) {
  // The CRC-32C check value (RFC 3720's polynomial; iSCSI, ext4, TFRecord).
  EXPECT_EQ(Crc32c("123456789"), 0xe3069283u);
  EXPECT_EQ(Crc32c(""), 0u);
  EXPECT_EQ(MaskCrc(0), 0xa282ead8u);
  // Rotated right by 15, plus the constant (TFRecord's masked CRC).
  EXPECT_EQ(MaskCrc(0xe3069283u), 0xc78ab0e5u);
}

TEST(TfRecordFileTest, RecordsAndDamage) {
  const std::string dir = FreshTestDir("tfrecord_file");
  const std::string good = Frame("first") + Frame("") + Frame("third");
  WriteFile(dir + "/good", good);
  WriteGzip(dir + "/good.gz", good);
  const std::vector<std::string> all = {"first", "", "third"};
  EXPECT_EQ(ReadAll(dir + "/good", false), all);
  EXPECT_EQ(ReadAll(dir + "/good.gz", true), all);

  // The second record's data byte flipped: it alone is bad.
  const size_t second = Frame("first").size();
  std::string damaged = Frame("first") + Frame("second") + Frame("third");
  damaged[second + 12] ^= 1;
  WriteFile(dir + "/data", damaged);
  EXPECT_EQ(ReadAll(dir + "/data", false),
            (std::vector<std::string>{"first", absl::StrCat("bad@", second),
                                      "third"}));
  // Its length's byte flipped: the rest is lost.
  damaged = Frame("first") + Frame("second") + Frame("third");
  damaged[second] ^= 4;
  WriteFile(dir + "/length", damaged);
  EXPECT_EQ(ReadAll(dir + "/length", false),
            (std::vector<std::string>{"first", absl::StrCat("lost@", second)}));
  // Cut inside the third record, and inside a header.
  const std::string cut = Frame("first") + Frame("second");
  WriteFile(dir + "/cut", cut + Frame("third").substr(0, 15));
  EXPECT_EQ(ReadAll(dir + "/cut", false),
            (std::vector<std::string>{"first", "second",
                                      absl::StrCat("lost@", cut.size())}));
  WriteFile(dir + "/header", cut + std::string("\x05\x00", 2));
  EXPECT_EQ(ReadAll(dir + "/header", false).back(),
            absl::StrCat("lost@", cut.size()));
}

// tf.Example records through ClickLogReader: shared between workers, bad
// ones counted and skipped.
TEST(TfRecordFileTest, TheReaderSharesAndCountsRecords) {
  const std::string dir = FreshTestDir("tfrecord_reader");
  std::string bytes;
  for (int i = 0; i < 10; ++i) {
    tfexample::Example example;
    auto& features = *example.mutable_features()->mutable_feature();
    features["y"].mutable_int64_list()->add_value(i % 2);
    features["x"].mutable_float_list()->add_value(static_cast<float>(i));
    features["c"].mutable_bytes_list()->add_value(absl::StrCat("v", i));
    std::string frame = Frame(example.SerializeAsString());
    if (i == 4) frame[frame.size() - 1] ^= 1;  // record 4's data CRC
    bytes += frame;
  }
  WriteGzip(dir + "/data.tfrecord.gz", bytes);
  absl::StatusOr<model::InputLayout> layout = model::MakeInputLayout(
      "tfrecord", false, "label:y,dense:x,cat:c", "|", "sum", "");
  ASSERT_TRUE(layout.ok()) << layout.status();
  std::vector<double> seen;
  for (int worker = 0; worker < 2; ++worker) {
    ReaderOptions options;
    options.files = dir + "/data.tfrecord.gz";
    options.layout = *layout;
    options.worker_index = worker;
    options.num_workers = 2;
    options.batch_size = 100;
    options.max_bad_lines = 1;
    auto reader = ClickLogReader::Open(options);
    ASSERT_TRUE(reader.ok()) << reader.status();
    EXPECT_EQ((*reader)->share_mode(), ShareMode::kLineStride);
    std::vector<model::Example> batch;
    while (true) {
      absl::StatusOr<bool> more = (*reader)->Next(&batch);
      ASSERT_TRUE(more.ok()) << more.status();
      if (!*more) break;
      for (const model::Example& example : batch) {
        seen.push_back(example.dense[0]);
        EXPECT_EQ(example.labels[0], static_cast<int>(example.dense[0]) % 2);
      }
    }
    EXPECT_EQ((*reader)->lines(), 5);
    EXPECT_EQ((*reader)->bad_lines(), worker == 0 ? 1 : 0);
  }
  // Every record's x but record 4's, each read by one worker.
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<double>{0, 1, 2, 3, 5, 6, 7, 8, 9}));
}

}  // namespace
}  // namespace ps::worker
