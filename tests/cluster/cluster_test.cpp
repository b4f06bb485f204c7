// A qsession cluster against the real broker and Redis (docs/CLUSTER.md,
// docs/DESIGN.md §12): three `run` nodes in ownership = group on a 12-partition topic
// under a live transactional producer (every seventh transaction aborted),
// through five faults: kill -9 of a node, SIGSTOP of a node past the session
// timeout, a fourth node joining, a rolling restart of every node, and a
// newer claim made behind the owner's back (the fenced path, deterministic).
//
// Two threads watch each scenario from its start to its end:
// - the sampler reads, per iteration, every partition's last stable offset
//   and then (one Lua step) every owner record, checkpoint and status.  A
//   checkpoint that ever moves backwards is a violation.  The first time an
//   epoch is seen, the LSO read one iteration *before* (whose owner read still
//   showed the older epoch, so it preceded the claim, which precedes H0) is
//   recorded as a lower bound of that epoch's H0;
// - the gate checker asks every node's /readyz in turn; whenever one answers
//   200 it checks in Redis, independently of the node, that every partition
//   has an owner whose heartbeat is recent and whose checkpoint reached the
//   recorded lower bound of that owner's H0 (a view one heartbeat older than
//   a claim is allowed: nodes read the namespace once per heartbeat).
// Making the product ignore "caught up to H0" in the readiness rule fails
// all five scenarios through the gate checker.
// Each scenario also checks what the nodes claim during its fault, and ends
// with the producer stopped, every checkpoint at the LSO, `audit` consistent
// and the test's model of the committed records equal to Redis.
#include <signal.h>

#include <atomic>
#include <mutex>
#include <set>
#include <sstream>
#include <algorithm>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "kafka/admin.hpp"
#include "kafka/producer.hpp"
#include "redis/stores.hpp"
#include "tests/support/integration.hpp"

using namespace qsp;
using namespace std::chrono_literals;
using test::eventually;
using test::slurp;

namespace {

constexpr int partitions = 12;
/// projection.heartbeat-interval (the default); a status lives three of them.
constexpr int64_t heartbeat_ms = 500;
/// How old an owner's heartbeat may be while a node answers 200: the status'
/// TTL (3 heartbeats) plus the age of the node's view of the namespace (one
/// heartbeat) plus 1 s for the reads and the scheduling on a loaded 2-core
/// box (2.0 s was seen unloaded, right at a dead owner's expiry).  A gate
/// that ignored liveness would answer 200 with ages up to the session
/// timeout (6 s) after a kill -9.
constexpr int64_t heartbeat_tolerance_ms = 3 * heartbeat_ms + heartbeat_ms + 1000;

/// How long a claim may stay out of a node's view of the namespace: one
/// heartbeat, plus its read and the scheduling on a loaded 2-core box.
constexpr int64_t view_staleness_ms = 2 * heartbeat_ms;

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

int64_t to_i64(const std::string& s) {
  return s.empty() ? -1 : std::stoll(s);
}

/// One partition as Redis describes it at one instant.
struct part_state {
  std::string node;       ///< the owner record's node ("" none)
  int64_t epoch = -1;     ///< its epoch (-1 none)
  int64_t hb_ms = -1;     ///< its heartbeat_ms
  int64_t checkpoint = -1;
  bool status = false;    ///< a status key exists (within its TTL)
  std::string status_node;  ///< its node, epoch and heartbeat_ms
  int64_t status_epoch = -1;
  int64_t status_hb_ms = -1;
};
using snapshot = std::vector<part_state>;

/// Every owner record, checkpoint and status of the namespace in one Lua step.
const char* const snapshot_lua = R"(
local out = {}
for i = 1, #KEYS, 3 do
  local o = redis.call('HMGET', KEYS[i], 'node', 'epoch', 'heartbeat_ms')
  local c = redis.call('HGET', KEYS[i + 1], 'next_offset')
  local s = redis.call('HMGET', KEYS[i + 2], 'node', 'epoch', 'heartbeat_ms')
  out[#out + 1] = {o[1] or '', o[2] or '', o[3] or '', c or '', redis.call('EXISTS', KEYS[i + 2]),
                   s[1] or '', s[2] or '', s[3] or ''}
end
return out
)";

