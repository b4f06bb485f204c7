// RdkafkaDispatchLogConsumer: reads the committed dispatch log with a static
// assignment and an explicit start per partition.  Reusable: it knows nothing
// about checkpoints (DESIGN.md §2).
//
// - assign(), never subscribe(); auto.offset.reset=error; no commits ever;
//   isolation.level=read_committed; its own client id and group id (identity
//   only).
// - readiness check: every start must lie in the broker's [low, high].
// - per-partition queues, so each partition is read in order by its own reader.
// - progress past undelivered offsets (markers, aborted records) comes from
//   the partition-EOF event's offset.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "kafka/client.hpp"
#include "ports/ports.hpp"

namespace qsp::kafka {

struct dispatch_log_consumer_config {
  client_settings client;
  std::string group_id = "qsession-projection";
  std::string topic;
  /// Bound on what librdkafka prefetches per partition (memory cap).
  int queued_max_kbytes = 16384;
  int fetch_max_bytes = 8 * 1024 * 1024;
  /// Re-check of a full prefetch queue (librdkafka's default is 1000 ms).
  int fetch_queue_backoff_ms = 5;
};

class dispatch_log_consumer final : public dispatch_log,
                                    public std::enable_shared_from_this<dispatch_log_consumer> {
public:
  static caf::expected<std::shared_ptr<dispatch_log_consumer>>
  make(dispatch_log_consumer_config cfg);

  ~dispatch_log_consumer() override;

  caf::expected<void> start(const std::map<int32_t, int64_t>& starts) override;
  std::shared_ptr<partition_reader> reader(int32_t partition) override;

  /// Drains client-level events (errors not tied to a partition).
  caf::error poll_events();

private:
  explicit dispatch_log_consumer(dispatch_log_consumer_config cfg, handle_ptr rk);

  dispatch_log_consumer_config cfg_;
  handle_ptr rk_;
  bool assigned_ = false;
  /// Per-partition queues, detached from the consumer queue *before* assign:
  /// otherwise records fetched in between land on the consumer queue.
  std::map<int32_t, rd_kafka_queue_t*> queues_;
};

} // namespace qsp::kafka
