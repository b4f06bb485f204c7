// The run-time identity fence (docs/DESIGN.md §4): no checkpoint is written
// unless a check that started after its batch was fetched confirmed the
// pinned broker identity.
#pragma once

#include <vector>
#include "actors/generation.hpp"
#include "qsession/projection/metrics.hpp"
#include "qsession/projection/settings.hpp"
#include "messages/actors.hpp"
#include "caf/stateful_actor.hpp"
#include "caf/typed_event_based_actor.hpp"
#include "caf/typed_response_promise.hpp"

namespace qsp {

// -- identity fence -----------------------------------------------------------

struct fence_state {
  static inline const char* name = "identity-fence";
  core::identity pinned;
  uint64_t checks = 0;  ///< sequence number of the last check started
  caf::actor_clock::time_point last_start;
  bool delayed = false; ///< an atom::poll to self is queued
  std::vector<caf::typed_response_promise<uint64_t>> waiting;
  /// One check against the broker: the sequence number on a match, a
  /// refusal naming the field on a change, the error when unanswered.
  caf::expected<uint64_t> check(const projection_settings& cfg, generation& gen);
};

fence_actor::behavior_type identity_fence(fence_actor::stateful_pointer<fence_state> self,
                                          projection_settings cfg, core::identity pinned,
                                          std::shared_ptr<generation> gen,
                                          std::shared_ptr<metrics> stats);

} // namespace qsp
