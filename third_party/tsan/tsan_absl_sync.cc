// ThreadSanitizer support for Debian's Abseil, linked into every binary of
// `--config=tsan` builds only (.bazelrc). Debian's libabsl is not built with
// -fsanitize=thread, so TSAN cannot see absl::Mutex order the threads that
// take it, and reports every access it guards as a race. This file
// interposes the Mutex and CondVar entry points (the executable's
// definitions win over the shared library's; each calls the library's own
// through dlsym(RTLD_NEXT)) and tells TSAN what they mean: taking a mutex
// is an acquire of its address, releasing it (or waiting on it) a release,
// and a wait's condition, which Abseil evaluates with the mutex held (in
// the waiting thread or in one that unlocks), acquires it first. It also
// turns Abseil's deadlock detector off (its graph is guarded by a spin lock
// TSAN cannot see either) and suppresses reports from inside RocksDB, whose
// lock-free write path is not instrumented.

#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include "absl/synchronization/mutex.h"

namespace {

// The shared library's definition of `mangled`, which this file hides.
template <typename Function>
Function Real(const char* mangled) {
  void* symbol = dlsym(RTLD_NEXT, mangled);
  if (symbol == nullptr) {
    std::fprintf(stderr, "tsan_absl_sync: no %s in the loaded Abseil\n",
                 mangled);
    std::abort();
  }
  return reinterpret_cast<Function>(symbol);
}

void Acquire(const void* mu) { __tsan_acquire(const_cast<void*>(mu)); }
void Release(const void* mu) { __tsan_release(const_cast<void*>(mu)); }

using absl::Condition;
using absl::CondVar;
using absl::Duration;
using absl::Mutex;
using absl::Time;

// A wait's condition as TSAN should see it. Abseil evaluates a waiter's
// condition with the mutex held, in the waiting thread or in whichever
// thread unlocks, both inside the library: each evaluation acquires the
// mutex before and releases it after (so that what the condition reads is
// ordered with the holders before and after it). The waiter releases the
// wrapper and the mutex before waiting (Publish()), so that a thread that
// evaluates the condition sees both as the waiter wrote them. The wrapper's
// own absl::Condition is made by the library's out-of-line constructor and
// called through its out-of-line trampoline, which TSAN does not watch.
class AcquiringCondition {
 public:
  AcquiringCondition(const Condition& condition, const Mutex* mu)
      : original_(&condition),
        mu_(mu),
        condition_(&Eval, static_cast<void*>(this)) {}

  // Call before handing condition() to the library.
  void Publish() const {
    Release(this);
    Release(mu_);
  }
  const Condition& condition() const { return condition_; }

 private:
  static bool Eval(void* arg) {
    Acquire(arg);
    const auto* self = static_cast<const AcquiringCondition*>(arg);
    Acquire(self->mu_);
    const bool met = self->original_->Eval();
    Release(self->mu_);
    return met;
  }

  const Condition* const original_;
  const Mutex* const mu_;
  const Condition condition_;
};

// Calls the library's `real` (a LockWhen or Await) with `cond` wrapped as
// TSAN should see it, and acquires `mu` once it returns holding it.
template <typename Result, typename... Args>
Result WithCondition(Result (*real)(Mutex*, const Condition&, Args...),
                     Mutex* mu, const Condition& cond, Args... args) {
  const AcquiringCondition acquiring(cond, mu);
  acquiring.Publish();
  if constexpr (std::is_void_v<Result>) {
    real(mu, acquiring.condition(), args...);
    Acquire(mu);
  } else {
    const Result met = real(mu, acquiring.condition(), args...);
    Acquire(mu);
    return met;
  }
}

const bool kDeadlockDetectionOff = [] {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return true;
}();

}  // namespace

// Read by TSAN at start.
extern "C" const char* __tsan_default_suppressions() {
  return "called_from_lib:librocksdb.so.7.8\n"
         "race:rocksdb::\n";
}

#define PS_REAL(type, mangled) static const auto real = Real<type>(mangled);

void Mutex::Lock() {
  PS_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex4LockEv")
  real(this);
  Acquire(this);
}

void Mutex::ReaderLock() {
  PS_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex10ReaderLockEv")
  real(this);
  Acquire(this);
}

bool Mutex::TryLock() {
  PS_REAL(bool (*)(Mutex*), "_ZN4absl7debian35Mutex7TryLockEv")
  const bool locked = real(this);
  if (locked) Acquire(this);
  return locked;
}

bool Mutex::ReaderTryLock() {
  PS_REAL(bool (*)(Mutex*), "_ZN4absl7debian35Mutex13ReaderTryLockEv")
  const bool locked = real(this);
  if (locked) Acquire(this);
  return locked;
}

void Mutex::Unlock() {
  PS_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex6UnlockEv")
  Release(this);
  real(this);
}

void Mutex::ReaderUnlock() {
  PS_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex12ReaderUnlockEv")
  Release(this);
  real(this);
}

void Mutex::LockWhen(const Condition& cond) {
  PS_REAL(void (*)(Mutex*, const Condition&),
          "_ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE")
  WithCondition(real, this, cond);
}

void Mutex::ReaderLockWhen(const Condition& cond) {
  PS_REAL(void (*)(Mutex*, const Condition&),
          "_ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE")
  WithCondition(real, this, cond);
}

bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  PS_REAL(bool (*)(Mutex*, const Condition&, Duration),
          "_ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_"
          "8DurationE")
  return WithCondition(real, this, cond, timeout);
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  PS_REAL(bool (*)(Mutex*, const Condition&, Time),
          "_ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_"
          "4TimeE")
  return WithCondition(real, this, cond, deadline);
}

void Mutex::Await(const Condition& cond) {
  PS_REAL(void (*)(Mutex*, const Condition&),
          "_ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE")
  WithCondition(real, this, cond);
}

bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  PS_REAL(bool (*)(Mutex*, const Condition&, Duration),
          "_ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_"
          "8DurationE")
  return WithCondition(real, this, cond, timeout);
}

bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  PS_REAL(bool (*)(Mutex*, const Condition&, Time),
          "_ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_"
          "4TimeE")
  return WithCondition(real, this, cond, deadline);
}

void CondVar::Wait(Mutex* mu) {
  PS_REAL(void (*)(CondVar*, Mutex*),
          "_ZN4absl7debian37CondVar4WaitEPNS0_5MutexE")
  Release(mu);
  real(this, mu);
  Acquire(mu);
}

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  PS_REAL(bool (*)(CondVar*, Mutex*, Duration),
          "_ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_"
          "8DurationE")
  Release(mu);
  const bool timed_out = real(this, mu, timeout);
  Acquire(mu);
  return timed_out;
}

bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  PS_REAL(bool (*)(CondVar*, Mutex*, Time),
          "_ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE")
  Release(mu);
  const bool timed_out = real(this, mu, deadline);
  Acquire(mu);
  return timed_out;
}
