#include "worker/input/follow_reader.h"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "glog/logging.h"

namespace ps::worker {
namespace {

constexpr char kDoneSuffix[] = ".done";

}  // namespace

absl::StatusOr<std::unique_ptr<FollowReader>> FollowReader::Open(
    const FollowOptions& options) {
  std::error_code error;
  if (!std::filesystem::is_directory(options.dir, error)) {
    return absl::NotFoundError(
        absl::StrCat("--follow: ", options.dir, " is not a directory"));
  }
  if (options.reader.num_workers < 1 || options.reader.worker_index < 0 ||
      options.reader.worker_index >= options.reader.num_workers ||
      options.reader.batch_size < 1 || options.reader.queue_batches < 1 ||
      options.reader.shuffle_buffer < 0) {
    return absl::InvalidArgumentError(
        "following a directory needs a worker_index in [0, num_workers), a "
        "batch_size and queue_batches of at least 1 and a shuffle_buffer of "
        "at least 0");
  }
  if (options.poll <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("the follow poll interval must be > 0");
  }
  return std::unique_ptr<FollowReader>(new FollowReader(options));
}

absl::StatusOr<bool> FollowReader::Next(std::vector<model::Example>* batch) {
  if (cancelled_.HasBeenNotified()) return false;
  RETURN_IF_ERROR(deferred_);
  if (!have_ahead_) {
    ASSIGN_OR_RETURN(const bool more, FirstBatchOfNextFile(&ahead_));
    if (!more) return false;
  }
  batch->swap(ahead_);
  batch_file_ = current_file_;
  // Whether it is its file's last batch: read the one after it now (an
  // error there is the next call's).
  absl::StatusOr<bool> more = current_->Next(&ahead_);
  have_ahead_ = more.ok() && *more;
  batch_ends_file_ = more.ok() && !*more;
  if (!more.ok()) deferred_ = more.status();
  if (batch_ends_file_) FinishFile();
  return true;
}

absl::StatusOr<bool> FollowReader::FirstBatchOfNextFile(
    std::vector<model::Example>* batch) {
  while (!reached_until_ && !cancelled_.HasBeenNotified()) {
    const std::string name = NextCompleteFile();
    if (!name.empty() && !options_.until.empty() && name > options_.until) {
      LOG(WARNING) << "--follow_until=" << options_.until << " is not in "
                   << options_.dir << ", but " << name
                   << ", which sorts after it, is: stopping there";
      reached_until_ = true;
      break;
    }
    if (name.empty()) {
      waiting_ = true;
      if (!waiting_logged_) {
        LOG(INFO) << "[worker " << options_.reader.worker_index
                  << "] following " << options_.dir << ": nothing new after "
                  << (last_taken_.empty() ? "(none yet)" : last_taken_)
                  << "; waiting";
        waiting_logged_ = true;
      }
      cancelled_.WaitForNotificationWithTimeout(options_.poll);
      continue;
    }
    waiting_ = false;
    waiting_logged_ = false;
    ASSIGN_OR_RETURN(const bool opened, OpenFile(name));
    if (!opened) continue;
    ASSIGN_OR_RETURN(const bool more, current_->Next(batch));
    if (more) return true;
    FinishFile();  // an empty share
  }
  waiting_ = false;
  return false;
}

void FollowReader::FinishFile() {
  done_lines_ += current_->lines();
  done_bad_lines_ += current_->bad_lines();
  current_.reset();
  if (current_file_ == options_.until) reached_until_ = true;
}

int64_t FollowReader::lines() const {
  return done_lines_ + (current_ != nullptr ? current_->lines() : 0);
}

int64_t FollowReader::bad_lines() const {
  return done_bad_lines_ + (current_ != nullptr ? current_->bad_lines() : 0);
}

std::string FollowReader::NextCompleteFile() {
  std::error_code error;
  std::vector<std::string> complete;
  for (std::filesystem::directory_iterator entry(options_.dir, error), end;
       !error && entry != end; entry.increment(error)) {
    const std::string name = entry->path().filename().string();
    if (name.empty() || name[0] == '.' || absl::EndsWith(name, kDoneSuffix)) {
      continue;
    }
    std::error_code ignored;
    if (!entry->is_regular_file(ignored) ||
        !std::filesystem::exists(entry->path().string() + kDoneSuffix,
                                 ignored)) {
      continue;
    }
    complete.push_back(name);
  }
  if (error) {
    // A directory on a network file system comes and goes: look again.
    LOG_EVERY_N(WARNING, 60) << "--follow: cannot list " << options_.dir << ": "
                             << error.message() << " (looking again)";
    return std::string();
  }
  std::sort(complete.begin(), complete.end());
  for (const std::string& name : complete) {
    // Trained on by an earlier process of this worker.
    if (name < options_.start.file) continue;
    if (last_taken_.empty() && !options_.start.file.empty() &&
        name != options_.start.file) {
      LOG(WARNING) << "--follow: the file this worker was in, " << options_.dir
                   << "/" << options_.start.file << ", is gone: going on at "
                   << name;
    }
    if (last_taken_.empty() || name > last_taken_) return name;
    if (name != last_taken_ && !taken_.contains(name) &&
        reported_late_.insert(name).second) {
      ++late_files_;
      LOG(WARNING) << "--follow: " << options_.dir << "/" << name
                   << " is complete but sorts before " << last_taken_
                   << ", already taken: left out (files are taken in name "
                      "order; give a late file a name after the last one)";
    }
  }
  return std::string();
}

absl::StatusOr<bool> FollowReader::OpenFile(const std::string& name) {
  ReaderOptions reader = options_.reader;
  reader.files.clear();
  reader.paths = {absl::StrCat(options_.dir, "/", name)};
  reader.epochs = 1;
  last_taken_ = name;
  taken_.insert(name);
  absl::StatusOr<std::unique_ptr<ClickLogReader>> opened =
      ClickLogReader::Open(reader);
  if (absl::IsNotFound(opened.status())) {
    LOG(WARNING) << "--follow: " << options_.dir << "/" << name
                 << " went before it was read: left out";
    return false;
  }
  RETURN_IF_ERROR(opened.status());
  current_ = *std::move(opened);
  current_file_ = name;
  ++files_taken_;
  LOG(INFO) << "[worker " << options_.reader.worker_index << "] following "
            << options_.dir << ": " << name;
  if (name != options_.start.file || options_.start.file_examples == 0) {
    return true;
  }
  int64_t skipped = 0;
  std::vector<model::Example> batch;
  while (skipped < options_.start.file_examples) {
    ASSIGN_OR_RETURN(const bool more, current_->Next(&batch));
    if (!more) break;
    skipped += static_cast<int64_t>(batch.size());
  }
  if (skipped != options_.start.file_examples) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the checkpoint or coordinator says this worker had trained on ",
        options_.start.file_examples, " examples of ", options_.dir, "/", name,
        ", but its share of the file gives ", skipped,
        " in whole batches: go on with the same --num_workers, "
        "--batch_size, --shuffle_buffer and layout flags as the run that "
        "trained on it"));
  }
  LOG(INFO) << "[worker " << options_.reader.worker_index << "] going on in "
            << name << " after " << skipped << " examples";
  return true;
}

}  // namespace ps::worker
