// Moving a projection between a standalone Redis and a Redis Cluster, by the
// procedure of docs/OPERATIONS.md ("Moving from standalone to a Redis
// Cluster", "Moving back to a standalone server").  The shell blocks marked
// `<!-- tests/rcluster_migration runs this block: NAME -->` there are read
// from the file and run verbatim (bash), after a prelude that points their
// variables at a private standalone redis-server (with a password) and the
// Redis Cluster service set; the node runs as the set's ACL user.
//
// Label `rcluster`.  Every test skips unless a Redis Cluster set is found
// (QSP_SERVICES_ENV, else <repo>/.services-rcluster/env); with
// QSP_REQUIRE_RCLUSTER set a missing set fails instead.  The namespace
// {session_projection} and convs:* are shared with tests/rcluster: each
// test clears them (and the copy keys) on every primary first and last.
#include <signal.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/dispatch.hpp"
#include "kafka/admin.hpp"
#include "kafka/producer.hpp"
#include "messages/types.hpp"
#include "redis/cluster.hpp"
#include "redis/cluster_map.hpp"
#include "redis/connection.hpp"
#include "tests/support/integration.hpp"

using namespace qsp;
using namespace std::chrono_literals;
using test::slurp;

namespace {

const std::string cluster_ns = "{session_projection}";
const std::string standalone_ns = "session_projection";
const std::string convs = "convs:";
constexpr int partitions = 4;
constexpr int users = 3000;

// -- the Redis Cluster set ---------------------------------------------------

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in{s};
  while (std::getline(in, cur, sep))
    if (!cur.empty())
      out.push_back(cur);
  return out;
}


#define REQUIRE_RCLUSTER_SET() REQUIRE_SERVICE_SET(test::redis_cluster_set, "QSP_REQUIRE_RCLUSTER")

const test::service_set& S() { return *test::redis_cluster_set(nullptr); }

redis::address parse_address(const std::string& hp) {
  auto c = hp.rfind(':');
  return {hp.substr(0, c), static_cast<uint16_t>(std::stoi(hp.substr(c + 1)))};
}

/// The set's admin (default user), every node a seed.
redis::settings admin_settings() {
  redis::settings r;
  for (auto& hp : split(S().at("REDIS_CLUSTER_NODES"), ','))
    r.cluster_nodes.push_back(parse_address(hp));
  r.username = S().at("REDIS_ADMIN_USER");
  r.password = S().secret("REDIS_ADMIN_PASSWORD_FILE");
  r.ns = cluster_ns;
  r.convs_prefix = convs;
  r.connect_timeout_ms = 1000;
  r.command_timeout_ms = 6000;
  return r;
}

/// A fresh slot map as the admin; nullptr (and a test failure) if none.
std::unique_ptr<redis::cluster_router> router() {
  auto r = redis::cluster_router::open(admin_settings());
  if (!r) {
    ADD_FAILURE() << describe(r.error());
    return nullptr;
  }
  return std::move(*r);
}

/// Every key matching `pattern` on every primary, DELeted; how many.
long long delete_keys(const std::string& pattern) {
  auto r = router();
  if (!r)
    return -1;
  return test::delete_cluster_keys(*r, pattern);
}

void clear_cluster() {
  for (auto* pattern : {"{session_projection}:*", "{qsp-copy-*}*", "convs:*"})
    EXPECT_GE(delete_keys(pattern), 0) << pattern;
}

/// `field:` of an INFO-style text ("" if absent).
std::string info_field(const std::string& text, const std::string& name) {
  return redis::info_fields(text)[name];
}

/// WAIT commands the primaries executed so far (INFO commandstats): the
/// first start's seeding sends them; nothing else does here
/// (redis.wait-replicas is 0).
long long wait_calls() {
  auto r = router();
  if (!r)
    return -1;
  long long n = 0;
  for (size_t i = 0; i < r->map().shards().size(); ++i) {
    auto c = r->primary(i);
    if (!c) {
      ADD_FAILURE() << describe(c.error());
      return -1;
    }
    auto stats = test::redis_cmd(**c, {"INFO", "commandstats"});
    auto v = info_field(stats, "cmdstat_wait"); // calls=N,usec=...
    if (auto eq = v.find("calls="); eq != std::string::npos)
      n += std::stoll(v.substr(eq + 6));
  }
  return n;
}

