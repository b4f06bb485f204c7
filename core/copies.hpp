// Redis Cluster mode (docs/DESIGN.md §15): the start of each partition from its
// checkpoint and every primary's copy.  Pure: redis/cluster_stores.cpp reads
// the primaries, this judges them.
//
// The rules (docs/RELIABILITY.md, "Redis Cluster mode"):
// - A copy proves that its shard holds every ZADD below its positions: it
//   was written there only after that shard answered them, and a shard's
//   replication stream is ordered, so a replica holding the copy holds them.
//   It proves so only in the history it was written in: its replid must be
//   the primary's replid or, after a failover, its replid2 (verdict valid).
// - The start of a partition is the lowest of its checkpoint and its valid
//   copies: a shard whose copy is behind (it lost writes) is replayed from
//   there.  ZADD GT is idempotent and monotone, so replaying is safe; the
//   checkpoint itself is not moved back (the writer replays up to it).
// - A primary that serves slots its copy was not written with received them
//   by a migration after the copy: if it also failed over since (the copy
//   is valid through replid2 only), migrated keys may be lost and no copy
//   covers them: refuse, naming the shard.  Without a failover its own
//   stream is intact: the copy stands (and the next one records the slots).
// - A primary without a valid copy of a checkpointed partition: on the
//   first start in Redis Cluster mode (meta not yet marked) the copies are
//   seeded (written at the checkpoints, then WAIT for every replica of
//   every shard); once marked, it may have lost everything the copy would
//   have covered: refuse, naming the shard (OPERATIONS.md, "A shard without
//   a copy").  A valid copy that does not name a checkpointed partition
//   (first checkpointed after the seed, its first copy lost in a failover)
//   is that primary's proof that the partition had no position then: the
//   partition is replayed from offset 0.
// - A primary the namespace never knew, without a former history, has
//   joined (scale-out) unless it was a judged primary's replica when the
//   last start judged the cluster (the registry records each primary's
//   replicas and slots).  Such a replica (promoted, then restarted empty)
//   holds what no copy vouches for: every checkpointed partition is
//   replayed from offset 0, the cause named, or the start refuses if
//   retention deleted part of it (issue 45, rule 1).  The recorded slots
//   alone are not judged by: they cannot tell slots covered again after
//   their shard was lost from a scale-out then scale-in between two starts
//   (the kit's seeds 1224, 2238).
// - A primary the registry recorded with slots that serves none now left
//   them by a migration (its copy key, in its lowest slot, moved along), a
//   failover (its replica holds the key) or a loss.  Its copy key is looked
//   for wherever its lowest recorded slot is served now: found nowhere, its
//   shard was lost and its slots covered again (redis-cli --cluster fix,
//   CLUSTER ADDSLOTS): every checkpointed partition is replayed from offset
//   0, the cause named, or the start refuses if retention deleted part of
//   it (issue 45, rule 1, "slots re-covered after a shard was lost").  The
//   primaries now serving any of its recorded slots get copies at
//   position 0 until the running node writes higher ones.  Not seen: a loss after
//   its lowest slot had migrated away (the key survives elsewhere), or
//   after a start that recorded the slots' new holder.
// - A copy that cannot be read, or whose identity differs from the
//   namespace's, refuses (fail closed).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/checkpoint.hpp"

