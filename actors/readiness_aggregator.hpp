// The readiness aggregator: every partition's checkpoint against this
// start's H0; tells the supervisor once when all reached it.
#pragma once

#include <map>
#include "qsession/projection/settings.hpp"
#include "messages/actors.hpp"
#include "messages/log.hpp"
#include "ports/ports.hpp"
#include "caf/stateful_actor.hpp"
#include "caf/typed_event_based_actor.hpp"

namespace qsp {

// -- readiness aggregator -----------------------------------------------------

struct aggregator_state {
  using time_point = caf::actor_clock::time_point;
  static inline const char* name = "readiness-aggregator";
  std::map<int32_t, partition_status> parts;
  bool announced = false;
  /// The progress log's timer (atom::poll) is armed.
  bool polling = false;
  int64_t remaining_at_tick = 0;
  /// Live progress per partition: when next_offset last advanced, and when
  /// the partition was last seen with nothing to do (next_offset at the
  /// log end).
  struct liveness {
    time_point advanced;
    time_point idle_seen;
  };
  std::map<int32_t, liveness> live;
  /// The consumer's cached log ends (null in tests without one: H0 stands in).
  std::shared_ptr<dispatch_log> log;
  bool ready() const;
  /// Adds the partitions of `vs` at their starts, with their H0.
  void add(const verified_start& vs, time_point now);
  int64_t remaining() const;
  /// Records a checkpoint at `now`; returns false if it would move backwards.
  bool advance(const checkpoint_advanced& cp, time_point now = {});
  /// Sets log_end (at least H0), live_lag and progress_age_ms of `ps` from
  /// the cached log end `cached_end` (-1: unknown) at `now`; remembers `now`
  /// as a moment with nothing to do when the live lag is 0.
  void fill_live(partition_status& ps, int64_t cached_end, time_point now);
};

aggregator_actor::behavior_type
readiness_aggregator(aggregator_actor::stateful_pointer<aggregator_state> self,
                     projection_settings cfg, verified_start vs, supervisor_actor supervisor,
                     log_ptr logs, std::shared_ptr<dispatch_log> log);

} // namespace qsp
