#include "app/node_config.hpp"

#include <fstream>

#include "caf/config_option_adder.hpp"

#include "messages/registration.hpp"
#include "messages/types.hpp"

namespace qsp::app {

node_config::node_config() {
  register_types(*this);
  // CAF's default work-stealing scheduler polls for work with 50-us sleeps
  // and keeps idle workers spinning (about 20% of a core on an idle node).
  // The node has a handful of actors, so work-sharing costs nothing in
  // throughput; `--scheduler.policy=stealing` (or the config file) restores
  // CAF's default.
  set("scheduler.policy", caf::atom("sharing"));
  opt_group{custom_options_, "projection"}
    .add(topic, "dispatch-topic", "dispatch topic name (required)")
    .add(partition_count, "partition-count", "exact expected partition count (required)")
    .add(ns, "namespace", "checkpoint namespace, the Redis key prefix (default: session_projection)")
    .add(convs_prefix, "convs-prefix", "sorted-set key prefix (default: convs:)")
    .add(max_batch_records, "max-batch-records", "records per consumer batch (default: 5000)")
    .add(max_batches_in_flight, "max-batches-in-flight",
         "batches per partition sent to Redis and not yet confirmed (default: 2)")
    .add(catch_up_max_attempts, "catch-up-max-attempts",
         "catch-up: give up (exit 4) after this many failed attempts in a row (default: 5)")
    .add(identity_check_interval, "identity-check-interval",
         "re-check the broker identity (cluster id, topic id, partition count) at least this "
         "often while running (default: 1s)")
    .add(identity_check_min_gap, "identity-check-min-gap",
         "least time between two identity checks while checkpoints wait for one (default: 50ms)");
  opt_group{custom_options_, "kafka"}
    .add(bootstrap, "bootstrap-servers", "broker list (default: 127.0.0.1:9092)")
    .add(client_id, "client-id", "librdkafka client.id (default: qsession-projection)")
    .add(group_id, "group-id", "librdkafka group.id, identity only, never committed (default: qsession-projection)")
    .add(kafka_properties, "properties", "extra librdkafka properties, [\"key=value\", ...] (default: none)")
    .add(kafka_timeout_ms, "timeout-ms", "admin/metadata request timeout (default: 10000)");
  opt_group{custom_options_, "redis"}
    .add(redis_host, "host", "Redis host (default: 127.0.0.1)")
    .add(redis_port, "port", "Redis port (default: 6379)")
    .add(redis_username, "username", "ACL user (empty: default)")
    .add(redis_password, "password", "password, never logged (prefer password-file; default: none)")
    .add(redis_password_file, "password-file", "file holding the password")
    .add(redis_tls, "tls", "connect over TLS (default: false)")
    .add(redis_tls_ca_file, "tls-ca-file", "CA bundle for TLS")
    .add(redis_tls_cert_file, "tls-cert-file", "client certificate for TLS")
    .add(redis_tls_key_file, "tls-key-file", "client key for TLS")
    .add(redis_tls_server_name, "tls-server-name", "SNI / verified server name")
    .add(redis_command_timeout, "command-timeout",
         "deadline of every Redis exchange, pipelined ZADD replies included (default: 5s)")
    .add(redis_connect_timeout, "connect-timeout", "connect deadline (default: 3s)")
    .add(redis_timeout_ms, "timeout-ms", "deprecated: command-timeout in milliseconds")
    .add(redis_allow_eviction, "allow-eviction",
         "start although maxmemory-policy is not noeviction: only if maxmemory can never be "
         "reached (default: false)");
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
  auto& p = s.projection;
  p.topic = cfg.topic;
  if (cfg.partition_count <= 0 || cfg.partition_count > 100000)
    return bad("projection.partition-count",
               "required, an integer in [1, 100000], got " + std::to_string(cfg.partition_count));
  p.partition_count = static_cast<int32_t>(cfg.partition_count);
  p.ns = cfg.ns;
  p.convs_prefix = cfg.convs_prefix;
  if (cfg.max_batch_records <= 0 || cfg.max_batch_records > 1000000)
    return bad("projection.max-batch-records", "an integer in [1, 1000000]");
  p.max_batch_records = static_cast<size_t>(cfg.max_batch_records);
  if (cfg.max_batches_in_flight <= 0 || cfg.max_batches_in_flight > 64)
    return bad("projection.max-batches-in-flight",
               "an integer in [1, 64], got " + std::to_string(cfg.max_batches_in_flight));
  p.max_batches_in_flight = static_cast<size_t>(cfg.max_batches_in_flight);
  if (auto err = p.validate())
    return err;
  auto ms = [](caf::timespan t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(t).count();
  };
  if (ms(cfg.identity_check_interval) < 10 || cfg.identity_check_interval > std::chrono::hours(1))
    return bad("projection.identity-check-interval", "a duration in [10ms, 1h], got "
                                                       + std::to_string(ms(cfg.identity_check_interval)) + "ms");
  p.identity_check_interval = cfg.identity_check_interval;
  if (cfg.identity_check_min_gap.count() < 0 || cfg.identity_check_min_gap > cfg.identity_check_interval)
    return bad("projection.identity-check-min-gap",
               "a duration in [0, projection.identity-check-interval], got "
                 + std::to_string(ms(cfg.identity_check_min_gap)) + "ms");
  p.identity_check_min_gap = cfg.identity_check_min_gap;
  if (cfg.catch_up_max_attempts <= 0)
    return bad("projection.catch-up-max-attempts", "an integer > 0");
  s.catch_up_max_attempts = static_cast<int>(cfg.catch_up_max_attempts);

  auto& k = s.ports.kafka;
  if (cfg.bootstrap.empty())
    return bad("kafka.bootstrap-servers", "must not be empty");
  k.client.bootstrap_servers = cfg.bootstrap;
  k.client.client_id = cfg.client_id;
  k.group_id = cfg.group_id;
  k.topic = p.topic;
  if (cfg.kafka_timeout_ms <= 0)
    return bad("kafka.timeout-ms", "an integer > 0");
  k.client.timeout_ms = static_cast<int>(cfg.kafka_timeout_ms);
  for (auto& kv : cfg.kafka_properties) {
    auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      return bad("kafka.properties", "entries must look like \"key=value\", got one without '='");
    k.client.properties.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }

  auto& r = s.ports.redis;
  r.host = cfg.redis_host;
  if (cfg.redis_port <= 0 || cfg.redis_port > 65535)
    return bad("redis.port", "an integer in [1, 65535], got " + std::to_string(cfg.redis_port));
  r.port = static_cast<uint16_t>(cfg.redis_port);
  r.username = cfg.redis_username;
  r.password = cfg.redis_password;
  if (!cfg.redis_password_file.empty()) {
    std::ifstream in{cfg.redis_password_file};
    if (!in)
      return bad("redis.password-file", "cannot read " + cfg.redis_password_file);
    std::getline(in, r.password);
  }
  r.tls = cfg.redis_tls;
  r.tls_ca_file = cfg.redis_tls_ca_file;
  r.tls_cert_file = cfg.redis_tls_cert_file;
  r.tls_key_file = cfg.redis_tls_key_file;
  r.tls_server_name = cfg.redis_tls_server_name;
  auto command_ms = ms(cfg.redis_command_timeout);
  if (cfg.redis_timeout_ms != 0) {
    if (cfg.redis_timeout_ms < 0)
      return bad("redis.timeout-ms", "an integer > 0");
    command_ms = cfg.redis_timeout_ms;
  }
  if (command_ms < 1 || command_ms > 3600 * 1000)
    return bad("redis.command-timeout", "a duration in [1ms, 1h], got " + std::to_string(command_ms) + "ms");
  r.command_timeout_ms = static_cast<int>(command_ms);
  p.write_timeout = std::chrono::milliseconds(command_ms);
  auto connect_ms = ms(cfg.redis_connect_timeout);
  if (connect_ms < 1 || connect_ms > 3600 * 1000)
    return bad("redis.connect-timeout", "a duration in [1ms, 1h], got " + std::to_string(connect_ms) + "ms");
  r.connect_timeout_ms = static_cast<int>(connect_ms);
  p.allow_eviction = cfg.redis_allow_eviction;
  r.ns = p.ns;
  r.convs_prefix = p.convs_prefix;

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