namespace qsp::core {

/// One primary of a Redis Cluster as a start reads it.
struct shard_report {
  std::string node_id;
  std::string address;           ///< host:port
  std::string slots;             ///< the slots it serves now ("0-5460,...")
  size_t replicas = 0;
  /// Its replicas' node ids (CLUSTER SLOTS), recorded in the registry so
  /// that a later start knows a promoted one (rule 1, "a known origin").
  std::vector<std::string> replica_ids;
  std::string version;           ///< redis_version
  std::string maxmemory_policy;
  std::string cluster_state;     ///< "ok" when the cluster serves every slot
  std::string replid, replid2;   ///< INFO replication master_replid(2)
  /// CLUSTER INFO cluster_my_epoch: the primary's configuration epoch (-1
  /// unknown).  A failover gives the promoted replica a new, larger one;
  /// so does finishing a slot import (unless the node already had the
  /// largest epoch of the cluster).
  int64_t config_epoch = -1;
  /// CLUSTER INFO cluster_current_epoch (-1 unknown).
  int64_t current_epoch = -1;
  /// The copy tag of its lowest slot: its copy key's name (redis::tag_for_shard).
  std::string copy_tag;
  /// The copy: "valid", "foreign" (another history: a failover chain lost
  /// it, or the key migrated from another shard), "absent", or
  /// "unreadable: <why>".
  std::string copy = "absent";
  std::string copy_replid;       ///< the history the copy was written in
  bool slots_grew = false;       ///< serves slots the copy was not written with
  /// The cluster's current epoch when the copy was written (-1: a copy of
  /// an older build, which did not record it).
  int64_t copy_current_epoch = -1;
  hash_fields copy_identity;     ///< the copy's §3 identity fields
  /// A valid copy's positions: partition -> {next_offset, leader_epoch}.
  std::map<int32_t, std::pair<int64_t, int32_t>> positions;
};

/// A Redis Cluster as a start reads it.
struct redis_cluster_state {
  std::vector<shard_report> shards;  ///< empty: not Redis Cluster mode
  std::string uncovered;             ///< slots no primary serves ("" none)
  bool copies_marked = false;        ///< meta says copies were established
  /// The primaries the namespace has known (node id -> every replid it was
  /// judged with), recorded by every start that wrote the copies
  /// (copy_refresh::primaries).  Empty for a namespace whose copies an
  /// older build established: then a primary without a copy is never
  /// taken for a new one.
  std::map<std::string, std::set<std::string>> known_primaries;
  /// The cluster as the last start that wrote the copies judged it (the
  /// registry's "@slots" and "@replicas" fields): node id -> the slots it
  /// served ("0-5460,..."), node id -> its replicas' node ids.  Empty for a
  /// registry an older build wrote: the origin of a new primary's slots is
  /// then not checked (it is from the next start on).
  std::map<std::string, std::string> known_slots;
  std::map<std::string, std::set<std::string>> known_replicas;
  /// For each primary gone_primaries() names (recorded with slots, serving
  /// none now): whether its copy key (the copy tag of the lowest slot of
  /// its recorded slots, its node id) exists in the cluster now, wherever
  /// that slot is served (a migration or a failover carries the key along;
  /// a lost shard whose slots were covered again does not).  Filled by the
  /// reader after the registry (redis::find_gone_copies, the kit's fake).
  std::map<std::string, bool> gone_copy_found;
};

/// The primaries the registry's "@slots" recorded with slots that serve no
/// slots now (node id -> the slots recorded): their copy keys are looked
/// for (redis_cluster_state::gone_copy_found).  Empty for a registry
/// without "@slots" (an older build's).
std::map<std::string, std::string> gone_primaries(const redis_cluster_state& cluster);

/// The lowest slot of `slots` ("0-5460,10923-16383", any order); nullopt
/// for none or malformed text.
std::optional<int32_t> lowest_slot(std::string_view slots);

/// A primary as a start judged it: the history its copy was judged in and
/// its copy key's tag.  A running node writes copies only while every
/// current primary is one the start judged, in the same history, under the
/// same key name (redis_cluster_session_store::write_copies).
struct judged_primary {
  std::string replid;
  std::string copy_tag;
  /// Its slots and replicas as judged (recorded in the registry; not part
  /// of the comparison: a running node's judged set is its histories).
  std::string slots;
  std::vector<std::string> replicas;
  bool operator==(const judged_primary& o) const {
    return replid == o.replid && copy_tag == o.copy_tag;
  }
};

/// The copies a start writes before the node runs (every start in Redis
/// Cluster mode whose judgement passed): each primary gets a copy that
/// names every checkpointed partition it can vouch for, so that no copy
/// key ever holds only some partitions (a new key name after a failover or
/// a moved lowest slot; several nodes, each owning some partitions).
struct copy_refresh {
  /// node id -> partition -> {next_offset, leader_epoch}: the lower of the
  /// checkpoint and that primary's valid copy (the checkpoint for a
  /// primary that joined, and at the first start).
  std::map<std::string, std::map<int32_t, std::pair<int64_t, int32_t>>> positions;
  /// Primaries whose every replica must acknowledge its copy (WAIT) before
  /// the node runs: all of them at the first start, a primary that joined
  /// otherwise (its copy is then its only proof).  The others keep their
  /// former copies meanwhile: no WAIT (a replica that is down does not stop
  /// a start).
  std::set<std::string> must_wait;
  /// meta gets copies_field (the first start).
  bool mark = false;
  /// node id -> its history and copy tag: recorded into the known
  /// primaries once the copies are written, and the primaries the running
  /// node may write copies to.
  std::map<std::string, judged_primary> primaries;
};

/// What the copies decide.
struct copy_floor {
  /// Where a partition starts below its checkpoint (a shard's valid copy
  /// is behind it), with that copy's leader epoch.
  std::map<int32_t, std::pair<int64_t, int32_t>> replay_from;
  /// Why a partition of replay_from starts where it does, where that is not
  /// a copy's position (a primary's valid copy does not name it: from 0),
  /// so that a start that cannot replay it says which primary and why.
  std::map<int32_t, std::string> replay_cause;
  /// The copies must be seeded before the node starts (first start in
  /// Redis Cluster mode).
  bool seed = false;
  std::vector<problem> problems;
  /// What the start writes once it passed (empty outside Redis Cluster
  /// mode).
  copy_refresh refresh;
};

/// The field of meta that marks copies as established (Redis Cluster mode).
inline constexpr const char* copies_field = "redis_cluster_copies";

/// Judges `cluster` for the validated `checkpoints` of the projection
/// `meta` (its identity fields): see the top of this file.  `partitions`
/// are the partitions this node starts (their copies are checked).
/// `epochs`: the checkpoints' leader epochs (where known), for the
/// refreshed copies.
copy_floor judge_copies(const redis_cluster_state& cluster,
                        const std::map<int32_t, int64_t>& checkpoints, const hash_fields& meta,
                        const std::map<int32_t, int32_t>& epochs = {});

/// The registry of known primaries (redis::primaries_key, a hash in the
/// namespace's shard): one field per node id, "replid replid ..." (every
/// history it was judged in), and "@slots" ("node:0-5460,... node:...")
/// and "@replicas" ("node:replica,replica node:...") as the last start
/// judged the cluster.  Reads one field into `st`.
void read_registry_field(std::string_view field, std::string_view value,
                         redis_cluster_state& st);

/// The fields a start writes into the registry (`had`: its fields now)
/// once its copies are written: a node's new history, and the slot and
/// replica map when it changed.  Empty: nothing changed.
std::map<std::string, std::string> registry_update(const std::map<std::string, std::string>& had,
                                                   const std::map<std::string, judged_primary>& primaries);

/// Prerequisites on every primary (docs/DESIGN.md §15): Redis >= 6.2,
/// maxmemory-policy noeviction (unless allowed), cluster_state ok, every
/// slot served.
std::vector<problem> check_cluster_prerequisites(const redis_cluster_state& cluster,
                                                 bool allow_eviction);

} // namespace qsp::core