// -- the model and Redis ------------------------------------------------------

test::model model_of(uint64_t to) {
  test::model m;
  for (uint64_t i = 0; i < to; ++i)
    test::apply(m, test::make_dispatch(i, users));
  return m;
}

/// Every user of `m` read from the primary serving its slot; the
/// differences (empty: Redis equals the model).
std::vector<std::string> diff_with_cluster(const test::model& m) {
  std::vector<std::string> out;
  auto r = router();
  if (!r)
    return {"no slot map"};
  for (auto& [user, want] : m) {
    auto key = convs + user;
    auto i = r->map().shard_of(redis::key_slot(key));
    if (i < 0)
      return {key + ": slot unserved"};
    auto c = r->primary(static_cast<size_t>(i));
    if (!c)
      return {describe(c.error())};
    auto got = test::zset(**c, key);
    if (got != want && out.size() < 20)
      out.push_back(key + ": " + std::to_string(got.size()) + " members, expected "
                    + std::to_string(want.size()));
  }
  return out;
}

std::vector<std::string> diff_with_standalone(const test::model& m, redis::connection& c) {
  std::vector<std::string> out;
  for (auto& [user, want] : m) {
    auto got = test::zset(c, convs + user);
    if (got != want && out.size() < 20)
      out.push_back(convs + user + ": " + std::to_string(got.size()) + " members, expected "
                    + std::to_string(want.size()));
  }
  return out;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (auto& l : v)
    s += "\n  " + l;
  return s;
}

// -- the documented shell blocks ------------------------------------------------

/// The indented block after `<!-- tests/rcluster_migration runs this block:
/// NAME -->` in docs/OPERATIONS.md, without its indentation.
std::string doc_block(const std::string& name) {
  return test::doc_block("OPERATIONS.md", "tests/rcluster_migration", name);
}

// -- the fixture -----------------------------------------------------------------

struct migration : ::testing::Test {
  std::string topic;
  std::string dir;
  std::string sa_password;
  std::unique_ptr<test::private_redis> standalone;
  int cut_replica = -1; ///< a node this test cut off (rc-cut-replica), resumed in TearDown

  void SetUp() override {
    std::cout.setf(std::ios::unitbuf); // every line out at once, should a run be killed
    REQUIRE_RCLUSTER_SET();
    topic = test::unique_name("rcmigr");
    dir = "/tmp/" + topic;
    test::sh("mkdir -p " + dir);
    auto admin = kafka::admin::make(kafka_cfg());
    ASSERT_TRUE(admin) << describe(admin.error());
    auto made = (*admin)->create_topic(topic, partitions);
    ASSERT_TRUE(made) << describe(made.error());
    clear_cluster();
  }
  void TearDown() override {
    if (test::redis_cluster_set(nullptr) == nullptr)
      return;
    if (cut_replica > 0)
      resume(cut_replica);
    standalone.reset();
    if (auto admin = kafka::admin::make(kafka_cfg()))
      (*admin)->delete_topic(topic);
    clear_cluster();
    test::sh("rm -rf " + dir);
  }

  static kafka::client_settings kafka_cfg() {
    kafka::client_settings c;
    c.bootstrap_servers = S().at("KAFKA_BOOTSTRAP");
    c.client_id = "qsp-rcluster-migration-test";
    return c;
  }

