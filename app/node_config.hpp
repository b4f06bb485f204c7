// The node's configuration, CAF's way: every key can sit in a config file
// (--config-file=PATH) and be overridden as --<group>.<key>=<value>.  Parsed
// once into typed settings (node_settings) and validated.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "caf/actor_system_config.hpp"

#include "actors/settings.hpp"
#include "adapters/real_ports.hpp"

namespace qsp::app {

struct node_config : caf::actor_system_config {
  // projection
  std::string topic;
  int64_t partition_count = 0;
  std::string ns = "session_projection";
  std::string convs_prefix = "convs:";
  int64_t max_batch_records = 5000;
  int64_t max_batches_in_flight = 2;
  int64_t catch_up_max_attempts = 5;
  caf::timespan identity_check_interval = std::chrono::seconds(1);
  caf::timespan identity_check_min_gap = std::chrono::milliseconds(50);
  // kafka
  std::string bootstrap = "127.0.0.1:9092";
  std::string client_id = "qsession-projection";
  std::string group_id = "qsession-projection";
  std::vector<std::string> kafka_properties;
  int64_t kafka_timeout_ms = 10000;
  // redis
  std::string redis_host = "127.0.0.1";
  int64_t redis_port = 6379;
  std::string redis_username;
  std::string redis_password;
  std::string redis_password_file;
  bool redis_tls = false;
  std::string redis_tls_ca_file;
  std::string redis_tls_cert_file;
  std::string redis_tls_key_file;
  std::string redis_tls_server_name;
  int64_t redis_timeout_ms = 0;  ///< deprecated alias of command-timeout (0: unset)
  caf::timespan redis_command_timeout = std::chrono::seconds(5);
  caf::timespan redis_connect_timeout = std::chrono::seconds(3);
  bool redis_allow_eviction = false;
  // http
  std::string http_listen = "127.0.0.1:9464";
  // log
  std::string log_level = "info";

  node_config();

  /// Every option with its default, for --help.
  std::string help() const { return custom_options_.help_text(false); }
};

/// Everything the subcommands need, typed and validated.
struct node_settings {
  projection_settings projection;
  real_ports_settings ports;
  std::string http_host;   ///< empty: HTTP disabled
  uint16_t http_port = 0;
  int catch_up_max_attempts = 5;
};

/// Validates `cfg` into settings, or returns a message naming the bad key.
caf::expected<node_settings> to_settings(const node_config& cfg);

} // namespace qsp::app
