// File: embedding/push_ledger.h
//
// PushLedger remembers which pushes a shard has applied, per worker, so that
// a push retried after its reply was lost (or after the shard restarted) is
// answered, not applied a second time. A push names its origin: the worker,
// the worker process's incarnation (a number that grows from one start of
// the worker to the next) and a sequence number the worker gives each of its
// requests to this shard. A worker's newer incarnation supersedes the older
// one, whose pushes are then refused (a stale process cannot write).
//
// For each worker the ledger keeps the sequences it applied lately, with
// their answers (at most `window` of them), and `applied_through`: every
// sequence up to it was applied. A sequence above that which left the
// window (`window` later ones were applied first: far more requests in
// flight than any client sends) cannot be told apart from one never
// applied, and is refused with ABORTED rather than guessed. At most
// `max_workers` workers are tracked; past that, the one heard from longest
// ago is forgotten.
//
// Durability is the store's business (embedding_store.h): it marks a push
// written once its push-log record is, and persists Serialize()'s snapshot
// of every written push; Merge() brings snapshots and replayed records back.
//
// Thread-safe.

#ifndef PS_EMBEDDING_PUSH_LEDGER_H_
#define PS_EMBEDDING_PUSH_LEDGER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace ps::embedding {

// Who sent a push. incarnation 0 means "no origin": such pushes are applied
// every time they arrive.
struct PushOrigin {
  uint32_t worker = 0;
  uint64_t incarnation = 0;
  uint64_t sequence = 0;

  bool tracked() const { return incarnation != 0; }
};

class PushLedger {
 public:
  // Defaults: 4096 workers, 256 sequences each. REQUIRES: both >= 1.
  explicit PushLedger(size_t max_workers = 4096, size_t window = 256);

  PushLedger(const PushLedger&) = delete;
  PushLedger& operator=(const PushLedger&) = delete;

  // What Claim() found.
  struct Claim {
    // The push was applied before: answer `rows_updated` and apply nothing.
    bool duplicate = false;
    // The first answer (0 when the sequence already left the window).
    uint32_t rows_updated = 0;
  };

  // Claims `origin` for applying. When the same push is being applied by
  // another call, waits until that call finishes. FAILED_PRECONDITION for an
  // incarnation older than the worker's newest; INVALID_ARGUMENT for
  // sequence 0 (sequences start at 1); ABORTED for a sequence too old to
  // tell (see above). REQUIRES: origin.tracked(). A claim that is not a
  // duplicate must be followed by Finish().
  absl::StatusOr<Claim> Begin(const PushOrigin& origin);

  // A push refused before it was claimed (the shard was busy): remembered
  // as refused, like Finish() without `applied`, so that its retry is
  // applied however late it comes. Nothing for a sequence known already.
  void NoteRefused(const PushOrigin& origin);

  // The first answer to `origin` if it was applied (0 when it left the
  // window); nothing if it was not, or was refused. Waits while it is being
  // applied. Asks, never claims: for a shard that must answer a retry of a
  // push it applied before the push's keys moved to another shard.
  // FAILED_PRECONDITION for a superseded incarnation and ABORTED for a
  // sequence too old to tell, as Begin().
  absl::StatusOr<std::optional<uint32_t>> Applied(const PushOrigin& origin);

  // The push's record is written to the push log: from now on it counts as
  // applied in Serialize(), and a retry waits for Finish().
  void MarkWritten(const PushOrigin& origin, uint32_t rows_updated);

  // Ends a claim. With `applied`, the push is done and `rows_updated` is its
  // answer to retries; without, the attempt is remembered as refused (its
  // retry applies it, however many later sequences came meanwhile, up to
  // kMaxRememberedFactor windows), unless MarkWritten() was called: what
  // the log holds stays applied.
  void Finish(const PushOrigin& origin, bool applied, uint32_t rows_updated);

  // Every written or finished push, in a form Merge() reads; the same
  // ledger gives the same bytes, whatever order its workers came in.
  std::string Serialize() const;

  // Adds a snapshot from Serialize() (union: the newer incarnation of a
  // worker wins). DATA_LOSS for bytes that do not parse.
  absl::Status Merge(absl::string_view serialized);

  // Adds one applied push (a replayed push-log record).
  void MergeApplied(const PushOrigin& origin, uint32_t rows_updated);

  // Workers tracked now.
  size_t workers() const;

 private:
  // kRefused: an attempt that was not applied (refused as busy, say); its
  // retry may come after many later sequences, so the window does not move
  // past it (up to kMaxRememberedFactor windows).
  enum class State { kInProgress, kWritten, kDone, kRefused };
  static constexpr size_t kMaxRememberedFactor = 16;
  struct Entry {
    State state;
    uint32_t rows_updated;
  };
  struct Worker {
    uint64_t incarnation = 0;
    // Every sequence <= applied_through was applied.
    uint64_t applied_through = 0;
    // Sequences <= forgotten_below and not in `recent` left the window.
    uint64_t forgotten_below = 0;
    std::map<uint64_t, Entry> recent;
    // Ledger-wide counter value at the last use, for forgetting.
    uint64_t last_used = 0;
  };

  // The worker's entry for `incarnation`, created (or reset, for a newer
  // incarnation) if needed; nullptr for an older incarnation.
  Worker* FindOrAdd(uint32_t worker, uint64_t incarnation)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves applied_through up over finished sequences, then drops the
  // oldest finished sequences past the window.
  void Trim(Worker& worker) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records `sequence` as done unless it is known already.
  void AddApplied(Worker& worker, uint64_t sequence, uint32_t rows_updated)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t max_workers_;
  const size_t window_;
  mutable absl::Mutex mu_;
  absl::CondVar finished_;
  uint64_t uses_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<uint32_t, Worker> workers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps::embedding

#endif  // PS_EMBEDDING_PUSH_LEDGER_H_