std::string str(const redisReply* r) {
  return r->str != nullptr ? std::string{r->str, r->len} : std::string{};
}

/// One node of the cluster.
struct node {
  std::string name;
  uint16_t port = 0;
  std::string log;
  std::unique_ptr<test::node_process> proc;
  bool running() const { return proc && !proc->exit_code(); }
};

struct cluster : ::testing::Test {
  std::string topic = test::unique_name("clu");
  std::string ns = test::unique_name("ns");
  std::string convs = test::unique_name("convs") + ":";
  std::unique_ptr<kafka::admin> admin;

  // The model of every committed record (the producer thread adds to it).
  std::mutex model_mu;
  test::model model;
  std::atomic<uint64_t> committed{0}, aborted{0};

  std::map<std::string, node> nodes; ///< the test's thread only
  std::mutex ports_mu;
  std::vector<uint16_t> ports; ///< every node's port ever (the gate checker polls them)

  // What the watchers found.
  std::mutex found_mu;
  std::vector<std::string> violations;
  std::map<std::pair<int, int64_t>, int64_t> h0_bound; ///< (partition, epoch) -> lower bound
  std::map<std::pair<int, int64_t>, int64_t> first_seen_ms; ///< (partition, epoch) -> wall ms
  std::atomic<uint64_t> samples{0}, gate_checks{0}, gate_undecided{0};
  std::atomic<int64_t> max_hb_age_ms{0};

  std::atomic<bool> stop_producer{false}, stop_watchers{false};
  std::thread producer_thread, sampler_thread, gate_thread;

  void SetUp() override {
    auto a = kafka::admin::make(test::kafka_client());
    ASSERT_TRUE(a);
    admin = std::move(*a);
    test::create_topic(topic, partitions);
    producer_thread = std::thread([this] { produce_loop(); });
    sampler_thread = std::thread([this] { sample_loop(); });
    gate_thread = std::thread([this] { gate_loop(); });
    // The sampler's first LSOs precede every claim.
    ASSERT_TRUE(eventually([&] { return samples >= 2; }, 30s));
  }

  void TearDown() override {
    stop_threads();
    for (auto& [name, n] : nodes)
      if (n.running())
        n.proc->signal(SIGKILL); // a failed ASSERT left it running; its destructor reaps it
    nodes.clear();
    admin->delete_topic(topic);
  }

  void stop_threads() {
    stop_producer = true;
    stop_watchers = true;
    for (auto* t : {&producer_thread, &sampler_thread, &gate_thread})
      if (t->joinable())
        t->join();
  }

  void violation(std::string what) {
    std::lock_guard<std::mutex> g{found_mu};
    if (violations.size() < 50)
      violations.push_back(std::move(what));
  }

  // -- the producer ---------------------------------------------------------

  /// Transactions of 24 records over every partition, ~25 per second (the
  /// pause sets the rate; nothing waits on it); every seventh is aborted.
  void produce_loop() {
    auto p = kafka::producer::make(test::kafka_client(), topic + "-tx");
    if (!p) {
      ADD_FAILURE() << "producer: " << describe(p.error());
      return;
    }
    uint64_t next = 0;
    for (uint64_t txn = 0; !stop_producer && txn < 100000; ++txn) {
      bool commit = txn % 7 != 6;
      if (!p->begin()) {
        ADD_FAILURE() << "producer: begin failed";
        return;
      }
      std::vector<core::dispatch> batch;
      for (int k = 0; k < 24; ++k) {
        batch.push_back(test::make_dispatch(next++, 200));
        if (!p->send(topic, k % partitions, core::encode_json(batch.back()))) {
          ADD_FAILURE() << "producer: send failed";
          return;
        }
      }
      if (!p->flush() || !(commit ? p->commit() : p->abort())) {
        ADD_FAILURE() << "producer: ending a transaction failed";
        return;
      }
      if (commit) {
        std::lock_guard<std::mutex> g{model_mu};
        for (auto& d : batch)
          test::apply(model, d);
        committed += batch.size();
      } else {
        aborted += batch.size();
      }
      std::this_thread::sleep_for(40ms); // the rate
    }
  }

