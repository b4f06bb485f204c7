// The simulated Redis Cluster (docs/DESIGN.md §15): the shards of the Redis
// room's keyspace (redis.hpp), each a primary with a replica, their slots,
// failovers that lose writes, slot migration, primaries that join, leave or
// restart empty or from their files, FLUSHALL, spent and colliding epochs,
// a lost shard whose slots are covered again, and the projection's
// per-primary copies (copy keys), with the verdict a start reads from them
// (redis_cluster_copies.cpp).  The Redis ports' cluster parts
// (cluster_state, refresh_copies, write_copies) are in redis_stores.cpp;
// the slot ranges in slots.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/cluster.hpp"
#include "testkit/world/common.hpp"

namespace qsp::test {

struct redis_undo;

/// The Redis Cluster room of the world.
struct simulated_redis_cluster : virtual world_core {
  /// Non-empty shards: the stores are in Redis Cluster mode.  cluster_state()
  /// answers this (copies_marked from meta's core::copies_field); every
  /// copy write sets the positions of every shard whose copy is "valid".
  core::redis_cluster_state cluster;
  /// A MOVED in the middle of a batch: the next send's ZADDs are not applied
  /// at once (the slot moved); its confirm answers "not yet" `moved_not_yet`
  /// times, then the resent commands are applied and their replies read.
  fault moved_fault;
  int64_t moved_not_yet = 2;
  /// Each write_copies / seed_copies call: the positions, and every entry
  /// of the copied partitions below its position whose ZADD was not yet
  /// applied when the copy was written (must stay empty: a copy is written
  /// only after every reply below it was read).
  struct copy_write {
    std::map<int32_t, std::pair<int64_t, int32_t>> positions;
    std::vector<std::string> unapplied;
    bool seed = false;
  };
  std::vector<copy_write> copy_writes;
  /// An ASK in the middle of a batch: like moved_fault, but its confirm
  /// answers "not yet" once (ASKING, then the resend).  Counted in calls.asks.
  fault ask_fault;
  /// Fills `cluster` with `shards` primaries (node ids, addresses, the slots
  /// split evenly, a replid each, one replica, this world's version and
  /// policy, cluster_state ok, no copy).  The namespace is left alone: a
  /// node in Redis Cluster mode wants a hash-tag one ("{...}").
  void make_redis_cluster(int32_t shards);
  /// The index into cluster.shards of the primary serving `key`'s slot
  /// (CRC16, hash tags); -1: none (or not Redis Cluster mode).
  int32_t shard_of(const std::string& key) const;
  /// The primary of `shard` fails over to a replica that missed its last
  /// `n` writes (0: a graceful failover): undoes, newest first, the last `n`
  /// writes that touched its keys (only the parts on its keys; a copy key
  /// write reverts that key; a slot import loses the imported keys).  The
  /// replica becomes the primary with its own node id and address (the old
  /// primary lives on as its replica, under a new replica id; the
  /// promoted replica's id was in replica_ids), replid2 the old replid, replid a new
  /// one (a copy written before stays valid in its history), and a new
  /// configuration epoch, the cluster's largest.  `reset`: the projection's
  /// connections reset (it had commands in flight there); otherwise it
  /// notices only at its next write there (MOVED).  Returns the number of
  /// writes affected.
  size_t shard_failover(int32_t shard, size_t n, bool reset = true);
  /// One copy key (redis/cluster_map.hpp's copy hash), named by its copy
  /// tag (here the decimal of the lowest slot of the primary that wrote it,
  /// which is also the key's slot) and the node id it vouches for.
  struct fake_copy {
    std::string replid;  ///< the history it was written in
    std::string slots;   ///< the primary's slots then
    int64_t cluster_epoch = -1;
    std::map<int32_t, std::pair<int64_t, int32_t>> positions;
    size_t written_at = 0;  ///< redis_writes() when last written
  };
  /// (tag, node id) -> the copy key.  The shard that holds a key is the one
  /// serving its slot.  (Fixtures may instead set a shard's copy,
  /// copy_replid and positions before the first copy operation: they are
  /// then taken as that primary's own key.)
  std::map<std::pair<std::string, std::string>, fake_copy> copy_keys;
  /// A new primary joins: its own node id, no slots, no former history
  /// (replid2 zero), one replica.  Returns its index.
  int32_t add_primary();
  /// Moves the `count` highest slots of `from` (not the namespace's slot)
  /// to `to`, their keys with them (MIGRATE; journaled as one write of
  /// `to`: a later failover of `to` that loses it loses those keys, as a
  /// replica that got the source's DELs but not the RESTOREs).  `to` takes
  /// a new configuration epoch unless it has the largest.  Returns the
  /// number of slots moved.
  /// `lowest_first`: the lowest slots instead, as redis-cli --cluster
  /// reshard takes them (a copy key lives in its primary's lowest slot).
  int32_t move_slots(int32_t from, int32_t to, int32_t count, bool lowest_first = false);
  /// Moves every slot of `shard` to another primary (the next one), then
  /// removes it from the cluster.  False if it is the last one.
  bool remove_primary(int32_t shard);
  /// The primary of `shard` restarts without its data (same node id, a new
  /// replid, no former history): every key in its slots is gone.  False if
  /// it serves the namespace's slot (meta and the checkpoints would go).
  bool shard_restart_empty(int32_t shard);
  /// The primary of `shard` restarts from its own persistence, having lost
  /// its last `n` writes (what its AOF had not synced; 0: a clean SHUTDOWN
  /// SAVE): the same node id and address, a new replid; `rdb`: its file
  /// carried the replication id, which it keeps as replid2 (PSYNC2 after a
  /// master reboot, Redis 6.2 and later), else (an AOF) no former history
  /// (replid2 zero).  Its replicas resync from it and lose what it lost;
  /// the connections reset.  Returns the number of writes lost.
  size_t shard_restart_from_disk(int32_t shard, size_t n, bool rdb);
  /// FLUSHALL on the primary of `shard`: every key in its slots is deleted
  /// and the deletion replicated (the same history), as one journaled write
  /// of the shard (a lossy failover may undo it, as a replica that missed
  /// it).  No connection resets.  False if it serves the namespace's slot.
  bool shard_flushall(int32_t shard);
  /// An election that failed (or any vote) spends an epoch: every node's
  /// current epoch goes up by one; no primary's configuration epoch changes.
  void spend_epoch();
  /// Two primaries with the same configuration epoch (`b` takes `a`'s),
  /// resolved as Redis does (clusterHandleConfigEpochCollision): the one
  /// with the smaller node id takes a new epoch, the cluster's largest.
  void epoch_collision(int32_t a, int32_t b);
  /// The primary of `shard` and its replica are lost, and its slots are
  /// covered again by `to`, empty (CLUSTER ADDSLOTS, e.g. redis-cli
  /// --cluster fix --cluster-fix-with-unreachable-masters): every key of
  /// those slots is gone and the shard leaves the cluster.  `bump`: then
  /// CLUSTER BUMPEPOCH on `to` (a new epoch unless it holds the unique
  /// largest); off: a controller running ADDSLOTS alone.  The connections
  /// reset.  False if it serves the namespace's slot.
  bool shard_lost_and_covered(int32_t shard, int32_t to, bool bump = true);
  /// Whether the primary of `shard` holds its own copy key, written in its
  /// current history after its last slot import: a failover of it then
  /// loses only what that copy lets a start replay.
  bool shard_copy_current(int32_t shard) const;
  /// The shard at `i` as a start reads it (its copy judged as
  /// redis/cluster_stores.cpp does: its own key by its history, else any
  /// key on it by its history, or one elsewhere naming it in its current
  /// history).
  core::shard_report judged_shard(size_t i) const;
  /// WAIT for every replica of every shard (seed_copies does): what was
  /// written so far can no longer be lost by a failover (the journal is
  /// emptied).
  void wait_all_replicas();
  /// Off (the default): a start's refresh makes every write so far durable,
  /// as if it WAITed on every primary.  On: only what the product waits
  /// for (refresh_cluster_copies: the primaries it seeds or that joined,
  /// core::copy_refresh::must_wait); the others' last writes stay losable by
  /// a failover.  The schedules under it show losses and refusals today's
  /// rules do not handle (tests/testkit/findings_test.cpp, label `findings`,
  /// outside the test command until those rules are fixed).
  bool waits_as_the_product = false;
  /// WAIT on the primaries `nodes` only (a start's refresh waits for the
  /// ones it seeds or that joined): what was written to their keys so far
  /// can no longer be lost by a failover; the others' writes can.
  void wait_replicas(const std::set<std::string>& nodes);
  /// Records a copy write (see copy_writes) and, in Redis Cluster mode,
  /// sets the positions of every valid copy.
  /// `per_node`: a start's copies (node id -> positions), each primary its
  /// own, written in its current history.
  /// `stamps`: what the writing store read of each primary (stamps_as_read).
  using copy_plan = std::map<std::string, std::map<int32_t, std::pair<int64_t, int32_t>>>;
  struct read_stamp {
    std::string replid;
    int64_t current_epoch = -1;
  };
  using stamp_map = std::map<std::string, read_stamp>;  ///< node id -> what was read
  void record_copy(const std::map<int32_t, std::pair<int64_t, int32_t>>& positions, bool seed,
                   const copy_plan* per_node = nullptr, const stamp_map* stamps = nullptr);
  /// Off (the default): a copy carries its primary's replid and cluster
  /// epoch as they are when it is written.  On: as the product writes them,
  /// what the writing store read: the session store reads the primaries when
  /// it opens and again only when one it does not know serves slots, and
  /// checks the judged primaries against what it read
  /// (redis_cluster_session_store::check_judged).  (A start's refresh reads
  /// them as it writes: the same either way.)  For the findings tests.
  bool stamps_as_read = false;
  /// Off (the default): the registry of the primaries the namespace has
  /// known (core::redis_cluster_state::known_primaries) lives outside every
  /// shard, so nothing loses it.  On: as the product keeps it, a hash
  /// (registry_key) in the namespace's shard, written after the start's
  /// WAIT: a lossy failover of that shard, a flush or an empty restart
  /// takes it back with the other keys.  For the findings tests.
  bool registry_in_shard = false;
  /// The registry's key (redis/stores.cpp, primaries_key).
  std::string registry_key() const;

private:
  friend class fake_checkpoint_store;
  friend class fake_session_store;
  friend struct simulated_redis;

