// The node against the secured service set (scripts/services start --secure):
// Kafka over SASL_SSL with SCRAM-SHA-512 and the StandardAuthorizer, Redis
// over TLS only with the least-privilege ACL user of config/redis-acl.conf.
// Each test grants the node's Kafka principal exactly the ACLs it names
// (through the admin API, as the super user) on a topic and group of its own.
//
// Label `secure`.  Every test skips unless a secured set is found
// (QSP_SERVICES_ENV, else <repo>/.services-secure/env); with
// QSP_REQUIRE_SECURE set (scripts/test) a missing set fails instead.
#include <signal.h>

#include <chrono>
#include <functional>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <httplib.h>
#include <librdkafka/rdkafka.h>

#include "kafka/admin.hpp"
#include "kafka/producer.hpp"
#include "messages/types.hpp"
#include "redis/connection.hpp"
#include "tests/support/integration.hpp"

using namespace qsp;
using namespace std::chrono_literals;
using test::slurp;

namespace {

// -- the secured set ---------------------------------------------------------

const test::service_set* secure_env(std::string* why) {
  return test::find_set("secure", ".services-secure",
                        "run scripts/test, or start one with QSP_SERVICES_DIR=.services-secure "
                        "scripts/services start --secure",
                        why);
}

#define REQUIRE_SECURE_SET() REQUIRE_SERVICE_SET(secure_env, "QSP_REQUIRE_SECURE")

const test::service_set& S() { return *secure_env(nullptr); }

/// librdkafka properties of a SASL_SSL client as `user`.
std::vector<std::pair<std::string, std::string>> sasl_props(const std::string& user,
                                                            const std::string& password) {
  return {{"security.protocol", "SASL_SSL"},
          {"sasl.mechanism", S().at("KAFKA_SASL_MECHANISM")},
          {"sasl.username", user},
          {"sasl.password", password},
          {"ssl.ca.location", S().at("KAFKA_CA_FILE")}};
}

kafka::client_settings admin_client() {
  kafka::client_settings c;
  c.bootstrap_servers = S().at("KAFKA_BOOTSTRAP");
  c.client_id = "qsp-secure-test";
  c.properties = sasl_props(S().at("KAFKA_ADMIN_USER"), S().secret("KAFKA_ADMIN_PASSWORD_FILE"));
  return c;
}

// -- Kafka ACLs through the admin API (as the super user) --------------------

struct acl {
  rd_kafka_ResourceType_t type;
  std::string name;
  rd_kafka_AclOperation_t op;
  std::string label; ///< as the docs name it
};

using rk_ptr = std::unique_ptr<rd_kafka_t, decltype(&rd_kafka_destroy)>;

rk_ptr admin_handle() {
  auto* conf = rd_kafka_conf_new();
  char err[512];
  auto set = [&](const std::string& k, const std::string& v) {
    if (rd_kafka_conf_set(conf, k.c_str(), v.c_str(), err, sizeof(err)) != RD_KAFKA_CONF_OK)
      ADD_FAILURE() << k << ": " << err;
  };
  set("bootstrap.servers", S().at("KAFKA_BOOTSTRAP"));
  for (auto& [k, v] : admin_client().properties)
    set(k, v);
  auto* rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
  if (rk == nullptr)
    ADD_FAILURE() << err;
  return rk_ptr{rk, &rd_kafka_destroy};
}

/// Creates (or deletes) one ALLOW ACL for the node's principal; true on success.
bool change_acl(const acl& a, bool create) {
  auto rk = admin_handle();
  if (!rk)
    return false;
  char err[512];
  auto principal = "User:" + S().at("KAFKA_NODE_USER");
  auto* q = rd_kafka_queue_new(rk.get());
  bool ok = false;
  if (create) {
    auto* b = rd_kafka_AclBinding_new(a.type, a.name.c_str(), RD_KAFKA_RESOURCE_PATTERN_LITERAL,
                                      principal.c_str(), "*", a.op,
                                      RD_KAFKA_ACL_PERMISSION_TYPE_ALLOW, err, sizeof(err));
    rd_kafka_CreateAcls(rk.get(), &b, 1, nullptr, q);
    auto* ev = rd_kafka_queue_poll(q, 15000);
    if (ev != nullptr) {
      size_t n = 0;
      auto** rs = rd_kafka_CreateAcls_result_acls(rd_kafka_event_CreateAcls_result(ev), &n);
      ok = rd_kafka_event_error(ev) == RD_KAFKA_RESP_ERR_NO_ERROR && n == 1
           && rd_kafka_acl_result_error(rs[0]) == nullptr;
      rd_kafka_event_destroy(ev);
    }
    rd_kafka_AclBinding_destroy(b);
  } else {
    auto* f = rd_kafka_AclBindingFilter_new(a.type, a.name.c_str(),
                                            RD_KAFKA_RESOURCE_PATTERN_LITERAL, principal.c_str(),
                                            "*", a.op, RD_KAFKA_ACL_PERMISSION_TYPE_ALLOW, err,
                                            sizeof(err));
    rd_kafka_DeleteAcls(rk.get(), &f, 1, nullptr, q);
    auto* ev = rd_kafka_queue_poll(q, 15000);
    if (ev != nullptr) {
      ok = rd_kafka_event_error(ev) == RD_KAFKA_RESP_ERR_NO_ERROR;
      rd_kafka_event_destroy(ev);
    }
    rd_kafka_AclBinding_destroy(f);
  }
  rd_kafka_queue_destroy(q);
  return ok;
}

// -- Redis as its admin (default user) ---------------------------------------

redis::settings redis_admin() {
  redis::settings r;
  r.host = S().at("REDIS_HOST");
  r.port = static_cast<uint16_t>(std::stoi(S().at("REDIS_PORT")));
  r.tls = true;
  r.tls_ca_file = S().at("REDIS_CA_FILE");
  r.password = S().secret("REDIS_ADMIN_PASSWORD_FILE");
  return r;
}

std::string redis_admin_cmd(const std::vector<std::string>& argv) {
  auto c = redis::connection::open(redis_admin());
  if (!c)
    return "ERR:" + describe(c.error());
  return test::redis_cmd(**c, argv);
}

// -- the fixture -------------------------------------------------------------

struct secure : ::testing::Test {
  std::string topic;
  std::string group;
  std::string ns = "session_projection"; // the Redis ACL's key patterns
  std::string convs = "convs:";
  std::string dir;
  /// The minimal Kafka ACLs (docs/OPERATIONS.md, "Securing the node").
  std::vector<acl> minimal() const {
    return {{RD_KAFKA_RESOURCE_TOPIC, topic, RD_KAFKA_ACL_OPERATION_READ, "Read on topic"},
            {RD_KAFKA_RESOURCE_TOPIC, topic, RD_KAFKA_ACL_OPERATION_DESCRIBE_CONFIGS,
             "DescribeConfigs on topic"},
            // librdkafka's consumer looks up its group's coordinator even with
            // static assignment (it needs a group.id to assign at all).
            {RD_KAFKA_RESOURCE_GROUP, group, RD_KAFKA_ACL_OPERATION_DESCRIBE, "Describe on group"}};
  }
  acl group_read() const {
    return {RD_KAFKA_RESOURCE_GROUP, group, RD_KAFKA_ACL_OPERATION_READ, "Read on group"};
  }

