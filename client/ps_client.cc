#include "client/ps_client.h"

#include <algorithm>
#include <optional>

#include "absl/random/random.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/time/clock.h"
#include "base/slot_map.h"
#include "base/status_macros.h"
#include "base/transient_error.h"
#include "glog/logging.h"
#include "grpcpp/client_context.h"
#include "net/grpc_status.h"

namespace ps::client {

using ::ps::net::FromGrpcStatus;

namespace {

// The epoch of a ps-moved trailer on a finished call, if it has one.
std::optional<uint64_t> MovedEpochOf(const grpc::ClientContext& context) {
  const auto& trailers = context.GetServerTrailingMetadata();
  const auto found = trailers.find(kMovedMetadata);
  uint64_t epoch = 0;
  if (found == trailers.end() ||
      !absl::SimpleAtoi(
          absl::string_view(found->second.data(), found->second.size()),
          &epoch)) {
    return std::nullopt;
  }
  return epoch;
}

// Set while this thread holds refresh_mu_ (re-routing or looking shards up),
// so that the calls it makes meanwhile do not look the shards up again.
thread_local bool tls_refreshing = false;

class RefreshingScope {
 public:
  RefreshingScope() : was_(tls_refreshing) { tls_refreshing = true; }
  ~RefreshingScope() { tls_refreshing = was_; }

