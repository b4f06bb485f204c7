// projection_settings::validate and the CAF option helpers
// (qsession/projection/options.hpp).
#include "qsession/projection/options.hpp"

#include <algorithm>
#include <fstream>

#include "caf/config_option_adder.hpp"
#include "caf/settings.hpp"

#include "core/cluster.hpp"
#include "core/endpoint.hpp"
#include "qsession/projection/types.hpp"

namespace qsp {

namespace {

caf::error bad(const std::string& key, const std::string& what) {
  return caf::make_error(ec::invalid_config, key + ": " + what);
}

int64_t ms(caf::timespan t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t).count();
}

std::string prefixed(const std::string& group, const char* category) {
  return group.empty() ? std::string{category} : group + "." + category;
}

} // namespace

const char* to_string(ownership_mode m) {
  switch (m) {
    case ownership_mode::all: return "all";
    case ownership_mode::static_set: return "static";
    case ownership_mode::group: return "group";
    case ownership_mode::host: return "host";
  }
  return "?";
}

caf::error projection_settings::validate() const {
  if (topic.empty())
    return bad("projection.dispatch-topic", "required, a Kafka topic name");
  if (partition_count <= 0 || partition_count > 100000)
    return bad("projection.partition-count",
               "required, an integer in [1, 100000], got " + std::to_string(partition_count));
  if (ns.empty())
    return bad("projection.namespace", "must not be empty");
  if (convs_prefix.empty())
    return bad("projection.convs-prefix", "must not be empty");
  if (max_batch_records == 0 || max_batch_records > 1000000)
    return bad("projection.max-batch-records",
               "an integer in [1, 1000000], got " + std::to_string(max_batch_records));
  if (max_batches_in_flight == 0 || max_batches_in_flight > 64)
    return bad("projection.max-batches-in-flight",
               "an integer in [1, 64], got " + std::to_string(max_batches_in_flight));
  if (ms(idle_poll) < 1 || idle_poll > std::chrono::minutes(1))
    return bad("projection.idle-poll",
               "a duration in [1ms, 1min], got " + std::to_string(ms(idle_poll)) + "ms");
  if (backoff_initial.count() <= 0 || backoff_max < backoff_initial)
    return bad("projection.backoff-*", "need 0 < initial <= max");
  if (progress_interval.count() <= 0)
    return bad("projection.progress-interval", "a duration > 0");
  if (ms(identity_check_interval) < 10 || identity_check_interval > std::chrono::hours(1))
    return bad("projection.identity-check-interval",
               "a duration in [10ms, 1h], got " + std::to_string(ms(identity_check_interval)) + "ms");
  if (identity_check_min_gap.count() < 0 || identity_check_min_gap > identity_check_interval)
    return bad("projection.identity-check-min-gap",
               "a duration in [0, projection.identity-check-interval], got "
                 + std::to_string(ms(identity_check_min_gap)) + "ms");
  if (ms(shutdown_timeout) < 1 || shutdown_timeout > std::chrono::hours(1))
    return bad("projection.shutdown-timeout",
               "a duration in [1ms, 1h], got " + std::to_string(ms(shutdown_timeout)) + "ms");
  if (ownership == ownership_mode::static_set) {
    if (partitions.empty())
      return bad("projection.partitions",
                 "required with projection.ownership = static, e.g. \"0-5,9\"");
    for (size_t i = 0; i < partitions.size(); ++i)
      if (partitions[i] < 0 || partitions[i] >= partition_count
          || (i > 0 && partitions[i] <= partitions[i - 1]))
        return bad("projection.partitions",
                   "sorted, distinct partitions in [0, " + std::to_string(partition_count - 1)
                     + "], got " + std::to_string(partitions[i]) + " at position "
                     + std::to_string(i));
  } else if (!partitions.empty()) {
    return bad("projection.partitions",
               std::string{"only with projection.ownership = static (it is "} + to_string(ownership)
                 + ")");
  }
  if (ms(heartbeat_interval) < 10 || heartbeat_interval > std::chrono::minutes(1))
    return bad("projection.heartbeat-interval",
               "a duration in [10ms, 1min], got " + std::to_string(ms(heartbeat_interval)) + "ms");
  if (kafka.session_timeout.count() < 1000 || kafka.session_timeout > std::chrono::hours(1))
    return bad("kafka.session-timeout-ms",
               "an integer in [1000, 3600000], got " + std::to_string(kafka.session_timeout.count()));
  if (kafka.bootstrap_servers.empty())
    return bad("kafka.bootstrap-servers", "must not be empty");
  if (kafka.timeout.count() <= 0)
    return bad("kafka.timeout-ms", "an integer > 0");
  for (auto& [k, v] : kafka.properties)
    if (k.empty())
      return bad("kafka.properties", "entries must look like \"key=value\", got one without a key");
  if (!redis.cluster_nodes.empty()) {
    if (!redis.sentinels.empty())
      return bad("redis.cluster-nodes",
                 "set either redis.cluster-nodes (Redis Cluster mode) or redis.sentinels, not both");
    for (auto& s : redis.cluster_nodes)
      if (!core::parse_host_port(s))
        return bad("redis.cluster-nodes",
                   "entries must look like \"host:port\" (port in [1, 65535]), got \"" + s + "\"");
    // "{X}": X non-empty, without braces (Redis hashes X alone).
    if (ns.size() < 3 || ns.front() != '{' || ns.back() != '}'
        || ns.find_first_of("{}", 1) != ns.size() - 1)
      return bad("projection.namespace",
                 "Redis Cluster mode (redis.cluster-nodes) needs a hash tag, e.g. "
                 "{session_projection}, so that the namespace's keys share one slot; got \""
                   + ns + "\" (in a config file, quote it: namespace = \"{session_projection}\")");
    if (convs_prefix.find_first_of("{}") != std::string::npos)
      return bad("projection.convs-prefix",
                 "must not contain '{' or '}' in Redis Cluster mode (the user's id alone "
                 "decides a session set's slot), got \"" + convs_prefix + "\"");
  }
  if (!redis.cluster_nodes.empty()) {
    // host/port are unused (the option reader refuses them set explicitly).
  } else if (redis.sentinels.empty()) {
    if (redis.host.empty())
      return bad("redis.host", "must not be empty");
    if (redis.port == 0)
      return bad("redis.port", "an integer in [1, 65535], got 0");
    if (!redis.master_name.empty())
      return bad("redis.master-name", "only with redis.sentinels (which is empty)");
    if (!redis.sentinel_username.empty() || !redis.sentinel_password.empty())
      return bad("redis.sentinel-username/-password",
                 "only with redis.sentinels (which is empty)");
  } else {
    for (auto& s : redis.sentinels)
      if (!core::parse_host_port(s))
        return bad("redis.sentinels",
                   "entries must look like \"host:port\" (port in [1, 65535]), got \"" + s + "\"");
    if (redis.master_name.empty())
      return bad("redis.master-name", "required with redis.sentinels: the name the Sentinels "
                                      "monitor the primary under");
  }
  if (redis.command_timeout.count() < 1 || redis.command_timeout > std::chrono::hours(1))
    return bad("redis.command-timeout",
               "a duration in [1ms, 1h], got " + std::to_string(redis.command_timeout.count()) + "ms");
  if (redis.connect_timeout.count() < 1 || redis.connect_timeout > std::chrono::hours(1))
    return bad("redis.connect-timeout",
               "a duration in [1ms, 1h], got " + std::to_string(redis.connect_timeout.count()) + "ms");
  if (redis.wait_replicas < 0 || redis.wait_replicas > 100)
    return bad("redis.wait-replicas",
               "an integer in [0, 100], got " + std::to_string(redis.wait_replicas));
  if (redis.wait_replicas > 0
      && (redis.wait_timeout.count() < 1 || redis.wait_timeout >= redis.command_timeout))
    return bad("redis.wait-timeout",
               "a duration in [1ms, redis.command-timeout), got "
                 + std::to_string(redis.wait_timeout.count()) + "ms with redis.command-timeout "
                 + std::to_string(redis.command_timeout.count()) + "ms");
  return caf::none;
}

