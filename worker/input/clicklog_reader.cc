#include "worker/input/clicklog_reader.h"

#include <glob.h>
#include <stdio.h>
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "glog/logging.h"
#include "model/input/tf_example.h"
#include "worker/input/tfrecord_file.h"
#include "xxhash.h"

namespace ps::worker {
namespace {

constexpr int kLoggedBadLines = 10;

// Whether `path` starts with gzip's magic bytes; NOT_FOUND if it does not
// open.
absl::StatusOr<bool> IsGzip(const std::string& path) {
  FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr)
    return absl::NotFoundError(absl::StrCat("cannot open ", path));
  unsigned char magic[2] = {0, 0};
  const size_t read = std::fread(magic, 1, 2, file);
  std::fclose(file);
  return read == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
}

}  // namespace

// The lines of one file, or of a byte range of a plain one.
class ClickLogReader::LineSource {
 public:
  // `end` < 0: the whole file. A range that starts past 0 begins at the
  // first line that starts in it.
  static absl::StatusOr<std::unique_ptr<LineSource>> Open(
      const std::string& path, bool gzip, int64_t begin, int64_t end) {
    auto source = std::unique_ptr<LineSource>(new LineSource());
    source->path_ = path;
    source->end_ = end;
    if (gzip) {
      source->gz_ = gzopen(path.c_str(), "rb");
      if (source->gz_ == nullptr)
        return absl::NotFoundError(absl::StrCat("cannot open ", path));
      gzbuffer(source->gz_, 1 << 20);
      return source;
    }
    source->file_ = std::fopen(path.c_str(), "rb");
    if (source->file_ == nullptr)
      return absl::NotFoundError(absl::StrCat("cannot open ", path));
    if (begin > 0) {
      if (fseeko(source->file_, begin - 1, SEEK_SET) != 0) {
        return absl::DataLossError(
            absl::StrCat(path, ": cannot seek: ", std::strerror(errno)));
      }
      // The rest of the line that the byte before the range is in.
      std::string skipped;
      source->Next(&skipped);
    }
    return source;
  }

  ~LineSource() {
    if (gz_ != nullptr) gzclose(gz_);
    if (file_ != nullptr) std::fclose(file_);
    std::free(buffer_);
  }

  // The next line, without its newline; false at the end of the range or on
  // an error (then status() says which).
  bool Next(std::string* line) {
    line->clear();
    if (gz_ != nullptr) {
      bool got_any = false;
      while (gzgets(gz_, chunk_, sizeof(chunk_)) != nullptr) {
        got_any = true;
        line->append(chunk_);
        if (line->back() == '\n') break;
      }
      if (!line->empty() && line->back() == '\n') line->pop_back();
      return got_any;
    }
    if (end_ >= 0 && ftello(file_) >= end_) return false;
    const ssize_t length = getline(&buffer_, &capacity_, file_);
    if (length < 0) return false;
    line->assign(buffer_, length);
    if (!line->empty() && line->back() == '\n') line->pop_back();
    return true;
  }

  absl::Status status() {
    if (gz_ != nullptr) {
      int error = Z_OK;
      const char* message = gzerror(gz_, &error);
      if (error != Z_OK && error != Z_STREAM_END)
        return absl::DataLossError(absl::StrCat(path_, ": ", message));
    } else if (std::ferror(file_)) {
      return absl::DataLossError(absl::StrCat(path_, ": read error"));
    }
    return absl::OkStatus();
  }

 private:
  LineSource() = default;

  std::string path_;
  int64_t end_ = -1;
  gzFile gz_ = nullptr;
  FILE* file_ = nullptr;
  char* buffer_ = nullptr;
  size_t capacity_ = 0;
  char chunk_[1 << 16];
};

// Where parsed examples go: into batches, through a shuffle buffer when
// there is one.
class ClickLogReader::Shuffler {
 public:
  explicit Shuffler(ClickLogReader* reader) : reader_(reader) {
    batch_.reserve(reader->options_.batch_size);
  }

  void StartEpoch(int epoch) {
    const uint64_t words[3] = {
        reader_->options_.shuffle_seed,
        static_cast<uint64_t>(reader_->options_.worker_index),
        static_cast<uint64_t>(epoch)};
    rng_.seed(XXH3_64bits(words, sizeof(words)));
  }

  // False if the reader is stopping.
  bool Add(model::Example&& example) {
    const size_t capacity = reader_->options_.shuffle_buffer;
    if (capacity == 0) return Emit(std::move(example));
    if (held_.size() < capacity) {
      held_.push_back(std::move(example));
      return true;
    }
    const size_t drawn =
        std::uniform_int_distribution<size_t>(0, capacity - 1)(rng_);
    std::swap(held_[drawn], example);
    return Emit(std::move(example));
  }

  // At the end of an epoch: what the buffer holds, in random order.
  bool EndEpoch() {
    std::shuffle(held_.begin(), held_.end(), rng_);
    for (model::Example& example : held_) {
      if (!Emit(std::move(example))) return false;
    }
    held_.clear();
    return true;
  }

  // At the end of the data: the last, partial batch.
  bool EndData() { return batch_.empty() || reader_->Deliver(&batch_); }

