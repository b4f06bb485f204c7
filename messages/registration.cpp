#include "caf/actor_system_config.hpp"

#include "messages/types.hpp"
#include "qsession/projection/projection.hpp"

namespace qsp {

void register_types(caf::actor_system_config& cfg) {
  add_type_blocks<caf::id_block::qsp, caf::id_block::qsp_handles, caf::id_block::qsp_internal>(cfg);
  // CAF prints `qsp` errors by name and text, not as error(12, 'qsp', ...).
  add_error_renderer<ec>(cfg, [](uint8_t code, const caf::message& ctx) {
    auto text = to_string(static_cast<ec>(code));
    if (ctx.size() == 1 && ctx.match_element<std::string>(0))
      text += ": " + ctx.get_as<std::string>(0);
    return text;
  });
}

} // namespace qsp
