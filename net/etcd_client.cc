#include "net/etcd_client.h"

#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "net/grpc_status.h"

namespace ps::net {
namespace {

EtcdValue FromKeyValue(const etcdserverpb::KeyValue& kv) {
  EtcdValue value;
  value.key = kv.key();
  value.value = kv.value();
  value.create_revision = kv.create_revision();
  value.mod_revision = kv.mod_revision();
  value.lease = kv.lease();
  return value;
}

bool TriesAnotherMember(const grpc::Status& status) {
  return status.error_code() == grpc::StatusCode::UNAVAILABLE ||
         status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
}

}  // namespace

std::string EtcdClient::PrefixEnd(absl::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    const unsigned char last = static_cast<unsigned char>(end.back());
    if (last < 0xff) {
      end.back() = static_cast<char>(last + 1);
      return end;
    }
    end.pop_back();
  }
  // Every key: etcd reads range_end "\0" as "to the end".
  return std::string(1, '\0');
}

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Connect(
    const EtcdOptions& options) {
  if (options.endpoints.empty())
    return absl::InvalidArgumentError("--etcd names no endpoint");
  if (options.user.empty() != options.password.empty()) {
    return absl::InvalidArgumentError(
        "etcd's authentication needs both a user and a password");
  }
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> credentials,
                   ChannelCredentials(options.tls));
  auto client = std::unique_ptr<EtcdClient>(new EtcdClient(options));
  for (const std::string& endpoint : options.endpoints) {
    // A member that comes back (a restart) is reconnected within two
    // seconds, not after gRPC's default backoff of up to two minutes.
    grpc::ChannelArguments arguments;
    arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
    AddTlsChannelArguments(options.tls, &arguments);
    std::shared_ptr<grpc::Channel> channel =
        grpc::CreateCustomChannel(endpoint, credentials, arguments);
    Member member;
    member.endpoint = endpoint;
    member.kv = etcdserverpb::KV::NewStub(channel);
    member.lease = etcdserverpb::Lease::NewStub(channel);
    member.watch = etcdserverpb::Watch::NewStub(channel);
    member.auth = etcdserverpb::Auth::NewStub(channel);
    client->members_.push_back(std::move(member));
  }
  if (!options.user.empty()) {
    // The first member that answers gives the token; a wrong password is
    // an error now rather than at the first call.
    absl::Status authenticated;
    for (Member& member : client->members_) {
      authenticated = client->Authenticate(member);
      if (!absl::IsUnavailable(authenticated) &&
          !absl::IsDeadlineExceeded(authenticated)) {
        break;
      }
    }
    RETURN_IF_ERROR(authenticated);
  }
  return client;
}

absl::Status EtcdClient::Authenticate(Member& member) {
  etcdserverpb::AuthenticateRequest request;
  request.set_name(options_.user);
  request.set_password(options_.password);
  etcdserverpb::AuthenticateResponse response;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + options_.call_timeout));
  RETURN_IF_ERROR(
      FromGrpcStatus(member.auth->Authenticate(&context, request, &response),
                     absl::StrCat("authenticating as ", options_.user,
                                  " at etcd ", member.endpoint)));
  absl::MutexLock lock(&token_mu_);
  token_ = response.token();
  return absl::OkStatus();
}

void EtcdClient::AddToken(grpc::ClientContext& context) {
  absl::MutexLock lock(&token_mu_);
  if (!token_.empty()) context.AddMetadata("token", token_);
}

absl::Status EtcdClient::OnSomeMember(
    absl::string_view what,
    const std::function<grpc::Status(Member&, grpc::ClientContext&)>& call,
    absl::Duration timeout) {
  if (timeout <= absl::ZeroDuration()) timeout = options_.call_timeout;
  const size_t first = current_.load();
  grpc::Status status;
  bool authenticated_again = false;
  for (size_t tried = 0; tried < members_.size(); ++tried) {
    const size_t index = (first + tried) % members_.size();
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    AddToken(context);
    status = call(members_[index], context);
    // etcd ends a token when it goes unused, when a member restarts, and
    // (answering INVALID_ARGUMENT) when users or roles changed since.
    const bool token_ended =
        status.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
        (status.error_code() == grpc::StatusCode::INVALID_ARGUMENT &&
         status.error_message().find("revision of auth store is old") !=
             std::string::npos);
    if (token_ended && !options_.user.empty() && !authenticated_again) {
      // The token ended (unused for etcd's --auth-token-ttl, or the member
      // restarted): a new one, and the call once more.
      authenticated_again = true;
      if (absl::Status renewed = Authenticate(members_[index]); !renewed.ok())
        return renewed;
      --tried;
      continue;
    }
    if (!TriesAnotherMember(status)) {
      current_ = index;
      return FromGrpcStatus(
          status, absl::StrCat(what, " at etcd ", members_[index].endpoint));
    }
  }
  return FromGrpcStatus(status,
                        absl::StrCat(what, ": no etcd endpoint answered"));
}

