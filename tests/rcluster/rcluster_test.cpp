// The node in Redis Cluster mode against the Redis Cluster service set
// (scripts/services start --redis-cluster: primaries 1 2 3, replicas 4->1
// 5->2 6->3, cluster-node-timeout 3 s, one broker), driven through its fault
// commands (rc-*).  Issue 24, item 7.
//
// Every test reads Redis as the set's admin through qsp::redis::cluster_router
// (a fresh slot map each time) and compares every user's session set, on the
// shard serving it, with the model of what was produced.
//
// The namespace is the Redis ACL user's, {session_projection} (slot 3923, on
// node 1's shard at the set's start), shared by every test: each test clears
// it, the copy keys and convs:* on every primary first, uses its own topic,
// and leaves the cluster healthy (every node up and answering, the start
// pairing, the namespace's slot on node 1's shard, cluster_state:ok
// everywhere).  Data-loss scenarios fail over node 2 or 3, never the
// namespace's shard, so the checkpoint itself is not rolled back.
//
// Label `rcluster`.  Every test skips unless a Redis Cluster set is found
// (QSP_SERVICES_ENV, else <repo>/.services-rcluster/env); with
// QSP_REQUIRE_RCLUSTER set a missing set fails instead.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

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
using clock_type = std::chrono::steady_clock;

namespace {

const std::string ns = "{session_projection}";
const std::string convs = "convs:";
constexpr uint16_t ns_slot = 3923;

long long ms_since(clock_type::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - t0).count();
}

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

/// "1=a,2=b" -> {1: a, 2: b}
std::map<int, std::string> id_map(const std::string& s) {
  std::map<int, std::string> out;
  for (auto& kv : split(s, ','))
    if (auto eq = kv.find('='); eq != std::string::npos)
      out[std::stoi(kv.substr(0, eq))] = kv.substr(eq + 1);
  return out;
}


#define REQUIRE_RCLUSTER_SET() REQUIRE_SERVICE_SET(test::redis_cluster_set, "QSP_REQUIRE_RCLUSTER")

const test::service_set& S() { return *test::redis_cluster_set(nullptr); }

/// Node id -> host:port (fixed for the set's life).
const std::map<int, std::string>& nodes() {
  static const auto m = id_map(S().at("REDIS_NODES"));
  return m;
}
redis::address addr(int id) {
  auto hp = nodes().at(id);
  auto c = hp.rfind(':');
  return {hp.substr(0, c), static_cast<uint16_t>(std::stoi(hp.substr(c + 1)))};
}
int id_of_address(const std::string& host_port) {
  for (auto& [id, hp] : nodes())
    if (hp == host_port)
      return id;
  return -1;
}
/// Node id -> pid, re-read from the env file (the fault commands rewrite
/// REDIS_PIDS); -1 for a node that does not run.
int pid_of(int id) {
  auto pids = id_map(test::read_env_file(S().file)["REDIS_PIDS"]);
  auto i = pids.find(id);
  if (i == pids.end() || i->second == "-")
    return -1;
  return std::stoi(i->second);
}
bool sigstopped(int pid) {
  std::ifstream in{"/proc/" + std::to_string(pid) + "/status"};
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("State:", 0) == 0)
      return line.find('T') != std::string::npos;
  return false;
}

/// The admin (default user) with every node as a seed.
redis::settings admin_settings() {
  redis::settings r;
  for (auto& [id, hp] : nodes())
    r.cluster_nodes.push_back(addr(id));
  r.username = S().at("REDIS_ADMIN_USER");
  r.password = S().secret("REDIS_ADMIN_PASSWORD_FILE");
  r.ns = ns;
  r.convs_prefix = convs;
  r.connect_timeout_ms = 1000;
  r.command_timeout_ms = 6000;
  return r;
}

/// One command on node `id` as the admin; "ERR:<why>" on failure.
std::string node_cmd(int id, const std::vector<std::string>& argv) {
  auto c = redis::connection::open_at(admin_settings(), addr(id));
  if (!c)
    return "ERR:" + describe(c.error());
  return test::redis_cmd(**c, argv);
}

std::string field(const std::string& text, const std::string& name) {
  return redis::info_fields(text)[name];
}

/// "master", "slave", or "" (does not answer).
std::string role(int id) { return field(node_cmd(id, {"INFO", "replication"}), "role"); }
std::string cluster_state(int id) {
  return field(node_cmd(id, {"CLUSTER", "INFO"}), "cluster_state");
}

/// A fresh router (slot map) as the admin; nullptr with the reason in `why`.
std::unique_ptr<redis::cluster_router> router(std::string* why = nullptr) {
  auto r = redis::cluster_router::open(admin_settings());
  if (!r) {
    if (why != nullptr)
      *why = describe(r.error());
    return nullptr;
  }
  return std::move(*r);
}

/// The node id of the primary serving `slot` (slot map of the seeds); -1 if
/// none or unknown.
int owner_of(uint16_t slot) {
  auto r = router();
  if (!r)
    return -1;
  auto i = r->map().shard_of(slot);
  return i < 0 ? -1 : id_of_address(r->map().shards()[static_cast<size_t>(i)].primary.address());
}

// -- scripts/services on this set ---------------------------------------------

struct svc_result {
  int rc = -1;
  std::string out;  ///< stdout and stderr
  /// The last line (what the command prints: a pid, a node id, slots...).
  std::string last() const {
    auto lines = split(out, '\n');
    return lines.empty() ? std::string{} : lines.back();
  }
};

svc_result svc(const std::string& args) {
  auto t0 = clock_type::now();
  svc_result r;
  auto cmd = "QSP_SERVICES_DIR='" + S().dir + "' timeout 300 " QSP_SOURCE_DIR "/scripts/services "
             + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr)
    return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0)
    r.out.append(buf, n);
  int st = ::pclose(p);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::cout << "[services " << args << "] rc " << r.rc << " in " << ms_since(t0) << " ms: "
            << r.last() << "\n";
  return r;
}

#define ASSERT_SVC(args)                                              \
  do {                                                                \
    auto r_ = svc(args);                                              \
    ASSERT_EQ(r_.rc, 0) << "scripts/services " << (args) << ":\n" << r_.out; \
  } while (false)

/// Waits (bounded) until every node answers with cluster_state:ok and each
/// replica's link to its primary is up; "" when so, else what is not.
std::string wait_cluster_ok(std::chrono::milliseconds limit) {
  std::string why;
  bool ok = test::eventually(
    [&] {
      for (auto& [id, hp] : nodes()) {
        auto st = cluster_state(id);
        if (st != "ok") {
          why = "node " + std::to_string(id) + " cluster_state '" + st + "'";
          return false;
        }
        auto info = node_cmd(id, {"INFO", "replication"});
        if (field(info, "role") == "slave" && field(info, "master_link_status") != "up") {
          why = "replica " + std::to_string(id) + " link " + field(info, "master_link_status");
          return false;
        }
      }
      return true;
    },
    limit);
  return ok ? std::string{} : why;
}

std::vector<redis::slot_range> slots_of(int id);

/// The primary of pair `k` (1..3: node k and node k+3, node k the primary
/// at the set's start; a failover swaps them); -1 if neither is.
int primary_in(int k) {
  if (role(k) == "master")
    return k;
  return role(k + 3) == "master" ? k + 3 : -1;
}
/// The other node of pair `k`: its replica when the set is healthy.
int replica_in(int k) {
  int p = primary_in(k);
  return p < 0 ? -1 : (p == k ? k + 3 : k);
}

