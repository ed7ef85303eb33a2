// TLS and admin tokens against real processes, with certificates made by
// `openssl` when the test starts: a CA, a server certificate for 127.0.0.1,
// a client certificate it signed, and a client certificate from another
// CA. A shard started with --tls_cert/--tls_key/--tls_ca serves only
// clients that present a certificate of its CA; a worker trains over it;
// --admin_token_file guards the admin calls that change state; and a shard
// refuses to listen beyond loopback without TLS.

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_matchers.h"
#include "base/wait_until.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/support/channel_arguments.h"
#include "gtest/gtest.h"
#include "net/tls_credentials.h"
#include "proto/admin.grpc.pb.h"
#include "tests/child_process.h"
#include "tests/ps_admin_run.h"
#include "tests/server_process.h"
#include "tests/test_certificates.h"
#include "tests/test_client.h"
#include "tests/test_cluster.h"
#include "tests/test_files.h"

namespace ps::testing {
namespace {

class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(FreshTestDir("tls_certificates"));
    const std::string& d = *dir_;
    std::ofstream(d + "/server.ext")
        << "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
           "extendedKeyUsage=serverAuth\n";
    std::ofstream(d + "/client.ext") << "extendedKeyUsage=clientAuth\n";
    for (const std::string ca : {"ca", "other_ca"}) {
      ASSERT_TRUE(MakeCertificateAuthority(d, ca));
    }
    // A shard's certificate when it has replicas: a replica dials its
    // primary with it, as a client.
    std::ofstream(d + "/shard.ext")
        << "subjectAltName=IP:127.0.0.1,DNS:ps-shard\n"
           "extendedKeyUsage=serverAuth,clientAuth\n";
    ASSERT_TRUE(IssueCertificate(d, "server", "ca", "server.ext"));
    // What a rotation installs: new keys and certificates of the same
    // names, the server's from another CA.
    ASSERT_TRUE(
        IssueCertificate(d, "server_renewed", "other_ca", "server.ext"));
    ASSERT_TRUE(IssueCertificate(d, "worker_renewed", "ca", "client.ext"));
    ASSERT_TRUE(IssueCertificate(d, "shard", "ca", "shard.ext"));
    ASSERT_TRUE(IssueCertificate(d, "worker", "ca", "client.ext"));
    ASSERT_TRUE(IssueCertificate(d, "stranger", "other_ca", "client.ext"));
    std::ofstream(d + "/token") << "right-token\n";
    std::ofstream(d + "/wrong_token") << "wrong-token\n";
    std::ofstream(d + "/worker_token") << "worker-token\n";
  }

  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  static TlsFiles Client(const std::string& name, const std::string& ca) {
    TlsFiles files;
    files.ca = *dir_ + "/" + ca + ".pem";
    if (!name.empty()) {
      files.cert = *dir_ + "/" + name + ".pem";
      files.key = *dir_ + "/" + name + ".key";
    }
    return files;
  }

  static std::vector<std::string> ClientFlags(const std::string& name) {
    return {"--tls_ca=" + *dir_ + "/ca.pem",
            "--tls_cert=" + *dir_ + "/" + name + ".pem",
            "--tls_key=" + *dir_ + "/" + name + ".key"};
  }

  // Starts a shard that serves only clients of "ca" over TLS.
  std::unique_ptr<ServerProcess> StartTlsShard(
      const std::vector<std::string>& extra = {}) {
    const std::string& d = *dir_;
    std::vector<std::string> flags = {
        "--data_dir=" + FreshTestDir(absl::StrCat("tls_shard", ++shards_)),
        "--tls_cert=" + d + "/server.pem", "--tls_key=" + d + "/server.key",
        "--tls_ca=" + d + "/ca.pem"};
    flags.insert(flags.end(), extra.begin(), extra.end());
    auto credentials = ChannelCredentials(Client("worker", "ca"));
    EXPECT_TRUE(credentials.ok());
    auto server = ServerProcess::Start(flags, absl::Seconds(60),
                                       d + "/shard.log", *credentials);
    EXPECT_TRUE(server.ok()) << server.status() << ReadFile(d + "/shard.log");
    return server.ok() ? std::move(server).value() : nullptr;
  }