absl::StatusOr<EtcdValue> EtcdClient::Get(absl::string_view key) {
  etcdserverpb::RangeRequest request;
  request.set_key(std::string(key));
  etcdserverpb::RangeResponse response;
  RETURN_IF_ERROR(
      OnSomeMember(absl::StrCat("reading ", key),
                   [&](Member& member, grpc::ClientContext& context) {
                     return member.kv->Range(&context, request, &response);
                   }));
  if (response.kvs_size() == 0)
    return absl::NotFoundError(absl::StrCat("no key ", key, " in etcd"));
  return FromKeyValue(response.kvs(0));
}

absl::StatusOr<EtcdPosition> EtcdClient::Position() {
  etcdserverpb::RangeRequest request;
  request.set_key("/");
  request.set_count_only(true);
  etcdserverpb::RangeResponse response;
  RETURN_IF_ERROR(
      OnSomeMember("reading etcd's revision",
                   [&](Member& member, grpc::ClientContext& context) {
                     return member.kv->Range(&context, request, &response);
                   }));
  EtcdPosition position;
  position.cluster_id = response.header().cluster_id();
  position.revision = response.header().revision();
  return position;
}

absl::StatusOr<std::vector<EtcdValue>> EtcdClient::GetPrefix(
    absl::string_view prefix) {
  etcdserverpb::RangeRequest request;
  request.set_key(std::string(prefix));
  request.set_range_end(PrefixEnd(prefix));
  etcdserverpb::RangeResponse response;
  RETURN_IF_ERROR(
      OnSomeMember(absl::StrCat("reading the keys under ", prefix),
                   [&](Member& member, grpc::ClientContext& context) {
                     return member.kv->Range(&context, request, &response);
                   }));
  std::vector<EtcdValue> values;
  values.reserve(response.kvs_size());
  for (const etcdserverpb::KeyValue& kv : response.kvs())
    values.push_back(FromKeyValue(kv));
  return values;
}

absl::StatusOr<int64_t> EtcdClient::Put(absl::string_view key,
                                        absl::string_view value,
                                        int64_t lease) {
  etcdserverpb::PutRequest request;
  request.set_key(std::string(key));
  request.set_value(std::string(value));
  request.set_lease(lease);
  etcdserverpb::PutResponse response;
  RETURN_IF_ERROR(
      OnSomeMember(absl::StrCat("writing ", key),
                   [&](Member& member, grpc::ClientContext& context) {
                     return member.kv->Put(&context, request, &response);
                   }));
  return response.header().revision();
}

absl::StatusOr<bool> EtcdClient::PutIf(absl::string_view key,
                                       absl::string_view value,
                                       int64_t expected_mod_revision,
                                       int64_t lease,
                                       const std::vector<EtcdCondition>& also) {
  etcdserverpb::TxnRequest request;
  auto add_compare = [&request](absl::string_view compared,
                                int64_t mod_revision) {
    etcdserverpb::Compare* compare = request.add_compare();
    compare->set_key(std::string(compared));
    compare->set_result(etcdserverpb::Compare::EQUAL);
    compare->set_target(etcdserverpb::Compare::MOD);
    // A key that does not exist has mod revision 0.
    compare->set_mod_revision(mod_revision);
  };
  add_compare(key, expected_mod_revision);
  for (const EtcdCondition& condition : also) {
    add_compare(condition.key, condition.mod_revision);
  }
  etcdserverpb::PutRequest* put = request.add_success()->mutable_request_put();
  put->set_key(std::string(key));
  put->set_value(std::string(value));
  put->set_lease(lease);
  etcdserverpb::TxnResponse response;
  RETURN_IF_ERROR(
      OnSomeMember(absl::StrCat("swapping ", key),
                   [&](Member& member, grpc::ClientContext& context) {
                     return member.kv->Txn(&context, request, &response);
                   }));
  return response.succeeded();
}

