// The startup inspection of DESIGN.md §4.1–4.2 over the ports, without
// consuming or writing: shared by the metadata verifier and `verify`/`inspect`.
#pragma once

#include <string>
#include <vector>

#include "actors/settings.hpp"
#include "core/checkpoint.hpp"
#include "core/start_plan.hpp"
#include "ports/ports.hpp"

namespace qsp {

struct inspection {
  std::string redis_version;
  broker_state broker;
  core::stored_state stored;
  core::identity observed;       ///< configured topic/count + broker ids
  core::validation validated;
  core::start_plan plan;
  std::vector<core::problem> problems;  ///< identity + stored + plan, all of them
  bool ok() const { return problems.empty(); }
};

/// Reads everything and judges it.  Fails only when a dependency cannot be
/// read (transient); validation failures are reported in `problems`.
caf::expected<inspection> inspect_startup(const projection_settings& cfg, broker_inspector& broker,
                                          checkpoint_store& store);

/// True if a Redis `version` ("major.minor.patch") has ZADD GT (>= 6.2).
bool supports_zadd_gt(const std::string& version);

/// One ec::refused error carrying every problem, one per line.
caf::error refusal(const std::vector<core::problem>& problems);

} // namespace qsp
