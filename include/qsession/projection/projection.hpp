// The projection's handle and lifecycle, for the standalone node and for
// hosts that embed it in their own CAF actor system (docs/EMBEDDING.md).
//
//   qsp::register_types(cfg);                 // before the actor_system exists
//   auto proj = qsp::spawn_projection(sys, settings);      // caf::expected
//   qsp::mail(self, qsp::atom::subscribe_v, listener).send(*proj);   // status pushes
//   qsp::mail(self, qsp::atom::pull_v, user, limit).request(*proj, t) // PULL_SESSION_LIST
//   qsp::mail(self, qsp::atom::shutdown_v).request(*proj, t)         // ok once all I/O stopped
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"
#include "caf/expected.hpp"
#include "caf/typed_actor.hpp"

#include "qsession/projection/metrics.hpp"
#include "qsession/projection/reader.hpp"
#include "qsession/projection/settings.hpp"
#include "qsession/projection/types.hpp"

namespace spdlog {
class logger;
} // namespace spdlog

namespace qsp {


// The projection's public handle, qsp::projection_actor, is declared in
// qsession/projection/types.hpp with its public type ID (in the block
// `qsp_handles`), so a host sends it typed, e.g. to re-bind its front:
// mail(self, my_rebind_atom_v, proj).send(front).
// - `status`: a snapshot, with per-partition progress.
// - `pull`: the PULL_SESSION_LIST gate: a user's conversations, newest first
//   (at most `limit`), or ec::not_ready until every partition reached H0.
// - `subscribe` / `unsubscribe`: status pushes.  Subscribers are monitored
//   and dropped when they terminate.
// - `assign` / `revoke` (projection.ownership = host; the group mode uses
//   them itself): take partitions on, or give them up.  `assign` answers
//   once the added partitions are claimed (a newer ownership epoch fences
//   their former owner), verified and consuming from their checkpoints;
//   `revoke` once nothing of those partitions runs any more: unconfirmed
//   batches are abandoned without a checkpoint.  Partitions outside
//   [0, partition-count) or another ownership mode: ec::invalid_config.
// - `shutdown`: stops the projection; answers caf::ok_atom once every actor
//   and every blocking call of it has stopped, or ec::shutting_down after
//   projection.shutdown-timeout.  The projection is gone either way.

/// Registers the projection's message types and its error renderer (CAF
/// prints `qsp` errors by name) with a host's config, before the system is
/// created.
void register_types(caf::actor_system_config& cfg);

struct spawn_options {
  /// Where the projection logs; every line names its topic and namespace.
  /// Null: a logger of its own on stderr (never registered with spdlog, never
  /// spdlog's default).  librdkafka's log lines go here too.
  std::shared_ptr<spdlog::logger> logger;
  /// Counters and histograms the host may export; null: the projection's own.
  std::shared_ptr<metrics> stats;
  /// The host's own dispatch-log reader (qsession/projection/reader.hpp):
  /// a factory called once per generation.  Empty: the product's librdkafka
  /// reader.  With a host reader the projection checks order and leader
  /// epochs of every record and re-reads every gap through its own reader
  /// before the checkpoint passes it (docs/EMBEDDING.md §8).
  dispatch_log_factory reader;
};

/// Validates `settings`, builds the Kafka and Redis adapters from them and
/// spawns the projection, which starts at once (verifying, catching up,
/// ready).  Refuses (ec::invalid_config) a second live projection in this
/// process writing the same convs-prefix on the same Redis under another
/// namespace, unless settings.allow_shared_convs_prefix.
caf::expected<projection_actor> spawn_projection(caf::actor_system& sys,
                                                 const projection_settings& settings,
                                                 spawn_options opts = {});

} // namespace qsp
