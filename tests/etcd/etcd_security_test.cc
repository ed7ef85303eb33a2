// A secured etcd against real processes: Debian's etcd serving TLS with
// client certificates (--client-cert-auth), and with its users on (a user
// whose role reaches /ps/<job>/ only). Clients without the certificate or the
// password are refused; ps_server and ps_admin reach it with --etcd_tls_* and
// --etcd_user/--etcd_password_file; a token etcd ended is asked for again.

#include <signal.h>

#include <atomic>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "base/status_matchers.h"
#include "base/test_dirs.h"
#include "cluster/etcd_store.h"
#include "cluster/shard_directory.h"
#include "gtest/gtest.h"
#include "net/etcd_client.h"
#include "net/tls_credentials.h"
#include "tests/child_process.h"
#include "tests/etcd_process.h"
#include "tests/ps_admin_run.h"
#include "tests/server_process.h"
#include "tests/test_certificates.h"
#include "tests/test_files.h"

namespace ps::testing {
namespace {

constexpr char kJob[] = "secured";

class EtcdSecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(FreshTestDir("etcd_security_certificates"));
    const std::string& d = *dir_;
    std::ofstream(d + "/etcd.ext")
        << "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
           "extendedKeyUsage=serverAuth\n";
    std::ofstream(d + "/client.ext") << "extendedKeyUsage=clientAuth\n";
    ASSERT_TRUE(MakeCertificateAuthority(d, "ca"));
    ASSERT_TRUE(IssueCertificate(d, "etcd", "ca", "etcd.ext"));
    ASSERT_TRUE(IssueCertificate(d, "client", "ca", "client.ext"));
    std::ofstream(d + "/password") << "job-password\n";
    std::ofstream(d + "/wrong_password") << "not-it\n";
  }

  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  static TlsFiles ClientTls(bool with_certificate) {
    TlsFiles files;
    files.ca = *dir_ + "/ca.pem";
    if (with_certificate) {
      files.cert = *dir_ + "/client.pem";
      files.key = *dir_ + "/client.key";
    }
    return files;
  }

  static absl::StatusOr<std::unique_ptr<cluster::CoordinationStore>> Connect(
      const std::string& endpoint, const TlsFiles& tls,
      const std::string& user = "", const std::string& password = "") {
    net::EtcdOptions options;
    options.endpoints = {endpoint};
    options.call_timeout = absl::Seconds(2);
    options.tls = tls;
    options.user = user;
    options.password = password;
    return cluster::EtcdStore::Connect(options);
  }

  // etcdctl (v3 API) against a plaintext etcd at `endpoint`; its exit code.
  static int Etcdctl(const std::string& endpoint,
                     const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"/usr/bin/env", "ETCDCTL_API=3",
                                     "/usr/bin/etcdctl",
                                     "--endpoints=http://" + endpoint};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunToCompletion(argv, *dir_ + "/etcdctl.log");
  }

  // A shard of kJob under `etcd`, with `more` flags.
  static absl::StatusOr<std::unique_ptr<ServerProcess>> StartShard(
      const EtcdProcess& etcd, const std::vector<std::string>& more,
      const std::string& name) {
    std::vector<std::string> flags = {
        "--etcd=" + etcd.endpoint(), absl::StrCat("--job=", kJob),
        "--etcd_lease_s=2",          "--data_dir=" + FreshTestDir(name),
        "--shard_index=0",           "--num_shards=1"};
    flags.insert(flags.end(), more.begin(), more.end());
    return ServerProcess::Start(flags, absl::Seconds(60),
                                *dir_ + "/" + name + ".log");
  }

  static std::string* dir_;
};

std::string* EtcdSecurityTest::dir_ = nullptr;

