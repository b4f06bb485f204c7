// Every typed actor interface of the projection, one commented block each.
// Message flow (DESIGN.md §10):
//
//   supervisor --verify--> metadata_verifier        (§4.1–4.3, identity recheck)
//   supervisor spawns  partition_consumer × N, redis_writer, readiness_aggregator
//   partition_consumer --write(partition_batch)--> redis_writer
//   redis_writer --progress(checkpoint_advanced)--> readiness_aggregator
//   readiness_aggregator --ready--> supervisor      (every partition reached H0)
//   children fail by exiting with an error; the supervisor monitors them and
//   alone decides dirty / refused / restart.
#pragma once

#include <cstdint>
#include <string>

#include "caf/actor.hpp"
#include "caf/replies_to.hpp"
#include "caf/typed_actor.hpp"

#include "messages/types.hpp"

namespace qsp {

/// Runs the startup inspection: reads meta, checkpoints and the broker's
/// state, validates, plans the explicit starts, creates meta on a first start,
/// starts the dispatch-log consumer (its [low, high] check) and re-checks the
/// broker identity afterwards.  Answers an ec::refused-family error on any
/// mismatch, a transient error when a dependency is unreachable.
using verifier_actor = caf::typed_actor<
  caf::replies_to<atom::verify>::with<verified_start>>;

/// Projects batches: coalesced, pipelined ZADD GT for every recipient, sent
/// while earlier batches still await their replies; once every reply of a
/// batch is read, the guarded checkpoint write to the batch's end (batches
/// are confirmed in the order sent).  Answers the checkpoint now stored, or
/// an error (and then wrote no checkpoint).  atom::poll is its own confirm
/// loop.  Also serves PULL_SESSION_LIST reads for the supervisor's gate.
using writer_actor = caf::typed_actor<
  caf::replies_to<atom::write, partition_batch>::with<checkpoint_advanced>,
  caf::replies_to<atom::sessions, std::string, uint32_t>::with<session_list>,
  caf::reacts_to<atom::poll>>;

/// Polls one partition of the dispatch log when woken (records arrived, a
/// confirmation, or the idle tick), decodes, and hands bounded batches to the
/// writer, at most projection.max-batches-in-flight unconfirmed.
using consumer_actor = caf::typed_actor<
  caf::reacts_to<atom::poll>,   ///< poll now (self)
  caf::reacts_to<atom::tick>,   ///< the idle timer (self)
  caf::reacts_to<atom::wake>>;  ///< records arrived (the reader's data callback)

/// Compares every partition's checkpoint with this start's H0 and tells the
/// supervisor once when all have reached it.  H0 never moves.
using aggregator_actor = caf::typed_actor<
  caf::reacts_to<atom::progress, checkpoint_advanced>,
  caf::reacts_to<atom::poll>,
  caf::replies_to<atom::status>::with<std::vector<partition_status>>>;

/// The projection's public handle (standalone node and embedding hosts).
/// `pull` is the PULL_SESSION_LIST gate: ec::not_ready until ready.
/// Subscribers receive (atom::status, projection_status) on every change of
/// state; `shutdown` stops the pipeline and quits.
using projection_actor = caf::typed_actor<
  caf::replies_to<atom::status>::with<projection_status>,
  caf::replies_to<atom::pull, std::string, uint32_t>::with<session_list>,
  caf::reacts_to<atom::subscribe, caf::actor>,
  caf::reacts_to<atom::ready>,
  caf::reacts_to<atom::restart, uint64_t>,
  caf::reacts_to<atom::shutdown>>;

} // namespace qsp
