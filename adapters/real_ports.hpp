// The production port factory: librdkafka for the log and the broker,
// hiredis for checkpoints and sessions.
#pragma once

#include <memory>

#include "actors/metrics.hpp"
#include "kafka/dispatch_log_consumer.hpp"
#include "ports/ports.hpp"
#include "redis/connection.hpp"

namespace qsp {

struct real_ports_settings {
  kafka::dispatch_log_consumer_config kafka;  ///< client settings, group id, topic
  redis::settings redis;
};

/// `stats` (optional) receives the adapters' own counters, e.g.
/// kafka_client_errors.
std::shared_ptr<port_factory> make_real_ports(real_ports_settings cfg,
                                              std::shared_ptr<metrics> stats = nullptr);

} // namespace qsp
