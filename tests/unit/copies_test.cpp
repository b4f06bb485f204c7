// core::judge_copies and core::check_cluster_prerequisites (Redis Cluster
// mode, docs/DESIGN.md §15): the start from the checkpoints and every primary's
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

// Issue 32, finding 2: a start writes every primary a copy naming every
// checkpointed partition (the lower of the checkpoint and that primary's
// valid copy), whichever node owns it, so that no copy key ever vouches for
// only some partitions.  Before the fix there was no refresh: the seed named
// the seeding node's partitions only.
TEST(Copies, EveryStartVouchesForEveryCheckpointedPartitionOnEveryPrimary) {
  redis_cluster_state c;
  c.copies_marked = true;
  c.known_primaries = {{"n1-id", {a40}}, {"n2-id", {a40}}};
  c.shards = {primary("n1", "valid", 40), primary("n2", "valid", 25)};
  c.shards[0].positions[1] = {70, 2};
  c.shards[1].positions[1] = {90, 2};
  c.shards[0].copy_tag = "0";
  auto f = judge_copies(c, {{0, 40}, {1, 80}, {2, 5}}, meta, {{0, 3}, {1, 2}, {2, 1}});
  ASSERT_TRUE(f.problems.empty());
  // Partition 2 has no position in either copy: it is replayed from 0 and
  // named by neither refreshed copy (nothing proves more).
  EXPECT_EQ(f.replay_from.at(2), (std::pair<int64_t, int32_t>{0, -1}));
  EXPECT_NE(f.replay_cause.at(2).find("does not name partition 2"), std::string::npos);
  auto& n1 = f.refresh.positions.at("n1-id");
  auto& n2 = f.refresh.positions.at("n2-id");
  EXPECT_EQ(n1.at(0), (std::pair<int64_t, int32_t>{40, 3}));  // the checkpoint
  EXPECT_EQ(n1.at(1), (std::pair<int64_t, int32_t>{70, 2}));  // the copy, lower
  EXPECT_EQ(n2.at(0), (std::pair<int64_t, int32_t>{25, 3}));  // the copy, lower
  EXPECT_EQ(n2.at(1), (std::pair<int64_t, int32_t>{80, 2}));  // never above the checkpoint
  EXPECT_EQ(n1.count(2), 0u);
  EXPECT_TRUE(f.refresh.must_wait.empty());
  EXPECT_FALSE(f.refresh.mark);
  EXPECT_EQ(f.refresh.primaries.at("n1-id").replid, a40);
  EXPECT_EQ(f.refresh.primaries.at("n1-id").copy_tag, "0");
  // The first start: every primary at every checkpoint, every replica
  // acknowledging, and meta marked.
  c.copies_marked = false;
  auto seed = judge_copies(c, {{0, 40}, {1, 80}}, meta, {{0, 3}});
  EXPECT_TRUE(seed.refresh.mark);
  EXPECT_EQ(seed.refresh.must_wait.size(), 2u);
  EXPECT_EQ(seed.refresh.positions.at("n2-id").at(1), (std::pair<int64_t, int32_t>{80, -1}));
}

// Issue 32, finding 3: a primary that joined (unknown to the namespace, no
// former history) is new, not one that lost its data: it gets a copy at
// the checkpoints, WAITed for.  A known one without a copy, or one promoted
// from a primary the namespace never knew, still refuses, naming it.
TEST(Copies, APrimaryThatJoinedIsNewAndAnUnexplainedCopylessOneRefuses) {
  redis_cluster_state c;
  c.copies_marked = true;
  c.known_primaries = {{"n1-id", {a40}}};
  auto joined = primary("n9", "absent");
  joined.replid = b40;
  c.shards = {primary("n1", "valid", 40), joined};
  auto f = judge_copies(c, {{0, 40}}, meta);
  EXPECT_TRUE(f.problems.empty());
  EXPECT_TRUE(f.replay_from.empty());
  EXPECT_EQ(f.refresh.positions.at("n9-id").at(0).first, 40);
  EXPECT_EQ(f.refresh.must_wait.count("n9-id"), 1u);
  EXPECT_EQ(f.refresh.primaries.count("n9-id"), 1u);
  // The same node restarted without its data (known node id): refused.
  c.known_primaries["n9-id"] = {std::string(40, 'c')};
  auto lost = judge_copies(c, {{0, 40}}, meta);
  ASSERT_EQ(lost.problems.size(), 1u);
  EXPECT_NE(lost.problems[0].reason.find("n9"), std::string::npos);
  // Promoted from a primary the namespace never knew: refused, saying so.
  c.known_primaries.erase("n9-id");
  c.shards[1].replid2 = std::string(40, 'd');
  auto promoted = judge_copies(c, {{0, 40}}, meta);
  ASSERT_EQ(promoted.problems.size(), 1u);
  EXPECT_NE(promoted.problems[0].reason.find("never knew"), std::string::npos);
  // Promoted from a known primary that never gave it a copy: refused too.
  c.shards[1].replid2 = a40;
  EXPECT_EQ(judge_copies(c, {{0, 40}}, meta).problems.size(), 1u);
  // A namespace whose copies an older build established (no known
  // primaries): a copyless primary is never taken for a new one.
  c.shards[1].replid2 = z40;
  c.known_primaries.clear();
  EXPECT_EQ(judge_copies(c, {{0, 40}}, meta).problems.size(), 1u);
}

