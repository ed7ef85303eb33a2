// File: worker/bounded_queue.h
//
// A blocking FIFO of at most `capacity` items between pipeline threads.
// Push() waits for room, Pop() for an item, TryPop() never waits; Close()
// wakes both for good:
// after it, Push() refuses and Pop() drains what is left, then returns false.
// Thread-safe.

#ifndef PS_WORKER_BOUNDED_QUEUE_H_
#define PS_WORKER_BOUNDED_QUEUE_H_

#include <cstddef>
#include <deque>
#include <utility>

#include "absl/synchronization/mutex.h"

namespace ps::worker {

template <typename T>
class BoundedQueue {
 public:
  explicit BoundedQueue(size_t capacity)
      : capacity_(capacity == 0 ? 1 : capacity) {}

  // Returns false (dropping `item`) if the queue was closed.
  bool Push(T item) {
    absl::MutexLock lock(&mu_);
    auto room = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return closed_ || items_.size() < capacity_;
    };
    mu_.Await(absl::Condition(&room));
    if (closed_) return false;
    items_.push_back(std::move(item));
    return true;
  }

  // Returns false once the queue is closed and empty.
  bool Pop(T* item) {
    absl::MutexLock lock(&mu_);
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return closed_ || !items_.empty();
    };
    mu_.Await(absl::Condition(&ready));
    if (items_.empty()) return false;
    *item = std::move(items_.front());
    items_.pop_front();
    return true;
  }

  // Takes an item if one is ready; never waits.
  bool TryPop(T* item) {
    absl::MutexLock lock(&mu_);
    if (items_.empty()) return false;
    *item = std::move(items_.front());
    items_.pop_front();
    return true;
  }

  void Close() {
    absl::MutexLock lock(&mu_);
    closed_ = true;
  }

 private:
  const size_t capacity_;
  absl::Mutex mu_;
  std::deque<T> items_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace ps::worker

#endif  // PS_WORKER_BOUNDED_QUEUE_H_
