#include "actors/inspection.hpp"

#include <cstdio>

namespace qsp {

bool supports_zadd_gt(const std::string& version) {
  int major = 0, minor = 0;
  if (std::sscanf(version.c_str(), "%d.%d", &major, &minor) != 2)
    return false;
  return major > 6 || (major == 6 && minor >= 2);
}

caf::expected<inspection> inspect_startup(const projection_settings& cfg, broker_inspector& broker,
                                          checkpoint_store& store) {
  inspection r;
  auto version = store.server_version();
  if (!version)
    return version.error();
  r.redis_version = *version;
  if (!supports_zadd_gt(r.redis_version))
    r.problems.push_back(core::problem{std::nullopt, "redis_version", "6.2", r.redis_version,
                                       "Redis older than 6.2 has no ZADD GT"});
  auto bs = broker.inspect(cfg.topic);
  if (!bs)
    return bs.error();
  r.broker = std::move(*bs);
  core::identity configured{cfg.topic, cfg.partition_count, {}, {}};
  for (auto& p : core::validate_broker_identity(configured, r.broker.cluster_id,
                                                r.broker.topic_id, r.broker.partition_count))
    r.problems.push_back(p);
  auto stored = store.read(cfg.topic);
  if (!stored)
    return stored.error();
  r.stored = std::move(*stored);
  r.observed = core::identity{cfg.topic, cfg.partition_count, r.broker.cluster_id,
                              r.broker.topic_id};
  r.validated = core::validate_stored(r.stored, r.observed);
  for (auto& p : r.validated.problems)
    r.problems.push_back(p);
  // Plan only over a partition layout that matches; otherwise the range check
  // would compare offsets of a different log.
  if (r.broker.partition_count == cfg.partition_count) {
    r.plan = core::plan_start(r.validated.next_offsets, r.broker.marks);
    for (auto& p : r.plan.problems)
      r.problems.push_back(p);
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
