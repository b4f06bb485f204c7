// `audit` end to end: replay the real log, diff with real Redis, exit codes
// 0 / 5 / 3.
#include <atomic>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "kafka/admin.hpp"
#include "kafka/producer.hpp"
#include "messages/types.hpp"
#include "redis/stores.hpp"
#include "tests/support/integration.hpp"

using namespace qsp;
using namespace std::chrono_literals;

namespace {

struct Audit : ::testing::Test {
  std::string topic = test::unique_name("audit");
  std::string ns = test::unique_name("ns");
  std::string convs = test::unique_name("convs") + ":";
  std::unique_ptr<kafka::admin> admin;
  std::unique_ptr<redis::connection> redis = test::redis_conn();
  test::model model;
  uint64_t next_id = 0;

  void SetUp() override {
    auto a = kafka::admin::make(test::kafka_client());
    ASSERT_TRUE(a) << describe(a.error());
    admin = std::move(*a);
  }
  void TearDown() override { admin->delete_topic(topic); }

  void produce(int partitions, int per_partition) {
    auto p = kafka::producer::make(test::kafka_client());
    ASSERT_TRUE(p) << describe(p.error());
    for (int n = 0; n < per_partition; ++n)
      for (int part = 0; part < partitions; ++part) {
        auto d = test::make_dispatch(next_id++, 40);
        ASSERT_TRUE(p->send(topic, part, core::encode_json(d)));
        test::apply(model, d);
      }
    ASSERT_TRUE(p->flush());
  }

  test::cli_result cli(const std::string& cmd, int partitions) {
    auto a = test::node_args(topic, partitions, ns, convs);
    a.insert(a.begin(), cmd);
    return test::run_cli(a);
  }

  /// Runs catch-up and checks that Redis holds `expected` (default: everything
  /// produced).  Should a catch-up ever advance its checkpoints past records it
  /// never wrote (a node bug, not an audit one), audit must see it (exit 5);
  /// the test then projects again so that it can go on testing audit.
  void catch_up(int partitions, const test::model* expected = nullptr) {
    const auto& want = expected != nullptr ? *expected : model;
    for (int attempt = 0; attempt < 5; ++attempt) {
      auto r = cli("catch-up", partitions);
      ASSERT_EQ(r.rc, 0) << r.err;
      auto d = test::diff_with_redis(want, convs);
      if (d.empty())
        return;
      std::cerr << "warning: catch-up advanced its checkpoints past records it never wrote ("
                << d.size() << " differences, e.g. " << d.front()
                << "); checking that audit sees it, then projecting again\n";
      auto a = cli("audit", partitions);
      EXPECT_EQ(a.rc, 5) << a.out << a.err;
      EXPECT_TRUE(a.out.find("verdict: differences found") != std::string::npos) << a.out;
      for (int p = 0; p < partitions; ++p)
        test::redis_cmd(*redis, {"DEL", checkpoint_key(p)});
    }
    FAIL() << "catch-up kept losing records";
  }

  std::string checkpoint_key(int p) { return redis::checkpoint_key(ns, topic, p); }

