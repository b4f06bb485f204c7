#include "actors/inspection.hpp"

#include <cstdio>

namespace qsp {

bool supports_zadd_gt(const std::string& version) {
  int major = 0, minor = 0;
  if (std::sscanf(version.c_str(), "%d.%d", &major, &minor) != 2)
    return false;
  return major > 6 || (major == 6 && minor >= 2);
}

caf::error identity_mismatch(const core::identity& pinned, const broker_state& observed,
                             const std::string& when) {
  auto changed = [&](const char* field, const std::string& stored, const std::string& seen,
                     const char* what) {
    return caf::make_error(ec::identity_changed, std::string{"meta: field "} + field
                                                   + ": stored \"" + stored + "\", observed \""
                                                   + seen + "\": " + what + " " + when);
  };
  if (observed.cluster_id != pinned.cluster_id)
    return changed("cluster_id", pinned.cluster_id, observed.cluster_id,
                   "the broker cluster changed");
  if (observed.topic_id != pinned.topic_id)
    return changed("topic_id", pinned.topic_id, observed.topic_id,
                   "the topic was deleted and recreated");
  if (observed.partition_count != pinned.partition_count)
    return changed("partition_count", std::to_string(pinned.partition_count),
                   std::to_string(observed.partition_count), "the partition count changed");
  return caf::none;
}

std::vector<core::problem> check_prerequisites(const projection_settings& cfg,
                                               const std::string& maxmemory_policy,
                                               const std::string& cleanup_policy) {
  std::vector<core::problem> out;
  if (maxmemory_policy != "noeviction" && !cfg.redis.allow_eviction)
    out.push_back(core::problem{
      std::nullopt, "redis maxmemory-policy", "noeviction", maxmemory_policy,
      "Redis may evict projected sets, meta or checkpoints; set maxmemory-policy noeviction "
      "(or the flag --redis.allow-eviction, allow-eviction=true in the config file, if "
      "maxmemory can never be reached)", true});
  // "" means the broker did not report it: nothing to judge.
  if (!cleanup_policy.empty() && cleanup_policy != "delete")
    out.push_back(core::problem{
      std::nullopt, "topic cleanup.policy", "delete", cleanup_policy,
      "compaction removes records and leaves gaps that cannot be told from markers", true});
  return out;
}

caf::expected<inspection> inspect_startup(const projection_settings& cfg, broker_inspector& broker,
                                          checkpoint_store& store) {
  inspection r;
  // Redis first (docs/DESIGN.md §4.1) ...
  auto version = store.server_version();
  if (!version)
    return version.error();
  r.redis_version = *version;
  if (!supports_zadd_gt(r.redis_version))
    r.problems.push_back(core::problem{std::nullopt, "redis_version", "6.2", r.redis_version,
                                       "Redis older than 6.2 has no ZADD GT"});
  auto policy = store.maxmemory_policy();
  if (!policy)
    return policy.error();
  r.maxmemory_policy = *policy;
  auto stored = store.read(cfg.topic, cfg.partition_count);
  if (!stored)
    return stored.error();
  r.stored = std::move(*stored);
  auto cluster = store.cluster_state(cfg.topic);
  if (!cluster)
    return cluster.error();
  r.cluster = std::move(*cluster);
  for (auto& p : core::check_cluster_prerequisites(r.cluster, cfg.redis.allow_eviction))
    r.problems.push_back(p);
  // ... then the broker: identity, configuration and the watermarks (H0).
  auto bs = broker.inspect(cfg.topic);
  if (!bs)
    return bs.error();
  r.broker = std::move(*bs);
  for (auto& p : check_prerequisites(cfg, r.maxmemory_policy, r.broker.cleanup_policy))
    r.problems.push_back(p);
  core::identity configured{cfg.topic, cfg.partition_count, {}, {}};
  for (auto& p : core::validate_broker_identity(configured, r.broker.cluster_id,
                                                r.broker.topic_id, r.broker.partition_count))
    r.problems.push_back(p);
  r.observed = core::identity{cfg.topic, cfg.partition_count, r.broker.cluster_id,
                              r.broker.topic_id};
  r.validated = core::validate_stored(r.stored, r.observed);
  for (auto& p : r.validated.problems)
    r.problems.push_back(p);
  auto epochs = core::validate_epochs(r.stored, r.validated.next_offsets);
  r.leader_epochs = std::move(epochs.leader_epochs);
  for (auto& p : epochs.problems)
    r.problems.push_back(p);
  // docs/DESIGN.md §15: a namespace whose copies were established in Redis
  // Cluster mode, read by a node in another mode, would lose their
  // protection (and a later cluster start would find them stale).
  bool cluster_mode = !cfg.redis.cluster_nodes.empty();
  if (!cluster_mode && r.stored.meta && r.stored.meta->count(core::copies_field) != 0)
    r.problems.push_back(core::problem{
      std::nullopt, core::copies_field, r.stored.meta->at(core::copies_field),
      "a node in standalone mode (redis.cluster-nodes unset)",
      "the namespace was written in Redis Cluster mode (per-shard copies): set "
      "redis.cluster-nodes, or move it back as OPERATIONS.md, \"Redis Cluster mode\", says"});
  // The start of each partition: the lowest of its checkpoint and every
  // primary's copy (core/copies.hpp); the checkpoint stays the guard.
  auto starts_from = r.validated.next_offsets;
  if (cluster_mode) {
    r.copies = core::judge_copies(r.cluster, r.validated.next_offsets,
                                  r.stored.meta ? *r.stored.meta : core::hash_fields{},
                                  r.leader_epochs);
    for (auto& p : r.copies.problems)
      r.problems.push_back(p);
    for (auto& [p, pos] : r.copies.replay_from) {
      starts_from[p] = pos.first;
      // The epoch of the copy's position, or none (not validated).
      if (pos.second >= 0)
        r.leader_epochs[p] = pos.second;
      else
        r.leader_epochs.erase(p);
    }
  }
  // projection.replay-from-log-start (the repair after a gap audit found):
  // every checkpointed partition starts at the log's low watermark, never
  // above its checkpoint; the checkpoint itself stays (the writer replays up
  // to it without writing it).
  if (cfg.replay_from_log_start && r.broker.partition_count == cfg.partition_count)
    for (auto& [p, next] : starts_from) {
      auto i = static_cast<size_t>(p);
      if (i < r.broker.marks.size() && r.broker.marks[i].low < next) {
        next = r.broker.marks[i].low;
        r.leader_epochs.erase(p);
      }
    }
  // Plan only over a partition layout that matches; otherwise the range check
  // would compare offsets of a different log.
  if (r.broker.partition_count == cfg.partition_count) {
    r.plan = core::plan_start(starts_from, r.broker.marks);
    for (auto& p : r.plan.problems) {
      // A start below the checkpoint that a primary's copy chose: the
      // refusal names that primary and why, not only the offset.
      if (p.partition)
        if (auto c = r.copies.replay_cause.find(*p.partition); c != r.copies.replay_cause.end())
          p.reason += " (the start " + p.stored + " is not the stored checkpoint "
                      + std::to_string(r.validated.next_offsets.at(*p.partition)) + ": "
                      + c->second + ")";
      r.problems.push_back(p);
    }
  }
  return r;
}

caf::error refusal(const std::vector<core::problem>& problems) {
  std::string text;
  for (auto& p : problems) {
    if (!text.empty())
      text += '\n';
    text += p.to_string();
  }
  return caf::make_error(ec::refused, std::move(text));
}

} // namespace qsp