/// Brings the set back to a healthy shape: every node running and
/// answering, in each pair one primary and the other its replica (either
/// way round: a failover back would cost a vote the masters refuse for 2 x
/// cluster-node-timeout after the last one of that shard), the namespace's
/// slot on pair 1's shard, cluster_state:ok everywhere.  "" when done, else
/// what failed.
std::string ensure_healthy() {
  for (int id = 1; id <= 6; ++id) {
    int pid = pid_of(id);
    if (pid > 0 && sigstopped(pid)) {
      if (auto r = svc("rc-resume " + std::to_string(id)); r.rc != 0)
        return "rc-resume " + std::to_string(id) + ": " + r.out;
    }
  }
  for (int id = 1; id <= 6; ++id) {
    if (pid_of(id) > 0)
      continue;
    // A dead primary whose replica was not promoted yet would come back as
    // an empty primary of its slots: give the failover its time first.
    int partner = id <= 3 ? id + 3 : id - 3;
    test::eventually([&] { return role(partner) == "master"; }, 15s);
    if (auto r = svc("rc-start " + std::to_string(id)); r.rc != 0)
      return "rc-start " + std::to_string(id) + ": " + r.out;
  }
  if (auto why = wait_cluster_ok(30s); !why.empty())
    return why;
  // A primary that lost all its slots while it was down (a takeover of
  // some, a migration of the others) comes back as an empty primary
  // (cluster-allow-replica-migration no): it replicates its partner again.
  const auto ids = id_map(S().at("REDIS_NODE_IDS"));
  for (int k = 1; k <= 3; ++k)
    for (auto [a, b] : {std::pair{k, k + 3}, std::pair{k + 3, k}})
      if (role(a) == "master" && role(b) == "master" && slots_of(a).empty()
          && !slots_of(b).empty()) {
        auto out = node_cmd(a, {"CLUSTER", "REPLICATE", ids.at(b)});
        std::cout << "[node " << a << ", an empty primary] CLUSTER REPLICATE node " << b << ": "
                  << out << "\n";
        if (out != "OK")
          return "CLUSTER REPLICATE on node " + std::to_string(a) + ": " + out;
        if (auto why = wait_cluster_ok(30s); !why.empty())
          return why;
      }
  for (int k = 1; k <= 3; ++k) {
    int p = primary_in(k), r = replica_in(k);
    if (p < 0)
      return "pair " + std::to_string(k) + ": no primary";
    auto info = node_cmd(r, {"INFO", "replication"});
    if (field(info, "role") != "slave"
        || field(info, "master_port") != std::to_string(addr(p).port))
      return "node " + std::to_string(r) + " is not node " + std::to_string(p) + "'s replica";
    if (slots_of(p).empty())
      return "node " + std::to_string(p) + " serves no slots";
  }
  if (int p1 = primary_in(1); owner_of(ns_slot) != p1)
    if (auto r = svc("rc-move-slot " + std::to_string(ns_slot) + " " + std::to_string(p1)); r.rc != 0)
      return "rc-move-slot " + std::to_string(ns_slot) + ": " + r.out;
  return wait_cluster_ok(30s);
}

/// Every key matching `pattern` on every primary, DELeted; how many.
long long delete_keys(const std::string& pattern) {
  std::string why;
  auto r = router(&why);
  if (!r) {
    ADD_FAILURE() << why;
    return -1;
  }
  return test::delete_cluster_keys(*r, pattern);
}

// -- the model and Redis ----------------------------------------------------

test::model model_of(uint64_t from, uint64_t to, int users, test::model m = {}) {
  for (uint64_t i = from; i < to; ++i)
    test::apply(m, test::make_dispatch(i, users));
  return m;
}

struct comparison {
  size_t users = 0, entries = 0;
  size_t behind = 0;        ///< entries missing or with an older score (lost)
  size_t users_behind = 0;
  size_t ahead = 0;         ///< members or scores the model does not have
  std::vector<std::string> lines;  ///< the first differences
  std::string error;        ///< a read failed
  bool equal() const { return behind == 0 && ahead == 0 && error.empty(); }
  std::string text() const {
    std::ostringstream o;
    o << users << " users / " << entries << " entries compared: " << behind << " behind ("
      << users_behind << " users), " << ahead << " ahead" << (error.empty() ? "" : ", " + error);
    for (auto& l : lines)
      o << "\n  " << l;
    return o.str();
  }
};

/// Every user of `m` (only those whose key's slot passes `only`, if given)
/// read from the primary serving it, compared with the model.
comparison compare(const test::model& m, const std::function<bool(uint16_t)>& only = {}) {
  comparison out;
  std::string why;
  auto r = router(&why);
  if (!r) {
    out.error = "no slot map: " + why;
    return out;
  }
  auto note = [&](std::string l) {
    if (out.lines.size() < 15)
      out.lines.push_back(std::move(l));
  };
  for (auto& [user, want] : m) {
    auto key = convs + user;
    auto slot = redis::key_slot(key);
    if (only && !only(slot))
      continue;
    ++out.users;
    out.entries += want.size();
    auto i = r->map().shard_of(slot);
    if (i < 0) {
      out.error = "slot " + std::to_string(slot) + " unserved";
      return out;
    }
    auto c = r->primary(static_cast<size_t>(i));
    if (!c) {
      out.error = describe(c.error());
      return out;
    }
    auto got_rep = (*c)->command({"ZRANGE", key, "0", "-1", "WITHSCORES"});
    if (!got_rep) {
      out.error = key + ": " + describe(got_rep.error());
      return out;
    }
    std::map<std::string, int64_t> got;
    auto* rep = got_rep->get();
    for (size_t k = 0; k + 1 < rep->elements; k += 2)
      got[std::string{rep->element[k]->str, rep->element[k]->len}]
        = std::stoll(std::string{rep->element[k + 1]->str, rep->element[k + 1]->len});
    size_t behind_here = 0;
    for (auto& [conv, score] : want) {
      auto g = got.find(conv);
      if (g == got.end()) {
        ++behind_here;
        note(key + " " + conv + ": missing, expected " + std::to_string(score));
      } else if (g->second < score) {
        ++behind_here;
        note(key + " " + conv + ": " + std::to_string(g->second) + ", expected "
             + std::to_string(score));
      } else if (g->second > score) {
        ++out.ahead;
        note(key + " " + conv + ": " + std::to_string(g->second) + ", ahead of "
             + std::to_string(score));
      }
    }
    for (auto& [conv, score] : got)
      if (want.count(conv) == 0) {
        ++out.ahead;
        note(key + " " + conv + ": not in the model");
      }
    out.behind += behind_here;
    out.users_behind += behind_here > 0 ? 1 : 0;
  }
  return out;
}

/// The slots node `id` serves now (seeds' map); empty if it serves none.
std::vector<redis::slot_range> slots_of(int id) {
  auto r = router();
  if (!r)
    return {};
  for (auto& sh : r->map().shards())
    if (sh.primary.address() == nodes().at(id))
      return sh.slots;
  return {};
}

// -- Kafka --------------------------------------------------------------------

kafka::client_settings kafka_cfg() {
  kafka::client_settings c;
  c.bootstrap_servers = S().at("KAFKA_BOOTSTRAP");
  c.client_id = "qsp-rcluster-test";
  return c;
}

/// Produces dispatches [from, to) of make_dispatch(i, users) to partition 0.
void produce(const std::string& topic, uint64_t from, uint64_t to, int users) {
  auto p = kafka::producer::make(kafka_cfg());
  ASSERT_TRUE(p) << describe(p.error());
  for (uint64_t i = from; i < to; ++i) {
    auto ok = p->send(topic, 0, core::encode_json(test::make_dispatch(i, users)));
    ASSERT_TRUE(ok) << describe(ok.error());
  }
  auto f = p->flush();
  ASSERT_TRUE(f) << describe(f.error());
}