 private:
  const bool was_;
};

}  // namespace

PsClient::PsClient(const ClientOptions& options,
                   std::unique_ptr<ShardChannels> channels)
    : options_(options),
      limits_{options.max_keys_per_request, options.wire_format},
      retry_options_{options.retry_for, options.initial_backoff,
                     absl::Seconds(2)},
      channels_(std::move(channels)),
      slot_map_(std::make_shared<const SlotMap>(
          SlotMap::Initial(static_cast<uint32_t>(options.servers.size())))) {}

absl::StatusOr<std::unique_ptr<PsClient>> PsClient::Connect(
    const ClientOptions& options) {
  if (options.servers.empty()) {
    return absl::InvalidArgumentError("need at least one server address");
  }
  if (options.servers.size() > static_cast<size_t>(kMaxShards)) {
    return absl::InvalidArgumentError(
        absl::StrCat(options.servers.size(),
                     " servers: a client reaches at most ", kMaxShards));
  }
  if (options.max_keys_per_request == 0) {
    return absl::InvalidArgumentError("max_keys_per_request must be positive");
  }
  ASSIGN_OR_RETURN(
      std::unique_ptr<ShardChannels> channels,
      ShardChannels::Open(options.servers,
                          options.coordinator.empty() ? options.servers[0]
                                                      : options.coordinator,
                          {options.tls, options.max_message_bytes}));
  auto client =
      std::unique_ptr<PsClient>(new PsClient(options, std::move(channels)));
  client->incarnation_ =
      options.incarnation != 0
          ? options.incarnation
          : static_cast<uint64_t>(absl::ToUnixMicros(absl::Now()));
  return client;
}

namespace {

// Issues request i to shards[i] for each i in `pending` at once, each with a
// deadline of `timeout`, and waits for every answer: their statuses (in
// `pending`'s order) and their calls' contexts (for the trailing metadata).
template <typename Request, typename Response, typename Issue>
void IssueAndWait(const std::vector<size_t>& pending,
                  std::vector<Request>& requests,
                  const std::vector<int>& shards,
                  std::vector<Response>* responses, Issue& issue,
                  absl::Duration timeout,
                  std::vector<std::unique_ptr<grpc::ClientContext>>* contexts,
                  std::vector<grpc::Status>* statuses) {
  contexts->resize(pending.size());
  statuses->assign(pending.size(), grpc::Status());
  absl::BlockingCounter outstanding(static_cast<int>(pending.size()));
  for (size_t p = 0; p < pending.size(); ++p) {
    const size_t i = pending[p];
    (*contexts)[p] = std::make_unique<grpc::ClientContext>();
    (*contexts)[p]->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    (*responses)[i].Clear();
    issue(shards[i], (*contexts)[p].get(), &requests[i], &(*responses)[i],
          [statuses, &outstanding, p](grpc::Status status) {
            (*statuses)[p] = std::move(status);
            outstanding.DecrementCount();
          });
  }
  outstanding.Wait();
}

}  // namespace

template <typename Request, typename Response, typename Issue>
absl::Status PsClient::FanOut(std::vector<Request>& requests,
                              const std::vector<int>& shards,
                              std::vector<Response>* responses, Issue issue,
                              const char* what, absl::Duration retry_for,
                              Moved* moved, absl::Duration attempt_timeout) {
  if (attempt_timeout <= absl::ZeroDuration())
    attempt_timeout = options_.call_timeout;
  const size_t n = requests.size();
  // Each response is cleared before its call.
  responses->resize(n);
  std::vector<bool> done(n, false);
  RetryOptions retry = retry_options_;
  retry.retry_for = retry_for;
  RetrySchedule schedule(retry, absl::Now());
  absl::Time failing_since = absl::InfiniteFuture();
  while (true) {
    std::vector<size_t> pending;
    for (size_t i = 0; i < n; ++i) {
      if (!done[i]) pending.push_back(i);
    }
    if (pending.empty()) return absl::OkStatus();
    std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
    std::vector<grpc::Status> statuses;
    const absl::Time attempted = absl::Now();
    const uint64_t lookups_before = shard_lookups_.load();
    IssueAndWait(pending, requests, shards, responses, issue, attempt_timeout,
                 &contexts, &statuses);
    grpc::Status last_failure;
    int last_shard = -1;
    for (size_t p = 0; p < pending.size(); ++p) {
      const grpc::Status& status = statuses[p];
      if (status.ok()) {
        done[pending[p]] = true;
        continue;
      }
      if (moved != nullptr &&
          status.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
        if (const std::optional<uint64_t> epoch = MovedEpochOf(*contexts[p])) {
          done[pending[p]] = true;
          moved->requests.push_back(pending[p]);
          if (*epoch >= moved->epoch) {
            moved->epoch = *epoch;
            moved->shard = shards[pending[p]];
          }
          continue;
        }
      }
      const auto code = static_cast<absl::StatusCode>(status.error_code());
      if (!IsRetryable(code, contexts[p]->GetServerTrailingMetadata().count(
                                 kTransientMetadata) > 0)) {
        return FromGrpcStatus(
            status, absl::StrCat(what, " on shard ", shards[pending[p]]));
      }
      retry_counts_.Add(code);
      last_failure = status;
      last_shard = shards[pending[p]];
    }
    if (last_shard < 0) return absl::OkStatus();  // every call succeeded
    // Since the failed attempt began: a call that ran into its deadline
    // (a paused shard) has waited that long already.
    if (failing_since == absl::InfiniteFuture()) failing_since = attempted;
    if (options_.find_shards && !tls_refreshing &&
        absl::Now() - failing_since >= options_.shard_patience) {
      // The shard may live elsewhere now (a replica took its place).
      failing_since = absl::Now();
      MaybeFollowShards(lookups_before);
    }
    thread_local absl::BitGen random;
    const std::optional<absl::Duration> wait =
        schedule.NextWait(absl::Now(), random);
    if (!wait.has_value()) {
      return FromGrpcStatus(
          last_failure,
          absl::StrCat(what, " on shard ", last_shard, " (gave up retrying)"));
    }
    LOG_EVERY_N(WARNING, 20)
        << what << " on shard " << last_shard << " failed (code "
        << last_failure.error_code() << ": " << last_failure.error_message()
        << "); retrying";
    absl::SleepFor(*wait);
  }
}

void PsClient::MaybeFollowShards(uint64_t lookups_before) {
  RefreshingScope refreshing;
  absl::MutexLock lock(&refresh_mu_);
  // Unless another call looked them up since this attempt began (many calls
  // fail together when a shard goes).
  if (shard_lookups_.load() != lookups_before) return;
  const auto job_shards = static_cast<uint32_t>(channels_->job_shards());
  if (absl::Status followed = FollowShards(job_shards); !followed.ok()) {
    LOG_EVERY_N(WARNING, 10) << "looking the shards up: " << followed;
  }
}

void PsClient::AddWorkerToken(grpc::ClientContext* context) const {
  if (!options_.worker_token.empty())
    context->AddMetadata("authorization", "Bearer " + options_.worker_token);
}

absl::Status PsClient::DeclareTable(const TableSpec& spec) {
  // Recorded first: a shard that joins from here on is declared it too.
  return DeclareOn(spec, channels_->RecordTable(spec));
}

absl::Status PsClient::DeclareOn(const TableSpec& spec,
                                 std::vector<int> shards) {
  std::vector<DeclareTableRequest> requests(shards.size());
  for (DeclareTableRequest& request : requests) *request.mutable_table() = spec;
  std::vector<DeclareTableResponse> responses;
  RETURN_IF_ERROR(FanOut(
      requests, shards, &responses,
      [this](int shard, grpc::ClientContext* context,
             DeclareTableRequest* request, DeclareTableResponse* response,
             std::function<void(grpc::Status)> done) {
        AddWorkerToken(context);
        channels_->shard(shard)->async()->DeclareTable(
            context, request, response, std::move(done));
      },
      "declaring table", options_.retry_for, nullptr));
  // A shard that predates later_columns trained every column with the
  // first optimizer: a model it cannot train as declared.
  if (spec.optimizer().later_columns().empty() &&
      spec.initializer().later_columns().empty()) {
    return absl::OkStatus();
  }
  for (size_t i = 0; i < shards.size(); ++i) {
    if (i < responses.size() && responses[i].row_floats() > 0) continue;
    return absl::FailedPreconditionError(absl::StrCat(
        "shard ", shards[i],
        " predates tables whose later columns train with other optimizers "
        "(table ",
        spec.name(),
        ": a spec's stored_with, ps_worker --wide_in_embedding_row): upgrade "
        "the shards, or train without them"));
  }
  return absl::OkStatus();
}

absl::Status PsClient::Pull(absl::Span<const TableRows> pulls) {
  std::shared_ptr<const SlotMap> map = slot_map();
  PullPlan plan;
  for (const TableRows& pull : pulls) {
    if (!pull.row_positions.empty() &&
        pull.row_positions.size() != pull.keys.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("pull of ", pull.table, ": ", pull.row_positions.size(),
                       " row positions for ", pull.keys.size(), " keys"));
    }
    AddPullRequests(pull, AllPositions(pull.keys.size()), limits_, *map, &plan);
  }
  // Replies stay in gRPC's buffers, each row decoded from there.
  std::vector<grpc::ByteBuffer> responses;
  for (int round = 0;; ++round) {
    Moved moved;
    RETURN_IF_ERROR(FanOut(
        plan.requests, plan.shards, &responses,
        [this](int shard, grpc::ClientContext* context, PullRequest* request,
               grpc::ByteBuffer* response,
               std::function<void(grpc::Status)> done) {
          channels_->raw_pull(shard)->UnaryCall(
              context, ShardChannels::PullMethod(), grpc::StubOptions(),
              request, response, std::move(done));
        },
        "pull", options_.retry_for, &moved));
    std::vector<bool> was_moved(plan.requests.size(), false);
    for (size_t c : moved.requests) was_moved[c] = true;
    for (size_t c = 0; c < plan.requests.size(); ++c) {
      if (was_moved[c]) continue;
      RETURN_IF_ERROR(DeliverPullResponse(responses[c], plan.shards[c],
                                          plan.destinations[c]));
    }
    if (moved.requests.empty()) return absl::OkStatus();
    ASSIGN_OR_RETURN(map, RefreshSlotMap(moved, round));
    PullPlan again;
    for (size_t c : moved.requests) {
      const PullPlan::Destination& destination = plan.destinations[c];
      AddPullRequests(*destination.pull, destination.positions, limits_, *map,
                      &again);
    }
    plan = std::move(again);
  }
}

