// What the scale-out/in tests (tests/rcluster_scale) and the nemesis
// (tests/rcluster_nemesis) share about the Redis Cluster service set
// (scripts/services start --redis-cluster): its nodes as the env file says
// NOW (rc-add-primary and rc-remove-primary change them), its fault
// commands, the node's flags, the model and a comparison of Redis with it.
// Header-only: each test executable has one translation unit.
//
// Like tests/rcluster: the namespace {session_projection} (slot 3923) is
// shared, so every test clears it, the copy keys and convs:* first, and
// leaves the set healthy (nodes 1-6 up in their pairs with nodes 1, 2, 3 the
// primaries again, no added node, the namespace's slot on node 1's shard).
#pragma once

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
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
#include "redis/stores.hpp"
#include "tests/support/integration.hpp"

#define REQUIRE_RCLUSTER_SET() REQUIRE_SERVICE_SET(qsp::test::redis_cluster_set, "QSP_REQUIRE_RCLUSTER")

namespace qsp::rckit {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
using test::slurp;

inline const std::string ns = "{session_projection}";
inline const std::string convs = "convs:";
constexpr uint16_t ns_slot = 3923;

inline long long ms_since(clock_type::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - t0).count();
}

inline std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in{s};
  while (std::getline(in, cur, sep))
    if (!cur.empty())
      out.push_back(cur);
  return out;
}

/// "1=a,2=b" -> {1: a, 2: b}
inline std::map<int, std::string> id_map(const std::string& s) {
  std::map<int, std::string> out;
  for (auto& kv : split(s, ','))
    if (auto eq = kv.find('='); eq != std::string::npos)
      out[std::stoi(kv.substr(0, eq))] = kv.substr(eq + 1);
  return out;
}

inline const test::service_set& S() { return *test::redis_cluster_set(nullptr); }

/// Node id -> host:port, as the env file says now (added nodes included).
inline std::map<int, std::string> nodes() {
  return id_map(test::read_env_file(S().file)["REDIS_NODES"]);
}
/// Node id -> 40-hex node id, now.
inline std::map<int, std::string> node_ids() {
  return id_map(test::read_env_file(S().file)["REDIS_NODE_IDS"]);
}
inline redis::address parse_address(const std::string& hp) {
  auto c = hp.rfind(':');
  return {hp.substr(0, c), static_cast<uint16_t>(std::stoi(hp.substr(c + 1)))};
}
inline redis::address addr(int id) {
  auto n = nodes();
  auto i = n.find(id);
  return i == n.end() ? redis::address{"127.0.0.1", 1} : parse_address(i->second);
}
inline int id_of_address(const std::string& host_port) {
  for (auto& [id, hp] : nodes())
    if (hp == host_port)
      return id;
  return -1;
}
/// The pid scripts/services recorded for node `id` (-1: not running).
inline int pid_of(int id) {
  auto pids = id_map(test::read_env_file(S().file)["REDIS_PIDS"]);
  auto i = pids.find(id);
  if (i == pids.end() || i->second == "-")
    return -1;
  return std::stoi(i->second);
}
inline bool sigstopped(int pid) {
  std::ifstream in{"/proc/" + std::to_string(pid) + "/status"};
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("State:", 0) == 0)
      return line.find('T') != std::string::npos;
  return false;
}

/// The admin (default user), every node of the set now a seed.
inline redis::settings admin_settings() {
  redis::settings r;
  for (auto& [id, hp] : nodes())
    r.cluster_nodes.push_back(parse_address(hp));
  r.username = S().at("REDIS_ADMIN_USER");
  r.password = S().secret("REDIS_ADMIN_PASSWORD_FILE");
  r.ns = ns;
  r.convs_prefix = convs;
  r.connect_timeout_ms = 1000;
  r.command_timeout_ms = 6000;
  return r;
}

