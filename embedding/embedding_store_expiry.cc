// EmbeddingStore's expiry of rows (TableSpec.row_ttl_s): the rule handed to
// RocksDB's compactions, and the sweeps of the hot tier.

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "embedding/embedding_store_impl.h"
#include "glog/logging.h"

namespace ps::embedding {

void EmbeddingStoreImpl::StartTableExpiry(const Table& table) {
  ExpiryRule on_disk = table.expiry;
  // A disk copy goes only once a newer update of the row held in memory
  // must have been written back over it (twice the write-back interval):
  // deleting it earlier would lose that row's training to a crash before
  // the write-back.
  const absl::Duration interval = WriteBackInterval(options_);
  on_disk.ttl_s += static_cast<uint32_t>(
      absl::ToInt64Seconds(absl::Ceil(2 * interval, absl::Seconds(1))));
  rocks_->SetExpiry(table.id, on_disk);
  any_expiry_ = true;
}

bool EmbeddingStoreImpl::ExpiredInMemory(const Table& table,
                                         const CachedRow& row) const {
  // A dirty row holds an update RocksDB does not have yet: it is recent,
  // or its write-back is failing, and then it must not be dropped.
  return opened_ && table.expiry.ttl_s > 0 && !row.dirty &&
         table.expiry.Expired(RowMeta{row.updated_at_s, row.push_count},
                              NowSeconds());
}

void EmbeddingStoreImpl::StartExpiry() {
  absl::ReaderMutexLock lock(&tables_mu_);
  for (const auto& table : tables_) {
    if (table != nullptr && !table->dropped && table->expiry.ttl_s > 0)
      StartTableExpiry(*table);
  }
}

size_t EmbeddingStoreImpl::ExpireRowsInMemory(Stripe& stripe,
                                              const Table* only_table) {
  const uint32_t now_s = NowSeconds();
  // The expiring tables, by id, read once.
  std::vector<const Table*> expiring;
  {
    absl::ReaderMutexLock lock(&tables_mu_);
    for (const auto& table : tables_) {
      if (table == nullptr || table->dropped || table->expiry.ttl_s == 0)
        continue;
      if (only_table != nullptr && table.get() != only_table) continue;
      if (expiring.size() <= table->id) expiring.resize(table->id + 1);
      expiring[table->id] = table.get();
    }
  }
  if (expiring.empty()) return 0;
  // A part of the stripe per hold of its lock, so that pulls and pushes of
  // the stripe wait for a part's sweep (~0.2 ms), not the whole stripe's.
  constexpr size_t kEntriesPerLock = 16384;
  std::vector<CachedRow*> expired;
  std::vector<uint32_t> expired_tables;
  size_t expired_rows = 0;
  RowCache::RowCursor cursor;
  for (bool more = true; more;) {
    absl::MutexLock lock(&stripe.mu);
    expired.clear();
    expired_tables.clear();
    more = stripe.cache.ForEachRowFrom(
        &cursor, kEntriesPerLock,
        [&](uint32_t table_id, CachedRow& row, absl::Span<float>) {
          // A dirty row has an update RocksDB does not: it goes once
          // written.
          if (row.dirty || table_id >= expiring.size()) return;
          const Table* table = expiring[table_id];
          if (table != nullptr &&
              table->expiry.Expired(RowMeta{row.updated_at_s, row.push_count},
                                    now_s)) {
            expired.push_back(&row);
            expired_tables.push_back(table_id);
          }
        });
    // The copies on disk are expired too: a load treats them as absent,
    // and compaction drops them. Erasing frees entries without moving rows:
    // the cursor stays valid.
    for (size_t i = 0; i < expired.size(); ++i)
      stripe.cache.Erase(expired_tables[i], expired[i]);
    expired_rows += expired.size();
  }
  rows_expired_in_memory_ += expired_rows;
  return expired_rows;
}

absl::StatusOr<ExpireOutcome> EmbeddingStoreImpl::Expire(
    absl::string_view table_name) {
  ASSIGN_OR_RETURN(const Table* table, FindTable(table_name));
  if (table->expiry.ttl_s == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "table ", table_name, " has no row_ttl_s: its rows never expire"));
  }
  ExpireOutcome outcome;
  for (auto& stripe : stripes_)
    outcome.rows_in_memory += ExpireRowsInMemory(*stripe, table);
  ASSIGN_OR_RETURN(outcome.rows_on_disk, rocks_->CompactTable(table->id));
  LOG(INFO) << "expired table " << table_name << ": " << outcome.rows_in_memory
            << " rows in memory, " << outcome.rows_on_disk << " on disk";
  return outcome;
}

}  // namespace ps::embedding