  /// Some (user, conversation, score) of the model.
  std::tuple<std::string, std::string, int64_t> some_entry() {
    auto& [user, convs_of] = *model.begin();
    auto& [conv, score] = *convs_of.begin();
    return {user, conv, score};
  }
};

bool has(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

} // namespace

TEST_F(Audit, ConsistentAfterCatchUp) {
  test::create_topic(topic, 3);
  produce(3, 300);
  ASSERT_NO_FATAL_FAILURE(catch_up(3));
  auto r = cli("audit", 3);
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_TRUE(has(r.out, "verdict: consistent")) << r.out;
  EXPECT_TRUE(has(r.out, "partition 0: offsets [0, 300) 300 records")) << r.out;
  EXPECT_TRUE(has(r.out, "records: 900")) << r.out;
  EXPECT_TRUE(has(r.out, "missing: 0")) << r.out;
  EXPECT_TRUE(has(r.out, "stale: 0")) << r.out;
  EXPECT_TRUE(has(r.out, "unknown: 0")) << r.out;
  size_t entries = 0;
  for (auto& [u, c] : model)
    entries += c.size();
  EXPECT_TRUE(has(r.out, "checked: " + std::to_string(model.size()) + " users, "
                           + std::to_string(entries) + " entries"))
    << r.out;
}

TEST_F(Audit, NothingToReplayWithoutCheckpointsIsConsistent) {
  test::create_topic(topic, 2);
  produce(2, 10);
  auto r = cli("audit", 2);
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_TRUE(has(r.out, "(no checkpoint)")) << r.out;
  EXPECT_TRUE(has(r.out, "checked: 0 users")) << r.out;
  EXPECT_TRUE(has(r.out, "records exist after the checkpoints")) << r.out;
}

TEST_F(Audit, MissingMemberIsADifference) {
  test::create_topic(topic, 2);
  produce(2, 100);
  ASSERT_NO_FATAL_FAILURE(catch_up(2));
  auto [user, conv, score] = some_entry();
  ASSERT_EQ(test::redis_cmd(*redis, {"ZREM", convs + user, conv}), "1");
  auto r = cli("audit", 2);
  EXPECT_EQ(r.rc, 5) << r.out << r.err;
  EXPECT_TRUE(has(r.out, "missing: 1\n")) << r.out;
  EXPECT_TRUE(has(r.out, "missing: user \"" + user + "\" conversation \"" + conv + "\": absent, log has "
                           + std::to_string(score)))
    << r.out;
  EXPECT_TRUE(has(r.out, "verdict: differences found")) << r.out;
}

TEST_F(Audit, LoweredScoreIsStale) {
  test::create_topic(topic, 1);
  produce(1, 200);
  ASSERT_NO_FATAL_FAILURE(catch_up(1));
  auto [user, conv, score] = some_entry();
  test::redis_cmd(*redis, {"ZADD", convs + user, "XX", std::to_string(score - 7), conv});
  auto r = cli("audit", 1);
  EXPECT_EQ(r.rc, 5) << r.out << r.err;
  EXPECT_TRUE(has(r.out, "stale: 1\n")) << r.out;
  EXPECT_TRUE(has(r.out, "stale: user \"" + user + "\" conversation \"" + conv + "\": redis "
                           + std::to_string(score - 7) + " < log " + std::to_string(score)))
    << r.out;
}

TEST_F(Audit, UnknownMemberIsReportedWithTheDualWriteNote) {
  test::create_topic(topic, 1);
  produce(1, 200);
  ASSERT_NO_FATAL_FAILURE(catch_up(1));
  auto [user, conv, score] = some_entry();
  test::redis_cmd(*redis, {"ZADD", convs + user, "1733140000001", "c-from-tcp-path"});
  auto r = cli("audit", 1);
  EXPECT_EQ(r.rc, 5) << r.out << r.err;
  EXPECT_TRUE(has(r.out, "unknown: 1\n")) << r.out;
  EXPECT_TRUE(has(r.out, "unknown: user \"" + user + "\" member \"c-from-tcp-path\"")) << r.out;
  EXPECT_TRUE(has(r.out, "dual write")) << r.out;
  EXPECT_TRUE(has(r.out, "missing: 0\n")) << r.out;
}

TEST_F(Audit, HigherScoreIsOnlyAheadNotADifference) {
  test::create_topic(topic, 1);
  produce(1, 50);
  ASSERT_NO_FATAL_FAILURE(catch_up(1));
  auto [user, conv, score] = some_entry();
  test::redis_cmd(*redis, {"ZADD", convs + user, "GT", std::to_string(score + 1000), conv});
  auto r = cli("audit", 1);
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_TRUE(has(r.out, "ahead: 1 ")) << r.out;
  EXPECT_TRUE(has(r.out, "ahead: user \"" + user + "\" conversation \"" + conv + "\"")) << r.out;
}

TEST_F(Audit, WrongTypeKeyCountsAsMissing) {
  test::create_topic(topic, 1);
  produce(1, 50);
  ASSERT_NO_FATAL_FAILURE(catch_up(1));
  auto [user, conv, score] = some_entry();
  test::redis_cmd(*redis, {"DEL", convs + user});
  test::redis_cmd(*redis, {"SET", convs + user, "x"});
  auto r = cli("audit", 1);
  EXPECT_EQ(r.rc, 5) << r.out << r.err;
  EXPECT_TRUE(has(r.out, "unreadable keys: 1")) << r.out;
  EXPECT_TRUE(has(r.out, "unreadable: user \"" + user + "\"")) << r.out;
}

TEST_F(Audit, RecordsAfterTheCheckpointShowAsAheadAndUnknown) {
  test::create_topic(topic, 1);
  auto p = kafka::producer::make(test::kafka_client());
  ASSERT_TRUE(p) << describe(p.error());
  std::vector<core::dispatch> recs{{"c-a", 1733140000100, {"alice", "bob"}},
                                   {"c-a", 1733140000200, {"alice"}},
                                   {"c-b", 1733140000300, {"alice"}}};
  for (auto& d : recs) {
    ASSERT_TRUE(p->send(topic, 0, core::encode_json(d)));
    test::apply(model, d);
  }
  ASSERT_TRUE(p->flush());
  ASSERT_NO_FATAL_FAILURE(catch_up(1));
  // Pretend the node stopped at 1 with the later records already written
  // (a crash between the ZADDs and the checkpoint write).
  test::redis_cmd(*redis, {"HSET", checkpoint_key(0), "next_offset", "1"});
  auto r = cli("audit", 1);
  // Issue 42: nothing missing or stale, and the unknown member may be a
  // record's after the checkpoint: inconclusive (7), never "differences".
  EXPECT_EQ(r.rc, 7) << r.out << r.err;
  EXPECT_TRUE(has(r.out, "verdict: inconclusive")) << r.out;
  EXPECT_FALSE(has(r.out, "differences found")) << r.out;
  EXPECT_TRUE(has(r.out, "partition 0: offsets [0, 1) 1 records")) << r.out;
  EXPECT_TRUE(has(r.out, "checked: 2 users, 2 entries")) << r.out;
  EXPECT_TRUE(has(r.out, "next_offset 1 < high 3")) << r.out;
  EXPECT_TRUE(has(r.out, "missing: 0\n")) << r.out;
  EXPECT_TRUE(has(r.out, "stale: 0\n")) << r.out;
  EXPECT_TRUE(has(r.out, "ahead: 1 ")) << r.out;
  EXPECT_TRUE(has(r.out, "ahead: user \"alice\" conversation \"c-a\": redis 1733140000200 > log "
                           "1733140000100"))
    << r.out;
  EXPECT_TRUE(has(r.out, "unknown: 1\n")) << r.out;
  EXPECT_TRUE(has(r.out, "unknown: user \"alice\" member \"c-b\"")) << r.out;
}

TEST_F(Audit, TransactionalLogEndingInMarkersIsReplayedToTheCheckpoint) {
  test::create_topic(topic, 1);
  int64_t lso = 0;
  auto kept = test::write_transactional_log(topic, lso);
  ASSERT_NO_FATAL_FAILURE(catch_up(1, &kept));
  auto r = cli("audit", 1);
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_TRUE(has(r.out, "offsets [0, " + std::to_string(lso) + ") 8 records")) << r.out;
  EXPECT_TRUE(has(r.out, "checked: 1 users, 8 entries")) << r.out;
}

TEST_F(Audit, LowAboveZeroCannotProve) {
  test::create_topic(topic, 2);
  produce(2, 20);
  ASSERT_NO_FATAL_FAILURE(catch_up(2));
  ASSERT_TRUE(admin->delete_records(topic, 1, 5));
  auto r = cli("audit", 2);
  EXPECT_EQ(r.rc, 3) << r.out << r.err;
  EXPECT_TRUE(has(r.err, "cannot prove: partition 1 low=5 > 0, history is gone")) << r.err;
}

TEST_F(Audit, CheckpointWithAWrongTopicIdCannotProve) {
  test::create_topic(topic, 1);
  produce(1, 20);
  ASSERT_NO_FATAL_FAILURE(catch_up(1));
  test::redis_cmd(*redis, {"HSET", checkpoint_key(0), "topic_id", "AQEBAQEBAQEBAQEBAQEBAQ"});
  auto r = cli("audit", 1);
  EXPECT_EQ(r.rc, 3) << r.out << r.err;
  EXPECT_TRUE(has(r.err, "refused: partition 0: field topic_id")) << r.err;
}

TEST_F(Audit, UndecodableRecordBelowACheckpointCannotProve) {
  test::create_topic(topic, 1);
  produce(1, 10);
  auto p = kafka::producer::make(test::kafka_client());
  ASSERT_TRUE(p->send(topic, 0, "{not json"));
  ASSERT_TRUE(p->flush());
  produce(1, 5);
  EXPECT_EQ(cli("catch-up", 1).rc, 3);  // stops at offset 10, meta and checkpoint stored
  test::redis_cmd(*redis, {"HSET", checkpoint_key(0), "next_offset", "16"});
  auto r = cli("audit", 1);
  EXPECT_EQ(r.rc, 3) << r.out << r.err;
  EXPECT_TRUE(has(r.err, "topic " + topic + " partition 0 offset 10")) << r.err;
}

// Issue 42: `audit` of a running node under a live producer.  Records
// projected past the node's last checkpoint show as unknown members; that is
// no difference: the verdict is consistent (0) or inconclusive (7), never
// "differences found".  Once the producer stopped and the node caught up and
// stopped, the audit is consistent.
TEST_F(Audit, ARunningNodeUnderLoadIsNeverReportedAsDifferent) {
  test::create_topic(topic, 2);
  produce(2, 200);
  auto a = test::node_args(topic, 2, ns, convs);
  a.insert(a.begin(), "run");
  auto port = test::free_port();
  test::set_option(a, "http.listen", "127.0.0.1:" + std::to_string(port));
  auto logf = "/tmp/" + topic + "-run.log";
  test::node_process node{a, logf};
  ASSERT_TRUE(test::readyz_reaches(port, 200, 60s)) << test::slurp(logf);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> sent{0};
  std::thread load{[&] {
    auto p = kafka::producer::make(test::kafka_client());
    if (!p)
      return;
    // Bounded: 4,000 records at most, 60 s at most.
    auto deadline = std::chrono::steady_clock::now() + 60s;
    for (uint64_t i = 0; i < 4000 && !stop && std::chrono::steady_clock::now() < deadline; ++i) {
      auto d = test::make_dispatch(100000 + i, 40);
      if (!p->send(topic, static_cast<int32_t>(i % 2), core::encode_json(d)))
        return;
      if (i % 20 == 19) {
        p->flush();
        std::this_thread::sleep_for(5ms);
      }
      ++sent;
    }
    p->flush();
  }};
  struct joiner {
    std::atomic<bool>& stop;
    std::thread& t;
    ~joiner() {
      stop = true;
      t.join();
    }
  } join{stop, load};
  ASSERT_TRUE(test::eventually([&] { return sent >= 200; }, 30s));
  int inconclusive = 0;
  for (int round = 0; round < 3; ++round) {
    auto r = cli("audit", 2);
    EXPECT_TRUE(r.rc == 0 || r.rc == 7) << "exit " << r.rc << "\n" << r.out << r.err;
    EXPECT_FALSE(has(r.out, "differences found")) << r.out;
    EXPECT_TRUE(has(r.out, "missing: 0\n")) << r.out;
    inconclusive += r.rc == 7;
  }
  std::cout << inconclusive << " of 3 audits under load were inconclusive\n";
  stop = true;
  load.join();
  load = std::thread{[] {}};
  // Caught up: every checkpoint at the log's end, then stopped.
  ASSERT_TRUE(test::eventually([&] {
    auto v = cli("verify", 2);
    return v.rc == 0 && v.out.find("resume") == std::string::npos
           && v.out.find("bootstrap") == std::string::npos;
  }, 60s)) << cli("verify", 2).out;
  EXPECT_EQ(node.stop(), 0) << test::slurp(logf);
  auto r = cli("audit", 2);
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_TRUE(has(r.out, "verdict: consistent")) << r.out;
}

TEST_F(Audit, UnreachableRedisExits4) {
  test::create_topic(topic, 1);
  auto a = test::node_args(topic, 1, ns, convs);
  a.insert(a.begin(), "audit");
  a.push_back("--redis.port=1");
  auto r = test::run_cli(a);
  EXPECT_EQ(r.rc, 4) << r.out << r.err;
}