TEST_F(EtcdSecurityTest, TlsWithClientCertificatesRefusesClientsWithout) {
  EtcdSecurity security;
  security.cert = *dir_ + "/etcd.pem";
  security.key = *dir_ + "/etcd.key";
  security.client_ca = *dir_ + "/ca.pem";
  security.client_tls = ClientTls(/*with_certificate=*/true);
  absl::StatusOr<std::unique_ptr<EtcdProcess>> etcd =
      EtcdProcess::Start("etcd_tls", security);
  ASSERT_OK(etcd);
  const std::string endpoint = (*etcd)->endpoint();

  absl::StatusOr<std::unique_ptr<cluster::CoordinationStore>> good =
      Connect(endpoint, ClientTls(true));
  ASSERT_OK(good);
  ASSERT_OK((*good)->Put("/ps/secured/x", "1").status());
  // No client certificate, or no TLS at all: refused.
  for (const TlsFiles& tls : {ClientTls(false), TlsFiles()}) {
    absl::StatusOr<std::unique_ptr<cluster::CoordinationStore>> bad =
        Connect(endpoint, tls);
    ASSERT_OK(bad);
    EXPECT_FALSE((*bad)->Put("/ps/secured/x", "2").ok());
  }
  absl::StatusOr<net::EtcdValue> kept = (*good)->Get("/ps/secured/x");
  ASSERT_OK(kept);
  EXPECT_EQ(kept->value, "1");

  // A shard registers through it with the flags, and ps_admin finds it.
  const std::vector<std::string> tls_flags = {
      "--etcd_tls_ca=" + *dir_ + "/ca.pem",
      "--etcd_tls_cert=" + *dir_ + "/client.pem",
      "--etcd_tls_key=" + *dir_ + "/client.key"};
  absl::StatusOr<std::unique_ptr<ServerProcess>> shard =
      StartShard(**etcd, tls_flags, "tls_shard");
  ASSERT_OK(shard);
  absl::StatusOr<cluster::ShardRecord> found =
      cluster::FindShard(**good, kJob, 0);
  ASSERT_OK(found);
  EXPECT_EQ(found->address, (*shard)->address());
  std::vector<std::string> admin_flags = {"--rpc_timeout_s=5"};
  admin_flags.insert(admin_flags.end(), tls_flags.begin(), tls_flags.end());
  const AdminRun stats =
      RunPsAdmin(AdminCluster::Etcd(endpoint, kJob, admin_flags), {"stats"},
                 *dir_ + "/admin_tls.log");
  EXPECT_EQ(stats.exit_code, 0) << stats.log;
  // Without its certificate ps_admin cannot look the job up.
  EXPECT_NE(
      RunPsAdmin(AdminCluster::Etcd(endpoint, kJob,
                                    {"--rpc_timeout_s=5",
                                     "--etcd_tls_ca=" + *dir_ + "/ca.pem"}),
                 {"stats"}, *dir_ + "/admin_no_cert.log")
          .exit_code,
      0);
  // A certificate without its key is a bad flag.
  EXPECT_EQ(RunServerToExit(
                {"--etcd=" + endpoint, "--job=other", "--listen=127.0.0.1:0",
                 "--data_dir=" + FreshTestDir("tls_bad_flags"),
                 "--etcd_tls_ca=" + *dir_ + "/ca.pem",
                 "--etcd_tls_cert=" + *dir_ + "/client.pem"},
                *dir_ + "/bad_flags.log"),
            64)
      << ReadFile(*dir_ + "/bad_flags.log");
}

TEST_F(EtcdSecurityTest, AUserWhoseRoleReachesTheJobAlone) {
  EtcdSecurity security;
  // Tokens end after a second unused: the client must ask again.
  security.more_flags = {"--auth-token-ttl=1"};
  absl::StatusOr<std::unique_ptr<EtcdProcess>> etcd =
      EtcdProcess::Start("etcd_auth", security);
  ASSERT_OK(etcd);
  const std::string endpoint = (*etcd)->endpoint();
  const std::string prefix = absl::StrCat("/ps/", kJob, "/");
  for (const std::vector<std::string>& step :
       std::vector<std::vector<std::string>>{
           {"user", "add", "root", "--new-user-password=root-password"},
           {"role", "add", "job"},
           {"role", "grant-permission", "job", "--prefix=true", "readwrite",
            prefix},
           {"user", "add", "job", "--new-user-password=job-password"},
           {"user", "grant-role", "job", "job"},
           {"auth", "enable"}}) {
    ASSERT_EQ(Etcdctl(endpoint, step), 0) << step[0] << " " << step[1] << ": "
                                          << ReadFile(*dir_ + "/etcdctl.log");
  }

  absl::StatusOr<std::unique_ptr<cluster::CoordinationStore>> job =
      Connect(endpoint, TlsFiles(), "job", "job-password");
  ASSERT_OK(job);
  ASSERT_OK((*job)->Put(prefix + "x", "1").status());
  EXPECT_EQ((*job)->Put("/elsewhere", "1").status().code(),
            absl::StatusCode::kPermissionDenied);
  // Unused past the token's life: the next call asks for a new one.
  absl::SleepFor(absl::Seconds(3));
  ASSERT_OK((*job)->Put(prefix + "y", "1").status());
  // A watch asked for after the token ended asks for a new one too, and
  // sees the changes (etcd answers an ended token with a watch created and
  // cancelled at once, which must not pass for a watch).
  absl::SleepFor(absl::Seconds(3));
  absl::Notification seen;
  std::atomic<bool> notified{false};
  absl::StatusOr<std::unique_ptr<cluster::StoreWatch>> watch =
      (*job)->WatchPrefix(prefix, 0, [&](const net::EtcdEvent& event) {
        if (event.kv.key == prefix + "z" && !notified.exchange(true))
          seen.Notify();
      });
  ASSERT_OK(watch);
  ASSERT_OK((*job)->Put(prefix + "z", "1").status());
  EXPECT_TRUE(seen.WaitForNotificationWithTimeout(absl::Seconds(10)));
  // A watch beyond the role's keys is refused, not a watch that never fires.
  EXPECT_EQ((*job)
                ->WatchPrefix("/elsewhere/", 0, [](const net::EtcdEvent&) {})
                .status()
                .code(),
            absl::StatusCode::kPermissionDenied);
  // Nobody, or a wrong password: refused.
  absl::StatusOr<std::unique_ptr<cluster::CoordinationStore>> anonymous =
      Connect(endpoint, TlsFiles());
  ASSERT_OK(anonymous);
  EXPECT_FALSE((*anonymous)->Put(prefix + "x", "2").ok());
  EXPECT_FALSE(Connect(endpoint, TlsFiles(), "job", "not-it").ok());

  // A shard registers as the user, and a shard without it does not start.
  const std::vector<std::string> user_flags = {
      "--etcd_user=job", "--etcd_password_file=" + *dir_ + "/password"};
  absl::StatusOr<std::unique_ptr<ServerProcess>> shard =
      StartShard(**etcd, user_flags, "auth_shard");
  ASSERT_OK(shard);
  absl::StatusOr<cluster::ShardRecord> found =
      cluster::FindShard(**job, kJob, 0);
  ASSERT_OK(found);
  EXPECT_EQ(found->address, (*shard)->address());
  EXPECT_FALSE(StartShard(**etcd,
                          {"--etcd_user=job",
                           "--etcd_password_file=" + *dir_ + "/wrong_password"},
                          "auth_shard_wrong")
                   .ok());
}

