#include "messages/registration.hpp"

#include "caf/config.hpp"

#include "messages/types.hpp"

namespace qsp {

// The project's only CAF version switch: 0.17 registers type-ID blocks through
// add_message_types; CAF 0.18+ uses init_global_meta_objects instead.
void register_types(caf::actor_system_config& cfg) {
#if CAF_VERSION < 1800
  cfg.add_message_types<caf::id_block::qsp>();
#else
  (void) cfg;
#endif
}

} // namespace qsp
