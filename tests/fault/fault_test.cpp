// The fault-injection suite: randomized, seeded faults against real Redis and
// Kafka, each scenario checked by an independent oracle (a model of the
// produced log diffed with Redis) and by "every checkpoint covers only
// projected records".  Seed: QSP_FAULT_SEED (printed); cycles scale with
// QSP_FAULT_CYCLES; scripts/soak repeats the suite with fresh seeds for soak runs.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <random>

#include <gtest/gtest.h>

#include "kafka/admin.hpp"
#include "kafka/producer.hpp"
#include "messages/types.hpp"
#include "redis/stores.hpp"
#include "tests/support/integration.hpp"

using namespace qsp;
using namespace std::chrono_literals;
using test::eventually;
using test::slurp;

namespace {

uint64_t seed() {
  static const uint64_t s = [] {
    const char* env = std::getenv("QSP_FAULT_SEED");
    uint64_t v = env != nullptr ? std::stoull(env)
                                : static_cast<uint64_t>(std::chrono::system_clock::now()
                                                          .time_since_epoch().count());
    std::fprintf(stderr, "fault suite seed: QSP_FAULT_SEED=%llu\n",
                 static_cast<unsigned long long>(v));
    return v;
  }();
  return s;
}

int cycles(int dflt) {
  const char* env = std::getenv("QSP_FAULT_CYCLES");
  return env != nullptr ? std::max(1, std::atoi(env)) : dflt;
}

struct totals {
  int faults = 0;
  uint64_t records = 0;
  size_t entries_checked = 0;
};

totals& stats() {
  static totals t;
  return t;
}

/// A topic, a namespace and the model of every committed record.
struct scenario : ::testing::Test {
  std::string topic = test::unique_name("fault");
  std::string ns = test::unique_name("ns");
  std::string convs = test::unique_name("convs") + ":";
  int partitions = 2;
  std::mt19937_64 rng{seed() ^ std::hash<std::string>{}(
                        ::testing::UnitTest::GetInstance()->current_test_info()->name())};
  std::unique_ptr<kafka::admin> admin;
  /// Committed records per partition in offset order, with their offsets.
  std::map<int, std::vector<std::pair<int64_t, core::dispatch>>> log;
  uint64_t next_id = 0;
  uint16_t redis_port = test::env().redis_port;

  void SetUp() override {
    auto a = kafka::admin::make(test::kafka_client());
    ASSERT_TRUE(a);
    admin = std::move(*a);
    test::create_topic(topic, partitions);
  }
  void TearDown() override { admin->delete_topic(topic); }

  std::unique_ptr<redis::connection> redis() {
    auto cfg = test::redis_settings(ns, convs);
    cfg.port = redis_port;
    auto c = redis::connection::open(cfg);
    return c ? std::move(*c) : nullptr;
  }

  /// Plain (non-transactional) records: offsets are sequential per partition.
  void produce(int per_partition) {
    auto p = kafka::producer::make(test::kafka_client());
    ASSERT_TRUE(p);
    for (int n = 0; n < per_partition; ++n)
      for (int part = 0; part < partitions; ++part) {
        auto d = test::make_dispatch(next_id++, 300);
        ASSERT_TRUE(p->send(topic, part, core::encode_json(d)));
        auto off = log[part].empty() ? 0 : log[part].back().first + 1;
        log[part].emplace_back(off, d);
      }
    ASSERT_TRUE(p->flush());
    stats().records += static_cast<uint64_t>(per_partition * partitions);
  }

  std::vector<std::string> args(const std::string& cmd, std::vector<std::string> extra = {}) {
    auto a = test::node_args(topic, partitions, ns, convs);
    a.insert(a.begin(), cmd);
    a.push_back("--redis.port=" + std::to_string(redis_port));
    a.push_back("--projection.max-batch-records=300");
    a.push_back("--projection.catch-up-max-attempts=1000");
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }

  int64_t checkpoint(redis::connection& c, int p) {
    auto v = test::redis_cmd(c, {"HGET", redis::checkpoint_key(ns, topic, p), "next_offset"});
    return v.empty() || v.rfind("ERR", 0) == 0 ? -1 : std::stoll(v);
  }

  /// Every record below each stored checkpoint is in Redis (score ≥ its created_at).
  void expect_no_overshoot() {
    auto c = redis();
    ASSERT_TRUE(c);
    test::model m;
    for (auto& [p, recs] : log) {
      auto cp = checkpoint(*c, p);
      for (auto& [off, d] : recs)
        if (off < cp)
          test::apply(m, d);
    }
    for (auto& [user, cv] : m) {
      auto got = test::zset(*c, convs + user);
      for (auto& [conv, score] : cv) {
        ++stats().entries_checked;
        auto i = got.find(conv);
        ASSERT_NE(i, got.end()) << "checkpoint overshoot: " << user << " lacks " << conv;
        ASSERT_GE(i->second, score);
      }
    }
  }