absl::Status PsClient::Push(absl::Span<const TableGradients> pushes,
                            uint32_t worker, int64_t clock) {
  std::shared_ptr<const SlotMap> map = slot_map();
  const PushOrigin origin = {worker, clock, incarnation_.load()};
  std::vector<PushRequest> requests;
  std::vector<int> shards;
  for (const TableGradients& push : pushes) {
    RETURN_IF_ERROR(AddPushRequests(push, origin, limits_, *map,
                                    push_sequences_, &requests, &shards));
  }
  std::vector<PushResponse> responses;
  for (int round = 0;; ++round) {
    Moved moved;
    RETURN_IF_ERROR(FanOut(
        requests, shards, &responses,
        [this](int shard, grpc::ClientContext* context, PushRequest* request,
               PushResponse* response, std::function<void(grpc::Status)> done) {
          channels_->shard(shard)->async()->Push(context, request, response,
                                                 std::move(done));
        },
        "push", options_.retry_for, &moved));
    if (moved.requests.empty()) return absl::OkStatus();
    // A refused push was applied nowhere (a shard that had applied it
    // answers its retry as a duplicate, moved or not): its keys go where
    // the new map says, as new requests with new sequence numbers.
    ASSIGN_OR_RETURN(map, RefreshSlotMap(moved, round));
    std::vector<PushRequest> again;
    std::vector<int> again_shards;
    for (size_t r : moved.requests) {
      ReroutePush(requests[r], shards[r], *map, push_sequences_, &again,
                  &again_shards);
    }
    requests = std::move(again);
    shards = std::move(again_shards);
  }
}