/// One command on node `id` as the admin; "ERR:<why>" on failure.
inline std::string node_cmd(int id, const std::vector<std::string>& argv) {
  auto c = redis::connection::open_at(admin_settings(), addr(id));
  if (!c)
    return "ERR:" + describe(c.error());
  return test::redis_cmd(**c, argv);
}
inline std::string field(const std::string& text, const std::string& name) {
  return redis::info_fields(text)[name];
}
/// "master", "slave", or "" (does not answer).
inline std::string role(int id) { return field(node_cmd(id, {"INFO", "replication"}), "role"); }
inline std::string cluster_state(int id) {
  return field(node_cmd(id, {"CLUSTER", "INFO"}), "cluster_state");
}

/// A fresh router (slot map) as the admin; nullptr with the reason in `why`.
inline std::unique_ptr<redis::cluster_router> router(std::string* why = nullptr) {
  auto r = redis::cluster_router::open(admin_settings());
  if (!r) {
    if (why != nullptr)
      *why = describe(r.error());
    return nullptr;
  }
  return std::move(*r);
}
/// The node id serving `slot` now (-1: none or unknown).
inline int owner_of(uint16_t slot) {
  auto r = router();
  if (!r)
    return -1;
  auto i = r->map().shard_of(slot);
  return i < 0 ? -1 : id_of_address(r->map().shards()[static_cast<size_t>(i)].primary.address());
}
/// The slots node `id` serves now; empty if none.
inline std::vector<redis::slot_range> slots_of(int id) {
  auto r = router();
  if (!r)
    return {};
  auto hp = nodes()[id];
  for (auto& sh : r->map().shards())
    if (sh.primary.address() == hp)
      return sh.slots;
  return {};
}

// -- scripts/services on this set ---------------------------------------------

struct svc_result {
  int rc = -1;
  std::string out;  ///< stdout and stderr
  std::string stdout_text;
  /// The last line of stdout (what the command prints: a pid, an id, slots...).
  std::string last() const {
    auto lines = split(stdout_text, '\n');
    return lines.empty() ? std::string{} : lines.back();
  }
};

inline svc_result svc(const std::string& args) {
  auto t0 = clock_type::now();
  auto r = test::run_program("/bin/bash", {"-c", "QSP_SERVICES_DIR='" + S().dir + "' timeout 300 "
                                              QSP_SOURCE_DIR "/scripts/services " + args});
  svc_result out;
  out.rc = r.rc;
  out.stdout_text = r.out;
  out.out = r.out + r.err;
  std::cout << "[services " << args << "] rc " << out.rc << " in " << ms_since(t0)
            << " ms: " << out.last() << "\n";
  return out;
}

#define ASSERT_SVC(args)                                                     \
  do {                                                                       \
    auto r_ = ::qsp::rckit::svc(args);                                       \
    ASSERT_EQ(r_.rc, 0) << "scripts/services " << (args) << ":\n" << r_.out; \
  } while (false)