  // Whether a pull over `files`' credentials reaches the shard.
  static grpc::Status TryPull(const ServerProcess& server,
                              const TlsFiles& files) {
    auto credentials = ChannelCredentials(files);
    EXPECT_TRUE(credentials.ok());
    auto stub = ParameterServer::NewStub(
        grpc::CreateChannel(server.address(), *credentials));
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    PullRequest request;
    request.set_table("none");
    PullResponse response;
    return stub->Pull(&context, request, &response);
  }

  // The certificate (PEM) the server shows a new connection made with
  // `credentials` (by default, made from `files` now), or "" if the call
  // does not reach the service.
  static std::string ServerCertificate(
      const ServerProcess& server, const TlsFiles& files,
      std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr,
      grpc::StatusCode* code = nullptr) {
    if (credentials == nullptr) {
      auto made = ChannelCredentials(files);
      EXPECT_TRUE(made.ok());
      if (!made.ok()) return "";
      credentials = *std::move(made);
    }
    grpc::ChannelArguments arguments;
    AddTlsChannelArguments(files, &arguments);
    // A connection of its own, never one an earlier channel opened.
    arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto stub = ParameterServer::NewStub(
        grpc::CreateCustomChannel(server.address(), credentials, arguments));
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    PullRequest request;
    request.set_table("none");
    PullResponse response;
    const grpc::StatusCode answered =
        stub->Pull(&context, request, &response).error_code();
    if (code != nullptr) *code = answered;
    if (answered != grpc::StatusCode::NOT_FOUND) return "";
    const std::vector<grpc::string_ref> pem =
        context.auth_context()->FindPropertyValues("x509_pem_cert");
    return pem.empty() ? "" : std::string(pem[0].begin(), pem[0].end());
  }

  // Writes `contents` to `path` as a rotation does: a new file renamed over
  // the old one.
  static void Install(const std::string& path, const std::string& contents) {
    std::ofstream(path + ".new") << contents;
    ASSERT_EQ(std::rename((path + ".new").c_str(), path.c_str()), 0) << path;
  }

  static std::string* dir_;
  int shards_ = 0;
};

std::string* TlsTest::dir_ = nullptr;

TEST_F(TlsTest, AWorkerTrainsOverMutualTls) {
  auto server = StartTlsShard();
  ASSERT_NE(server, nullptr);
  const std::string data = *dir_ + "/train.tsv";
  ASSERT_EQ(RunToCompletion({BinaryPath("worker/datagen/clicklog_gen"),
                             "--out=" + data, "--lines=20000"},
                            *dir_ + "/gen.log"),
            0);
  std::vector<std::string> flags = {
      "--train=" + data,   "--test=" + data,
      "--batch_size=1024", "--hidden=32",
      "--embedding_dim=4", "--metrics_out=" + *dir_ + "/tls.json"};
  for (const std::string& flag : ClientFlags("worker")) flags.push_back(flag);
  const std::vector<std::string> worker =
      PsWorkerArgv({"--servers=" + server->address()}, flags);
  ASSERT_EQ(RunToCompletion(worker, *dir_ + "/worker.log"), 0)
      << ReadFile(*dir_ + "/worker.log");
  const std::string metrics = ReadFile(*dir_ + "/tls.json");
  EXPECT_NE(metrics.find("\"examples\": 20000"), std::string::npos) << metrics;
}

