#include "actors/session_reader.hpp"


#include "caf/event_based_actor.hpp"

namespace qsp {

// -- session reader -----------------------------------------------------------

reader_actor::behavior_type session_reader(reader_actor::stateful_pointer<reader_state> self,
                                           std::shared_ptr<generation> gen,
                                           caf::timespan check_interval) {
  // Its connection opens with the generation (issue 45, rule 6): a failover
  // or a restart of Redis under it will reset it, so the first pull after one
  // meets the reset (and the supervisor closes the gate) instead of opening
  // a fresh connection to a primary that lost writes.  If it cannot be
  // opened, the generation fails as with any other Redis connection.
  auto made = gen->ports->make_session_store();
  if (!made) {
    self->quit(made.error());
    return {[](atom::sessions, const std::string&, uint32_t) -> caf::result<session_list> {
              return caf::make_error(ec::redis_unavailable, "session reader stopped");
            },
            [](atom::tick) {}};
  }
  state_of(self).sessions = std::move(*made);
  gen->track(state_of(self).sessions);
  if (check_interval > caf::timespan::zero())
    qsp::mail(self, atom::tick_v).delay(check_interval).send(self);
  return {
    [=](atom::tick) {
      // The idle check: one cheap read on the reader's connection.  A reset
      // (Redis failed over or restarted: writes under the gate may be gone)
      // ends the generation; the restart replays from the checkpoints.
      auto& st = state_of(self);
      if (st.sessions) {
        if (auto ok = st.sessions->probe(); !ok) {
          self->quit(ok.error());
          return;
        }
      }
      qsp::mail(self, atom::tick_v).delay(check_interval).send(self);
    },
    [=](atom::sessions, const std::string& user, uint32_t limit) -> caf::result<session_list> {
      auto& st = state_of(self);
      if (!st.sessions) {
        auto made = gen->ports->make_session_store();
        if (!made)
          return made.error();
        st.sessions = std::move(*made);
        gen->track(st.sessions);
      }
      auto r = st.sessions->sessions(user, limit);
      if (!r) {
        st.sessions.reset(); // a fresh connection for the next read
        return r.error();
      }
      return std::move(*r);
    },
  };
}

} // namespace qsp
