#include "adapters/real_ports.hpp"

#include "kafka/admin.hpp"
#include "redis/stores.hpp"

namespace qsp {

namespace {

class real_ports final : public port_factory {
public:
  real_ports(real_ports_settings cfg, std::shared_ptr<metrics> stats) : cfg_(std::move(cfg)) {
    // Every client-level Kafka error is counted (stats may be absent), and
    // still reaches a callback the host set itself.
    auto host = std::move(cfg_.kafka.on_client_error);
    cfg_.kafka.on_client_error = [stats = std::move(stats),
                                  host = std::move(host)](const std::string& name) {
      if (stats)
        stats->kafka_client_errors.fetch_add(1, std::memory_order_relaxed);
      if (host)
        host(name);
    };
  }

  caf::expected<std::unique_ptr<broker_inspector>> make_inspector() override {
    auto a = kafka::admin::make(cfg_.kafka.client);
    if (!a)
      return a.error();
    return std::unique_ptr<broker_inspector>{std::move(*a)};
  }

  caf::expected<std::unique_ptr<checkpoint_store>> make_checkpoint_store() override {
    auto s = redis::redis_checkpoint_store::open(cfg_.redis);
    if (!s)
      return s.error();
    return std::unique_ptr<checkpoint_store>{std::move(*s)};
  }

  caf::expected<std::unique_ptr<session_store>> make_session_store() override {
    auto s = redis::redis_session_store::open(cfg_.redis);
    if (!s)
      return s.error();
    return std::unique_ptr<session_store>{std::move(*s)};
  }

  caf::expected<std::shared_ptr<dispatch_log>> make_dispatch_log() override {
    auto c = kafka::dispatch_log_consumer::make(cfg_.kafka);
    if (!c)
      return c.error();
    return std::shared_ptr<dispatch_log>{std::move(*c)};
  }

private:
  real_ports_settings cfg_;
};

} // namespace

std::shared_ptr<port_factory> make_real_ports(real_ports_settings cfg,
                                              std::shared_ptr<metrics> stats) {
  return std::make_shared<real_ports>(std::move(cfg), std::move(stats));
}

} // namespace qsp
