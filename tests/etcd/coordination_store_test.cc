// CoordinationStore's contract, the same tests on Debian's etcd (EtcdStore
// over net/etcd_client, etcd started on loopback for each test) and on
// InMemoryStore, so that the store the cluster's unit tests run on behaves
// as etcd does: keys, compare-and-swap, leases that expire, watches. Then
// what only the client has: a member that is down.

#include "cluster/coordination_store.h"

#include <signal.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/status_matchers.h"
#include "cluster/etcd_store.h"
#include "cluster/in_memory_store.h"
#include "gtest/gtest.h"
#include "net/etcd_client.h"
#include "tests/etcd_process.h"

namespace ps::net {
namespace {

using absl::StatusCode;
using cluster::CoordinationStore;
using cluster::StoreWatch;

// The parameter: "etcd" or "in_memory".
class StoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "in_memory") {
      client_ = std::make_unique<cluster::InMemoryStore>();
      return;
    }
    absl::StatusOr<std::unique_ptr<ps::testing::EtcdProcess>> etcd =
        ps::testing::EtcdProcess::Start("etcd");
    ASSERT_OK(etcd);
    etcd_ = *std::move(etcd);
    EtcdOptions options;
    options.endpoints = {etcd_->endpoint()};
    options.call_timeout = absl::Seconds(2);
    absl::StatusOr<std::unique_ptr<CoordinationStore>> client =
        cluster::EtcdStore::Connect(options);
    ASSERT_OK(client);
    client_ = *std::move(client);
  }

  std::unique_ptr<ps::testing::EtcdProcess> etcd_;
  std::unique_ptr<CoordinationStore> client_;
};

INSTANTIATE_TEST_SUITE_P(EtcdAndInMemory, StoreTest,
                         ::testing::Values("etcd", "in_memory"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

class EtcdClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<ps::testing::EtcdProcess>> etcd =
        ps::testing::EtcdProcess::Start("etcd");
    ASSERT_OK(etcd);
    etcd_ = *std::move(etcd);
  }

  std::unique_ptr<ps::testing::EtcdProcess> etcd_;
};

TEST(EtcdPrefixEndTest, IsThePrefixWithItsLastByteRaised) {
  EXPECT_EQ(EtcdClient::PrefixEnd("/ps/a"), "/ps/b");
  EXPECT_EQ(EtcdClient::PrefixEnd(std::string("a\xff", 2)), "b");
  EXPECT_EQ(EtcdClient::PrefixEnd(""), std::string(1, '\0'));
}

TEST_P(StoreTest, KeysAreWrittenReadAndDeletedByKeyAndByPrefix) {
  EXPECT_THAT(client_->Get("/ps/job/a").status(),
              StatusIs(StatusCode::kNotFound));
  ASSERT_OK(client_->Put("/ps/job/a", "1"));
  ASSERT_OK(client_->Put("/ps/job/b", "2"));
  ASSERT_OK(client_->Put("/ps/jobs", "not under /ps/job/"));
  absl::StatusOr<EtcdValue> a = client_->Get("/ps/job/a");
  ASSERT_OK(a);
  EXPECT_EQ(a->value, "1");
  EXPECT_GT(a->mod_revision, 0);
  absl::StatusOr<std::vector<EtcdValue>> job = client_->GetPrefix("/ps/job/");
  ASSERT_OK(job);
  ASSERT_EQ(job->size(), 2u);
  EXPECT_EQ((*job)[0].key, "/ps/job/a");
  EXPECT_EQ((*job)[1].value, "2");
  absl::StatusOr<int64_t> deleted = client_->DeletePrefix("/ps/job/");
  ASSERT_OK(deleted);
  EXPECT_EQ(*deleted, 2);
  EXPECT_OK(client_->Get("/ps/jobs").status());
  absl::StatusOr<int64_t> one = client_->Delete("/ps/jobs");
  ASSERT_OK(one);
  EXPECT_EQ(*one, 1);
}

