// EmbeddingStore's pushes: validation, the exactly-once ledger, admission,
// and applying a push to its stripes whole or not at all, with its push-log
// record (push_record.h) under kWal.

#include <algorithm>
#include <csignal>
#include <cstring>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/optimizer.h"
#include "base/status_macros.h"
#include "base/transient_error.h"
#include "embedding/distinct_keys.h"
#include "embedding/embedding_store_impl.h"
#include "embedding/embedding_store_internal.h"
#include "embedding/push_record.h"
#include "glog/logging.h"

namespace ps::embedding {
namespace {

// What Push() checks of a request before anything else: a usable scale,
// gradients of the right size, every one finite.
absl::Status ValidatePush(absl::string_view table_name, size_t dim,
                          absl::Span<const uint64_t> keys,
                          absl::Span<const float> gradients,
                          float learning_rate_scale) {
  if (!internal::IsPositiveFinite(learning_rate_scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a push's learning-rate scale must be positive and "
                     "finite, not ",
                     learning_rate_scale));
  }
  if (gradients.size() != keys.size() * dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("push of ", keys.size(), " keys to table ", table_name,
                     " (dim ", dim, ") needs ", keys.size() * dim,
                     " gradient floats, got ", gradients.size()));
  }
  if (const int64_t i = FirstNonFinite(gradients); i >= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gradient of key ", keys[i / dim], " (row ", i / dim, ", column ",
        i % dim, ") is ", gradients[i], "; nothing was applied"));
  }
  return absl::OkStatus();
}

// Sums the gradients of keys named more than once. Where every key is
// named once (a worker's pushes), `*distinct` and `*sums` become `keys` and
// `gradients` themselves and nothing is copied; otherwise they view
// `*summed_keys`, each key once in first-seen order, and `*summed_gradients`,
// its summed gradient (dim floats). INVALID_ARGUMENT if a sum leaves the
// finite numbers.
absl::Status SumDuplicateKeys(absl::Span<const uint64_t> keys,
                              absl::Span<const float> gradients, size_t dim,
                              absl::Span<const uint64_t>* distinct,
                              absl::Span<const float>* sums,
                              std::vector<uint64_t>* summed_keys,
                              std::vector<float>* summed_gradients) {
  *distinct = keys;
  *sums = gradients;
  if (AllKeysDistinct(keys)) return absl::OkStatus();
  absl::flat_hash_map<uint64_t, uint32_t> position_of;
  position_of.reserve(keys.size());
  summed_keys->clear();
  summed_keys->reserve(keys.size());
  summed_gradients->clear();
  summed_gradients->reserve(gradients.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    auto [it, inserted] = position_of.try_emplace(keys[i], summed_keys->size());
    const float* gradient = &gradients[i * dim];
    if (inserted) {
      summed_keys->push_back(keys[i]);
      summed_gradients->insert(summed_gradients->end(), gradient,
                               gradient + dim);
    } else {
      float* sum = &(*summed_gradients)[it->second * dim];
      for (size_t d = 0; d < dim; ++d) sum[d] += gradient[d];
    }
  }
  *distinct = *summed_keys;
  *sums = *summed_gradients;
  if (const int64_t i = FirstNonFinite(*summed_gradients); i >= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the gradients of key ", (*summed_keys)[i / dim],
                     ", named more than once, sum to ", (*summed_gradients)[i],
                     " in column ", i % dim, "; nothing was applied"));
  }
  return absl::OkStatus();
}

}  // namespace

struct EmbeddingStoreImpl::PendingPush {
  PushOrigin origin;
  float learning_rate_scale = 1.0f;
  // The table, and its weights and optimizer state per row.
  uint32_t table_id = 0;
  absl::string_view table_name;
  size_t row_floats = 0;
  // Distinct keys, first-seen order, and their summed gradients: the
  // caller's, or (where a key repeats) `summed_keys` and `summed_gradients`.
  absl::Span<const uint64_t> keys;
  absl::Span<const float> gradients;
  std::vector<uint64_t> summed_keys;
  std::vector<float> summed_gradients;
  // GroupByStripe(keys); the stripes touched, ascending (the lock order).
  std::vector<uint32_t> order, starts;
  std::vector<Stripe*> stripes;
  // kWal: the record, with a section per touched stripe (in `stripes`'
  // order); each section's sequence, taken under the locks; where Write()
  // put the record.
  std::optional<PushRecordWriter> record;
  std::vector<uint64_t> sequences;
  PushLog::Ticket ticket;
  // What the update changed, for UndoPush(): rows in `order`'s order, the
  // first `applied` of which were updated from `before`; rows created.
  std::vector<CachedRow*> rows;
  std::vector<float> before;
  size_t applied = 0;
  std::vector<CachedRow*> created;
};