 private:
  bool Emit(model::Example&& example) {
    batch_.push_back(std::move(example));
    if (batch_.size() < static_cast<size_t>(reader_->options_.batch_size))
      return true;
    return reader_->Deliver(&batch_);
  }

  ClickLogReader* const reader_;
  std::vector<model::Example> batch_;
  std::vector<model::Example> held_;
  std::mt19937_64 rng_;
};

absl::StatusOr<std::vector<std::string>> ExpandFilePatterns(
    const std::string& patterns) {
  std::vector<std::string> files;
  for (absl::string_view pattern :
       absl::StrSplit(patterns, ',', absl::SkipWhitespace())) {
    const std::string text(absl::StripAsciiWhitespace(pattern));
    glob_t matches;
    const int result = glob(text.c_str(), 0, nullptr, &matches);
    if (result != 0) {
      globfree(&matches);
      return absl::NotFoundError(
          absl::StrCat("no file matches \"", text, "\""));
    }
    std::vector<std::string> expanded(matches.gl_pathv,
                                      matches.gl_pathv + matches.gl_pathc);
    globfree(&matches);
    std::sort(expanded.begin(), expanded.end());
    files.insert(files.end(), expanded.begin(), expanded.end());
  }
  if (files.empty()) return absl::NotFoundError("no click-log files given");
  return files;
}

absl::StatusOr<std::unique_ptr<ClickLogReader>> ClickLogReader::Open(
    const ReaderOptions& options) {
  if (options.num_workers < 1 || options.worker_index < 0 ||
      options.worker_index >= options.num_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker_index ", options.worker_index,
                     " must be in [0, num_workers ", options.num_workers, ")"));
  }
  if (options.batch_size < 1 || options.epochs < 1 ||
      options.queue_batches < 1 || options.shuffle_buffer < 0) {
    return absl::InvalidArgumentError(
        "batch_size, epochs and queue_batches must be >= 1, shuffle_buffer "
        ">= 0");
  }
  absl::StatusOr<std::vector<std::string>> files =
      options.paths.empty()
          ? ExpandFilePatterns(options.files)
          : absl::StatusOr<std::vector<std::string>>(options.paths);
  if (!files.ok()) return files.status();
  bool any_gzip = false;
  for (const std::string& file : *files) {
    absl::StatusOr<bool> gzip = IsGzip(file);
    if (!gzip.ok()) return gzip.status();
    any_gzip = any_gzip || *gzip;
  }
  ShareMode mode = ShareMode::kWholeFiles;
  if (files->size() < static_cast<size_t>(options.num_workers)) {
    // A TFRecord file cannot be entered mid-way: records are shared by
    // stride, as a gzip'd file's lines are.
    mode = any_gzip || options.layout.tfrecord ? ShareMode::kLineStride
                                               : ShareMode::kByteRanges;
  }
  auto reader = std::unique_ptr<ClickLogReader>(
      new ClickLogReader(options, std::move(files).value(), mode));
  reader->thread_ = std::thread([r = reader.get()] { r->ReadLoop(); });
  return reader;
}

ClickLogReader::~ClickLogReader() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void ClickLogReader::Finish(absl::Status status) {
  absl::MutexLock lock(&mu_);
  done_ = true;
  final_status_ = std::move(status);
}

bool ClickLogReader::Deliver(std::vector<model::Example>* batch) {
  absl::MutexLock lock(&mu_);
  auto has_room = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ ||
           ready_.size() < static_cast<size_t>(options_.queue_batches);
  };
  mu_.Await(absl::Condition(&has_room));
  if (stopping_) return false;
  ready_.push_back(std::move(*batch));
  batch->clear();
  batch->reserve(options_.batch_size);
  return true;
}

bool ClickLogReader::CountBad(const std::string& where, absl::string_view what,
                              absl::string_view why) {
  const int64_t bad = ++bad_lines_;
  if (bad <= kLoggedBadLines || bad % 1000 == 0) {
    LOG(WARNING) << where << ": skipped malformed " << what << " (" << why
                 << ")"
                 << (bad == kLoggedBadLines
                         ? "; logging every 1000th from now on"
                         : "");
  }
  if (bad > options_.max_bad_lines) {
    Finish(absl::FailedPreconditionError(
        absl::StrCat(bad, " malformed ", what, "s (last at ", where,
                     "), more than --max_bad_lines=", options_.max_bad_lines)));
    return false;
  }
  return true;
}

