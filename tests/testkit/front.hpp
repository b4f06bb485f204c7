// A host's "session front" for the kit's tests, written as a host team
// would from the public headers alone: it answers a PULL-like request only
// while the projection's gate is open (its latest status push says ready)
// and the projection served the pull, and alerts once per refusal.  It
// speaks the projection's own messages, so the kit's system needs no host
// type IDs:
//   (qsp::atom::pull, user, limit) -> qsp::session_list, or ec::not_ready
//   (qsp::atom::status, qsp::projection_status)   its status pushes
// `buggy` plants the host bug the schedules must catch: a front that
// serves its cached answer whenever the projection does not (it serves
// while the gate is closed).
//
// never_serves_closed() is the host's invariant over the front's record:
// no request is answered with a list unless the gate was open at some step
// between its arrival and its answer.
#pragma once

#include <qsession/projection/testkit.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "caf/actor_cast.hpp"
#include "caf/stateful_actor.hpp"
#include "caf/system_messages.hpp"

namespace test_front {

/// What the front did, for the test and the invariant.
struct record {
  uint64_t next_id = 0;
  std::vector<uint64_t> arrived;  ///< request ids, as they came in
  std::vector<uint64_t> served;   ///< request ids answered with a list
  std::vector<std::string> alerts;
  size_t pushes = 0;
  bool down = false;              ///< the front saw its projection terminate
};

struct state {
  bool open = false;
  bool refused = false;
  std::map<std::string, qsp::session_list> cache;
  qsp::down_watch watch;  ///< the projection: the front ends with it
};

inline caf::behavior front(caf::stateful_actor<state>* self, qsp::projection_actor proj,
                           std::shared_ptr<record> log, bool buggy) {
  qsp::state_of(self).watch.on_down(self, [self, log](const caf::actor_addr&, const caf::error&) {
    log->down = true;
    self->quit();
  });
  qsp::state_of(self).watch.monitor(self, proj);
  qsp::mail(self, qsp::atom::subscribe_v, caf::actor_cast<qsp::status_listener>(self)).send(proj);
  return {
    [self, log](qsp::atom::status, const qsp::projection_status& st) {
      ++log->pushes;
      qsp::state_of(self).open = st.ready;
      // Once per refusal, not once per push (a push may repeat).
      if (st.state == "refused" && !qsp::state_of(self).refused) {
        qsp::state_of(self).refused = true;
        log->alerts.push_back(st.last_error);
      }
    },
    [self, proj, log, buggy](qsp::atom::pull, const std::string& user,
                             uint32_t limit) -> caf::result<qsp::session_list> {
      auto id = ++log->next_id;
      log->arrived.push_back(id);
      auto cached = [self, log, buggy, user, id]() -> std::optional<qsp::session_list> {
        auto i = qsp::state_of(self).cache.find(user);
        if (!buggy || i == qsp::state_of(self).cache.end())
          return std::nullopt;
        log->served.push_back(id);
        return i->second;
      };
      if (!qsp::state_of(self).open) {
        if (auto stale = cached())
          return *stale;
        return caf::make_error(qsp::ec::not_ready, "front: the gate is closed");
      }
      auto rp = self->make_response_promise<qsp::session_list>();
      qsp::mail(self, qsp::atom::pull_v, user, limit).request(proj, std::chrono::seconds(2))
        .then(
          [self, log, user, id, rp](qsp::session_list& xs) mutable {
            qsp::state_of(self).cache[user] = xs;
            log->served.push_back(id);
            rp.deliver(std::move(xs));
          },
          [cached, rp](caf::error& err) mutable {
            if (auto stale = cached())
              rp.deliver(std::move(*stale));
            else
              rp.deliver(std::move(err));
          });
      return rp;
    },
  };
}

inline caf::actor spawn(qsp::testkit::kit& k, std::shared_ptr<record> log, bool buggy = false) {
  return k.system().spawn(front, k.projection(), std::move(log), buggy);
}

inline const char* invariant_name = "front never serves while the gate is closed";

/// The host's invariant (see the file's comment).  Checked after every
/// step: a request is marked once the kit's gate (k.ready(), what the
/// projection's pull sees) is open while it is pending.
inline qsp::testkit::invariant_check never_serves_closed(std::shared_ptr<record> log) {
  struct watch {
    std::map<uint64_t, bool> pending; ///< request id -> the gate was open meanwhile
    size_t arrived = 0, served = 0;
  };
  auto w = std::make_shared<watch>();
  return [log, w](const qsp::testkit::kit& k) -> std::string {
    for (; w->arrived < log->arrived.size(); ++w->arrived)
      w->pending[log->arrived[w->arrived]] = false;
    if (k.ready())
      for (auto& [id, open] : w->pending)
        open = true;
    std::string broke;
    for (; w->served < log->served.size(); ++w->served) {
      auto id = log->served[w->served];
      auto i = w->pending.find(id);
      if (i != w->pending.end() && !i->second && broke.empty())
        broke = "request #" + std::to_string(id)
                + " was served, but the gate was closed from its arrival to its answer";
      w->pending.erase(id);
    }
    return broke;
  };
}

} // namespace test_front
