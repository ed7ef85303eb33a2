// EmbeddingStore's replay of the push log at open: the previous process's
// run, above each stripe's mark, applied to the rows, which are then
// written back with a new run.

#include <algorithm>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "embedding/embedding_store_impl.h"
#include "embedding/embedding_store_internal.h"
#include "embedding/push_record.h"
#include "glog/logging.h"

namespace ps::embedding {

struct EmbeddingStoreImpl::Replay {
  // Where a section above its stripe's mark lies, for the second pass.
  struct Section {
    uint32_t stripe;
    uint64_t sequence;
    PushLog::Location location;
    uint64_t offset;  // in the record
    uint64_t bytes;
    float learning_rate_scale;  // the record's
  };

  // The run replayed, and each stripe's mark in it (RocksDB's).
  uint64_t run = 0;
  absl::flat_hash_map<uint32_t, uint64_t> marks;
  std::unique_ptr<PushLog::RunReader> reader;
  // The sections to apply, in stripe and sequence (application) order once
  // IndexPushLog() returns.
  std::vector<Section> sections;
  // Records read, row updates applied, rows written back.
  uint64_t records = 0;
  uint64_t rows = 0;
  size_t rows_written = 0;
};

absl::Status EmbeddingStoreImpl::ReplayPushLog() {
  Replay replay;
  RETURN_IF_ERROR(OpenReplay(replay));
  RETURN_IF_ERROR(IndexPushLog(replay));
  RETURN_IF_ERROR(ApplyReplayedSections(replay));
  RETURN_IF_ERROR(StartNextRun(replay));
  if (replay.records > 0) {
    LOG(INFO) << "replayed " << replay.sections.size()
              << " push-log sections of " << replay.records << " records ("
              << replay.reader->bytes() << " bytes, " << replay.rows
              << " row updates) into " << replay.rows_written << " rows";
  }
  return absl::OkStatus();
}

absl::Status EmbeddingStoreImpl::OpenReplay(Replay& replay) {
  std::string ledger;
  RETURN_IF_ERROR(rocks_->ReadLogState(&replay.run, &replay.marks, &ledger));
  if (!ledger.empty()) RETURN_IF_ERROR(ledger_.Merge(ledger));
  ASSIGN_OR_RETURN(std::vector<uint64_t> runs, push_log_->ListRuns());
  if (!runs.empty() && runs.back() > replay.run) {
    return absl::DataLossError(
        absl::StrCat(options_.data_dir, "/push_log has segments of run ",
                     runs.back(), " but the store is at run ", replay.run,
                     ": the log and the rows do not belong together"));
  }
  ASSIGN_OR_RETURN(replay.reader, push_log_->ReadRun(replay.run));
  // Rows read from here on know which of this run's updates they hold.
  log_run_ = replay.run;
  return absl::OkStatus();
}

absl::Status EmbeddingStoreImpl::IndexPushLog(Replay& replay) {
  // Sections are applied by stripe, then sequence (application order),
  // which need not be the order they were appended in; reading them back
  // one at a time keeps a long log out of memory.
  RETURN_IF_ERROR(replay.reader->ForEach(
      [&](PushLog::Location location, absl::string_view record) {
        return IndexRecord(replay, location, record);
      },
      options_.push_log_recovery));
  push_log_dropped_bytes_ = replay.reader->dropped_bytes();
  std::sort(replay.sections.begin(), replay.sections.end(),
            [](const Replay::Section& a, const Replay::Section& b) {
              return std::tie(a.stripe, a.sequence) <
                     std::tie(b.stripe, b.sequence);
            });
  return absl::OkStatus();
}

absl::Status EmbeddingStoreImpl::IndexRecord(Replay& replay,
                                             PushLog::Location location,
                                             absl::string_view record) {
  ++replay.records;
  ASSIGN_OR_RETURN(const PushRecordHeader header, ReadRecordHeader(record));
  auto corrupt = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat("push-log record ", replay.records,
                                            " of run ", replay.run, ": ", why));
  };
  for (uint64_t offset = header.sections_offset; offset < record.size();) {
    const absl::string_view rest = record.substr(offset);
    const absl::StatusOr<PushSectionHeader> section =
        DecodePushSectionHeader(rest);
    if (!section.ok()) return corrupt(section.status().message());
    const absl::StatusOr<const Table*> table = FindTableById(section->table_id);
    if (!table.ok()) return corrupt(table.status().message());
    const absl::StatusOr<uint64_t> bytes =
        MeasurePushSection(rest, *section, (*table)->dim);
    if (!bytes.ok()) return corrupt(bytes.status().message());
    auto mark = replay.marks.find(section->stripe);
    // Below the mark: written back with the rows before the process
    // stopped.
    if (mark == replay.marks.end() || section->sequence >= mark->second) {
      replay.sections.push_back(
          Replay::Section{section->stripe, section->sequence, location, offset,
                          *bytes, header.learning_rate_scale});
    }
    offset += *bytes;
  }
  return absl::OkStatus();
}

