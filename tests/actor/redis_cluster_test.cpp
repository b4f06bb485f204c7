// Redis Cluster mode (docs/DESIGN.md §15) on the fakes: every primary's copy of
// the positions, the start from the lowest of the checkpoint and the copies,
// the replay below a stored checkpoint, and a redirection in the middle of a
// batch.  The fakes record every copy write with the entries below it whose
// ZADDs were not applied yet (fake_world::copy_writes).
#include "tests/actor/fixture.hpp"

using namespace qsp;
using namespace qsp::test;

namespace {

struct RedisCluster : projection_fixture {
  /// Three primaries; their copies as `copy` says ("valid" with positions,
  /// "absent", ...).
  void three_shards(const std::vector<std::pair<std::string, int64_t>>& copies) {
    world->cluster.shards.clear();
    settings.redis.cluster_nodes = {"10.0.0.1:6379"};
    settings.ns = "{session_projection}";
    world->ns = settings.ns;
    int i = 0;
    for (auto& [verdict, at] : copies) {
      core::shard_report s;
      s.node_id = "node-" + std::to_string(i);
      s.address = "10.0.0." + std::to_string(i + 1) + ":6379";
      s.slots = std::to_string(i * 5461) + "-" + std::to_string(i == 2 ? 16383 : i * 5461 + 5460);
      s.replicas = 1;
      s.version = "7.0.15";
      s.maxmemory_policy = "noeviction";
      s.cluster_state = "ok";
      s.replid = s.copy_replid = std::string(40, static_cast<char>('a' + i));
      s.replid2 = std::string(40, '0');
      s.copy = verdict;
      if (verdict == "valid" && at >= 0)
        s.positions[0] = {at, 0};
      world->cluster.shards.push_back(s);
      ++i;
    }
  }
  void mark_copies() { world->hashes[world->meta_key()][core::copies_field] = "1"; }
  std::vector<int64_t> assigned_at(int32_t p) {
    std::vector<int64_t> out;
    for (auto& e : world->events)
      if (e.what == fake_event::kind::assigned && e.partition == p)
        out.push_back(e.offset);
    return out;
  }
  void check_every_copy_followed_its_replies() {
    for (auto& w : world->copy_writes)
      for (auto& u : w.unapplied)
        FAIL() << "a copy was written before the ZADD of " << u << " was applied";
  }
};

} // namespace

TEST_F(RedisCluster, TheFirstStartSeedsTheCopiesAndEveryCheckpointRoundWritesThemFirst) {
  fill(0, 30);
  three_shards({{"absent", -1}, {"absent", -1}, {"absent", -1}});
  settings.max_batch_records = 5;
  h0 = world->lsos();
  start();
  ASSERT_TRUE(drive_to("ready"));
  ASSERT_TRUE(!world->copy_writes.empty());
  EXPECT_TRUE(world->copy_writes.front().seed);
  EXPECT_EQ(world->hashes[world->meta_key()][core::copies_field], "1");
  ASSERT_NO_FATAL_FAILURE(check_every_copy_followed_its_replies());
  // The last copy is at the checkpoint, on every primary.
  EXPECT_TRUE(world->checkpoint(0) == std::optional<int64_t>{30});
  for (auto& sh : world->cluster.shards)
    EXPECT_TRUE(sh.positions[0].first == 30);
  EXPECT_TRUE(world->sessions == expected_sessions());
}

TEST_F(RedisCluster, ARedirectionInTheMiddleOfABatchHoldsTheCopyBackUntilTheResentReply) {
  fill(0, 40);
  three_shards({{"valid", -1}, {"valid", -1}, {"valid", -1}});
  settings.max_batch_records = 5;
  settings.max_batches_in_flight = 2;
  // The third batch's slot moved: its ZADDs land only with the resend.
  world->moved_fault.arm(1, 2);
  world->moved_not_yet = 3;
  h0 = world->lsos();
  start();
  ASSERT_TRUE(drive_to("ready"));
  EXPECT_TRUE(world->calls.not_yet >= 3);
  EXPECT_TRUE(world->copy_writes.size() >= 2);
  ASSERT_NO_FATAL_FAILURE(check_every_copy_followed_its_replies());
  EXPECT_TRUE(world->checkpoint(0) == std::optional<int64_t>{40});
  EXPECT_TRUE(world->sessions == expected_sessions());
}

