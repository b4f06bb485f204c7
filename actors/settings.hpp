// The projection's typed settings, parsed once (app/ or the embedding host)
// and validated before anything is spawned.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "caf/error.hpp"
#include "caf/timespan.hpp"

namespace qsp {

struct projection_settings {
  std::string topic;               ///< projection.dispatch-topic
  int32_t partition_count = 0;     ///< projection.partition-count
  std::string ns = "session_projection";  ///< projection.namespace
  std::string convs_prefix = "convs:";    ///< projection.convs-prefix
  size_t max_batch_records = 5000;        ///< per consumer batch
  /// Batches a consumer may have sent to the writer and not yet seen
  /// confirmed: it decodes the next one while the writer writes.
  size_t max_batches_in_flight = 2;
  caf::timespan idle_poll = std::chrono::milliseconds(5);
  caf::timespan backoff_initial = std::chrono::milliseconds(200);
  caf::timespan backoff_max = std::chrono::seconds(30);
  caf::timespan progress_interval = std::chrono::seconds(5);
  /// The run-time identity fence (DESIGN.md §4): the broker identity is
  /// re-checked at least this often while running, idle or not.
  caf::timespan identity_check_interval = std::chrono::seconds(1);
  /// While checkpoints wait for the fence, checks run back to back but at
  /// most one per this gap (bounds the metadata requests to the broker).
  caf::timespan identity_check_min_gap = std::chrono::milliseconds(50);
  /// Deadline of the pipelined ZADD replies (redis.command-timeout): a batch
  /// unconfirmed for longer fails the writer (dirty, restart).
  caf::timespan write_timeout = std::chrono::seconds(5);
  /// Start even though Redis may evict keys (maxmemory-policy other than
  /// noeviction): redis.allow-eviction, for operators who know their headroom.
  bool allow_eviction = false;

  /// An error naming the key and what is expected, or none.
  caf::error validate() const;
};

} // namespace qsp