// Certificates renewed on disk (as cert-manager renews a Secret) while a
// worker trains: connections made after use the new ones, with no restart,
// the worker's own included, and nothing fails.
TEST_F(TlsTest, RotatedCertificatesServeNewConnectionsWithoutARestart) {
  const std::string& d = *dir_;
  const std::string rotating = FreshTestDir("tls_rotating");
  for (const std::string name :
       {"server.pem", "server.key", "worker.pem", "worker.key", "ca.pem"}) {
    Install(rotating + "/" + name, ReadFile(d + "/" + name));
  }
  auto credentials = ChannelCredentials(Client("worker", "ca"));
  ASSERT_TRUE(credentials.ok());
  auto started = ServerProcess::Start(
      {"--data_dir=" + FreshTestDir("tls_rotating_shard"),
       "--tls_cert=" + rotating + "/server.pem",
       "--tls_key=" + rotating + "/server.key",
       "--tls_ca=" + rotating + "/ca.pem", "--tls_reload_s=1"},
      absl::Seconds(60), d + "/rotating_shard.log", *credentials);
  ASSERT_TRUE(started.ok())
      << started.status() << ReadFile(d + "/rotating_shard.log");
  const ServerProcess& server = **started;
  TlsFiles worker_files = Client("worker", "ca");
  EXPECT_EQ(ServerCertificate(server, worker_files),
            ReadFile(d + "/server.pem"));
  // A client's credentials made now, over the rotating files, re-reading
  // them every second.
  TlsFiles rotating_client;
  rotating_client.ca = rotating + "/ca.pem";
  rotating_client.cert = rotating + "/worker.pem";
  rotating_client.key = rotating + "/worker.key";
  rotating_client.reload_seconds = 1;
  auto early = ChannelCredentials(rotating_client);
  ASSERT_TRUE(early.ok()) << early.status();
  EXPECT_EQ(TryPull(server, Client("stranger", "ca")).error_code(),
            grpc::StatusCode::UNAVAILABLE);

  // A worker that trains for a while over the rotating files.
  const std::string data = d + "/rotating_train.tsv";
  ASSERT_EQ(RunToCompletion({BinaryPath("worker/datagen/clicklog_gen"),
                             "--out=" + data, "--lines=12000"},
                            d + "/rotating_gen.log"),
            0);
  auto worker = ChildProcess::Start(
      PsWorkerArgv({"--servers=" + server.address()},
                   {"--train=" + data, "--batch_size=500", "--hidden=8",
                    "--embedding_dim=4", "--slow_step_ms=300",
                    "--tls_ca=" + rotating + "/ca.pem",
                    "--tls_cert=" + rotating + "/worker.pem",
                    "--tls_key=" + rotating + "/worker.key", "--tls_reload_s=1",
                    "--metrics_out=" + d + "/rotating.json"}),
      /*capture_stdout=*/false, d + "/rotating_worker.log");
  ASSERT_TRUE(worker.ok()) << worker.status();
  absl::SleepFor(absl::Seconds(2));

  // A key that does not match the certificate (a rotation written one file
  // at a time): new handshakes fail until a reload reads a matching pair.
  Install(rotating + "/server.key", ReadFile(d + "/server_renewed.key"));
  EXPECT_TRUE(
      WaitUntil([&] { return ServerCertificate(server, worker_files).empty(); },
                absl::Seconds(30), absl::Milliseconds(200)))
      << "a mismatched key was never read";
  Install(rotating + "/server.key", ReadFile(d + "/server.key"));
  EXPECT_TRUE(WaitUntil(
      [&] {
        return ServerCertificate(server, worker_files) ==
               ReadFile(d + "/server.pem");
      },
      absl::Seconds(30), absl::Milliseconds(200)))
      << "the matching pair restored is not served again";

  // Renewed: a CA bundle that trusts another CA too (first, so that both
  // sides trust what comes next), the server's pair from that CA, the
  // worker's pair.
  Install(rotating + "/ca.pem",
          ReadFile(d + "/ca.pem") + ReadFile(d + "/other_ca.pem"));
  absl::SleepFor(absl::Seconds(2));
  Install(rotating + "/server.key", ReadFile(d + "/server_renewed.key"));
  Install(rotating + "/server.pem", ReadFile(d + "/server_renewed.pem"));
  Install(rotating + "/worker.key", ReadFile(d + "/worker_renewed.key"));
  Install(rotating + "/worker.pem", ReadFile(d + "/worker_renewed.pem"));
  const std::string renewed = ReadFile(d + "/server_renewed.pem");
  // The credentials made before the rotation trust the new server (their
  // roots were re-read), which shows its new certificate.
  EXPECT_TRUE(WaitUntil(
      [&] {
        return ServerCertificate(server, rotating_client, *early) == renewed;
      },
      absl::Seconds(30), absl::Milliseconds(200)))
      << "new connections do not see the renewed certificate";
  // A client of the old CA alone no longer trusts the server.
  EXPECT_EQ(ServerCertificate(server, worker_files), "");
  // The other CA's client is trusted now (the server re-read its roots).
  TlsFiles stranger = Client("stranger", "ca");
  stranger.ca = rotating + "/ca.pem";
  EXPECT_TRUE(WaitUntil(
      [&] {
        return TryPull(server, stranger).error_code() ==
               grpc::StatusCode::NOT_FOUND;
      },
      absl::Seconds(30), absl::Milliseconds(200)))
      << "the server does not trust the CA added to --tls_ca";
  ASSERT_EQ((*worker)->Wait(absl::Minutes(5)), 0)
      << ReadFile(d + "/rotating_worker.log");
  const std::string metrics = ReadFile(d + "/rotating.json");
  EXPECT_NE(metrics.find("\"examples\": 12000"), std::string::npos) << metrics;
}