/// Produces dispatches [from, to) at `rate` per second on a thread of its
/// own (a load during a fault); stops early when destroyed.
class background_producer {
public:
  background_producer(std::string topic, uint64_t from, uint64_t to, int users, int rate)
    : thread_([=] { run(topic, from, to, users, rate); }) {}
  ~background_producer() {
    stop_ = true;
    if (thread_.joinable())
      thread_.join();
  }
  /// Waits (bounded) until every dispatch is acknowledged; false otherwise.
  bool wait(std::chrono::milliseconds limit) {
    if (!test::eventually([&] { return done_.load(); }, limit))
      return false;
    thread_.join();
    return error().empty();
  }
  uint64_t sent() const { return sent_.load(); }
  std::string error() const {
    std::lock_guard<std::mutex> lock{mtx_};
    return error_;
  }

private:
  void fail(const std::string& e) {
    std::lock_guard<std::mutex> lock{mtx_};
    error_ = e;
  }
  void run(const std::string& topic, uint64_t from, uint64_t to, int users, int rate) {
    auto p = kafka::producer::make(kafka_cfg());
    if (!p) {
      fail(describe(p.error()));
      done_ = true;
      return;
    }
    auto t0 = clock_type::now();
    for (uint64_t i = from; i < to && !stop_; ++i) {
      if (auto ok = p->send(topic, 0, core::encode_json(test::make_dispatch(i, users))); !ok) {
        fail(describe(ok.error()));
        break;
      }
      ++sent_;
      // On schedule: dispatch n - from is due at t0 + (n - from) / rate.
      auto due = t0 + std::chrono::microseconds((i + 1 - from) * 1000000 / rate);
      if (due > clock_type::now())
        std::this_thread::sleep_until(due);
    }
    if (auto f = p->flush(); !f)
      fail(describe(f.error()));
    done_ = true;
  }

  std::atomic<bool> stop_{false}, done_{false};
  std::atomic<uint64_t> sent_{0};
  mutable std::mutex mtx_;
  std::string error_;
  std::thread thread_;
};

// -- the fixture -------------------------------------------------------------

struct node_result {
  int rc = -1;  ///< -1: still running at the limit (killed)
  std::string log;
};

struct rcluster : ::testing::Test {
  std::string topic;
  std::string dir;
  clock_type::time_point t0;
  /// scripts/services commands TearDown runs, last first (a slot move's
  /// reverse), whether the test passed or not.
  std::vector<std::string> undo;

  void SetUp() override {
    REQUIRE_RCLUSTER_SET();
    t0 = clock_type::now();
    auto why = ensure_healthy();
    ASSERT_EQ(why, "") << "the Redis Cluster set is not healthy at the start";
    // The namespace is shared: start from nothing.
    for (auto* pattern : {"{session_projection}:*", "{qsp-copy-*}*", "convs:*"})
      ASSERT_GE(delete_keys(pattern), 0);
    topic = test::unique_name("rc");
    dir = "/tmp/" + topic;
    test::sh("mkdir -p " + dir);
    auto admin = kafka::admin::make(kafka_cfg());
    ASSERT_TRUE(admin) << describe(admin.error());
    auto made = (*admin)->create_topic(topic, 1);
    ASSERT_TRUE(made) << describe(made.error());
    ASSERT_TRUE(test::eventually(
      [&] {
        auto id = (*admin)->identity(topic);
        return id && id->partition_count == 1 && !id->topic_id.empty();
      },
      20s))
      << "topic " << topic << " did not appear";
    std::cout << "setup " << ms_since(t0) << " ms\n";
  }
  void TearDown() override {
    if (test::redis_cluster_set(nullptr) == nullptr)
      return;
    // Whatever the test did: the next one finds a healthy set (and the
    // slot layout the test changed undone, last change first).
    for (auto i = undo.rbegin(); i != undo.rend(); ++i)
      if (auto r = svc(*i); r.rc != 0)
        ADD_FAILURE() << "undo: scripts/services " << *i << ":\n" << r.out;
    auto why = ensure_healthy();
    EXPECT_EQ(why, "") << "the test left the Redis Cluster set unhealthy";
    if (auto admin = kafka::admin::make(kafka_cfg()); admin && !topic.empty())
      (*admin)->delete_topic(topic);
    if (!HasFailure() && !dir.empty())
      test::sh("rm -rf " + dir);
    else if (!dir.empty())
      std::cout << "logs kept in " << dir << "\n";
    std::cout << "test took " << ms_since(t0) << " ms\n";
  }

  static std::string seeds() {
    std::string s = "[";
    for (auto& hp : split(S().at("REDIS_CLUSTER_NODES"), ','))
      s += (s.size() > 1 ? ",\"" : "\"") + hp + "\"";
    return s + "]";
  }

  /// The node's flags in Redis Cluster mode, as the ACL user of the set.
  std::vector<std::string> node(const std::string& cmd, std::vector<std::string> extra = {}) const {
    std::vector<std::string> a{cmd,
                               "--projection.dispatch-topic=" + topic,
                               "--projection.partition-count=1",
                               "--projection.namespace=" + ns,
                               "--projection.convs-prefix=" + convs,
                               "--kafka.bootstrap-servers=" + S().at("KAFKA_BOOTSTRAP"),
                               "--redis.cluster-nodes=" + seeds(),
                               "--redis.username=" + S().at("REDIS_USER"),
                               "--redis.password-file=" + S().at("REDIS_PASSWORD_FILE"),
                               "--http.listen=\"\""};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }

  /// Runs the node to its exit, at most `limit` (then SIGKILL, rc -1).
  node_result run_node(const std::vector<std::string>& args, const std::string& name,
                       std::chrono::milliseconds limit = 90s) const {
    auto log = dir + "/" + name + ".log";
    auto t = clock_type::now();
    node_result r;
    {
      test::node_process p{args, log};
      auto rc = p.wait_for(limit);
      r.rc = rc ? *rc : -1;
    }
    r.log = slurp(log);
    std::cout << "[node " << args[0] << " " << name << "] exit " << r.rc << " in " << ms_since(t)
              << " ms\n";
    return r;
  }
  node_result catch_up(const std::string& name, std::vector<std::string> extra = {}) const {
    return run_node(node("catch-up", std::move(extra)), name);
  }

  std::string checkpoint_key() const { return ns + ":checkpoint:" + topic + ":0"; }
  /// The stored checkpoint of partition 0 (-1: none or unreadable).
  int64_t checkpoint() const {
    auto owner = owner_of(redis::key_slot(checkpoint_key()));
    if (owner < 0)
      return -1;
    auto v = node_cmd(owner, {"HGET", checkpoint_key(), "next_offset"});
    return v.empty() || v.rfind("ERR:", 0) == 0 ? -1 : std::stoll(v);
  }
  bool checkpoint_reaches(int64_t n, std::chrono::milliseconds limit) const {
    return test::eventually([&] { return checkpoint() == n; }, limit);
  }
  /// Same, but gives up as soon as `run` exits.
  bool checkpoint_reaches(int64_t n, std::chrono::milliseconds limit,
                          test::node_process& run) const {
    return test::eventually([&] { return run.wait_for(0ms) || checkpoint() == n; }, limit)
           && !run.exit_code();
  }

  /// The copy key of the shard node `id` is the primary of (its lowest
  /// slot's tag, and its node id); "" if it serves no slots.
  std::string copy_key_of(int id) const {
    auto r = router();
    if (!r)
      return {};
    for (auto& sh : r->map().shards())
      if (sh.primary.address() == nodes().at(id))
        return redis::node_copy_key(redis::tag_for_shard(sh), ns, topic, sh.primary.id);
    return {};
  }
  /// Partition 0's position in the copy on node `id` under `key` (-1: none).
  int64_t copy_position(int id, const std::string& key) const {
    auto v = node_cmd(id, {"HGET", key, "p:0"});
    if (v.empty() || v.rfind("ERR:", 0) == 0)
      return -1;
    return std::stoll(v.substr(0, v.find(':')));
  }
  /// Every copy key of this topic on every primary, DELeted.
  long long delete_copies() const {
    return delete_keys("{qsp-copy-*}:" + ns + ":copies:" + topic + ":*");
  }

  /// The lost-write failover of issue 24 on node 2's shard, driven through
  /// the node; `keep_copies` false is the control (a single checkpoint
  /// key's start).  Returns the last catch-up's comparison.
  void lost_write_failover(bool keep_copies);
};