absl::StatusOr<PushOutcome> EmbeddingStoreImpl::Push(
    absl::string_view table_name, absl::Span<const uint64_t> keys,
    absl::Span<const float> gradients, const PushOrigin& origin,
    float learning_rate_scale) {
  ASSIGN_OR_RETURN(const Table* table, FindTable(table_name));
  RETURN_IF_ERROR(ValidatePush(table_name, table->dim, keys, gradients,
                               learning_rate_scale));
  // A retry of a push applied before gets its first answer, whatever
  // happened to the log since.
  if (origin.tracked()) {
    ASSIGN_OR_RETURN(PushLedger::Claim claim, ledger_.Begin(origin));
    if (claim.duplicate) {
      ++duplicate_pushes_;
      return PushOutcome{claim.rows_updated, /*duplicate=*/true};
    }
  }
  if (options_.durability == Durability::kWal) {
    // A log that failed refuses pushes before they are applied; one that a
    // full disk stopped tries again.
    if (absl::Status health = push_log_->Recover(); !health.ok()) {
      if (origin.tracked()) ledger_.Finish(origin, false, 0);
      return absl::Status(
          health.code(),
          absl::StrCat("the push log failed earlier, so pushes are refused "
                       "until the server restarts (nothing was applied): ",
                       health.message()));
    }
  }
  const absl::StatusOr<size_t> updated = ApplyGated(
      *table, table_name, keys, gradients, origin, learning_rate_scale);
  if (origin.tracked()) {
    ledger_.Finish(origin, updated.ok(),
                   updated.ok() ? static_cast<uint32_t>(*updated) : 0);
  }
  RETURN_IF_ERROR(updated.status());
  rows_pushed_ += *updated;
  return PushOutcome{*updated, /*duplicate=*/false};
}

absl::StatusOr<size_t> EmbeddingStoreImpl::ApplyGated(
    const Table& table, absl::string_view table_name,
    absl::Span<const uint64_t> keys, absl::Span<const float> gradients,
    const PushOrigin& origin, float learning_rate_scale) {
  absl::ReaderMutexLock gate(&push_gate_);
  const float scale =
      learning_rate_scale * table.learning_rate_multiplier.load();
  if (table.dropped) {
    return absl::NotFoundError(
        absl::StrCat("table \"", table_name, "\" was dropped"));
  }
  if (!internal::IsPositiveFinite(scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the push's learning-rate scale ", learning_rate_scale,
                     " times the table's rate over its declared one is ", scale,
                     "; nothing was applied"));
  }
  std::vector<uint64_t> kept_keys, to_count;
  std::vector<float> kept_gradients;
  size_t admitted = 0, held_back = 0;
  if (table.admission != nullptr) {
    ASSIGN_OR_RETURN(held_back,
                     FilterAdmitted(table, keys, gradients, &kept_keys,
                                    &kept_gradients, &to_count, &admitted));
    keys = kept_keys;
    gradients = kept_gradients;
  }
  size_t updated = 0;  // stays 0 when every key is held back
  if (!keys.empty()) {
    ASSIGN_OR_RETURN(updated, ApplyPush(table, keys, gradients, origin, scale));
  }
  // Admission counts pushes that were applied, once each.
  if (table.admission != nullptr) {
    for (uint64_t key : to_count) table.admission->CountPush(key);
    rows_admitted_ += admitted;
    keys_held_back_ += held_back;
  }
  return updated;
}

absl::StatusOr<size_t> EmbeddingStoreImpl::FilterAdmitted(
    const Table& table, absl::Span<const uint64_t> keys,
    absl::Span<const float> gradients, std::vector<uint64_t>* kept_keys,
    std::vector<float>* kept_gradients, std::vector<uint64_t>* to_count,
    size_t* admitted_keys) {
  // A key named twice in one push counts as one push of it.
  std::vector<uint64_t> distinct(keys.begin(), keys.end());
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  std::vector<uint32_t> order, starts;
  GroupByStripe(distinct, &order, &starts);
  absl::flat_hash_set<uint64_t> held_back;
  std::vector<uint64_t> stripe_keys;
  std::vector<CachedRow*> rows;
  size_t admitted = 0;
  for (size_t s = 0; s < stripes_.size(); ++s) {
    if (starts[s] == starts[s + 1]) continue;
    internal::GatherKeys(distinct, order, starts[s], starts[s + 1],
                         &stripe_keys);
    Stripe& stripe = *stripes_[s];
    absl::MutexLock lock(&stripe.mu);
    // Loads the stored ones into the hot tier, where the push finds them.
    RETURN_IF_ERROR(
        LoadRows(table, stripe, stripe_keys, /*create=*/false, &rows));
    for (size_t i = 0; i < stripe_keys.size(); ++i) {
      if (rows[i] != nullptr) continue;
      to_count->push_back(stripe_keys[i]);
      if (table.admission->WouldAdmit(stripe_keys[i])) {
        ++admitted;
      } else {
        held_back.insert(stripe_keys[i]);
      }
    }
    EvictOrKeep(stripe);
  }
  *admitted_keys = admitted;
  const size_t dim = table.dim;
  kept_keys->clear();
  kept_gradients->clear();
  for (size_t i = 0; i < keys.size(); ++i) {
    if (held_back.contains(keys[i])) continue;
    kept_keys->push_back(keys[i]);
    kept_gradients->insert(kept_gradients->end(), &gradients[i * dim],
                           &gradients[i * dim] + dim);
  }
  return held_back.size();
}