/// Waits (bounded) until every node answers with cluster_state:ok and each
/// replica's link is up; "" when so, else what is not.
inline std::string wait_cluster_ok(std::chrono::milliseconds limit) {
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

/// The primary of pair `k` (1..3: nodes k and k+3); -1 if neither is.
inline int primary_in(int k) {
  if (role(k) == "master")
    return k;
  return role(k + 3) == "master" ? k + 3 : -1;
}
inline int replica_in(int k) {
  int p = primary_in(k);
  return p < 0 ? -1 : (p == k ? k + 3 : k);
}

/// Brings the set back to a healthy shape (as tests/rcluster's
/// ensure_healthy, and first: every added node removed, its slots to the
/// primary with the fewest).  "" when done, else what failed.
inline std::string ensure_healthy() {
  for (auto& [id, hp] : nodes()) {
    int pid = pid_of(id);
    if (pid > 0 && sigstopped(pid))
      if (auto r = svc("rc-resume " + std::to_string(id)); r.rc != 0)
        return "rc-resume " + std::to_string(id) + ": " + r.out;
  }
  for (int id = 1; id <= 6; ++id) {
    if (pid_of(id) > 0)
      continue;
    int partner = id <= 3 ? id + 3 : id - 3;
    test::eventually([&] { return role(partner) == "master"; }, 15s);
    if (auto r = svc("rc-start " + std::to_string(id)); r.rc != 0)
      return "rc-start " + std::to_string(id) + ": " + r.out;
  }
  for (auto& [id, hp] : nodes())
    if (id > 6) {
      if (pid_of(id) < 0)
        if (auto r = svc("rc-start " + std::to_string(id)); r.rc != 0)
          return "rc-start " + std::to_string(id) + ": " + r.out;
      if (auto r = svc("rc-remove-primary " + std::to_string(id)); r.rc != 0)
        return "rc-remove-primary " + std::to_string(id) + ": " + r.out;
    }
  if (auto why = wait_cluster_ok(30s); !why.empty())
    return why;
  const auto ids = node_ids();
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

/// Nodes 1, 2, 3 the primaries again, as at the set's start (graceful
/// failovers; a shard's masters refuse a vote for 2 x cluster-node-timeout
/// after its last failover, so each is tried up to 4 times).  The tests of
/// tests/rcluster_migration cut node 1 off as the namespace's replica when
/// pair 1 is flipped, and node 1 is the first seed: leave it a primary.
/// "" when done, else what failed.
inline std::string restore_start_pairing() {
  for (int k = 1; k <= 3; ++k) {
    if (role(k) == "master")
      continue;
    bool ok = false;
    auto deadline = clock_type::now() + 60s;
    for (int attempt = 0; attempt < 4 && !ok && clock_type::now() < deadline; ++attempt)
      ok = svc("rc-failover " + std::to_string(k)).rc == 0;
    if (!ok)
      return "could not fail pair " + std::to_string(k) + " back to node " + std::to_string(k);
  }
  return wait_cluster_ok(30s);
}

/// ensure_healthy, then the start pairing, then healthy again (the
/// namespace's slot follows pair 1's primary).
inline std::string leave_healthy() {
  if (auto why = ensure_healthy(); !why.empty())
    return why;
  if (auto why = restore_start_pairing(); !why.empty())
    return why;
  return ensure_healthy();
}

/// Every key matching `pattern` on every primary, DELeted; how many.
inline long long delete_keys(const std::string& pattern) {
  std::string why;
  auto r = router(&why);
  if (!r) {
    ADD_FAILURE() << why;
    return -1;
  }
  return test::delete_cluster_keys(*r, pattern);
}
inline void clear_cluster() {
  for (auto* pattern : {"{session_projection}:*", "{qsp-copy-*}*", "convs:*"})
    EXPECT_GE(delete_keys(pattern), 0) << pattern;
}

// -- the model and Redis ----------------------------------------------------

inline test::model model_of(uint64_t from, uint64_t to, int users, test::model m = {}) {
  for (uint64_t i = from; i < to; ++i)
    test::apply(m, test::make_dispatch(i, users));
  return m;
}

struct comparison {
  size_t users = 0, entries = 0;
  size_t behind = 0;  ///< entries missing or with an older score (lost)
  size_t ahead = 0;   ///< members or scores the model does not have
  std::vector<std::string> lines;
  std::string error;
  bool equal() const { return behind == 0 && ahead == 0 && error.empty(); }
  std::string text() const {
    std::ostringstream o;
    o << users << " users / " << entries << " entries compared: " << behind << " behind, "
      << ahead << " ahead" << (error.empty() ? "" : ", " + error);
    for (auto& l : lines)
      o << "\n  " << l;
    return o.str();
  }
};

/// Every user of `m` read from the primary serving it, compared with the model.
inline comparison compare(const test::model& m) {
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
    ++out.users;
    out.entries += want.size();
    auto i = r->map().shard_of(redis::key_slot(key));
    if (i < 0) {
      out.error = key + ": slot unserved";
      return out;
    }
    auto c = r->primary(static_cast<size_t>(i));
    if (!c) {
      out.error = describe(c.error());
      return out;
    }
    auto got = test::zset(**c, key);
    for (auto& [conv, score] : want) {
      auto g = got.find(conv);
      if (g == got.end() || g->second < score) {
        ++out.behind;
        note(key + " " + conv + ": " + (g == got.end() ? "missing" : std::to_string(g->second))
             + ", expected " + std::to_string(score));
      } else if (g->second > score) {
        ++out.ahead;
        note(key + " " + conv + ": ahead");
      }
    }
    for (auto& [conv, score] : got)
      if (want.count(conv) == 0) {
        ++out.ahead;
        note(key + " " + conv + ": not in the model");
      }
  }
  return out;
}

// -- Kafka --------------------------------------------------------------------

inline kafka::client_settings kafka_cfg() {
  kafka::client_settings c;
  c.bootstrap_servers = S().at("KAFKA_BOOTSTRAP");
  c.client_id = "qsp-rcluster-scale-test";
  return c;
}

/// Dispatches [from, to) of make_dispatch(i, users): dispatch i to partition
/// i % partitions, or all to `only` if it is >= 0.
inline void produce(const std::string& topic, uint64_t from, uint64_t to, int users,
                    int partitions, int only = -1) {
  auto p = kafka::producer::make(kafka_cfg());
  ASSERT_TRUE(p) << describe(p.error());
  for (uint64_t i = from; i < to; ++i) {
    auto part = only >= 0 ? only : static_cast<int32_t>(i % static_cast<uint64_t>(partitions));
    auto ok = p->send(topic, part, core::encode_json(test::make_dispatch(i, users)));
    ASSERT_TRUE(ok) << describe(ok.error());
  }
  auto f = p->flush();
  ASSERT_TRUE(f) << describe(f.error());
}

/// Produces dispatches [from, to) (i to partition i % partitions) at `rate`
/// per second on a thread of its own; stops early when destroyed.
class background_producer {
public:
  background_producer(std::string topic, uint64_t from, uint64_t to, int users, int partitions,
                      int rate)
    : thread_([=] { run(topic, from, to, users, partitions, rate); }) {}
  ~background_producer() {
    stop_ = true;
    if (thread_.joinable())
      thread_.join();
  }
  bool wait(std::chrono::milliseconds limit) {
    if (!test::eventually([&] { return done_.load(); }, limit))
      return false;
    if (thread_.joinable())
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
  void run(const std::string& topic, uint64_t from, uint64_t to, int users, int partitions,
           int rate) {
    auto p = kafka::producer::make(kafka_cfg());
    if (!p) {
      fail(describe(p.error()));
      done_ = true;
      return;
    }
    auto t0 = clock_type::now();
    for (uint64_t i = from; i < to && !stop_; ++i) {
      auto part = static_cast<int32_t>(i % static_cast<uint64_t>(partitions));
      if (auto ok = p->send(topic, part, core::encode_json(test::make_dispatch(i, users))); !ok) {
        fail(describe(ok.error()));
        break;
      }
      ++sent_;
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

inline bool create_topic(const std::string& topic, int partitions) {
  auto admin = kafka::admin::make(kafka_cfg());
  if (!admin)
    return false;
  if (!(*admin)->create_topic(topic, partitions))
    return false;
  return test::eventually(
    [&] {
      auto id = (*admin)->identity(topic);
      return id && id->partition_count == partitions && !id->topic_id.empty();
    },
    20s);
}

// -- the node -------------------------------------------------------------------

/// The seeds: nodes 1-6 (REDIS_CLUSTER_NODES, as at the set's start).
inline std::string seeds() {
  std::string s = "[";
  for (auto& hp : split(S().at("REDIS_CLUSTER_NODES"), ','))
    s += (s.size() > 1 ? ",\"" : "\"") + hp + "\"";
  return s + "]";
}

/// The node's flags in Redis Cluster mode, as the set's ACL user.
inline std::vector<std::string> node_args(const std::string& cmd, const std::string& topic,
                                          int partitions, std::vector<std::string> extra = {}) {
  std::vector<std::string> a{cmd,
                             "--projection.dispatch-topic=" + topic,
                             "--projection.partition-count=" + std::to_string(partitions),
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

/// The lines of `text` that contain `needle`.
inline std::vector<std::string> lines_with(const std::string& text, const std::string& needle) {
  std::istringstream in{text};
  std::string line;
  std::vector<std::string> out;
  while (std::getline(in, line))
    if (line.find(needle) != std::string::npos)
      out.push_back(line);
  return out;
}
/// The refusals a log holds, one per line ("" if none).
inline std::string refusals(const std::string& text) {
  std::string out;
  for (auto& l : lines_with(text, "] refused: "))
    out += "\n  " + l;
  return out;
}
/// The node's warnings that made it dirty.
inline std::vector<std::string> dirty_lines(const std::string& text) {
  std::vector<std::string> out;
  for (auto& l : lines_with(text, "dirty: "))
    if (l.find("[warning]") != std::string::npos)
      out.push_back(l);
  return out;
}

/// The stored checkpoint of `partition` (-1: none or unreadable).
inline int64_t checkpoint(const std::string& topic, int32_t partition) {
  auto key = redis::checkpoint_key(ns, topic, partition);
  auto owner = owner_of(redis::key_slot(key));
  if (owner < 0)
    return -1;
  auto v = node_cmd(owner, {"HGET", key, "next_offset"});
  if (v.empty() || v.rfind("ERR:", 0) == 0)
    return -1;
  try {
    return std::stoll(v);
  } catch (...) {
    return -1;
  }
}
/// Every partition's checkpoint (-1 where none), in one read of the
/// namespace's primary; empty if it cannot be read.
inline std::vector<int64_t> checkpoints(const std::string& topic, int partitions) {
  std::vector<int64_t> out;
  auto owner = owner_of(ns_slot);
  if (owner < 0)
    return out;
  auto c = redis::connection::open_at(admin_settings(), addr(owner));
  if (!c)
    return out;
  for (int p = 0; p < partitions; ++p) {
    auto v = test::redis_cmd(**c, {"HGET", redis::checkpoint_key(ns, topic, p), "next_offset"});
    if (v.rfind("ERR:", 0) == 0)
      return {};
    try {
      out.push_back(v.empty() ? -1 : std::stoll(v));
    } catch (...) {
      out.push_back(-1);
    }
  }
  return out;
}

/// The sum of every sample of metric `name` at GET /metrics (-1: no answer).
inline long long metric_sum(uint16_t port, const std::string& name) {
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

/// A `run` node with its /readyz port and log.
struct run_node {
  std::string name, log;
  uint16_t port = 0;
  std::unique_ptr<test::node_process> proc;

  run_node(std::string name_, const std::string& dir, std::vector<std::string> args)
    : name(std::move(name_)), log(dir + "/" + name + ".log"), port(test::free_port()) {
    test::set_option(args, "http.listen", "127.0.0.1:" + std::to_string(port));
    proc = std::make_unique<test::node_process>(args, log);
  }
  /// The exit code, if it exited.
  std::optional<int> exited() { return proc->wait_for(0ms); }
  bool ready() { return !exited() && test::http_get(port, "/readyz", 2s).status == 200; }
  /// Until /readyz is 200 or the node exits, at most `limit`.
  bool becomes_ready(std::chrono::milliseconds limit) {
    return test::eventually([&] { return exited() || ready(); }, limit) && !exited();
  }
  std::string text() const { return slurp(log); }
  /// "exit N" + the refusals, or "running".
  std::string status() {
    auto rc = exited();
    if (!rc)
      return name + " running";
    return name + " exited with " + std::to_string(*rc) + refusals(text());
  }
  /// SIGTERM, then at most 60 s (then SIGKILL): the exit code, -1 if none.
  int stop() {
    proc->signal(SIGTERM);
    auto rc = proc->wait_for(60s);
    if (!rc) {
      proc->signal(SIGKILL);
      rc = proc->wait_for(10s);
    }
    return rc ? *rc : -1;
  }
};

} // namespace qsp::rckit
