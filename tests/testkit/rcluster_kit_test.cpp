// The test kit's Redis Cluster, as real as issue 32 asks: failovers to a
// replica with its own node id (chains included, the old primary alive),
// a primary restarted without its data, slot migration both ways, a
// primary joining and leaving.  Each of the review's four findings meets
// the real projection here (public header only, linked as a host links
// it); tests/testkit/schedule_test.cpp plants the pre-fix behaviour of
// findings 1 and 2 and shows that this file's scenarios and the
// randomized schedules catch it.
#include <qsession/projection/testkit.hpp>

#include <gtest/gtest.h>

#include <string>

namespace {

using namespace std::chrono_literals;
using qsp::testkit::kit;
using qsp::testkit::kit_options;

kit_options three_shards() {
  kit_options o;
  o.redis_shards = 3;
  return o;
}

void fill(kit& k, int per_partition, int from = 0) {
  for (int32_t p = 0; p < k.partition_count(); ++p)
    for (int i = from; i < from + per_partition; ++i)
      k.produce(p, "conv-" + std::to_string(p) + "-" + std::to_string(i), 1000 + i,
                {"alice", "bob", "user-" + std::to_string(i % 7)});
}

bool caught_up(kit& k) {
  for (int32_t p = 0; p < k.partition_count(); ++p)
    if (!k.run_until_offset(p, k.last_stable_offset(p)))
      return false;
  return true;
}

std::string last_error(kit& k) {
  auto& st = k.statuses();
  return st.empty() ? std::string{} : st.back().last_error;
}

} // namespace

// Finding 1: a lossy takeover nobody noticed (nothing in flight to that
// shard), then a graceful failover of the promoted replica: a chain.  The
// running node meets the new primary at its next write (MOVED) and must
// not write it a copy vouching for what the takeover lost: it restarts, and
// the start, which cannot prove that shard, refuses naming it.  (Before
// the fix the copy was written and the next start replayed from it: the
// lost entries stayed lost; schedule_test's mutant test shows it.)
TEST(KitRedisCluster, AnUnnoticedChainOfFailoversIsJudgedNotTrusted) {
  kit k{three_shards()};
  fill(k, 12);
  k.start();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  ASSERT_TRUE(caught_up(k)) << k.explain();
  k.advance(100ms);  // idle: nothing in flight
  ASSERT_TRUE(k.redis_cluster_settled()) << k.explain();
  ASSERT_GT(k.redis_shard_failover(1, 4, false), 0u);
  EXPECT_FALSE(k.redis_shard_copy_current(1));
  EXPECT_FALSE(k.redis_cluster_settled());
  k.redis_shard_failover(1, 0, false);
  fill(k, 6, 100);
  ASSERT_TRUE(k.run_until_state("refused", 30s)) << k.explain();
  EXPECT_NE(last_error(k).find("holds no copy"), std::string::npos) << last_error(k);
  EXPECT_TRUE(k.check_invariants()) << k.explain();
  // During the refusal the projection does not serve.
  EXPECT_FALSE(k.pull("alice"));
  k.advance(10s);
  EXPECT_EQ(k.state(), "refused");
}

// Finding 2: after a failover the promoted replica's copy key has a new
// name.  Every start writes every primary a copy naming every checkpointed
// partition, so traffic to one partition only, retention past the head of
// every partition and a restart refuse nothing and skip nothing.  (Before
// the fix the new key named only partition 0, and the next start replayed
// partitions 1 and 2 from offset 0, below the low watermark: refused for
// ever.)
TEST(KitRedisCluster, ARenamedCopyKeyVouchesForEveryPartition) {
  kit k{three_shards()};
  fill(k, 12);
  k.start();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  ASSERT_TRUE(caught_up(k)) << k.explain();
  k.advance(100ms);
  k.redis_shard_failover(1, 0, false);  // a clean takeover: nothing lost
  for (int i = 0; i < 8; ++i)
    k.produce(0, "only-p0-" + std::to_string(i), 5000 + i, {"carol"});
  ASSERT_TRUE(k.run_until([&] {
    return k.ready() && k.redis_shard_copy_current(1) && k.checkpoint(0)
           && *k.checkpoint(0) == k.last_stable_offset(0);
  })) << k.explain();
  for (int32_t p = 0; p < k.partition_count(); ++p)
    k.delete_records(p, *k.checkpoint(p));
  ASSERT_TRUE(k.restart()) << k.explain();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  for (auto& s : k.statuses())
    EXPECT_NE(s.state, "refused") << s.last_error;
  EXPECT_TRUE(k.model_equals_redis()) << k.explain();
  EXPECT_TRUE(k.check_invariants()) << k.explain();
}

