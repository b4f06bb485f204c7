#include "adapters/real_ports.hpp"

#include "kafka/admin.hpp"
#include "redis/stores.hpp"

namespace qsp {

namespace {

class real_ports final : public port_factory {
public:
  explicit real_ports(real_ports_settings cfg) : cfg_(std::move(cfg)) {}

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

std::shared_ptr<port_factory> make_real_ports(real_ports_settings cfg) {
  return std::make_shared<real_ports>(std::move(cfg));
}

} // namespace qsp
