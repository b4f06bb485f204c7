// Shared librdkafka plumbing: settings, handle creation, error mapping.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <librdkafka/rdkafka.h>

#include "caf/expected.hpp"

namespace qsp::kafka {

/// Connection settings common to every librdkafka handle of the projection.
struct client_settings {
  std::string bootstrap_servers = "127.0.0.1:9092";
  std::string client_id = "qsession-projection";
  /// Extra librdkafka properties (security.protocol, sasl.*, ssl.*, ...).
  std::vector<std::pair<std::string, std::string>> properties;
  int timeout_ms = 10000;
};

struct handle_deleter {
  void operator()(rd_kafka_t* rk) const;
};
using handle_ptr = std::unique_ptr<rd_kafka_t, handle_deleter>;

/// Builds a handle of `type`.  `defaults` go before the settings'
/// properties (an operator may override them); `fixed` are the properties the
/// projection's guarantees depend on: setting one of them in the properties
/// is an ec::invalid_config error naming it.  Property values never appear
/// in error messages (they may be secrets).
caf::expected<handle_ptr>
make_handle(rd_kafka_type_t type, const client_settings& cfg,
            const std::vector<std::pair<std::string, std::string>>& fixed,
            const std::vector<std::pair<std::string, std::string>>& defaults = {});

/// Maps a librdkafka error to ec::kafka_unavailable with `what` as context.
caf::error kafka_error(rd_kafka_resp_err_t err, const std::string& what);

/// Kafka's text form of a topic id (Uuid.toString()).
std::string topic_id_text(const rd_kafka_Uuid_t* id);

} // namespace qsp::kafka