/// The lines of `text` that contain `needle`.
std::vector<std::string> lines_with(const std::string& text, const std::string& needle) {
  std::istringstream in{text};
  std::string line;
  std::vector<std::string> out;
  while (std::getline(in, line))
    if (line.find(needle) != std::string::npos)
      out.push_back(line);
  return out;
}

/// The start the log names for partition 0 ("partition 0: start N H0 M"): N, or -1.
int64_t logged_start(const std::string& log) {
  static const std::regex re{R"(partition 0: start (\d+) H0 (\d+))"};
  std::smatch m;
  int64_t out = -1;
  auto lines = lines_with(log, "partition 0: start ");
  for (auto& l : lines)
    if (std::regex_search(l, m, re))
      out = std::stoll(m[1]);
  return out;
}

void rcluster::lost_write_failover(bool keep_copies) {
  constexpr int users = 50;
  constexpr uint64_t n = 300;
  // Pair 2's shard (node 2 and 5, either way round after an earlier test):
  // not the namespace's (slot 3923 on pair 1's).
  const int p = primary_in(2), r = replica_in(2);
  ASSERT_GT(p, 0);
  ASSERT_NE(owner_of(ns_slot), p);
  const auto shard = slots_of(p);
  ASSERT_FALSE(shard.empty());
  auto in_shard = [&](uint16_t slot) { return redis::contains(shard, slot); };
  const auto P = std::to_string(p), R = std::to_string(r);
  std::cout << "primary " << p << ", replica " << r << ", slots " << redis::format_ranges(shard)
            << "\n";

  ASSERT_NO_FATAL_FAILURE(produce(topic, 0, n, users));
  auto first = catch_up("catch-up-1");
  ASSERT_EQ(first.rc, 0) << first.log;
  ASSERT_EQ(checkpoint(), static_cast<int64_t>(n));
  const auto key = copy_key_of(p);
  ASSERT_EQ(copy_position(p, key), static_cast<int64_t>(n)) << key;
  // The replica holds everything so far, the copy included.
  ASSERT_EQ(node_cmd(p, {"WAIT", "1", "5000"}), "1") << "WAIT on node " << p;

  ASSERT_SVC("rc-cut-replica " + R);
  ASSERT_NO_FATAL_FAILURE(produce(topic, n, 2 * n, users));
  auto second = catch_up("catch-up-2");
  ASSERT_EQ(second.rc, 0) << second.log;
  ASSERT_EQ(checkpoint(), static_cast<int64_t>(2 * n));
  // The primary acknowledged the second batch and its copy says so; the
  // replica has neither.
  ASSERT_EQ(copy_position(p, key), static_cast<int64_t>(2 * n));
  const auto m = model_of(0, 2 * n, users);
  auto before = compare(m);
  ASSERT_TRUE(before.equal()) << before.text();

  ASSERT_SVC("rc-kill " + P);
  ASSERT_SVC("rc-takeover " + R);
  ASSERT_EQ(role(r), "master");
  ASSERT_EQ(redis::format_ranges(slots_of(r)), redis::format_ranges(shard));
  // The scenario is real: the new primary serves the slots without the
  // second batch's writes there (the checkpoint, on pair 1's shard, says
  // 600).
  auto lost = compare(m, in_shard);
  std::cout << "after the takeover, node " << r << "'s slots: " << lost.text() << "\n";
  ASSERT_GT(lost.behind, 0u) << "node " << r << " lost nothing: the scenario did not happen";
  EXPECT_TRUE(compare(m, [&](uint16_t s) { return !in_shard(s); }).equal());
  ASSERT_EQ(checkpoint(), static_cast<int64_t>(2 * n));
  // Its copy is the one it replicated before the cut (the key still names
  // the former primary, in the same slot).
  ASSERT_EQ(redis::key_slot(copy_key_of(r)), redis::key_slot(key));
  EXPECT_EQ(copy_position(r, key), static_cast<int64_t>(n));

  if (keep_copies) {
    // Issue 41: `audit` with a copy behind the checkpoint and no node
    // running (the window a node stopped before its replay rewrote the
    // copies leaves).  It audits up to the stored checkpoint, not up to the
    // start the copy chose: what node r lost is missing, nothing projected
    // above the copy counts as unknown, and it says where the next start
    // replays from and why.  (Before the fix it audited [0, 300): 0 missing,
    // every entry of the second batch on the other shards "unknown".)
    auto a = test::run_cli(node("audit"));
    auto count = [&](const std::string& what) -> long long {
      std::smatch mm;
      std::regex re{"\n" + what + ": (\\d+)"};
      return std::regex_search(a.out, mm, re) ? std::stoll(mm[1]) : -1;
    };
    EXPECT_EQ(a.rc, 5) << a.out << a.err;
    EXPECT_NE(a.out.find("partition 0: offsets [0, " + std::to_string(2 * n) + ")"),
              std::string::npos)
      << a.out;
    EXPECT_GT(count("missing"), 0) << a.out;
    EXPECT_EQ(count("unknown"), 0) << a.out;
    EXPECT_NE(a.out.find("partition 0: the next start replays from " + std::to_string(n)
                         + ", below its checkpoint " + std::to_string(2 * n)),
              std::string::npos)
      << a.out;
    EXPECT_NE(a.out.find("primary " + nodes().at(r)), std::string::npos)
      << "the note names node " << r << " (" << nodes().at(r) << ")\n" << a.out;
  }
  if (!keep_copies) {
    // What a design with the checkpoint key alone would start from: no
    // copies, and meta not marked (so the start seeds them at the
    // checkpoint instead of refusing a shard without one).
    ASSERT_GE(delete_copies(), 3);
    ASSERT_EQ(node_cmd(owner_of(ns_slot), {"HDEL", ns + ":meta", "redis_cluster_copies"}), "1");
  }
  auto third = catch_up("catch-up-3");
  ASSERT_EQ(third.rc, 0) << third.log;
  EXPECT_EQ(checkpoint(), static_cast<int64_t>(2 * n)) << third.log;
  auto after = compare(m);
  auto start = logged_start(third.log);
  if (keep_copies) {
    // The start is the new primary's copy, below the checkpoint: a replay.
    EXPECT_EQ(start, static_cast<int64_t>(n)) << third.log;
    EXPECT_NE(third.log.find("partition 0: replays from " + std::to_string(n)
                             + ", below its checkpoint " + std::to_string(2 * n)),
              std::string::npos)
      << third.log;
    EXPECT_TRUE(after.equal()) << after.text() << "\n" << third.log;
    auto a = test::run_cli(node("audit"));
    EXPECT_EQ(a.rc, 0) << a.out << a.err;
    std::cout << "the start replayed from " << start << " (checkpoint " << 2 * n << "): "
              << after.text() << "\n";
  } else {
    EXPECT_EQ(start, static_cast<int64_t>(2 * n)) << third.log;
    EXPECT_GT(after.behind, 0u) << after.text();
    std::cout << "without copies the start is " << start << " and Redis stays behind the model: "
              << after.text() << "\n";
  }

  // The old primary rejoins as the new one's replica.
  ASSERT_SVC("rc-start " + P);
  EXPECT_EQ(role(p), "slave");
}

} // namespace

// Issue 24's lost-write failover through the node: node 5 (node 2's replica)
// is cut off, the node projects 300 more dispatches that node 2 alone
// acknowledges, node 2 dies and node 5 takes over without them.  Node 5's
// copy (300) is behind the checkpoint (600): the next start replays from it
// and Redis ends equal to the model.
TEST_F(rcluster, LostWriteFailoverReplaysFromTheShardsCopy) {
  lost_write_failover(true);
}

// The control: the same failover with the copies gone and meta unmarked, so
// the start is the checkpoint alone, as a single checkpoint key would have
// it.  The catch-up succeeds and Redis stays behind the model: the entries
// node 5 never got are skipped for ever.
TEST_F(rcluster, WithoutCopiesTheSameFailoverLosesEntries) {
  lost_write_failover(false);
}