TEST_P(StoreTest, ASwapHappensOnlyFromTheRevisionItExpects) {
  // Only if absent: the first wins, the second loses.
  absl::StatusOr<bool> created = client_->PutIf("/ps/map", "epoch 1", 0);
  ASSERT_OK(created);
  EXPECT_TRUE(*created);
  absl::StatusOr<bool> again = client_->PutIf("/ps/map", "epoch 1'", 0);
  ASSERT_OK(again);
  EXPECT_FALSE(*again);
  absl::StatusOr<EtcdValue> seen = client_->Get("/ps/map");
  ASSERT_OK(seen);
  EXPECT_EQ(seen->value, "epoch 1");
  // From the revision read: wins once; a second writer with the same read
  // loses.
  absl::StatusOr<bool> swapped =
      client_->PutIf("/ps/map", "epoch 2", seen->mod_revision);
  ASSERT_OK(swapped);
  EXPECT_TRUE(*swapped);
  absl::StatusOr<bool> stale =
      client_->PutIf("/ps/map", "epoch 2'", seen->mod_revision);
  ASSERT_OK(stale);
  EXPECT_FALSE(*stale);
  absl::StatusOr<EtcdValue> now = client_->Get("/ps/map");
  ASSERT_OK(now);
  EXPECT_EQ(now->value, "epoch 2");
  // And only while every further condition holds: here, "/ps/lock" absent.
  absl::StatusOr<bool> unlocked = client_->PutIf(
      "/ps/map", "epoch 3", now->mod_revision, 0, {{"/ps/lock", 0}});
  ASSERT_OK(unlocked);
  EXPECT_TRUE(*unlocked);
  ASSERT_OK(client_->Put("/ps/lock", "held").status());
  absl::StatusOr<EtcdValue> third = client_->Get("/ps/map");
  ASSERT_OK(third);
  absl::StatusOr<bool> locked = client_->PutIf(
      "/ps/map", "epoch 4", third->mod_revision, 0, {{"/ps/lock", 0}});
  ASSERT_OK(locked);
  EXPECT_FALSE(*locked);
  absl::StatusOr<EtcdValue> last = client_->Get("/ps/map");
  ASSERT_OK(last);
  EXPECT_EQ(last->value, "epoch 3");
}

TEST_P(StoreTest, ALeaseKeptAliveHoldsItsKeysAndOneLeftExpiresThem) {
  absl::StatusOr<int64_t> kept = client_->GrantLease(absl::Seconds(2));
  ASSERT_OK(kept);
  absl::StatusOr<int64_t> left = client_->GrantLease(absl::Seconds(2));
  ASSERT_OK(left);
  ASSERT_OK(client_->Put("/ps/shards/0", "kept", *kept));
  ASSERT_OK(client_->Put("/ps/shards/1", "left", *left));
  absl::StatusOr<EtcdValue> attached = client_->Get("/ps/shards/1");
  ASSERT_OK(attached);
  EXPECT_EQ(attached->lease, *left);
  // Renew one for 6 s (three TTLs); the other must be gone by then.
  const absl::Time until = absl::Now() + absl::Seconds(6);
  while (absl::Now() < until) {
    absl::StatusOr<absl::Duration> renewed = client_->KeepAlive(*kept);
    ASSERT_OK(renewed);
    EXPECT_GT(*renewed, absl::ZeroDuration());
    absl::SleepFor(absl::Milliseconds(500));
  }
  EXPECT_OK(client_->Get("/ps/shards/0").status());
  EXPECT_THAT(client_->Get("/ps/shards/1").status(),
              StatusIs(StatusCode::kNotFound));
  EXPECT_THAT(client_->KeepAlive(*left).status(),
              StatusIs(StatusCode::kNotFound));
  // Revoked: its key goes at once.
  ASSERT_OK(client_->RevokeLease(*kept));
  EXPECT_THAT(client_->Get("/ps/shards/0").status(),
              StatusIs(StatusCode::kNotFound));
}

TEST_P(StoreTest, AWatchSeesEveryChangeUnderItsPrefixInOrder) {
  absl::Mutex mu;
  std::vector<std::string> seen;
  absl::StatusOr<std::unique_ptr<StoreWatch>> watch =
      client_->WatchPrefix("/ps/w/", 0, [&](const EtcdEvent& event) {
        absl::MutexLock lock(&mu);
        seen.push_back(absl::StrCat(
            event.type == EtcdEvent::Type::kPut ? "put " : "delete ",
            event.kv.key, "=", event.kv.value));
      });
  ASSERT_OK(watch);
  ASSERT_OK(client_->Put("/ps/w/a", "1"));
  ASSERT_OK(client_->Put("/ps/elsewhere", "x"));
  ASSERT_OK(client_->Put("/ps/w/a", "2"));
  ASSERT_OK(client_->Delete("/ps/w/a"));
  const std::vector<std::string> expected = {"put /ps/w/a=1", "put /ps/w/a=2",
                                             "delete /ps/w/a="};
  {
    absl::MutexLock lock(&mu);
    auto all_seen = [&] { return seen.size() >= expected.size(); };
    mu.AwaitWithTimeout(absl::Condition(&all_seen), absl::Seconds(10));
    EXPECT_EQ(seen, expected);
  }
  (*watch)->Cancel();
  EXPECT_OK((*watch)->status());
}

