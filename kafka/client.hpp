// Shared librdkafka plumbing: settings, handle creation, error mapping.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
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
/// The same for an rd_kafka_error_t (destroyed here), its text in
/// parentheses after `what`; none for nullptr.
caf::error kafka_error(rd_kafka_error_t* err, const std::string& what);

/// True for errors an operator must fix (credentials, ACLs): authentication
/// and topic, group, cluster or transactional-id authorization failures.
bool is_auth_error(rd_kafka_resp_err_t err);

/// Kafka's text form of a topic id (Uuid.toString()).
std::string topic_id_text(const rd_kafka_Uuid_t* id);

// -- waiting for the broker, interruptibly -----------------------------------

struct queue_deleter {
  void operator()(rd_kafka_queue_t* q) const { rd_kafka_queue_destroy(q); }
};
struct event_deleter {
  void operator()(rd_kafka_event_t* e) const { rd_kafka_event_destroy(e); }
};
struct options_deleter {
  void operator()(rd_kafka_AdminOptions_t* o) const { rd_kafka_AdminOptions_destroy(o); }
};
using queue_ptr = std::unique_ptr<rd_kafka_queue_t, queue_deleter>;
using event_ptr = std::unique_ptr<rd_kafka_event_t, event_deleter>;
using options_ptr = std::unique_ptr<rd_kafka_AdminOptions_t, options_deleter>;

/// The kill switch of an adapter's waits for the broker.  librdkafka's
/// synchronous calls (rd_kafka_query_watermark_offsets, rd_kafka_clusterid,
/// ...) cannot be cut short, so the adapters issue asynchronous requests
/// whose results arrive on a queue of their own and wait for them here:
/// interrupt() wakes every wait in progress at once (rd_kafka_queue_yield on
/// the queue it polls) and makes every later one return at once.
class interrupter {
public:
  /// From any thread.
  void interrupt();
  bool interrupted() const;
  /// The next event on `q` within `timeout_ms`; null when the time is up or
  /// when interrupted (interrupted() tells which).  `q` must stay alive
  /// until this returns (the caller owns it).
  event_ptr poll(rd_kafka_queue_t* q, int timeout_ms);

private:
  mutable std::mutex mtx_;
  bool interrupted_ = false;
  /// The queues polled right now (several threads may wait at once).
  std::vector<rd_kafka_queue_t*> waiting_;
};

/// Admin options of `op` with `timeout_ms` as the request timeout.
options_ptr make_admin_options(rd_kafka_t* rk, rd_kafka_admin_op_t op, int timeout_ms);

/// An authorization/authentication failure (ec::invalid_config) of `what`,
/// naming what is missing: `permission` (the ACL the request needs) or the
/// A client-level error (error_cb) that retrying cannot fix, as an
/// ec::invalid_config error of `what`: refused credentials or a missing ACL
/// (auth_error with `permission`), a certificate that does not verify (the
/// CA, or a broker certificate for another name: endpoint identification),
/// TLS against a listener that speaks plaintext.  caf::none for the rest
/// (transport, resolve, brokers down: transient).
caf::error final_client_error(rd_kafka_resp_err_t err, const std::string& text,
                              const std::string& what, const std::string& permission);

/// The ACL the node needs for a topic's metadata, fetch and offsets: Read
/// (which implies Describe), named as docs/OPERATIONS.md lists it.
std::string read_permission(const std::string& topic);
/// The ACL the dispatch consumer needs on its group (coordinator lookup).
std::string group_permission(const std::string& group);

/// credentials.
caf::error auth_error(rd_kafka_resp_err_t code, const std::string& what,
                      const std::string& detail, const std::string& permission);

/// Waits (through `waits`) for the result event of an admin request issued
/// with `timeout_ms` on `q`: ec::kafka_unavailable when it does not come
/// within `timeout_ms` + 2 s or carries an error (an authorization failure:
/// auth_error with `permission`), ec::shutting_down when interrupted.
caf::expected<event_ptr> await_result(interrupter& waits, rd_kafka_queue_t* q, int timeout_ms,
                                      const std::string& what, const std::string& permission);

/// One ListOffsets question: which offset (earliest, latest) under which
/// isolation level.
struct offset_query {
  rd_kafka_OffsetSpec_t spec;
  rd_kafka_IsolationLevel_t isolation;
};

/// ListOffsets (the admin API, interruptible): for each of `queries`, the
/// offset it asks for of each of `partitions` of `topic`.  The queries are
/// in flight together (one round trip: a consumer's connection answers
/// them only after its fetch in flight, up to fetch.wait.max.ms).  `what`
/// names the call in errors ("list offsets of T"); a partition's own error
/// names the partition, and so does an offset missing from an answer.
caf::expected<std::vector<std::map<int32_t, int64_t>>>
list_offsets(rd_kafka_t* rk, interrupter& waits, int timeout_ms, const std::string& what,
             const std::string& topic, const std::vector<int32_t>& partitions,
             const std::vector<offset_query>& queries);

} // namespace qsp::kafka
