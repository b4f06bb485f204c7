// Broker failover and truncation on the replicated set (scripts/services
// start --ha), issue 14 item 4, the Kafka half:
//
// - Unclean truncation: a topic on two of the three brokers with
//   unclean.leader.election.enable=true and min.insync.replicas=1; the
//   follower is paused (SIGSTOP) until the controller fences it and the ISR is
//   the leader alone; records only the leader has are projected and
//   checkpointed; the leader is killed, the follower resumed and elected
//   uncleanly, the old leader restarted (it truncates to the new leader's
//   log).  (a) Not refilled: the running `run` node refuses (exit 3) and so
//   does `catch-up`, naming the partition, the stored next_offset and the new
//   high watermark.  (b) Refilled past the checkpoint before the restart:
//   `catch-up` refuses through the leader-epoch check (KIP-320) and projects
//   none of the new records that reuse the old offsets.
// - kill -9 and a controlled shutdown (stop-broker) of a partition's leader
//   under a live transactional producer while a `run` node consumes: the node
//   only lags, /readyz is recorded, checkpoints sampled during the fault never
//   pass their data, and afterwards audit is consistent and Redis equals the
//   test's model.
//
// The projection writes to a private redis-server of each test (the Redis
// half of issue 14 has its own suites); Kafka is the HA set's cluster.
// Skipped unless an HA set is up (see ha_env); scripts/test --ha runs these.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/dispatch.hpp"
#include "kafka/admin.hpp"
#include "kafka/producer.hpp"
#include "messages/types.hpp"
#include "redis/stores.hpp"
#include "tests/support/integration.hpp"

using namespace std::chrono_literals;
using qsp::describe;
using qsp::test::eventually;
using qsp::test::slurp;

namespace {

const qsp::test::services& ha() { return *qsp::test::ha_env(); }

uint64_t seed() {
  static const uint64_t s = [] {
    const char* env = std::getenv("QSP_FAULT_SEED");
    uint64_t v = env != nullptr ? std::stoull(env)
                                : static_cast<uint64_t>(std::chrono::system_clock::now()
                                                          .time_since_epoch().count());
    std::fprintf(stderr, "broker failover seed: QSP_FAULT_SEED=%llu\n",
                 static_cast<unsigned long long>(v));
    return v;
  }();
  return s;
}

double secs_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string ids_text(const std::vector<int32_t>& v) {
  std::string s = "{";
  for (auto id : v)
    s += (s.size() > 1 ? "," : "") + std::to_string(id);
  return s + "}";
}

/// Restarts broker `id` when it goes out of scope still marked as down, so a
/// failed assertion leaves the set whole for the next test.
class broker_guard {
public:
  explicit broker_guard(int id) : id_(id) {}
  ~broker_guard() {
    if (down_)
      qsp::test::services_cmd(ha(), "start-broker " + std::to_string(id_));
  }
  int kill() {
    down_ = true;
    return qsp::test::services_cmd(ha(), "kill-broker " + std::to_string(id_));
  }
  int stop() {
    down_ = true;
    return qsp::test::services_cmd(ha(), "stop-broker " + std::to_string(id_));
  }
  int start() {
    down_ = false;
    return qsp::test::services_cmd(ha(), "start-broker " + std::to_string(id_));
  }

private:
  int id_;
  bool down_ = false;
};

/// A topic on the HA cluster, a private Redis and the node's arguments.
struct failover : ::testing::Test {
  std::string topic = qsp::test::unique_name("ha-failover");
  std::string ns = qsp::test::unique_name("ns");
  std::string convs = qsp::test::unique_name("convs") + ":";
  int partitions = 1;
  std::optional<qsp::test::private_redis> redis_server;
  qsp::kafka::client_settings cfg;
  std::unique_ptr<qsp::kafka::admin> admin;
  uint16_t http_port = 0;
  std::mt19937_64 rng{seed() ^ std::hash<std::string>{}(
                        ::testing::UnitTest::GetInstance()->current_test_info()->name())};

