// The host's sessions gate: its front for one tenant's PULL_SESSION_LIST.
// The host's clients ask the gate, never the projection directly, and the
// gate follows the tenant's status pushes:
// - `ready` (or no push seen yet): it asks the projection, which stays the
//   authority (it answers ec::not_ready itself while not ready), within the
//   host's pull timeout.  Anything but the list is ec::not_ready to the
//   clients: the projection's own not_ready, an error (a pull meeting a
//   frozen or unreachable Redis before the projection noticed: it answers
//   redis_unavailable and stays ready), or no answer in time;
// - not ready (verifying, catching-up, dirty): ec::not_ready at once;
// - `refused` (final: an operator must act): ec::not_ready naming the
//   refusal, and the host's alert runs, once: the host alerts and stops
//   serving the tenant.
// The gate quits when its projection terminates.  main.cpp serves the
// tenants' sessions through it; host_kit_test.cpp tests it in the
// projection's test kit.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <utility>

#include "caf/actor_cast.hpp"
#include "caf/actor_system.hpp"
#include "caf/system_messages.hpp"
#include "caf/result.hpp"
#include "caf/sec.hpp"
#include "caf/typed_actor.hpp"
#include "caf/typed_event_based_actor.hpp"

#include <qsession/projection.hpp>

#include "messages.hpp"

namespace host {

/// What one status push means to the host.
enum class health { unknown, waiting, ready, refused };

inline const char* to_string(health h) {
  switch (h) {
    case health::unknown:
      return "unknown";
    case health::waiting:
      return "waiting";
    case health::ready:
      return "ready";
    case health::refused:
      return "refused";
  }
  return "?";
}

/// A refusal is final; otherwise the push's `ready` (the PULL gate) decides.
inline health judge(const qsp::projection_status& st) {
  if (st.state == "refused")
    return health::refused;
  return st.ready ? health::ready : health::waiting;
}

/// Called once when the tenant refuses: (tenant, the projection's last error).
using alert_fn = std::function<void(const std::string&, const std::string&)>;

/// The gate's interface: clients pull; `health` is the gate's view
/// ("unknown", "waiting", "ready", "refused"); the projection pushes its
/// status (the gate is its status listener).
using gate_actor = qsp::typed_actor<
  caf::result<qsp::session_list>(atom::pull, std::string, uint32_t),
  caf::result<std::string>(atom::health),
  caf::result<void>(qsp::atom::status, qsp::projection_status)>;

struct gate_state {
  static inline const char* name = "host-gate";
  std::string tenant;
  health seen = health::unknown;
  std::string state;       ///< the projection's state in the last push
  std::string last_error;  ///< its last error in the last push
  bool alerted = false;
  qsp::down_watch watch;   ///< the projection: the gate ends with it
};

inline gate_actor::behavior_type gate(gate_actor::stateful_pointer<gate_state> self,
                                      std::string tenant, qsp::projection_actor proj,
                                      alert_fn alert, caf::timespan timeout) {
  qsp::state_of(self).tenant = std::move(tenant);
  qsp::state_of(self).watch.on_down(self, [self](const caf::actor_addr&, const caf::error&) { self->quit(); });
  qsp::state_of(self).watch.monitor(self, proj);
  qsp::mail(self, qsp::atom::subscribe_v, caf::actor_cast<qsp::status_listener>(self)).send(proj);
  return {
    [self, alert](qsp::atom::status, const qsp::projection_status& st) {
      auto& s = qsp::state_of(self);
      s.seen = judge(st);
      s.state = st.state;
      s.last_error = st.last_error;
      if (s.seen == health::refused && !s.alerted) {
        s.alerted = true;
        if (alert)
          alert(s.tenant, st.last_error);
      }
    },
    [self, proj, timeout](atom::pull, const std::string& user,
                          uint32_t limit) -> caf::result<qsp::session_list> {
      auto& s = qsp::state_of(self);
      if (s.seen == health::refused)
        return caf::make_error(qsp::ec::not_ready,
                               s.tenant + " refused: " + s.last_error);
      if (s.seen == health::waiting)
        return caf::make_error(qsp::ec::not_ready, s.tenant + " is " + s.state);
      auto rp = self->make_response_promise<qsp::session_list>();
      auto name = s.tenant;
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count();
      qsp::mail(self, qsp::atom::pull_v, user, limit).request(proj, timeout)
        .then([rp](qsp::session_list& xs) mutable { rp.deliver(std::move(xs)); },
              [rp, name, ms](caf::error& err) mutable {
                if (qsp::code_of(err) == qsp::ec::not_ready)
                  rp.deliver(std::move(err));
                else if (err == caf::sec::request_timeout)
                  rp.deliver(caf::make_error(qsp::ec::not_ready,
                                             name + ": no answer within "
                                               + std::to_string(ms) + " ms"));
                else
                  rp.deliver(
                    caf::make_error(qsp::ec::not_ready, name + ": " + qsp::describe(err)));
              });
      return rp;
    },
    [self](atom::health) { return std::string{to_string(qsp::state_of(self).seen)}; },
  };
}

/// Spawns the gate of `tenant` in front of `proj`.
inline gate_actor spawn_gate(caf::actor_system& sys, std::string tenant,
                             qsp::projection_actor proj, alert_fn alert,
                             caf::timespan timeout = std::chrono::seconds(10)) {
  return sys.spawn(gate, std::move(tenant), std::move(proj), std::move(alert), timeout);
}

} // namespace host
