#include "kafka/client.hpp"

#include "core/checkpoint.hpp"
#include "messages/types.hpp"

namespace qsp::kafka {

void handle_deleter::operator()(rd_kafka_t* rk) const {
  if (rk != nullptr)
    rd_kafka_destroy(rk);
}

caf::expected<handle_ptr>
make_handle(rd_kafka_type_t type, const client_settings& cfg,
            const std::vector<std::pair<std::string, std::string>>& fixed,
            const std::vector<std::pair<std::string, std::string>>& defaults) {
  for (auto& [k, v] : cfg.properties)
    for (auto& [fk, fv] : fixed)
      if (k == fk)
        return caf::make_error(ec::invalid_config,
                               "kafka.properties: " + k + " is fixed by the projection (" + fv
                                 + ") and cannot be set");
  char err[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  auto set = [&](const std::string& key, const std::string& value) -> caf::error {
    if (rd_kafka_conf_set(conf, key.c_str(), value.c_str(), err, sizeof(err))
        != RD_KAFKA_CONF_OK)
      return caf::make_error(ec::invalid_config, "kafka property " + key + ": " + err);
    return caf::none;
  };
  std::vector<std::pair<std::string, std::string>> all{
    {"bootstrap.servers", cfg.bootstrap_servers},
    {"client.id", cfg.client_id},
    {"log_level", "3"},
  };
  all.insert(all.end(), defaults.begin(), defaults.end());
  all.insert(all.end(), cfg.properties.begin(), cfg.properties.end());
  all.insert(all.end(), fixed.begin(), fixed.end());
  for (auto& [k, v] : all)
    if (auto e = set(k, v)) {
      rd_kafka_conf_destroy(conf);
      return e;
    }
  rd_kafka_t* rk = rd_kafka_new(type, conf, err, sizeof(err));
  if (rk == nullptr) {
    rd_kafka_conf_destroy(conf);
    return caf::make_error(ec::refused, std::string{"cannot create a kafka client: "} + err);
  }
  return handle_ptr{rk};
}

caf::error kafka_error(rd_kafka_resp_err_t err, const std::string& what) {
  return caf::make_error(ec::kafka_unavailable, what + ": " + rd_kafka_err2str(err));
}

std::string topic_id_text(const rd_kafka_Uuid_t* id) {
  if (id == nullptr)
    return {};
  return core::kafka_uuid_text(
    static_cast<uint64_t>(rd_kafka_Uuid_most_significant_bits(id)),
    static_cast<uint64_t>(rd_kafka_Uuid_least_significant_bits(id)));
}

} // namespace qsp::kafka