  void SetUp() override {
    REQUIRE_HA_SET();
    redis_server.emplace("ha-failover", std::vector<std::string>{});
    ASSERT_TRUE(redis_server->wait_ready());
    cfg = qsp::test::kafka_client(ha());
    cfg.timeout_ms = 30000; // a killed leader is fenced after 3 s; then elections
    auto a = qsp::kafka::admin::make(cfg);
    ASSERT_TRUE(a) << describe(a.error());
    admin = std::move(*a);
  }
  void TearDown() override {
    if (admin)
      (void) admin->delete_topic(topic);
  }

  void create_topic(int parts, int rf, std::vector<std::string> configs) {
    partitions = parts;
    std::vector<std::string> a{"create-topic", ha().kafka_bootstrap, topic, std::to_string(parts),
                               "--replication-factor=" + std::to_string(rf)};
    for (auto& c : configs)
      a.push_back("--config=" + c);
    auto r = qsp::test::run_program(QSP_BIN_DIR "/qsp-devtool", a);
    ASSERT_EQ(r.rc, 0) << r.err;
    std::string why;
    for (int p = 0; p < parts; ++p)
      ASSERT_TRUE(eventually([&] {
        auto part = qsp::test::describe_partition(cfg, topic, p, &why);
        return part && part->leader > 0 && part->replicas.size() == static_cast<size_t>(rf)
               && part->isr.size() == static_cast<size_t>(rf);
      }, 30s)) << topic << "/" << p << ": not " << rf << " replicas in sync with a leader: " << why;
  }

  std::unique_ptr<qsp::redis::connection> redis() {
    return qsp::test::redis_conn_at("127.0.0.1:" + std::to_string(redis_server->port));
  }

  std::vector<std::string> args(const std::string& cmd, std::vector<std::string> extra = {}) {
    std::vector<std::string> a{cmd,
                               "--projection.dispatch-topic=" + topic,
                               "--projection.partition-count=" + std::to_string(partitions),
                               "--projection.namespace=" + ns,
                               "--projection.convs-prefix=" + convs,
                               "--kafka.bootstrap-servers=" + ha().kafka_bootstrap,
                               "--redis.host=127.0.0.1",
                               "--redis.port=" + std::to_string(redis_server->port),
                               "--http.listen=\"\""};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  std::vector<std::string> run_args() {
    auto a = args("run");
    http_port = qsp::test::free_port();
    qsp::test::set_option(a, "http.listen", "127.0.0.1:" + std::to_string(http_port));
    return a;
  }

  /// A field of partition p's checkpoint or epoch sidecar ("" if absent).
  std::string stored(qsp::redis::connection& c, const std::string& key, const std::string& field) {
    return qsp::test::redis_cmd(c, {"HGET", key, field});
  }
  int64_t checkpoint(qsp::redis::connection& c, int p) {
    auto v = stored(c, qsp::redis::checkpoint_key(ns, topic, p), "next_offset");
    return v.empty() || v.rfind("ERR", 0) == 0 ? -1 : std::stoll(v);
  }

  /// The partition's high watermark (read_uncommitted), -1 if unknown.  A
  /// fresh client with a short timeout per call: with a broker down, a
  /// long-lived one may wait out its timeout on a request to the dead one.
  int64_t high_watermark(int p) {
    auto short_cfg = cfg;
    short_cfg.timeout_ms = 5000;
    auto a = qsp::kafka::admin::make(short_cfg);
    if (!a)
      return -1;
    auto st = (*a)->inspect(topic);
    if (!st)
      last_inspect_error = describe(st.error());
    return st && static_cast<int>(st->true_high.size()) > p ? st->true_high[p] : int64_t{-1};
  }
  std::string last_inspect_error;

  std::optional<qsp::test::partition_info> part(int p, std::string* why = nullptr) {
    return qsp::test::describe_partition(cfg, topic, p, why);
  }
};

/// Dispatch number i of the first history (users u0..u49, conversations c-*).
qsp::core::dispatch first_history(uint64_t i) { return qsp::test::make_dispatch(i, 50); }

/// Dispatch number i of the history written after the truncation: its own
/// users and conversations, so a projected one shows in Redis.
qsp::core::dispatch new_history(uint64_t i) {
  qsp::core::dispatch d;
  d.conversation_id = "refill-" + std::to_string(i);
  d.created_at = 1733150000000 + static_cast<int64_t>(i);
  d.recipients = {"refill-u" + std::to_string(i % 7)};
  return d;
}

void produce(const qsp::kafka::client_settings& cfg, const std::string& topic, uint64_t from,
             uint64_t n, qsp::core::dispatch (*make)(uint64_t)) {
  auto p = qsp::kafka::producer::make(cfg);
  ASSERT_TRUE(p) << describe(p.error());
  for (uint64_t i = from; i < from + n; ++i)
    ASSERT_TRUE(p->send(topic, 0, qsp::core::encode_json(make(i))));
  auto ok = p->flush();
  ASSERT_TRUE(ok) << describe(ok.error());
}

/// What the unclean scenario leaves for its two variants.
struct truncation {
  int leader = -1, follower = -1;
  int64_t checkpoint = -1;      ///< stored next_offset after projecting the leader-only records
  std::string epoch;            ///< the stored leader epoch beside it
  int64_t new_high = -1;        ///< the high watermark after the unclean election
};

struct unclean : failover {
  static constexpr uint64_t replicated = 200, leader_only = 100;

