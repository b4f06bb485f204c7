// The node's configuration, CAF's way: every key can sit in a config file
// (--config-file=PATH) and be overridden as --<group>.<key>=<value>.  The
// projection's own keys come from qsp::add_options (the same helpers a host
// uses); the node adds catch-up, http and log.  Parsed once into typed
// settings (node_settings) and validated.
#pragma once

#include <cstdint>
#include <string>

#include "caf/actor_system_config.hpp"
#include "caf/expected.hpp"

#include "qsession/projection/caf_compat.hpp"
#include "qsession/projection/settings.hpp"

namespace qsp::app {

struct node_config : caf::actor_system_config {
  int64_t catch_up_max_attempts = 5;
  bool exit_on_refusal = false;
  std::string http_listen = "127.0.0.1:9464";
  std::string log_level = "info";

  node_config();

  /// Every option with its default, for --help.
  std::string help() const { return custom_options_.help_text(false); }

  /// The type CAF parses option `name` as ("timespan", "uint16_t", ...; ""
  /// for an unknown option), for an error that says what was expected.
  std::string option_type(std::string_view name) const {
    auto* opt = custom_options_.qualified_name_lookup(caf_string_view{name.data(), name.size()});
    if (opt == nullptr)
      return {};
    auto t = opt->type_name();
    return std::string{t.data(), t.size()};
  }

  /// True if `name` (e.g. "redis.tls") is a boolean option, which CAF's
  /// command line takes as a bare flag only.
  bool is_flag_option(std::string_view name) const {
    auto* opt = custom_options_.qualified_name_lookup(caf_string_view{name.data(), name.size()});
    return opt != nullptr && opt->is_flag();
  }
};

/// Everything the subcommands need, typed and validated.
struct node_settings {
  projection_settings projection;
  std::string http_host;   ///< empty: HTTP disabled
  uint16_t http_port = 0;
  int catch_up_max_attempts = 5;
  /// run: exit as soon as the node refuses, instead of staying up in state
  /// refused (serving /readyz and /metrics) until SIGTERM/SIGINT.
  bool exit_on_refusal = false;
};

/// Validates `cfg` into settings, or returns a message naming the bad key.
caf::expected<node_settings> to_settings(const node_config& cfg);

} // namespace qsp::app
