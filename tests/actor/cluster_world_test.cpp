// The simulated Redis Cluster's events as Redis has them (testkit/world/
// redis_cluster.hpp), on the world alone: a reshard that takes the lowest
// slots (redis-cli), FLUSHALL of one primary, a restart from the primary's
// own file (AOF or RDB), a spent epoch, a config epoch collision, and a shard
// lost with its slots covered again.  Each test writes through the fake
// ports, so every write is journaled as the projection's are.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <utility>
#include <string>
#include <vector>

#include "core/mutants.hpp"
#include "testkit/world/world.hpp"

namespace {

using qsp::session_member;
using qsp::session_update;
using qsp::test::fake_world;

/// A world in Redis Cluster mode with three primaries and a hash-tag
/// namespace, and a session store over it.
struct ClusterWorld : ::testing::Test {
  ClusterWorld() {
    w->ns = "{qsp}";
    w->make_redis_cluster(3);
    auto s = qsp::test::make_fake_ports(w)->make_session_store();
    EXPECT_TRUE(s) << qsp::describe(s.error());
    store = std::move(*s);
  }

  /// A user whose session set lives on `shard` (and not on the namespace's).
  std::string user_on(int32_t shard) {
    for (int i = 0; i < 100000; ++i) {
      auto u = "u" + std::to_string(i);
      if (w->shard_of(w->convs_prefix + u) == shard)
        return u;
    }
    ADD_FAILURE() << "no user on shard " << shard;
    return {};
  }

  /// One journaled write: ZADD convs:{user} GT `score` `conv`.
  void zadd(const std::string& user, const std::string& conv, int64_t score) {
    session_member m{conv, score};
    std::vector<session_update> ups{session_update{user, &m, 1}};
    auto ok = store->apply(ups);
    ASSERT_TRUE(ok) << qsp::describe(ok.error());
  }

  int32_t home() { return w->shard_of(w->meta_key()); }
  /// A shard other than the namespace's, and a third one.
  int32_t other(int32_t not_this = -1) {
    for (int32_t i = 0; i < 3; ++i)
      if (i != home() && i != not_this)
        return i;
    return -1;
  }