  // -- the watchers ---------------------------------------------------------

  std::optional<snapshot> read_state(redis::connection& c) {
    std::vector<std::string> argv{"EVAL", snapshot_lua, std::to_string(3 * partitions)};
    for (int p = 0; p < partitions; ++p) {
      argv.push_back(redis::owner_key(ns, topic, p));
      argv.push_back(redis::checkpoint_key(ns, topic, p));
      argv.push_back(redis::status_key(ns, topic, p));
    }
    auto r = c.command(argv);
    if (!r || (*r)->elements != static_cast<size_t>(partitions))
      return std::nullopt;
    snapshot s(partitions);
    for (int p = 0; p < partitions; ++p) {
      auto* e = (*r)->element[p];
      s[p].node = str(e->element[0]);
      s[p].epoch = to_i64(str(e->element[1]));
      s[p].hb_ms = to_i64(str(e->element[2]));
      s[p].checkpoint = to_i64(str(e->element[3]));
      s[p].status = e->element[4]->integer == 1;
      s[p].status_node = str(e->element[5]);
      s[p].status_epoch = to_i64(str(e->element[6]));
      s[p].status_hb_ms = to_i64(str(e->element[7]));
    }
    return s;
  }

  std::optional<std::vector<int64_t>> read_lso() {
    auto st = admin->inspect(topic);
    if (!st || st->marks.size() != static_cast<size_t>(partitions))
      return std::nullopt;
    std::vector<int64_t> out;
    for (auto& m : st->marks)
      out.push_back(m.high);
    return out;
  }

  void sample_loop() {
    auto c = test::redis_conn();
    std::vector<int64_t> prev_lso(partitions, 0), last_cp(partitions, -1);
    while (!stop_watchers) {
      auto lso = read_lso();
      auto s = read_state(*c);
      auto at = now_ms();
      if (s) {
        std::lock_guard<std::mutex> g{found_mu};
        for (int p = 0; p < partitions; ++p) {
          auto& x = (*s)[p];
          if (x.epoch >= 0 && h0_bound.count({p, x.epoch}) == 0) {
            h0_bound[{p, x.epoch}] = prev_lso[p];
            first_seen_ms[{p, x.epoch}] = at;
          }
          // Statuses are written only under the owner record naming their
          // node and epoch: one of an older epoch must predate the newer
          // epoch's claim (its heartbeat_ms is taken before its write; the
          // claim preceded the sample that first showed it).
          if (x.status && x.status_epoch >= 0) {
            auto where = "partition " + std::to_string(p) + ": status of " + x.status_node
                         + " epoch " + std::to_string(x.status_epoch);
            if (x.status_epoch > x.epoch
                || (x.status_epoch == x.epoch && x.status_node != x.node))
              violations.push_back(where + " does not match the owner record " + x.node
                                   + " epoch " + std::to_string(x.epoch));
            else if (x.status_epoch < x.epoch && x.status_hb_ms > first_seen_ms[{p, x.epoch}])
              violations.push_back(where + " written at " + std::to_string(x.status_hb_ms)
                                   + " after epoch " + std::to_string(x.epoch)
                                   + " was claimed (seen at "
                                   + std::to_string(first_seen_ms[{p, x.epoch}]) + ")");
          }
          if (x.checkpoint < last_cp[p] && violations.size() < 50)
            violations.push_back("partition " + std::to_string(p) + ": checkpoint moved back from "
                                 + std::to_string(last_cp[p]) + " to "
                                 + std::to_string(x.checkpoint));
          last_cp[p] = std::max(last_cp[p], x.checkpoint);
        }
        ++samples;
      }
      // Only an LSO read before an owner read that showed no new epoch may
      // bound the next epoch's H0 (an LSO read that failed keeps the older,
      // smaller one, still a lower bound).
      if (lso && s)
        prev_lso = *lso;
      std::this_thread::sleep_for(10ms); // the rate
    }
  }

