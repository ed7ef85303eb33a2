// File: embedding/rocks_store_internal.h
//
// What rocks_store.cc and rocks_store_open.cc share and nothing else sees:
// the keys RocksStore writes in its families, the stored row key, RocksDB's
// statuses as Abseil's, and the compaction filter factory of expiry.

#ifndef PS_EMBEDDING_ROCKS_STORE_INTERNAL_H_
#define PS_EMBEDDING_ROCKS_STORE_INTERNAL_H_

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/routing.h"
#include "base/status_macros.h"
#include "base/transient_error.h"
#include "embedding/rocks_store.h"
#include "glog/logging.h"
#include "rocksdb/cache.h"
#include "rocksdb/compaction_filter.h"
#include "rocksdb/db.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/memtablerep.h"
#include "rocksdb/perf_level.h"
#include "rocksdb/slice_transform.h"
#include "rocksdb/sst_file_writer.h"
#include "rocksdb/table.h"
#include "rocksdb/utilities/checkpoint.h"
#include "rocksdb/write_batch.h"
#include "rocksdb/write_buffer_manager.h"

namespace ps::embedding {

inline constexpr char kSpecPrefix[] = "table_spec/";
inline constexpr char kIdPrefix[] = "table_id/";
inline constexpr char kLearningRatePrefix[] = "table_lr/";
inline constexpr char kDroppedPrefix[] = "dropped_table/";
inline constexpr char kMovedLedgerPrefix[] = "moved_ledger/";
inline constexpr char kFamilyPrefix[] = "table.";
inline constexpr char kLogFamily[] = "push_log";
// The push log's run, under its name on disk.
inline constexpr char kLogRunKey[] = "epoch";
inline constexpr char kLedgerKey[] = "ledger";
// In the default family: how rows are keyed. Absent in a store written
// before rows were stored by slot (8-byte keys), which Open() upgrades.
inline constexpr char kRowKeyFormatKey[] = "row_key_format";
inline constexpr char kSlotOrderedFormat[] = "slot,key";
// Rows rewritten per batch while upgrading a store's row keys.
inline constexpr size_t kUpgradeBatchRows = 8192;

// RocksDB counts every key comparison and more in a per-thread context
// unless the thread says otherwise; nothing here reads those counts, and
// counting a write-back's memtable inserts was ~3% of a training shard's
// CPU (thread-local lookups through the shared library). Called by each
// method that writes, reads or scans rows, on whichever thread calls it.
inline void DisablePerfCounters() {
  rocksdb::SetPerfLevel(rocksdb::PerfLevel::kDisable);
}

inline absl::Status FromRocks(const rocksdb::Status& status,
                              absl::string_view what) {
  if (status.ok()) return absl::OkStatus();
  const std::string message = absl::StrCat(what, ": ", status.ToString());
  if (status.IsCorruption()) return absl::DataLossError(message);
  if (status.IsNoSpace()) {
    return MarkTransient(absl::ResourceExhaustedError(message));
  }
  if (status.IsInvalidArgument()) return absl::InvalidArgumentError(message);
  return absl::InternalError(message);
}

// A row's key as stored (base/routing.h): one slot's rows are one range
// of keys, in key order, and slots follow each other in order.
inline constexpr size_t kRowKeyBytes = SlotOrderedKey::kBytes;
class RowKey : public SlotOrderedKey {
 public:
  explicit RowKey(uint64_t key) : SlotOrderedKey(key) {}
  static RowKey SlotStart(uint32_t slot) {
    return RowKey(SlotOrderedKey::SlotStart(slot));
  }
  rocksdb::Slice slice() const { return rocksdb::Slice(data(), size()); }

