#include "worker/ps_client.h"

#include <algorithm>
#include <cstring>

#include "absl/cleanup/cleanup.h"
#include "absl/random/random.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/time/clock.h"
#include "base/slot_map.h"
#include "base/status_macros.h"
#include "base/transient_error.h"
#include "base/wire_format.h"
#include "glog/logging.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "net/grpc_status.h"

namespace ps::worker {

using ::ps::net::FromGrpcStatus;

namespace {

std::shared_ptr<grpc::Channel> MakeChannel(
    const std::string& address, const ClientOptions& options,
    const std::shared_ptr<grpc::ChannelCredentials>& credentials) {
  grpc::ChannelArguments args;
  AddTlsChannelArguments(options.tls, &args);
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetMaxSendMessageSize(options.max_message_bytes);
  // Reconnect quickly to a shard that restarts.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return grpc::CreateCustomChannel(address, credentials, args);
}

// Splits `positions` (into `keys`) by the shard `map` gives their keys, then
// into chunks of at most `max_keys` positions each; returns (shard,
// positions) per chunk. REQUIRES: map.HighestShard() < num_shards.
std::vector<std::pair<int, std::vector<uint32_t>>> Route(
    absl::Span<const uint64_t> keys, absl::Span<const uint32_t> positions,
    const SlotMap& map, int num_shards, uint32_t max_keys) {
  std::vector<std::vector<uint32_t>> by_shard(num_shards);
  for (uint32_t i : positions) by_shard[map.ShardForKey(keys[i])].push_back(i);
  std::vector<std::pair<int, std::vector<uint32_t>>> chunks;
  for (int shard = 0; shard < num_shards; ++shard) {
    const std::vector<uint32_t>& positions = by_shard[shard];
    for (size_t start = 0; start < positions.size(); start += max_keys) {
      const size_t end = std::min(positions.size(), start + max_keys);
      chunks.emplace_back(shard,
                          std::vector<uint32_t>(positions.begin() + start,
                                                positions.begin() + end));
    }
  }
  return chunks;
}

using TableRows = TrainingClient::TableRows;

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

// Where one pull request's rows go: the pull it serves, and the positions in
// pull->keys of the keys it asks for, in request order.
struct PullDestination {
  const TableRows* pull;
  std::vector<uint32_t> positions;
};

// One Pull's requests, one per (table, shard, chunk): request i goes to
// shards[i], and its rows to destinations[i].
struct PullPlan {
  std::vector<PullRequest> requests;
  std::vector<int> shards;
  std::vector<PullDestination> destinations;
};

// Keys per request of `pull`. Rows with state are larger: fewer of them per
// request, so that a reply stays within what a plain pull's may be.
uint32_t MaxKeysPerPullRequest(const TableRows& pull,
                               uint32_t max_keys_per_request) {
  if (pull.optimizer == nullptr) return max_keys_per_request;
  return std::max<uint32_t>(
      1, static_cast<uint32_t>(uint64_t{max_keys_per_request} *
                               std::max(pull.dim, 1) /
                               (std::max(pull.dim, 1) + pull.state_floats)));
}

// Writes the keys at `positions` of `keys` into `packed`, 8 bytes each in
// host order.
void PackKeys(absl::Span<const uint64_t> keys,
              const std::vector<uint32_t>& positions, std::string* packed) {
  packed->resize(positions.size() * sizeof(uint64_t));
  char* cursor = packed->data();
  for (uint32_t position : positions) {
    std::memcpy(cursor, &keys[position], sizeof(uint64_t));
    cursor += sizeof(uint64_t);
  }
}

// 0, 1, ..., count - 1.
std::vector<uint32_t> AllPositions(size_t count) {
  std::vector<uint32_t> positions(count);
  for (uint32_t i = 0; i < count; ++i) positions[i] = i;
  return positions;
}

// Appends to `plan` the requests for the keys of `pull` at `positions`,
// routed by `map` over `num_shards` shards.
void AddPullRequests(const TableRows& pull,
                     absl::Span<const uint32_t> key_positions,
                     const ClientOptions& options, const SlotMap& map,
                     int num_shards, PullPlan* plan) {
  const uint32_t max_keys =
      MaxKeysPerPullRequest(pull, options.max_keys_per_request);
  for (auto& [shard, positions] :
       Route(pull.keys, key_positions, map, num_shards, max_keys)) {
    PullRequest& request = plan->requests.emplace_back();
    request.set_table(pull.table);
    request.set_routing_epoch(map.epoch());
    if (pull.optimizer != nullptr) {
      request.set_with_state(true);
    } else {
      request.set_format(options.wire_format);
    }
    PackKeys(pull.keys, positions, request.mutable_keys());
    plan->shards.push_back(shard);
    plan->destinations.push_back({&pull, std::move(positions)});
  }
}

// The push requests `request`'s keys make when routed by `map` over
// `num_shards` shards: (shard, request) each, with every field of `request`
// but keys, gradients and sequence. REQUIRES: request's gradients hold the
// same number of rows as its keys.
std::vector<std::pair<int, PushRequest>> ReroutePush(const PushRequest& request,
                                                     const SlotMap& map,
                                                     int num_shards) {
  std::vector<uint64_t> keys(request.keys().size() / sizeof(uint64_t));
  std::memcpy(keys.data(), request.keys().data(), request.keys().size());
  const size_t row_bytes =
      keys.empty() ? 0 : request.gradients().size() / keys.size();
  std::vector<std::pair<int, PushRequest>> routed;
  for (auto& [shard, positions] :
       Route(keys, AllPositions(keys.size()), map, num_shards,
             static_cast<uint32_t>(std::max<size_t>(keys.size(), 1)))) {
    PushRequest part = request;
    part.set_routing_epoch(map.epoch());
    part.set_sequence(0);
    std::string* packed_keys = part.mutable_keys();
    std::string* gradients = part.mutable_gradients();
    packed_keys->clear();
    gradients->clear();
    for (uint32_t position : positions) {
      packed_keys->append(request.keys(), position * sizeof(uint64_t),
                          sizeof(uint64_t));
      gradients->append(request.gradients(), position * row_bytes, row_bytes);
    }
    routed.emplace_back(shard, std::move(part));
  }
  return routed;
}

// INTERNAL unless `response`, from `shard`, carries what a pull of
// `positions` rows of `pull` asked for: the optimizer and its state (in FP32)
// for a pull with state, and a row of row_bytes bytes per position.
absl::Status CheckPullResponse(const TableRows& pull,
                               const PullResponse& response, int shard,
                               size_t positions, size_t row_bytes) {
  const WireFormat format = response.format();
  if (pull.optimizer != nullptr &&
      (!response.has_optimizer() ||
       response.state_floats() != static_cast<uint32_t>(pull.state_floats) ||
       format != WireFormat::FP32)) {
    return absl::InternalError(absl::StrCat(
        "shard ", shard, " answered a pull of table ", pull.table,
        " with optimizer state with ", response.state_floats(),
        " floats of state (expected ", pull.state_floats, ")",
        response.has_optimizer()
            ? ""
            : " and no optimizer: a shard older than pulls with state "
              "(--overlay_own_pushes=never does without them)",
        " in wire format ", format));
  }
  const std::string& values = response.values();
  if (row_bytes == 0 || values.size() != positions * row_bytes) {
    return absl::InternalError(absl::StrCat(
        "shard ", shard, " returned ", values.size(), " bytes for ", positions,
        " rows of ", pull.dim + pull.state_floats, " floats of table ",
        pull.table, " in wire format ", format));
  }
  return absl::OkStatus();
}

// Decodes `response`, from `shard`, into the rows (and optimizer) of
// destination.pull; CheckPullResponse's errors, with nothing written.
absl::Status DeliverPullResponse(const PullResponse& response, int shard,
                                 const PullDestination& destination) {
  const TableRows& pull = *destination.pull;
  // A shard that predates formats answers FP32 whatever was asked.
  const WireFormat format = response.format();
  const int row_floats = pull.dim + pull.state_floats;
  const size_t row_bytes =
      static_cast<size_t>(row_floats) * WireValueBytes(format);
  const std::vector<uint32_t>& positions = destination.positions;
  RETURN_IF_ERROR(
      CheckPullResponse(pull, response, shard, positions.size(), row_bytes));
  if (pull.optimizer != nullptr) {
    pull.optimizer->spec = response.optimizer();
    pull.optimizer->learning_rate_multiplier =
        response.learning_rate_multiplier();
  }
  const char* cursor = response.values().data();
  for (uint32_t position : positions) {
    const size_t row =
        pull.row_positions.empty() ? position : pull.row_positions[position];
    DecodeWireValues(format, cursor,
                     absl::MakeSpan(pull.rows + row * row_floats, row_floats));
    cursor += row_bytes;
  }
  return absl::OkStatus();
}

// How many shards `map` routes over (a client connects to every one of
// them before it routes by the map).
int MapShards(const SlotMap& map) { return static_cast<int>(map.num_shards()); }

}  // namespace

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
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> credentials,
                   ChannelCredentials(options.tls));
  auto client = std::unique_ptr<PsClient>(new PsClient(options));
  client->incarnation_ =
      options.incarnation != 0
          ? options.incarnation
          : static_cast<uint64_t>(absl::ToUnixMicros(absl::Now()));
  client->push_sequences_ =
      std::make_unique<std::atomic<uint64_t>[]>(kMaxShards);
  for (int s = 0; s < kMaxShards; ++s) client->push_sequences_[s] = 0;
  {
    absl::MutexLock lock(&client->shards_mu_);
    for (const std::string& address : options.servers) {
      client->shards_.push_back(
          ParameterServer::NewStub(MakeChannel(address, options, credentials)));
      client->addresses_.push_back(address);
    }
    client->job_shards_ = options.servers.size();
  }
  client->slot_map_ = std::make_shared<const SlotMap>(
      SlotMap::Initial(static_cast<uint32_t>(options.servers.size())));
  client->credentials_ = credentials;
  absl::MutexLock lock(&client->coordinator_mu_);
  client->coordinator_address_ =
      options.coordinator.empty() ? options.servers[0] : options.coordinator;
  client->coordinator_ = ParameterServer::NewStub(
      MakeChannel(client->coordinator_address_, options, credentials));
  return client;
}