// Issue 41: an older copy key that a slot move took away and a later move
// brought back.  A primary's copy key lives in its lowest slot; moving that
// slot to another primary takes the key along (it stays there, frozen at
// the positions of that day), and the next start writes the primary a copy
// under its new lowest slot's tag.  Moving the slot back makes the older
// key the one under the primary's tag again: valid in the primary's
// current history, but far behind.  Both keys are valid proofs in the same
// history, so the start takes the higher one (each proves its positions);
// before the fix it took the older one alone, replayed from it, and once
// retention had passed it, refused a start with nothing lost:
// `partition 0: field next_offset: stored "300" ... below the low watermark`.
TEST_F(rcluster, ACopyKeyThatMovedAwayAndBackDoesNotPullTheStartBack) {
  constexpr int users = 50;
  constexpr uint64_t n = 300;
  const int p = primary_in(2), q = primary_in(3);
  ASSERT_GT(p, 0);
  ASSERT_GT(q, 0);
  ASSERT_NE(owner_of(ns_slot), p);
  ASSERT_NE(owner_of(ns_slot), q);
  const auto P = std::to_string(p), Q = std::to_string(q);

  ASSERT_NO_FATAL_FAILURE(produce(topic, 0, n, users));
  auto first = catch_up("catch-up-1");
  ASSERT_EQ(first.rc, 0) << first.log;
  ASSERT_EQ(checkpoint(), static_cast<int64_t>(n));
  const auto slots = slots_of(p);
  ASSERT_FALSE(slots.empty());
  uint16_t lowest = slots.front().first;
  for (auto& r : slots)
    lowest = std::min(lowest, r.first);
  const auto S0 = std::to_string(lowest);
  const auto old_key = copy_key_of(p);
  ASSERT_EQ(redis::key_slot(old_key), lowest) << old_key;
  ASSERT_EQ(copy_position(p, old_key), static_cast<int64_t>(n)) << old_key;

  // The copy key's slot goes to node q (and back whatever happens).
  undo.push_back("rc-move-slot " + S0 + " " + P);
  ASSERT_SVC("rc-move-slot " + S0 + " " + Q);
  ASSERT_EQ(copy_position(q, old_key), static_cast<int64_t>(n)) << "the key moved with its slot";
  ASSERT_NO_FATAL_FAILURE(produce(topic, n, 2 * n, users));
  auto second = catch_up("catch-up-2");
  ASSERT_EQ(second.rc, 0) << second.log;
  ASSERT_EQ(checkpoint(), static_cast<int64_t>(2 * n));
  EXPECT_EQ(logged_start(second.log), static_cast<int64_t>(n)) << second.log;
  const auto new_key = copy_key_of(p);
  ASSERT_NE(new_key, old_key);
  ASSERT_EQ(copy_position(p, new_key), static_cast<int64_t>(2 * n)) << new_key;
  ASSERT_EQ(copy_position(q, old_key), static_cast<int64_t>(n)) << "the older key was rewritten";

  // The slot comes back with the older key: node p's tag names it again.
  ASSERT_SVC("rc-move-slot " + S0 + " " + P);
  ASSERT_EQ(copy_key_of(p), old_key);
  ASSERT_EQ(copy_position(p, old_key), static_cast<int64_t>(n));
  ASSERT_EQ(copy_position(p, new_key), static_cast<int64_t>(2 * n));
  // Retention passes the older key's position (not the checkpoint's).
  {
    auto admin = kafka::admin::make(kafka_cfg());
    ASSERT_TRUE(admin) << describe(admin.error());
    auto d = (*admin)->delete_records(topic, 0, static_cast<int64_t>(n + n / 2));
    ASSERT_TRUE(d) << describe(d.error());
  }
  auto third = catch_up("catch-up-3");
  EXPECT_EQ(third.rc, 0) << third.log;
  EXPECT_EQ(logged_start(third.log), static_cast<int64_t>(2 * n)) << third.log;
  EXPECT_EQ(checkpoint(), static_cast<int64_t>(2 * n));
  auto cmp = compare(model_of(0, 2 * n, users));
  EXPECT_TRUE(cmp.equal()) << cmp.text();
  // The next start wrote node p's copy under the tag it has now.
  EXPECT_EQ(copy_position(p, old_key), static_cast<int64_t>(2 * n));
}

namespace {

/// Polls GET /readyz every 50 ms until it answers anything but 200 (or the
/// node exits), for at most `limit`; the time it took, or -1.
long long until_not_ready(test::node_process& run, uint16_t port, std::chrono::milliseconds limit,
                          test::http_reply* seen = nullptr) {
  auto t = clock_type::now();
  while (clock_type::now() - t < limit) {
    if (run.wait_for(0ms))
      return ms_since(t);
    auto r = test::http_get(port, "/readyz", 1s);
    if (r.status != 200) {
      if (seen != nullptr)
        *seen = r;
      return ms_since(t);
    }
    std::this_thread::sleep_for(50ms);
  }
  return -1;
}

} // namespace

// kill -9 of a primary (pair 3's) while `run` projects a live load: the node
// leaves ready while the shard is gone (asserted during the failover
// window), is ready again after the replica's automatic promotion, and
// once the load is over Redis equals the model.
TEST_F(rcluster, KillNineOfAPrimaryUnderLoad) {
  constexpr int users = 500;
  constexpr uint64_t n = 12000;
  const int p = primary_in(3), r = replica_in(3);
  ASSERT_GT(p, 0);
  ASSERT_NE(owner_of(ns_slot), p);
  auto port = test::free_port();
  auto log = dir + "/run.log";
  test::node_process run{node("run", {"--http.listen=127.0.0.1:" + std::to_string(port)}), log};
  ASSERT_TRUE(test::readyz_reaches(port, 200, 60s)) << slurp(log);
  background_producer load{topic, 0, n, users, 1000};
  ASSERT_TRUE(test::eventually([&] { return checkpoint() >= 1000; }, 30s)) << slurp(log);

  auto t_kill = clock_type::now();
  ASSERT_SVC("rc-kill " + std::to_string(p));
  test::http_reply seen;
  auto left = until_not_ready(run, port, 30s, &seen);
  ASSERT_FALSE(run.exit_code()) << "the node exited during the failover:\n" << slurp(log);
  ASSERT_GE(left, 0) << "still ready 30 s after node " << p << " was killed:\n" << slurp(log);
  std::cout << "not ready " << ms_since(t_kill) << " ms after the kill: " << seen.status << " "
            << seen.body << "\n";
  ASSERT_TRUE(test::eventually([&] { return role(r) == "master"; }, 30s))
    << "node " << r << " was not promoted";
  std::cout << "node " << r << " promoted " << ms_since(t_kill) << " ms after the kill\n";
  ASSERT_TRUE(test::readyz_reaches(port, 200, 60s)) << slurp(log);
  std::cout << "ready again " << ms_since(t_kill) << " ms after the kill\n";

  ASSERT_TRUE(load.wait(60s)) << load.error();
  ASSERT_TRUE(checkpoint_reaches(n, 60s, run)) << "checkpoint " << checkpoint() << "\n" << slurp(log);
  auto cmp = compare(model_of(0, n, users));
  EXPECT_TRUE(cmp.equal()) << cmp.text();
  std::cout << cmp.text() << "\n";
  EXPECT_EQ(run.stop(), 0) << slurp(log);
  auto text = slurp(log);
  for (auto& l : lines_with(text, "dirty: "))
    if (l.find("[warning]") != std::string::npos)
      std::cout << "  " << l << "\n";
  for (auto& l : lines_with(text, "partition 0: start "))
    std::cout << "  " << l << "\n";
  EXPECT_TRUE(lines_with(text, "] refused").empty()) << text;
  ASSERT_SVC("rc-start " + std::to_string(p));
}