 private:
  explicit RowKey(const SlotOrderedKey& key) : SlotOrderedKey(key) {}
};

// The row key of stored key bytes: a RowKey, or in a store written before
// rows were stored by slot (`legacy`), a key's 8 bytes in the machine's
// order.
inline absl::StatusOr<uint64_t> DecodeRowKey(const rocksdb::Slice& bytes,
                                             bool legacy) {
  if (bytes.size() == kRowKeyBytes) return SlotOrderedKey::Decode(bytes.data());
  if (legacy && bytes.size() == sizeof(uint64_t)) {
    uint64_t key = 0;
    std::memcpy(&key, bytes.data(), sizeof(key));
    return key;
  }
  return absl::DataLossError(absl::StrCat("a key of ", bytes.size(), " bytes"));
}

// A push-log key in the log family: the stripe and the sequence, big-endian.
// Only marks (sequence 0) are written there; the records are in push_log.h's
// files, and a family holding records under other sequences is a data dir
// this version does not read (OldPushLogError).
inline std::string LogKey(uint32_t stripe, uint64_t sequence) {
  std::string key(12, '\0');
  for (int i = 0; i < 4; ++i)
    key[i] = static_cast<char>(stripe >> (24 - 8 * i));
  for (int i = 0; i < 8; ++i)
    key[4 + i] = static_cast<char>(sequence >> (56 - 8 * i));
  return key;
}

// A tombstone's key: the id in ten digits, so that keys sort by id.
inline std::string DroppedKey(TableId id) {
  return absl::StrFormat("%s%010u", kDroppedPrefix, id);
}

inline std::string FixedBytes(uint32_t value) {
  return std::string(reinterpret_cast<const char*>(&value), sizeof(value));
}

inline bool FamilyIsEmpty(rocksdb::DB* db,
                          rocksdb::ColumnFamilyHandle* family) {
  std::unique_ptr<rocksdb::Iterator> it(
      db->NewIterator(rocksdb::ReadOptions(), family));
  it->SeekToFirst();
  return !it->Valid() && it->status().ok();
}

// Records in the push-log family (sequence > 0) come from a version that
// kept the log in RocksDB; this one cannot replay them.
inline absl::Status OldPushLogError(const std::string& path) {
  return absl::FailedPreconditionError(absl::StrCat(
      path,
      " holds a push log in RocksDB, as versions before the push log moved "
      "to files wrote it: open it once with such a version, which replays "
      "it, stop that server cleanly, then start this one"));
}

// Hands each compaction of a table family with an expiry rule a filter
// that drops the rows the rule says expired, as of the compaction's start,
// and tells `on_expired` (RocksStoreOptions) of each.
class RocksStore::ExpiryFilterFactory
    : public rocksdb::CompactionFilterFactory {
 public:
  explicit ExpiryFilterFactory(
      std::function<void(TableId, uint64_t, uint32_t)> on_expired)
      : on_expired_(std::move(on_expired)) {}

  void Set(uint32_t family_id, TableId table, const ExpiryRule& rule) {
    absl::MutexLock lock(&mu_);
    rules_[family_id] = TableRule{table, rule};
  }
  uint64_t expired() const { return expired_.load(); }

  std::unique_ptr<rocksdb::CompactionFilter> CreateCompactionFilter(
      const rocksdb::CompactionFilter::Context& context) override {
    TableRule rule;
    {
      absl::MutexLock lock(&mu_);
      auto found = rules_.find(context.column_family_id);
      if (found == rules_.end() || found->second.rule.ttl_s == 0)
        return nullptr;
      rule = found->second;
    }
    return std::make_unique<ExpiryFilter>(
        rule, static_cast<uint32_t>(absl::ToUnixSeconds(absl::Now())),
        &expired_, &on_expired_);
  }
  const char* Name() const override { return "ps.ExpiryFilterFactory"; }

 private:
  struct TableRule {
    TableId table = 0;
    ExpiryRule rule;
  };

  class ExpiryFilter : public rocksdb::CompactionFilter {
   public:
    ExpiryFilter(
        const TableRule& rule, uint32_t now_s, std::atomic<uint64_t>* expired,
        const std::function<void(TableId, uint64_t, uint32_t)>* on_expired)
        : rule_(rule),
          now_s_(now_s),
          expired_(expired),
          on_expired_(on_expired) {}
    bool Filter(int, const rocksdb::Slice& key, const rocksdb::Slice& value,
                std::string*, bool*) const override {
      const size_t with_meta = rule_.rule.row_floats * sizeof(float) +
                               sizeof(LogPosition) + sizeof(RowMeta);
      if (value.size() != with_meta) return false;
      RowMeta meta;
      std::memcpy(&meta, value.data() + value.size() - sizeof(RowMeta),
                  sizeof(meta));
      if (!rule_.rule.Expired(meta, now_s_)) return false;
      ++*expired_;
      if (*on_expired_) {
        absl::StatusOr<uint64_t> row_key = DecodeRowKey(key, /*legacy=*/true);
        // Stamped when dropped, not when the compaction began: an export
        // that read the record before has a time at or below it.
        if (row_key.ok()) {
          (*on_expired_)(
              rule_.table, *row_key,
              static_cast<uint32_t>(absl::ToUnixSeconds(absl::Now())));
        }
      }
      return true;
    }
    const char* Name() const override { return "ps.ExpiryFilter"; }

   private:
    const TableRule rule_;
    const uint32_t now_s_;
    std::atomic<uint64_t>* const expired_;
    const std::function<void(TableId, uint64_t, uint32_t)>* const on_expired_;
  };

  const std::function<void(TableId, uint64_t, uint32_t)> on_expired_;
  absl::Mutex mu_;
  absl::flat_hash_map<uint32_t, TableRule> rules_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> expired_{0};
};

}  // namespace ps::embedding

#endif  // PS_EMBEDDING_ROCKS_STORE_INTERNAL_H_