absl::StatusOr<size_t> EmbeddingStoreImpl::ApplyPush(
    const Table& table, absl::Span<const uint64_t> keys,
    absl::Span<const float> gradients, const PushOrigin& origin,
    float learning_rate_scale) {
  PendingPush push;
  push.origin = origin;
  push.learning_rate_scale = learning_rate_scale;
  push.table_id = table.id;
  push.table_name = table.spec.name();
  push.row_floats = table.row_floats;
  RETURN_IF_ERROR(SumDuplicateKeys(keys, gradients, table.dim, &push.keys,
                                   &push.gradients, &push.summed_keys,
                                   &push.summed_gradients));
  GroupByStripe(push.keys, &push.order, &push.starts);
  PreparePush(table, push);

  for (Stripe* stripe : push.stripes) stripe->mu.Lock();
  absl::Status updated = UpdateLockedStripes(table, push);
  if (updated.ok()) {
    for (Stripe* stripe : push.stripes) EvictOrKeep(*stripe);
  }
  for (auto it = push.stripes.rbegin(); it != push.stripes.rend(); ++it)
    (*it)->mu.Unlock();
  RETURN_IF_ERROR(updated);

  if (push.record.has_value()) RETURN_IF_ERROR(FinishLoggedPush(push));
  return push.keys.size();
}

void EmbeddingStoreImpl::PreparePush(const Table& table, PendingPush& push) {
  const size_t dim = table.dim;
  if (options_.durability == Durability::kWal) {
    // The record is built before the stripes are locked; only the sections'
    // sequence numbers are filled in under the locks.
    push.record.emplace(
        push.origin, static_cast<uint32_t>(push.keys.size()),
        push.learning_rate_scale,
        MaxPushRecordBytes(stripes_.size(), push.keys.size(), dim));
  }
  const absl::Span<const uint32_t> order(push.order);
  for (size_t s = 0; s < stripes_.size(); ++s) {
    if (push.starts[s] == push.starts[s + 1]) continue;
    push.stripes.push_back(stripes_[s].get());
    if (!push.record.has_value()) continue;
    push.record->AddSection(
        table.id, static_cast<uint32_t>(s), dim, push.keys, push.gradients,
        order.subspan(push.starts[s], push.starts[s + 1] - push.starts[s]));
  }
}

absl::Status EmbeddingStoreImpl::UpdateLockedStripes(const Table& table,
                                                     PendingPush& push) {
  for (Stripe* stripe : push.stripes) stripe->mu.AssertHeld();
  // Load (or create) every row first: an I/O error here changes nothing.
  RETURN_IF_ERROR(LoadPushRows(table, push));
  const uint32_t now_s = NowSeconds();
  RETURN_IF_ERROR(UpdatePushRows(table, push));
  RETURN_IF_ERROR(WritePushRecord(push));
  CommitPush(push, now_s);
  return absl::OkStatus();
}

absl::Status EmbeddingStoreImpl::LoadPushRows(const Table& table,
                                              PendingPush& push) {
  push.rows.resize(push.keys.size());
  std::vector<uint64_t> stripe_keys;
  std::vector<CachedRow*> loaded;
  for (Stripe* stripe : push.stripes) {
    const size_t s = stripe->index;
    internal::GatherKeys(push.keys, push.order, push.starts[s],
                         push.starts[s + 1], &stripe_keys);
    if (absl::Status status = LoadRows(table, *stripe, stripe_keys,
                                       /*create=*/true, &loaded, &push.created);
        !status.ok()) {
      UndoPush(push);
      return status;
    }
    std::copy(loaded.begin(), loaded.end(), push.rows.begin() + push.starts[s]);
  }
  return absl::OkStatus();
}

