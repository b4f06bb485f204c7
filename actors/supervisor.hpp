// The supervisor: the projection's state machine, its children and its
// lifecycle (actors/supervisor.cpp).  Its state is declared here so the
// deterministic tests can read it as a last resort.
#pragma once

#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "actors/generation.hpp"
#include "actors/projection.hpp"
#include "core/ownership.hpp"
#include "caf/stateful_actor.hpp"
#include "caf/typed_event_based_actor.hpp"
#include "caf/typed_response_promise.hpp"
#include "messages/actors.hpp"
#include "qsession/projection/caf_compat.hpp"

namespace qsp {

struct supervisor_state {
  static inline const char* name = "projection-supervisor";
  projection_settings cfg;
  std::shared_ptr<port_factory> ports;
  std::shared_ptr<const core::decoder> decoder;
  std::shared_ptr<metrics> stats;
  projection_options opts;
  log_ptr logs;
  std::mt19937_64 rng;

  std::string state = "starting";
  bool ready = false;
  bool stopping = false;
  std::string last_error;
  uint64_t generation = 0;
  uint32_t attempt = 0;
  std::map<std::string, uint64_t> failures;
  std::map<int32_t, int64_t> true_high;

  std::vector<status_listener> subscribers;
  /// Every monitor of the supervisor, and its one down handler.
  down_watch watch;
  std::set<caf::actor_addr> children;
  /// Shutdown: children told to exit and not yet down; the requests to
  /// answer once they and the projection's I/O are gone; the deadline.
  std::set<caf::actor_addr> dying;
  std::vector<caf::typed_response_promise<caf::ok_atom>> shutdowns;
  caf::actor_clock::time_point shutdown_deadline;
  verifier_actor verifier;
  aggregator_actor aggregator;
  fence_actor fence;
  writer_actor writer;
  reader_actor reader;
  /// The running generation's consumers, by partition.
  std::map<int32_t, consumer_actor> consumers;

  // -- ownership (docs/DESIGN.md §12) -------------------------------------------
  std::string node;
  /// The partitions this node owns (every one with ownership = all) and the
  /// epochs of its claims: the rules live in core::ownership.
  core::ownership own{false, true};
  /// docs/DESIGN.md §12, "Decision — handover": the partitions whose addition to
  /// the running generation is being verified, and the next ones to add.
  std::vector<int32_t> extending;
  std::vector<int32_t> queued_adds;
  /// Revoked partitions whose batches the writer still finishes (they are
  /// assigned to the consumer until it has): one given back meanwhile
  /// restarts the generation instead of being added twice.
  std::multiset<int32_t> draining;
  /// Revokes of partitions whose addition was still being verified: done
  /// (shrink) as soon as the addition is, instead of restarting the
  /// generation.
  struct deferred_revoke {
    std::vector<int32_t> partitions;
    caf::typed_response_promise<caf::ok_atom> rp;
  };
  std::vector<deferred_revoke> deferred_revokes;
  /// The generation is stopping for an ownership change; the next starts
  /// once every child of it is down (they are in `dying`).
  bool regenerating = false;
  /// revoke requests, answered once the generation that owned their
  /// partitions has stopped.
  std::vector<caf::typed_response_promise<caf::ok_atom>> revokes;
  /// assign requests, answered once a generation owning their partitions
  /// runs (or the projection is refused or stopped).
  std::vector<caf::typed_response_promise<caf::ok_atom>> assigns;
  /// The cluster heartbeat and what it last saw.
  member_actor member;
  std::shared_ptr<qsp::generation> member_io;
  bool namespace_ready = false;
  /// One heartbeat at a time: a timer tick counts only with the current
  /// token; a change of state asks for one at once (`hb_again` if one runs).
  uint64_t hb_token = 0;
  bool hb_in_flight = false;
  bool hb_again = false;
  std::vector<cluster_partition> cluster;
  std::string cluster_error;
  /// ownership = group: the membership (its own thread and handle).
  std::unique_ptr<group_membership> group;
  /// The current generation and children, shared with the termination hook,
  /// which ends them however the supervisor ends (children are monitored,
  /// not linked: a link would also bring their exits here as exit messages).
  struct lifeline {
    std::shared_ptr<qsp::generation> gen;
    std::vector<caf::actor> children;
    caf::actor member;                         ///< the cluster heartbeat
    std::shared_ptr<qsp::generation> member_io; ///< its blocking calls
  };
  std::shared_ptr<lifeline> life = std::make_shared<lifeline>();
};

supervisor_actor::behavior_type
supervisor(supervisor_actor::stateful_pointer<supervisor_state> self, projection_settings cfg,
           std::shared_ptr<port_factory> ports, std::shared_ptr<const core::decoder> decoder,
           std::shared_ptr<metrics> stats, projection_options opts);

} // namespace qsp
