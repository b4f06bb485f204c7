// Spawning the projection over given ports: the public spawn_projection
// (qsession/projection/projection.hpp) builds the real ports and calls this;
// the deterministic actor tests call it with in-memory fakes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "caf/actor_system.hpp"
#include "caf/expected.hpp"

#include "core/dispatch.hpp"
#include "messages/actors.hpp"
#include "messages/log.hpp"
#include "ports/ports.hpp"
#include "qsession/projection/metrics.hpp"
#include "qsession/projection/projection.hpp"
#include "qsession/projection/settings.hpp"

namespace qsp {

struct projection_options {
  /// Run the actors that block on Redis/Kafka calls on their own threads.
  /// Deterministic tests (fakes that never block) turn this off.
  bool detached_io = true;
  /// Seed of the backoff jitter (0: from the clock).
  uint64_t seed = 0;
  /// The projection's log (null: untagged, on stderr).
  log_ptr logs;
  /// Expires once every I/O resource of the projection is released (the real
  /// ports and each librdkafka handle hold it until destroyed): `shutdown`
  /// answers only after that.  Empty: nothing to wait for beyond the actors.
  std::weak_ptr<void> io;
  /// Runs once when the supervisor ends, however it ends.
  std::function<void()> on_end;
  /// Unix milliseconds the projection reads as the wall clock (ownership
  /// claims, heartbeats); empty: the system clock.  The test kit injects its
  /// manual clock.
  std::function<int64_t()> wall_clock;
};

/// Validates the settings and spawns the supervisor, which starts at once.
caf::expected<projection_actor>
spawn_projection(caf::actor_system& sys, const projection_settings& cfg,
                 std::shared_ptr<port_factory> ports,
                 std::shared_ptr<const core::decoder> decoder,
                 std::shared_ptr<metrics> stats = std::make_shared<metrics>(),
                 projection_options opts = {});

} // namespace qsp