  /// Dispatches [from, to) of make_dispatch(i, users), i to partition i % 4.
  void produce(uint64_t from, uint64_t to) {
    auto p = kafka::producer::make(kafka_cfg());
    ASSERT_TRUE(p) << describe(p.error());
    for (uint64_t i = from; i < to; ++i) {
      auto ok = p->send(topic, static_cast<int32_t>(i % partitions), core::encode_json(test::make_dispatch(i, users)));
      ASSERT_TRUE(ok) << describe(ok.error());
    }
    auto f = p->flush();
    ASSERT_TRUE(f) << describe(f.error());
  }

  /// A private standalone redis-server with a password.
  void start_standalone() {
    sa_password = "sa-" + topic;
    standalone = std::make_unique<test::private_redis>(
      "rcmigr-standalone", std::vector<std::string>{"--requirepass", sa_password});
    ASSERT_TRUE(standalone->wait_ready("-a " + sa_password + " --no-auth-warning"));
  }
  std::unique_ptr<redis::connection> standalone_conn() {
    redis::settings r;
    r.port = standalone->port;
    r.password = sa_password;
    auto c = redis::connection::open(r);
    if (!c) {
      ADD_FAILURE() << describe(c.error());
      return nullptr;
    }
    return std::move(*c);
  }

  /// The node's flags in standalone mode (namespace `ns`).
  std::vector<std::string> standalone_node(const std::string& cmd, const std::string& ns) {
    auto pw = dir + "/standalone.password";
    std::ofstream{pw} << sa_password << '\n';
    return {cmd,
            "--projection.dispatch-topic=" + topic,
            "--projection.partition-count=" + std::to_string(partitions),
            "--projection.namespace=" + ns,
            "--projection.convs-prefix=" + convs,
            "--kafka.bootstrap-servers=" + S().at("KAFKA_BOOTSTRAP"),
            "--redis.host=127.0.0.1",
            "--redis.port=" + std::to_string(standalone->port),
            "--redis.password-file=" + pw,
            "--http.listen=off"};
  }