namespace {

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

template <typename Request, typename Response, typename Issue>
absl::Status PsClient::FanOut(std::vector<Request>& requests,
                              std::vector<int>& shards,
                              std::vector<Response>* responses, Issue issue,
                              const char* what, absl::Duration retry_for,
                              Moved* moved, absl::Duration attempt_timeout) {
  if (attempt_timeout <= absl::ZeroDuration())
    attempt_timeout = options_.call_timeout;
  const size_t n = requests.size();
  // Kept elements keep their buffers (each is cleared before its call).
  responses->resize(n);
  std::vector<bool> done(n, false);
  const absl::Time give_up = absl::Now() + retry_for;
  absl::Duration backoff = options_.initial_backoff;
  absl::Time failing_since = absl::InfiniteFuture();
  while (true) {
    std::vector<size_t> pending;
    for (size_t i = 0; i < n; ++i) {
      if (!done[i]) pending.push_back(i);
    }
    if (pending.empty()) return absl::OkStatus();
    std::vector<std::unique_ptr<grpc::ClientContext>> contexts(pending.size());
    std::vector<grpc::Status> statuses(pending.size());
    absl::BlockingCounter outstanding(static_cast<int>(pending.size()));
    const absl::Time attempted = absl::Now();
    const uint64_t lookups_before = shard_lookups_.load();
    for (size_t p = 0; p < pending.size(); ++p) {
      const size_t i = pending[p];
      contexts[p] = std::make_unique<grpc::ClientContext>();
      contexts[p]->set_deadline(
          absl::ToChronoTime(absl::Now() + attempt_timeout));
      (*responses)[i].Clear();
      issue(shards[i], contexts[p].get(), &requests[i], &(*responses)[i],
            [&statuses, &outstanding, p](grpc::Status status) {
              statuses[p] = std::move(status);
              outstanding.DecrementCount();
            });
    }
    outstanding.Wait();
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
      // This client never cancels a call: CANCELLED is the shard's (one
      // shutting down cancels the calls it still has).
      const bool retryable =
          status.error_code() == grpc::StatusCode::UNAVAILABLE ||
          status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
          status.error_code() == grpc::StatusCode::CANCELLED ||
          contexts[p]->GetServerTrailingMetadata().count(kTransientMetadata) >
              0;
      if (!retryable) {
        return FromGrpcStatus(
            status, absl::StrCat(what, " on shard ", shards[pending[p]]));
      }
      ++retries_[std::min<size_t>(status.error_code(), kCodes - 1)];
      last_failure = status;
      last_shard = shards[pending[p]];
    }
    if (last_shard < 0) return absl::OkStatus();  // every call succeeded
    const absl::Time now = absl::Now();
    // Since the failed attempt began: a call that ran into its deadline
    // (a paused shard) has waited that long already.
    if (failing_since == absl::InfiniteFuture()) failing_since = attempted;
    if (options_.find_shards && !tls_refreshing &&
        now - failing_since >= options_.shard_patience) {
      // The shard may live elsewhere now (a replica took its place).
      failing_since = now;
      RefreshingScope refreshing;
      absl::MutexLock lock(&refresh_mu_);
      // Unless another call looked them up since this attempt began (many
      // calls fail together when a shard goes).
      if (shard_lookups_.load() == lookups_before) {
        uint32_t job_shards = 0;
        {
          absl::ReaderMutexLock shards_lock(&shards_mu_);
          job_shards = static_cast<uint32_t>(job_shards_);
        }
        if (absl::Status followed = FollowShards(job_shards); !followed.ok()) {
          LOG_EVERY_N(WARNING, 10) << "looking the shards up: " << followed;
        }
      }
    }
    if (absl::Now() + backoff > give_up) {
      return FromGrpcStatus(
          last_failure,
          absl::StrCat(what, " on shard ", last_shard, " (gave up retrying)"));
    }
    LOG_EVERY_N(WARNING, 20)
        << what << " on shard " << last_shard << " failed (code "
        << last_failure.error_code() << ": " << last_failure.error_message()
        << "); retrying";
    // Full jitter over the upper half: retries of many workers spread out.
    thread_local absl::BitGen random;
    absl::SleepFor(backoff * absl::Uniform(random, 0.5, 1.0));
    backoff = std::min(backoff * 2, absl::Seconds(2));
  }
}

