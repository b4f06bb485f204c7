// The cluster heartbeat (docs/DESIGN.md §12): publishes this node's partitions and
// reads the namespace's view, on a Redis connection of its own.
#pragma once

#include <memory>

#include "actors/generation.hpp"
#include "caf/stateful_actor.hpp"
#include "caf/typed_event_based_actor.hpp"
#include "messages/actors.hpp"
#include "qsession/projection/settings.hpp"

namespace qsp {

struct member_state {
  static inline const char* name = "cluster-member";
  std::shared_ptr<cluster_store> store;
};

/// `io` only interrupts the store's blocking calls (abort() when the
/// projection ends); it is not a pipeline generation.  The port factory is
/// held by this actor alone (it holds the projection's I/O token: a
/// shutdown completes only once this actor has ended).
member_actor::behavior_type cluster_member(member_actor::stateful_pointer<member_state> self,
                                           projection_settings cfg, std::string node,
                                           std::shared_ptr<port_factory> ports,
                                           std::shared_ptr<generation> io);

} // namespace qsp