  std::vector<uint16_t> live_ports() {
    std::lock_guard<std::mutex> g{ports_mu};
    return ports; // a stopped node's port refuses at once
  }

  /// A node answered 200 with `answer` (its /readyz body); `post` was read
  /// from Redis right after, at `at`.  Every partition must have an owner
  /// with a recent heartbeat.  Where the answer's view names the owner epoch
  /// Redis holds, that owner's checkpoint must have reached the recorded
  /// lower bound of its H0.  Where the view names an older epoch, the view is
  /// stale: a node reads the namespace once per heartbeat, so that is allowed
  /// only while the newer claim is younger than view_staleness_ms.  (In the
  /// group's flows the revocation closes the gate long before the claim; a
  /// claim made outside the group shows the staleness.)
  void check_open_gate(uint16_t port, const nlohmann::json& answer, const snapshot& post,
                       int64_t at) {
    ++gate_checks;
    std::map<int, int64_t> seen_epoch;
    if (answer.is_object() && answer.contains("cluster"))
      for (auto& e : answer["cluster"])
        if (e.contains("partition") && e.contains("epoch") && e["epoch"].is_number())
          seen_epoch[e["partition"].get<int>()] = e["epoch"].get<int64_t>();
    for (int p = 0; p < partitions; ++p) {
      auto& x = post[p];
      auto where = "node on port " + std::to_string(port) + " answered 200 while partition "
                   + std::to_string(p);
      if (x.node.empty()) {
        violation(where + " had no owner");
        continue;
      }
      auto age = at - x.hb_ms;
      if (age > max_hb_age_ms)
        max_hb_age_ms = age;
      if (age > heartbeat_tolerance_ms)
        violation(where + " had owner " + x.node + " epoch " + std::to_string(x.epoch)
                  + " whose heartbeat was " + std::to_string(age) + " ms old");
      std::lock_guard<std::mutex> g{found_mu};
      auto view = seen_epoch.find(p);
      if (view == seen_epoch.end()) {
        if (violations.size() < 50)
          violations.push_back(where + " was missing from its answer's cluster table");
        continue;
      }
      if (view->second < x.epoch) {
        auto seen = first_seen_ms.find({p, x.epoch});
        if (seen != first_seen_ms.end() && at - seen->second > view_staleness_ms
            && violations.size() < 50)
          violations.push_back(where + " was in its view at epoch " + std::to_string(view->second)
                               + ", but epoch " + std::to_string(x.epoch) + " (" + x.node
                               + ") had been claimed " + std::to_string(at - seen->second)
                               + " ms before");
        ++gate_undecided; // a stale view, still young
        continue;
      }
      if (view->second > x.epoch) {
        ++gate_undecided; // claimed between the answer and the read
        continue;
      }
      auto b = h0_bound.find({p, x.epoch});
      if (b == h0_bound.end()) {
        ++gate_undecided;
        continue;
      }
      // No checkpoint yet: the owner starts at offset 0.
      auto at_offset = std::max<int64_t>(x.checkpoint, 0);
      if (at_offset < b->second && violations.size() < 50)
        violations.push_back(where + " was at " + std::to_string(at_offset) + ", behind "
                             + std::to_string(b->second) + " (a lower bound of the H0 of "
                             + x.node + " epoch " + std::to_string(x.epoch) + ")");
    }
  }

  void gate_loop() {
    auto c = test::redis_conn();
    while (!stop_watchers) {
      auto ports = live_ports();
      for (auto port : ports) {
        // A short bound: a SIGSTOPped node does not answer.
        auto r = test::http_get(port, "/readyz", 300ms);
        if (r.status != 200)
          continue;
        auto post = read_state(*c);
        auto at = now_ms();
        if (post)
          check_open_gate(port, nlohmann::json::parse(r.body, nullptr, false), *post, at);
      }
      if (ports.empty())
        std::this_thread::sleep_for(20ms); // nothing to poll yet
    }
  }