void PsClient::AddWorkerToken(grpc::ClientContext* context) const {
  if (!options_.worker_token.empty())
    context->AddMetadata("authorization", "Bearer " + options_.worker_token);
}

int PsClient::num_shards() const {
  absl::ReaderMutexLock lock(&shards_mu_);
  return static_cast<int>(shards_.size());
}

std::shared_ptr<ParameterServer::Stub> PsClient::shard(int i) const {
  absl::ReaderMutexLock lock(&shards_mu_);
  return shards_[i];
}

absl::Status PsClient::DeclareTable(const TableSpec& spec) {
  std::vector<int> shards;
  {
    // Recorded first: a shard that joins from here on is declared it too.
    absl::MutexLock lock(&shards_mu_);
    auto same_name = [&](const TableSpec& d) {
      return d.name() == spec.name();
    };
    if (auto it = std::find_if(declared_.begin(), declared_.end(), same_name);
        it != declared_.end()) {
      *it = spec;
    } else {
      declared_.push_back(spec);
    }
    for (size_t s = 0; s < job_shards_; ++s)
      shards.push_back(static_cast<int>(s));
  }
  return DeclareOn(spec, std::move(shards));
}

absl::Status PsClient::DeclareOn(const TableSpec& spec,
                                 std::vector<int> shards) {
  std::vector<DeclareTableRequest> requests(shards.size());
  for (DeclareTableRequest& request : requests) *request.mutable_table() = spec;
  std::vector<DeclareTableResponse> responses;
  return FanOut(
      requests, shards, &responses,
      [this](int shard, grpc::ClientContext* context,
             DeclareTableRequest* request, DeclareTableResponse* response,
             std::function<void(grpc::Status)> done) {
        AddWorkerToken(context);
        this->shard(shard)->async()->DeclareTable(context, request, response,
                                                  std::move(done));
      },
      "declaring table", options_.retry_for, nullptr);
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
    AddPullRequests(pull, AllPositions(pull.keys.size()), options_, *map,
                    MapShards(*map), &plan);
  }
  std::vector<PullResponse> responses = TakeSparePullResponses();
  auto give_back =
      absl::MakeCleanup([&] { KeepSparePullResponses(std::move(responses)); });
  for (int round = 0;; ++round) {
    Moved moved;
    RETURN_IF_ERROR(FanOut(
        plan.requests, plan.shards, &responses,
        [this](int shard, grpc::ClientContext* context, PullRequest* request,
               PullResponse* response, std::function<void(grpc::Status)> done) {
          this->shard(shard)->async()->Pull(context, request, response,
                                            std::move(done));
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
      const PullDestination& destination = plan.destinations[c];
      AddPullRequests(*destination.pull, destination.positions, options_, *map,
                      MapShards(*map), &again);
    }
    plan = std::move(again);
  }
}

std::vector<PullResponse> PsClient::TakeSparePullResponses() {
  absl::MutexLock lock(&spare_mu_);
  if (spare_pull_responses_.empty()) return {};
  std::vector<PullResponse> responses = std::move(spare_pull_responses_.back());
  spare_pull_responses_.pop_back();
  return responses;
}

void PsClient::KeepSparePullResponses(std::vector<PullResponse> responses) {
  size_t bytes = 0;
  for (const PullResponse& response : responses)
    bytes += response.values().capacity();
  // One exceptionally large pull (an evaluation's, an export's) is not kept.
  if (bytes > kMaxSpareResponseBytes) return;
  absl::MutexLock lock(&spare_mu_);
  if (spare_pull_responses_.size() < kMaxSpareResponseSets)
    spare_pull_responses_.push_back(std::move(responses));
}

absl::Status PsClient::Push(absl::Span<const TableGradients> pushes,
                            uint32_t worker, int64_t clock) {
  std::shared_ptr<const SlotMap> map = slot_map();
  std::vector<PushRequest> requests;
  std::vector<int> shards;
  for (const TableGradients& push : pushes) {
    if (push.gradients.size() !=
        push.keys.size() * static_cast<size_t>(push.dim)) {
      return absl::InvalidArgumentError(
          absl::StrCat("push to ", push.table, ": ", push.gradients.size(),
                       " gradient floats for ", push.keys.size(),
                       " keys of dim ", push.dim));
    }
    const WireFormat format = options_.wire_format;
    const size_t row_bytes =
        static_cast<size_t>(push.dim) * WireValueBytes(format);
    std::vector<float> scaled;
    for (auto& [shard, positions] :
         Route(push.keys, AllPositions(push.keys.size()), *map, MapShards(*map),
               options_.max_keys_per_request)) {
      PushRequest& request = requests.emplace_back();
      request.set_table(push.table);
      request.set_routing_epoch(map->epoch());
      request.set_worker(worker);
      request.set_clock(clock);
      if (push.learning_rate_scale != 1.0f)
        request.set_learning_rate_scale(push.learning_rate_scale);
      request.set_incarnation(incarnation_.load());
      request.set_sequence(++push_sequences_[shard]);
      std::string* packed_keys = request.mutable_keys();
      std::string* packed_gradients = request.mutable_gradients();
      packed_keys->resize(positions.size() * sizeof(uint64_t));
      packed_gradients->resize(positions.size() * row_bytes);
      char* key_cursor = packed_keys->data();
      for (uint32_t position : positions) {
        std::memcpy(key_cursor, &push.keys[position], sizeof(uint64_t));
        key_cursor += sizeof(uint64_t);
      }
      char* gradient_cursor = packed_gradients->data();
      if (format == WireFormat::FP32) {
        for (uint32_t position : positions) {
          std::memcpy(
              gradient_cursor,
              push.gradients.data() + static_cast<size_t>(position) * push.dim,
              row_bytes);
          gradient_cursor += row_bytes;
        }
      } else {
        // The request's gradients, gathered, scaled for FP16, encoded.
        scaled.resize(positions.size() * push.dim);
        for (size_t i = 0; i < positions.size(); ++i) {
          std::memcpy(&scaled[i * push.dim],
                      push.gradients.data() +
                          static_cast<size_t>(positions[i]) * push.dim,
                      push.dim * sizeof(float));
        }
        if (format == WireFormat::FP16) {
          const float scale = HalfPrecisionScale(scaled);
          for (float& gradient : scaled) gradient *= scale;
          if (scale != 1.0f) request.set_gradient_scale(scale);
        }
        request.set_format(format);
        EncodeWireValues(format, scaled, gradient_cursor);
      }
      shards.push_back(shard);
    }
  }
  std::vector<PushResponse> responses;
  for (int round = 0;; ++round) {
    Moved moved;
    RETURN_IF_ERROR(FanOut(
        requests, shards, &responses,
        [this](int shard, grpc::ClientContext* context, PushRequest* request,
               PushResponse* response, std::function<void(grpc::Status)> done) {
          this->shard(shard)->async()->Push(context, request, response,
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
      for (auto& [shard, part] :
           ReroutePush(requests[r], *map, MapShards(*map))) {
        part.set_sequence(++push_sequences_[shard]);
        // If a shard that refused it had applied it (its answer lost), a
        // move brought that shard's ledger to where the keys are now.
        PushRequest::MovedFrom* moved_from = part.add_moved_from();
        moved_from->set_shard(static_cast<uint32_t>(shards[r]));
        moved_from->set_sequence(requests[r].sequence());
        again.push_back(std::move(part));
        again_shards.push_back(shard);
      }
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
  std::vector<int> shards = {moved.shard};
  std::vector<GetSlotMapResponse> responses;
  RETURN_IF_ERROR(FanOut(
      requests, shards, &responses,
      [this](int shard, grpc::ClientContext* context,
             GetSlotMapRequest* request, GetSlotMapResponse* response,
             std::function<void(grpc::Status)> done) {
        this->shard(shard)->async()->GetSlotMap(context, request, response,
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
  size_t job_shards = 0;
  {
    absl::ReaderMutexLock lock(&shards_mu_);
    job_shards = job_shards_;
  }
  const bool required = num_shards > job_shards;
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
  std::vector<int> joined;
  std::vector<TableSpec> declared;
  {
    absl::MutexLock lock(&shards_mu_);
    const size_t listed = std::min<size_t>(num_shards, addresses->size());
    for (size_t s = 0; s < listed; ++s) {
      const std::string& address = (*addresses)[s];
      // A shard that left the job and joined again lacks tables declared
      // since, wherever it is.
      if (s < shards_.size() && addresses_[s] == address) {
        if (s >= job_shards_) joined.push_back(static_cast<int>(s));
        continue;
      }
      LOG(INFO) << "shard " << s << " is at " << address
                << (s < shards_.size() ? " now (was " + addresses_[s] + ")"
                                       : std::string(" (joined the job)"));
      auto stub = ParameterServer::NewStub(
          MakeChannel(address, options_, credentials_));
      if (s < shards_.size()) {
        shards_[s] = std::move(stub);
        addresses_[s] = address;
      } else {
        shards_.push_back(std::move(stub));
        addresses_.push_back(address);
      }
      joined.push_back(static_cast<int>(s));
    }
    job_shards_ = listed;
    declared = declared_;
  }
  for (const TableSpec& spec : declared)
    RETURN_IF_ERROR(DeclareOn(spec, joined));
  return absl::OkStatus();
}

std::shared_ptr<ParameterServer::Stub> PsClient::coordinator() const {
  absl::MutexLock lock(&coordinator_mu_);
  return coordinator_;
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
    absl::MutexLock lock(&coordinator_mu_);
    if (*address != coordinator_address_) {
      LOG(INFO) << "the clock coordinator is now " << *address << " (was "
                << coordinator_address_ << ")";
      coordinator_address_ = *address;
      coordinator_ = ParameterServer::NewStub(
          MakeChannel(coordinator_address_, options_, credentials_));
    }
  }
}

absl::StatusOr<ClockResponse> PsClient::ClockOnce(const ClockRequest& request,
                                                  absl::Duration retry_for) {
  const std::shared_ptr<ParameterServer::Stub> stub = coordinator();
  std::vector<ClockRequest> requests = {request};
  std::vector<int> shards = {0};
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

std::vector<std::pair<std::string, uint64_t>> PsClient::retries() const {
  std::vector<std::pair<std::string, uint64_t>> counts;
  for (size_t code = 0; code < kCodes; ++code) {
    if (const uint64_t n = retries_[code].load(); n > 0) {
      counts.emplace_back(
          absl::StatusCodeToString(static_cast<absl::StatusCode>(code)), n);
    }
  }
  return counts;
}

}  // namespace ps::worker