TEST_F(RedisCluster, TheStartIsTheLowestOfTheCheckpointAndEveryPrimaryCopy) {
  // A previous run projected 40 records; the second primary failed over to
  // a replica that holds its copy at 25 and lost its writes above it.
  fill(0, 60);
  three_shards({{"valid", 40}, {"valid", 25}, {"valid", 40}});
  seed_checkpoints({{0, 40}});
  mark_copies();
  // Redis holds what the surviving copies vouch for: records below 25 (the
  // entries 25..39 went with the failed-over primary's lost writes).
  floor[0] = 0;
  // The other two primaries kept theirs (their copies say 40).
  for (int64_t off = 0; off < 40; ++off)
    for (auto& u : {"u" + std::to_string(off % 5), "u" + std::to_string((off + 1) % 5)})
      if (off < 25 || world->shard_of(world->convs_prefix + u) != 1)
        world->sessions[u]["p0-c" + std::to_string(off)] = 1000 + off;
  std::vector<int64_t> written;
  world->before_checkpoint_write = [&](int32_t, int64_t next) { written.push_back(next); };
  settings.max_batch_records = 5;
  h0 = world->lsos();
  start();
  ASSERT_TRUE(drive_to("ready"));
  // The consumer started at the copy, not at the checkpoint ...
  auto at = assigned_at(0);
  ASSERT_TRUE(!at.empty());
  EXPECT_EQ(at.front(), 25);
  // ... replayed 25..40 without writing the checkpoint (it never moves
  // backwards), then moved it on.
  ASSERT_TRUE(!written.empty());
  for (auto next : written)
    EXPECT_GT(next, 40);
  EXPECT_TRUE(world->checkpoint(0) == std::optional<int64_t>{60});
  // The copies were rewritten as the replay passed them.
  bool copied_below = false;
  for (auto& w : world->copy_writes)
    copied_below = copied_below || (w.positions.count(0) != 0 && w.positions.at(0).first <= 40);
  EXPECT_TRUE(copied_below);
  ASSERT_NO_FATAL_FAILURE(check_every_copy_followed_its_replies());
  EXPECT_TRUE(world->sessions == expected_sessions());
}

TEST_F(RedisCluster, APrimaryWithoutACopyOnceTheCopiesAreEstablishedRefusesNamingIt) {
  fill(0, 20);
  three_shards({{"valid", 20}, {"foreign", -1}, {"valid", 20}});
  seed_checkpoints({{0, 20}});
  mark_copies();
  h0 = world->lsos();
  start();
  ASSERT_TRUE(drive_to("refused"));
  EXPECT_TRUE(last_error().find("10.0.0.2:6379") != std::string::npos);
  EXPECT_TRUE(last_error().find("holds no copy") != std::string::npos);
  EXPECT_TRUE(world->copy_writes.empty());
}

// Found by the test kit's randomized schedules: a partition first
// checkpointed after the seed has no field in the seeded copy; a failover
// that loses its first copy leaves a valid copy without it.  The partition
// is replayed from the start of its log, not refused.
TEST_F(RedisCluster, AValidCopyWithoutACheckpointedPartitionReplaysItFromTheLogStart) {
  fill(0, 20);
  three_shards({{"valid", 20}, {"valid", -1}, {"valid", 20}});
  seed_checkpoints({{0, 20}});
  mark_copies();
  // The other two primaries hold what their copies (at 20) vouch for; the
  // failed-over primary lost its entries (the replay restores them).
  for (int64_t off = 0; off < 20; ++off)
    for (auto& u : {"u" + std::to_string(off % 5), "u" + std::to_string((off + 1) % 5)})
      if (world->shard_of(world->convs_prefix + u) != 1)
        world->sessions[u]["p0-c" + std::to_string(off)] = 1000 + off;
  floor.clear();
  h0 = world->lsos();
  start();
  ASSERT_TRUE(drive_to("ready"));
  auto at = assigned_at(0);
  ASSERT_TRUE(!at.empty());
  EXPECT_EQ(at.front(), 0);
  EXPECT_TRUE(world->checkpoint(0) == std::optional<int64_t>{20});
  ASSERT_NO_FATAL_FAILURE(check_every_copy_followed_its_replies());
  EXPECT_TRUE(world->sessions == expected_sessions());
}
