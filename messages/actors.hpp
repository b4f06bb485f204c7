// Every typed actor interface of the projection, one commented block each.
// Message flow (docs/DESIGN.md §10):
//
//   supervisor --verify--> metadata_verifier        (§4.1–4.3, identity recheck)
//   supervisor spawns  partition_consumer × N, redis_writer, identity_fence,
//                      session_reader, readiness_aggregator
//   partition_consumer --write(partition_batch)--> redis_writer
//   redis_writer --check--> identity_fence          (before each checkpoint)
//   redis_writer --progress(checkpoint_advanced)--> readiness_aggregator
//   supervisor --sessions--> session_reader         (PULL_SESSION_LIST)
//   readiness_aggregator --ready--> supervisor      (every partition reached H0)
//   children fail by exiting with an error; the supervisor monitors and links
//   them and alone decides dirty / refused / restart; whatever ends the
//   supervisor ends every child and interrupts their blocking calls.
#pragma once

#include <cstdint>
#include <string>

#include "caf/actor.hpp"
#include "caf/typed_actor.hpp"

#include "messages/types.hpp"
#include "qsession/projection/projection.hpp"

namespace qsp {

/// Runs the startup inspection: reads meta, checkpoints and the broker's
/// state, validates, plans the explicit starts, creates meta on a first start,
/// starts the dispatch-log consumer (its [low, high] check) and re-checks the
/// broker identity afterwards.  Answers an ec::refused-family error on any
/// mismatch, a transient error when a dependency is unreachable.
using verifier_actor = qsp::typed_actor<
  caf::result<verified_start>(atom::verify),
  /// docs/DESIGN.md §12, "Decision — handover": verifies partitions added to the
  /// running generation (claims, §4 checks) and adds them to its consumer.
  caf::result<verified_start>(atom::assign, std::vector<int32_t>)>;

/// Projects batches: coalesced, pipelined ZADD GT for every recipient, sent
/// while earlier batches still await their replies.  Answers a batch once
/// every reply of its ZADDs was read (batches are confirmed in the order
/// sent; an error answers every batch in flight and ends the writer).  Its
/// guarded checkpoint write follows only after the identity fence confirmed
/// the pinned broker identity with a check that started after the batch was
/// fetched; then the aggregator hears of the checkpoint.  atom::poll is its
/// own confirm loop; a batch unconfirmed past projection write_timeout fails it.
/// `flush` answers a partition's stored checkpoint once every batch of it
/// received so far is checkpointed (a consumer stopping at an undecodable
/// record leaves the checkpoint exactly before it).
/// docs/DESIGN.md §12, "Decision — handover": `assign` adds partitions (their
/// checkpoints and owner epochs) to the running writer; `revoke` refuses
/// further batches of partitions and answers once none of theirs is in
/// flight any more (confirmed and checkpointed, or failed with no
/// checkpoint), after their consumer fetches stopped.
using writer_actor = qsp::typed_actor<
  caf::result<checkpoint_advanced>(atom::write, partition_batch),
  caf::result<int64_t>(atom::flush, int32_t),
  caf::result<void>(atom::poll),
  caf::result<void>(atom::assign, verified_start),
  caf::result<caf::ok_atom>(atom::revoke, std::vector<int32_t>)>;

/// The run-time identity fence (docs/DESIGN.md §4): re-checks cluster id, topic
/// id and partition count every identity-check-interval, and on request.
/// `check` answers the sequence number of a successful check that started
/// after the request arrived (checks run at most one per min gap).  A changed
/// identity ends it with ec::identity_changed (a refusal); an unanswered
/// check ends it with a transient error.
using fence_actor = qsp::typed_actor<
  caf::result<uint64_t>(atom::check),
  caf::result<void>(atom::tick),   ///< the periodic check (self)
  caf::result<void>(atom::poll)>;  ///< a delayed on-demand check (self)

/// Serves PULL_SESSION_LIST reads on its own Redis connection, never behind
/// the write pipeline, opened with the generation.  A failed read answers
/// the error (the supervisor closes the gate; a later read reconnects).
/// `tick`: the idle check (self, every projection.identity-check-interval):
/// a connection Redis lost (a failover, a restart) ends the reader with the
/// error, and so the generation: ready is a claim about Redis even while
/// nothing is written or pulled (issue 45, rule 6).
using reader_actor = qsp::typed_actor<
  caf::result<session_list>(atom::sessions, std::string, uint32_t),
  caf::result<void>(atom::tick)>;

/// Polls one partition of the dispatch log when woken (records arrived, a
/// confirmation, or the idle tick), decodes, and hands bounded batches to the
/// writer, at most projection.max-batches-in-flight unconfirmed.
using consumer_actor = qsp::typed_actor<
  caf::result<void>(atom::poll),   ///< poll now (self)
  caf::result<void>(atom::tick),   ///< the idle timer (self)
  caf::result<void>(atom::wake)>;  ///< records arrived (the reader's data callback)

/// Compares every partition's checkpoint with this start's H0 and tells the
/// supervisor once when all have reached it.  H0 never moves.  `assign`
/// adds partitions with their own H0 (the supervisor hears `ready` again
/// once they reached it too); `revoke` forgets partitions.
using aggregator_actor = qsp::typed_actor<
  caf::result<void>(atom::progress, checkpoint_advanced),
  caf::result<void>(atom::poll),
  caf::result<std::vector<partition_status>>(atom::status),
  caf::result<void>(atom::assign, verified_start),
  caf::result<void>(atom::revoke, std::vector<int32_t>)>;

/// The cluster heartbeat (clustered ownership modes, docs/DESIGN.md §12), on a
/// Redis connection of its own that outlives generations: `heartbeat`
/// publishes this node's owned partitions (fenced ones are reported back)
/// and reads the namespace's view; `revoke` deletes the statuses of
/// partitions this node gave up (partition + epoch).  A Redis error is
/// reported in the answer (no view: the namespace counts as not ready) and
/// the next call reconnects; it never ends the actor.
using member_actor = qsp::typed_actor<
  caf::result<cluster_report>(atom::heartbeat, std::vector<owned_status>),
  caf::result<caf::ok_atom>(atom::revoke, std::vector<owned_status>)>;

/// The supervisor: the public handle (qsession/projection/projection.hpp)
/// plus what only its own children and timers send it.  `ready` comes from
/// the current aggregator; `restart` is the backoff timer of a generation;
/// `tick` drives an ordered shutdown until every child and I/O has stopped;
/// `repeat` pushes the current status to every subscriber again (a push may
/// repeat the previous one, docs/EMBEDDING.md: the test kit's
/// repeat_status() lets a host test that it compares rather than counts).
using supervisor_actor = qsp::extend_t<projection_actor, 
  caf::result<void>(atom::ready),
  caf::result<void>(atom::restart, uint64_t),
  caf::result<void>(atom::tick),
  caf::result<void>(atom::repeat),
  caf::result<void>(atom::heartbeat, uint64_t), ///< the cluster heartbeat's timer (its token)
  caf::result<void>(atom::verify, caf::error)>; ///< the group membership failed

} // namespace qsp