// Wrong mode, either way round: redis.cluster-nodes naming a standalone
// Redis, and redis.host/port naming a Redis Cluster node, are configuration
// errors (exit 2) naming the mode to use; nothing is written.
TEST_F(rcluster, WrongModeEitherWayIsExitTwo) {
  test::private_redis standalone{"rc-standalone", {}};
  ASSERT_TRUE(standalone.wait_ready());
  auto without = [](std::vector<std::string> args, std::vector<std::string> keys) {
    args.erase(std::remove_if(args.begin(), args.end(),
                              [&](const std::string& a) {
                                for (auto& k : keys)
                                  if (a.rfind("--" + k + "=", 0) == 0)
                                    return true;
                                return false;
                              }),
               args.end());
    return args;
  };
  {
    // A standalone server has no ACL user of ours: the default user.
    auto args = without(node("catch-up"), {"redis.username", "redis.password-file"});
    test::set_option(args, "redis.cluster-nodes",
                     "[\"127.0.0.1:" + std::to_string(standalone.port) + "\"]");
    auto r = run_node(args, "standalone-as-cluster", 60s);
    EXPECT_EQ(r.rc, 2) << r.log;
    auto named = lines_with(r.log, "Redis Cluster mode");
    EXPECT_FALSE(named.empty()) << "no line names Redis Cluster mode:\n" << r.log;
    for (auto& l : named)
      std::cout << "  " << l << "\n";
    auto c = test::redis_conn_at("127.0.0.1:" + std::to_string(standalone.port));
    EXPECT_EQ(test::redis_cmd(*c, {"DBSIZE"}), "0");
  }
  {
    auto p1 = addr(primary_in(1));
    auto args = without(node("catch-up"), {"redis.cluster-nodes"});
    test::set_option(args, "redis.host", p1.host);
    test::set_option(args, "redis.port", std::to_string(p1.port));
    auto r = run_node(args, "cluster-as-standalone", 60s);
    EXPECT_EQ(r.rc, 2) << r.log;
    auto named = lines_with(r.log, "redis.cluster-nodes");
    EXPECT_FALSE(named.empty()) << "no line names redis.cluster-nodes:\n" << r.log;
    for (auto& l : named)
      std::cout << "  " << l << "\n";
    EXPECT_EQ(delete_keys(ns + ":*"), 0) << "the namespace was written";
    EXPECT_EQ(delete_keys("convs:*"), 0) << "session sets were written";
  }
  {
    // Both at once: refused before anything connects.
    auto args = node("catch-up", {"--redis.port=" + std::to_string(addr(1).port)});
    auto r = run_node(args, "both", 60s);
    EXPECT_EQ(r.rc, 2) << r.log;
    EXPECT_FALSE(lines_with(r.log, "redis.cluster-nodes").empty()) << r.log;
  }
}

// CLUSTERDOWN: two primaries SIGSTOPped past cluster-node-timeout (3 s) and
// the command timeout (5 s) while `run` projects a live load (the third
// primary, in a minority, answers CLUSTERDOWN; no replica can win an
// election).  The node is not ready during the fault, is ready again by
// itself once they continue, and nothing is lost.
TEST_F(rcluster, ClusterDownRecoversByItself) {
  constexpr int users = 500;
  constexpr uint64_t n = 15000;
  const int p2 = primary_in(2), p3 = primary_in(3);
  ASSERT_GT(p2, 0);
  ASSERT_GT(p3, 0);
  auto port = test::free_port();
  auto log = dir + "/run.log";
  // A command timeout well inside the pause: a stalled primary is noticed
  // within 2 x redis.command-timeout (a blocking read for a full pipeline
  // starts its own timeout), and the rest of the pause is CLUSTERDOWN.
  test::node_process run{node("run", {"--http.listen=127.0.0.1:" + std::to_string(port),
                                      "--redis.command-timeout=2s"}),
                         log};
  ASSERT_TRUE(test::readyz_reaches(port, 200, 60s)) << slurp(log);
  background_producer load{topic, 0, n, users, 1000};
  ASSERT_TRUE(test::eventually([&] { return checkpoint() >= 1000; }, 30s)) << slurp(log);

  const auto pause = 10s;
  long long left = -1;
  std::string p1_state;
  test::http_reply seen;
  auto t_stop = clock_type::now();
  {
    test::pause_guard g2{pid_of(p2)}, g3{pid_of(p3)};
    ASSERT_TRUE(g2.paused() && g3.paused());
    left = until_not_ready(run, port, pause, &seen);
    test::eventually([&] { return clock_type::now() - t_stop >= pause; }, pause + 1s);
    p1_state = cluster_state(primary_in(1));
    ASSERT_FALSE(run.exit_code()) << "the node exited during the fault:\n" << slurp(log);
  }
  auto t_cont = clock_type::now();
  std::cout << "node " << primary_in(1) << " said cluster_state:" << p1_state << " at the end of the "
            << "pause\n";
  ASSERT_GE(left, 0) << "still ready during the whole " << pause.count() << " s pause:\n"
                     << slurp(log);
  std::cout << "not ready " << left << " ms into the pause: " << seen.status << " " << seen.body
            << "\n";
  EXPECT_EQ(p1_state, "fail");
  ASSERT_TRUE(test::readyz_reaches(port, 200, 60s)) << slurp(log);
  std::cout << "ready again " << ms_since(t_cont) << " ms after SIGCONT\n";
  EXPECT_EQ(role(p2), "master");
  EXPECT_EQ(role(p3), "master");

  ASSERT_TRUE(load.wait(60s)) << load.error();
  ASSERT_TRUE(checkpoint_reaches(n, 60s, run)) << "checkpoint " << checkpoint() << "\n" << slurp(log);
  auto cmp = compare(model_of(0, n, users));
  EXPECT_TRUE(cmp.equal()) << cmp.text();
  std::cout << cmp.text() << "\n";
  EXPECT_EQ(run.stop(), 0) << slurp(log);
  auto text = slurp(log);
  for (auto& l : lines_with(text, "dirty: "))
    if (l.find("[warning]") != std::string::npos)
      std::cout << "  " << l << "\n";
  for (auto& l : lines_with(text, "partition 0: start "))
    std::cout << "  " << l << "\n";
  EXPECT_TRUE(lines_with(text, "] refused").empty()) << text;
  EXPECT_FALSE(lines_with(text, "CLUSTERDOWN").empty()) << "the node never met CLUSTERDOWN:\n"
                                                        << text;
}

namespace {

/// The node still runs; otherwise a failure with its exit code and the
/// lines that say why.
::testing::AssertionResult still_running(test::node_process& run, const std::string& log,
                                         const std::string& when) {
  auto rc = run.wait_for(0ms);
  if (!rc)
    return ::testing::AssertionSuccess();
  auto text = slurp(log);
  std::string why;
  for (auto& l : lines_with(text, "] refused"))
    why += "\n  " + l;
  for (auto& l : lines_with(text, "dirty: "))
    if (l.find("[warning]") != std::string::npos)
      why += "\n  " + l;
  return ::testing::AssertionFailure() << "the node exited with " << *rc << " " << when << ":"
                                       << why;
}

/// The sum of every sample of metric `name` at GET /metrics (-1: no answer).
long long metric_sum(uint16_t port, const std::string& name) {
  auto r = test::http_get(port, "/metrics", 5s);
  if (r.status != 200)
    return -1;
  long long sum = 0;
  std::istringstream in{r.body};
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(name + "{", 0) == 0 || line.rfind(name + " ", 0) == 0)
      sum += std::stoll(line.substr(line.rfind(' ') + 1));
  return sum;
}

} // namespace

