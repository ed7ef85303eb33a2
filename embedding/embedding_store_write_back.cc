// EmbeddingStore's write-back: every way a dirty row of the hot tier
// reaches RocksDB (evicted alone with its log position, or a stripe's dirty
// rows together with the stripe's log mark), the push-log segments a mark
// frees, Flush(), and the flusher thread.

#include <algorithm>

#include "base/routing.h"
#include "base/status_macros.h"
#include "embedding/embedding_store_impl.h"
#include "glog/logging.h"

namespace ps::embedding {

absl::Status EmbeddingStoreImpl::EvictAndWrite(Stripe& stripe,
                                               RocksStore::Batch* batch) {
  std::vector<EvictedRow> evicted;
  const size_t rows_before = stripe.cache.size();
  // Over budget until the write-back in flight lands, rather than let an
  // evicted row's newer copy reach RocksDB before its older one.
  if (!stripe.write_back_in_flight) stripe.cache.EvictToBudget(&evicted);
  if (stripe.cache.size() < rows_before) stripe.evicted_rows = true;
  // Each row carries the log sequence of its last update, so replay skips
  // the records it already includes: no mark, and no other row, is needed.
  for (const EvictedRow& row : evicted) {
    batch->Put(row.table_id, row.key, row.values,
               LogPosition{log_run_, row.log_sequence},
               RowMeta{row.updated_at_s, row.push_count});
  }
  const absl::Status written = rocks_->Write(batch);
  if (!written.ok()) {
    // Keep the evicted updates in memory rather than lose them.
    for (const EvictedRow& row : evicted) {
      CachedRow* kept = stripe.cache.Insert(row.table_id, row.key, row.values,
                                            /*dirty=*/true);
      kept->log_sequence = row.log_sequence;
      kept->updated_at_s = row.updated_at_s;
      kept->push_count = row.push_count;
    }
  }
  return written;
}

void EmbeddingStoreImpl::EvictOrKeep(Stripe& stripe) {
  RocksStore::Batch batch = rocks_->NewBatch();
  if (absl::Status evicted = EvictAndWrite(stripe, &batch); !evicted.ok()) {
    LOG_EVERY_N(WARNING, 100)
        << "writing evicted rows failed (they stay in "
        << "memory, over the hot tier's budget): " << evicted;
  }
}

void EmbeddingStoreImpl::AwaitWriteBackLanded(Stripe& stripe) {
  // Evaluated by Await with the stripe's lock held, which the analysis
  // cannot see inside a Condition: hence no analysis of the lambda.
  stripe.mu.Await(absl::Condition(
      +[](Stripe* s)
           ABSL_NO_THREAD_SAFETY_ANALYSIS { return !s->write_back_in_flight; },
      &stripe));
}

EmbeddingStoreImpl::TakenRows EmbeddingStoreImpl::TakeDirtyRows(
    Stripe& stripe, RocksStore::Batch* batch) {
  TakenRows taken;
  // In RocksDB's order (the key's slot, then the key: rocks_store.h): a
  // skiplist memtable inserts a sorted run at a fraction of the cost of
  // scattered keys.
  // The sort compares copies of the key: following each row's pointer would
  // be a cache miss per comparison.
  struct Dirty {
    uint32_t table_id;
    uint32_t slot;
    uint64_t key;
    CachedRow* row;
    absl::Span<float> values;
  };
  std::vector<Dirty> dirty;
  stripe.cache.ForEachDirty(
      [&](uint32_t table_id, CachedRow& row, absl::Span<float> values) {
        dirty.push_back({table_id, SlotForKey(row.key), row.key, &row, values});
      });
  std::sort(dirty.begin(), dirty.end(), [](const Dirty& a, const Dirty& b) {
    if (a.table_id != b.table_id) return a.table_id < b.table_id;
    if (a.slot != b.slot) return a.slot < b.slot;
    return a.key < b.key;
  });
  for (const Dirty& d : dirty) {
    CachedRow& row = *d.row;
    batch->Put(d.table_id, row.key, d.values,  // copies the values
               LogPosition{log_run_, row.log_sequence},
               RowMeta{row.updated_at_s, row.push_count});
    taken.rows.emplace_back(&row, row.version);
  }
  if (options_.durability == Durability::kWal) {
    // Updates applied from here on take sequences at or above the mark and
    // are appended after this moment, so in this segment or a later one.
    batch->SetLogMark(stripe.index, stripe.next_log_sequence);
    taken.log_start_segment = push_log_->current_segment();
  }
  return taken;
}

absl::Status EmbeddingStoreImpl::ReleaseLog(Stripe& stripe,
                                            const TakenRows& taken) {
  if (options_.durability != Durability::kWal) return absl::OkStatus();
  stripe.log_start_segment.store(taken.log_start_segment);
  uint64_t needed = taken.log_start_segment;
  for (const auto& other : stripes_)
    needed = std::min(needed, other->log_start_segment.load());
  return push_log_->DeleteSegmentsBefore(needed);
}

absl::Status EmbeddingStoreImpl::FlushStripe(Stripe& stripe) {
  RocksStore::Batch batch = rocks_->NewBatch();
  TakenRows taken;
  {
    absl::MutexLock lock(&stripe.mu);
    AwaitWriteBackLanded(stripe);
    // No row pointer is held outside the lock, and none under it here: the
    // moment to give back the memory of free entries.
    stripe.cache.Compact();
    taken = TakeDirtyRows(stripe, &batch);
    // Under kWal the mark is written even with no dirty row, so that a quiet
    // stripe does not hold old segments of the log.
    if (taken.rows.empty() && options_.durability != Durability::kWal) {
      return absl::OkStatus();
    }
    stripe.write_back_in_flight = true;
  }
  const absl::Status written = rocks_->Write(&batch);
  absl::MutexLock lock(&stripe.mu);
  stripe.write_back_in_flight = false;
  if (!written.ok()) return written;
  // Rows cannot have been evicted meanwhile (see write_back_in_flight); one
  // updated meanwhile stays dirty.
  for (auto [row, version] : taken.rows) {
    if (row->version == version) row->dirty = false;
  }
  return ReleaseLog(stripe, taken);
}

absl::Status EmbeddingStoreImpl::Flush() {
  for (auto& stripe : stripes_) RETURN_IF_ERROR(FlushStripe(*stripe));
  return rocks_->SyncWal();
}

void EmbeddingStoreImpl::PeriodicFlushLoop() {
  const absl::Duration interval = WriteBackInterval(options_);
  // One stripe at a time, spread evenly over the interval: each stripe is
  // still written back once per interval, but not all in one burst, which
  // overran RocksDB's write buffers and stalled pushes for over a second
  // behind the stripes' locks. While the push log is over its budget, the
  // stripe that holds its oldest segment goes first, until it is not.
  const absl::Duration pause = interval / static_cast<int>(stripes_.size());
  auto has_work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(flush_mu_) {
    return stop_flushing_ || log_over_budget_;
  };
  size_t next = 0;
  while (true) {
    size_t stripe = next;
    {
      absl::MutexLock lock(&flush_mu_);
      const bool woken =
          flush_mu_.AwaitWithTimeout(absl::Condition(&has_work), pause);
      if (stop_flushing_) return;
      if (woken) {
        log_over_budget_ =
            push_log_->live_bytes() > options_.max_push_log_bytes;
        for (size_t s = 0; s < stripes_.size(); ++s) {
          if (stripes_[s]->log_start_segment.load() <
              stripes_[stripe]->log_start_segment.load()) {
            stripe = s;
          }
        }
      } else {
        next = (next + 1) % stripes_.size();
      }
    }
    absl::Status flushed = FlushStripe(*stripes_[stripe]);
    if (!flushed.ok())
      LOG(WARNING) << "periodic write-back failed: " << flushed;
    // Each stripe's expired rows leave memory once per interval.
    if (any_expiry_) ExpireRowsInMemory(*stripes_[stripe], nullptr);
  }
}

}  // namespace ps::embedding