// Finding 3: scale-out.  A primary joins and takes slots, with the node
// running (it meets the new primary, restarts once, and its start writes
// the new primary a copy at the checkpoints) and with the node stopped.
// Both end ready with nothing lost.  A primary leaving is no event either.
TEST(KitRedisCluster, ScaleOutAndInEndReadyWithNothingLost) {
  kit k{three_shards()};
  fill(k, 10);
  k.start();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  ASSERT_TRUE(caught_up(k)) << k.explain();
  // Running.
  auto joined = k.redis_add_primary();
  EXPECT_EQ(joined, 3);
  EXPECT_GT(k.redis_move_slots(0, joined, 500), 0);
  fill(k, 10, 100);
  ASSERT_TRUE(caught_up(k)) << k.explain();
  ASSERT_TRUE(k.run_until([&] { return k.ready() && k.redis_shard_copy_current(joined); }))
    << k.explain();
  EXPECT_TRUE(k.model_equals_redis()) << k.explain();
  // Stopped.
  ASSERT_TRUE(k.stop()) << k.explain();
  auto second = k.redis_add_primary();
  EXPECT_GT(k.redis_move_slots(1, second, 700), 0);
  EXPECT_GT(k.redis_move_slots(2, second, 300), 0);
  fill(k, 5, 200);
  k.start();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  ASSERT_TRUE(caught_up(k)) << k.explain();
  for (auto& s : k.statuses())
    EXPECT_NE(s.state, "refused") << s.last_error;
  EXPECT_TRUE(k.model_equals_redis()) << k.explain();
  // Scale-in: the joined primary leaves again, its slots moved back.
  ASSERT_TRUE(k.redis_remove_primary(joined)) << k.explain();
  fill(k, 5, 300);
  ASSERT_TRUE(caught_up(k)) << k.explain();
  ASSERT_TRUE(k.restart()) << k.explain();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  EXPECT_TRUE(k.model_equals_redis()) << k.explain();
  EXPECT_TRUE(k.check_invariants()) << k.explain();
}

// Finding 3, the other side: a primary that is known and comes back
// without its data (a restart without persistence) is not taken for a new
// one: refused, naming it.
TEST(KitRedisCluster, AKnownPrimaryRestartedWithoutDataRefuses) {
  kit k{three_shards()};
  fill(k, 10);
  k.start();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  ASSERT_TRUE(caught_up(k)) << k.explain();
  ASSERT_TRUE(k.stop()) << k.explain();
  int32_t victim = -1;
  for (int32_t s = 0; s < k.redis_shard_count() && victim < 0; ++s)
    if (k.redis_shard_restart_empty(s))
      victim = s;
  ASSERT_GE(victim, 0);
  k.start();
  ASSERT_TRUE(k.run_until_state("refused")) << k.explain();
  EXPECT_NE(last_error(k).find("holds no copy"), std::string::npos) << last_error(k);
  EXPECT_FALSE(k.pull("alice"));
  EXPECT_TRUE(k.check_invariants()) << k.explain();
}

// Finding 4: a slot leaves a primary and comes back (its slot set looks
// unchanged), then that primary fails over to a replica that got the DELs
// but not the RESTOREs, all while the node is stopped.  The copy's epochs
// show an import the promoted replica's history cannot vouch for: refused.
// (Before the fix the sets were compared only, the start trusted the copy,
// and the imported keys stayed lost.)
TEST(KitRedisCluster, AMigrationThereAndBackBeforeAFailoverRefuses) {
  kit k{three_shards()};
  fill(k, 10);
  k.start();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  ASSERT_TRUE(caught_up(k)) << k.explain();
  ASSERT_TRUE(k.stop()) << k.explain();
  // Shard 2 gives slots to shard 1, which gives them back: shard 2's slots
  // are what its copy says again.
  auto n = k.redis_move_slots(2, 1, 4000);
  ASSERT_GT(n, 0);
  ASSERT_EQ(k.redis_move_slots(1, 2, n), n);
  // The replica got the DELs of the first move, not the RESTOREs of the
  // second (the last write of shard 2's stream).
  ASSERT_GT(k.redis_shard_failover(2, 1), 0u);
  k.start();
  ASSERT_TRUE(k.run_until_state("refused")) << k.explain();
  EXPECT_NE(last_error(k).find("copy epoch"), std::string::npos) << last_error(k);
  EXPECT_FALSE(k.pull("alice"));
  EXPECT_TRUE(k.check_invariants()) << k.explain();
}