  /// Runs the scenario up to the old leader's restart.  With `running`, a
  /// `run` node projects the leader-only records and must refuse once the
  /// follower leads (its exit code and log go to `run_rc`/`run_log`).
  void truncate(truncation& t, bool running, int* run_rc = nullptr, std::string* run_log = nullptr) {
    create_topic(1, 2, {"min.insync.replicas=1", "unclean.leader.election.enable=true"});
    std::string why;
    auto p0 = part(0, &why);
    ASSERT_TRUE(p0) << why;
    t.leader = p0->leader;
    for (auto id : p0->replicas)
      if (id != t.leader)
        t.follower = id;
    ASSERT_GT(t.follower, 0) << ids_text(p0->replicas);
    std::printf("%s: replicas %s, leader %d, follower %d\n", topic.c_str(),
                ids_text(p0->replicas).c_str(), t.leader, t.follower);

    produce(cfg, topic, 0, replicated, first_history);
    ASSERT_TRUE(eventually([&] { return high_watermark(0) == int64_t(replicated); }, 30s))
      << high_watermark(0);

    // The follower stops fetching; the controller fences it (no heartbeat for
    // broker.session.timeout.ms) and the ISR shrinks to the leader.
    int fpid = qsp::test::kafka_broker_pid(ha(), t.follower);
    ASSERT_GT(fpid, 0) << "no pid for broker " << t.follower << " in " << ha().env_file;
    qsp::test::pause_guard paused{fpid};
    ASSERT_TRUE(paused.paused());
    auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(eventually([&] {
      auto p = part(0, &why);
      return p && p->leader == t.leader && p->isr == std::vector<int32_t>{t.leader};
    }, 30s)) << "the ISR did not shrink to the leader " << t.leader << ": " << why;
    std::printf("ISR = {%d} %.1f s after pausing broker %d\n", t.leader, secs_since(t0), t.follower);

    // Records only the leader has (acks=all with an ISR of one).
    produce(cfg, topic, replicated, leader_only, first_history);
    const int64_t end = replicated + leader_only;
    ASSERT_TRUE(eventually([&] { return high_watermark(0) == end; }, 30s)) << high_watermark(0);

    auto c = redis();
    std::optional<qsp::test::node_process> node;
    std::string logf = "/tmp/" + qsp::test::unique_name("unclean-run") + ".log";
    if (running) {
      node.emplace(run_args(), logf);
      ASSERT_TRUE(eventually([&] { return checkpoint(*c, 0) == end; }, 60s))
        << "the run node did not checkpoint " << end << ": " << checkpoint(*c, 0) << "\n"
        << slurp(logf);
    } else {
      auto r = qsp::test::run_cli(args("catch-up"));
      ASSERT_EQ(r.rc, 0) << r.err;
    }
    t.checkpoint = checkpoint(*c, 0);
    ASSERT_EQ(t.checkpoint, end);
    t.epoch = stored(*c, qsp::redis::epoch_key(ns, topic, 0), "leader_epoch");
    ASSERT_FALSE(t.epoch.empty());
    expect_projected(0, replicated + leader_only);

    // The leader dies; the follower comes back and is elected uncleanly: it
    // lacks the last `leader_only` records.
    broker_guard old_leader{t.leader};
    ASSERT_EQ(old_leader.kill(), 0);
    t0 = std::chrono::steady_clock::now();
    paused.resume();
    bool elected = eventually([&] {
      auto p = part(0, &why);
      return p && p->leader == t.follower;
    }, 60s);
    ASSERT_TRUE(elected) << "broker " << t.follower << " was not elected (unclean) within 60 s of "
                         << "its resume: " << why;
    std::printf("broker %d leads (unclean) %.1f s after its resume\n", t.follower, secs_since(t0));
    ASSERT_TRUE(eventually([&] { return high_watermark(0) >= 0; }, 30s)) << last_inspect_error;
    t.new_high = high_watermark(0);
    EXPECT_EQ(t.new_high, int64_t(replicated)) << "the new leader's log end";

    if (running) {
      auto rc = node->wait_for(60s);
      ASSERT_TRUE(rc.has_value()) << "the run node still runs 60 s after the truncation\n"
                                  << slurp(logf);
      std::printf("the run node exited %d %.1f s after the follower's resume\n", *rc,
                  secs_since(t0));
      *run_rc = *rc;
      *run_log = slurp(logf);
    }

    // The old leader rejoins as a follower and truncates its log.
    t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(old_leader.start(), 0) << "start-broker " << t.leader;
    ASSERT_TRUE(eventually([&] {
      auto p = part(0, &why);
      return p && p->leader == t.follower && p->isr.size() == 2;
    }, 60s)) << "broker " << t.leader << " did not rejoin the ISR: " << why;
    std::printf("broker %d back in the ISR %.1f s after its start\n", t.leader, secs_since(t0));
    EXPECT_EQ(high_watermark(0), t.new_high);
    EXPECT_EQ(checkpoint(*c, 0), t.checkpoint) << "the checkpoint moved";
  }