bool ClickLogReader::ReadRecordFile(const std::string& path,
                                    uint64_t* global_record,
                                    Shuffler* shuffler) {
  absl::StatusOr<bool> gzip = IsGzip(path);
  if (!gzip.ok()) {
    Finish(gzip.status());
    return false;
  }
  absl::StatusOr<std::unique_ptr<TfRecordFile>> file =
      TfRecordFile::Open(path, *gzip);
  if (!file.ok()) {
    Finish(file.status());
    return false;
  }
  const int64_t workers = options_.num_workers;
  const model::TfExampleParser parser(options_.layout);
  std::string record, why;
  bool keep_going = true;
  while (keep_going) {
    const TfRecordFile::Outcome outcome = (*file)->Next(&record, &why);
    if (outcome == TfRecordFile::Outcome::kEnd) break;
    // Under a stride every worker reads every record, and counts its own.
    const bool mine = share_mode_ != ShareMode::kLineStride ||
                      static_cast<int64_t>((*global_record)++ % workers) ==
                          options_.worker_index;
    const std::string where =
        absl::StrCat(path, " at byte ", (*file)->record_offset(),
                     *gzip ? " of its uncompressed stream" : "");
    if (outcome == TfRecordFile::Outcome::kBadFraming) {
      // Nothing after it can be found: the rest of the file is lost, once
      // counted (a cut gzip stream's error is part of the reason).
      const absl::Status read = (*file)->status();
      if (mine) {
        keep_going = CountBad(
            where, "record",
            absl::StrCat(
                why, read.ok() ? "" : absl::StrCat(" (", read.message(), ")"),
                "; the rest of the file is skipped"));
      }
      return keep_going;
    }
    if (!mine) continue;
    ++lines_;
    if (outcome == TfRecordFile::Outcome::kBadRecord) {
      keep_going = CountBad(where, "record", why);
      continue;
    }
    model::Example example;
    absl::Status parsed = parser.Parse(record, &example, options_.label);
    if (!parsed.ok()) {
      keep_going = CountBad(where, "record", parsed.message());
      continue;
    }
    keep_going = shuffler->Add(std::move(example));
  }
  if (absl::Status read = (*file)->status(); keep_going && !read.ok()) {
    Finish(read);
    keep_going = false;
  }
  return keep_going;
}

bool ClickLogReader::ReadFile(const std::string& path, uint64_t* global_line,
                              Shuffler* shuffler) {
  if (options_.layout.tfrecord) {
    return ReadRecordFile(path, global_line, shuffler);
  }
  const int64_t workers = options_.num_workers;
  const int64_t worker = options_.worker_index;
  int64_t begin = 0, end = -1;
  bool gzip = false;
  if (share_mode_ == ShareMode::kByteRanges) {
    struct stat info;
    if (stat(path.c_str(), &info) != 0) {
      Finish(absl::NotFoundError(absl::StrCat("cannot open ", path)));
      return false;
    }
    begin = info.st_size * worker / workers;
    end = info.st_size * (worker + 1) / workers;
  } else {
    absl::StatusOr<bool> is_gzip = IsGzip(path);
    if (!is_gzip.ok()) {
      Finish(is_gzip.status());
      return false;
    }
    gzip = *is_gzip;
  }
  absl::StatusOr<std::unique_ptr<LineSource>> source =
      LineSource::Open(path, gzip, begin, end);
  if (!source.ok()) {
    Finish(source.status());
    return false;
  }
  std::string line;
  // Line numbers are known only when reading from the file's start.
  int64_t line_in_file = 0;
  const bool from_start = begin == 0;
  bool keep_going = true;
  bool skip_header = options_.layout.header && from_start;
  while (keep_going && (*source)->Next(&line)) {
    ++line_in_file;
    if (skip_header) {
      skip_header = false;
      continue;
    }
    if (share_mode_ == ShareMode::kLineStride) {
      const uint64_t mine = (*global_line)++;
      if (static_cast<int64_t>(mine % workers) != worker) continue;
    }
    ++lines_;
    model::Example example;
    absl::Status parsed =
        model::ParseLine(line, options_.layout, &example, options_.label);
    if (!parsed.ok()) {
      const std::string where =
          from_start ? absl::StrCat(path, ":", line_in_file)
                     : absl::StrCat(path, " (line ", line_in_file,
                                    " of the byte range from ", begin, ")");
      keep_going = CountBad(where, "line", parsed.message());
      continue;
    }
    keep_going = shuffler->Add(std::move(example));
  }
  if (absl::Status read = (*source)->status(); keep_going && !read.ok()) {
    Finish(read);
    keep_going = false;
  }
  return keep_going;
}

void ClickLogReader::ReadLoop() {
  Shuffler shuffler(this);
  for (int epoch = 0; epoch < options_.epochs; ++epoch) {
    shuffler.StartEpoch(epoch);
    uint64_t global_line = 0;
    for (size_t f = 0; f < files_.size(); ++f) {
      if (share_mode_ == ShareMode::kWholeFiles &&
          static_cast<int64_t>(f % options_.num_workers) !=
              options_.worker_index) {
        continue;
      }
      if (!ReadFile(files_[f], &global_line, &shuffler)) return;
    }
    if (!shuffler.EndEpoch()) return;
  }
  if (!shuffler.EndData()) return;
  Finish(absl::OkStatus());
}

absl::StatusOr<bool> ClickLogReader::Next(std::vector<model::Example>* batch) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !ready_.empty() || done_;
  };
  mu_.Await(absl::Condition(&ready));
  if (!ready_.empty()) {
    *batch = std::move(ready_.front());
    ready_.pop_front();
    return true;
  }
  if (!final_status_.ok()) return final_status_;
  return false;
}

}  // namespace ps::worker
