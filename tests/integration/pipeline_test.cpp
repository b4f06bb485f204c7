// The projection pipeline end to end: the node (`catch-up`, `run`) against
// the real broker and Redis — seed gates 1, 6 and 7, transactional logs.
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

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

struct pipeline : ::testing::Test {
  std::string topic = test::unique_name("pipe");
  std::string ns = test::unique_name("ns");
  std::string convs = test::unique_name("convs") + ":";
  std::unique_ptr<kafka::admin> admin;
  std::unique_ptr<redis::connection> redis = test::redis_conn();
  /// Every produced record per partition, in offset order (non-transactional).
  std::map<int, std::vector<core::dispatch>> log;
  uint64_t next_id = 0;

  void SetUp() override {
    auto a = kafka::admin::make(test::kafka_client());
    ASSERT_TRUE(a);
    admin = std::move(*a);
  }
  void TearDown() override { admin->delete_topic(topic); }

  void produce(int partitions, int per_partition) {
    auto p = kafka::producer::make(test::kafka_client());
    ASSERT_TRUE(p) << describe(p.error());
    for (int n = 0; n < per_partition; ++n)
      for (int part = 0; part < partitions; ++part) {
        auto d = test::make_dispatch(next_id++, 400);
        ASSERT_TRUE(p->send(topic, part, core::encode_json(d)));
        log[part].push_back(d);
      }
    ASSERT_TRUE(p->flush());
  }

  std::vector<std::string> args(const std::string& cmd, int partitions) {
    auto a = test::node_args(topic, partitions, ns, convs);
    a.insert(a.begin(), cmd);
    a.push_back("--projection.max-batch-records=200");
    return a;
  }

  int64_t checkpoint(int p) {
    auto v = test::redis_cmd(*redis, {"HGET", redis::checkpoint_key(ns, topic, p), "next_offset"});
    return v.empty() ? -1 : std::stoll(v);
  }

  test::model model_below(const std::map<int, int64_t>& upto) {
    test::model m;
    for (auto& [p, recs] : log)
      for (int64_t off = 0; off < upto.at(p) && off < static_cast<int64_t>(recs.size()); ++off)
        test::apply(m, recs[static_cast<size_t>(off)]);
    return m;
  }

  test::model full_model() {
    test::model m;
    for (auto& [p, recs] : log)
      for (auto& d : recs)
        test::apply(m, d);
    return m;
  }

  /// Every record below each stored checkpoint is fully present in Redis
  /// (scores may be higher: later records of the same conversation).
  void expect_checkpoints_never_ahead(int partitions) {
    std::map<int, int64_t> cps;
    for (int p = 0; p < partitions; ++p)
      cps[p] = std::max<int64_t>(0, checkpoint(p));
    for (auto& [user, convs_of] : model_below(cps)) {
      auto got = test::zset(*redis, convs + user);
      for (auto& [conv, score] : convs_of) {
        auto i = got.find(conv);
        ASSERT_NE(i, got.end()) << user << " lacks " << conv << " below a checkpoint";
        EXPECT_GE(i->second, score);
      }
    }
  }
};

} // namespace

TEST_F(pipeline, CatchUpOnABacklogEndsAtH0WithRedisEqualToTheModel) {
  test::create_topic(topic, 3);
  produce(3, 700);
  auto r = test::run_cli(args("catch-up", 3));
  ASSERT_EQ(r.rc, 0) << r.err;
  for (int p = 0; p < 3; ++p)
    EXPECT_EQ(checkpoint(p), 700);
  EXPECT_EQ(test::diff_with_redis(full_model(), convs), std::vector<std::string>{});
  // Run by the example reader's node (QSP_NODE_BIN, example_reader.*): the
  // records came through the host's reader, not the product's own.
  bool host_reader = std::getenv("QSP_NODE_BIN") != nullptr;
  EXPECT_EQ(r.err.find("through the host's reader") != std::string::npos, host_reader) << r.err;
}

TEST_F(pipeline, Gate1SigkillMidCatchUpThenRestartLosesNothing) {
  test::create_topic(topic, 2);
  produce(2, 20000);
  auto logf = "/tmp/" + test::unique_name("gate1") + ".log";
  for (int round = 0; round < 3; ++round) {
    auto pid = test::spawn_cli(args("run", 2), logf);
    // Kill once some progress is stored, at a different point each round.
    int64_t target = 2000 + round * 5000;
    bool progressed = eventually([&] { return checkpoint(0) + checkpoint(1) >= target; });
    ::kill(pid, SIGKILL);
    EXPECT_EQ(test::wait_cli(pid), 128 + SIGKILL);
    ASSERT_TRUE(progressed) << slurp(logf);
    expect_checkpoints_never_ahead(2);
  }
  auto r = test::run_cli(args("catch-up", 2));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(checkpoint(0), 20000);
  EXPECT_EQ(checkpoint(1), 20000);
  EXPECT_EQ(test::diff_with_redis(full_model(), convs), std::vector<std::string>{});
}