void add_options(caf::config_option_set& opts, const std::string& group) {
  caf::config_option_adder{opts, prefixed(group, "projection")}
    .add<std::string>("dispatch-topic", "dispatch topic name (required)")
    .add<int64_t>("partition-count", "exact expected partition count (required)")
    .add<std::string>("namespace",
                      "checkpoint namespace, the Redis key prefix (default: session_projection)")
    .add<std::string>("convs-prefix", "sorted-set key prefix (default: convs:)")
    .add<int64_t>("max-batch-records", "records per consumer batch (default: 5000)")
    .add<int64_t>("max-batches-in-flight",
                  "batches per partition sent to Redis and not yet confirmed (default: 2)")
    .add<caf::timespan>("identity-check-interval",
                        "re-check the broker identity (cluster id, topic id, partition count) at "
                        "least this often while running, in [10ms, 1h] (default: 1s)")
    .add<caf::timespan>("identity-check-min-gap",
                        "least time between two identity checks while checkpoints wait for one, "
                        "in [0, identity-check-interval] (default: 50ms)")
    .add<caf::timespan>("idle-poll",
                        "a partition consumer's safety poll while no records arrive (records "
                        "wake it at once through librdkafka's queue callback), in [1ms, 1min] "
                        "(default: 10s)")
    .add<caf::timespan>("shutdown-timeout",
                        "how long a shutdown waits for the actors and I/O to stop (default: 10s)")
    .add<caf::timespan>("progress-interval",
                        "catch-up (and audit) progress log line interval (default: 5s)")
    .add<std::string>("ownership",
                      "who owns which partitions: all (this node, the default), static "
                      "(projection.partitions), group (Kafka's consumer group decides) or host "
                      "(the embedding host assigns); docs/CLUSTER.md")
    .add<std::string>("partitions", "with ownership = static: the partitions, e.g. \"0-5,9\"")
    .add<std::string>("node-id",
                      "this node's name in ownership records and the cluster status (default: "
                      "<hostname>-<pid>)")
    .add<caf::timespan>("heartbeat-interval",
                        "clustered modes: publish this node's status and read the namespace's "
                        "this often (a fifth of it while the namespace is not ready); a status "
                        "lives for three (default: 250ms)")
    .add<bool>("allow-shared-convs-prefix",
               "allow a second projection in one process to write the same convs-prefix on the "
               "same Redis under another namespace (default: false)")
    .add<bool>("replay-from-log-start",
               "this start replays every owned partition from the log's low watermark (the "
               "checkpoints never move back): the repair of a gap audit found (default: false)");
  caf::config_option_adder{opts, prefixed(group, "kafka")}
    .add<std::string>("bootstrap-servers", "broker list (default: 127.0.0.1:9092)")
    .add<std::string>("client-id", "librdkafka client.id (default: qsession-projection)")
    .add<std::string>("group-id",
                      "librdkafka group.id: the consumer group of ownership = group (one per "
                      "namespace); offsets are never committed (default: "
                      "qsession-projection)")
    .add<std::vector<std::string>>("properties",
                                   "extra librdkafka properties, [\"key=value\", ...] (default: none)")
    .add<std::string>("sasl-password-file",
                      "file whose first line is the SASL password (librdkafka's sasl.password, "
                      "never logged; sasl.username and the mechanism go in properties)")
    .add<int64_t>("timeout-ms", "admin/metadata request timeout (default: 10000)")
    .add<int64_t>("session-timeout-ms",
                  "ownership = group: a member silent this long loses its partitions "
                  "(default: 6000)");
  caf::config_option_adder{opts, prefixed(group, "redis")}
    .add<std::string>("host", "Redis host, not with sentinels (default: 127.0.0.1)")
    .add<int64_t>("port", "Redis port, not with sentinels (default: 6379)")
    .add<std::vector<std::string>>("sentinels",
                                   "Redis Sentinels [\"host:port\", ...], asked in order for the "
                                   "primary of master-name; replaces host/port (default: none)")
    .add<std::string>("master-name", "the primary's name at the Sentinels (required with sentinels)")
    .add<std::vector<std::string>>("cluster-nodes",
                                   "Redis Cluster mode: seed nodes [\"host:port\", ...] of a Redis "
                                   "Cluster; replaces host/port, not with sentinels; "
                                   "projection.namespace must then be a hash tag such as "
                                   "\"{session_projection}\" (default: none)")
    .add<std::string>("sentinel-username", "ACL user at the Sentinels (empty: default)")
    .add<std::string>("sentinel-password",
                      "password at the Sentinels, never logged (prefer sentinel-password-file; "
                      "default: none)")
    .add<std::string>("sentinel-password-file", "file holding the Sentinels' password")
    .add<std::string>("username", "ACL user (empty: default)")
    .add<std::string>("password", "password, never logged (prefer password-file; default: none)")
    .add<std::string>("password-file", "file holding the password")
    .add<bool>("tls", "connect over TLS, to the Sentinels too (a flag; default: false)")
    .add<std::string>("tls-ca-file", "CA bundle for TLS")
    .add<std::string>("tls-cert-file", "client certificate for TLS")
    .add<std::string>("tls-key-file", "client key for TLS")
    .add<std::string>("tls-server-name",
                      "the name the server's certificate must hold, also sent as SNI (default: "
                      "the host connected to; with sentinels, the address they name)")
    .add<bool>("tls-verify-hostname",
               "check the server certificate's name (default: true; false is logged as a "
               "warning at every start)")
    .add<caf::timespan>("command-timeout",
                        "deadline of every Redis exchange, pipelined ZADD replies included, with "
                        "a unit, e.g. 5s or 500ms (default: 5s)")
    .add<caf::timespan>("connect-timeout", "connect deadline, with a unit (default: 3s)")
    .add<int64_t>("wait-replicas",
                  "after every checkpoint write, WAIT for this many replicas' acknowledgement "
                  "(fewer within wait-timeout is no error; default: 0, no WAIT)")
    .add<caf::timespan>("wait-timeout",
                        "WAIT's bound, with a unit, below command-timeout (default: 100ms)")
    .add<int64_t>("timeout-ms", "deprecated: command-timeout in milliseconds")
    .add<bool>("allow-eviction",
               "a flag: start although maxmemory-policy is not noeviction, only if maxmemory can "
               "never be reached (default: false)");
}

