// Test programs that make projection errors (caf::make_error(ec, text))
// without an actor system: CAF 1.x builds an error's context from its global
// meta objects, which a host initialises before its actor system exists (as
// register_types does); this does it once, before main.  Harmless on 0.17.
#include "caf/actor_system_config.hpp"

#include "qsession/projection/projection.hpp"

namespace {

const bool registered = [] {
  caf::actor_system_config cfg;
  qsp::register_types(cfg);
  return true;
}();

} // namespace