// The name a client checks the server's certificate for: the host dialled,
// or --tls_server_name; a name the certificate lacks is refused.
TEST_F(TlsTest, AServerNameTheCertificateLacksIsRefused) {
  auto server = StartTlsShard();
  ASSERT_NE(server, nullptr);
  for (const int reload_seconds : {0, 60}) {
    TlsFiles files = Client("worker", "ca");
    files.reload_seconds = reload_seconds;
    files.server_name = "localhost";
    grpc::StatusCode code = grpc::StatusCode::OK;
    EXPECT_NE(ServerCertificate(*server, files, nullptr, &code), "")
        << reload_seconds;
    EXPECT_EQ(code, grpc::StatusCode::NOT_FOUND) << reload_seconds;
    files.server_name = "ps-shard";
    EXPECT_EQ(ServerCertificate(*server, files, nullptr, &code), "");
    EXPECT_EQ(code, grpc::StatusCode::UNAVAILABLE)
        << "a certificate for 127.0.0.1 and localhost passed as ps-shard ("
        << reload_seconds << ")";
  }
}

TEST_F(TlsTest, AReplicaCopiesAndFollowsItsPrimaryOverMutualTls) {
  const std::string& d = *dir_;
  const std::vector<std::string> shard_tls = {"--tls_cert=" + d + "/shard.pem",
                                              "--tls_key=" + d + "/shard.key",
                                              "--tls_ca=" + d + "/ca.pem"};
  auto credentials = ChannelCredentials(Client("worker", "ca"));
  ASSERT_OK(credentials);
  std::vector<std::string> flags = {"--data_dir=" +
                                    FreshTestDir("tls_primary")};
  flags.insert(flags.end(), shard_tls.begin(), shard_tls.end());
  auto primary = ServerProcess::Start(flags, absl::Seconds(60),
                                      d + "/primary.log", *credentials);
  ASSERT_OK(primary);
  auto replica_flags = [&](const std::string& dir, const std::string& name) {
    std::vector<std::string> flags = {"--data_dir=" + FreshTestDir(dir),
                                      "--replica_of=" + (*primary)->address(),
                                      "--tls_server_name=" + name};
    flags.insert(flags.end(), shard_tls.begin(), shard_tls.end());
    return flags;
  };
  // The name its certificate carries: copied and followed.
  auto replica =
      ServerProcess::Start(replica_flags("tls_replica", "ps-shard"),
                           absl::Seconds(60), d + "/replica.log", *credentials);
  ASSERT_OK(replica) << ReadFile(d + "/replica.log");
  auto admin = Admin::NewStub((*primary)->channel());
  grpc::Status stats_status;
  ASSERT_TRUE(WaitUntil(
      [&] {
        ShardStatsResponse stats;
        grpc::ClientContext context;
        stats_status = admin->ShardStats(&context, ShardStatsRequest(), &stats);
        return !stats_status.ok() ||
               stats.replication().replicas_in_sync() == 1;
      },
      absl::Minutes(1), absl::Milliseconds(50)))
      << "the replica never caught up";
  ASSERT_TRUE(stats_status.ok()) << stats_status.error_message();
  // Another name: the primary's certificate does not carry it, so the
  // copy fails and the replica exits (70) rather than serve.
  std::vector<std::string> argv = replica_flags("tls_replica2", "other-name");
  EXPECT_EQ(RunServerToExit(argv, d + "/replica2.log", absl::Minutes(2)), 70)
      << ReadFile(d + "/replica2.log");
}

