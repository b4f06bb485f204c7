// Shared librdkafka plumbing: settings, handle creation, error mapping.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <librdkafka/rdkafka.h>

#include "caf/expected.hpp"

#include "messages/log.hpp"

namespace qsp::kafka {

/// Connection settings common to every librdkafka handle of the projection.
struct client_settings {
  std::string bootstrap_servers = "127.0.0.1:9092";
  std::string client_id = "qsession-projection";
  /// Extra librdkafka properties (security.protocol, sasl.*, ssl.*, ...).
  std::vector<std::pair<std::string, std::string>> properties;
  int timeout_ms = 10000;
  /// Where librdkafka's own log lines go (its log callback); null: stderr.
  log_ptr logs;
  /// Held by every handle until rd_kafka_destroy returned (the projection's
  /// I/O token: its shutdown waits until all are released).
  std::shared_ptr<void> keepalive;
  /// False while the handle joins no consumer group (static assignment):
  /// librdkafka still keeps a "GroupCoordinator" connection for a consumer
  /// with a group.id, whose failures duplicate the broker connection's own;
  /// they are then logged at debug level and not reported as client errors.
  bool group_in_use = false;
};

/// Hands the handle to the process-wide reaper thread, which calls
/// rd_kafka_destroy (it joins librdkafka's threads and may block for seconds
/// while brokers are unreachable): never on the caller's thread, which may be
/// a CAF scheduler thread.  Handles are destroyed in the order they are
/// handed over.  Anything that must go before the handle (queues, an
/// assignment) has to be released before it is handed over.
struct handle_deleter {
  /// Released only after the handle is destroyed: whatever librdkafka's
  /// callbacks point into (e.g. an error_sink).
  std::shared_ptr<void> keepalive;
  void operator()(rd_kafka_t* rk) const;
};
using handle_ptr = std::unique_ptr<rd_kafka_t, handle_deleter>;

/// Blocks until every handle handed to the reaper so far is destroyed (for
/// tests and an orderly shutdown).  The reaper itself drains and is joined at
/// static destruction.
void drain_reaper();

/// Collects librdkafka's client-level errors (its error_cb: all brokers
/// down, transport, resolve, authentication, ...), which librdkafka never
/// hands out through a consumer poll.  The callback runs on whichever thread
/// polls the handle (and possibly on the reaper's while it closes it); the
/// owner takes the errors out with take().  Bounded: one entry per error code.
class error_sink {
public:
  struct entry {
    rd_kafka_resp_err_t err;
    uint64_t count;         ///< occurrences since the last take()
    std::string last_text;  ///< the latest librdkafka message for it
  };
  void push(rd_kafka_resp_err_t err, const char* reason);
  std::vector<entry> take();

private:
  std::mutex mtx_;
  std::vector<entry> items_;
};

/// A consumer's rebalance callback (librdkafka's rebalance_cb).
using rebalance_fn =
  std::function<void(rd_kafka_t*, rd_kafka_resp_err_t, rd_kafka_topic_partition_list_t*)>;

/// Builds a handle of `type`.  `defaults` go before the settings'
/// properties (an operator may override them); `fixed` are the properties the
/// projection's guarantees depend on: setting one of them in the properties
/// is an ec::invalid_config error naming it.  Property values never appear
/// in error messages (they may be secrets).
/// With `errors`, librdkafka's error_cb feeds it (and the handle keeps it
/// alive until destroyed); without, librdkafka logs such errors itself.
caf::expected<handle_ptr>
make_handle(rd_kafka_type_t type, const client_settings& cfg,
            const std::vector<std::pair<std::string, std::string>>& fixed,
            const std::vector<std::pair<std::string, std::string>>& defaults = {},
            std::shared_ptr<error_sink> errors = nullptr, rebalance_fn on_rebalance = {});

/// Maps a librdkafka error to ec::kafka_unavailable with `what` as context
/// (ec::invalid_config for the authorization and authentication errors, see
/// is_auth_error).
caf::error kafka_error(rd_kafka_resp_err_t err, const std::string& what);

/// True for errors an operator must fix (credentials, ACLs): authentication
/// and topic, group, cluster or transactional-id authorization failures.
bool is_auth_error(rd_kafka_resp_err_t err);

/// Kafka's text form of a topic id (Uuid.toString()).
std::string topic_id_text(const rd_kafka_Uuid_t* id);

} // namespace qsp::kafka
