// The projection's configuration options, CAF's way.  A host declares them on
// its own actor_system_config under a group it names, and reads them back into
// one validated projection_settings; the standalone node does the same with
// the empty group (keys `projection.*`, `kafka.*`, `redis.*`).
//
//   struct host_config : caf::actor_system_config {
//     host_config() {
//       qsp::register_types(*this);
//       qsp::add_options(custom_options_, "sessions");  // sessions.redis.host, ...
//     }
//   };
//   ...
//   auto settings = qsp::read_settings(cfg.content, "sessions");  // caf::expected
#pragma once

#include <string>

#include "caf/config_option_set.hpp"
#include "caf/expected.hpp"
#include "caf/settings.hpp"

#include "qsession/projection/settings.hpp"

namespace qsp {

/// Declares every projection option under `<group>.projection`,
/// `<group>.kafka` and `<group>.redis` (`projection`, `kafka`, `redis` when
/// `group` is empty), each with its default in the help text.
void add_options(caf::config_option_set& opts, const std::string& group = "");

/// Reads the options declared by add_options from a parsed config (an
/// actor_system_config's `content`) into settings and validates them: an
/// ec::invalid_config error names the full key and what it expects.
caf::expected<projection_settings> read_settings(const caf::settings& content,
                                                 const std::string& group = "");

} // namespace qsp