// An etcd that went backwards (replaced by another, or restored from an
// older snapshot) could hold older fences than a data dir has seen: a shard
// on that data dir refuses to start (70, saying why) unless
// --accept_etcd_rollback.
TEST_F(EtcdSecurityTest, AShardRefusesAnEtcdThatWentBackwards) {
  absl::StatusOr<std::unique_ptr<EtcdProcess>> etcd =
      EtcdProcess::Start("etcd_before");
  ASSERT_OK(etcd);
  const std::string data_dir = FreshTestDir("rollback_shard");
  const std::vector<std::string> flags = {"--etcd=" + (*etcd)->endpoint(),
                                          absl::StrCat("--job=", kJob),
                                          "--etcd_lease_s=2",
                                          "--data_dir=" + data_dir,
                                          "--shard_index=0",
                                          "--num_shards=1"};
  {
    absl::StatusOr<std::unique_ptr<ServerProcess>> shard = ServerProcess::Start(
        flags, absl::Seconds(60), *dir_ + "/rollback_first.log");
    ASSERT_OK(shard);
    // Started again on the same etcd: it went on.
    (*shard)->SignalAndWait(SIGTERM);
    shard = ServerProcess::Start(flags, absl::Seconds(60),
                                 *dir_ + "/rollback_again.log");
    ASSERT_OK(shard);
    (*shard)->SignalAndWait(SIGTERM);
  }
  (*etcd)->Stop(SIGKILL);
  // Another etcd at the same address would do the same; a new one stands
  // for a restore.
  absl::StatusOr<std::unique_ptr<EtcdProcess>> other =
      EtcdProcess::Start("etcd_after");
  ASSERT_OK(other);
  std::vector<std::string> argv = {"--etcd=" + (*other)->endpoint(),
                                   absl::StrCat("--job=", kJob),
                                   "--etcd_lease_s=2",
                                   "--data_dir=" + data_dir,
                                   "--shard_index=0",
                                   "--num_shards=1"};
  const std::string log = *dir_ + "/rollback_refused.log";
  EXPECT_EQ(RunServerToExit(argv, log, absl::Seconds(60)), 70) << ReadFile(log);
  EXPECT_NE(ReadFile(log).find("--accept_etcd_rollback"), std::string::npos)
      << ReadFile(log);
  std::vector<std::string> accepted = argv;
  accepted.push_back("--accept_etcd_rollback");
  absl::StatusOr<std::unique_ptr<ServerProcess>> shard = ServerProcess::Start(
      accepted, absl::Seconds(60), *dir_ + "/rollback_accepted.log");
  EXPECT_OK(shard);
}

}  // namespace
}  // namespace ps::testing
