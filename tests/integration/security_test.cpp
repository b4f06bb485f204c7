// Secure connections against private Redis servers this test starts itself:
// the least-privilege ACL user from config/redis-acl.conf, TLS with
// certificates made by openssl, a wrong password, and no secret in logs,
// --help, inspect or /metrics.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <future>
#include <regex>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <httplib.h>

#include "kafka/admin.hpp"
#include "kafka/producer.hpp"
#include "messages/types.hpp"
#include "redis/stores.hpp"
#include "tests/support/integration.hpp"

using namespace qsp;
using test::eventually;
using test::slurp;
using namespace std::chrono_literals;

namespace {

struct secured : ::testing::Test {
  std::string topic = test::unique_name("sec");
  std::string ns = "session_projection"; // the ACL's key patterns
  std::string convs = "convs:";
  void SetUp() override {
    test::create_topic(topic, 1);
    auto p = kafka::producer::make(test::kafka_client());
    for (uint64_t i = 0; i < 50; ++i)
      ASSERT_TRUE(p->send(topic, 0, core::encode_json(test::make_dispatch(i))));
    ASSERT_TRUE(p->flush());
  }
  void TearDown() override {
    auto admin = kafka::admin::make(test::kafka_client());
    (*admin)->delete_topic(topic);
  }
  std::vector<std::string> args(const std::string& cmd, uint16_t port,
                                std::vector<std::string> extra) {
    auto a = test::node_args(topic, 1, ns, convs);
    a.insert(a.begin(), cmd);
    a.push_back("--redis.port=" + std::to_string(port));
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
};

const std::string password = "Pw-7f3a9c1e-never-shown";

} // namespace

TEST_F(secured, LeastPrivilegeAclUserProjectsAndSecretsNeverShow) {
  // The ACL from config/, with the placeholder replaced; default user has an
  // admin password for the test's own checks.
  auto dir = "/tmp/" + test::unique_name("acl");
  test::sh("mkdir -p " + dir);
  std::ifstream in{QSP_SOURCE_DIR "/config/redis-acl.conf"};
  std::ofstream out{dir + "/users.acl"};
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("user ", 0) != 0)
      continue;
    out << std::regex_replace(line, std::regex{">CHANGE-ME"}, ">" + password) << '\n';
  }
  out << "user default on >admin-pw ~* &* +@all\n";
  out.close();
  test::private_redis redis{"acl-redis", {"--aclfile", dir + "/users.acl"}, false};
  ASSERT_TRUE(redis.wait_ready("--user default --pass admin-pw --no-auth-warning"));
  auto port = redis.port;
  auto http_port = test::free_port();
  std::vector<std::string> creds{"--redis.username=qsession-projection",
                                 "--redis.password=" + password, "--log.level=debug"};

  auto logf = dir + "/node.log";
  auto run = args("run", port, creds);
  run.push_back("--http.listen=127.0.0.1:" + std::to_string(http_port));
  auto pid = test::spawn_cli(run, logf);
  httplib::Client http{"127.0.0.1", http_port};
  bool ready = false;
  for (int i = 0; i < 600 && !ready; ++i) {
    auto r = http.Get("/readyz");
    ready = r && r->status == 200;
    if (!ready)
      std::this_thread::sleep_for(50ms);
  }
  ASSERT_TRUE(ready) << slurp(logf);
  auto metrics = http.Get("/metrics");
  ASSERT_TRUE(metrics);
  auto sessions = http.Get("/v1/users/u1/sessions");
  ASSERT_TRUE(sessions);
  EXPECT_EQ(sessions->status, 200) << sessions->body;
  ::kill(pid, SIGTERM);
  EXPECT_EQ(test::wait_cli(pid), 0) << slurp(logf);
  EXPECT_EQ(test::sh("redis-cli -p " + std::to_string(port)
               + " --user default --pass admin-pw --no-auth-warning HGET "
                 "session_projection:checkpoint:" + topic + ":0 next_offset | grep -qx 50"),
            0);

  // Clustered ownership under the same ACL (docs/DESIGN.md §12): the claim, the
  // fenced checkpoint write, the published status and the cluster view.
  {
    auto clustered = args("run", port, creds);
    clustered.push_back("--http.listen=127.0.0.1:" + std::to_string(http_port));
    clustered.push_back("--projection.ownership=static");
    clustered.push_back("--projection.partitions=0");
    auto cpid = test::spawn_cli(clustered, logf + ".static");
    ASSERT_TRUE(test::readyz_reaches(http_port, 200, 30s)) << slurp(logf + ".static");
    auto table = test::run_cli(args("cluster", port, creds));
    EXPECT_EQ(table.rc, 0) << table.out << table.err;
    EXPECT_NE(table.out.find("namespace session_projection, topic " + topic + ": ready"),
              std::string::npos)
      << table.out;
    ::kill(cpid, SIGTERM);
    EXPECT_EQ(test::wait_cli(cpid), 0) << slurp(logf + ".static");
    // Its status went with it: the namespace is not ready without an owner.
    auto after = test::run_cli(args("cluster", port, creds));
    EXPECT_EQ(after.rc, 6) << after.out << after.err;
    EXPECT_EQ(slurp(logf + ".static").find("NOPERM"), std::string::npos);
  }

  auto inspect = test::run_cli(args("inspect", port, creds));
  EXPECT_EQ(inspect.rc, 0) << inspect.err;
  auto help = test::run_cli({"--help", "--redis.password=" + password});
  EXPECT_EQ(help.rc, 0);
  auto dump = test::run_cli(args("verify", port, {"--dump-config", "--redis.password=" + password}));
  EXPECT_EQ(dump.rc, 2);
  for (auto* text : {&metrics->body, &inspect.out, &inspect.err, &help.out, &help.err,
                     &dump.out, &dump.err}) {
    EXPECT_EQ(text->find(password), std::string::npos) << *text;
  }
  EXPECT_EQ(slurp(logf).find(password), std::string::npos);
  EXPECT_EQ(slurp(logf + ".out").find(password), std::string::npos);

  // A wrong password: a clear error naming the user, no crash; refused
  // credentials are a final configuration error (ec::invalid_config: exit
  // 2, like a bad flag), not an outage (4).
  auto wrong = test::run_cli(args("verify", port, {"--redis.username=qsession-projection",
                                                   "--redis.password=wrong-" + password}));
  EXPECT_EQ(wrong.rc, 2) << wrong.err;
  EXPECT_NE(wrong.err.find("AUTH failed for user 'qsession-projection'"), std::string::npos)
    << wrong.err;
  EXPECT_EQ(wrong.err.find(password), std::string::npos);
  // No password at all, to a server that requires one (NOAUTH): final too,
  // and saying what to set, not retried as an outage.
  auto none = test::run_cli(args("verify", port, {}));
  EXPECT_EQ(none.rc, 2) << none.err;
  EXPECT_NE(none.err.find("requires authentication"), std::string::npos) << none.err;
  EXPECT_NE(none.err.find("redis.password-file"), std::string::npos) << none.err;

  // The adapters directly, as the least-privilege user: every command they
  // use is in the ACL (INFO memory for the policy; EVAL, SCAN, TYPE, HGETALL
  // for the read, a stray key included).
  auto cfg = test::redis_settings(ns, convs);
  cfg.port = port;
  cfg.username = "qsession-projection";
  cfg.password = password;
  auto admin_cli = "redis-cli -p " + std::to_string(port) + " --user default --pass admin-pw "
                   "--no-auth-warning ";
  ASSERT_EQ(test::sh(admin_cli + "HSET session_projection:checkpoint:" + topic
                     + ":9 next_offset 1 >/dev/null"),
            0);
  {
    auto store = redis::redis_checkpoint_store::open(cfg);
    ASSERT_TRUE(store) << describe(store.error());
    auto policy = (*store)->maxmemory_policy();
    ASSERT_TRUE(policy) << describe(policy.error());
    EXPECT_EQ(*policy, "noeviction");
    auto st = (*store)->read(topic, 1);
    ASSERT_TRUE(st) << describe(st.error());
    EXPECT_TRUE(st->meta.has_value());
    EXPECT_EQ(st->checkpoints.size(), 2u);
    EXPECT_TRUE(st->checkpoints.count("0"));
    EXPECT_TRUE(st->checkpoints.count("9"));
    // A command outside the ACL: final, naming the command.
    auto conn = redis::connection::open(cfg);
    ASSERT_TRUE(conn) << describe(conn.error());
    auto denied = (*conn)->command({"FLUSHALL"});
    ASSERT_FALSE(denied);
    EXPECT_EQ(denied.error().code(), static_cast<uint8_t>(ec::invalid_config))
      << describe(denied.error());
    EXPECT_NE(describe(denied.error()).find("FLUSHALL"), std::string::npos);
  }
  test::sh(admin_cli + "DEL session_projection:checkpoint:" + topic + ":9 >/dev/null");
  cfg.password = "wrong-" + password;
  auto bad = redis::redis_checkpoint_store::open(cfg);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code(), static_cast<uint8_t>(ec::invalid_config)) << describe(bad.error());
  EXPECT_NE(describe(bad.error()).find("AUTH failed for user 'qsession-projection'"),
            std::string::npos)
    << describe(bad.error());
  EXPECT_EQ(describe(bad.error()).find(password), std::string::npos);
  test::sh("rm -rf " + dir);
}