// Resharding while `run` projects a live load: 200 slots (busy users'
// session sets among them) move from pair 1's primary to pair 2's, then the
// slot of the copy key pair 3's primary holds to pair 1's, then the
// namespace's slot (checkpoints, meta) to pair 3's.  MOVED and ASK are followed,
// the node never refuses or exits, nothing is lost; a restart afterwards
// (catch-up) starts without a refusal.
TEST_F(rcluster, ReshardingUnderLoad) {
  constexpr int users = 2000;
  constexpr uint64_t n = 20000;
  const int p1 = primary_in(1), p2 = primary_in(2), p3 = primary_in(3);
  ASSERT_TRUE(p1 > 0 && p2 > 0 && p3 > 0);
  const auto P1 = std::to_string(p1), P2 = std::to_string(p2), P3 = std::to_string(p3);
  const auto m = model_of(0, n, users);
  auto port = test::free_port();
  auto log = dir + "/run.log";
  test::node_process run{node("run", {"--http.listen=127.0.0.1:" + std::to_string(port)}), log};
  ASSERT_TRUE(test::readyz_reaches(port, 200, 60s)) << slurp(log);
  background_producer load{topic, 0, n, users, 1000};
  ASSERT_TRUE(test::eventually([&] { return checkpoint() >= 1000; }, 30s)) << slurp(log);
  auto t = clock_type::now();

  auto moved = svc("rc-move-slots " + P1 + " " + P2 + " 200");
  ASSERT_EQ(moved.rc, 0) << moved.out;
  undo.push_back("rc-move-slots " + P2 + " " + P1 + " 200");  // the lowest 200: these
  auto text = moved.last();
  std::replace(text.begin(), text.end(), ' ', ',');
  auto ranges = redis::parse_ranges(text);
  ASSERT_TRUE(ranges) << moved.last();
  size_t busy = 0;
  for (auto& [user, entries] : m)
    busy += redis::contains(*ranges, redis::key_slot(convs + user)) ? 1 : 0;
  std::cout << "moved " << moved.last() << ": " << busy << " of the load's users live there\n";
  ASSERT_GT(busy, 0u) << "no user of the load in the moved slots: the test proves nothing";
  std::this_thread::sleep_for(2s);  // writes to the moved slots, and a checkpoint
  ASSERT_TRUE(still_running(run, log, "after 200 slots moved from node " + P1 + " to node " + P2));

  // The copy key pair 3's primary holds now (the node rewrites it at every
  // checkpoint): its slot moves away, and the shard's copy key with it.
  const auto ck = copy_key_of(p3);
  ASSERT_TRUE(test::eventually([&] { return node_cmd(p3, {"EXISTS", ck}) == "1"; }, 20s)) << ck;
  const auto ck_slot = std::to_string(redis::key_slot(ck));
  ASSERT_NE(redis::key_slot(ck), ns_slot);
  ASSERT_SVC("rc-move-slot " + ck_slot + " " + P1);
  undo.push_back("rc-move-slot " + ck_slot + " " + P3);
  EXPECT_EQ(node_cmd(p1, {"EXISTS", ck}), "1") << ck << " did not move with its slot";
  std::this_thread::sleep_for(2s);
  ASSERT_TRUE(still_running(run, log, "after the slot of " + ck + " moved to node " + P1));

  // The namespace's slot (meta, checkpoints) moves to pair 3's primary,
  // below its lowest slot: its copy key changes again.
  ASSERT_SVC("rc-move-slot " + std::to_string(ns_slot) + " " + P3);
  ASSERT_EQ(owner_of(ns_slot), p3);
  std::cout << "resharding done in " << ms_since(t) << " ms; load sent " << load.sent() << "\n";
  std::this_thread::sleep_for(2s);
  ASSERT_TRUE(still_running(run, log, "after the namespace's slot moved to node " + P3));

  ASSERT_TRUE(load.wait(60s)) << load.error();
  ASSERT_TRUE(checkpoint_reaches(n, 60s, run)) << "checkpoint " << checkpoint() << "\n" << slurp(log);
  auto cmp = compare(m);
  EXPECT_TRUE(cmp.equal()) << cmp.text();
  std::cout << cmp.text() << "\n";
  auto moved_n = metric_sum(port, "qsp_redis_shard_moved_total");
  auto ask_n = metric_sum(port, "qsp_redis_shard_ask_total");
  std::cout << "redirections followed: MOVED " << moved_n << ", ASK " << ask_n << "\n";
  EXPECT_GT(moved_n + ask_n, 0) << "no redirection followed: the resharding missed the load";
  // The new copy key of pair 3's shard is written (its lowest slot changed).
  const auto ck_now = copy_key_of(p3);
  EXPECT_NE(ck_now, ck);
  EXPECT_EQ(node_cmd(p3, {"EXISTS", ck_now}), "1") << ck_now;
  EXPECT_EQ(run.stop(), 0) << slurp(log);
  auto run_log = slurp(log);
  for (auto& l : lines_with(run_log, "dirty: "))
    if (l.find("[warning]") != std::string::npos)
      std::cout << "  " << l << "\n";
  EXPECT_TRUE(lines_with(run_log, "] refused").empty()) << run_log;

  // A restart after the resharding.
  auto again = catch_up("after-resharding");
  EXPECT_EQ(again.rc, 0) << again.log;
  EXPECT_TRUE(lines_with(again.log, "] refused").empty()) << again.log;
  for (auto& l : lines_with(again.log, "partition 0: start "))
    std::cout << "  " << l << "\n";
  EXPECT_EQ(checkpoint(), static_cast<int64_t>(n));
  auto cmp2 = compare(m);
  EXPECT_TRUE(cmp2.equal()) << cmp2.text();
}

// Migration, then failover: pair 3's replica is cut off, slots holding busy
// users move from pair 1's primary into pair 3's (keys included), the node
// projects more into them, pair 3's primary dies and its replica takes
// over.  The replica has neither the migrated keys nor the later writes,
// and its copy predates the migration.  Either the node restores
// everything (exit 0, Redis equals the model) or it refuses (exit 3),
// naming the replica's address: "serves slots that migrated into it after
// its copy was written, and it failed over since".
TEST_F(rcluster, MigrationThenFailover) {
  constexpr int users = 2000;
  constexpr uint64_t n = 3000;
  const int src = primary_in(1), dst = primary_in(3), cut = replica_in(3);
  ASSERT_TRUE(src > 0 && dst > 0 && cut > 0);
  const auto SRC = std::to_string(src), DST = std::to_string(dst), CUT = std::to_string(cut);
  const auto m1 = model_of(0, n, users);
  const auto m = model_of(n, 2 * n, users, m1);

  auto port = test::free_port();
  auto log = dir + "/run.log";
  test::node_process run{node("run", {"--http.listen=127.0.0.1:" + std::to_string(port)}), log};
  ASSERT_TRUE(test::readyz_reaches(port, 200, 60s)) << slurp(log);
  ASSERT_NO_FATAL_FAILURE(produce(topic, 0, n, users));
  ASSERT_TRUE(checkpoint_reaches(n, 60s, run)) << slurp(log);
  ASSERT_EQ(node_cmd(dst, {"WAIT", "1", "5000"}), "1");

  ASSERT_SVC("rc-cut-replica " + CUT);
  // The busiest slots of the source, but its lowest (its copy key's tag)
  // and the namespace's.
  const auto src_slots = slots_of(src);
  std::map<uint16_t, size_t> entries_in;
  for (auto& [user, convs_of] : m1)
    entries_in[redis::key_slot(convs + user)] += convs_of.size();
  std::vector<std::pair<size_t, uint16_t>> busiest;
  for (auto& [slot, k] : entries_in)
    if (redis::contains(src_slots, slot) && slot != ns_slot && slot != src_slots.front().first)
      busiest.emplace_back(k, slot);
  std::sort(busiest.rbegin(), busiest.rend());
  ASSERT_GE(busiest.size(), 3u);
  std::vector<redis::slot_range> moved;
  for (size_t i = 0; i < 3; ++i) {
    auto slot = std::to_string(busiest[i].second);
    auto r = svc("rc-move-slot " + slot + " " + DST);
    ASSERT_EQ(r.rc, 0) << r.out;
    undo.push_back("rc-move-slot " + slot + " " + SRC);
    moved.push_back({busiest[i].second, busiest[i].second});
    std::cout << "slot " << slot << " (" << busiest[i].first << " entries) moved to node " << dst
              << " with " << r.last() << " keys\n";
  }
  moved = redis::normalise_ranges(moved);
  auto in_moved = [&](uint16_t s) { return redis::contains(moved, s); };
  ASSERT_NO_FATAL_FAILURE(produce(topic, n, 2 * n, users));
  ASSERT_TRUE(still_running(run, log, "after the migration"));
  bool reached = checkpoint_reaches(2 * n, 60s, run);
  ASSERT_TRUE(still_running(run, log, "projecting into the migrated slots"));
  ASSERT_TRUE(reached) << "checkpoint " << checkpoint() << ", /readyz "
                       << test::http_get(port, "/readyz").body << "\n" << slurp(log);
  auto before = compare(m);
  ASSERT_TRUE(before.equal()) << before.text();
  ASSERT_EQ(run.stop(), 0) << slurp(log);

  ASSERT_SVC("rc-kill " + DST);
  // Undone after the failover (TearDown): the dead node restarts after it.
  ASSERT_SVC("rc-takeover " + CUT);
  std::cout << "node " << cut << " serves " << redis::format_ranges(slots_of(cut)) << "\n";
  auto lost = compare(m, in_moved);
  std::cout << "the migrated slots after the takeover: " << lost.text() << "\n";
  ASSERT_GT(lost.behind, 0u) << "node " << cut << " lost nothing: the scenario did not happen";

  auto r = catch_up("after-failover");
  auto refusals = lines_with(r.log, "] refused");
  if (r.rc == 0) {
    auto after = compare(m);
    EXPECT_TRUE(after.equal()) << after.text() << "\n" << r.log;
    std::cout << "outcome: exit 0 and " << after.text() << "\n";
  } else {
    EXPECT_EQ(r.rc, 3) << r.log;
    const auto name = nodes().at(cut);
    bool named = false;
    for (auto& l : refusals) {
      std::cout << "outcome: exit " << r.rc << ": " << l << "\n";
      named = named
              || (l.find(name) != std::string::npos
                  && l.find("migrated into it after its copy was written") != std::string::npos);
    }
    EXPECT_TRUE(named) << "no refusal names node " << cut << " (" << name
                       << ") and the migration:\n" << r.log;
  }
}