absl::Status EmbeddingStoreImpl::UpdatePushRows(const Table& table,
                                                PendingPush& push) {
  const size_t dim = table.dim;
  const size_t row_floats = push.row_floats;
  // Update, keeping each row's values before; a row whose weights or
  // optimizer state leave the finite numbers undoes the whole push.
  push.before.reserve(push.rows.size() * row_floats);
  constexpr size_t kAhead = 8;
  for (size_t i = 0; i < push.rows.size(); ++i) {
    if (i + kAhead < push.rows.size()) {
      // The header too: CommitPush writes it.
      PrefetchBytes(push.rows[i + kAhead],
                    sizeof(CachedRow) + row_floats * sizeof(float));
      PrefetchBytes(&push.gradients[push.order[i + kAhead] * dim],
                    dim * sizeof(float));
    }
    float* values = push.rows[i]->floats();
    push.before.insert(push.before.end(), values, values + row_floats);
    const bool finite =
        table.optimizer->Apply(&push.gradients[push.order[i] * dim], table.dim,
                               push.learning_rate_scale, values, values + dim);
    push.applied = i + 1;
    if (!finite) {
      const int64_t bad = FirstNonFinite(absl::MakeSpan(values, row_floats));
      const float value = values[bad];
      const uint64_t key = push.rows[i]->key;
      UndoPush(push);
      return absl::InvalidArgumentError(absl::StrCat(
          "applying the gradient of key ", key, " to table ", table.spec.name(),
          " would make float ", bad, " of its row (", dim,
          " weights, then optimizer state) ", value, "; nothing was applied"));
    }
  }
  return absl::OkStatus();
}

absl::Status EmbeddingStoreImpl::WritePushRecord(PendingPush& push) {
  push.sequences.assign(push.stripes.size(), 0);
  if (!push.record.has_value()) return absl::OkStatus();
  // Number each stripe's section and write the record while the stripes
  // are locked, so that sequence order is application order.
  for (size_t j = 0; j < push.stripes.size(); ++j) {
    push.sequences[j] = push.stripes[j]->next_log_sequence++;
    push.record->SetSequence(j, push.sequences[j]);
  }
  absl::StatusOr<PushLog::Ticket> ticket =
      push_log_->Write(push.record->record(), [&] {
        if (push.origin.tracked()) {
          ledger_.MarkWritten(push.origin,
                              static_cast<uint32_t>(push.keys.size()));
        }
        // Under the log's lock and the stripes': the feed's order is the
        // order the pushes were applied in.
        if (ReplicationFeed* feed = feed_.load(); feed != nullptr) {
          feed->AppendPush(push.table_name, push.record->record());
        }
      });
  if (!ticket.ok()) {
    LOG_EVERY_N(ERROR, 100)
        << "writing a push's record failed: " << ticket.status();
    for (Stripe* stripe : push.stripes) --stripe->next_log_sequence;
    UndoPush(push);
    return WithMessage(
        ticket.status(),
        absl::StrCat(ticket.status().message(),
                     IsTransient(ticket.status())
                         ? " (nothing of this push was applied; pushes go "
                           "on once the disk has room)"
                         : " (nothing of this push was applied; later "
                           "pushes are refused until the server restarts)"));
  }
  push.ticket = *ticket;
  return absl::OkStatus();
}

void EmbeddingStoreImpl::CommitPush(PendingPush& push, uint32_t now_s) {
  for (size_t j = 0; j < push.stripes.size(); ++j) {
    const size_t s = push.stripes[j]->index;
    for (uint32_t i = push.starts[s]; i < push.starts[s + 1]; ++i) {
      CachedRow* row = push.rows[i];
      internal::NoteRowUpdated(*row, now_s);
      if (push.sequences[j] != 0) row->log_sequence = push.sequences[j];
    }
  }
}

void EmbeddingStoreImpl::UndoPush(PendingPush& push) {
  const size_t row_floats = push.row_floats;
  for (size_t i = 0; i < push.applied; ++i) {
    std::memcpy(push.rows[i]->floats(), &push.before[i * row_floats],
                row_floats * sizeof(float));
  }
  push.applied = 0;
  for (CachedRow* row : push.created) {
    stripes_[StripeOf(row->key)]->cache.Erase(push.table_id, row);
  }
  push.created.clear();
}

absl::Status EmbeddingStoreImpl::FinishLoggedPush(const PendingPush& push) {
  if (absl::Status synced = push_log_->Sync(push.ticket); !synced.ok()) {
    return absl::Status(
        synced.code(),
        absl::StrCat(synced.message(),
                     " (this push is applied in memory and is written back "
                     "with its rows, but a machine crash before then loses "
                     "it; later pushes are refused until the server "
                     "restarts)"));
  }
  if (options_.testing_kill_after_push_records > 0 &&
      ++push_records_written_ >= options_.testing_kill_after_push_records) {
    LOG(ERROR) << "testing_kill_after_push_records: killing this process "
               << "after the push log took a push, before it is answered";
    raise(SIGKILL);
  }
  if (push_log_->live_bytes() > options_.max_push_log_bytes) {
    absl::MutexLock flush_lock(&flush_mu_);
    log_over_budget_ = true;
  }
  return absl::OkStatus();
}

}  // namespace ps::embedding
