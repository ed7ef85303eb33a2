#include "embedding/push_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "base/transient_error.h"
#include "glog/logging.h"
#include "xxhash.h"

namespace ps::embedding {
namespace {

constexpr char kMagic[8] = {'P', 'S', 'P', 'U', 'S', 'H', 'L', '1'};
constexpr char kSuffix[] = ".pushlog";
// Payload length (uint32) and XXH3-64 checksum (uint64).
constexpr size_t kFrameHeaderBytes = sizeof(uint32_t) + sizeof(uint64_t);

bool OutOfSpace(int error) {
  return error == ENOSPC || error == EDQUOT || error == EFBIG;
}

absl::Status ErrnoError(absl::string_view what, const std::string& path) {
  const int error = errno;
  const std::string message =
      absl::StrCat(what, " ", path, ": ", std::strerror(error));
  if (OutOfSpace(error)) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

// Fills a frame's header: the payload's length and checksum.
void FrameHeader(absl::string_view payload, char* header) {
  const uint32_t length = static_cast<uint32_t>(payload.size());
  const uint64_t checksum = XXH3_64bits(payload.data(), payload.size());
  std::memcpy(header, &length, sizeof(length));
  std::memcpy(header + sizeof(length), &checksum, sizeof(checksum));
}

// Parses "<run>-<segment>.pushlog".
bool ParseSegmentName(const std::string& name, uint64_t* run,
                      uint64_t* segment) {
  absl::string_view view = name;
  if (!absl::ConsumeSuffix(&view, kSuffix)) return false;
  std::vector<absl::string_view> parts = absl::StrSplit(view, '-');
  return parts.size() == 2 && absl::SimpleAtoi(parts[0], run) &&
         absl::SimpleAtoi(parts[1], segment);
}

// Every segment file in `dir`, as (run, segment, path), sorted.
absl::StatusOr<std::vector<std::tuple<uint64_t, uint64_t, std::string>>>
ListSegments(const std::string& dir) {
  std::vector<std::tuple<uint64_t, uint64_t, std::string>> segments;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    uint64_t run = 0, segment = 0;
    if (ParseSegmentName(entry.path().filename().string(), &run, &segment)) {
      segments.emplace_back(run, segment, entry.path().string());
    }
  }
  if (error) {
    return absl::InternalError(
        absl::StrCat("listing ", dir, ": ", error.message()));
  }
  std::sort(segments.begin(), segments.end());
  return segments;
}

absl::Status ReadFully(int fd, uint64_t offset, size_t size, char* out,
                       const std::string& path) {
  while (size > 0) {
    const ssize_t n = pread(fd, out, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("reading", path);
    if (n == 0) {
      return absl::DataLossError(
          absl::StrCat(path, " ends before offset ", offset + size));
    }
    out += n;
    offset += static_cast<uint64_t>(n);
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace

PushLog::RunReader::~RunReader() {
  for (const Segment& segment : segments_) close(segment.fd);
}

uint64_t PushLog::RunReader::bytes() const {
  uint64_t total = 0;
  for (const Segment& segment : segments_) total += segment.size;
  return total;
}

bool PushLog::RunReader::IsTornEnd(uint32_t index, uint64_t offset,
                                   absl::string_view segment) const {
  if (index + 1 != segments_.size()) return false;
  const uint64_t left = segment.size() - offset;
  // A file system may leave zeros where a write did not land.
  if (std::all_of(segment.begin() + offset, segment.end(),
                  [](char c) { return c == 0; })) {
    return true;
  }
  if (left < kFrameHeaderBytes) return true;
  uint32_t length = 0;
  std::memcpy(&length, segment.data() + offset, sizeof(length));
  // A whole frame that fails its checksum is damage, not a cut-short write.
  if (left - kFrameHeaderBytes >= length) return false;
  // A frame that runs past the end is the write a crash cut short, unless
  // its length was damaged instead: then whole frames follow it, which no
  // cut-short write leaves. Look for one (the first MiB of offsets).
  const uint64_t scan_end =
      std::min<uint64_t>(segment.size(), offset + 1 + (1 << 20));
  for (uint64_t at = offset + 1; at + kFrameHeaderBytes <= scan_end; ++at) {
    uint32_t candidate = 0;
    uint64_t checksum = 0;
    std::memcpy(&candidate, segment.data() + at, sizeof(candidate));
    if (candidate == 0 || segment.size() - at - kFrameHeaderBytes < candidate)
      continue;
    std::memcpy(&checksum, segment.data() + at + sizeof(candidate),
                sizeof(checksum));
    if (XXH3_64bits(segment.data() + at + kFrameHeaderBytes, candidate) ==
        checksum) {
      return false;
    }
  }
  return true;
}

absl::Status PushLog::RunReader::ForEach(
    const std::function<absl::Status(Location, absl::string_view)>& fn,
    PushLogRecovery recovery) {
  std::string buffer;
  for (uint32_t index = 0; index < segments_.size(); ++index) {
    const Segment& segment = segments_[index];
    buffer.resize(segment.size);
    RETURN_IF_ERROR(
        ReadFully(segment.fd, 0, segment.size, buffer.data(), segment.path));
    if (segment.size < sizeof(kMagic)) {
      // Created by a process that stopped before its first record landed.
      LOG(WARNING) << segment.path << " has no complete header; skipped";
      continue;
    }
    if (std::memcmp(buffer.data(), kMagic, sizeof(kMagic)) != 0) {
      return absl::DataLossError(
          absl::StrCat(segment.path, " is not a push-log segment"));
    }
    uint64_t offset = sizeof(kMagic);
    while (offset < segment.size) {
      uint32_t length = 0;
      uint64_t checksum = 0;
      bool intact = segment.size - offset >= kFrameHeaderBytes;
      if (intact) {
        std::memcpy(&length, buffer.data() + offset, sizeof(length));
        std::memcpy(&checksum, buffer.data() + offset + sizeof(length),
                    sizeof(checksum));
        intact = segment.size - offset - kFrameHeaderBytes >= length &&
                 XXH3_64bits(buffer.data() + offset + kFrameHeaderBytes,
                             length) == checksum;
      }
      if (!intact) {
        if (IsTornEnd(index, offset, buffer)) {
          LOG(WARNING) << segment.path << ": the last record, at offset "
                       << offset << ", was cut short by a crash (never "
                       << "acknowledged); skipped its " << segment.size - offset
                       << " bytes";
          break;
        }
        uint64_t later_bytes = 0;
        for (uint32_t later = index + 1; later < segments_.size(); ++later)
          later_bytes += segments_[later].size;
        const std::string damage = absl::StrCat(
            segment.path, ": the record at offset ", offset,
            " fails its length or checksum, with ", segment.size - offset,
            " bytes of this segment from there and ",
            segments_.size() - index - 1, " later segments (", later_bytes,
            " bytes) after it: acknowledged pushes in them would be lost");
        if (recovery == PushLogRecovery::kStrict) {
          return absl::DataLossError(absl::StrCat(
              damage,
              ". Nothing was replayed. To open anyway, replaying only what "
              "precedes the damage, start with --push_log_recovery="
              "point_in_time"));
        }
        dropped_bytes_ = segment.size - offset + later_bytes;
        LOG(ERROR) << damage << "; point-in-time recovery replays what "
                   << "precedes it and drops " << dropped_bytes_ << " bytes";
        return absl::OkStatus();
      }
      const uint64_t payload = offset + kFrameHeaderBytes;
      RETURN_IF_ERROR(fn(Location{index, payload},
                         absl::string_view(buffer.data() + payload, length)));
      offset = payload + length;
    }
  }
  return absl::OkStatus();
}

absl::Status PushLog::RunReader::ReadAt(Location location, uint64_t skip,
                                        size_t size, std::string* out) const {
  if (location.segment_index >= segments_.size()) {
    return absl::InvalidArgumentError("no such push-log segment");
  }
  const Segment& segment = segments_[location.segment_index];
  out->resize(size);
  return ReadFully(segment.fd, location.offset + skip, size, out->data(),
                   segment.path);
}

absl::StatusOr<std::unique_ptr<PushLog>> PushLog::Open(
    const PushLogOptions& options) {
  if (options.dir.empty()) {
    return absl::InvalidArgumentError("the push log needs a directory");
  }
  std::error_code error;
  std::filesystem::create_directories(options.dir, error);
  if (error) {
    return absl::InternalError(
        absl::StrCat("cannot create ", options.dir, ": ", error.message()));
  }
  return std::unique_ptr<PushLog>(new PushLog(options));
}

PushLog::~PushLog() {
  absl::MutexLock lock(&mu_);
  CloseSegment();
}

std::string PushLog::SegmentPath(uint64_t run, uint64_t segment) const {
  return absl::StrFormat("%s/%010d-%010d%s", options_.dir, run, segment,
                         kSuffix);
}

absl::StatusOr<std::vector<uint64_t>> PushLog::ListRuns() const {
  ASSIGN_OR_RETURN(auto segments, ListSegments(options_.dir));
  std::vector<uint64_t> runs;
  for (const auto& [run, segment, path] : segments) {
    if (runs.empty() || runs.back() != run) runs.push_back(run);
  }
  return runs;
}

absl::StatusOr<std::unique_ptr<PushLog::RunReader>> PushLog::ReadRun(
    uint64_t run) const {
  ASSIGN_OR_RETURN(auto segments, ListSegments(options_.dir));
  auto reader = std::unique_ptr<RunReader>(new RunReader());
  for (const auto& [segment_run, segment, path] : segments) {
    if (segment_run != run) continue;
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoError("opening", path);
    struct stat info;
    if (fstat(fd, &info) != 0) {
      close(fd);
      return ErrnoError("reading the size of", path);
    }
    reader->segments_.push_back(
        RunReader::Segment{path, fd, static_cast<uint64_t>(info.st_size)});
  }
  return reader;
}

absl::Status PushLog::DeleteRunsBefore(uint64_t run) {
  ASSIGN_OR_RETURN(auto segments, ListSegments(options_.dir));
  for (const auto& [segment_run, segment, path] : segments) {
    if (segment_run < run && unlink(path.c_str()) != 0) {
      return ErrnoError("deleting", path);
    }
  }
  return absl::OkStatus();
}

void PushLog::StartRun(uint64_t run) {
  absl::MutexLock sync_lock(&sync_mu_);
  synced_segment_ = 0;
  synced_bytes_ = 0;
  absl::MutexLock lock(&mu_);
  CloseSegment();
  run_ = run;
  first_live_segment_.store(0);
  closed_sizes_.clear();
  current_segment_.store(0);
  live_bytes_.store(0);
}

absl::Status PushLog::OpenSegment() {
  const std::string path = SegmentPath(run_, current_segment_.load());
  fd_ = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC,
             0644);
  if (fd_ < 0) return ErrnoError("creating", path);
  // Reserves the segment's blocks at once (the file's size still grows only
  // with what is written), so that appends find them: about a sixth less
  // CPU per byte appended than reserving block by block. Only while the
  // segment is at most a quarter of the file system's free space, so that
  // near a full disk no space the store needs sits reserved and unwritten.
  // Best effort: a file system without it still takes appends.
  struct statvfs file_system;
  if (fstatvfs(fd_, &file_system) == 0 &&
      static_cast<uint64_t>(file_system.f_bavail) * file_system.f_frsize / 4 >=
          options_.segment_bytes) {
    fallocate(fd_, FALLOC_FL_KEEP_SIZE, 0,
              static_cast<off_t>(options_.segment_bytes));
  }
  segment_size_ = 0;
  if (write(fd_, kMagic, sizeof(kMagic)) != sizeof(kMagic)) {
    out_of_space_ = OutOfSpace(errno);
    const absl::Status status = ErrnoError("writing", path);
    AbandonSegment();
    return status;
  }
  segment_size_ = sizeof(kMagic);
  live_bytes_ += sizeof(kMagic);
  if (options_.segment_preamble) {
    const std::string preamble = options_.segment_preamble();
    if (!preamble.empty()) {
      char header[kFrameHeaderBytes];
      FrameHeader(preamble, header);
      if (absl::Status written = WriteFrame(header, preamble); !written.ok()) {
        AbandonSegment();
        return written;
      }
    }
  }
  if (options_.sync) {
    // The new file's name must survive a machine crash too.
    const int dir = open(options_.dir.c_str(), O_RDONLY | O_CLOEXEC);
    const bool synced = dir >= 0 && fsync(dir) == 0;
    if (dir >= 0) close(dir);
    if (!synced) {
      const absl::Status status = ErrnoError("syncing", options_.dir);
      out_of_space_ = false;
      CloseSegment();
      return status;
    }
  }
  return absl::OkStatus();
}

void PushLog::AbandonSegment() {
  if (fd_ < 0) return;
  close(fd_);
  fd_ = -1;
  unlink(SegmentPath(run_, current_segment_.load()).c_str());
  live_bytes_ -= segment_size_;
  segment_size_ = 0;
}

void PushLog::CloseSegment() {
  if (fd_ < 0) return;
  if (options_.sync && fdatasync(fd_) != 0) {
    Break(ErrnoError("syncing", SegmentPath(run_, current_segment())));
  }
  // A segment closed short (a new run, the log closed) gives back the
  // blocks reserved past its end: truncating a file to its own size frees
  // them (punching a hole past the end does not, on ext4).
  struct stat written;
  if (fstat(fd_, &written) == 0 &&
      static_cast<uint64_t>(written.st_size) < options_.segment_bytes) {
    if (ftruncate(fd_, written.st_size) != 0) {
      LOG(WARNING) << SegmentPath(run_, current_segment())
                   << ": could not give back its reserved blocks: "
                   << std::strerror(errno);
    }
  }
  close(fd_);
  fd_ = -1;
  closed_sizes_.push_back(segment_size_);
  current_segment_.store(current_segment_.load() + 1);
}

absl::StatusOr<PushLog::Ticket> PushLog::Write(
    absl::string_view payload, const std::function<void()>& on_written) {
  if (payload.size() > UINT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a push-log record of ", payload.size(), " bytes; the most is 4 GiB"));
  }
  char header[kFrameHeaderBytes];
  FrameHeader(payload, header);
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(broken_);
  if (absl::Status written = WriteFrame(header, payload); !written.ok()) {
    Break(written, out_of_space_);
    // Writing goes on once there is room: the caller may retry.
    return out_of_space_ ? MarkTransient(written) : written;
  }
  if (on_written) on_written();
  const Ticket ticket{current_segment(), segment_size_};
  // The record is written: a failed sync as the segment closes (which
  // breaks the log) is the caller's Sync() to report, not this write's.
  if (segment_size_ >= options_.segment_bytes) CloseSegment();
  return ticket;
}

absl::Status PushLog::Sync(const Ticket& ticket) {
  if (!options_.sync) return absl::OkStatus();
  return SyncThrough(ticket.segment, ticket.bytes);
}

absl::Status PushLog::Append(absl::string_view payload) {
  ASSIGN_OR_RETURN(const Ticket ticket, Write(payload));
  return Sync(ticket);
}

absl::Status PushLog::WriteFrame(const char* header,
                                 absl::string_view payload) {
  out_of_space_ = false;
  if (fd_ < 0) RETURN_IF_ERROR(OpenSegment());
  iovec parts[2] = {{const_cast<char*>(header), kFrameHeaderBytes},
                    {const_cast<char*>(payload.data()), payload.size()}};
  size_t remaining = kFrameHeaderBytes + payload.size();
  const uint64_t size_before = segment_size_;
  int first = 0;
  while (remaining > 0) {
    const ssize_t n = writev(fd_, parts + first, 2 - first);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = ENOSPC;  // a file system that takes nothing more
      out_of_space_ = OutOfSpace(errno);
      const absl::Status status =
          ErrnoError("appending to", SegmentPath(run_, current_segment()));
      // Cut off whatever part of the frame landed, so that the segment
      // stays a sequence of whole records and writing can go on once there
      // is room. If that fails, later records go to a new segment and this
      // one ends in a torn frame, as after a crash.
      if (ftruncate(fd_, static_cast<off_t>(size_before)) == 0) {
        live_bytes_ -= segment_size_ - size_before;
        segment_size_ = size_before;
      } else {
        out_of_space_ = false;
        CloseSegment();
      }
      return status;
    }
    remaining -= static_cast<size_t>(n);
    segment_size_ += static_cast<uint64_t>(n);
    live_bytes_ += static_cast<uint64_t>(n);
    // A short write (rare for files): go on from where it stopped.
    for (size_t done = static_cast<size_t>(n); done > 0;) {
      const size_t step = std::min(done, parts[first].iov_len);
      parts[first].iov_base = static_cast<char*>(parts[first].iov_base) + step;
      parts[first].iov_len -= step;
      done -= step;
      if (parts[first].iov_len == 0) ++first;
    }
  }
  return absl::OkStatus();
}

absl::Status PushLog::SyncThrough(uint64_t segment, uint64_t bytes) {
  absl::MutexLock sync_lock(&sync_mu_);
  if (synced_segment_ > segment ||
      (synced_segment_ == segment && synced_bytes_ >= bytes)) {
    return absl::OkStatus();  // a sync that started after our write
  }
  int fd = -1;
  uint64_t target = 0;
  std::string path;
  {
    absl::MutexLock lock(&mu_);
    // A full disk that stopped other writes does not stop this sync of a
    // record that was written.
    if (!broken_.ok() && !recoverable_) return broken_;
    // Closed since, and so synced by CloseSegment().
    if (current_segment() != segment || fd_ < 0) return absl::OkStatus();
    // A descriptor of our own: appends go on (and may close the segment)
    // while this one syncs.
    fd = dup(fd_);
    if (fd < 0)
      return ErrnoError("duplicating the descriptor of", options_.dir);
    target = segment_size_;
    path = SegmentPath(run_, segment);
  }
  const bool synced = fdatasync(fd) == 0;
  const absl::Status status =
      synced ? absl::OkStatus() : ErrnoError("syncing", path);
  close(fd);
  if (!synced) {
    absl::MutexLock lock(&mu_);
    Break(status);
    return status;
  }
  ++syncs_;
  synced_segment_ = segment;
  synced_bytes_ = target;
  return absl::OkStatus();
}

absl::Status PushLog::health() const {
  // Every push asks: no lock (an append may hold it) unless the log failed.
  if (!failed_.load()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  return broken_;
}

void PushLog::Break(const absl::Status& status, bool recoverable) {
  if (!broken_.ok() && !recoverable_) return;  // the first lasting failure
  // Every write refused while the disk is full is as transient as the one
  // that found it full.
  broken_ = recoverable ? MarkTransient(status) : status;
  recoverable_ = recoverable;
  failed_.store(true);
}

absl::Status PushLog::Recover() {
  if (!failed_.load()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  if (broken_.ok() || !recoverable_) return broken_;
  // A segment that could not even be created is made again by the next
  // write; one cut back to its last whole record is written on.
  broken_ = absl::OkStatus();
  failed_.store(false);
  return absl::OkStatus();
}

absl::Status PushLog::DeleteSegmentsBefore(uint64_t segment) {
  // Most calls have nothing to delete: answer them without waiting for an
  // append in progress.
  if (segment <= first_live_segment_.load()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  // Only closed segments go: the open one is current_segment(). Between a
  // segment closing and the next one being created (by the next write, with
  // its preamble) the last closed one stays too, since it and its preamble
  // are all that is left of the ledger's writes since the run began.
  const uint64_t keep_from =
      fd_ >= 0 ? current_segment()
               : current_segment() - std::min<uint64_t>(current_segment(), 1);
  segment = std::min(segment, keep_from);
  while (first_live_segment_.load() < segment && !closed_sizes_.empty()) {
    const std::string path = SegmentPath(run_, first_live_segment_.load());
    if (unlink(path.c_str()) != 0 && errno != ENOENT) {
      return ErrnoError("deleting", path);
    }
    live_bytes_ -= closed_sizes_.front();
    closed_sizes_.pop_front();
    first_live_segment_.store(first_live_segment_.load() + 1);
  }
  return absl::OkStatus();
}

}  // namespace ps::embedding