std::shared_ptr<const SlotMap> PsClient::slot_map() const {
  absl::MutexLock lock(&slot_map_mu_);
  return slot_map_;
}

absl::StatusOr<std::shared_ptr<const SlotMap>> PsClient::RefreshSlotMap(
    const Moved& moved, int round) {
  if (round >= kMaxReroutes) {
    return absl::AbortedError(absl::StrCat(
        "keys were refused as moved ", round + 1,
        " times in a row (last by shard ", moved.shard, " at slot map epoch ",
        moved.epoch, "): the shards disagree on the slot map"));
  }
  RefreshingScope refreshing_scope;
  absl::MutexLock refreshing(&refresh_mu_);
  if (std::shared_ptr<const SlotMap> map = slot_map();
      map->epoch() >= moved.epoch && round == 0) {
    return map;  // another call refreshed it meanwhile
  }
  std::vector<GetSlotMapRequest> requests(1);
  const std::vector<int> shards = {moved.shard};
  std::vector<GetSlotMapResponse> responses;
  RETURN_IF_ERROR(FanOut(
      requests, shards, &responses,
      [this](int shard, grpc::ClientContext* context,
             GetSlotMapRequest* request, GetSlotMapResponse* response,
             std::function<void(grpc::Status)> done) {
        channels_->shard(shard)->async()->GetSlotMap(context, request, response,
                                                     std::move(done));
      },
      "reading the slot map", options_.retry_for, nullptr));
  absl::StatusOr<SlotMap> fetched = SlotMap::FromSpec(responses[0].slot_map());
  if (!fetched.ok()) {
    return absl::InternalError(absl::StrCat(
        "shard ", moved.shard,
        " sent a slot map that is not one: ", fetched.status().message()));
  }
  if (options_.find_shards) {
    // Shards may have joined since, or left and joined again elsewhere.
    RETURN_IF_ERROR(FollowShards(fetched->num_shards()));
  } else if (fetched->num_shards() > static_cast<uint32_t>(num_shards())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the slot map is of ", fetched->num_shards(),
        " shards, but this worker knows ", num_shards(),
        " (--servers): a worker follows shards that join a job only under "
        "--etcd; restart it with the new shard in --servers"));
  }
  absl::MutexLock lock(&slot_map_mu_);
  if (fetched->epoch() > slot_map_->epoch()) {
    LOG(INFO) << "slot map epoch " << slot_map_->epoch() << " -> "
              << fetched->epoch() << " (from shard " << moved.shard << ")";
    slot_map_ = std::make_shared<const SlotMap>(*std::move(fetched));
  }
  return slot_map_;
}

