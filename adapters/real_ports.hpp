// The production port factory: librdkafka for the log and the broker,
// hiredis for checkpoints and sessions, all built from one projection_settings.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "kafka/dispatch_log_consumer.hpp"
#include "messages/log.hpp"
#include "ports/ports.hpp"
#include "qsession/projection/metrics.hpp"
#include "qsession/projection/settings.hpp"
#include "redis/connection.hpp"

namespace qsp {

/// The adapters' own settings, derived from the projection's (one source of
/// topic, namespace and key prefix).
kafka::dispatch_log_consumer_config kafka_config_of(const projection_settings& s);

/// What a start logs as warnings about the settings' security: a server
/// certificate's name left unchecked (redis.tls-verify-hostname=false with
/// redis.tls; librdkafka's ssl.endpoint.identification.algorithm=none).
std::vector<std::string> security_warnings(const projection_settings& s);
redis::settings redis_config_of(const projection_settings& s);

struct real_ports_options {
  /// Receives the adapters' own counters (kafka_client_errors); may be null.
  std::shared_ptr<metrics> stats;
  /// librdkafka's log lines and the consumer's client errors; null: stderr.
  log_ptr logs;
  /// Held by the factory, every Redis connection and every librdkafka
  /// handle until released (see projection_options::io).
  std::shared_ptr<void> io;
  /// Also told of every client-level Kafka error (by name).
  std::function<void(const std::string&)> on_client_error;
};

std::shared_ptr<port_factory> make_real_ports(const projection_settings& s,
                                              real_ports_options opts = {});

} // namespace qsp
