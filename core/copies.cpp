#include "core/copies.hpp"

#include <algorithm>
#include <cstdio>
#include <set>

#include "core/mutants.hpp"

namespace qsp::core {

namespace {

std::string shard_name(const shard_report& s) {
  return "primary " + s.address + " (node " + s.node_id.substr(0, 8) + ")";
}

std::string partition_list(const std::vector<int32_t>& ps) {
  std::string out;
  for (auto p : ps)
    out += (out.empty() ? "" : ",") + std::to_string(p);
  return out;
}

/// Why `s`, a primary the namespace never knew without a former history,
/// holds data of no known origin (rule 1): it was a judged primary's
/// replica; "" otherwise (it joined).
std::string unknown_origin(const redis_cluster_state& cluster, const shard_report& s) {
  for (auto& [node, replicas] : cluster.known_replicas)
    if (replicas.count(s.node_id) != 0)
      return "it was a replica of primary node " + node.substr(0, 8)
             + " when this namespace last judged the cluster, and serves that primary's slots "
               "with no history of it (promoted, then restarted without its data, or resynced "
               "from one that was)";
  // The slots a primary held at the last judgement (known_slots) do not
  // tell a loss from a scale-out then scale-in between two starts (the new
  // primary got them by migration from one that then left): the kit's
  // schedules found that (seeds 1224, 2238), so they are recorded but not
  // yet judged by.
  return {};
}

/// "a-b,c,..." -> its ranges; nullopt if malformed.
std::optional<std::vector<std::pair<int64_t, int64_t>>> ranges_of(std::string_view text) {
  std::vector<std::pair<int64_t, int64_t>> out;
  while (!text.empty()) {
    auto comma = text.find(',');
    auto word = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    if (word.empty())
      continue;
    auto dash = word.find('-');
    auto a = parse_decimal(word.substr(0, dash));
    auto b = dash == std::string_view::npos ? a : parse_decimal(word.substr(dash + 1));
    if (!a || !b || *b < *a)
      return std::nullopt;
    out.emplace_back(*a, *b);
  }
  return out;
}

/// True iff the slot lists share a slot (malformed text: true, fail closed).
bool share_slots(std::string_view x, std::string_view y) {
  auto a = ranges_of(x), b = ranges_of(y);
  if (!a || !b)
    return true;
  for (auto& [a1, a2] : *a)
    for (auto& [b1, b2] : *b)
      if (a1 <= b2 && b1 <= a2)
        return true;
  return false;
}

} // namespace

std::optional<int32_t> lowest_slot(std::string_view slots) {
  auto r = ranges_of(slots);
  if (!r || r->empty())
    return std::nullopt;
  int64_t low = r->front().first;
  for (auto& [a, b] : *r)
    low = std::min(low, a);
  return static_cast<int32_t>(low);
}

std::map<std::string, std::string> gone_primaries(const redis_cluster_state& cluster) {
  std::map<std::string, std::string> out;
  if (cluster.shards.empty())
    return out;
  std::set<std::string> serving;
  for (auto& s : cluster.shards)
    if (!s.slots.empty())
      serving.insert(s.node_id);
  for (auto& [node, slots] : cluster.known_slots)
    if (!slots.empty() && serving.count(node) == 0)
      out.emplace(node, slots);
  return out;
}

copy_floor judge_copies(const redis_cluster_state& cluster,
                        const std::map<int32_t, int64_t>& checkpoints, const hash_fields& meta,
                        const std::map<int32_t, int32_t>& epochs) {
  copy_floor out;
  // First start in Redis Cluster mode (or one that stopped before marking):
  // the copies are seeded before the node starts.
  out.seed = !cluster.shards.empty() && !cluster.copies_marked;
  out.refresh.mark = out.seed;
  auto at_checkpoint = [&](int32_t p, int64_t next) {
    auto e = epochs.find(p);
    return std::pair<int64_t, int32_t>{next, e != epochs.end() ? e->second : -1};
  };
  // Every replid the namespace has known a primary by.
  std::set<std::string> known_replids;
  for (auto& [node, replids] : cluster.known_primaries)
    known_replids.insert(replids.begin(), replids.end());
  auto zero = std::string(40, '0');
  // Rule 1, slots re-covered after a shard was lost: a primary recorded
  // with slots, serving none now, whose copy key is in no shard.  Nothing
  // of its slots is vouched for: every checkpointed partition is replayed
  // from the start of its log (below), and the primaries serving its slots
  // now get copies at position 0 (a start before the replay is done
  // replays again).
  std::string lost_shard;          ///< the cause, "" none
  std::vector<std::string> lost_slots;  ///< the lost primaries' recorded slots
  // (The mutant joined_without_replicas, rule 1's pre-fix state, looks at
  // none of what the registry recorded.)
  if (cluster.copies_marked && mutant::active() != mutant::id::joined_without_replicas)
    for (auto& [node, slots] : gone_primaries(cluster)) {
      auto f = cluster.gone_copy_found.find(node);
      if (f == cluster.gone_copy_found.end() || f->second)
        continue;
      lost_slots.push_back(slots);
      if (lost_shard.empty())
        lost_shard = "primary node " + node.substr(0, 8) + " served slots " + slots
                     + " when this namespace last judged the cluster and serves none now, and "
                       "its copy key is in no shard: its shard was lost and its slots covered "
                       "again (redis-cli --cluster fix, CLUSTER ADDSLOTS), so nothing of them "
                       "is vouched for";
    }
  for (auto& s : cluster.shards) {
    auto name = shard_name(s);
    bool took_lost = false;
    for (auto& slots : lost_slots)
      took_lost = took_lost || share_slots(s.slots, slots);
    if (s.copy.rfind("unreadable", 0) == 0) {
      out.problems.push_back(problem{std::nullopt, "copy", "a readable copy", s.copy,
                                     name + ": its copy of the positions cannot be read"});
      continue;
    }
    bool valid = s.copy == "valid";
    if (valid) {
      bool same = true;
      for (auto& [k, v] : s.copy_identity)
        if (auto m = meta.find(k); m != meta.end() && m->second != v) {
          out.problems.push_back(problem{std::nullopt, "copy " + k, m->second, v,
                                         name + ": its copy belongs to another projection "
                                                "identity than meta"});
          same = false;
        }
      if (!same)
        continue;
      bool failed_over = s.copy_replid != s.replid;
      if (s.slots_grew && failed_over) {
        out.problems.push_back(problem{
          std::nullopt, "copy slots", "the slots the copy was written with", s.slots,
          name + ": it serves slots that migrated into it after its copy was written, and it "
                 "failed over since: keys migrated before the failover may be lost and no copy "
                 "covers them (OPERATIONS.md, \"A shard without a copy\")"});
        continue;
      }
      // The same slots, but some may have left and come back (a migration
      // there and back) before the failover: finishing that import bumped
      // the old primary's configuration epoch (and the first import, the
      // other node's), so some epoch between the cluster's when the copy
      // was written and the promoted replica's own is one no current
      // primary holds.  Every epoch in between must be another primary's
      // (a failover or an import there); one that is not (a migration into
      // the old primary, or a failover chain elsewhere) refuses.
      if (failed_over && s.copy_current_epoch >= 0 && s.config_epoch > s.copy_current_epoch + 1) {
        std::set<int64_t> held;
        for (auto& o : cluster.shards)
          if (&o != &s)
            held.insert(o.config_epoch);
        std::string unexplained;
        if (s.config_epoch - s.copy_current_epoch > 64)
          unexplained = std::to_string(s.copy_current_epoch + 1) + "..";
        for (auto e = s.copy_current_epoch + 1; unexplained.empty() && e < s.config_epoch; ++e)
          if (held.count(e) == 0)
            unexplained = std::to_string(e);
        if (!unexplained.empty()) {
          out.problems.push_back(problem{
            std::nullopt, "copy epoch",
            "epochs " + std::to_string(s.copy_current_epoch + 1) + ".."
              + std::to_string(s.config_epoch - 1) + " held by other primaries",
            "epoch " + unexplained + " held by none",
            name + ": it failed over since its copy was written (cluster epoch "
              + std::to_string(s.copy_current_epoch) + ", its own now "
              + std::to_string(s.config_epoch)
              + "), and the cluster's configuration changed in between in a way no current "
                "primary explains (a slot migrated into its former primary and back, or a chain "
                "of failovers elsewhere): keys imported before the failover may be lost and "
                "the copy cannot tell (OPERATIONS.md, \"A shard without a copy\")"});
          continue;
        }
      }
    }
    // A primary without a valid copy that the namespace never knew, never
    // promoted from a replica (no former history), is one that joined the
    // cluster since (scale-out): its whole history is its own, and every
    // key it holds came by migration from primaries the checkpoints cover,
    // or by ZADDs confirmed before them.  It gets a copy at the checkpoints.
    // (A foreign copy there is another primary's key that migrated in with
    // its slot: it changes nothing.)
    bool copyless = s.copy == "absent" || s.copy == "foreign";
    bool joined = false;
    if (!valid && cluster.copies_marked && copyless && !cluster.known_primaries.empty()
        && cluster.known_primaries.count(s.node_id) == 0 && known_replids.count(s.replid) == 0
        && (s.replid2.empty() || s.replid2 == zero))
      joined = true;
    // Rule 1: only a primary whose data has a known origin joined.  The
    // mutant joined_without_replicas takes every such primary as joined.
    std::string no_origin;
    if (joined && mutant::active() != mutant::id::joined_without_replicas) {
      no_origin = unknown_origin(cluster, s);
      joined = no_origin.empty();
    }
    if (!valid && no_origin.empty() && cluster.copies_marked && copyless && !joined
        && !cluster.known_primaries.empty() && cluster.known_primaries.count(s.node_id) == 0
        && known_replids.count(s.replid) == 0 && known_replids.count(s.replid2) == 0
        && !checkpoints.empty()) {
      out.problems.push_back(problem{
        std::nullopt, "copy", "a copy, or a primary that joined with no former history",
        "absent; promoted from history " + s.replid2.substr(0, 8),
        name + " holds no copy and was promoted from a primary this namespace never knew (it "
               "joined the cluster, took slots and failed over while no node of this namespace "
               "ran, or it is a reused node): keys migrated into that primary may be lost "
               "(OPERATIONS.md, \"A shard without a copy\")"});
      continue;
    }
    std::vector<int32_t> uncovered;
    auto& vouch = out.refresh.positions[s.node_id];
    for (auto& [p, checkpoint] : checkpoints) {
      if (!no_origin.empty()) {
        // Nothing of this primary's slots is vouched for: replay the
        // partition from the start of its log (the start check refuses,
        // naming this primary, if retention deleted part of it).  Its copy
        // names no position until the running node writes one.
        out.replay_from[p] = {0, -1};
        out.replay_cause[p] = name + " holds no copy and " + no_origin;
        continue;
      }
      if (out.seed || joined) {
        vouch[p] = at_checkpoint(p, checkpoint);
        continue;
      }
      auto pos = valid ? s.positions.find(p) : s.positions.end();
      if (valid && pos != s.positions.end()) {
        if (pos->second.first < checkpoint) {
          auto r = out.replay_from.find(p);
          if (r == out.replay_from.end() || pos->second.first < r->second.first) {
            out.replay_from[p] = pos->second;
            out.replay_cause[p] = name + "'s copy (valid in its history) stands at "
                                  + std::to_string(pos->second.first)
                                  + ": it may have lost writes above it";
          }
          vouch[p] = pos->second;
        } else {
          vouch[p] = at_checkpoint(p, checkpoint);
        }
        continue;
      }
      if (valid && cluster.copies_marked) {
        // A copy of this primary's own history that never named the
        // partition: it had no position when that copy was written (every
        // copy a start writes names every partition checkpointed then), so
        // whatever of it this primary held may be lost: replay it from the
        // start of its log.  (Found by the test kit's randomized schedules:
        // a partition first checkpointed after the start, whose first copy
        // a failover lost.)  If retention deleted part of it, the start
        // check refuses that start, naming this primary.
        out.replay_from[p] = {0, -1};
        out.replay_cause[p] = name + "'s copy (valid in its history) does not name partition "
                              + std::to_string(p);
        continue;
      }
      if (cluster.copies_marked)
        uncovered.push_back(p);
    }
    if (!uncovered.empty()) {
      out.problems.push_back(problem{
        std::nullopt, "copy", "a copy of partitions " + partition_list(uncovered),
        s.copy == "valid" ? std::string{"none for them"} : s.copy,
        name + " holds no copy of these partitions' positions from its own history (a failover "
               "to a replica that never received one, a chain of failovers, or a restart "
               "without its data): it may have lost writes the checkpoints cover "
               "(OPERATIONS.md, \"A shard without a copy\")"});
      continue;
    }
    // Its copy says position 0 for every checkpointed partition until the
    // running node replays it (a start's HSET overwrites the fields its
    // copy key already holds: leaving a partition out would leave the old
    // position standing): a start before the replay is done replays again.
    if (took_lost && !out.seed)
      for (auto& [p, checkpoint] : checkpoints)
        vouch[p] = {0, -1};
    if (out.seed || joined || !no_origin.empty() || (took_lost && !checkpoints.empty()))
      out.refresh.must_wait.insert(s.node_id);
    out.refresh.primaries[s.node_id] =
      judged_primary{s.replid, s.copy_tag, s.slots, s.replica_ids};
  }
  if (!lost_shard.empty() && !out.seed)
    for (auto& [p, checkpoint] : checkpoints) {
      out.replay_from[p] = {0, -1};
      out.replay_cause[p] = lost_shard;
    }
  return out;
}

namespace {

/// "a b c" -> each non-empty word.
template <class F>
void each_word(std::string_view text, F f) {
  while (!text.empty()) {
    auto sp = text.find(' ');
    if (sp != 0)
      f(text.substr(0, sp));
    text = sp == std::string_view::npos ? std::string_view{} : text.substr(sp + 1);
  }
}

} // namespace

void read_registry_field(std::string_view field, std::string_view value,
                         redis_cluster_state& st) {
  if (field == "@slots" || field == "@replicas") {
    each_word(value, [&](std::string_view word) {
      auto colon = word.find(':');
      if (colon == std::string_view::npos)
        return;
      std::string node{word.substr(0, colon)};
      auto rest = word.substr(colon + 1);
      if (field == "@slots") {
        st.known_slots[node] = std::string{rest};
        return;
      }
      auto& reps = st.known_replicas[node];
      while (!rest.empty()) {
        auto comma = rest.find(',');
        if (comma != 0)
          reps.emplace(rest.substr(0, comma));
        rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
      }
    });
    return;
  }
  if (!field.empty() && field.front() == '@')
    return;  // a field of a later build
  auto& replids = st.known_primaries[std::string{field}];
  each_word(value, [&](std::string_view word) { replids.emplace(word); });
}

std::map<std::string, std::string> registry_update(const std::map<std::string, std::string>& had,
                                                   const std::map<std::string, judged_primary>& primaries) {
  std::map<std::string, std::string> out;
  std::string slots, replicas;
  for (auto& [node, judged] : primaries) {
    auto h = had.find(node);
    auto v = h == had.end() ? std::string{} : h->second;
    if ((" " + v + " ").find(" " + judged.replid + " ") == std::string::npos)
      out[node] = v.empty() ? judged.replid : v + " " + judged.replid;
    slots += (slots.empty() ? "" : " ") + node + ":" + judged.slots;
    replicas += (replicas.empty() ? "" : " ") + node + ":";
    for (size_t k = 0; k < judged.replicas.size(); ++k)
      replicas += (k == 0 ? "" : ",") + judged.replicas[k];
  }
  auto changed = [&](const char* field, const std::string& now) {
    auto h = had.find(field);
    if (h == had.end() || h->second != now)
      out[field] = now;
  };
  if (!primaries.empty()) {
    changed("@slots", slots);
    changed("@replicas", replicas);
  }
  return out;
}

std::vector<problem> check_cluster_prerequisites(const redis_cluster_state& cluster,
                                                 bool allow_eviction) {
  std::vector<problem> out;
  if (!cluster.uncovered.empty())
    out.push_back(problem{std::nullopt, "redis cluster slots", "every slot served",
                          "unserved " + cluster.uncovered,
                          "session sets in those slots cannot be written", true});
  for (auto& s : cluster.shards) {
    auto name = shard_name(s);
    int major = 0, minor = 0;
    if (std::sscanf(s.version.c_str(), "%d.%d", &major, &minor) != 2
        || (major < 6 || (major == 6 && minor < 2)))
      out.push_back(problem{std::nullopt, "redis_version", "6.2", s.version,
                            name + ": Redis older than 6.2 has no ZADD GT", true});
    if (s.maxmemory_policy != "noeviction" && !allow_eviction)
      out.push_back(problem{std::nullopt, "redis maxmemory-policy", "noeviction",
                            s.maxmemory_policy,
                            name + ": Redis may evict projected sets, meta, checkpoints or "
                                   "copies; set maxmemory-policy noeviction (or "
                                   "--redis.allow-eviction if maxmemory can never be reached)",
                            true});
    if (s.cluster_state != "ok")
      out.push_back(problem{std::nullopt, "cluster_state", "ok", s.cluster_state,
                            name + ": the cluster is not serving every slot", true});
  }
  return out;
}

} // namespace qsp::core