  // -- the nodes ------------------------------------------------------------

  std::vector<std::string> args(const std::string& cmd) {
    auto a = test::node_args(topic, partitions, ns, convs);
    a.insert(a.begin(), cmd);
    return a;
  }

  void start(const std::string& name) {
    auto& n = nodes[name];
    n.name = name;
    if (n.log.empty())
      n.log = "/tmp/" + test::unique_name("cluster-" + name) + ".log";
    auto port = test::free_port();
    auto a = args("run");
    test::set_option(a, "http.listen", "127.0.0.1:" + std::to_string(port));
    a.push_back("--projection.ownership=group");
    a.push_back("--projection.node-id=" + name);
    a.push_back("--kafka.group-id=" + ns);
    n.port = port;
    n.proc = std::make_unique<test::node_process>(a, n.log);
    std::lock_guard<std::mutex> g{ports_mu};
    ports.push_back(port);
  }

  /// Every node's log (for failure messages), the last 4000 characters each.
  std::string logs() {
    std::string out;
    for (auto& [name, n] : nodes) {
      auto l = slurp(n.log);
      if (l.size() > 4000)
        l = "..." + l.substr(l.size() - 4000);
      out += "\n---- " + name + " (" + n.log + ")\n" + l;
    }
    return out;
  }

  nlohmann::json readyz(const std::string& name, int* status = nullptr) {
    auto r = test::http_get(nodes.at(name).port, "/readyz", 2s);
    if (status != nullptr)
      *status = r.status;
    return nlohmann::json::parse(r.body, nullptr, false);
  }

  /// Every running node answers /readyz 200 and owns at least one partition.
  bool all_ready_and_owning() {
    for (auto& [name, n] : nodes) {
      if (!n.running())
        continue;
      int st = 0;
      auto j = readyz(name, &st);
      if (st != 200 || !j.is_object() || !j.contains("owned") || j["owned"].empty())
        return false;
    }
    return true;
  }

  snapshot state() {
    auto c = test::redis_conn();
    auto s = read_state(*c);
    EXPECT_TRUE(s);
    return s ? *s : snapshot(partitions);
  }

  std::set<int> owned_by(const snapshot& s, const std::string& name) {
    std::set<int> out;
    for (int p = 0; p < partitions; ++p)
      if (s[p].node == name)
        out.insert(p);
    return out;
  }

  void start_three() {
    for (auto* name : {"node-a", "node-b", "node-c"})
      start(name);
    ASSERT_TRUE(eventually([&] { return all_ready_and_owning(); }, 120s)) << logs();
  }

  /// The producer stops; every checkpoint reaches the LSO; every running node
  /// answers 200; the watchers found nothing and checked something; `audit`
  /// is consistent; the model equals Redis; every node stops cleanly.
  void finish() {
    stop_producer = true;
    producer_thread.join();
    std::vector<int64_t> lso;
    bool caught_up = eventually([&] {
      auto l = read_lso();
      if (!l)
        return false;
      lso = *l;
      auto s = state();
      for (int p = 0; p < partitions; ++p)
        if (s[p].checkpoint != lso[p])
          return false;
      return true;
    }, 120s);
    EXPECT_TRUE(caught_up) << ::testing::PrintToString(lso) << logs();
    EXPECT_TRUE(eventually([&] { return all_ready_and_owning(); }, 60s)) << logs();
    stop_watchers = true;
    sampler_thread.join();
    gate_thread.join();
    {
      std::lock_guard<std::mutex> g{found_mu};
      EXPECT_TRUE(violations.empty()) << ::testing::PrintToString(violations) << logs();
    }
    EXPECT_GT(gate_checks.load(), 0u) << "the gate checker never saw a node answer 200";
    std::printf("[cluster] %s: committed=%llu aborted=%llu samples=%llu gate_checks=%llu "
                "undecided=%llu max_heartbeat_age_ms=%lld epochs=%zu\n",
                ::testing::UnitTest::GetInstance()->current_test_info()->name(),
                static_cast<unsigned long long>(committed.load()),
                static_cast<unsigned long long>(aborted.load()),
                static_cast<unsigned long long>(samples.load()),
                static_cast<unsigned long long>(gate_checks.load()),
                static_cast<unsigned long long>(gate_undecided.load()),
                static_cast<long long>(max_hb_age_ms.load()), h0_bound.size());
    auto audit = test::run_cli(args("audit"));
    EXPECT_EQ(audit.rc, 0) << audit.out << audit.err;
    EXPECT_NE(audit.out.find("verdict: consistent"), std::string::npos) << audit.out;
    {
      std::lock_guard<std::mutex> g{model_mu};
      auto diff = test::diff_with_redis(model, convs);
      if (diff.size() > 20)
        diff.resize(20);
      EXPECT_TRUE(diff.empty()) << ::testing::PrintToString(diff);
    }
    for (auto& [name, n] : nodes)
      if (n.running()) {
        n.proc->signal(SIGTERM);
        auto rc = n.proc->wait_for(60s);
        EXPECT_TRUE(rc && *rc == 0) << name << " did not stop cleanly" << logs();
      }
  }