  void SetUp() override {
    REQUIRE_SECURE_SET();
    topic = test::unique_name("secure");
    group = topic + "-group";
    dir = "/tmp/" + topic;
    test::sh("mkdir -p " + dir);
    auto admin = kafka::admin::make(admin_client());
    ASSERT_TRUE(admin) << describe(admin.error());
    auto made = (*admin)->create_topic(topic, 1);
    ASSERT_TRUE(made) << describe(made.error());
    auto p = kafka::producer::make(admin_client());
    ASSERT_TRUE(p) << describe(p.error());
    for (uint64_t i = 0; i < 50; ++i)
      ASSERT_TRUE(p->send(topic, 0, core::encode_json(test::make_dispatch(i))));
    ASSERT_TRUE(p->flush());
    // This test's namespace starts empty (the ACL's key pattern is fixed).
    clear_redis();
  }
  void TearDown() override {
    if (secure_env(nullptr) == nullptr)
      return;
    for (auto& a : minimal())
      change_acl(a, false);
    change_acl(group_read(), false);
    if (auto admin = kafka::admin::make(admin_client()))
      (*admin)->delete_topic(topic);
    clear_redis();
    test::sh("rm -rf " + dir);
  }
  void clear_redis() {
    redis_admin_cmd({"EVAL",
                     "for _, k in ipairs(redis.call('KEYS', ARGV[1])) do redis.call('DEL', k) end "
                     "for _, k in ipairs(redis.call('KEYS', ARGV[2])) do redis.call('DEL', k) end "
                     "return 1",
                     "0", ns + ":*", convs + "*"});
  }
  /// Checkpoints and session sets (nothing written: 0).  The meta key is
  /// not counted: verification pins the identity before the consumer starts.
  long long written() {
    auto n = redis_admin_cmd({"EVAL",
                              "return #redis.call('KEYS', ARGV[1]) + #redis.call('KEYS', ARGV[2])",
                              "0", ns + ":checkpoint:*", convs + "*"});
    return std::stoll(n.rfind("ERR:", 0) == 0 ? "-1" : n);
  }
  void grant(const std::vector<acl>& as) {
    for (auto& a : as)
      ASSERT_TRUE(change_acl(a, true)) << a.label;
  }

