// Randomized schedules over the test kit (docs/TESTING.md §7): produce,
// Redis and broker faults, restarts and ownership changes interleaved at
// random from a seed, with the host's own steps and invariants.  Include
// qsession/projection/testkit.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "caf/actor_system_config.hpp"

#include "qsession/projection/testkit/kit.hpp"

namespace qsp::testkit {

/// The host under test in a schedule: its actors and its invariants.
struct schedule_host {
  /// Runs on each schedule's configuration before its system exists, as
  /// kit_options::configure: register the host's type-ID block here
  /// (qsp::add_type_blocks<caf::id_block::host>(cfg)) when begin, start or
  /// step sends the host's own types.  Without it the schedule fails,
  /// naming the type and this hook ("[host types registered] ..."): a
  /// k.request carrying one sends nothing, and on CAF 1.x any other message
  /// of such a type is held back (CAF 1.x cannot deliver, nor even destroy,
  /// a message of a type it has no meta object for: it would crash).
  std::function<void(caf::actor_system_config&)> configure;
  /// Runs once per schedule, with the schedule's own new kit, before its
  /// first start (and before the first `start`): the schedule's settings
  /// are made (ownership, timeouts) and its first records produced.  Reset
  /// the host's per-schedule records here, or add on_start hooks and
  /// invariants of this schedule's own (k.on_start, k.add_invariant).
  std::function<void(kit&)> begin;
  /// Runs every time the schedule's kit spawns a projection (the first
  /// start and every restart; kit::on_start): spawn the host's actors in
  /// k.system() in front of k.projection().
  std::function<void(kit&)> start;
  /// A step of the host's own (say, a client asking its front with
  /// k.request), played at random among the schedule's steps; `draw` is a
  /// random number from the seed.
  std::function<void(kit&, uint64_t draw)> step;
  /// Checked after every step with the projection's invariants; a failure
  /// names it ("[name] what broke") as it names theirs.
  std::vector<std::pair<std::string, invariant_check>> invariants;
};

struct schedule_options {
  int32_t partitions = 3;
  /// > 0: Redis Cluster mode with this many shards.
  int32_t redis_shards = 0;
  /// projection.ownership = host, with assign/revoke in the schedule.
  bool ownership_changes = true;
  /// Off (the default): only what today's rules can prove is drawn (see
  /// cluster faults in testkit/schedule.cpp).  On: Redis as unkind as it
  /// is: in Redis Cluster mode faults at any time, two in a row, empty
  /// restarts, restarts from persistence, FLUSHALL of one shard, spent
  /// epochs, epoch collisions, a lost shard covered again, reshards of the
  /// lowest slots, retention at any time; and in every topology, pulls from
  /// the host's side right after every lossy failover (the idle window).
  /// For the findings tests (CTest label `findings`).
  bool as_unkind_as_redis = false;
  /// With as_unkind_as_redis, Redis Cluster mode: when two cluster events
  /// come in a row, the running node first gets records on every partition
  /// and time to write its copies, so the second event (a failover, say)
  /// meets copies written after the first (a reshard or a spent epoch
  /// that moved the cluster's epoch on behind the open store).  Off (the
  /// default) the schedules draw as before; the findings' planted mutant
  /// copies_stamped_at_open needs it (tests/testkit/findings_test.cpp).
  bool copies_between_cluster_events = false;
  /// Print each step to stderr.
  bool verbose = false;
  /// The host's actors and invariants (none by default).
  schedule_host host;
};

struct schedule_result {
  uint64_t seed = 0;
  size_t steps = 0;
  bool ok = false;
  /// On failure: the seed, the step, the invariant and the last events.
  std::string failure;
  /// What the schedule did: counts of produces, faults, restarts, ownership
  /// changes.
  std::string summary;
  size_t redis_faults = 0, broker_faults = 0, restarts = 0, ownership_changes = 0;
  /// Redis Cluster: shard failovers (lossy or graceful), slot moves with a
  /// primary joining or leaving, retention up to a checkpoint.
  size_t cluster_failovers = 0, cluster_reshards = 0, retentions = 0;
  /// Steps of the host's own (schedule_host::step).
  size_t host_steps = 0;
  size_t records = 0;
  /// The run's event digest (kit::digest()): the same seed, the same digest.
  uint64_t digest = 0;
};

/// Interleaves produce, Redis and broker faults, restarts and
/// assign/revoke at random (from `seed`), with the host's own steps if
/// opts.host has any, checks the invariants (the projection's and the
/// host's) after every step, and ends by healing every fault and requiring
/// the gate open with Redis equal to the model.  The same seed replays the
/// same run.
schedule_result run_schedule(uint64_t seed, size_t steps, const schedule_options& opts = {});

} // namespace qsp::testkit
