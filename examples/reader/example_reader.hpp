// A dispatch-log reader as a host team would write it: plain librdkafka (its
// C API) behind the projection's public reader port
// (qsession/projection/reader.hpp, docs/EMBEDDING.md §8), nothing of the
// product's internals.  Static assignment with explicit starts, the range
// check, committed records only, per-partition queues, KIP-320 validation of
// a start with a stored epoch, incremental add/remove, named errors, and an
// interrupt that ends every wait.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <qsession/projection/reader.hpp>

namespace example {

struct reader_config {
  std::string bootstrap_servers;
  std::string topic;
  /// The reader's own client identity (no offsets are ever committed).
  std::string group_id = "example-dispatch-reader";
  std::string client_id = "example-dispatch-reader";
  /// Extra librdkafka properties (security.protocol, sasl.*, ssl.*, ...).
  std::vector<std::pair<std::string, std::string>> properties;
  /// Bound on every wait for the broker (watermarks, the epoch seek).
  std::chrono::milliseconds timeout{10000};
};

/// A new reader (one librdkafka consumer); ec::invalid_config naming the
/// property librdkafka refused.
caf::expected<std::shared_ptr<qsp::dispatch_log>> make_reader(const reader_config& cfg);

} // namespace example