TEST_F(TlsTest, PlaintextAndStrangersAreRefused) {
  auto server = StartTlsShard();
  ASSERT_NE(server, nullptr);
  // The CA's own client: reaches the service (which says the table is
  // unknown).
  EXPECT_EQ(TryPull(*server, Client("worker", "ca")).error_code(),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(TryPull(*server, TlsFiles()).error_code(),
            grpc::StatusCode::UNAVAILABLE)
      << "plaintext reached a TLS shard";
  EXPECT_EQ(TryPull(*server, Client("", "ca")).error_code(),
            grpc::StatusCode::UNAVAILABLE)
      << "a client without a certificate reached a mutual-TLS shard";
  EXPECT_EQ(TryPull(*server, Client("stranger", "ca")).error_code(),
            grpc::StatusCode::UNAVAILABLE)
      << "a certificate from another CA was accepted";
}

TEST_F(TlsTest, TheAdminTokenGuardsCallsThatChangeState) {
  auto server =
      StartTlsShard({"--admin_token_file=" + *dir_ + "/token",
                     "--worker_token_file=" + *dir_ + "/worker_token"});
  ASSERT_NE(server, nullptr);
  auto admin = [&](const std::vector<std::string>& extra,
                   const std::string& command, const std::string& log) {
    std::vector<std::string> flags = ClientFlags("worker");
    flags.insert(flags.end(), extra.begin(), extra.end());
    return RunPsAdmin(AdminCluster::Servers({server->address()}, flags),
                      {command}, *dir_ + "/" + log)
        .exit_code;
  };
  // Reading needs no token.
  EXPECT_EQ(admin({}, "stats", "stats.log"), 0)
      << ReadFile(*dir_ + "/stats.log");
  EXPECT_NE(admin({}, "stop", "no_token.log"), 0);
  EXPECT_NE(ReadFile(*dir_ + "/no_token.log").find("UNAUTHENTICATED"),
            std::string::npos)
      << ReadFile(*dir_ + "/no_token.log");
  EXPECT_NE(admin({"--token_file=" + *dir_ + "/wrong_token"}, "stop",
                  "wrong_token.log"),
            0);
  EXPECT_NE(ReadFile(*dir_ + "/wrong_token.log").find("UNAUTHENTICATED"),
            std::string::npos);
  // Still serving after both refusals.
  EXPECT_EQ(TryPull(*server, Client("worker", "ca")).error_code(),
            grpc::StatusCode::NOT_FOUND);
  // `drain`, the old name of `stop`, still works, and says so.
  EXPECT_EQ(admin({"--token_file=" + *dir_ + "/token"}, "drain", "drain.log"),
            0)
      << ReadFile(*dir_ + "/drain.log");
  EXPECT_NE(
      ReadFile(*dir_ + "/drain.log").find("`drain` is deprecated: use `stop`"),
      std::string::npos)
      << ReadFile(*dir_ + "/drain.log");
  EXPECT_EQ(server->Wait(absl::Seconds(30)), 0) << "the drained shard";
}

TEST_F(TlsTest, TheWorkerTokenGuardsClockReportsAndDeclarations) {
  auto server =
      StartTlsShard({"--admin_token_file=" + *dir_ + "/token",
                     "--worker_token_file=" + *dir_ + "/worker_token"});
  ASSERT_NE(server, nullptr);
  auto credentials = ChannelCredentials(Client("worker", "ca"));
  ASSERT_TRUE(credentials.ok());
  auto stub = ParameterServer::NewStub(
      grpc::CreateChannel(server->address(), *credentials));
  // A forged clock report (a huge incarnation would lock worker 0 out):
  // refused without the token, and with the admin token (another role).
  for (const std::string& token : {std::string(), std::string("right-token"),
                                   std::string("wrong-token")}) {
    grpc::ClientContext context;
    if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
    ClockRequest request;
    request.set_worker(0);
    request.set_incarnation(~uint64_t{0});
    request.set_lease_ms(1000);
    ClockResponse response;
    EXPECT_EQ(stub->Clock(&context, request, &response).error_code(),
              grpc::StatusCode::UNAUTHENTICATED)
        << "with '" << token << "'";
  }
  {
    grpc::ClientContext context;
    DeclareTableRequest request;
    request.mutable_table()->set_name("forged");
    request.mutable_table()->set_dim(1);
    DeclareTableResponse response;
    EXPECT_EQ(stub->DeclareTable(&context, request, &response).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  // A worker with the token trains; one without is refused (exit 70).
  const std::string data = *dir_ + "/token_train.tsv";
  ASSERT_EQ(RunToCompletion({BinaryPath("worker/datagen/clicklog_gen"),
                             "--out=" + data, "--lines=5000"},
                            *dir_ + "/gen.log"),
            0);
  std::vector<std::string> flags = {"--train=" + data, "--batch_size=1000",
                                    "--hidden=16", "--embedding_dim=4"};
  for (const std::string& flag : ClientFlags("worker")) flags.push_back(flag);
  std::vector<std::string> worker =
      PsWorkerArgv({"--servers=" + server->address()}, flags);
  EXPECT_EQ(RunToCompletion(worker, *dir_ + "/tokenless_worker.log"), 70);
  EXPECT_NE(ReadFile(*dir_ + "/tokenless_worker.log").find("UNAUTHENTICATED"),
            std::string::npos)
      << ReadFile(*dir_ + "/tokenless_worker.log");
  worker.push_back("--worker_token_file=" + *dir_ + "/worker_token");
  EXPECT_EQ(RunToCompletion(worker, *dir_ + "/token_worker.log"), 0)
      << ReadFile(*dir_ + "/token_worker.log");
}

TEST_F(TlsTest, AnAdminTokenWithoutAWorkerTokenIsRefused) {
  const std::string log = *dir_ + "/no_worker_token.log";
  EXPECT_EQ(RunServerToExit({"--data_dir=" + FreshTestDir("no_worker_token"),
                             "--listen=127.0.0.1:0",
                             "--admin_token_file=" + *dir_ + "/token"},
                            log, absl::Seconds(30)),
            64);
  EXPECT_NE(ReadFile(log).find("--worker_token_file"), std::string::npos)
      << ReadFile(log);
}

TEST_F(TlsTest, BeyondLoopbackTlsWithoutACaIsRefused) {
  // Refused before anything is bound: the test talks to no other address.
  const std::string log = *dir_ + "/no_ca.log";
  EXPECT_EQ(RunServerToExit(
                {"--data_dir=" + FreshTestDir("tls_no_ca"),
                 "--listen=0.0.0.0:0", "--tls_cert=" + *dir_ + "/server.pem",
                 "--tls_key=" + *dir_ + "/server.key"},
                log, absl::Seconds(30)),
            64);
  EXPECT_NE(ReadFile(log).find("--allow_unauthenticated_clients"),
            std::string::npos)
      << ReadFile(log);
}

// --allow_unauthenticated_clients and --allow_insecure_remote let a shard
// listen beyond loopback. The address is TEST-NET-1 (RFC 5737), which no
// interface here has: the shard passes the check and fails to bind (70),
// and nothing is bound or reached beyond loopback.
TEST_F(TlsTest, TheFlagsThatAllowListeningBeyondLoopbackAreHonoured) {
  const std::vector<std::vector<std::string>> allowed = {
      {"--tls_cert=" + *dir_ + "/server.pem",
       "--tls_key=" + *dir_ + "/server.key", "--allow_unauthenticated_clients",
       "--allow_unauthenticated_admin"},
      {"--allow_insecure_remote", "--allow_unauthenticated_admin"},
      {"--tls_cert=" + *dir_ + "/server.pem",
       "--tls_key=" + *dir_ + "/server.key", "--tls_ca=" + *dir_ + "/ca.pem",
       "--admin_token_file=" + *dir_ + "/token",
       "--worker_token_file=" + *dir_ + "/worker_token"}};
  for (size_t i = 0; i < allowed.size(); ++i) {
    const std::string log = absl::StrCat(*dir_, "/allowed", i, ".log");
    std::vector<std::string> argv = {
        "--data_dir=" + FreshTestDir(absl::StrCat("tls_allowed", i)),
        "--listen=192.0.2.1:0"};
    argv.insert(argv.end(), allowed[i].begin(), allowed[i].end());
    EXPECT_EQ(RunServerToExit(argv, log, absl::Seconds(30)), 70)
        << ReadFile(log);
    EXPECT_EQ(ReadFile(log).find("refusing to listen"), std::string::npos)
        << ReadFile(log);
  }
}

// Beyond loopback with no admin token, every client that reaches the
// shard (every worker) could drain it or drop its tables: refused before
// anything is bound, with mutual TLS or without TLS.
TEST_F(TlsTest, BeyondLoopbackWithoutAnAdminTokenIsRefused) {
  const std::vector<std::vector<std::string>> refused = {
      {"--tls_cert=" + *dir_ + "/server.pem",
       "--tls_key=" + *dir_ + "/server.key", "--tls_ca=" + *dir_ + "/ca.pem"},
      {"--allow_insecure_remote"},
      {"--allow_insecure_remote",
       "--worker_token_file=" + *dir_ + "/worker_token"}};
  for (size_t i = 0; i < refused.size(); ++i) {
    const std::string log = absl::StrCat(*dir_, "/no_admin_token", i, ".log");
    std::vector<std::string> argv = {
        "--data_dir=" + FreshTestDir(absl::StrCat("no_admin_token", i)),
        "--listen=192.0.2.1:0"};
    argv.insert(argv.end(), refused[i].begin(), refused[i].end());
    EXPECT_EQ(RunServerToExit(argv, log, absl::Seconds(30)), 64)
        << ReadFile(log);
    EXPECT_NE(ReadFile(log).find("--allow_unauthenticated_admin"),
              std::string::npos)
        << ReadFile(log);
  }
}

TEST_F(TlsTest, NoListeningBeyondLoopbackWithoutTls) {
  const std::string log = *dir_ + "/remote.log";
  const int code =
      RunServerToExit({"--data_dir=" + FreshTestDir("tls_remote_refused"),
                       "--listen=0.0.0.0:0"},
                      log, absl::Seconds(30));
  EXPECT_NE(code, 0);
  EXPECT_NE(ReadFile(log).find("--allow_insecure_remote"), std::string::npos)
      << ReadFile(log);
}

}  // namespace
}  // namespace ps::testing
