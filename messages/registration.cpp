#include "caf/actor_system_config.hpp"
#include "caf/config.hpp"

#include "messages/types.hpp"
#include "qsession/projection/projection.hpp"

namespace qsp {

// The project's only CAF version switch: 0.17 registers type-ID blocks through
// add_message_types; CAF 0.18+ uses init_global_meta_objects instead.
void register_types(caf::actor_system_config& cfg) {
#if CAF_VERSION < 1800
  cfg.add_message_types<caf::id_block::qsp>();
  cfg.add_message_types<caf::id_block::qsp_internal>();
  // CAF prints `qsp` errors by name and text, not as error(12, 'qsp', ...).
  cfg.add_error_category(caf::atom("qsp"),
                         [](uint8_t code, caf::atom_value, const caf::message& ctx) {
                           auto text = to_string(static_cast<ec>(code));
                           if (ctx.size() == 1 && ctx.match_element<std::string>(0))
                             text += ": " + ctx.get_as<std::string>(0);
                           return text;
                         });
#else
  (void) cfg;
#endif
}

} // namespace qsp
