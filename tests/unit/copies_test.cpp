// core::judge_copies and core::check_cluster_prerequisites (Redis Cluster
// mode, DESIGN.md §15): the start from the checkpoints and every primary's
// copy, and the cases that fail closed.
#include <gtest/gtest.h>

#include "core/copies.hpp"

using namespace qsp::core;

namespace {

const std::string a40(40, 'a'), b40(40, 'b'), z40(40, '0');

shard_report primary(const std::string& addr, const std::string& copy, int64_t at = -1) {
  shard_report s;
  s.node_id = addr + "-id";
  s.address = addr;
  s.slots = "0-16383";
  s.version = "7.0.15";
  s.maxmemory_policy = "noeviction";
  s.cluster_state = "ok";
  s.replid = s.copy_replid = a40;
  s.replid2 = z40;
  s.copy = copy;
  s.copy_identity = {{"dispatch_topic", "t"}};
  if (at >= 0)
    s.positions[0] = {at, 3};
  return s;
}

const hash_fields meta{{"dispatch_topic", "t"}, {"partition_count", "1"}};

} // namespace

TEST(Copies, TheStartIsTheLowestValidCopyBelowTheCheckpoint) {
  redis_cluster_state c;
  c.copies_marked = true;
  c.shards = {primary("n1", "valid", 40), primary("n2", "valid", 25), primary("n3", "valid", 55)};
  auto f = judge_copies(c, {{0, 40}}, meta);
  EXPECT_TRUE(f.problems.empty());
  EXPECT_FALSE(f.seed);
  ASSERT_EQ(f.replay_from.count(0), 1u);
  EXPECT_EQ(f.replay_from[0].first, 25);
  EXPECT_EQ(f.replay_from[0].second, 3);
  // Copies at or above the checkpoint change nothing.
  c.shards[1].positions[0] = {40, 3};
  EXPECT_TRUE(judge_copies(c, {{0, 40}}, meta).replay_from.empty());
}

TEST(Copies, AFirstStartSeedsAndAnEstablishedOneRefusesAPrimaryWithoutACopy) {
  redis_cluster_state c;
  c.shards = {primary("n1", "absent"), primary("n2", "foreign")};
  auto first = judge_copies(c, {{0, 10}}, meta);
  EXPECT_TRUE(first.seed);
  EXPECT_TRUE(first.problems.empty());
  c.copies_marked = true;
  auto later = judge_copies(c, {{0, 10}}, meta);
  EXPECT_FALSE(later.seed);
  ASSERT_EQ(later.problems.size(), 2u);
  EXPECT_NE(later.problems[0].reason.find("n1"), std::string::npos);
  EXPECT_NE(later.problems[1].reason.find("n2"), std::string::npos);
  // A valid copy without this partition: the partition had no position in
  // that history (first checkpointed after the seed, its first copy lost in
  // a failover): replayed from the start of its log, not refused (found by
  // the test kit's randomized schedules, which ended refused).
  c.shards = {primary("n1", "valid"), primary("n2", "valid", 8)};
  auto unnamed = judge_copies(c, {{0, 10}}, meta);
  EXPECT_TRUE(unnamed.problems.empty());
  ASSERT_EQ(unnamed.replay_from.count(0), 1u);
  EXPECT_EQ(unnamed.replay_from.at(0), (std::pair<int64_t, int32_t>{0, -1}));
  // Nothing checkpointed: nothing to vouch for.
  EXPECT_TRUE(judge_copies(c, {}, meta).problems.empty());
}

TEST(Copies, SlotsThatGrewAfterAFailoverRefuseButNotWithoutOne) {
  redis_cluster_state c;
  c.copies_marked = true;
  auto s = primary("n1", "valid", 10);
  s.slots_grew = true;
  c.shards = {s};
  // Same history since the copy: the stream is intact.
  EXPECT_TRUE(judge_copies(c, {{0, 10}}, meta).problems.empty());
  // Valid through replid2 only (a failover since): migrated keys may be lost.
  c.shards[0].replid = b40;
  c.shards[0].replid2 = a40;
  auto f = judge_copies(c, {{0, 10}}, meta);
  ASSERT_EQ(f.problems.size(), 1u);
  EXPECT_NE(f.problems[0].reason.find("migrated"), std::string::npos);
}

TEST(Copies, AnotherIdentityOrAnUnreadableCopyRefuses) {
  redis_cluster_state c;
  c.copies_marked = true;
  auto s = primary("n1", "valid", 10);
  s.copy_identity["dispatch_topic"] = "other";
  c.shards = {s, primary("n2", "unreadable: copy: field p:0: stored \"x\"")};
  auto f = judge_copies(c, {{0, 10}}, meta);
  ASSERT_EQ(f.problems.size(), 2u);
  EXPECT_EQ(f.problems[0].field, "copy dispatch_topic");
  EXPECT_NE(f.problems[1].observed.find("unreadable"), std::string::npos);
}

TEST(Copies, PrerequisitesOnEveryPrimary) {
  redis_cluster_state c;
  c.shards = {primary("n1", "valid"), primary("n2", "valid")};
  EXPECT_TRUE(check_cluster_prerequisites(c, false).empty());
  c.shards[1].version = "6.0.9";
  c.shards[1].maxmemory_policy = "allkeys-lru";
  c.shards[0].cluster_state = "fail";
  c.uncovered = "0-99";
  auto ps = check_cluster_prerequisites(c, false);
  EXPECT_EQ(ps.size(), 4u);
  EXPECT_EQ(check_cluster_prerequisites(c, true).size(), 3u);
}
