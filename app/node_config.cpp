#include "app/node_config.hpp"

#include "caf/config_option_adder.hpp"

#include "qsession/projection/options.hpp"
#include "qsession/projection/projection.hpp"
#include "qsession/projection/types.hpp"

namespace qsp::app {

node_config::node_config() {
  register_types(*this);
  // CAF's default work-stealing scheduler polls for work with short sleeps;
  // the node has a handful of actors, so work-sharing costs nothing in
  // throughput.  `--scheduler.policy=stealing` (or the config file) restores
  // CAF's default (docs/PERFORMANCE.md has the idle cost of both).
  set_caf_option(*this, "scheduler.policy", "sharing");
  add_options(custom_options_);
  opt_group{custom_options_, "projection"}
    .add(catch_up_max_attempts, "catch-up-max-attempts",
         "catch-up: give up (exit 4) after this many failed attempts in a row (default: 5)")
    .add(exit_on_refusal, "exit-on-refusal",
         "run: exit (3; 2 for a configuration refused at run time) as soon as the node "
         "refuses, instead of staying up in state refused, serving /readyz (last_error) and "
         "/metrics (qsp_state{state=\"refused\"} 1) until SIGTERM/SIGINT, then exiting so "
         "(default: false)");
  opt_group{custom_options_, "http"}
    .add(http_listen, "listen", "health/metrics/sessions endpoint host:port, empty or off disables (default: 127.0.0.1:9464)");
  opt_group{custom_options_, "log"}
    .add(log_level, "level", "trace|debug|info|warn|error (default: info)");
}

caf::expected<node_settings> to_settings(const node_config& cfg) {
  auto bad = [](const std::string& key, const std::string& what) {
    return caf::make_error(ec::invalid_config, key + ": " + what);
  };
  node_settings s;
  auto p = read_settings(cfg.content);
  if (!p)
    return p.error();
  s.projection = std::move(*p);
  if (cfg.catch_up_max_attempts <= 0)
    return bad("projection.catch-up-max-attempts", "an integer > 0");
  s.catch_up_max_attempts = static_cast<int>(cfg.catch_up_max_attempts);
  s.exit_on_refusal = cfg.exit_on_refusal;
  if (!cfg.http_listen.empty() && cfg.http_listen != "off") {
    auto colon = cfg.http_listen.rfind(':');
    if (colon == std::string::npos)
      return bad("http.listen", "host:port, got \"" + cfg.http_listen + "\"");
    s.http_host = cfg.http_listen.substr(0, colon);
    auto port = cfg.http_listen.substr(colon + 1);
    char* end = nullptr;
    long v = std::strtol(port.c_str(), &end, 10);
    if (port.empty() || *end != '\0' || v < 0 || v > 65535)
      return bad("http.listen", "port must be an integer in [0, 65535], got \"" + port + "\"");
    s.http_port = static_cast<uint16_t>(v);
  }
  return s;
}

} // namespace qsp::app
