// The projection's public API: the standalone node and embedding hosts spawn
// it inside their own actor_system and talk to the returned handle
// (messages/actors.hpp, projection_actor):
//
//   qsp::register_types(cfg);                      // before creating the system
//   auto proj = qsp::spawn_projection(sys, settings, ports, decoder);
//   self->request(*proj, timeout, qsp::atom::pull_v, user, limit)  // PULL_SESSION_LIST
//   self->send(*proj, qsp::atom::subscribe_v, listener)            // readiness changes
#pragma once

#include <memory>

#include "caf/actor_system.hpp"
#include "caf/expected.hpp"

#include "actors/metrics.hpp"
#include "actors/settings.hpp"
#include "core/dispatch.hpp"
#include "messages/actors.hpp"
#include "ports/ports.hpp"

namespace qsp {

struct projection_options {
  /// Run the actors that block on Redis/Kafka calls on their own threads.
  /// Deterministic tests (fakes that never block) turn this off.
  bool detached_io = true;
  /// Seed of the backoff jitter (0: from the clock).
  uint64_t seed = 0;
};

/// Validates the settings and spawns the supervisor, which starts at once.
caf::expected<projection_actor>
spawn_projection(caf::actor_system& sys, const projection_settings& cfg,
                 std::shared_ptr<port_factory> ports,
                 std::shared_ptr<const core::decoder> decoder,
                 std::shared_ptr<metrics> stats = std::make_shared<metrics>(),
                 projection_options opts = {});

} // namespace qsp