// Issue 32, finding 4: a copy valid only through a failover whose slots
// look unchanged, but a slot left the old primary and came back before the
// failover (each import's end bumps a configuration epoch).  Before the fix
// the sets were compared only, and this start trusted the copy.
TEST(Copies, AMigrationThereAndBackBeforeAFailoverRefuses) {
  redis_cluster_state c;
  c.copies_marked = true;
  c.known_primaries = {{"t-id", {a40}}, {"s-id", {a40}}};
  auto t = primary("t", "valid", 40);  // the copy was written at cluster epoch 5
  t.copy_current_epoch = 5;
  t.replid = b40;  // failed over since: valid through replid2
  t.replid2 = a40;
  auto s = primary("s", "valid", 40);
  // Slot s moved T -> S (S took epoch 6), back S -> T (T took 7), then T
  // failed over (8).  S still holds 6; 7 is held by none.
  s.config_epoch = 6;
  t.config_epoch = 8;
  c.shards = {t, s};
  auto f = judge_copies(c, {{0, 40}}, meta);
  ASSERT_EQ(f.problems.size(), 1u);
  EXPECT_EQ(f.problems[0].field, "copy epoch");
  EXPECT_NE(f.problems[0].observed.find("7"), std::string::npos);
  // A failover of S in between explains its epoch: the copy stands.
  c.shards[0].config_epoch = 7;
  EXPECT_TRUE(judge_copies(c, {{0, 40}}, meta).problems.empty());
  // Without a failover since the copy, imports are the primary's own
  // stream: the copy stands whatever the epochs.
  c.shards[0].config_epoch = 12;
  c.shards[0].replid = a40;
  c.shards[0].replid2 = z40;
  EXPECT_TRUE(judge_copies(c, {{0, 40}}, meta).problems.empty());
}

// Issue 45, rule 1: a primary the namespace never knew, without a former
// history, joined unless it was a judged primary's replica.  The registry
// records the last judged slots and replicas ("@slots", "@replicas"); a
// known primary's replica is a loss: replayed from offset 0, the cause
// named.
TEST(Copies, APrimaryWithoutAKnownOriginIsReplayedNotJoined) {
  redis_cluster_state c;
  c.copies_marked = true;
  c.known_primaries = {{"n1-id", {a40}}, {"n2-id", {std::string(40, 'c')}}};
  auto n1 = primary("n1", "valid", 40);
  n1.slots = "0-8191";
  auto fresh = primary("n9", "absent");
  fresh.slots = "8192-16383";
  fresh.replid = b40;
  c.shards = {n1, fresh};
  // An older registry (no slot map): taken for a primary that joined.
  auto old = judge_copies(c, {{0, 40}}, meta);
  EXPECT_TRUE(old.problems.empty());
  EXPECT_TRUE(old.replay_from.empty());
  EXPECT_EQ(old.refresh.positions.at("n9-id").at(0).first, 40);
  // n2 held those slots and n9 was its replica: a loss.
  read_registry_field("@slots", "n1-id:0-8191 n2-id:8192-16383", c);
  read_registry_field("@replicas", "n1-id:r1 n2-id:n9-id", c);
  auto lost = judge_copies(c, {{0, 40}}, meta);
  EXPECT_TRUE(lost.problems.empty());
  ASSERT_EQ(lost.replay_from.count(0), 1u);
  EXPECT_EQ(lost.replay_from.at(0).first, 0);
  EXPECT_NE(lost.replay_cause.at(0).find("replica of primary node n2-id"), std::string::npos)
    << lost.replay_cause.at(0);
  EXPECT_EQ(lost.refresh.positions.at("n9-id").count(0), 0u) << "vouched for what it lost";
  EXPECT_EQ(lost.refresh.must_wait.count("n9-id"), 1u);
  // Not its replica: it joined, even though n2 (the slots' last holder at
  // the last judgement) is no primary now (a scale-out, then n2 scaled in,
  // between two starts: the slots migrated; the kit's seeds 1224 and 2238).
  c.known_replicas.clear();
  auto joined = judge_copies(c, {{0, 40}}, meta);
  EXPECT_TRUE(joined.replay_from.empty());
  EXPECT_EQ(joined.refresh.positions.at("n9-id").at(0).first, 40);
}