TEST_F(secured, RedisOverTlsWithGeneratedCertificates) {
  auto dir = "/tmp/" + test::unique_name("tls");
  ASSERT_EQ(test::sh("mkdir -p " + dir + " && cd " + dir
               + " && openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=qsp-test-ca"
                 " -keyout ca.key -out ca.crt >/dev/null 2>&1"
                 " && openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1"
                 " -keyout server.key -out server.csr >/dev/null 2>&1"
                 " && printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > san.ext"
                 " && openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial"
                 " -days 1 -extfile san.ext -out server.crt >/dev/null 2>&1"),
            0);
  test::private_redis redis{"tls-redis",
                      {"--tls-cert-file", dir + "/server.crt", "--tls-key-file", dir + "/server.key",
                       "--tls-ca-cert-file", dir + "/ca.crt", "--tls-auth-clients", "no"},
                      true};
  ASSERT_TRUE(redis.wait_ready("--tls --cacert " + dir + "/ca.crt"));
  std::vector<std::string> tls{"--redis.tls", "--redis.tls-ca-file=" + dir + "/ca.crt",
                               "--redis.tls-server-name=localhost"};
  auto r = test::run_cli(args("catch-up", redis.port, tls));
  EXPECT_EQ(r.rc, 0) << r.err;
  auto v = test::run_cli(args("verify", redis.port, tls));
  EXPECT_EQ(v.rc, 0) << v.err;
  EXPECT_NE(v.out.find("caught_up"), std::string::npos) << v.out;
  // Plain TCP against the TLS port fails cleanly.
  auto plain = test::run_cli(args("verify", redis.port, {"--redis.timeout-ms=2000"}));
  EXPECT_EQ(plain.rc, 4) << plain.err;

  // The connection directly.  The command timeout holds over TLS too
  // (SO_RCVTIMEO on the socket OpenSSL reads).
  auto cfg = test::redis_settings(ns, convs);
  cfg.port = redis.port;
  cfg.tls = true;
  cfg.tls_ca_file = dir + "/ca.crt";
  cfg.tls_server_name = "localhost";
  cfg.command_timeout_ms = 500;
  test::expect_blocked_read_times_out(cfg);
  // interrupt() ends a blocked TLS read at once.
  cfg.command_timeout_ms = 10000;
  {
    auto c = redis::connection::open(cfg);
    ASSERT_TRUE(c) << describe(c.error());
    auto* conn = c->get();
    auto t0 = std::chrono::steady_clock::now();
    auto blocked = std::async(std::launch::async, [conn] {
      return conn->command({"BLPOP", test::unique_name("never"), "0"});
    });
    std::this_thread::sleep_for(200ms);
    conn->interrupt();
    ASSERT_EQ(blocked.wait_for(5s), std::future_status::ready);
    auto r = blocked.get();
    ASSERT_FALSE(r);
    EXPECT_NE(describe(r.error()).find("interrupted"), std::string::npos) << describe(r.error());
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  }
  // A CA file that cannot be loaded: a configuration error naming the option.
  auto missing = cfg;
  missing.tls_ca_file = dir + "/missing-ca.crt";
  auto m = redis::connection::open(missing);
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error().code(), static_cast<uint8_t>(ec::invalid_config)) << describe(m.error());
  EXPECT_NE(describe(m.error()).find("redis.tls-ca-file"), std::string::npos) << describe(m.error());
  // A server certificate another CA signed: verification fails, final.
  ASSERT_EQ(test::sh("cd " + dir
                     + " && openssl req -x509 -newkey rsa:2048 -nodes -days 1"
                       " -subj /CN=qsp-other-ca -keyout other.key -out other.crt >/dev/null 2>&1"),
            0);
  auto foreign = cfg;
  foreign.tls_ca_file = dir + "/other.crt";
  auto f = redis::connection::open(foreign);
  ASSERT_FALSE(f);
  EXPECT_EQ(f.error().code(), static_cast<uint8_t>(ec::invalid_config)) << describe(f.error());
  EXPECT_NE(describe(f.error()).find("certificate"), std::string::npos) << describe(f.error());
  test::sh("rm -rf " + dir);
}