TEST_P(StoreTest, AWatchFromAPastRevisionReplaysWhatChangedSince) {
  ASSERT_OK(client_->Put("/ps/r/a", "1"));
  absl::StatusOr<int64_t> second = client_->Put("/ps/r/a", "2");
  ASSERT_OK(second);
  ASSERT_OK(client_->Put("/ps/r/b", "3"));
  absl::Mutex mu;
  std::vector<std::string> seen;
  absl::StatusOr<std::unique_ptr<StoreWatch>> watch =
      client_->WatchPrefix("/ps/r/", *second, [&](const EtcdEvent& event) {
        absl::MutexLock lock(&mu);
        seen.push_back(absl::StrCat(event.kv.key, "=", event.kv.value));
      });
  ASSERT_OK(watch);
  ASSERT_OK(client_->Put("/ps/r/a", "4"));
  const std::vector<std::string> expected = {"/ps/r/a=2", "/ps/r/b=3",
                                             "/ps/r/a=4"};
  absl::MutexLock lock(&mu);
  auto all_seen = [&] { return seen.size() >= expected.size(); };
  mu.AwaitWithTimeout(absl::Condition(&all_seen), absl::Seconds(10));
  EXPECT_EQ(seen, expected);
}

TEST_P(StoreTest, RevisionsCountChangesAndALeaseMustExistToHoldAKey) {
  absl::StatusOr<EtcdPosition> before = client_->Position();
  ASSERT_OK(before);
  absl::StatusOr<int64_t> put = client_->Put("/ps/n/a", "1");
  ASSERT_OK(put);
  EXPECT_EQ(*put, before->revision + 1);
  ASSERT_OK(client_->Put("/ps/n/b", "1"));
  // A delete of nothing changes nothing; one of a prefix is one change.
  ASSERT_OK(client_->Delete("/ps/n/none"));
  ASSERT_OK(client_->DeletePrefix("/ps/n/"));
  absl::StatusOr<EtcdPosition> after = client_->Position();
  ASSERT_OK(after);
  EXPECT_EQ(after->revision, before->revision + 3);
  EXPECT_EQ(after->cluster_id, before->cluster_id);
  EXPECT_THAT(client_->Put("/ps/n/c", "1", /*lease=*/424242).status(),
              StatusIs(StatusCode::kNotFound));
  absl::StatusOr<int64_t> lease = client_->GrantLease(absl::Seconds(5));
  ASSERT_OK(lease);
  absl::StatusOr<absl::Duration> left = client_->LeaseTimeLeft(*lease);
  ASSERT_OK(left);
  EXPECT_GT(*left, absl::ZeroDuration());
  EXPECT_LE(*left, absl::Seconds(6));
  ASSERT_OK(client_->RevokeLease(*lease));
  absl::StatusOr<absl::Duration> gone = client_->LeaseTimeLeft(*lease);
  ASSERT_OK(gone);
  EXPECT_EQ(*gone, absl::ZeroDuration());
}

TEST_F(EtcdClientTest, AMemberThatIsDownIsPassedOverThenNamedInTheError) {
  EtcdOptions options;
  options.endpoints = {
      absl::StrCat("127.0.0.1:", ps::testing::UnusedLoopbackPort()),
      etcd_->endpoint()};
  options.call_timeout = absl::Seconds(2);
  absl::StatusOr<std::unique_ptr<EtcdClient>> client =
      EtcdClient::Connect(options);
  ASSERT_OK(client);
  ASSERT_OK((*client)->Put("/ps/k", "v"));
  absl::StatusOr<EtcdValue> value = (*client)->Get("/ps/k");
  ASSERT_OK(value);
  EXPECT_EQ(value->value, "v");
  // Every member down: UNAVAILABLE (or the deadline), within the timeouts.
  etcd_->Stop(SIGKILL);
  const absl::Time start = absl::Now();
  const absl::Status down = (*client)->Put("/ps/k", "w").status();
  EXPECT_TRUE(absl::IsUnavailable(down) || absl::IsDeadlineExceeded(down))
      << down;
  EXPECT_NE(down.message().find("no etcd endpoint answered"),
            absl::string_view::npos)
      << down;
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_THAT(EtcdClient::Connect(EtcdOptions()).status(),
              StatusIs(StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace ps::net