  /// Final oracle: catch-up, then `audit` says consistent and Redis equals
  /// the test's own model of the whole log.
  void expect_consistent_after_catch_up() {
    auto r = test::run_cli(args("catch-up"));
    ASSERT_EQ(r.rc, 0) << r.err;
    auto audit = test::run_cli(args("audit"));
    EXPECT_EQ(audit.rc, 0) << audit.out << audit.err;
    EXPECT_NE(audit.out.find("verdict: consistent"), std::string::npos) << audit.out;
    test::model m;
    for (auto& [p, recs] : log)
      for (auto& [off, d] : recs)
        test::apply(m, d);
    auto c = redis();
    for (auto& [user, cv] : m) {
      auto got = test::zset(*c, convs + user);
      EXPECT_EQ(got.size(), cv.size()) << user;
      for (auto& [conv, score] : cv) {
        ++stats().entries_checked;
        EXPECT_EQ(got[conv], score) << user << " " << conv;
      }
    }
  }

  std::chrono::milliseconds random_ms(int lo, int hi) {
    return std::chrono::milliseconds(std::uniform_int_distribution<int>{lo, hi}(rng));
  }
};

} // namespace

TEST_F(scenario, SigkillAtRandomPointsDuringCatchUpAndSteadyState) {
  produce(8000);
  auto logf = "/tmp/" + test::unique_name("kill") + ".log";
  for (int i = 0; i < cycles(6); ++i) {
    auto pid = test::spawn_cli(args("run"), logf);
    if (i % 2 == 1)
      produce(500); // steady-state appends while it runs
    std::this_thread::sleep_for(random_ms(50, 700));
    ::kill(pid, SIGKILL);
    test::wait_cli(pid);
    ++stats().faults;
    expect_no_overshoot();
  }
  expect_consistent_after_catch_up();
}

TEST_F(scenario, RedisKilledMidPipelineAndRestartedWithAof) {
  test::private_redis aof{"aof", {"--appendonly", "yes", "--appendfsync", "always"}};
  ASSERT_TRUE(aof.wait_ready());
  redis_port = aof.port;
  produce(6000);
  auto logf = "/tmp/" + test::unique_name("aof") + ".log";
  auto pid = test::spawn_cli(args("run", {"--redis.timeout-ms=2000"}), logf);
  for (int i = 0; i < cycles(3); ++i) {
    std::this_thread::sleep_for(random_ms(100, 600));
    aof.kill_hard();
    ++stats().faults;
    std::this_thread::sleep_for(random_ms(100, 500));
    aof.start();
    ASSERT_TRUE(aof.wait_ready());
    expect_no_overshoot();
  }
  ::kill(pid, SIGTERM);
  EXPECT_EQ(test::wait_cli(pid), 0) << slurp(logf);
  expect_consistent_after_catch_up();
}

TEST_F(scenario, AFailingZaddReplyNeverLetsTheCheckpointPassItsRecord) {
  produce(2000);
  // One user's key has the wrong type: every ZADD for it gets WRONGTYPE.
  auto c = redis();
  std::string victim = "u7";
  test::redis_cmd(*c, {"SET", convs + victim, "not a sorted set"});
  auto logf = "/tmp/" + test::unique_name("wrongtype") + ".log";
  auto pid = test::spawn_cli(args("run"), logf);
  ASSERT_TRUE(eventually([&] { return slurp(logf).find("redis_reply") != std::string::npos; }))
    << slurp(logf);
  ++stats().faults;
  // Let it retry a few times; no checkpoint may pass the first record of the
  // victim in any partition.
  std::this_thread::sleep_for(random_ms(500, 1500));
  int partitions_with_victim = 0;
  for (auto& [p, recs] : log) {
    int64_t first = -1;
    for (auto& [off, d] : recs)
      if (std::find(d.recipients.begin(), d.recipients.end(), victim) != d.recipients.end()) {
        first = off;
        break;
      }
    if (first < 0)
      continue; // the victim never appears in this partition
    ++partitions_with_victim;
    EXPECT_LE(checkpoint(*c, p), first) << "partition " << p << " passed a failed record";
  }
  ASSERT_GT(partitions_with_victim, 0);
  test::redis_cmd(*c, {"DEL", convs + victim});
  EXPECT_TRUE(eventually([&] { return checkpoint(*c, 0) == 2000 && checkpoint(*c, 1) == 2000; }))
    << slurp(logf);
  ::kill(pid, SIGTERM);
  EXPECT_EQ(test::wait_cli(pid), 0);
  expect_consistent_after_catch_up();
}

