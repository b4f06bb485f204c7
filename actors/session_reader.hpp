// The session reader: PULL_SESSION_LIST reads on their own Redis connection.
#pragma once

#include "actors/generation.hpp"
#include "messages/actors.hpp"
#include "caf/stateful_actor.hpp"
#include "caf/typed_event_based_actor.hpp"

namespace qsp {

// -- session reader -----------------------------------------------------------

struct reader_state {
  static inline const char* name = "session-reader";
  std::shared_ptr<session_store> sessions;
};

reader_actor::behavior_type session_reader(reader_actor::stateful_pointer<reader_state> self,
                                           std::shared_ptr<generation> gen,
                                           caf::timespan check_interval);

} // namespace qsp