  /// The node's flags in Redis Cluster mode: a config file as
  /// docs/OPERATIONS.md shows it (the namespace quoted), the ACL user.
  std::vector<std::string> cluster_node(const std::string& cmd,
                                        std::vector<std::string> extra = {}) {
    auto conf = dir + "/cluster.conf";
    std::ofstream out{conf};
    out << "[projection]\nnamespace = \"{session_projection}\"\nconvs-prefix = \"convs:\"\n\n"
        << "[redis]\ncluster-nodes = [";
    auto seeds = split(S().at("REDIS_CLUSTER_NODES"), ',');
    for (size_t i = 0; i < seeds.size(); ++i)
      out << (i ? ", " : "") << '"' << seeds[i] << '"';
    out << "]\nusername = \"" << S().at("REDIS_USER") << "\"\npassword-file = \""
        << S().at("REDIS_PASSWORD_FILE") << "\"\n";
    out.close();
    std::vector<std::string> a{cmd,
                               "--config-file=" + conf,
                               "--projection.dispatch-topic=" + topic,
                               "--projection.partition-count=" + std::to_string(partitions),
                               "--kafka.bootstrap-servers=" + S().at("KAFKA_BOOTSTRAP"),
                               "--http.listen=off"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }

  nlohmann::json inspect_json() {
    auto r = test::run_cli(cluster_node("inspect", {"--json"}));
    EXPECT_EQ(r.rc, 0) << r.err;
    auto j = nlohmann::json::parse(r.out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << r.out;
    return j;
  }

  /// Runs the documented block `name` with bash, after the prelude that
  /// sets the procedure's variables (OPERATIONS.md, step 2) for this test.
  test::cli_result block(const std::string& name) {
    auto body = doc_block(name);
    EXPECT_FALSE(body.empty()) << "docs/OPERATIONS.md has no block \"" << name << "\"";
    auto admin = S().secret("REDIS_ADMIN_PASSWORD_FILE");
    auto nodes = split(S().at("REDIS_CLUSTER_NODES"), ',');
    std::ostringstream script;
    script << "set -eo pipefail\ncd '" << dir << "'\n"
           << "SA_HOST=127.0.0.1 SA_PORT=" << standalone->port << "\n"
           << "SA_AUTH=(--user default --pass '" << sa_password << "' --no-auth-warning)\n"
           << "SA_FROM_AUTH=(--cluster-from-user default --cluster-from-pass '" << sa_password
           << "')\n"
           << "SA_MIGRATE_AUTH=\"AUTH2 default " << sa_password << "\"\n"
           << "RC_NODE=" << nodes.at(0) << "\n"
           << "RC_AUTH=(--user default --pass '" << admin << "' --no-auth-warning)\n"
           << doc_block("primaries") << "\n"
           << body;
    auto path = dir + "/block-" + name + ".sh";
    std::ofstream{path} << script.str();
    auto r = test::run_program("/bin/bash", {path});
    // (The import's line per key left out.)
    std::cout << "-- block " << name << " (rc " << r.rc << "):\n";
    for (auto& l : split(r.out + r.err, '\n'))
      if (l.find("Migrating ") == std::string::npos)
        std::cout << l << "\n";
    return r;
  }

  // -- scripts/services on the set -----------------------------------------------

  int services(const std::string& args, std::string* out = nullptr) {
    auto r = test::run_program("/bin/bash", {"-c", "QSP_SERVICES_DIR='" + S().dir + "' timeout 120 "
                                                QSP_SOURCE_DIR "/scripts/services " + args});
    std::cout << "[services " << args << "] rc " << r.rc << ": " << r.out << r.err;
    if (out != nullptr)
      *out = r.out;
    return r.rc;
  }
  /// Resumes node `id` and waits (bounded) until its replication link is up.
  void resume(int id) {
    services("rc-resume " + std::to_string(id));
    redis::address addr;
    for (auto& kv : split(S().at("REDIS_NODES"), ','))
      if (kv.rfind(std::to_string(id) + "=", 0) == 0)
        addr = parse_address(kv.substr(kv.find('=') + 1));
    EXPECT_TRUE(test::eventually(
      [&] {
        auto c = redis::connection::open_at(admin_settings(), addr);
        return c
               && info_field(test::redis_cmd(**c, {"INFO", "replication"}), "master_link_status")
                    == "up";
      },
      60s))
      << "node " << id << "'s replication link is not up again";
    cut_replica = -1;
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

/// The rename blocks print "KEY -> NEW: R" per key; true iff there is at
/// least one and every R is 1.
bool all_renamed(const std::string& out, size_t* n) {
  std::istringstream in{out};
  std::string line;
  *n = 0;
  while (std::getline(in, line)) {
    if (line.find(" -> ") == std::string::npos)
      continue;
    ++*n;
    if (line.size() < 3 || line.substr(line.size() - 3) != ": 1")
      return false;
  }
  return *n > 0;
}

/// A standalone projection of dispatches [0, n), by the node.
void project_standalone(migration& t, uint64_t n) {
  t.produce(0, n);
  auto c = test::run_cli(t.standalone_node("catch-up", standalone_ns));
  ASSERT_EQ(c.rc, 0) << c.err;
  auto conn = t.standalone_conn();
  ASSERT_TRUE(conn);
  EXPECT_EQ(test::redis_cmd(*conn, {"HGET", standalone_ns + ":checkpoint:" + t.topic + ":0",
                                    "next_offset"}),
            std::to_string(n / partitions));
}

} // namespace

// docs/OPERATIONS.md, "Moving from standalone to a Redis Cluster": a
// projection in a standalone Redis, its namespace renamed to the hash tag
// and everything imported with `redis-cli --cluster import`, then more
// records and the first start in Redis Cluster mode: it seeds the copies
// (WAIT on the primaries), refuses nothing, skips nothing; the second start
// does not seed again; Redis equals the model and `audit` is consistent.
TEST_F(migration, StandaloneToClusterByTheDocumentedProcedure) {
  constexpr uint64_t before = 20000, after = 30000;
  start_standalone();
  ASSERT_NO_FATAL_FAILURE(project_standalone(*this, before));
  auto conn = standalone_conn();
  ASSERT_TRUE(conn);
  auto standalone_keys = test::redis_cmd(*conn, {"DBSIZE"});

  // Steps 3 to 5 (the node is stopped: catch-up exited).
  auto rename = block("rename");
  ASSERT_EQ(rename.rc, 0) << rename.err;
  size_t renamed = 0;
  EXPECT_TRUE(all_renamed(rename.out, &renamed)) << rename.out;
  // meta + a checkpoint and an epoch sidecar per partition.
  EXPECT_EQ(renamed, 1u + 2u * partitions) << rename.out;
  auto import = block("import");
  ASSERT_EQ(import.rc, 0) << import.out << import.err;
  EXPECT_GE(lines_with(import.out, "Importing " + standalone_keys + " keys"), 1u) << import.out;
  auto count = block("count");
  ASSERT_EQ(count.rc, 0) << count.err;
  for (auto* pattern : {"{session_projection}:*", "convs:*"}) {
    std::istringstream in{count.out};
    std::string line;
    bool seen = false;
    while (std::getline(in, line))
      if (line.rfind(std::string{pattern} + ": standalone ", 0) == 0) {
        seen = true;
        auto sa = line.substr(line.find("standalone ") + 11);
        sa = sa.substr(0, sa.find(','));
        auto rc = line.substr(line.find("cluster ") + 8);
        EXPECT_EQ(sa, rc) << line;
        EXPECT_NE(sa, "0") << line;
      }
    EXPECT_TRUE(seen) << pattern << "\n" << count.out;
  }
  EXPECT_GE(lines_with(count.out, "slave0:"), 1u) << count.out;

  // Step 6: before the first start, the copies are not yet seeded; nothing
  // is a problem.
  auto pre = inspect_json();
  EXPECT_EQ(pre["redis_cluster"]["copies_established"], false) << pre.dump(2);
  EXPECT_TRUE(pre["problems"].empty()) << pre.dump(2);
  auto pre_text = test::run_cli(cluster_node("inspect"));
  EXPECT_GE(lines_with(pre_text.out, "redis cluster: copies not yet seeded"), 1u) << pre_text.out;

  ASSERT_NO_FATAL_FAILURE(produce(before, after));
  auto waits0 = wait_calls();
  auto first = test::run_cli(cluster_node("catch-up"));
  ASSERT_EQ(first.rc, 0) << first.err;
  EXPECT_EQ(lines_with(first.err, "refused"), 0u) << first.err;
  // Every partition started at its imported checkpoint, not at 0.
  for (int p = 0; p < partitions; ++p)
    EXPECT_GE(lines_with(first.err, "partition " + std::to_string(p) + ": start "
                                      + std::to_string(before / partitions) + " H0 "
                                      + std::to_string(after / partitions)),
              1u)
      << first.err;
  auto waits1 = wait_calls();
  EXPECT_GT(waits1, waits0) << "the first start sent no WAIT: the copies were not seeded";
  auto seeded = inspect_json();
  auto& rc = seeded["redis_cluster"];
  EXPECT_EQ(rc["copies_established"], true) << seeded.dump(2);
  EXPECT_TRUE(seeded["problems"].empty()) << seeded.dump(2);
  EXPECT_TRUE(rc["replay_from"].empty()) << seeded.dump(2);
  EXPECT_EQ(rc["shards"].size(), 3u) << seeded.dump(2);
  for (auto& sh : rc["shards"]) {
    EXPECT_EQ(sh["copy"], "valid") << sh.dump(2);
    for (int p = 0; p < partitions; ++p)
      EXPECT_EQ(sh["positions"][std::to_string(p)]["next_offset"], after / partitions)
        << sh.dump(2);
  }
  auto cmp = diff_with_cluster(model_of(after));
  EXPECT_TRUE(cmp.empty()) << joined(cmp);

  // The second start: no seeding (no WAIT), no refusal, nothing lost.
  constexpr uint64_t more = 34000;
  ASSERT_NO_FATAL_FAILURE(produce(after, more));
  auto second = test::run_cli(cluster_node("catch-up"));
  ASSERT_EQ(second.rc, 0) << second.err;
  EXPECT_EQ(lines_with(second.err, "refused"), 0u) << second.err;
  EXPECT_EQ(wait_calls(), waits1) << "the second start seeded the copies again";
  cmp = diff_with_cluster(model_of(more));
  EXPECT_TRUE(cmp.empty()) << joined(cmp);
  auto audit = test::run_cli(cluster_node("audit"));
  EXPECT_EQ(audit.rc, 0) << audit.out << audit.err;
  EXPECT_GE(lines_with(audit.out + audit.err, "verdict: consistent"), 1u) << audit.out << audit.err;
  std::cout << "imported " << standalone_keys << " keys; first start: " << (waits1 - waits0)
            << " WAIT(s) on the primaries; " << model_of(more).size()
            << " users equal to the model\n";
}

// The first start in Redis Cluster mode WAITs for the replicas before it
// marks meta: with a replica cut off it retries (never refuses) until the
// cluster no longer counts that replica, and skips nothing.
TEST_F(migration, FirstStartRetriesWhileAReplicaIsCutOff) {
  constexpr uint64_t before = 8000, after = 12000;
  start_standalone();
  ASSERT_NO_FATAL_FAILURE(project_standalone(*this, before));
  ASSERT_EQ(block("rename").rc, 0);
  ASSERT_EQ(block("import").rc, 0);
  ASSERT_NO_FATAL_FAILURE(produce(before, after));

  // The replica of the primary serving the namespace's slot.
  auto r = router();
  ASSERT_TRUE(r);
  auto i = r->map().shard_of(redis::key_slot(cluster_ns + ":meta"));
  ASSERT_GE(i, 0);
  auto& shard = r->map().shards()[static_cast<size_t>(i)];
  ASSERT_FALSE(shard.replicas.empty());
  auto replica = shard.replicas[0].address();
  int id = -1;
  for (auto& kv : split(S().at("REDIS_NODES"), ','))
    if (kv.substr(kv.find('=') + 1) == replica)
      id = std::stoi(kv.substr(0, kv.find('=')));
  ASSERT_GT(id, 0) << replica;
  ASSERT_EQ(services("rc-cut-replica " + std::to_string(id)), 0);
  cut_replica = id;

  // The start retries the seeding while the replica is cut off (until the
  // cluster marks it failed and stops listing it, or it is back).
  auto log = dir + "/first-start.log";
  std::cout << "replica " << id << " cut off; the first start (log " << log << ")\n";
  test::node_process first{cluster_node("catch-up", {"--projection.catch-up-max-attempts=10"}),
                           log};
  EXPECT_TRUE(test::eventually(
    [&] { return lines_with(slurp(log), "replicas acknowledged within") > 0 || first.wait_for(0ms); },
    30s));
  std::cout << "resuming replica " << id << "\n";
  resume(id);
  auto rc = first.wait_for(120s);
  ASSERT_TRUE(rc) << "catch-up still running 120 s after the replica came back:\n" << slurp(log);
  auto text = slurp(log);
  ASSERT_EQ(*rc, 0) << text;
  EXPECT_GE(lines_with(text, "replicas acknowledged within"), 1u)
    << "no seeding attempt waited for the cut replica:\n" << text;
  EXPECT_EQ(lines_with(text, "refused"), 0u) << text;
  for (auto& l : split(text, '\n'))
    if (l.find("replicas acknowledged") != std::string::npos && l.find("dirty: ") != std::string::npos)
      std::cout << "  " << l.substr(0, 300) << "\n";

  auto j = inspect_json();
  EXPECT_EQ(j["redis_cluster"]["copies_established"], true) << j.dump(2);
  EXPECT_TRUE(j["problems"].empty()) << j.dump(2);
  auto cmp = diff_with_cluster(model_of(after));
  EXPECT_TRUE(cmp.empty()) << joined(cmp);
}

// docs/OPERATIONS.md, "Moving back to a standalone server": a standalone
// node refuses a namespace marked in Redis Cluster mode (exit 3, naming
// the marker); the documented copy, marker removal and rename then give a
// standalone projection that catches up, equals the model and audits
// consistent.
TEST_F(migration, ClusterToStandaloneByTheDocumentedProcedure) {
  constexpr uint64_t in_cluster = 16000, after = 20000;
  ASSERT_NO_FATAL_FAILURE(produce(0, in_cluster));
  auto c = test::run_cli(cluster_node("catch-up"));
  ASSERT_EQ(c.rc, 0) << c.err;
  // Step 1: nothing to replay, no problem.
  auto j = inspect_json();
  ASSERT_EQ(j["redis_cluster"]["copies_established"], true) << j.dump(2);
  ASSERT_TRUE(j["problems"].empty()) << j.dump(2);
  ASSERT_TRUE(j["redis_cluster"]["replay_from"].empty()) << j.dump(2);

  start_standalone();
  auto copy = block("copy-back");
  ASSERT_EQ(copy.rc, 0) << copy.err;
  // "  N OK" per primary and pattern, nothing else; every key arrived.
  long long copied = 0;
  for (auto& l : split(copy.out, '\n')) {
    std::istringstream in{l};
    long long n = 0;
    std::string what;
    in >> n >> what;
    EXPECT_EQ(what, "OK") << l;
    copied += n;
  }
  auto conn = standalone_conn();
  ASSERT_TRUE(conn);
  EXPECT_GT(copied, 1 + 2 * partitions) << copy.out;
  EXPECT_EQ(std::to_string(copied), test::redis_cmd(*conn, {"DBSIZE"})) << copy.out;
  EXPECT_EQ(test::redis_cmd(*conn, {"HGET", cluster_ns + ":meta", "redis_cluster_copies"}), "1");

  // Forgetting the marker: the standalone node refuses, naming it.
  auto refused = test::run_cli(standalone_node("catch-up", cluster_ns));
  EXPECT_EQ(refused.rc, 3) << refused.err;
  EXPECT_GE(lines_with(refused.err, "refused: meta: field redis_cluster_copies"), 1u)
    << refused.err;
  EXPECT_GE(lines_with(refused.err, "Redis Cluster mode"), 1u) << refused.err;
  EXPECT_EQ(test::redis_cmd(*conn, {"HGET", cluster_ns + ":checkpoint:" + topic + ":0",
                                    "next_offset"}),
            std::to_string(in_cluster / partitions))
    << "the refused start wrote a checkpoint";

  auto back = block("back");
  ASSERT_EQ(back.rc, 0) << back.err;
  size_t renamed = 0;
  EXPECT_TRUE(all_renamed(back.out, &renamed)) << back.out;
  EXPECT_EQ(renamed, 1u + 2u * partitions) << back.out;

  ASSERT_NO_FATAL_FAILURE(produce(in_cluster, after));
  auto s = test::run_cli(standalone_node("catch-up", standalone_ns));
  ASSERT_EQ(s.rc, 0) << s.err;
  EXPECT_EQ(lines_with(s.err, "refused"), 0u) << s.err;
  for (int p = 0; p < partitions; ++p)
    EXPECT_GE(lines_with(s.err, "partition " + std::to_string(p) + ": start "
                                  + std::to_string(in_cluster / partitions)),
              1u)
      << s.err;
  auto cmp = diff_with_standalone(model_of(after), *conn);
  EXPECT_TRUE(cmp.empty()) << joined(cmp);
  auto audit = test::run_cli(standalone_node("audit", standalone_ns));
  EXPECT_EQ(audit.rc, 0) << audit.out << audit.err;
  EXPECT_GE(lines_with(audit.out + audit.err, "verdict: consistent"), 1u) << audit.out << audit.err;
}
