// What InMemoryStore adds to etcd's semantics for the cluster's unit tests
// (the semantics themselves are tests/etcd/coordination_store_test, on etcd and
// on this store alike): a lease ended at once, and a store out of reach.

#include "cluster/in_memory_store.h"

#include <atomic>
#include <string>

#include "absl/synchronization/notification.h"
#include "base/status_matchers.h"
#include "base/wait_until.h"
#include "gtest/gtest.h"

namespace ps::cluster {
namespace {

using absl::StatusCode;

TEST(InMemoryStoreTest, AnExpiredLeaseTakesItsKeysAndIsNotRenewedAgain) {
  InMemoryStore store;
  absl::StatusOr<int64_t> lease = store.GrantLease(absl::Seconds(60));
  ASSERT_OK(lease);
  ASSERT_OK(store.Put("/ps/j/shards/0", "a", *lease));
  ASSERT_OK(store.Put("/ps/j/generation/0", "1"));
  absl::Notification deleted;
  std::atomic<bool> notified{false};
  absl::StatusOr<std::unique_ptr<StoreWatch>> watch =
      store.WatchPrefix("/ps/j/shards/", 0, [&](const EtcdEvent& event) {
        if (event.type == EtcdEvent::Type::kDelete &&
            !notified.exchange(true)) {
          deleted.Notify();
        }
      });
  ASSERT_OK(watch);
  store.ExpireLease(*lease);
  EXPECT_THAT(store.Get("/ps/j/shards/0").status(),
              StatusIs(StatusCode::kNotFound));
  EXPECT_OK(store.Get("/ps/j/generation/0").status());
  EXPECT_THAT(store.KeepAlive(*lease).status(),
              StatusIs(StatusCode::kNotFound));
  EXPECT_TRUE(deleted.WaitForNotificationWithTimeout(absl::Seconds(10)));
}

TEST(InMemoryStoreTest, ALeaseNotRenewedEndsByItself) {
  InMemoryStore store;
  absl::StatusOr<int64_t> lease = store.GrantLease(absl::Seconds(1));
  ASSERT_OK(lease);
  ASSERT_OK(store.Put("/k", "v", *lease));
  EXPECT_TRUE(
      WaitUntil([&] { return absl::IsNotFound(store.Get("/k").status()); },
                absl::Seconds(10)));
}

TEST(InMemoryStoreTest, OutOfReachEveryCallIsUnavailableAndNothingChanges) {
  InMemoryStore store;
  ASSERT_OK(store.Put("/k", "v"));
  store.SetUnreachable(true);
  EXPECT_THAT(store.Get("/k").status(), StatusIs(StatusCode::kUnavailable));
  EXPECT_THAT(store.Put("/k", "w").status(),
              StatusIs(StatusCode::kUnavailable));
  EXPECT_THAT(store.PutIf("/k", "w", 0).status(),
              StatusIs(StatusCode::kUnavailable));
  EXPECT_THAT(store.GrantLease(absl::Seconds(1)).status(),
              StatusIs(StatusCode::kUnavailable));
  store.SetUnreachable(false);
  absl::StatusOr<EtcdValue> value = store.Get("/k");
  ASSERT_OK(value);
  EXPECT_EQ(value->value, "v");
}

}  // namespace
}  // namespace ps::cluster