// A failover re-judged by a start, then slots moving into the promoted
// primary below its lowest slot (its copy key's name changes) and some back
// out: its own history holds every import, so nothing refuses.  (Found by
// the randomized schedules while the kit's Redis Cluster was made real.)
TEST(KitRedisCluster, ImportsAfterAJudgedFailoverAreThePrimarysOwn) {
  kit k{three_shards()};
  fill(k, 10);
  k.start();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  ASSERT_TRUE(caught_up(k)) << k.explain();
  k.redis_shard_failover(2, 0, false);
  ASSERT_TRUE(k.restart()) << k.explain();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  ASSERT_TRUE(k.redis_cluster_settled()) << k.explain();
  ASSERT_GT(k.redis_move_slots(1, 2, 389), 0);
  ASSERT_GT(k.redis_move_slots(2, 1, 77), 0);
  fill(k, 3, 100);
  ASSERT_TRUE(k.restart()) << k.explain();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  ASSERT_TRUE(caught_up(k)) << k.explain();
  EXPECT_TRUE(k.model_equals_redis()) << k.explain();
}

// Finding 5: `redis-cli --cluster fix` may overwrite a key (MIGRATE ...
// REPLACE) on a shard that never failed over; no copy can see it, `audit`
// can.  The repair: one start with projection.replay-from-log-start, which
// replays every partition from the log's start (ZADD GT restores what the
// overwrite took; the checkpoints do not move back).  A plain restart does
// not repair it, which is why the setting exists.
TEST(KitRedisCluster, AGapAuditFoundIsRepairedByAReplayFromTheLogStart) {
  kit k{three_shards()};
  fill(k, 10);
  k.start();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  ASSERT_TRUE(caught_up(k)) << k.explain();
  ASSERT_EQ(k.score("bob", "conv-1-3"), 1003);
  ASSERT_TRUE(k.redis_evict(k.settings().convs_prefix + "bob"));  // the overwritten key
  std::vector<int64_t> before;
  for (int32_t p = 0; p < k.partition_count(); ++p)
    before.push_back(*k.checkpoint(p));
  ASSERT_TRUE(k.restart()) << k.explain();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  k.advance(1s);
  EXPECT_FALSE(k.score("bob", "conv-1-3")) << "a plain restart does not replay below the checkpoint";
  ASSERT_TRUE(k.stop()) << k.explain();
  k.settings().replay_from_log_start = true;
  k.start();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  ASSERT_TRUE(caught_up(k)) << k.explain();
  EXPECT_EQ(k.score("bob", "conv-1-3"), 1003);
  EXPECT_EQ(k.score("bob", "conv-2-9"), 1009);
  for (int32_t p = 0; p < k.partition_count(); ++p)
    EXPECT_GE(*k.checkpoint(p), before[static_cast<size_t>(p)]);
  EXPECT_TRUE(k.check_invariants()) << k.explain();
}

// A shard's loss is the same loss after its slots move on.  A shard
// restarts without its data, the next start refuses naming it (no copy from
// its own history), and then its slots move to a primary that joined.  The
// projection is still refused, so nothing is served; the kit's
// [nothing lost] exemption must follow the lost slots to their new shard.
// (The kit once exempted the loss by shard index: the 333 Redis Cluster
// findings seeds counted six such refusals, seed 60 the first, as silent
// losses.)
TEST(KitRedisCluster, AShardsLossStaysTheNamedLossWhenItsSlotsMoveOn) {
  kit k{three_shards()};
  fill(k, 12);
  k.start();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  ASSERT_TRUE(caught_up(k)) << k.explain();
  auto home = k.redis_shard_of_namespace();
  auto lost = home == 0 ? 1 : 0;
  ASSERT_TRUE(k.redis_shard_restart_empty(lost));
  k.restart();
  ASSERT_TRUE(k.run_until_state("refused", 30s)) << k.explain();
  EXPECT_NE(last_error(k).find("holds no copy"), std::string::npos) << last_error(k);
  ASSERT_TRUE(k.check_invariants()) << k.explain();
  auto joined = k.redis_add_primary();
  ASSERT_GT(k.redis_move_slots(lost, joined, 16384), 0);
  // A graceful failover elsewhere resets the connections, so the kit judges
  // everything below the checkpoints again, the moved slots included.
  int32_t other = 0;
  while (other == home || other == lost)
    ++other;
  k.redis_shard_failover(other, 0, true);
  EXPECT_TRUE(k.check_invariants()) << k.explain();
  EXPECT_EQ(k.state(), "refused");
  EXPECT_FALSE(k.pull("alice"));
}