  std::set<int> held_closed(const nlohmann::json& j) {
    std::set<int> out;
    if (j.is_object() && j.contains("held_closed"))
      for (auto& h : j["held_closed"])
        out.insert(h.value("partition", -1));
    return out;
  }

  /// Every running node but `except` answers 503 holding `parts` closed.
  bool survivors_hold_closed(const std::string& except, const std::set<int>& parts,
                             std::string* last) {
    for (auto& [name, n] : nodes) {
      if (name == except || !n.running())
        continue;
      int st = 0;
      auto j = readyz(name, &st);
      auto held = held_closed(j);
      *last = name + " " + std::to_string(st) + " " + (j.is_discarded() ? "" : j.dump());
      if (st != 503)
        return false;
      for (auto p : parts)
        if (held.count(p) == 0)
          return false;
    }
    return true;
  }

  bool no_status_of(const std::set<int>& parts) {
    auto s = state();
    for (auto p : parts)
      if (s[p].status)
        return false;
    return true;
  }

  /// Every partition of `parts` is owned by someone other than `who`, with an
  /// epoch above `before`'s.
  bool taken_over(const std::set<int>& parts, const std::string& who, const snapshot& before) {
    auto s = state();
    for (auto p : parts)
      if (s[p].node == who || s[p].node.empty() || s[p].epoch <= before[p].epoch)
        return false;
    return true;
  }
};

} // namespace

TEST_F(cluster, KillNineOfOneNodeHoldsTheGateClosedUntilTheSurvivorsTakeOver) {
  ASSERT_NO_FATAL_FAILURE(start_three());
  auto before = state();
  auto lost = owned_by(before, "node-b");
  ASSERT_FALSE(lost.empty());
  nodes["node-b"].proc->signal(SIGKILL);
  nodes["node-b"].proc->wait();
  // Within three heartbeats its statuses expire; from then until the group
  // (after the 6 s session timeout) moves its partitions, every survivor
  // answers 503 and names them.
  ASSERT_TRUE(eventually([&] { return no_status_of(lost); }, 10s)) << logs();
  std::string last;
  EXPECT_TRUE(eventually([&] { return survivors_hold_closed("node-b", lost, &last); }, 3s))
    << last << logs();
  auto during = state();
  for (auto p : lost)
    EXPECT_EQ(during[p].epoch, before[p].epoch) << "partition " << p
                                                 << " moved before the check: it proves nothing";
  ASSERT_TRUE(eventually([&] { return taken_over(lost, "node-b", before); }, 60s)) << logs();
  EXPECT_TRUE(eventually([&] { return all_ready_and_owning(); }, 60s)) << logs();
  finish();
}