TEST_F(pipeline, Gate1RedisConnectionsKilledMidPipelineRecoverWithoutLoss) {
  test::create_topic(topic, 2);
  produce(2, 15000);
  auto logf = "/tmp/" + test::unique_name("redis-kill") + ".log";
  auto a = args("catch-up", 2);
  a.push_back("--projection.catch-up-max-attempts=100");
  auto pid = test::spawn_cli(a, logf);
  // Drop every client connection of the node a few times while it writes.
  int kills = 0;
  for (int i = 0; i < 5; ++i) {
    if (!eventually([&] { return checkpoint(0) + checkpoint(1) > 3000 * (i + 1); }, 30s))
      break;
    auto killed = test::redis_cmd(*redis, {"CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"});
    kills += killed != "0" && killed.rfind("ERR", 0) != 0;
    expect_checkpoints_never_ahead(2);
  }
  EXPECT_EQ(test::wait_cli(pid), 0) << slurp(logf);
  EXPECT_GT(kills, 0);
  EXPECT_NE(slurp(logf).find("dirty"), std::string::npos) << "no failure was observed";
  EXPECT_EQ(checkpoint(0), 15000);
  EXPECT_EQ(test::diff_with_redis(full_model(), convs), std::vector<std::string>{});
}

TEST_F(pipeline, Gate6H0IsFixedAtStartupAndLaterRecordsAreStillConsumed) {
  test::create_topic(topic, 2);
  produce(2, 5000);
  auto logf = "/tmp/" + test::unique_name("gate6") + ".log";
  auto pid = test::spawn_cli(args("run", 2), logf);
  ASSERT_TRUE(eventually([&] { return slurp(logf).find("H0") != std::string::npos; }));
  produce(2, 3000); // appended during catch-up
  ASSERT_TRUE(eventually([&] { return slurp(logf).find("-> ready") != std::string::npos; }))
    << slurp(logf);
  auto text = slurp(logf);
  std::smatch m;
  std::regex h0{R"(partition (\d+): start 0 H0 (\d+))"};
  int seen = 0;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), h0); it != std::sregex_iterator();
       ++it, ++seen)
    EXPECT_EQ((*it)[2].str(), "5000") << "H0 moved: " << (*it)[0].str();
  EXPECT_EQ(seen, 2);
  // The records appended after startup are consumed by the same loop.
  EXPECT_TRUE(eventually([&] { return checkpoint(0) == 8000 && checkpoint(1) == 8000; }));
  ::kill(pid, SIGTERM);
  EXPECT_EQ(test::wait_cli(pid), 0) << slurp(logf);
  EXPECT_EQ(test::diff_with_redis(full_model(), convs), std::vector<std::string>{});
}

TEST_F(pipeline, Gate7ReplayedDispatchAndPartialRecipientsStayMonotonic) {
  test::create_topic(topic, 1);
  auto p = kafka::producer::make(test::kafka_client());
  core::dispatch d{"c-replay", 1733140000500, {"alice", "bob", "carol"}};
  for (int i = 0; i < 100; ++i)
    ASSERT_TRUE(p->send(topic, 0, core::encode_json(d)));
  core::dispatch older{"c-replay", 1733140000100, {"alice", "bob", "carol"}};
  ASSERT_TRUE(p->send(topic, 0, core::encode_json(older)));
  ASSERT_TRUE(p->flush());
  // "Some recipients written, then disconnect": alice already has the entry,
  // and dave has a newer activity in the same conversation from elsewhere.
  test::redis_cmd(*redis, {"ZADD", convs + "alice", "GT", "1733140000500", "c-replay"});
  test::redis_cmd(*redis, {"ZADD", convs + "carol", "GT", "1733140009999", "c-replay"});
  for (int round = 0; round < 2; ++round) {
    auto r = test::run_cli(args("catch-up", 1));
    ASSERT_EQ(r.rc, 0) << r.err;
    if (round == 0) // replay everything once more from offset 0
      test::redis_cmd(*redis, {"DEL", redis::checkpoint_key(ns, topic, 0)});
  }
  EXPECT_EQ(test::zset(*redis, convs + "alice"),
            (std::map<std::string, int64_t>{{"c-replay", 1733140000500}}));
  EXPECT_EQ(test::zset(*redis, convs + "bob"),
            (std::map<std::string, int64_t>{{"c-replay", 1733140000500}}));
  // GT never lowers a newer activity time.
  EXPECT_EQ(test::zset(*redis, convs + "carol"),
            (std::map<std::string, int64_t>{{"c-replay", 1733140009999}}));
  EXPECT_EQ(checkpoint(0), 101);
}

TEST_F(pipeline, TransactionalLogEndingInMarkersWithAnAbortedMiddleReachesReady) {
  test::create_topic(topic, 1);
  int64_t lso = 0;
  auto expected = test::write_transactional_log(topic, lso);
  auto r = test::run_cli(args("catch-up", 1));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(checkpoint(0), lso);
  EXPECT_EQ(test::diff_with_redis(expected, convs), std::vector<std::string>{});
  EXPECT_TRUE(test::zset(*redis, convs + "aborted-user").empty());
}

TEST_F(pipeline, AnUndecodableRecordStopsTheNodeAtExactlyThatOffset) {
  test::create_topic(topic, 1);
  produce(1, 10);
  auto p = kafka::producer::make(test::kafka_client());
  ASSERT_TRUE(p->send(topic, 0, "{not json"));
  ASSERT_TRUE(p->flush());
  produce(1, 5);
  auto r = test::run_cli(args("catch-up", 1));
  EXPECT_EQ(r.rc, 3) << r.err;
  EXPECT_NE(r.err.find("offset 10"), std::string::npos) << r.err;
  EXPECT_EQ(checkpoint(0), 10);
  expect_checkpoints_never_ahead(1);
}