// Issue 45, rule 1 (slots re-covered after a shard was lost): n2, recorded
// with slots 8192-16383, serves none now and n1 serves them.  Its copy key
// found nowhere (the reader's EXISTS where its lowest slot is served): its
// shard was lost, every checkpointed partition is replayed from offset 0,
// the cause naming n2 and its slots, and n1 (serving them now) gets a copy
// at position 0 until the running node replays them.  Found (a migration or a failover carried it): no replay.
// A registry without "@slots" (an older build's): nothing is looked for.
TEST(Copies, ALostShardsSlotsCoveredAgainAreReplayedFromTheLogStart) {
  redis_cluster_state c;
  c.copies_marked = true;
  c.known_primaries = {{"n1-id", {a40}}, {"n2-id", {b40}}, {"n3-id", {a40}}};
  auto n1 = primary("n1", "valid", 40);
  n1.slots = "0-4095,8192-16383";
  auto n3 = primary("n3", "valid", 40);
  n3.slots = "4096-8191";
  n1.positions[1] = n3.positions[1] = {7, 3};
  c.shards = {n1, n3};
  // Legacy registry: no "@slots", no primary is gone, nothing looked for.
  EXPECT_TRUE(gone_primaries(c).empty());
  c.gone_copy_found["n2-id"] = false;  // (a reader would not have asked)
  auto legacy = judge_copies(c, {{0, 40}}, meta);
  EXPECT_TRUE(legacy.problems.empty());
  EXPECT_TRUE(legacy.replay_from.empty());
  read_registry_field("@slots", "n1-id:0-4095 n2-id:8192-16383 n3-id:4096-8191", c);
  auto gone = gone_primaries(c);
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone.at("n2-id"), "8192-16383");
  EXPECT_EQ(lowest_slot(gone.at("n2-id")), 8192);
  EXPECT_EQ(lowest_slot("9-12,3"), 3);
  // Its copy key is in no shard: lost.
  auto lost = judge_copies(c, {{0, 40}, {1, 7}}, meta);
  EXPECT_TRUE(lost.problems.empty());
  for (int32_t p : {0, 1}) {
    ASSERT_EQ(lost.replay_from.count(p), 1u) << p;
    EXPECT_EQ(lost.replay_from.at(p).first, 0);
    EXPECT_NE(lost.replay_cause.at(p).find("node n2-id"), std::string::npos)
      << lost.replay_cause.at(p);
    EXPECT_NE(lost.replay_cause.at(p).find("8192-16383"), std::string::npos);
    EXPECT_NE(lost.replay_cause.at(p).find("copy key is in no shard"), std::string::npos);
  }
  EXPECT_EQ(lost.refresh.positions.at("n1-id").at(0).first, 0) << "vouched for what n2 lost";
  EXPECT_EQ(lost.refresh.positions.at("n1-id").at(1).first, 0);
  EXPECT_EQ(lost.refresh.must_wait.count("n1-id"), 1u);
  EXPECT_EQ(lost.refresh.positions.at("n3-id").at(0).first, 40) << "n3 never held n2's slots";
  EXPECT_EQ(lost.refresh.must_wait.count("n3-id"), 0u);
  // Its copy key exists where its lowest slot is served: it left by a
  // migration or a failover, nothing is replayed.
  c.gone_copy_found["n2-id"] = true;
  auto moved = judge_copies(c, {{0, 40}, {1, 7}}, meta);
  EXPECT_TRUE(moved.problems.empty());
  EXPECT_TRUE(moved.replay_from.empty());
  EXPECT_EQ(moved.refresh.positions.at("n1-id").at(0).first, 40);
  // Not looked for (a reader of an older build): no check.
  c.gone_copy_found.clear();
  EXPECT_TRUE(judge_copies(c, {{0, 40}}, meta).replay_from.empty());
}

TEST(Copies, TheRegistryRecordsHistoriesSlotsAndReplicas) {
  std::map<std::string, judged_primary> judged{
    {"n1-id", judged_primary{a40, "0", "0-8191", {"r1", "r2"}}},
    {"n2-id", judged_primary{b40, "8192", "8192-16383", {}}}};
  auto first = registry_update({}, judged);
  EXPECT_EQ(first.at("n1-id"), a40);
  EXPECT_EQ(first.at("@slots"), "n1-id:0-8191 n2-id:8192-16383");
  EXPECT_EQ(first.at("@replicas"), "n1-id:r1,r2 n2-id:");
  // Nothing changed: nothing written.
  EXPECT_TRUE(registry_update(first, judged).empty());
  redis_cluster_state st;
  for (auto& [f, v] : first)
    read_registry_field(f, v, st);
  EXPECT_EQ(st.known_primaries.size(), 2u);
  EXPECT_EQ(st.known_primaries.at("n1-id").count(a40), 1u);
  EXPECT_EQ(st.known_slots.at("n2-id"), "8192-16383");
  EXPECT_EQ(st.known_replicas.at("n1-id"), (std::set<std::string>{"r1", "r2"}));
  EXPECT_TRUE(st.known_replicas.at("n2-id").empty());
  // A new history is appended; a field a later build adds is skipped.
  judged["n1-id"].replid = z40;
  auto next = registry_update(first, judged);
  EXPECT_EQ(next.at("n1-id"), a40 + " " + z40);
  EXPECT_EQ(next.count("@slots"), 0u);
  read_registry_field("@later", "x", st);
  EXPECT_EQ(st.known_primaries.count("@later"), 0u);
}
