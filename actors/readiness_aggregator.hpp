// The readiness aggregator: every partition's checkpoint against this
// start's H0; tells the supervisor once when all reached it.
#pragma once

#include <map>
#include "qsession/projection/settings.hpp"
#include "messages/actors.hpp"
#include "messages/log.hpp"
#include "caf/stateful_actor.hpp"
#include "caf/typed_event_based_actor.hpp"

namespace qsp {

// -- readiness aggregator -----------------------------------------------------

struct aggregator_state {
  static inline const char* name = "readiness-aggregator";
  std::map<int32_t, partition_status> parts;
  bool announced = false;
  int64_t remaining_at_tick = 0;
  bool ready() const;
  int64_t remaining() const;
  /// Records a checkpoint; returns false if it would move backwards.
  bool advance(const checkpoint_advanced& cp);
};

aggregator_actor::behavior_type
readiness_aggregator(aggregator_actor::stateful_pointer<aggregator_state> self,
                     projection_settings cfg, verified_start vs, supervisor_actor supervisor,
                     log_ptr logs);

} // namespace qsp