TEST_F(cluster, SigstopPastTheSessionTimeoutFencesTheStaleNodeWhichRejoins) {
  ASSERT_NO_FATAL_FAILURE(start_three());
  auto before = state();
  auto lost = owned_by(before, "node-c");
  ASSERT_FALSE(lost.empty());
  size_t resumed_at = 0;
  {
    test::pause_guard paused{nodes["node-c"].proc->pid()};
    // While it is stopped, its statuses expire and the others hold its
    // partitions closed (before the session timeout moves them).
    ASSERT_TRUE(eventually([&] { return no_status_of(lost); }, 10s)) << logs();
    std::string last;
    EXPECT_TRUE(eventually([&] { return survivors_hold_closed("node-c", lost, &last); }, 3s))
      << last << logs();
    // The group moves them; the survivors open the gate again without it.
    ASSERT_TRUE(eventually([&] { return taken_over(lost, "node-c", before); }, 60s)) << logs();
    EXPECT_TRUE(eventually([&] {
      for (auto* name : {"node-a", "node-b"}) {
        int st = 0;
        readyz(name, &st);
        if (st != 200)
          return false;
      }
      return true;
    }, 60s)) << logs();
    resumed_at = slurp(nodes["node-c"].log).size();
    paused.resume();
  }
  // It wakes up stale.  Either a write of a partition it lost comes first and
  // is refused (`fenced`, and it gives the partition up), or librdkafka's
  // report of the lost assignment does and it revokes them before writing:
  // which one wins is a race inside the woken process.  In both cases the
  // sampler checks that no checkpoint moved back and that no status of its
  // old epoch was written after the new owners' claims.  Then it rejoins
  // the group, which gives it partitions again.
  std::string outcome;
  EXPECT_TRUE(eventually([&] {
    auto l = slurp(nodes["node-c"].log).substr(resumed_at);
    if (l.find("fenced") != std::string::npos) {
      outcome = "fenced";
      return true;
    }
    // "revoked partitions 0-7", "revoked partitions 8-11", "revoked partitions 3,5"
    std::set<int> revoked;
    for (auto pos = l.find("revoked partitions "); pos != std::string::npos;
         pos = l.find("revoked partitions ", pos + 1)) {
      std::stringstream list{l.substr(pos + 19, l.find('\n', pos) - pos - 19)};
      for (std::string x; std::getline(list, x, ',');) {
        auto dash = x.find('-');
        int lo = std::atoi(x.c_str()), hi = dash == std::string::npos ? lo
                                                                       : std::atoi(x.c_str() + dash + 1);
        for (int q = lo; q <= hi && q < partitions; ++q)
          revoked.insert(q);
      }
    }
    if (std::includes(revoked.begin(), revoked.end(), lost.begin(), lost.end())) {
      outcome = "revoked";
      return true;
    }
    return false;
  }, 30s)) << logs();
  std::printf("[cluster] the woken node: %s\n", outcome.c_str());
  EXPECT_TRUE(eventually([&] { return !owned_by(state(), "node-c").empty(); }, 60s)) << logs();
  EXPECT_TRUE(eventually([&] { return all_ready_and_owning(); }, 60s)) << logs();
  finish();
}

TEST_F(cluster, AFourthNodeJoinsAndTakesItsShare) {
  ASSERT_NO_FATAL_FAILURE(start_three());
  start("node-d");
  EXPECT_TRUE(eventually([&] {
    auto s = state();
    for (auto* name : {"node-a", "node-b", "node-c", "node-d"})
      if (owned_by(s, name).empty())
        return false;
    return all_ready_and_owning();
  }, 90s)) << logs();
  finish();
}