  fake_world& world();
  const fake_world& world() const;
  /// Undoes, newest first, the last `n` journaled writes that touched the
  /// keys of `shard` (only their parts on its keys); returns how many.
  size_t lose_writes(int32_t shard, size_t n);
  /// The shard at `shard`, if any and (`not_home`) if it does not serve
  /// the namespace's slot (meta and the checkpoints); else nullptr.
  core::shard_report* shard_at(int32_t shard, bool not_home);
  /// Erases, unjournaled (gone from every stream), every session set and
  /// copy key in `slots` (ranges).
  void drop_keys_in(const std::vector<std::pair<int, int>>& slots);
  /// The largest current or configuration epoch of any primary.
  int64_t top_epoch() const;
  /// Shard `i` takes a new configuration epoch, the cluster's largest
  /// (every current epoch follows).
  void take_new_epoch(size_t i);
  /// The shard a journaled write touched (-1: none).
  int32_t shard_of(const redis_undo& u) const;
  /// The rollback of a copy key write or a slot import (simulated_redis::undo).
  void undo_in_cluster(const redis_undo& u);
  void note_copy(const std::pair<std::string, std::string>& key);
  /// Takes fixture-set shard copies as copy keys (once).
  void adopt_fixture_copies();
  /// Writes (tag, node) of shard `i` in its current history.
  void put_copy(size_t i, const std::map<int32_t, std::pair<int64_t, int32_t>>& positions,
                const read_stamp* stamp = nullptr);
  /// Mirrors judged_shard() into cluster.shards' copy fields (for tests).
  void sync_copy_views();
  /// A new node id / address for a node that joins or is promoted.
  std::string next_node_id();
  /// A new node id for a replica (one per primary made and per failover; a
  /// promoted replica becomes the primary with it).
  std::string next_replica_id();
  /// A copy's verdict on a primary with `replid` and `replid2`: valid in
  /// its history, else foreign.
  static std::string copy_verdict(const fake_copy& c, const core::shard_report& sh);
  std::string next_replid();

  bool fixture_copies_adopted_ = false;
  uint64_t nodes_made_ = 0;
  uint64_t replicas_made_ = 0;
  /// node id -> redis_writes() at its last slot import.
  std::map<std::string, size_t> imported_at_;
  uint64_t replids_ = 0;
};

namespace sim {

/// The copy tag of a shard: the decimal of its lowest slot ("" none).
std::string copy_tag_of(const core::shard_report& sh);

} // namespace sim

} // namespace qsp::test