TEST_F(scenario, RedisRestoredFromAnOlderSnapshotIsRepairedByReplay) {
  test::private_redis rdb{"rdb", {}};
  ASSERT_TRUE(rdb.wait_ready());
  redis_port = rdb.port;
  produce(3000);
  ASSERT_EQ(test::run_cli(args("catch-up")).rc, 0);
  {
    auto c = redis();
    ASSERT_EQ(test::redis_cmd(*c, {"SAVE"}), "OK"); // the "older" snapshot
  }
  produce(3000);
  auto logf = "/tmp/" + test::unique_name("rdb") + ".log";
  auto pid = test::spawn_cli(args("run", {"--redis.timeout-ms=2000"}), logf);
  ASSERT_TRUE(eventually([&] {
    auto c = redis();
    return c && checkpoint(*c, 0) == 6000;
  }));
  // Restore the snapshot: data and checkpoints roll back together.
  rdb.kill_hard();
  ++stats().faults;
  rdb.start();
  ASSERT_TRUE(rdb.wait_ready());
  {
    auto c = redis();
    EXPECT_EQ(checkpoint(*c, 0), 3000);
  }
  // The running node's writer expected 6000: its guarded write conflicts,
  // it restarts from the restored checkpoint and replays.
  produce(100);
  EXPECT_TRUE(eventually([&] {
    auto c = redis();
    return c && checkpoint(*c, 0) == 6100 && checkpoint(*c, 1) == 6100;
  })) << slurp(logf);
  ::kill(pid, SIGTERM);
  EXPECT_EQ(test::wait_cli(pid), 0);
  expect_no_overshoot();
  expect_consistent_after_catch_up();
}

TEST_F(scenario, RedisPausedLongerThanTheClientTimeoutThenResumed) {
  test::private_redis paused{"pause", {}};
  ASSERT_TRUE(paused.wait_ready());
  redis_port = paused.port;
  produce(8000);
  auto logf = "/tmp/" + test::unique_name("pause") + ".log";
  auto pid = test::spawn_cli(args("run", {"--redis.timeout-ms=500"}), logf);
  for (int i = 0; i < cycles(2); ++i) {
    std::this_thread::sleep_for(random_ms(100, 400));
    ::kill(paused.pid, SIGSTOP);
    ++stats().faults;
    std::this_thread::sleep_for(random_ms(1200, 2000));
    ::kill(paused.pid, SIGCONT);
    expect_no_overshoot();
  }
  EXPECT_TRUE(eventually([&] {
    auto c = redis();
    return c && checkpoint(*c, 0) == 8000 && checkpoint(*c, 1) == 8000;
  })) << slurp(logf);
  ::kill(pid, SIGTERM);
  EXPECT_EQ(test::wait_cli(pid), 0);
  expect_consistent_after_catch_up();
}

TEST_F(scenario, BrokerPausedWhileTheNodeRunsOnlyCausesLag) {
  auto pidfile = slurp(QSP_SOURCE_DIR "/.services/kafka.pid");
  ASSERT_FALSE(pidfile.empty()) << "the broker's pid file is missing";
  int broker = std::stoi(pidfile);
  produce(3000);
  auto logf = "/tmp/" + test::unique_name("broker") + ".log";
  auto pid = test::spawn_cli(args("run"), logf);
  std::this_thread::sleep_for(random_ms(50, 300));
  ::kill(broker, SIGSTOP);
  ++stats().faults;
  std::this_thread::sleep_for(random_ms(1500, 3000));
  ::kill(broker, SIGCONT);
  expect_no_overshoot();
  produce(500);
  EXPECT_TRUE(eventually([&] {
    auto c = redis();
    return c && checkpoint(*c, 0) == 3500 && checkpoint(*c, 1) == 3500;
  }, 90s)) << slurp(logf);
  ::kill(pid, SIGTERM);
  EXPECT_EQ(test::wait_cli(pid), 0);
  expect_consistent_after_catch_up();
}

TEST_F(scenario, BrokerStoppedAndRestartedWhileTheNodeRunsOnlyCausesLag) {
  produce(3000);
  auto logf = "/tmp/" + test::unique_name("broker-restart") + ".log";
  auto pid = test::spawn_cli(args("run"), logf);
  std::this_thread::sleep_for(random_ms(50, 300));
  // Stop the broker and start it again on the same data and port.
  ASSERT_EQ(test::sh(QSP_SOURCE_DIR "/scripts/services restart-kafka >/dev/null 2>&1"), 0);
  ++stats().faults;
  expect_no_overshoot();
  produce(500);
  EXPECT_TRUE(eventually([&] {
    auto c = redis();
    return c && checkpoint(*c, 0) == 3500 && checkpoint(*c, 1) == 3500;
  }, 120s)) << slurp(logf);
  ::kill(pid, SIGTERM);
  EXPECT_EQ(test::wait_cli(pid), 0);
  expect_consistent_after_catch_up();
}

