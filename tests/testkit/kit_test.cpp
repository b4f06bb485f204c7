// The public test kit, used as a host uses it: only
// <qsession/projection/testkit.hpp>, linked against qsession::projection_testkit.
// Each fault the kit injects meets the real projection here, and each test
// asserts what the projection claims during the fault, not only after it.
#include <qsession/projection/testkit.hpp>

#include <gtest/gtest.h>

#include "caf/event_based_actor.hpp"

#include <chrono>
#include <string>

namespace {

using namespace std::chrono_literals;
using qsp::testkit::kit;
using qsp::testkit::kit_options;

bool not_ready(const caf::expected<qsp::session_list>& x) {
  return !x && x.error().category() == caf::atom("qsp")
         && x.error().code() == static_cast<uint8_t>(qsp::ec::not_ready);
}

void fill(kit& k, int per_partition) {
  for (int32_t p = 0; p < k.partition_count(); ++p)
    for (int i = 0; i < per_partition; ++i)
      k.produce(p, "conv-" + std::to_string(p) + "-" + std::to_string(i), 1000 + i,
                {"alice", "user-" + std::to_string(i % 4)});
}

// The acceptance story: Redis freezes, the projection says not-ready, Redis
// comes back, the projection is ready and Redis equals the model.
TEST(Kit, RedisFreezeClosesAndReopensReadiness) {
  kit k;
  fill(k, 20);
  k.start();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  ASSERT_TRUE(k.pull("alice", 10));
  k.redis_freeze();
  k.produce(1, "late", 5000, {"alice"});
  // Frozen past the command timeout: the writer gives up and says so.
  ASSERT_TRUE(k.run_until_state("dirty")) << k.explain();
  EXPECT_FALSE(k.ready());
  EXPECT_TRUE(not_ready(k.pull("alice", 10)));
  k.advance(10s); // the fault outlasts every timeout and backoff
  EXPECT_FALSE(k.ready()) << k.explain();
  EXPECT_FALSE(k.score("alice", "late"));
  k.redis_release();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  ASSERT_TRUE(k.run_until_offset(1, k.log_end(1))) << k.explain();
  EXPECT_EQ(k.score("alice", "late"), 5000);
  EXPECT_TRUE(k.model_equals_redis()) << k.explain();
  EXPECT_TRUE(k.check_invariants()) << k.explain();
  auto pulled = k.pull("alice", 1);
  ASSERT_TRUE(pulled);
  ASSERT_EQ(pulled->size(), 1u);
  EXPECT_EQ((*pulled)[0].conversation_id, "late");
}

TEST(Kit, ReadyOnlyAfterEveryPartitionReachedH0) {
  kit k;
  fill(k, 300); // several batches per partition
  k.start();
  ASSERT_TRUE(k.run_until_state("catching-up")) << k.explain();
  EXPECT_TRUE(not_ready(k.pull("alice", 10)));
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  auto st = k.status();
  ASSERT_TRUE(st);
  for (auto& ps : st->partitions) {
    EXPECT_EQ(ps.h0, 300);
    EXPECT_GE(ps.next_offset, ps.h0);
  }
  EXPECT_TRUE(k.model_equals_redis()) << k.explain();
}

TEST(Kit, RedisDownKeepsTheProjectionNotReadyUntilItIsBack) {
  kit k;
  fill(k, 5);
  k.start();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  k.redis_down();
  k.produce(0, "while-down", 9000, {"bob"});
  ASSERT_TRUE(k.run_until_state("dirty")) << k.explain();
  k.advance(10s);
  EXPECT_FALSE(k.ready());
  EXPECT_FALSE(k.score("bob", "while-down"));
  k.redis_up();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  ASSERT_TRUE(k.run_until_offset(0, k.log_end(0))) << k.explain();
  EXPECT_EQ(k.score("bob", "while-down"), 9000);
  EXPECT_TRUE(k.model_equals_redis()) << k.explain();
}

TEST(Kit, AnErrorReplyIsRetriedNeverSkipped) {
  kit k;
  fill(k, 3);
  k.start();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  k.redis_error_reply();
  k.produce(2, "after-error", 7000, {"carol"});
  ASSERT_TRUE(k.run_until_offset(2, k.log_end(2))) << k.explain();
  EXPECT_EQ(k.score("carol", "after-error"), 7000);
  auto st = k.status();
  ASSERT_TRUE(st);
  EXPECT_EQ(st->failures.count("redis_reply"), 1u);
  EXPECT_TRUE(k.model_equals_redis()) << k.explain();
}

TEST(Kit, AFailoverThatLosesWritesIsRepairedFromTheLog) {
  kit k;
  fill(k, 10);
  k.start();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  for (int i = 0; i < 5; ++i)
    k.produce(0, "new-" + std::to_string(i), 8000 + i, {"dave"});
  ASSERT_TRUE(k.run_until_offset(0, k.log_end(0))) << k.explain();
  ASSERT_EQ(k.score("dave", "new-4"), 8004);
  EXPECT_EQ(k.redis_failover(3), 3u);
  // The last ZADDs and the checkpoint above them are gone.
  EXPECT_FALSE(k.score("dave", "new-4"));
  EXPECT_LT(*k.checkpoint(0), k.log_end(0));
  // An idle projection notices at its next write: its guarded checkpoint
  // write finds the older checkpoint, it goes dirty and replays from there.
  k.produce(0, "next", 8100, {"dave"});
  ASSERT_TRUE(k.run_until_offset(0, k.log_end(0))) << k.explain();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  EXPECT_EQ(k.score("dave", "new-4"), 8004);
  EXPECT_TRUE(k.model_equals_redis()) << k.explain();
}

TEST(Kit, BrokerDownOutlastingEveryTimeoutNeverOpensReadiness) {
  kit k;
  fill(k, 5);
  k.broker_down();
  k.start();
  k.advance(30s);
  EXPECT_FALSE(k.ready()) << k.explain();
  for (auto& s : k.statuses())
    EXPECT_NE(s.state, "ready");
  k.broker_up();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  EXPECT_TRUE(k.model_equals_redis()) << k.explain();
}

TEST(Kit, ASlowBrokerDelaysButLosesNothing) {
  kit k;
  k.broker_slow(500ms);
  fill(k, 5);
  k.start();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  k.produce(1, "slow", 6000, {"erin"});
  k.advance(200ms);
  EXPECT_FALSE(k.score("erin", "slow"));
  ASSERT_TRUE(k.run_until_offset(1, k.log_end(1))) << k.explain();
  EXPECT_EQ(k.score("erin", "slow"), 6000);
  EXPECT_TRUE(k.model_equals_redis()) << k.explain();
}

TEST(Kit, TransactionsProjectOnlyWhatCommits) {
  kit k;
  fill(k, 2);
  auto t1 = k.begin_transaction(0);
  k.produce_in(0, t1, "kept", 4000, {"frank"});
  auto t2 = k.begin_transaction(1);
  k.produce_in(1, t2, "dropped", 4001, {"frank"});
  k.start();
  // The open transactions pin the LSO: H0 stops below them.
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  EXPECT_FALSE(k.score("frank", "kept"));
  k.commit(0, t1);
  k.abort(1, t2);
  ASSERT_TRUE(k.run_until_offset(0, k.log_end(0))) << k.explain();
  ASSERT_TRUE(k.run_until_offset(1, k.log_end(1))) << k.explain();
  EXPECT_EQ(k.score("frank", "kept"), 4000);
  EXPECT_FALSE(k.score("frank", "dropped"));
  EXPECT_TRUE(k.model_equals_redis()) << k.explain();
}

TEST(Kit, ARecreatedTopicIsRefused) {
  kit k;
  fill(k, 5);
  k.start();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  k.recreate_topic();
  k.produce(0, "new-topic", 9999, {"gina"});
  ASSERT_TRUE(k.run_until_state("refused")) << k.explain();
  auto st = k.status();
  ASSERT_TRUE(st);
  EXPECT_NE(st->last_error.find("topic id differs"), std::string::npos) << st->last_error;
  k.advance(10s);
  EXPECT_EQ(k.state(), "refused");
  EXPECT_FALSE(k.score("gina", "new-topic"));
  EXPECT_TRUE(k.check_invariants()) << k.explain();
}

TEST(Kit, AnUncleanTruncationBelowTheCheckpointIsRefused) {
  kit k;
  fill(k, 10);
  k.start();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  k.unclean_truncate(0, 4);
  k.produce(0, "refill", 5555, {"hank"});
  k.restart();
  ASSERT_TRUE(k.run_until_state("refused")) << k.explain();
  EXPECT_FALSE(k.score("hank", "refill"));
  EXPECT_TRUE(k.check_invariants()) << k.explain();
}

TEST(Kit, AddedPartitionsAreRefused) {
  kit k;
  fill(k, 2);
  k.start();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  k.add_partitions(1);
  k.restart();
  ASSERT_TRUE(k.run_until_state("refused")) << k.explain();
  EXPECT_FALSE(k.ready());
}

TEST(Kit, AnEvictedMetaIsRefusedAtTheNextStart) {
  kit k;
  fill(k, 2);
  k.start();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  ASSERT_TRUE(k.redis_evict("session_projection:meta"));
  EXPECT_FALSE(k.redis_evict("session_projection:no-such-key"));
  k.restart();
  ASSERT_TRUE(k.run_until_state("refused")) << k.explain();
}

TEST(Kit, HostOwnershipRevokeThenAssignLosesNothing) {
  kit k;
  k.settings().ownership = qsp::ownership_mode::host;
  k.settings().node_id = "node-a";
  fill(k, 5);
  k.start();
  ASSERT_TRUE(k.assign({0, 1, 2})) << k.explain();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  ASSERT_TRUE(k.revoke({1})) << k.explain();
  k.produce(1, "while-revoked", 3000, {"ivy"});
  k.advance(1s);
  EXPECT_FALSE(k.score("ivy", "while-revoked"));
  ASSERT_TRUE(k.assign({1})) << k.explain();
  ASSERT_TRUE(k.run_until_offset(1, k.log_end(1))) << k.explain();
  EXPECT_EQ(k.score("ivy", "while-revoked"), 3000);
  EXPECT_TRUE(k.model_equals_redis()) << k.explain();
}

TEST(Kit, RedisClusterShardFailoverLosesNothing) {
  kit_options o;
  o.redis_shards = 3;
  kit k{o};
  EXPECT_EQ(k.redis_shard_count(), 3);
  fill(k, 10);
  k.start();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  k.redis_moved();
  k.produce(0, "moved", 7100, {"jack"});
  ASSERT_TRUE(k.run_until_offset(0, k.log_end(0))) << k.explain();
  EXPECT_EQ(k.score("jack", "moved"), 7100);
  k.redis_ask();
  k.produce(2, "asked", 7200, {"jack"});
  ASSERT_TRUE(k.run_until_offset(2, k.log_end(2))) << k.explain();
  EXPECT_EQ(k.score("jack", "asked"), 7200);
  for (int i = 0; i < 6; ++i)
    k.produce(i % 3, "more-" + std::to_string(i), 7300 + i, {"kate", "liam", "mona"});
  ASSERT_TRUE(k.run_until_offset(0, k.log_end(0))) << k.explain();
  ASSERT_TRUE(k.run_until_offset(1, k.log_end(1))) << k.explain();
  ASSERT_TRUE(k.run_until_offset(2, k.log_end(2))) << k.explain();
  EXPECT_GT(k.redis_shard_failover(1, 4), 0u);
  ASSERT_TRUE(k.run_until([&] {
    return k.ready() && k.model_equals_redis();
  })) << k.explain();
  EXPECT_TRUE(k.check_invariants()) << k.explain();
}

TEST(Kit, AHostActorSeesTheSameSystem) {
  kit k;
  fill(k, 3);
  k.start();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  // A host actor in the kit's system asks the projection, as a PULL
  // handler would; it runs when the kit runs.
  auto answer = std::make_shared<std::string>();
  auto proj = k.projection();
  // (CAF 0.17: a function actor gets its state as spawn arguments.)
  k.system().spawn(
    [](caf::event_based_actor* self, std::shared_ptr<std::string> out,
       qsp::projection_actor target) {
      self->request(target, caf::infinite, qsp::atom::pull_v, std::string{"alice"}, uint32_t{1})
        .then([out](const qsp::session_list& xs) { *out = xs.empty() ? "empty" : xs[0].conversation_id; },
              [out](const caf::error&) { *out = "error"; });
    },
    answer, proj);
  k.run();
  // Newest first; equal scores by member, descending (ZREVRANGE).
  EXPECT_EQ(*answer, "conv-2-2");
}

TEST(Kit, TheSameActionsReplayTheSameRun) {
  auto once = [] {
    kit k;
    fill(k, 50);
    k.start();
    k.run_until_ready();
    k.redis_freeze();
    k.advance(2s);
    k.redis_release();
    k.run_until_ready();
    return std::make_pair(k.digest(), k.redis_sessions());
  };
  auto a = once(), b = once();
  EXPECT_EQ(a.first, b.first);
  EXPECT_EQ(a.second, b.second);
}

// What a host sees when its test fails: explain() names what was not
// reached and the last events.  (An invariant violation needs a bug in the
// projection: tests/testkit/schedule_test.cpp plants some, and checks that
// the failure names the invariant.)
TEST(Kit, AFailureExplainsItselfWithTheLastEvents) {
  kit k;
  fill(k, 3);
  k.broker_down(); // the projection never gets far
  k.start();
  k.advance(100ms);
  k.produce(0, "x", 1, {"zed"});
  ASSERT_FALSE(k.failed());
  ASSERT_TRUE(k.check_invariants());
  k.broker_up();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  ASSERT_TRUE(k.redis_evict("convs:zed"));
  // Evictions are accounted for: Redis may lack the evicted entries.
  EXPECT_TRUE(k.check_invariants()) << k.explain();
  EXPECT_TRUE(k.model_equals_redis()) << k.explain();
  EXPECT_FALSE(k.run_until_state("no-such-state", 50ms));
  // Not reached is that call's false, not a broken invariant.
  EXPECT_FALSE(k.failed());
  auto why = k.explain();
  EXPECT_NE(why.find("no-such-state"), std::string::npos) << why;
  EXPECT_NE(why.find("last events"), std::string::npos) << why;
  EXPECT_NE(why.find("evict convs:zed"), std::string::npos) << why;
  // The next wait that succeeds leaves nothing to explain.
  ASSERT_TRUE(k.run_until_ready());
  EXPECT_EQ(k.explain(), "");
}

} // namespace
