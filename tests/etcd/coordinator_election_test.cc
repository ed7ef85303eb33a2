// cluster::CoordinatorElection against a real etcd on loopback: one of the
// shards that campaign leads, its clock coordinator alone answers, and another
// takes over with a higher term when it goes or loses its key.

#include "cluster/coordinator_election.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "base/status_matchers.h"
#include "base/wait_until.h"
#include "cluster/coordination_store.h"
#include "cluster/in_memory_store.h"
#include "cluster/shard_directory.h"
#include "gtest/gtest.h"
#include "server/clock_coordinator.h"
#include "tests/etcd_process.h"

namespace ps::server {
namespace {

constexpr char kJob[] = "election";

// The parameter: "etcd" or "in_memory".
class CoordinatorElectionTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "in_memory") {
      client_ = std::make_unique<cluster::InMemoryStore>();
    } else {
      absl::StatusOr<std::unique_ptr<testing::EtcdProcess>> etcd =
          testing::EtcdProcess::Start("election");
      ASSERT_OK(etcd);
      etcd_ = *std::move(etcd);
      absl::StatusOr<std::unique_ptr<cluster::CoordinationStore>> client =
          etcd_->Connect();
      ASSERT_OK(client);
      client_ = *std::move(client);
    }
    for (int shard = 0; shard < 2; ++shard) {
      CoordinatorOptions coordinator;
      coordinator.elected = true;
      absl::StatusOr<std::unique_ptr<ClockCoordinator>> clocks =
          ClockCoordinator::Open(coordinator);
      ASSERT_OK(clocks);
      clocks_.push_back(*std::move(clocks));
      elections_.emplace_back();
      Campaign(shard);
    }
  }

  void Campaign(int shard) {
    cluster::ElectionOptions options;
    options.job = kJob;
    options.shard_index = static_cast<uint32_t>(shard);
    options.address = "127.0.0.1:" + std::to_string(50000 + shard);
    options.ttl = absl::Seconds(1);
    options.poll = absl::Milliseconds(50);
    absl::StatusOr<std::unique_ptr<cluster::CoordinatorElection>> election =
        cluster::CoordinatorElection::Start(client_.get(), clocks_[shard].get(),
                                            options);
    ASSERT_OK(election);
    elections_[shard] = *std::move(election);
  }

  // The one shard that leads within `timeout` (its coordinator answering,
  // the other's not), or -1.
  int Leader(absl::Duration timeout = absl::Seconds(10)) {
    int leader = -1;
    auto one_leads = [&] {
      int answering = 0;
      for (int shard = 0; shard < 2; ++shard)
        answering += clocks_[shard]->Serving().ok() ? 1 : 0;
      EXPECT_LE(answering, 1) << "two coordinators answer at once";
      std::vector<int> leading;
      for (int shard = 0; shard < 2; ++shard) {
        if (elections_[shard] != nullptr && elections_[shard]->leading())
          leading.push_back(shard);
      }
      EXPECT_LE(leading.size(), 1u) << "two shards lead at once";
      if (leading.size() != 1) return false;
      leader = leading[0];
      EXPECT_OK(clocks_[leader]->Serving());
      if (elections_[1 - leader] != nullptr) {
        EXPECT_EQ(clocks_[1 - leader]->Serving().code(),
                  absl::StatusCode::kUnavailable);
      }
      return true;
    };
    WaitUntil(one_leads, timeout);
    return leader;
  }

  uint64_t Term() {
    absl::StatusOr<net::EtcdValue> stored =
        client_->Get(cluster::CoordinatorTermKey(kJob));
    uint64_t term = 0;
    EXPECT_OK(stored.status());
    if (stored.ok()) {
      EXPECT_TRUE(absl::SimpleAtoi(
          stored->value.substr(0, stored->value.find(' ')), &term))
          << stored->value;
    }
    return term;
  }

  std::unique_ptr<testing::EtcdProcess> etcd_;
  std::unique_ptr<cluster::CoordinationStore> client_;
  std::vector<std::unique_ptr<ClockCoordinator>> clocks_;
  std::vector<std::unique_ptr<cluster::CoordinatorElection>> elections_;
};

INSTANTIATE_TEST_SUITE_P(EtcdAndInMemory, CoordinatorElectionTest,
                         ::testing::Values("etcd", "in_memory"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

TEST_P(CoordinatorElectionTest, OneLeadsAndAnotherTakesOverWhenItGoes) {
  const int first = Leader();
  ASSERT_GE(first, 0);
  const uint64_t first_term = Term();
  EXPECT_GT(first_term, 0u);
  absl::StatusOr<net::EtcdValue> held =
      client_->Get(cluster::CoordinatorKey(kJob));
  ASSERT_OK(held);
  EXPECT_EQ(held->value.substr(0, 2), std::to_string(first) + " ");
  // The leader stops (it gives its key up): the other leads, at once, at a
  // higher term.
  elections_[first].reset();
  EXPECT_EQ(clocks_[first]->Serving().code(), absl::StatusCode::kUnavailable);
  const int second = Leader(absl::Seconds(5));
  ASSERT_EQ(second, 1 - first);
  EXPECT_GT(Term(), first_term);
}

TEST_P(CoordinatorElectionTest, ALeaderThatLosesItsKeyStepsDown) {
  const int first = Leader();
  ASSERT_GE(first, 0);
  const uint64_t first_term = Term();
  // The key deleted under it (an operator, or etcd's state lost): it steps
  // down at its next renewal, and an election follows; the next leader
  // waits the old one's lease out, so that they never answer at once
  // (Leader() checks, while it waits for one).
  ASSERT_OK(client_->Delete(cluster::CoordinatorKey(kJob)).status());
  WaitUntil(
      [&] {
        EXPECT_FALSE(clocks_[0]->Serving().ok() && clocks_[1]->Serving().ok())
            << "two coordinators answer at once";
        return Term() != first_term;
      },
      absl::Seconds(5), absl::Milliseconds(5));
  EXPECT_GT(Term(), first_term);
  EXPECT_GE(Leader(), 0);
}

TEST_P(CoordinatorElectionTest, NobodyLeadsOnATermThatDoesNotRead) {
  const int first = Leader();
  ASSERT_GE(first, 0);
  elections_[0].reset();
  elections_[1].reset();
  ASSERT_OK(
      client_->Put(cluster::CoordinatorTermKey(kJob), "not a term").status());
  Campaign(0);
  absl::SleepFor(absl::Seconds(1));
  EXPECT_FALSE(elections_[0]->leading());
  EXPECT_EQ(clocks_[0]->Serving().code(), absl::StatusCode::kUnavailable);
  // Put right, it leads.
  ASSERT_OK(client_->Put(cluster::CoordinatorTermKey(kJob), "7").status());
  elections_[1] = nullptr;
  EXPECT_EQ(Leader(), 0);
  EXPECT_GT(Term(), 7u);
}

}  // namespace
}  // namespace ps::server
