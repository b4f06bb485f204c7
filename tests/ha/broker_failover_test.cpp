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

// Skips without an HA set; fails instead when QSP_REQUIRE_HA is set
// (scripts/test --ha), so a set that is not found cannot pass as skipped.
#define REQUIRE_HA_SET()                                   \
  do {                                                     \
    std::string why_;                                      \
    if (qsp::test::ha_env(&why_) == nullptr) {             \
      if (std::getenv("QSP_REQUIRE_HA") != nullptr)        \
        FAIL() << why_;                                    \
      GTEST_SKIP() << why_;                                \
    }                                                      \
  } while (false)

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
  EXPECT_NE(r.err.find(std::to_string(t.checkpoint)), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(std::to_string(t.new_high)), std::string::npos)
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
