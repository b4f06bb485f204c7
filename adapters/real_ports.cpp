#include "adapters/real_ports.hpp"

#include "kafka/group_member.hpp"

#include <mutex>
#include <optional>

#include "core/endpoint.hpp"
#include "kafka/admin.hpp"
#include "redis/cluster_stores.hpp"
#include "redis/stores.hpp"

namespace qsp {

kafka::dispatch_log_consumer_config kafka_config_of(const projection_settings& s) {
  kafka::dispatch_log_consumer_config k;
  k.client.bootstrap_servers = s.kafka.bootstrap_servers;
  k.client.client_id = s.kafka.client_id;
  k.client.properties = s.kafka.properties;
  k.client.timeout_ms = static_cast<int>(s.kafka.timeout.count());
  k.group_id = s.kafka.group_id;
  k.topic = s.topic;
  return k;
}

std::vector<std::string> security_warnings(const projection_settings& s) {
  std::vector<std::string> out;
  if (s.redis.tls && !s.redis.tls_verify_hostname)
    out.emplace_back("redis.tls-verify-hostname=false: the Redis server's certificate is not "
                     "checked against its name; any server holding a certificate from the "
                     "configured CA is trusted with the checkpoints and session sets");
  for (auto& [k, v] : s.kafka.properties)
    if (k == "ssl.endpoint.identification.algorithm" && v == "none")
      out.emplace_back("kafka.properties ssl.endpoint.identification.algorithm=none: the "
                       "brokers' certificates are not checked against their names; any server "
                       "holding a certificate from the configured CA is trusted as a broker");
  return out;
}

redis::settings redis_config_of(const projection_settings& s) {
  redis::settings r;
  r.host = s.redis.host;
  r.port = s.redis.port;
  for (auto& text : s.redis.sentinels)
    if (auto hp = core::parse_host_port(text)) // validate() refused any other
      r.sentinels.push_back(redis::address{hp->host, hp->port});
  r.master_name = s.redis.master_name;
  for (auto& text : s.redis.cluster_nodes)
    if (auto hp = core::parse_host_port(text)) // validate() refused any other
      r.cluster_nodes.push_back(redis::address{hp->host, hp->port});
  r.sentinel_username = s.redis.sentinel_username;
  r.sentinel_password = s.redis.sentinel_password;
  r.username = s.redis.username;
  r.password = s.redis.password;
  r.tls = s.redis.tls;
  r.tls_ca_file = s.redis.tls_ca_file;
  r.tls_cert_file = s.redis.tls_cert_file;
  r.tls_key_file = s.redis.tls_key_file;
  r.tls_server_name = s.redis.tls_server_name;
  r.tls_verify_hostname = s.redis.tls_verify_hostname;
  r.connect_timeout_ms = static_cast<int>(s.redis.connect_timeout.count());
  r.command_timeout_ms = static_cast<int>(s.redis.command_timeout.count());
  r.wait_replicas = s.redis.wait_replicas;
  r.wait_timeout_ms = static_cast<int>(s.redis.wait_timeout.count());
  r.ns = s.ns;
  r.convs_prefix = s.convs_prefix;
  return r;
}

namespace {

class real_ports final : public port_factory {
public:
  real_ports(const projection_settings& s, real_ports_options opts)
    : kafka_(kafka_config_of(s)), redis_(redis_config_of(s)), io_(opts.io), logs_(opts.logs),
      stats_(opts.stats),
      session_timeout_ms_(static_cast<int>(s.kafka.session_timeout.count())) {
    kafka_.client.logs = opts.logs;
    kafka_.client.keepalive = opts.io;
    redis_.keepalive = opts.io;
    // With Sentinels: the session stores follow the primary the last
    // checkpoint store found (redis::primary_pin).
    redis_.pin = std::make_shared<redis::primary_pin>();
    // Every client-level Kafka error is counted (stats may be absent), and
    // still reaches a callback the host set itself.
    kafka_.on_client_error = [stats = std::move(opts.stats),
                              host = std::move(opts.on_client_error)](const std::string& name) {
      if (stats)
        stats->kafka_client_errors.fetch_add(1, std::memory_order_relaxed);
      if (host)
        host(name);
    };
  }

  caf::expected<std::unique_ptr<broker_inspector>> make_inspector() override {
    auto a = kafka::admin::make(kafka_.client);
    if (!a)
      return a.error();
    return std::unique_ptr<broker_inspector>{std::move(*a)};
  }

  caf::expected<std::unique_ptr<checkpoint_store>> make_checkpoint_store() override {
    auto s = redis::redis_checkpoint_store::open(redis_);
    if (!s)
      return s.error();
    // With Sentinels: say where the primary is whenever that changes.
    std::lock_guard<std::mutex> guard{announce_mtx_}; // verifiers of two generations may overlap
    if (auto at = redis_.pin ? redis_.pin->get() : std::nullopt;
        at && logs_ && (!announced_ || announced_->to_string() != at->to_string())) {
      logs_->info("redis: the Sentinels name {} as the primary of '{}' (ROLE master)",
                  at->to_string(), redis_.master_name);
      announced_ = at;
    }
    return std::unique_ptr<checkpoint_store>{std::move(*s)};
  }

  caf::expected<std::unique_ptr<session_store>> make_session_store() override {
    if (!redis_.cluster_nodes.empty()) {
      auto c = redis::redis_cluster_session_store::open(redis_, stats_);
      if (!c)
        return c.error();
      return std::unique_ptr<session_store>{std::move(*c)};
    }
    auto s = redis::redis_session_store::open(redis_);
    if (!s)
      return s.error();
    return std::unique_ptr<session_store>{std::move(*s)};
  }

  caf::expected<std::shared_ptr<dispatch_log>> make_dispatch_log() override {
    auto c = kafka::dispatch_log_consumer::make(kafka_);
    if (!c)
      return c.error();
    return std::shared_ptr<dispatch_log>{std::move(*c)};
  }

  caf::expected<std::unique_ptr<group_membership>> make_group_member(group_events events) override {
    kafka::group_member_config g;
    g.client = kafka_.client;
    g.group_id = kafka_.group_id;
    g.topic = kafka_.topic;
    g.session_timeout_ms = session_timeout_ms_;
    return kafka::make_group_member(std::move(g), std::move(events));
  }

  caf::expected<std::unique_ptr<cluster_store>> make_cluster_store() override {
    // Its own resolution of the primary: the heartbeat's reconnects never
    // move the pin the generation's connections share.
    auto cfg = redis_;
    cfg.pin = nullptr;
    auto s = redis::redis_cluster_store::open(cfg);
    if (!s)
      return s.error();
    return std::unique_ptr<cluster_store>{std::move(*s)};
  }

private:
  kafka::dispatch_log_consumer_config kafka_;
  redis::settings redis_;
  std::shared_ptr<void> io_;
  log_ptr logs_;
  std::shared_ptr<metrics> stats_;
  std::mutex announce_mtx_;
  std::optional<redis::address> announced_; ///< the primary last logged
  int session_timeout_ms_;
};

} // namespace

std::shared_ptr<port_factory> make_real_ports(const projection_settings& s,
                                              real_ports_options opts) {
  return std::make_shared<real_ports>(s, std::move(opts));
}

} // namespace qsp