  /// The node's flags against the secured set, as the node's principal.
  std::vector<std::string> node(const std::string& cmd, std::vector<std::string> extra = {},
                                const std::string& kafka_password_file = {}) const {
    std::vector<std::string> a{cmd,
                               "--projection.dispatch-topic=" + topic,
                               "--projection.partition-count=1",
                               "--projection.namespace=" + ns,
                               "--projection.convs-prefix=" + convs,
                               "--kafka.bootstrap-servers=" + S().at("KAFKA_BOOTSTRAP"),
                               "--kafka.group-id=" + group,
                               "--kafka.timeout-ms=5000",
                               "--kafka.properties=[\"security.protocol=SASL_SSL\","
                               "\"sasl.mechanism="
                                 + S().at("KAFKA_SASL_MECHANISM") + "\",\"sasl.username="
                                 + S().at("KAFKA_NODE_USER") + "\",\"ssl.ca.location="
                                 + S().at("KAFKA_CA_FILE") + "\"]",
                               "--kafka.sasl-password-file="
                                 + (kafka_password_file.empty() ? S().at("KAFKA_NODE_PASSWORD_FILE")
                                                                : kafka_password_file),
                               "--redis.host=" + S().at("REDIS_HOST"),
                               "--redis.port=" + S().at("REDIS_PORT"),
                               "--redis.tls",
                               "--redis.tls-ca-file=" + S().at("REDIS_CA_FILE"),
                               "--redis.username=" + S().at("REDIS_USER"),
                               "--redis.password-file=" + S().at("REDIS_PASSWORD_FILE"),
                               "--http.listen=\"\""};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  std::string file_with(const std::string& name, const std::string& content) const {
    auto path = dir + "/" + name;
    std::ofstream{path} << content << '\n';
    return path;
  }
};

/// The lines of `text` that contain `needle`.
size_t lines_with(const std::string& text, const std::string& needle) {
  std::istringstream in{text};
  std::string line;
  size_t n = 0;
  while (std::getline(in, line))
    n += line.find(needle) != std::string::npos ? 1 : 0;
  return n;
}

std::vector<std::string> secrets() {
  return {S().secret("KAFKA_NODE_PASSWORD_FILE"), S().secret("KAFKA_ADMIN_PASSWORD_FILE"),
          S().secret("REDIS_PASSWORD_FILE"), S().secret("REDIS_ADMIN_PASSWORD_FILE")};
}

void expect_no_secret(const std::string& where, const std::string& text) {
  for (auto& s : secrets())
    EXPECT_EQ(text.find(s), std::string::npos) << where << " shows a secret:\n" << text;
}

} // namespace

// The happy path with exactly the minimal ACLs: verify, catch-up, and run
// (ownership = group, which adds Read on the group), and no secret anywhere.
TEST_F(secure, MinimalAclsAreEnough) {
  grant(minimal());
  auto v = test::run_cli(node("verify"));
  EXPECT_EQ(v.rc, 0) << v.out << v.err;
  expect_no_secret("verify", v.out + v.err);
  auto c = test::run_cli(node("catch-up"));
  ASSERT_EQ(c.rc, 0) << c.err;
  expect_no_secret("catch-up", c.out + c.err);
  EXPECT_EQ(redis_admin_cmd({"HGET", ns + ":checkpoint:" + topic + ":0", "next_offset"}), "50");
  auto i = test::run_cli(node("inspect", {"--json"}));
  EXPECT_EQ(i.rc, 0) << i.err;
  expect_no_secret("inspect", i.out + i.err);
  auto help = test::run_cli(node("--help"));
  expect_no_secret("--help", help.out + help.err);

  grant({group_read()});
  auto http_port = test::free_port();
  auto log = dir + "/run.log";
  test::node_process run{node("run", {"--projection.ownership=group",
                                     "--http.listen=127.0.0.1:" + std::to_string(http_port)}),
                        log};
  ASSERT_TRUE(test::readyz_reaches(http_port, 200, 60s)) << slurp(log);
  httplib::Client http{"127.0.0.1", http_port};
  auto metrics = http.Get("/metrics");
  ASSERT_TRUE(metrics);
  expect_no_secret("/metrics", metrics->body);
  auto sessions = http.Get("/v1/users/u1/sessions");
  ASSERT_TRUE(sessions);
  EXPECT_EQ(sessions->status, 200) << sessions->body;
  EXPECT_EQ(run.stop(), 0) << slurp(log);
  expect_no_secret("the run's log", slurp(log));
}

// Each ACL of the minimal set, removed in turn, stops the node at start with
// exit 2 and a log line naming the missing permission; nothing is written.
// (Read implies Describe on the topic, and DescribeCluster needs no cluster
// ACL: the node asks for no authorized operations.)
TEST_F(secure, EachMinimalAclIsNeeded) {
  auto all = minimal();
  for (size_t skip = 0; skip < all.size(); ++skip) {
    auto& missing = all[skip];
    SCOPED_TRACE("without " + missing.label);
    for (size_t i = 0; i < all.size(); ++i)
      ASSERT_TRUE(change_acl(all[i], i != skip)) << all[i].label;
    auto r = test::run_cli(node("catch-up"));
    EXPECT_EQ(r.rc, 2) << r.err;
    auto named = missing.label + " " + missing.name;
    EXPECT_GE(lines_with(r.err, named), 1u) << "no line names \"" << named << "\":\n" << r.err;
    EXPECT_EQ(written(), 0) << r.err;
    expect_no_secret("catch-up", r.out + r.err);
  }
  // ownership = group also needs Read on the group (JoinGroup).
  grant(all);
  auto log = dir + "/group.log";
  test::node_process run{node("run", {"--projection.ownership=group"}), log};
  auto rc = run.wait_for(60s);
  ASSERT_TRUE(rc) << "still running without Read on the group:\n" << slurp(log);
  EXPECT_EQ(*rc, 2) << slurp(log);
  EXPECT_GE(lines_with(slurp(log), "Read on group " + group), 1u) << slurp(log);
  EXPECT_EQ(written(), 0) << slurp(log);
  // With the full set it works.
  grant({group_read()});
  auto ok = test::run_cli(node("catch-up"));
  EXPECT_EQ(ok.rc, 0) << ok.err;
}

// Credentials and TLS that cannot work: exit 2 (a configuration error, as
// docs/OPERATIONS.md says), one log line naming the cause, nothing written.
TEST_F(secure, RefusedCredentialsAndTlsMismatchesAreConfigurationErrors) {
  grant(minimal());
  auto wrong = file_with("wrong.password", "not-" + S().secret("KAFKA_NODE_PASSWORD_FILE"));
  auto expect_config_error = [&](const std::vector<std::string>& args, const std::string& cause) {
    auto r = test::run_cli(args);
    EXPECT_EQ(r.rc, 2) << r.err;
    EXPECT_GE(lines_with(r.err, cause), 1u) << "no line names \"" << cause << "\":\n" << r.err;
    EXPECT_EQ(written(), 0) << r.err;
    expect_no_secret("the node's output", r.out + r.err);
    return r.err;
  };
  // A wrong password and an unknown user: the broker answers both alike.
  const std::string refused = "the broker refused the credentials";
  expect_config_error(node("catch-up", {}, wrong), refused);
  auto unknown = node("catch-up", {}, wrong);
  for (auto& a : unknown)
    if (a.rfind("--kafka.properties=", 0) == 0)
      a.replace(a.find("sasl.username=") + 14, S().at("KAFKA_NODE_USER").size(), "nobody");
  expect_config_error(unknown, refused);
  // TLS to a listener that speaks plaintext (the controller listener).
  auto plain = node("catch-up");
  for (auto& a : plain)
    if (a.rfind("--kafka.bootstrap-servers=", 0) == 0)
      a = "--kafka.bootstrap-servers=" + S().at("KAFKA_CONTROLLER");
  expect_config_error(plain, "TLS to a listener that speaks plaintext");
  // A broker certificate for another name (endpoint identification stays on).
  auto other = node("catch-up");
  for (auto& a : other)
    if (a.rfind("--kafka.bootstrap-servers=", 0) == 0)
      a = "--kafka.bootstrap-servers=" + S().at("KAFKA_WRONG_NAME_BOOTSTRAP");
  expect_config_error(other, "the broker's certificate does not verify");
  // Only the name fails it: with librdkafka's check off the same listener
  // works, and the node warns.
  for (auto& a : other)
    if (a.rfind("--kafka.properties=[", 0) == 0)
      a.insert(a.size() - 1, ",\"ssl.endpoint.identification.algorithm=none\"");
  auto unchecked = test::run_cli(other);
  EXPECT_EQ(unchecked.rc, 0) << unchecked.err;
  EXPECT_GE(lines_with(unchecked.err, "ssl.endpoint.identification.algorithm=none"), 1u)
    << unchecked.err;
  clear_redis();
  // Redis: a wrong password, and a certificate checked for another name.
  auto redis_wrong = file_with("redis.password", "not-" + S().secret("REDIS_PASSWORD_FILE"));
  expect_config_error(node("catch-up", {"--redis.password-file=" + redis_wrong}),
                      "AUTH failed for user '" + S().at("REDIS_USER") + "'");
  // A namespace outside the ACL user's key patterns: the message says so
  // (not "grant the command").
  expect_config_error(node("catch-up", {"--projection.namespace=outside_the_acl"}),
                      "outside the user's key patterns");
  expect_config_error(node("catch-up", {"--redis.tls-server-name=wrong.example"}),
                      "not valid for 'wrong.example'");
  // The opt-out connects (and says so), against the same certificate.
  auto loose = test::run_cli(
    node("catch-up", {"--redis.tls-server-name=wrong.example", "--redis.tls-verify-hostname=false"}));
  EXPECT_EQ(loose.rc, 0) << loose.err;
  EXPECT_GE(lines_with(loose.err, "redis.tls-verify-hostname=false"), 1u) << loose.err;
}

// A permission revoked while `run` is ready: the node leaves ready, names
// the permission and exits 2 (as at start); nothing is lost, and once the
// permission is back the next start completes.
TEST_F(secure, AclRevokedWhileReadyStopsTheNode) {
  grant(minimal());
  auto http_port = test::free_port();
  auto produce = [&](uint64_t from, uint64_t to) {
    auto p = kafka::producer::make(admin_client());
    ASSERT_TRUE(p) << describe(p.error());
    for (uint64_t i = from; i < to; ++i)
      ASSERT_TRUE(p->send(topic, 0, core::encode_json(test::make_dispatch(i))));
    ASSERT_TRUE(p->flush());
  };
  auto checkpoint = [&] {
    auto v = redis_admin_cmd({"HGET", ns + ":checkpoint:" + topic + ":0", "next_offset"});
    return v.rfind("ERR:", 0) == 0 || v.empty() ? int64_t{-1} : std::stoll(v);
  };
  struct revocation {
    std::string name;
    std::function<void()> revoke, restore;
    std::string named;
  };
  const acl topic_read = minimal()[0];
  std::vector<revocation> cases{
    {"Kafka: Read on the topic", [&] { ASSERT_TRUE(change_acl(topic_read, false)); },
     [&] { ASSERT_TRUE(change_acl(topic_read, true)); }, "Read on topic " + topic},
    {"Redis: ZADD", [&] {
       EXPECT_EQ(redis_admin_cmd({"ACL", "SETUSER", S().at("REDIS_USER"), "-zadd"}), "OK");
     },
     [&] { EXPECT_EQ(redis_admin_cmd({"ACL", "SETUSER", S().at("REDIS_USER"), "+zadd"}), "OK"); },
     "the ACL denies"}};
  uint64_t produced = 50;
  for (auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto log = dir + "/revoke-" + std::to_string(produced) + ".log";
    test::node_process run{node("run", {"--http.listen=127.0.0.1:" + std::to_string(http_port)}),
                           log};
    ASSERT_TRUE(test::readyz_reaches(http_port, 200, 60s)) << slurp(log);
    auto before = checkpoint();
    auto t0 = std::chrono::steady_clock::now();
    c.revoke();
    produce(produced, produced + 20); // more to read and write: the revoked permission is used
    produced += 20;
    // It stops claiming ready (answers 503, or its endpoint is gone with
    // the process) while the permission is missing, then exits 2.
    httplib::Client http{"127.0.0.1", http_port};
    http.set_connection_timeout(1);
    bool left_ready = false;
    while (!left_ready && std::chrono::steady_clock::now() - t0 < 60s) {
      if (run.wait_for(0ms)) {
        left_ready = true;
        break;
      }
      auto r = http.Get("/readyz");
      left_ready = !r || r->status != 200;
      if (!left_ready)
        std::this_thread::sleep_for(50ms);
    }
    ASSERT_TRUE(left_ready) << "still ready 60 s after the revocation:\n" << slurp(log);
    auto not_ready = std::chrono::steady_clock::now() - t0;
    auto rc = run.wait_for(60s);
    ASSERT_TRUE(rc) << "still running without the permission:\n" << slurp(log);
    EXPECT_EQ(*rc, 2) << slurp(log);
    auto ms = [](auto d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); };
    std::cout << c.name << ": not ready after " << ms(not_ready) << " ms, exit " << *rc << " after "
              << ms(std::chrono::steady_clock::now() - t0) << " ms\n";
    EXPECT_GE(lines_with(slurp(log), c.named), 1u) << slurp(log);
    EXPECT_LE(checkpoint(), static_cast<int64_t>(produced));
    EXPECT_GE(checkpoint(), before);
    c.restore();
    // Nothing lost: the next start projects everything.
    auto next = test::run_cli(node("catch-up"));
    ASSERT_EQ(next.rc, 0) << next.err;
    EXPECT_EQ(checkpoint(), static_cast<int64_t>(produced));
    test::model m;
    for (uint64_t i = 0; i < produced; ++i)
      test::apply(m, test::make_dispatch(i));
    auto conn = redis::connection::open(redis_admin());
    ASSERT_TRUE(conn) << describe(conn.error());
    for (auto& [user, convs_of] : m)
      for (auto& [conv, score] : convs_of) {
        auto got = test::redis_cmd(**conn, {"ZSCORE", convs + user, conv});
        EXPECT_EQ(got, std::to_string(score)) << user << " " << conv;
      }
  }
}