TEST_F(scenario, MixedCommittedAndAbortedTransactionsWithOneOpenAtStartup) {
  auto prod = kafka::producer::make(test::kafka_client(), topic + "-tx");
  ASSERT_TRUE(prod);
  // Offsets are not sequential with markers: the model keeps no offsets, and
  // the oracle is the final state only.
  test::model committed;
  auto txn = [&](int n, bool commit) {
    ASSERT_TRUE(prod->begin());
    for (int i = 0; i < n; ++i) {
      auto d = test::make_dispatch(next_id++, 200);
      if (!commit)
        d.recipients = {"aborted-" + std::to_string(i % 7)};
      ASSERT_TRUE(prod->send(topic, static_cast<int32_t>(i % partitions), core::encode_json(d)));
      if (commit)
        test::apply(committed, d);
    }
    ASSERT_TRUE(prod->flush());
    ASSERT_TRUE(commit ? prod->commit() : prod->abort());
    ++stats().faults;
  };
  std::bernoulli_distribution coin{0.6};
  for (int t = 0; t < cycles(10); ++t)
    txn(50 + static_cast<int>(rng() % 100), coin(rng));
  // An open transaction at startup pins the LSO: catch-up stops before it.
  auto open = kafka::producer::make(test::kafka_client(), topic + "-open");
  ASSERT_TRUE(open->begin());
  core::dispatch pending{"c-open", 1733149999999, {"pending-user"}};
  ASSERT_TRUE(open->send(topic, 0, core::encode_json(pending)));
  ASSERT_TRUE(open->flush());
  ASSERT_TRUE(eventually([&] {
    auto st = admin->inspect(topic);
    return st && st->true_high[0] > st->marks[0].high;
  }));
  auto r = test::run_cli(args("catch-up"));
  ASSERT_EQ(r.rc, 0) << r.err;
  auto c = redis();
  EXPECT_TRUE(test::zset(*c, convs + "pending-user").empty());
  ASSERT_TRUE(open->commit());
  test::apply(committed, pending);
  ASSERT_TRUE(eventually([&] {
    auto st = admin->inspect(topic);
    return st && st->true_high[0] == st->marks[0].high;
  }));
  r = test::run_cli(args("catch-up"));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(test::diff_with_redis(committed, convs), std::vector<std::string>{});
  for (int i = 0; i < 7; ++i)
    EXPECT_TRUE(test::zset(*c, convs + "aborted-" + std::to_string(i)).empty());
}

TEST_F(scenario, TwoNodesOnOneNamespaceNeverBothAdvanceAndLoseNothing) {
  produce(6000);
  auto la = "/tmp/" + test::unique_name("twoA") + ".log";
  auto lb = "/tmp/" + test::unique_name("twoB") + ".log";
  auto a = test::spawn_cli(args("run"), la);
  auto b = test::spawn_cli(args("run"), lb);
  ++stats().faults;
  for (int i = 0; i < 20; ++i) {
    std::this_thread::sleep_for(100ms);
    expect_no_overshoot();
  }
  // Both must be past verification before the appends, so both try to
  // write them (on a loaded broker one may verify slowly).
  auto past_verify = [&](const std::string& f) {
    auto t = slurp(f);
    return t.find("-> ready") != std::string::npos || t.find("checkpoint_conflict") != std::string::npos;
  };
  ASSERT_TRUE(eventually([&] { return past_verify(la) && past_verify(lb); }, 90s))
    << slurp(la) << slurp(lb);
  produce(500);
  EXPECT_TRUE(eventually([&] {
    auto c = redis();
    return c && checkpoint(*c, 0) == 6500 && checkpoint(*c, 1) == 6500
           && (slurp(la) + slurp(lb)).find("checkpoint_conflict") != std::string::npos;
  })) << slurp(la) << slurp(lb);
  ::kill(a, SIGTERM);
  ::kill(b, SIGTERM);
  EXPECT_EQ(test::wait_cli(a), 0);
  EXPECT_EQ(test::wait_cli(b), 0);
  // The guarded write made at least one of them back off.
  auto logs = slurp(la) + slurp(lb);
  EXPECT_NE(logs.find("checkpoint_conflict"), std::string::npos) << logs;
  expect_consistent_after_catch_up();
}

TEST(FaultSummary, PrintsTheTotals) {
  std::printf("fault suite: seed=%llu faults=%d records=%llu entries_checked=%zu lost=0 "
              "overshoots=0\n",
              static_cast<unsigned long long>(seed()), stats().faults,
              static_cast<unsigned long long>(stats().records), stats().entries_checked);
  SUCCEED();
}
