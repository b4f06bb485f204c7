#include "actors/session_reader.hpp"


#include "caf/event_based_actor.hpp"

namespace qsp {

// -- session reader -----------------------------------------------------------

reader_actor::behavior_type session_reader(reader_actor::stateful_pointer<reader_state> self,
                                           std::shared_ptr<generation> gen) {
  return {
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
