#include "worker/clicklog_reader.h"

#include <glob.h>
#include <zlib.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "glog/logging.h"
#include "worker/criteo_parser.h"

namespace ps::worker {
namespace {

constexpr int kLoggedBadLines = 10;

}  // namespace

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
      options.queue_batches < 1) {
    return absl::InvalidArgumentError(
        "batch_size, epochs and queue_batches must be >= 1");
  }
  auto files = ExpandFilePatterns(options.files);
  if (!files.ok()) return files.status();
  for (const std::string& file : *files) {
    gzFile probe = gzopen(file.c_str(), "rb");
    if (probe == nullptr)
      return absl::NotFoundError(absl::StrCat("cannot open ", file));
    gzclose(probe);
  }
  auto reader = std::unique_ptr<ClickLogReader>(
      new ClickLogReader(options, std::move(files).value()));
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

bool ClickLogReader::Deliver(std::vector<Example>* batch) {
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

bool ClickLogReader::ReadFile(const std::string& path, uint64_t* global_line,
                              std::vector<Example>* batch) {
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) {
    Finish(absl::NotFoundError(absl::StrCat("cannot open ", path)));
    return false;
  }
  gzbuffer(file, 1 << 20);
  std::string line;
  char chunk[1 << 16];
  int64_t line_in_file = 0;
  bool keep_going = true;
  while (keep_going) {
    // Read one whole line, however long.
    line.clear();
    bool got_any = false;
    while (gzgets(file, chunk, sizeof(chunk)) != nullptr) {
      got_any = true;
      line.append(chunk);
      if (!line.empty() && line.back() == '\n') break;
    }
    if (!got_any) break;
    ++line_in_file;
    if (!line.empty() && line.back() == '\n') line.pop_back();
    const uint64_t mine = (*global_line)++;
    if (static_cast<int64_t>(mine % options_.num_workers) !=
        options_.worker_index)
      continue;
    ++lines_;
    Example example;
    absl::Status parsed = ParseCriteoLine(line, &example, options_.label);
    if (!parsed.ok()) {
      const int64_t bad = ++bad_lines_;
      if (bad <= kLoggedBadLines || bad % 1000 == 0) {
        LOG(WARNING) << path << ":" << line_in_file
                     << ": skipped malformed line (" << parsed.message() << ")"
                     << (bad == kLoggedBadLines
                             ? "; logging every 1000th from now on"
                             : "");
      }
      if (bad > options_.max_bad_lines) {
        Finish(absl::FailedPreconditionError(absl::StrCat(
            bad, " malformed lines (last at ", path, ":", line_in_file,
            "), more than --max_bad_lines=", options_.max_bad_lines)));
        keep_going = false;
      }
      continue;
    }
    batch->push_back(example);
    if (batch->size() == static_cast<size_t>(options_.batch_size)) {
      keep_going = Deliver(batch);
    }
  }
  int error = Z_OK;
  const char* message = gzerror(file, &error);
  if (keep_going && error != Z_OK && error != Z_STREAM_END) {
    Finish(absl::DataLossError(absl::StrCat(path, ": ", message)));
    keep_going = false;
  }
  gzclose(file);
  return keep_going;
}

void ClickLogReader::ReadLoop() {
  std::vector<Example> batch;
  batch.reserve(options_.batch_size);
  for (int epoch = 0; epoch < options_.epochs; ++epoch) {
    uint64_t global_line = 0;
    for (const std::string& path : files_) {
      if (!ReadFile(path, &global_line, &batch)) return;
    }
  }
  if (!batch.empty() && !Deliver(&batch)) return;
  Finish(absl::OkStatus());
}

absl::StatusOr<bool> ClickLogReader::Next(std::vector<Example>* batch) {
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