// catch-up and run in Redis Cluster mode under a live transactional
// producer: committed transactions only (the aborted ones write to users no
// committed record names), Redis equals the model through the slot map, and
// `audit` in Redis Cluster mode says consistent.
TEST_F(rcluster, CatchUpAndRunUnderALiveTransactionalProducer) {
  constexpr int users = 300;
  constexpr uint64_t txns = 80, per_txn = 40;
  test::model m;
  std::atomic<bool> done{false};
  std::atomic<uint64_t> ended{0};  ///< transactions committed or aborted
  std::string failure;  ///< written by the producer before `done`
  std::thread producer{[&] {
    auto p = kafka::producer::make(kafka_cfg(), test::unique_name("rc-txn"));
    if (!p) {
      failure = describe(p.error());
      done = true;
      return;
    }
    for (uint64_t t = 0; t < txns && failure.empty(); ++t) {
      bool abort = t % 5 == 4;
      if (auto ok = p->begin(); !ok) {
        failure = describe(ok.error());
        break;
      }
      for (uint64_t k = 0; k < per_txn; ++k) {
        auto d = test::make_dispatch(t * per_txn + k, users);
        if (abort)
          d.recipients = {"aborted-" + std::to_string(t * per_txn + k)};
        if (auto ok = p->send(topic, 0, core::encode_json(d)); !ok) {
          failure = describe(ok.error());
          break;
        }
      }
      auto end = abort ? p->abort() : p->commit();
      if (!end) {
        failure = describe(end.error());
        break;
      }
      if (!abort)
        for (uint64_t k = 0; k < per_txn; ++k)
          test::apply(m, test::make_dispatch(t * per_txn + k, users));
      ++ended;
      std::this_thread::sleep_for(20ms); // a live producer, not a burst
    }
    done = true;
  }};
  struct joiner {
    std::thread& t;
    ~joiner() { t.join(); }
  } join{producer};

  // catch-up while the producer runs: ends at the H0 snapshot it took.
  ASSERT_TRUE(test::eventually([&] { return done || ended >= 10; }, 30s));
  auto first = catch_up("catch-up-live");
  ASSERT_EQ(first.rc, 0) << first.log;

  // run until the producer is done and everything is in.
  auto port = test::free_port();
  auto log = dir + "/run.log";
  test::node_process run{node("run", {"--http.listen=127.0.0.1:" + std::to_string(port)}), log};
  ASSERT_TRUE(test::readyz_reaches(port, 200, 60s)) << slurp(log);
  ASSERT_TRUE(test::eventually([&] { return done.load(); }, 120s)) << "the producer did not finish";
  ASSERT_TRUE(failure.empty()) << failure;
  ASSERT_EQ(ended.load(), txns);
  ASSERT_TRUE(test::eventually([&] { return compare(m).equal(); }, 60s))
    << compare(m).text() << "\n" << slurp(log);
  EXPECT_EQ(run.stop(), 0) << slurp(log);
  EXPECT_TRUE(lines_with(slurp(log), "] refused").empty()) << slurp(log);
  // Nothing of an aborted transaction is projected.
  auto r = router();
  ASSERT_TRUE(r);
  for (uint64_t t = 4; t < txns; t += 5) {
    auto key = convs + "aborted-" + std::to_string(t * per_txn);
    auto i = r->map().shard_of(redis::key_slot(key));
    ASSERT_GE(i, 0);
    auto c = r->primary(static_cast<size_t>(i));
    ASSERT_TRUE(c);
    EXPECT_EQ(test::redis_cmd(**c, {"EXISTS", key}), "0") << key;
  }
  // audit reads every user's set from its primary.
  auto audit = test::run_cli(node("audit"));
  EXPECT_EQ(audit.rc, 0) << audit.out << audit.err;
  EXPECT_NE(audit.out.find("verdict: consistent"), std::string::npos) << audit.out;
}

// Issue 32, finding 5: `redis-cli --cluster fix` may overwrite a session set
// (MIGRATE ... REPLACE) on a primary that never failed over, which no copy
// can see.  OPERATIONS.md, "After redis-cli --cluster fix": `audit` finds
// the gap (exit 5); one catch-up with projection.replay-from-log-start
// repairs it (the checkpoint does not move back) and `audit` is consistent.
// A plain catch-up does not (the control).
TEST_F(rcluster, AGapAuditFindsIsRepairedByAReplayFromTheLogStart) {
  constexpr int users = 200;
  constexpr uint64_t n = 2000;
  const auto m = model_of(0, n, users);
  ASSERT_NO_FATAL_FAILURE(produce(topic, 0, n, users));
  auto first = catch_up("catch-up-1");
  ASSERT_EQ(first.rc, 0) << first.log;
  ASSERT_TRUE(compare(m).equal()) << compare(m).text();
  // The overwrite: a busy user's set replaced by nothing.
  auto key = convs + m.begin()->first;
  auto owner = owner_of(redis::key_slot(key));
  ASSERT_GT(owner, 0);
  ASSERT_EQ(node_cmd(owner, {"DEL", key}), "1");
  auto cp = checkpoint();
  auto found = test::run_cli(node("audit"));
  EXPECT_EQ(found.rc, 5) << found.out << found.err;
  // A plain start begins at the checkpoint: the gap stays.
  auto plain = catch_up("catch-up-plain");
  ASSERT_EQ(plain.rc, 0) << plain.log;
  EXPECT_EQ(node_cmd(owner, {"EXISTS", key}), "0");
  auto repair = catch_up("catch-up-replay", {"--projection.replay-from-log-start=true"});
  ASSERT_EQ(repair.rc, 0) << repair.log;
  EXPECT_EQ(checkpoint(), cp) << "the checkpoint moved";
  EXPECT_TRUE(compare(m).equal()) << compare(m).text();
  auto audit = test::run_cli(node("audit"));
  EXPECT_EQ(audit.rc, 0) << audit.out << audit.err;
}
