// The startup inspection of docs/DESIGN.md §4.1–4.2 over the ports, without
// consuming or writing: shared by the metadata verifier and `verify`/`inspect`.
#pragma once

#include "core/copies.hpp"

#include <map>
#include <string>
#include <vector>

#include "qsession/projection/settings.hpp"
#include "core/checkpoint.hpp"
#include "core/start_plan.hpp"
#include "ports/ports.hpp"

namespace qsp {

struct inspection {
  std::string redis_version;
  std::string maxmemory_policy;  ///< Redis `maxmemory-policy`
  broker_state broker;
  core::stored_state stored;
  core::identity observed;       ///< configured topic/count + broker ids
  core::validation validated;
  core::start_plan plan;
  std::vector<core::problem> problems;  ///< identity + stored + plan, all of them
  /// The stored leader epoch of each validated checkpoint, where known.
  std::map<int32_t, int32_t> leader_epochs;
  /// Redis Cluster mode (docs/DESIGN.md §15): the primaries and their copies, and
  /// what they decide (starts below a checkpoint, seeding).
  core::redis_cluster_state cluster;
  core::copy_floor copies;
  bool ok() const { return problems.empty(); }
};

/// Reads everything and judges it: Redis first (version, maxmemory-policy,
/// meta and checkpoints), then the broker (identity, configuration,
/// watermarks: H0), as docs/DESIGN.md §4.1 orders it — a checkpoint written in
/// between by another instance is then below the fresher high, not above it.  Fails only when a dependency cannot be
/// read (transient); validation failures are reported in `problems`.
caf::expected<inspection> inspect_startup(const projection_settings& cfg, broker_inspector& broker,
                                          checkpoint_store& store);

/// True if a Redis `version` ("major.minor.patch") has ZADD GT (>= 6.2).
bool supports_zadd_gt(const std::string& version);

/// ec::identity_changed naming the first field of `observed` that differs
/// from `pinned` (cluster_id, topic_id, partition_count), or none.  `when`
/// ends the message ("during startup", "while running").
caf::error identity_mismatch(const core::identity& pinned, const broker_state& observed,
                             const std::string& when);

/// The prerequisites of docs/DESIGN.md §4: Redis must not evict (unless
/// cfg.redis.allow_eviction), the topic must be cleanup.policy=delete.
std::vector<core::problem> check_prerequisites(const projection_settings& cfg,
                                               const std::string& maxmemory_policy,
                                               const std::string& cleanup_policy);

/// One ec::refused error carrying every problem, one per line.
caf::error refusal(const std::vector<core::problem>& problems);

} // namespace qsp