  std::shared_ptr<fake_world> w = qsp::test::make_world(1);
  std::unique_ptr<qsp::session_store> store;
};

/// Whether a shard_report's slots ("a-b,c,...") name `slot`.
bool serves(const std::string& slots, int slot) {
  size_t at = 0;
  while (at < slots.size()) {
    auto comma = slots.find(',', at);
    auto item = slots.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    auto dash = item.find('-');
    auto a = std::stoi(item.substr(0, dash));
    auto b = dash == std::string::npos ? a : std::stoi(item.substr(dash + 1));
    if (a <= slot && slot <= b)
      return true;
    at = comma == std::string::npos ? slots.size() : comma + 1;
  }
  return false;
}

TEST_F(ClusterWorld, AReshardAsRedisCliDoesItTakesTheLowestSlots) {
  auto from = other(), to = other(from);
  auto lowest = std::stoi(w->cluster.shards[static_cast<size_t>(from)].slots);
  ASSERT_EQ(w->move_slots(from, to, 3, true), 3);
  auto& dst = w->cluster.shards[static_cast<size_t>(to)].slots;
  // The three lowest slots of `from` are `to`'s now; `from` starts above them.
  for (int x = lowest; x < lowest + 3; ++x)
    EXPECT_TRUE(serves(dst, x)) << "slot " << x << " not moved: " << dst;
  EXPECT_EQ(std::stoi(w->cluster.shards[static_cast<size_t>(from)].slots), lowest + 3);
  // By default the highest go, and `from`'s lowest slot stays.
  ASSERT_EQ(w->move_slots(from, to, 3), 3);
  EXPECT_EQ(std::stoi(w->cluster.shards[static_cast<size_t>(from)].slots), lowest + 3);
}

TEST_F(ClusterWorld, FlushallEmptiesOneShardInItsOwnHistoryAndALossyFailoverCanUndoIt) {
  auto a = other(), b = other(a);
  auto ua = user_on(a), ub = user_on(b);
  zadd(ua, "c1", 10);
  zadd(ub, "c2", 20);
  auto replid = w->cluster.shards[static_cast<size_t>(a)].replid;
  auto writes = w->redis_writes();
  ASSERT_TRUE(w->shard_flushall(a));
  EXPECT_FALSE(w->score(ua, "c1")) << "the flushed shard keeps a key";
  EXPECT_EQ(w->score(ub, "c2"), 20) << "another shard lost a key";
  EXPECT_EQ(w->cluster.shards[static_cast<size_t>(a)].replid, replid)
    << "FLUSHALL is a replicated write: the history stays";
  EXPECT_EQ(w->redis_writes(), writes + 1);
  // A replica that missed the FLUSHALL takes over: the key is back.
  EXPECT_EQ(w->shard_failover(a, 1), 1u);
  EXPECT_EQ(w->score(ua, "c1"), 10);
  // The namespace's shard is not flushed (meta and the checkpoints).
  EXPECT_FALSE(w->shard_flushall(home()));
}

TEST_F(ClusterWorld, ARestartFromAnAofLosesItsUnsyncedTailAndItsFormerHistory) {
  auto a = other();
  auto u = user_on(a);
  zadd(u, "c1", 10);
  zadd(u, "c2", 20);
  auto& sh = w->cluster.shards[static_cast<size_t>(a)];
  auto node = sh.node_id, replid = sh.replid;
  auto resets = w->redis_resets;
  EXPECT_EQ(w->shard_restart_from_disk(a, 1, false), 1u);
  EXPECT_EQ(w->score(u, "c1"), 10);
  EXPECT_FALSE(w->score(u, "c2")) << "the write the AOF had not synced survived the restart";
  EXPECT_EQ(sh.node_id, node) << "a restart keeps the node id";
  EXPECT_NE(sh.replid, replid);
  EXPECT_EQ(sh.replid2, std::string(40, '0')) << "an AOF carries no replication id";
  EXPECT_GT(w->redis_resets, resets);
}

TEST_F(ClusterWorld, ARestartFromAnRdbKeepsItsFormerHistoryAsReplid2) {
  auto a = other();
  auto u = user_on(a);
  zadd(u, "c1", 10);
  auto& sh = w->cluster.shards[static_cast<size_t>(a)];
  auto replid = sh.replid;
  EXPECT_EQ(w->shard_restart_from_disk(a, 0, true), 0u);
  EXPECT_EQ(w->score(u, "c1"), 10);
  EXPECT_NE(sh.replid, replid);
  EXPECT_EQ(sh.replid2, replid);
}

TEST_F(ClusterWorld, ASpentEpochRaisesEveryCurrentEpochAndNoConfigEpoch) {
  std::vector<int64_t> configs;
  int64_t current = 0;
  for (auto& sh : w->cluster.shards) {
    configs.push_back(sh.config_epoch);
    current = std::max(current, sh.current_epoch);
  }
  w->spend_epoch();
  for (size_t i = 0; i < w->cluster.shards.size(); ++i) {
    EXPECT_EQ(w->cluster.shards[i].config_epoch, configs[i]);
    EXPECT_EQ(w->cluster.shards[i].current_epoch, current + 1);
  }
}

TEST_F(ClusterWorld, AnEpochCollisionGivesTheSmallerNodeIdANewEpoch) {
  auto& s0 = w->cluster.shards[0];
  auto& s1 = w->cluster.shards[1];
  ASSERT_LT(s0.node_id, s1.node_id);
  int64_t top = 0;
  for (auto& sh : w->cluster.shards)
    top = std::max({top, sh.current_epoch, sh.config_epoch});
  w->epoch_collision(1, 0); // shard 0 takes shard 1's epoch
  EXPECT_EQ(s1.config_epoch, 2) << "the larger node id keeps its epoch";
  EXPECT_EQ(s0.config_epoch, top + 1) << "the smaller node id takes a new one";
  for (auto& sh : w->cluster.shards)
    EXPECT_EQ(sh.current_epoch, top + 1);
}

TEST_F(ClusterWorld, ALostShardWhoseSlotsAreCoveredAgainLeavesThemEmptyOnTheSurvivor) {
  auto dead = other(), to = other(dead);
  auto u = user_on(dead), v = user_on(to);
  zadd(u, "c1", 10);
  zadd(v, "c2", 20);
  auto to_node = w->cluster.shards[static_cast<size_t>(to)].node_id;
  ASSERT_TRUE(w->shard_lost_and_covered(dead, to));
  ASSERT_EQ(w->cluster.shards.size(), 2u);
  auto now = w->shard_of(w->convs_prefix + u);
  ASSERT_GE(now, 0);
  EXPECT_EQ(w->cluster.shards[static_cast<size_t>(now)].node_id, to_node)
    << "the survivor serves the lost slots";
  EXPECT_FALSE(w->score(u, "c1")) << "a key of the lost shard survived";
  EXPECT_EQ(w->score(v, "c2"), 20);
  int64_t top = 0;
  for (auto& sh : w->cluster.shards)
    top = std::max(top, sh.config_epoch);
  EXPECT_EQ(w->cluster.shards[static_cast<size_t>(now)].config_epoch, top)
    << "BUMPEPOCH gives the survivor the largest epoch";
  // A later lossy failover of the survivor does not bring the lost key back.
  w->shard_failover(now, 10);
  EXPECT_FALSE(w->score(u, "c1"));
  EXPECT_EQ(w->score(v, "c2"), std::nullopt) << "the survivor's own write was the one lost";
}

TEST_F(ClusterWorld, ACopyCarriesTheEpochReadWhenItIsWritten) {
  // What the copy of the namespace's shard says after the cluster's epoch
  // moved on behind a session store that was already open.
  auto stamped_epoch = [&](bool as_read) {
    w->stamps_as_read = as_read;
    auto s = qsp::test::make_fake_ports(w)->make_session_store();
    EXPECT_TRUE(s);
    std::map<int32_t, std::pair<int64_t, int32_t>> at{{0, {0, -1}}};
    // The start's copies (a running node only writes over copies that stand).
    qsp::test::simulated_redis_cluster::copy_plan plan;
    for (auto& sh : w->cluster.shards)
      plan[sh.node_id] = at;
    w->record_copy(at, true, &plan);
    w->spend_epoch();
    auto ok = (*s)->write_copies(w->identity(), at);
    EXPECT_TRUE(ok) << qsp::describe(ok.error());
    auto& sh = w->cluster.shards[static_cast<size_t>(home())];
    auto c = w->copy_keys.find({qsp::test::sim::copy_tag_of(sh), sh.node_id});
    EXPECT_NE(c, w->copy_keys.end());
    return std::make_pair(c == w->copy_keys.end() ? -2 : c->second.cluster_epoch,
                          sh.current_epoch);
  };
  auto [live, now] = stamped_epoch(false);
  EXPECT_EQ(live, now) << "off: the epoch as it is when the copy is written";
  auto [read, later] = stamped_epoch(true);
  EXPECT_EQ(read, later) << "on: the epoch the store reads when it writes (issue 45, rule 4)";
  qsp::mutant::activate(qsp::mutant::id::copies_stamped_at_open);
  auto [stale, after] = stamped_epoch(true);
  qsp::mutant::activate(qsp::mutant::id::none);
  EXPECT_EQ(stale, after - 1) << "the mutant: the epoch the store read when it opened";
}

} // namespace