absl::Status PsClient::FollowShards(uint32_t num_shards) {
  if (num_shards > static_cast<uint32_t>(kMaxShards)) {
    return absl::FailedPreconditionError(
        absl::StrCat("the slot map is of ", num_shards,
                     " shards: a client reaches at most ", kMaxShards));
  }
  // Shards this client has never dialled must be found; a shard briefly
  // unregistered (restarting, its lease running out) is waited for, as a
  // call waits for an unavailable shard. Otherwise a lookup that fails
  // leaves the shards where they were, and one that lists fewer shards
  // than `num_shards` (the job's last shards left it: a lookup lists every
  // shard of the job's map) moves the ones it lists.
  const bool required = num_shards > channels_->job_shards();
  const absl::Time give_up = absl::Now() + options_.retry_for;
  absl::StatusOr<std::vector<std::string>> addresses;
  while (true) {
    addresses = options_.find_shards();
    if (addresses.ok() && required && addresses->size() < num_shards) {
      addresses = absl::UnavailableError(
          absl::StrCat("the slot map is of ", num_shards, " shards, but only ",
                       addresses->size(), " are registered"));
    }
    if (addresses.ok()) break;
    if (!required) {
      LOG(WARNING) << "looking up the shards: " << addresses.status();
      return absl::OkStatus();
    }
    if (absl::Now() >= give_up) {
      return absl::UnavailableError(absl::StrCat(
          "looking up the shards that joined: ", addresses.status().message()));
    }
    LOG_EVERY_N(WARNING, 10)
        << "looking up the shards that joined: " << addresses.status();
    absl::SleepFor(absl::Seconds(1));
  }
  ++shard_lookups_;
  const size_t listed = std::min<size_t>(num_shards, addresses->size());
  const ShardChannels::TablesToDeclare to_declare =
      channels_->MoveShards(absl::MakeConstSpan(*addresses).first(listed));
  for (const TableSpec& spec : to_declare.tables)
    RETURN_IF_ERROR(DeclareOn(spec, to_declare.shards));
  return absl::OkStatus();
}

absl::StatusOr<ClockResponse> PsClient::Clock(const ClockRequest& request,
                                              absl::Duration retry_for) {
  if (retry_for < absl::ZeroDuration()) retry_for = options_.retry_for;
  if (!options_.find_coordinator) return ClockOnce(request, retry_for);
  const absl::Time give_up = absl::Now() + retry_for;
  while (true) {
    absl::StatusOr<ClockResponse> answered = ClockOnce(
        request,
        std::min(options_.coordinator_patience, give_up - absl::Now()));
    const bool unanswered = absl::IsUnavailable(answered.status()) ||
                            absl::IsDeadlineExceeded(answered.status());
    if (!unanswered || absl::Now() >= give_up) return answered;
    // The coordinator may have died and another shard taken over.
    absl::StatusOr<std::string> address = options_.find_coordinator();
    if (!address.ok()) {
      LOG_EVERY_N(WARNING, 10)
          << "looking up the coordinator: " << address.status();
      continue;
    }
    channels_->MoveCoordinator(*address);
  }
}

absl::StatusOr<ClockResponse> PsClient::ClockOnce(const ClockRequest& request,
                                                  absl::Duration retry_for) {
  const std::shared_ptr<ParameterServer::Stub> stub = channels_->coordinator();
  std::vector<ClockRequest> requests = {request};
  const std::vector<int> shards = {0};
  std::vector<ClockResponse> responses;
  absl::Status status = FanOut(
      requests, shards, &responses,
      [this, &stub](int, grpc::ClientContext* context,
                    ClockRequest* clock_request, ClockResponse* response,
                    std::function<void(grpc::Status)> done) {
        AddWorkerToken(context);
        stub->async()->Clock(context, clock_request, response, std::move(done));
      },
      "clock", retry_for, nullptr,
      // A coordinator that does not answer (paused, cut off) is looked up
      // again after coordinator_patience, not after a whole call timeout.
      options_.find_coordinator
          ? std::min(options_.call_timeout, options_.coordinator_patience)
          : options_.call_timeout);
  if (!status.ok()) return status;
  return responses[0];
}

}  // namespace ps::client