namespace {

/// A throwaway CA in `dir` (ca.crt) and a server certificate it signed
/// (NAME.crt / NAME.key) holding `san` (an openssl subjectAltName value).
bool make_server_cert(const std::string& dir, const std::string& name, const std::string& san) {
  auto q = [](const std::string& s) { return "'" + s + "'"; };
  return test::sh("mkdir -p " + dir + " && cd " + dir
                  + " && { [ -f ca.crt ] || openssl req -x509 -newkey rsa:2048 -nodes -days 1"
                    " -subj /CN=qsp-test-ca -keyout ca.key -out ca.crt >/dev/null 2>&1; }"
                    " && openssl req -newkey rsa:2048 -nodes -subj /CN=" + name
                  + " -keyout " + name + ".key -out " + name + ".csr >/dev/null 2>&1"
                    " && printf '%s\\n' " + q("subjectAltName=" + san) + " > " + name + ".ext"
                  + " && openssl x509 -req -in " + name + ".csr -CA ca.crt -CAkey ca.key"
                    " -CAcreateserial -days 1 -extfile " + name + ".ext -out " + name
                  + ".crt >/dev/null 2>&1")
         == 0;
}

} // namespace

// DESIGN of issue 27: the server certificate's name is checked in the TLS
// handshake (OpenSSL's host check), against redis.tls-server-name or else the
// host dialled.  Before, a certificate from the configured CA was accepted
// for any address: hiredis used the server name for SNI only.
TEST_F(secured, RedisCertificateForAnotherNameIsRefused) {
  auto dir = "/tmp/" + test::unique_name("tlsname");
  ASSERT_TRUE(make_server_cert(dir, "wrong.example", "DNS:wrong.example"));
  test::private_redis redis{"tls-wrong-name",
                            {"--tls-cert-file", dir + "/wrong.example.crt", "--tls-key-file",
                             dir + "/wrong.example.key", "--tls-ca-cert-file", dir + "/ca.crt",
                             "--tls-auth-clients", "no"},
                            true};
  ASSERT_TRUE(redis.wait_ready("--tls --cacert " + dir + "/ca.crt --sni wrong.example"
                               " --insecure"));
  auto cfg = test::redis_settings(ns, convs);
  cfg.port = redis.port;
  cfg.tls = true;
  cfg.tls_ca_file = dir + "/ca.crt";
  auto expect_refused = [&](const redis::settings& c, const std::string& expected) {
    auto conn = redis::connection::open(c);
    ASSERT_FALSE(conn) << "a certificate for wrong.example was accepted for " << expected;
    EXPECT_EQ(conn.error().code(), static_cast<uint8_t>(ec::invalid_config))
      << describe(conn.error());
    auto text = describe(conn.error());
    EXPECT_NE(text.find("not valid for '" + expected + "'"), std::string::npos) << text;
    EXPECT_NE(text.find("DNS:wrong.example"), std::string::npos) << text;
  };
  // The host dialled (an IP: the certificate holds no IP SAN) ...
  expect_refused(cfg, "127.0.0.1");
  // ... and a configured name the certificate does not hold.
  auto named = cfg;
  named.tls_server_name = "right.example";
  expect_refused(named, "right.example");
  // The same certificate is otherwise good: for its own name it connects,
  // and with the opt-out it connects under any name.
  auto own = cfg;
  own.tls_server_name = "wrong.example";
  auto ok = redis::connection::open(own);
  ASSERT_TRUE(ok) << describe(ok.error());
  EXPECT_TRUE((*ok)->command({"PING"}));
  auto unchecked = named;
  unchecked.tls_verify_hostname = false;
  auto loose = redis::connection::open(unchecked);
  ASSERT_TRUE(loose) << describe(loose.error());

  // The node: a configuration error (exit 2) naming both names, nothing
  // written; the opt-out works and warns.
  std::vector<std::string> tls{"--redis.tls", "--redis.tls-ca-file=" + dir + "/ca.crt",
                               "--redis.tls-server-name=right.example"};
  auto r = test::run_cli(args("catch-up", redis.port, tls));
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("not valid for 'right.example'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("DNS:wrong.example"), std::string::npos) << r.err;
  auto keys = (*ok)->command({"DBSIZE"});
  ASSERT_TRUE(keys) << describe(keys.error());
  EXPECT_EQ((*keys)->integer, 0) << "written through a connection that should have been refused";
  tls.push_back("--redis.tls-verify-hostname=false");
  auto opted = test::run_cli(args("catch-up", redis.port, tls));
  EXPECT_EQ(opted.rc, 0) << opted.err;
  EXPECT_NE(opted.err.find("redis.tls-verify-hostname=false"), std::string::npos) << opted.err;
  test::sh("rm -rf " + dir);
}