absl::StatusOr<int64_t> EtcdClient::Delete(absl::string_view key) {
  etcdserverpb::DeleteRangeRequest request;
  request.set_key(std::string(key));
  etcdserverpb::DeleteRangeResponse response;
  RETURN_IF_ERROR(OnSomeMember(
      absl::StrCat("deleting ", key),
      [&](Member& member, grpc::ClientContext& context) {
        return member.kv->DeleteRange(&context, request, &response);
      }));
  return response.deleted();
}

absl::StatusOr<int64_t> EtcdClient::DeletePrefix(absl::string_view prefix) {
  etcdserverpb::DeleteRangeRequest request;
  request.set_key(std::string(prefix));
  request.set_range_end(PrefixEnd(prefix));
  etcdserverpb::DeleteRangeResponse response;
  RETURN_IF_ERROR(OnSomeMember(
      absl::StrCat("deleting the keys under ", prefix),
      [&](Member& member, grpc::ClientContext& context) {
        return member.kv->DeleteRange(&context, request, &response);
      }));
  return response.deleted();
}

absl::StatusOr<int64_t> EtcdClient::GrantLease(absl::Duration ttl) {
  etcdserverpb::LeaseGrantRequest request;
  request.set_ttl(std::max<int64_t>(
      1, absl::ToInt64Seconds(absl::Ceil(ttl, absl::Seconds(1)))));
  etcdserverpb::LeaseGrantResponse response;
  RETURN_IF_ERROR(OnSomeMember(
      "granting a lease", [&](Member& member, grpc::ClientContext& context) {
        return member.lease->LeaseGrant(&context, request, &response);
      }));
  if (!response.error().empty())
    return absl::InternalError("etcd granted no lease: " + response.error());
  return response.id();
}

absl::StatusOr<absl::Duration> EtcdClient::KeepAlive(int64_t lease,
                                                     absl::Duration timeout) {
  etcdserverpb::LeaseKeepAliveResponse response;
  bool answered = false;
  RETURN_IF_ERROR(OnSomeMember(
      absl::StrCat("renewing lease ", lease),
      [&](Member& member, grpc::ClientContext& context) {
        // One renewal over etcd's keep-alive stream.
        auto stream = member.lease->LeaseKeepAlive(&context);
        etcdserverpb::LeaseKeepAliveRequest request;
        request.set_id(lease);
        answered = stream->Write(request) && stream->Read(&response);
        stream->WritesDone();
        if (answered) context.TryCancel();
        grpc::Status status = stream->Finish();
        return answered ? grpc::Status::OK : status;
      },
      timeout));
  if (!answered)
    return absl::UnavailableError("etcd closed the keep-alive stream");
  if (response.ttl() <= 0)
    return absl::NotFoundError(absl::StrCat("etcd lease ", lease, " expired"));
  return absl::Seconds(response.ttl());
}

absl::StatusOr<absl::Duration> EtcdClient::LeaseTimeLeft(
    int64_t lease, absl::Duration timeout) {
  etcdserverpb::LeaseTimeToLiveRequest request;
  request.set_id(lease);
  etcdserverpb::LeaseTimeToLiveResponse response;
  RETURN_IF_ERROR(OnSomeMember(
      absl::StrCat("asking lease ", lease, "'s time left"),
      [&](Member& member, grpc::ClientContext& context) {
        return member.lease->LeaseTimeToLive(&context, request, &response);
      },
      timeout));
  // -1: gone. 0 is under a second left, not none.
  if (response.ttl() < 0) return absl::ZeroDuration();
  return absl::Seconds(response.ttl() + 1);
}

absl::Status EtcdClient::RevokeLease(int64_t lease, absl::Duration timeout) {
  etcdserverpb::LeaseRevokeRequest request;
  request.set_id(lease);
  etcdserverpb::LeaseRevokeResponse response;
  return OnSomeMember(
      absl::StrCat("revoking lease ", lease),
      [&](Member& member, grpc::ClientContext& context) {
        return member.lease->LeaseRevoke(&context, request, &response);
      },
      timeout);
}