absl::StatusOr<PushRecordHeader> EmbeddingStoreImpl::ReadRecordHeader(
    absl::string_view record) {
  ASSIGN_OR_RETURN(PushRecordHeader header, DecodePushRecordHeader(record));
  if (header.kind == PushRecordHeader::Kind::kLedger) {
    RETURN_IF_ERROR(ledger_.Merge(header.ledger));
  } else if (header.kind == PushRecordHeader::Kind::kPush &&
             header.origin.tracked()) {
    // Whether its sections are above their marks or not, the push is
    // applied.
    ledger_.MergeApplied(header.origin, header.rows_updated);
  }
  return header;
}

absl::Status EmbeddingStoreImpl::ApplyReplayedSections(Replay& replay) {
  // Nothing is evicted until the replayed rows are written back in
  // StartNextRun(). A replayed update counts as made now.
  const uint32_t replay_now_s = NowSeconds();
  std::string bytes;
  PushSection section;
  std::vector<uint32_t> order, starts;
  std::vector<uint64_t> stripe_keys;
  std::vector<CachedRow*> loaded;
  for (const Replay::Section& where : replay.sections) {
    RETURN_IF_ERROR(replay.reader->ReadAt(where.location, where.offset,
                                          where.bytes, &bytes));
    ASSIGN_OR_RETURN(const PushSectionHeader header,
                     DecodePushSectionHeader(bytes));
    ASSIGN_OR_RETURN(const Table* table, FindTableById(header.table_id));
    if (table->dropped) continue;
    const size_t dim = table->dim;
    RETURN_IF_ERROR(DecodePushSection(bytes, dim, &section));
    // The section's stripe today may differ (--hot_tier_stripes).
    GroupByStripe(section.keys, &order, &starts);
    for (size_t s = 0; s < stripes_.size(); ++s) {
      if (starts[s] == starts[s + 1]) continue;
      internal::GatherKeys(section.keys, order, starts[s], starts[s + 1],
                           &stripe_keys);
      Stripe& stripe = *stripes_[s];
      absl::MutexLock lock(&stripe.mu);
      RETURN_IF_ERROR(
          LoadRows(*table, stripe, stripe_keys, /*create=*/true, &loaded));
      for (uint32_t i = starts[s]; i < starts[s + 1]; ++i) {
        CachedRow* row = loaded[i - starts[s]];
        // Written (evicted) after this update: it holds it already. A key's
        // records all come from one stripe, so their sequences compare.
        if (row->log_sequence >= where.sequence) continue;
        float* weights = row->floats();
        // Finite: the push that logged it checked the same update.
        table->optimizer->Apply(&section.gradients[order[i] * dim], table->dim,
                                where.learning_rate_scale, weights,
                                weights + dim);
        row->log_sequence = where.sequence;
        internal::NoteRowUpdated(*row, replay_now_s);
        ++replay.rows;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status EmbeddingStoreImpl::StartNextRun(Replay& replay) {
  const uint64_t next_run = replay.run + 1;
  // The replayed rows and the new run in one synced write: from then on
  // the old segments are not needed, and a crash before they are deleted
  // leaves segments of an older run, which the next open deletes unread.
  RocksStore::Batch batch = rocks_->NewBatch();
  for (auto& stripe : stripes_) {
    absl::MutexLock lock(&stripe->mu);
    stripe->cache.ForEachDirty(
        [&](uint32_t table_id, CachedRow& row, absl::Span<float> values) {
          batch.Put(table_id, row.key, values,
                    LogPosition{next_run, /*sequence=*/0},
                    RowMeta{row.updated_at_s, row.push_count});
          ++replay.rows_written;
        });
  }
  // Every push the ledger knows is in these rows or written back already.
  batch.StartLogRun(next_run, ledger_.Serialize());
  RETURN_IF_ERROR(rocks_->WriteSynced(&batch));
  RETURN_IF_ERROR(push_log_->DeleteRunsBefore(next_run));
  push_log_->StartRun(next_run);
  log_run_ = next_run;
  for (auto& stripe : stripes_) {
    absl::MutexLock lock(&stripe->mu);
    stripe->cache.ForEachRow([](uint32_t, CachedRow& row, absl::Span<float>) {
      row.dirty = false;
      row.log_sequence = 0;  // numbers of the old run
    });
    RocksStore::Batch empty = rocks_->NewBatch();
    RETURN_IF_ERROR(EvictAndWrite(*stripe, &empty));
  }
  return absl::OkStatus();
}

}  // namespace ps::embedding