caf::expected<projection_settings> read_settings(const caf::settings& content,
                                                 const std::string& group) {
  projection_settings s;
  auto key = [&](const char* category, const char* name) {
    return prefixed(group, category) + "." + name;
  };
  auto get = [&](const char* category, const char* name, auto fallback) {
    return caf::get_or(content, key(category, name), fallback);
  };
  auto in_range = [&](const char* category, const char* name, int64_t fallback, int64_t lo,
                      int64_t hi, int64_t& out) -> caf::error {
    out = get(category, name, fallback);
    if (out < lo || out > hi)
      return bad(key(category, name), "an integer in [" + std::to_string(lo) + ", "
                                        + std::to_string(hi) + "], got " + std::to_string(out));
    return caf::none;
  };
  int64_t n = 0;
  s.topic = get("projection", "dispatch-topic", s.topic);
  if (auto err = in_range("projection", "partition-count", 0, 1, 100000, n))
    return err;
  s.partition_count = static_cast<int32_t>(n);
  s.ns = get("projection", "namespace", s.ns);
  s.convs_prefix = get("projection", "convs-prefix", s.convs_prefix);
  if (auto err = in_range("projection", "max-batch-records",
                          static_cast<int64_t>(s.max_batch_records), 1, 1000000, n))
    return err;
  s.max_batch_records = static_cast<size_t>(n);
  if (auto err = in_range("projection", "max-batches-in-flight",
                          static_cast<int64_t>(s.max_batches_in_flight), 1, 64, n))
    return err;
  s.max_batches_in_flight = static_cast<size_t>(n);
  s.identity_check_interval = get("projection", "identity-check-interval", s.identity_check_interval);
  s.identity_check_min_gap = get("projection", "identity-check-min-gap", s.identity_check_min_gap);
  s.shutdown_timeout = get("projection", "shutdown-timeout", s.shutdown_timeout);
  s.progress_interval = get("projection", "progress-interval", s.progress_interval);
  s.idle_poll = get("projection", "idle-poll", s.idle_poll);
  s.allow_shared_convs_prefix = get("projection", "allow-shared-convs-prefix", false);
  s.replay_from_log_start = get("projection", "replay-from-log-start", false);
  auto mode = get("projection", "ownership", std::string{"all"});
  if (mode == "all")
    s.ownership = ownership_mode::all;
  else if (mode == "static")
    s.ownership = ownership_mode::static_set;
  else if (mode == "group")
    s.ownership = ownership_mode::group;
  else if (mode == "host")
    s.ownership = ownership_mode::host;
  else
    return bad(key("projection", "ownership"),
               "one of all, static, group, host, got \"" + mode + "\"");
  if (auto text = caf::get_if<std::string>(&content, key("projection", "partitions"))) {
    std::string why;
    auto list = core::parse_partition_list(*text, s.partition_count, why);
    if (!list)
      return bad(key("projection", "partitions"), why);
    s.partitions = std::move(*list);
  }
  s.node_id = get("projection", "node-id", s.node_id);
  s.heartbeat_interval = get("projection", "heartbeat-interval", s.heartbeat_interval);

  auto& k = s.kafka;
  k.bootstrap_servers = get("kafka", "bootstrap-servers", k.bootstrap_servers);
  k.client_id = get("kafka", "client-id", k.client_id);
  k.group_id = get("kafka", "group-id", k.group_id);
  if (auto err = in_range("kafka", "timeout-ms", k.timeout.count(), 1, 3600 * 1000, n))
    return err;
  k.timeout = std::chrono::milliseconds(n);
  if (auto err = in_range("kafka", "session-timeout-ms", k.session_timeout.count(), 1000,
                          3600 * 1000, n))
    return err;
  k.session_timeout = std::chrono::milliseconds(n);
  for (auto& kv : get("kafka", "properties", std::vector<std::string>{})) {
    auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      return bad(key("kafka", "properties"),
                 "entries must look like \"key=value\", got one without '='");
    k.properties.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }
  // librdkafka reads no password file: the file's first line becomes
  // sasl.password, which must then not be set among the properties too.
  if (auto file = get("kafka", "sasl-password-file", std::string{}); !file.empty()) {
    for (auto& [name, value] : k.properties)
      if (name == "sasl.password")
        return bad(key("kafka", "sasl-password-file"),
                   "set either kafka.sasl-password-file or sasl.password in kafka.properties, "
                   "not both");
    std::ifstream in{file};
    if (!in)
      return bad(key("kafka", "sasl-password-file"), "cannot read " + file);
    std::string secret;
    std::getline(in, secret);
    if (secret.empty())
      return bad(key("kafka", "sasl-password-file"), file + " holds no password (empty first line)");
    k.properties.emplace_back("sasl.password", std::move(secret));
  }

  auto& r = s.redis;
  r.host = get("redis", "host", r.host);
  if (auto err = in_range("redis", "port", r.port, 1, 65535, n))
    return err;
  r.port = static_cast<uint16_t>(n);
  r.sentinels = get("redis", "sentinels", std::vector<std::string>{});
  // Sentinels replace host/port: both set is a mistake, not a preference
  // (which one would the operator expect to be used?).
  if (!r.sentinels.empty())
    for (auto* name : {"host", "port"})
      if (caf::get_if(&content, key("redis", name)) != nullptr)
        return bad(key("redis", "sentinels"),
                   "set either redis.sentinels (with redis.master-name) or redis.host/redis.port, "
                   "not both (" + key("redis", name) + " is set too)");
  r.master_name = get("redis", "master-name", std::string{});
  r.cluster_nodes = get("redis", "cluster-nodes", std::vector<std::string>{});
  if (!r.cluster_nodes.empty())
    for (auto* name : {"host", "port"})
      if (caf::get_if(&content, key("redis", name)) != nullptr)
        return bad(key("redis", "cluster-nodes"),
                   "set either redis.cluster-nodes (Redis Cluster mode) or redis.host/redis.port, "
                   "not both (" + key("redis", name) + " is set too)");
  r.sentinel_username = get("redis", "sentinel-username", std::string{});
  r.username = get("redis", "username", r.username);
  auto read_secret = [&](const char* name, const char* file_name,
                         std::string& out) -> caf::error {
    out = get("redis", name, out);
    if (auto file = get("redis", file_name, std::string{}); !file.empty()) {
      std::ifstream in{file};
      if (!in)
        return bad(key("redis", file_name), "cannot read " + file);
      std::getline(in, out);
    }
    return caf::none;
  };
  if (auto err = read_secret("password", "password-file", r.password))
    return err;
  if (auto err = read_secret("sentinel-password", "sentinel-password-file", r.sentinel_password))
    return err;
  r.tls = get("redis", "tls", false);
  r.tls_ca_file = get("redis", "tls-ca-file", std::string{});
  r.tls_cert_file = get("redis", "tls-cert-file", std::string{});
  r.tls_key_file = get("redis", "tls-key-file", std::string{});
  r.tls_server_name = get("redis", "tls-server-name", std::string{});
  r.tls_verify_hostname = get("redis", "tls-verify-hostname", true);
  auto command = get("redis", "command-timeout",
                     caf::timespan{std::chrono::duration_cast<caf::timespan>(r.command_timeout)});
  if (auto legacy = get("redis", "timeout-ms", int64_t{0}); legacy != 0) {
    if (legacy < 0)
      return bad(key("redis", "timeout-ms"), "an integer > 0");
    command = std::chrono::milliseconds(legacy);
  }
  r.command_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(command);
  r.connect_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
    get("redis", "connect-timeout",
        caf::timespan{std::chrono::duration_cast<caf::timespan>(r.connect_timeout)}));
  r.allow_eviction = get("redis", "allow-eviction", false);
  r.wait_replicas = static_cast<int>(
    std::clamp<int64_t>(get("redis", "wait-replicas", int64_t{0}), -1, 101)); // validate() names it
  r.wait_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
    get("redis", "wait-timeout",
        caf::timespan{std::chrono::duration_cast<caf::timespan>(r.wait_timeout)}));

  if (auto err = s.validate()) {
    // validate() names keys without the host's group: add it.
    if (group.empty())
      return err;
    auto& ctx = err.context();
    auto text = ctx.size() == 1 && ctx.match_element<std::string>(0) ? ctx.get_as<std::string>(0)
                                                                       : describe(err);
    return caf::make_error(ec::invalid_config, group + "." + text);
  }
  return s;
}

} // namespace qsp