absl::StatusOr<std::unique_ptr<EtcdWatch>> EtcdClient::WatchPrefix(
    absl::string_view prefix, int64_t start_revision,
    std::function<void(const EtcdEvent&)> on_event) {
  etcdserverpb::WatchRequest request;
  etcdserverpb::WatchCreateRequest* create = request.mutable_create_request();
  create->set_key(std::string(prefix));
  create->set_range_end(PrefixEnd(prefix));
  create->set_start_revision(start_revision);
  Member& member = members_[current_.load()];
  std::unique_ptr<EtcdWatch> watch;
  std::unique_ptr<grpc::ClientReaderWriter<etcdserverpb::WatchRequest,
                                           etcdserverpb::WatchResponse>>
      stream;
  // etcd checks the token when a watch is created, and answers an ended
  // token (unused past --auth-token-ttl, a member restarted) as it answers
  // a key beyond the user's role: a watch created and cancelled at once,
  // "permission denied". With a user, a refused watch asks for a new token
  // and tries once more; refused again, it is denied for good.
  for (int attempt = 0;; ++attempt) {
    watch = std::unique_ptr<EtcdWatch>(new EtcdWatch());
    AddToken(watch->context_);
    stream = member.watch->Watch(&watch->context_);
    etcdserverpb::WatchResponse created;
    // A member that does not answer (stopped, partitioned) must not hold
    // the caller forever: past the call timeout, the creation is cancelled.
    absl::Notification answered;
    std::thread deadline([&] {
      if (!answered.WaitForNotificationWithTimeout(options_.call_timeout))
        watch->context_.TryCancel();
    });
    const bool answered_created =
        stream->Write(request) && stream->Read(&created) && created.created();
    answered.Notify();
    deadline.join();
    if (answered_created && !created.canceled()) break;
    watch->context_.TryCancel();
    const grpc::Status finished = stream->Finish();
    const std::string where =
        absl::StrCat("watching ", prefix, " at etcd ", member.endpoint);
    if (answered_created) {
      const std::string& reason = created.cancel_reason();
      const bool about_auth =
          reason.find("permission denied") != std::string::npos ||
          reason.find("invalid auth token") != std::string::npos ||
          reason.find("auth store is old") != std::string::npos;
      if (!about_auth) {
        // A start revision etcd compacted away, say.
        return absl::FailedPreconditionError(
            absl::StrCat(where, ": etcd cancelled the watch: ", reason));
      }
      if (!options_.user.empty() && attempt == 0) {
        if (absl::Status renewed = Authenticate(member); !renewed.ok()) {
          return absl::Status(renewed.code(),
                              absl::StrCat(where, ": ", renewed.message()));
        }
        continue;
      }
      return absl::PermissionDeniedError(
          absl::StrCat(where, ": etcd refused the watch: ", reason));
    }
    const bool refused =
        finished.ok() || finished.error_code() == grpc::StatusCode::CANCELLED;
    return FromGrpcStatus(refused ? grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                                 "the watch was not created: " +
                                                     created.cancel_reason())
                                  : finished,
                          where);
  }
  EtcdWatch* raw = watch.get();
  watch->thread_ = std::thread(
      [raw, stream = std::move(stream), on_event = std::move(on_event)] {
        raw->ReadEvents(*stream, on_event);
      });
  return watch;
}

void EtcdWatch::ReadEvents(
    Stream& stream, const std::function<void(const EtcdEvent&)>& on_event) {
  etcdserverpb::WatchResponse response;
  while (stream.Read(&response)) {
    if (response.canceled()) break;
    for (const etcdserverpb::Event& event : response.events()) {
      if (cancelled_) break;
      EtcdEvent change;
      change.type = event.type() == etcdserverpb::Event::DELETE
                        ? EtcdEvent::Type::kDelete
                        : EtcdEvent::Type::kPut;
      change.kv = FromKeyValue(event.kv());
      on_event(change);
    }
  }
  const grpc::Status finished = stream.Finish();
  if (!cancelled_) {
    absl::MutexLock lock(&mu_);
    status_ = finished.ok()
                  ? absl::UnavailableError(absl::StrCat(
                        "etcd ended the watch: ", response.cancel_reason()))
                  : FromGrpcStatus(finished, "watching etcd");
  }
}

EtcdWatch::~EtcdWatch() { Cancel(); }

void EtcdWatch::Cancel() {
  absl::MutexLock lock(&cancel_mu_);
  cancelled_ = true;
  context_.TryCancel();
  if (thread_.joinable()) thread_.join();
}

absl::Status EtcdWatch::status() {
  absl::MutexLock lock(&mu_);
  return status_;
}

}  // namespace ps::net
