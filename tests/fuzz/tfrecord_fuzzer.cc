// Fuzz target: bytes as a TFRecord file, read record by record
// (worker/input/tfrecord_file.h), each good record parsed as a tf.Example
// in a layout of every kind (model/input/tf_example.h). Reading must end,
// each record's offset must lie past the one before and inside the file, a
// record that parses must give labels of 0 or 1, finite dense values and a
// key in every slot, and a refused one must be INVALID_ARGUMENT.

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "model/input/tf_example.h"
#include "tests/fuzz/example_checks.h"
#include "worker/input/tfrecord_file.h"

namespace {

void CheckExample(const std::string& record,
                  const ps::model::InputLayout& layout) {
  ps::model::Example example;
  static const ps::model::TfExampleParser parser(layout);
  const absl::Status parsed = parser.Parse(record, &example);
  if (!parsed.ok()) {
    if (parsed.code() != absl::StatusCode::kInvalidArgument) std::abort();
    return;
  }
  ps::fuzz::CheckParsedExample(example, layout);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ps::model::InputLayout layout = *ps::model::MakeInputLayout(
      "tfrecord", false,
      "label:click,dense:price,cat:user,multi:tags,seq:history:0,id:rid,"
      "weight:w",
      "|", "mean", "0:1");
  static const std::string path = [] {
    char name[] = "/tmp/tfrecord_fuzzer_XXXXXX";
    const int fd = mkstemp(name);
    if (fd < 0) std::abort();
    close(fd);
    return std::string(name);
  }();
  FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, file) != size) std::abort();
  std::fclose(file);

  auto reader = ps::worker::TfRecordFile::Open(path, /*gzip=*/false);
  if (!reader.ok()) std::abort();
  std::string record, why;
  int64_t last_offset = -1;
  for (size_t records = 0;; ++records) {
    if (records > size) std::abort();  // each record takes 16 bytes or more
    const ps::worker::TfRecordFile::Outcome outcome =
        (*reader)->Next(&record, &why);
    if (outcome == ps::worker::TfRecordFile::Outcome::kEnd) break;
    const int64_t offset = (*reader)->record_offset();
    if (offset <= last_offset || offset >= static_cast<int64_t>(size))
      std::abort();
    last_offset = offset;
    if (outcome == ps::worker::TfRecordFile::Outcome::kBadFraming) break;
    if (outcome == ps::worker::TfRecordFile::Outcome::kRecord)
      CheckExample(record, layout);
  }
  return 0;
}