TEST_F(cluster, RollingRestartOfEveryNode) {
  ASSERT_NO_FATAL_FAILURE(start_three());
  for (auto* name : {"node-a", "node-b", "node-c"}) {
    auto before = state();
    auto moved = owned_by(before, name);
    ASSERT_FALSE(moved.empty()) << name;
    auto& n = nodes[name];
    n.proc->signal(SIGTERM);
    auto rc = n.proc->wait_for(60s);
    ASSERT_TRUE(rc) << name << " did not stop" << logs();
    EXPECT_EQ(*rc, 0) << logs();
    // It deleted its statuses as it left; the survivors take its partitions.
    EXPECT_TRUE(no_status_of(moved) || taken_over(moved, name, before)) << logs();
    ASSERT_TRUE(eventually([&] { return taken_over(moved, name, before); }, 60s)) << logs();
    EXPECT_TRUE(eventually([&] { return all_ready_and_owning(); }, 60s)) << logs();
    start(name);
    ASSERT_TRUE(eventually([&] {
      return !owned_by(state(), name).empty() && all_ready_and_owning();
    }, 90s)) << logs();
  }
  finish();
}

// The fenced path, made deterministic: which comes first when a SIGSTOPped
// node wakes up (a write, or librdkafka's report of the lost assignment) is a
// race, so here a newer claim the owner never heard of is made directly in
// Redis (as a claim by a node the group does not know would be).  The owner's
// checkpoint writes of that partition must be refused from that instant on
// while the producer keeps appending to it, and every node must hold the
// partition closed; when the owner leaves, the group's next owner claims
// above the intruder's epoch and everything is projected.
TEST_F(cluster, ANewerClaimFencesTheOwnersCheckpointWrites) {
  ASSERT_NO_FATAL_FAILURE(start_three());
  auto owned = owned_by(state(), "node-c");
  ASSERT_FALSE(owned.empty());
  int p = *owned.begin();
  auto c = test::redis_conn();
  // One step: the claim and the checkpoint at that instant.
  auto claimed = test::redis_cmd(*c, {"EVAL", R"(
local e = redis.call('HINCRBY', KEYS[1], 'epoch', 1)
redis.call('HSET', KEYS[1], 'node', 'intruder', 'heartbeat_ms', ARGV[1])
return e .. ' ' .. (redis.call('HGET', KEYS[2], 'next_offset') or '-1')
)", "2", redis::owner_key(ns, topic, p), redis::checkpoint_key(ns, topic, p),
                                      std::to_string(now_ms())});
  auto space = claimed.find(' ');
  ASSERT_NE(space, std::string::npos) << claimed;
  auto intruder_epoch = std::stoll(claimed.substr(0, space));
  auto cp_at_claim = std::stoll(claimed.substr(space + 1));
  auto& logc = nodes["node-c"].log;
  auto fenced_line = "partition " + std::to_string(p) + ": fenced";
  EXPECT_TRUE(eventually([&] { return slurp(logc).find(fenced_line) != std::string::npos; }, 30s))
    << logs();
  // Every node (node-c too) holds it closed, naming the intruder.
  std::string last;
  EXPECT_TRUE(eventually([&] {
    for (auto& [name, n] : nodes) {
      int st = 0;
      auto j = readyz(name, &st);
      last = name + " " + std::to_string(st) + " " + (j.is_discarded() ? "" : j.dump());
      if (st != 503 || held_closed(j).count(p) == 0 || last.find("intruder") == std::string::npos)
        return false;
    }
    return true;
  }, 5s)) << last << logs();
  // The producer kept appending to it; no write of node-c got through.
  auto lso = read_lso();
  ASSERT_TRUE(lso);
  EXPECT_GT((*lso)[p], cp_at_claim) << "nothing was appended meanwhile: the check proves nothing";
  EXPECT_EQ(state()[p].checkpoint, cp_at_claim) << logs();
  EXPECT_EQ(state()[p].node, "intruder");
  // node-c leaves; the group's next owner claims above the intruder.
  nodes["node-c"].proc->signal(SIGTERM);
  auto rc = nodes["node-c"].proc->wait_for(60s);
  ASSERT_TRUE(rc) << logs();
  EXPECT_EQ(*rc, 0) << logs();
  EXPECT_TRUE(eventually([&] {
    auto s = state();
    return (s[p].node == "node-a" || s[p].node == "node-b") && s[p].epoch > intruder_epoch;
  }, 60s)) << logs();
  EXPECT_TRUE(eventually([&] { return all_ready_and_owning(); }, 60s)) << logs();
  finish();
}