  /// Redis holds exactly the first history's records [0, n) (no refill record).
  void expect_projected(uint64_t from, uint64_t n) {
    qsp::test::model m;
    for (uint64_t i = from; i < n; ++i)
      qsp::test::apply(m, first_history(i));
    auto c = redis();
    size_t differences = 0;
    for (auto& [user, cv] : m) {
      auto got = qsp::test::zset(*c, convs + user);
      if (got != cv) {
        ++differences;
        ADD_FAILURE() << user << ": Redis differs from the model of records [0, " << n << ")";
      }
    }
    for (int u = 0; u < 7; ++u)
      EXPECT_EQ(qsp::test::redis_cmd(*c, {"EXISTS", convs + "refill-u" + std::to_string(u)}), "0")
        << "records of the new history were projected";
    EXPECT_EQ(differences, 0u);
  }
};

} // namespace

TEST_F(unclean, NotRefilledTheRunningNodeAndTheRestartRefuse) {
  truncation t;
  int run_rc = -1;
  std::string run_log;
  ASSERT_NO_FATAL_FAILURE(truncate(t, true, &run_rc, &run_log));
  EXPECT_EQ(run_rc, 3) << run_log;
  std::printf("the running node's refusal:\n%s\n", run_log.c_str());
  EXPECT_NE(run_log.find("partition 0"), std::string::npos) << run_log;

  auto r = qsp::test::run_cli(args("catch-up"));
  std::printf("catch-up after the truncation (rc %d):\n%s\n", r.rc, r.err.c_str());
  EXPECT_EQ(r.rc, 3) << r.err;
  EXPECT_NE(r.err.find("partition 0"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(std::to_string(t.checkpoint)), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(std::to_string(t.new_high)), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("above the high watermark"), std::string::npos) << r.err;

  // A `run` restart refuses the same way, and nothing moved.
  auto logf = "/tmp/" + qsp::test::unique_name("unclean-rerun") + ".log";
  qsp::test::node_process again{run_args(), logf};
  auto rc = again.wait_for(60s);
  ASSERT_TRUE(rc.has_value()) << slurp(logf);
  EXPECT_EQ(*rc, 3) << slurp(logf);
  auto c = redis();
  EXPECT_EQ(checkpoint(*c, 0), t.checkpoint);
  expect_projected(0, replicated + leader_only);
}

TEST_F(unclean, RefilledPastTheCheckpointTheRestartRefusesByLeaderEpoch) {
  truncation t;
  ASSERT_NO_FATAL_FAILURE(truncate(t, false));
  // New records reuse the lost offsets and pass the checkpoint: the offsets
  // are in range again, so only the leader epoch tells the histories apart.
  const uint64_t refill = uint64_t(t.checkpoint - t.new_high) + 50;
  produce(cfg, topic, 0, refill, new_history);
  ASSERT_TRUE(eventually([&] { return high_watermark(0) == t.new_high + int64_t(refill); }, 30s))
    << high_watermark(0);
  ASSERT_GT(high_watermark(0), t.checkpoint);

  auto r = qsp::test::run_cli(args("catch-up"));
  std::printf("catch-up after the refilled truncation (rc %d):\n%s\n", r.rc, r.err.c_str());
  EXPECT_EQ(r.rc, 3) << r.err;
  EXPECT_NE(r.err.find("partition 0: field leader_epoch"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("truncat"), std::string::npos) << r.err;
  // librdkafka's text: "... at offset N (leader epoch E): broker end offset is X ..."
  EXPECT_NE(r.err.find("offset " + std::to_string(t.checkpoint) + " (leader epoch " + t.epoch + ")"),
            std::string::npos) << "the stored offset and epoch: " << r.err;
  EXPECT_NE(r.err.find("end offset is " + std::to_string(t.new_high)), std::string::npos)
    << "the broker's end offset for the stored epoch: " << r.err;
  auto c = redis();
  EXPECT_EQ(checkpoint(*c, 0), t.checkpoint) << "the checkpoint moved past a truncation";
  expect_projected(0, replicated + leader_only);

  // `run` refuses the same start.
  auto logf = "/tmp/" + qsp::test::unique_name("refill-run") + ".log";
  qsp::test::node_process node{run_args(), logf};
  auto rc = node.wait_for(60s);
  ASSERT_TRUE(rc.has_value()) << slurp(logf);
  EXPECT_EQ(*rc, 3) << slurp(logf);
  EXPECT_NE(slurp(logf).find("field leader_epoch"), std::string::npos) << slurp(logf);
  EXPECT_EQ(checkpoint(*c, 0), t.checkpoint);
  expect_projected(0, replicated + leader_only);

  // The control: without the stored epoch (a checkpoint written before
  // KIP-320 support) nothing else notices, and the start skips the new
  // history's records below the checkpoint; only the epoch refused above.
  qsp::test::redis_cmd(*c, {"DEL", qsp::redis::epoch_key(ns, topic, 0)});
  r = qsp::test::run_cli(args("catch-up"));
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(checkpoint(*c, 0), high_watermark(0));
  int projected_new = 0;
  for (int u = 0; u < 7; ++u)
    projected_new += qsp::test::redis_cmd(*c, {"EXISTS", convs + "refill-u" + std::to_string(u)})
                     == "1";
  EXPECT_GT(projected_new, 0) << "the records past the checkpoint were not projected";
  EXPECT_EQ(qsp::test::redis_cmd(*c, {"ZSCORE", convs + "refill-u0", "refill-0"}), "")
    << "refill-0 reuses offset " << t.new_high << ", below the checkpoint: it is skipped";
}

namespace {

/// A string field of a flat JSON object, "" if absent (enough for /readyz's state).
std::string json_field(const std::string& body, const std::string& key) {
  auto at = body.find("\"" + key + "\":\"");
  if (at == std::string::npos)
    return {};
  at += key.size() + 4;
  return body.substr(at, body.find('"', at) - at);
}

/// The dispatch number of a first-history record (make_dispatch's created_at).
uint64_t id_of(const qsp::core::dispatch& d) {
  return static_cast<uint64_t>(d.created_at - 1733140000000);
}

struct under_load : failover {
  static constexpr int users = 50;

  /// One sample taken during the run: the checkpoints, then every user's
  /// sorted set (read after them, so it holds at least what was there when
  /// the checkpoints were read).
  struct sample {
    std::map<int, int64_t> cps;
    std::map<std::string, std::map<std::string, int64_t>> zsets;
  };

  /// Transactions of a live transactional producer and what became of them.
  struct load {
    std::mutex mu;
    std::set<uint64_t> committed, aborted, ambiguous;
    std::atomic<int> commits{0}, failures{0};
    std::atomic<bool> stop{false};
    std::vector<std::string> errors; // the first few, for the report
  };

  void produce_transactions(load& l, uint64_t txn_seed) {
    std::mt19937_64 r{txn_seed};
    auto make = [&]() -> std::optional<qsp::kafka::producer> {
      for (int attempt = 0; attempt < 5 && !l.stop; ++attempt) {
        auto p = qsp::kafka::producer::make(cfg, topic + "-tx");
        if (p)
          return std::move(*p);
        std::lock_guard<std::mutex> g{l.mu};
        if (l.errors.size() < 10)
          l.errors.push_back("init: " + describe(p.error()));
      }
      return std::nullopt;
    };
    auto p = make();
    if (!p) {
      ADD_FAILURE() << "no transactional producer";
      return;
    }
    uint64_t next = 0;
    while (!l.stop) {
      int n = std::uniform_int_distribution<int>{10, 60}(r);
      std::vector<uint64_t> ids;
      std::string failed;
      if (auto ok = p->begin(); !ok)
        failed = "begin: " + describe(ok.error());
      for (int k = 0; k < n && failed.empty(); ++k) {
        uint64_t i = next++;
        ids.push_back(i);
        if (auto ok = p->send(topic, static_cast<int32_t>(i % 2), qsp::core::encode_json(first_history(i)));
            !ok)
          failed = "send: " + describe(ok.error());
      }
      if (failed.empty())
        if (auto ok = p->flush(); !ok)
          failed = "flush: " + describe(ok.error());
      if (failed.empty())
        if (auto ok = p->commit(); !ok)
          failed = "commit: " + describe(ok.error());
      std::lock_guard<std::mutex> g{l.mu};
      if (failed.empty()) {
        l.committed.insert(ids.begin(), ids.end());
        ++l.commits;
        continue;
      }
      ++l.failures;
      if (l.errors.size() < 10)
        l.errors.push_back(failed);
      if (p->abort()) {
        l.aborted.insert(ids.begin(), ids.end());
      } else {
        // Outcome unknown (a commit may have reached the coordinator): a new
        // producer on the same id fences this one and completes or aborts it.
        l.ambiguous.insert(ids.begin(), ids.end());
        p.reset();
        p = make();
        if (!p) {
          ADD_FAILURE() << "no transactional producer after a failure";
          return;
        }
      }
    }
  }

  /// kill -9 (hard) or stop-broker (controlled shutdown) of partition 0's
  /// leader under a live transactional producer while `run` consumes.
  void leader_fails_under_load(bool hard) {
    create_topic(2, 3, {});
    std::string why;
    auto p0 = part(0, &why);
    ASSERT_TRUE(p0) << why;
    const int victim = p0->leader;

    auto logf = "/tmp/" + qsp::test::unique_name(hard ? "kill-leader" : "stop-leader") + ".log";
    qsp::test::node_process node{run_args(), logf};
    ASSERT_TRUE(qsp::test::readyz_reaches(http_port, 200, 60s)) << slurp(logf);

    load l;
    std::thread producer{[&] { produce_transactions(l, rng()); }};
    struct joiner {
      load& l;
      std::thread& t;
      ~joiner() {
        l.stop = true;
        if (t.joinable())
          t.join();
      }
    } join_producer{l, producer};

    // The sampler: /readyz transitions and checkpoints with the data, every 100 ms.
    std::vector<sample> samples;
    std::vector<std::pair<double, std::string>> readyz; // seconds since the start, answer
    std::atomic<bool> sampling{true};
    auto t_start = std::chrono::steady_clock::now();
    double t_fault = 0; // seconds since the start; set before the fault, read after the join
    std::thread sampler{[&] {
      auto c = redis();
      int last = -1;
      while (sampling && samples.size() < 3000) {
        auto reply = qsp::test::http_get(http_port, "/readyz", 2s);
        if (reply.status != last) {
          last = reply.status;
          readyz.emplace_back(secs_since(t_start), std::to_string(reply.status) + " "
                                                     + json_field(reply.body, "state") + " "
                                                     + json_field(reply.body, "last_error"));
        }
        sample s;
        for (int p = 0; p < partitions; ++p)
          s.cps[p] = checkpoint(*c, p);
        for (int u = 0; u < users; ++u)
          s.zsets["u" + std::to_string(u)] = qsp::test::zset(*c, convs + "u" + std::to_string(u));
        samples.push_back(std::move(s));
        std::this_thread::sleep_for(100ms); // the sampling rate, not a synchronisation
      }
    }};
    struct stopper {
      std::atomic<bool>& flag;
      std::thread& t;
      ~stopper() {
        flag = false;
        if (t.joinable())
          t.join();
      }
    } stop_sampler{sampling, sampler};

    auto c = redis();
    ASSERT_TRUE(eventually([&] { return l.commits >= 5 && checkpoint(*c, 0) > 0; }, 60s))
      << "no load before the fault: " << l.commits << " commits\n" << slurp(logf);

    broker_guard guard{victim};
    t_fault = secs_since(t_start);
    ASSERT_EQ(hard ? guard.kill() : guard.stop(), 0) << (hard ? "kill-broker " : "stop-broker ")
                                                     << victim;
    auto t0 = std::chrono::steady_clock::now();
    int at_fault = l.commits;
    ASSERT_TRUE(eventually([&] {
      auto p = part(0, &why);
      return p && p->leader > 0 && p->leader != victim;
    }, 30s)) << "no new leader for partition 0: " << why;
    double moved = secs_since(t0);
    ASSERT_TRUE(eventually([&] { return l.commits >= at_fault + 5; }, 90s))
      << "the producer committed " << (l.commits - at_fault) << " transactions after the fault";
    double committing = secs_since(t0);
    auto cp_at = checkpoint(*c, 0);
    ASSERT_TRUE(eventually([&] { return checkpoint(*c, 0) > cp_at; }, 90s))
      << "the node's checkpoint of partition 0 stays at " << cp_at << " after the fault\n"
      << slurp(logf);
    double projecting = secs_since(t0);
    EXPECT_FALSE(node.wait_for(0ms).has_value()) << "the node exited during the fault\n"
                                                 << slurp(logf);

    ASSERT_EQ(guard.start(), 0) << "start-broker " << victim;
    for (int p = 0; p < partitions; ++p)
      EXPECT_TRUE(eventually([&] {
        auto pi = part(p, &why);
        return pi && pi->isr.size() == 3;
      }, 60s)) << "broker " << victim << " did not rejoin the ISR of partition " << p << ": "
               << why;
    int at_restart = l.commits;
    ASSERT_TRUE(eventually([&] { return l.commits >= at_restart + 3; }, 60s));
    l.stop = true;
    producer.join();

    // The node catches up to the end of the committed log and stays up.
    std::vector<int64_t> lso(partitions, -1);
    ASSERT_TRUE(eventually([&] {
      auto a = qsp::kafka::admin::make(cfg);
      auto st = a ? (*a)->inspect(topic) : caf::expected<qsp::broker_state>{caf::error{}};
      if (!st)
        return false;
      for (int p = 0; p < partitions; ++p)
        lso[p] = st->marks[p].high;
      for (int p = 0; p < partitions; ++p)
        if (checkpoint(*c, p) != lso[p])
          return false;
      return true;
    }, 120s)) << "the node did not catch up: checkpoints " << checkpoint(*c, 0) << ","
              << checkpoint(*c, 1) << " end " << lso[0] << "," << lso[1] << "\n" << slurp(logf);
    sampling = false;
    sampler.join();
    auto log = slurp(logf);
    // (librdkafka's "Connection refused" lines are no refusal of the node's.)
    EXPECT_EQ(log.find("-> refused"), std::string::npos) << log;
    EXPECT_EQ(log.find("] refused: "), std::string::npos) << log;
    int node_rc = node.stop();
    EXPECT_EQ(node_rc, 0) << slurp(logf);
    int refusals = (node_rc == 3 ? 1 : 0) + (log.find("] refused: ") != std::string::npos ? 1 : 0);

    // The committed log, as a read_committed consumer reads it back.
    std::map<int, std::vector<std::pair<int64_t, qsp::core::dispatch>>> records;
    std::map<uint64_t, int> seen;
    qsp::core::json_decoder dec;
    for (int p = 0; p < partitions; ++p) {
      auto recs = qsp::test::read_committed_log(cfg, topic, p, 60s, &why);
      ASSERT_TRUE(recs) << why;
      for (auto& [off, value] : *recs) {
        qsp::core::dispatch d;
        std::string err;
        ASSERT_TRUE(dec.decode(value, d, err)) << err;
        ++seen[id_of(d)];
        records[p].emplace_back(off, d);
      }
    }
    {
      std::lock_guard<std::mutex> g{l.mu};
      for (auto id : l.committed)
        EXPECT_EQ(seen.count(id), 1u) << "committed record " << id << " is not on the log";
      for (auto id : l.aborted)
        EXPECT_EQ(seen.count(id), 0u) << "aborted record " << id << " is on the log";
      for (auto& [id, n] : seen) {
        EXPECT_EQ(n, 1) << "record " << id << " is on the log " << n << " times";
        EXPECT_TRUE(l.committed.count(id) == 1 || l.ambiguous.count(id) == 1)
          << "record " << id << " was never sent in a committed transaction";
      }
    }

    // Redis equals the model of the committed log.
    qsp::test::model m;
    for (auto& [p, recs] : records)
      for (auto& [off, d] : recs)
        qsp::test::apply(m, d);
    size_t differences = 0, lost = 0;
    for (int u = 0; u < users; ++u) {
      auto user = "u" + std::to_string(u);
      auto got = qsp::test::zset(*c, convs + user);
      for (auto& [conv, score] : m[user]) {
        auto it = got.find(conv);
        lost += it == got.end() || it->second != score;
      }
      if (got != m[user]) {
        ++differences;
        ADD_FAILURE() << user << ": Redis has " << got.size() << " conversations, the model "
                      << m[user].size();
      }
    }
    EXPECT_EQ(differences, 0u);

    // No sampled checkpoint was ahead of its data.
    size_t overshoots = 0, checked = 0;
    for (auto& s : samples)
      for (auto& [p, cp] : s.cps)
        for (auto& [off, d] : records[p]) {
          if (off >= cp)
            break;
          for (auto& u : d.recipients) {
            ++checked;
            auto& z = s.zsets[u];
            auto it = z.find(d.conversation_id);
            if (it == z.end() || it->second < d.created_at)
              ++overshoots;
          }
        }
    EXPECT_EQ(overshoots, 0u) << "entries missing below a sampled checkpoint";

    auto audit = qsp::test::run_cli(args("audit"));
    EXPECT_EQ(audit.rc, 0) << audit.out << audit.err;
    EXPECT_NE(audit.out.find("verdict: consistent"), std::string::npos) << audit.out;

    std::lock_guard<std::mutex> g{l.mu};
    std::printf("%s of broker %d (partition 0's leader): new leader after %.1f s, 5 commits "
                "after %.1f s, the node's checkpoint moved after %.1f s; transactions: %d "
                "committed, %d failed (%zu records aborted, %zu ambiguous); %zu records on the "
                "log; %zu samples, %zu entries checked below sampled checkpoints, %zu overshoots\n",
                hard ? "kill -9" : "controlled shutdown", victim, moved, committing, projecting,
                l.commits.load(), l.failures.load(), l.aborted.size(), l.ambiguous.size(),
                seen.size(), samples.size(), checked, overshoots);
    for (auto& e : l.errors)
      std::printf("  producer error: %s\n", e.c_str());
    std::printf("/readyz transitions (seconds relative to the fault):\n");
    for (auto& [at, r] : readyz)
      std::printf("  %+6.1f s  %s\n", at - t_fault, r.c_str());
    qsp::test::soak_result(hard ? "broker-kill" : "broker-controlled-shutdown", 1, seen.size(),
                           checked, lost, overshoots, refusals);
  }
};

} // namespace

TEST_F(under_load, LeaderKilledTheNodeOnlyLags) { leader_fails_under_load(true); }

TEST_F(under_load, LeaderControlledShutdownTheNodeOnlyLags) { leader_fails_under_load(false); }
