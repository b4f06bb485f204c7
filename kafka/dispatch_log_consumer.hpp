// RdkafkaDispatchLogConsumer: reads the committed dispatch log with a static
// assignment and an explicit start per partition.  Reusable: it knows nothing
// about checkpoints (docs/DESIGN.md §2).
//
// - assign(), never subscribe(); auto.offset.reset=error; no commits ever;
//   isolation.level=read_committed; its own client id and group id (identity
//   only).
// - readiness check: every start must lie in the broker's [low, high].
// - per-partition queues, so each partition is read in order by its own reader.
// - progress past undelivered offsets (markers, aborted records) comes from
//   the partition-EOF event's offset.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "kafka/client.hpp"
#include "ports/ports.hpp"

namespace qsp::kafka {

struct dispatch_log_consumer_config {
  client_settings client;
  std::string group_id = "qsession-projection";
  std::string topic;
  /// Bound on what librdkafka prefetches per partition (memory cap).
  int queued_max_kbytes = 4096;
  int fetch_max_bytes = 8 * 1024 * 1024;
  /// Re-check of a full prefetch queue (librdkafka's default is 1000 ms).
  int fetch_queue_backoff_ms = 20;
  /// Called (from whichever thread polls) for every client-level error
  /// librdkafka reports, not tied to a record: all brokers down, transport,
  /// resolve, authentication, ... `error_name` is librdkafka's name for it
  /// (e.g. "_ALL_BROKERS_DOWN").  For counting; must not block.
  std::function<void(const std::string& error_name)> on_client_error;
  /// Minimum interval between two log lines for the same (non-final) client
  /// error name.
  std::chrono::milliseconds client_error_log_interval{5000};
};

class dispatch_log_consumer final : public dispatch_log,
                                    public std::enable_shared_from_this<dispatch_log_consumer> {
public:
  static caf::expected<std::shared_ptr<dispatch_log_consumer>>
  make(dispatch_log_consumer_config cfg);

  ~dispatch_log_consumer() override;

  /// The assignment becomes exactly `starts` (librdkafka's incremental
  /// assign on what is assigned now, normally nothing: one code path with
  /// add()).
  caf::expected<void> start(const std::map<int32_t, int64_t>& starts,
                            const std::map<int32_t, int32_t>& epochs = {}) override;
  /// Incremental assign of `starts` after the same checks as start(); a
  /// partition already assigned is ec::invalid_config, and nothing is
  /// assigned then.  A failed epoch seek takes the new partitions off again.
  caf::expected<void> add(const std::map<int32_t, int64_t>& starts,
                          const std::map<int32_t, int32_t>& epochs = {}) override;
  /// Incremental unassign.  The partitions' queues stay (readers made before
  /// may outlive the removal; a later add() reuses the queue).
  caf::expected<void> remove(const std::vector<int32_t>& partitions) override;
  /// start() and add() waiting on the broker (the range check's ListOffsets,
  /// the epoch seek) return ec::shutting_down at once, and so does every
  /// later start() or add().
  void interrupt() override;
  /// A reader of an assigned partition; null for any other.
  std::shared_ptr<partition_reader> reader(int32_t partition) override;
  /// The leader epoch of the application position (the last record or
  /// transaction marker consumed) of `partition` if that position is
  /// exactly `offset`, else -1.
  int32_t position_epoch(int32_t partition, int64_t offset);
  /// librdkafka's cached high watermark of the partition, updated by every
  /// fetch response (rd_kafka_get_watermark_offsets: no request).  Under
  /// read_committed librdkafka caches the last stable offset too, but hands
  /// it out only in its statistics JSON (docs/OPERATIONS.md, Monitor).
  int64_t log_end(int32_t partition) override;

  /// Drains client-level events (errors not tied to a partition).  Final:
  /// authentication/authorization failures and certificate problems
  /// (ec::invalid_config), librdkafka's fatal error and a lost position
  /// (ec::kafka_read).  Anything else (brokers down, transport, resolve) is
  /// retried by librdkafka itself: counted (on_client_error), logged at most
  /// once per client_error_log_interval per error name, and not returned
  /// (the projection only lags).
  caf::error poll_events();

  /// One partition's queue, detached from the consumer queue, and which
  /// reader's wake-up callback is registered on it (successive readers of a
  /// partition removed and added again share the queue).
  struct partition_queue {
    rd_kafka_queue_t* q = nullptr;
    std::mutex mtx;               ///< orders the readers' (un)registrations
    const void* waker = nullptr;  ///< the reader whose callback is registered
    ~partition_queue() {
      if (q != nullptr)
        rd_kafka_queue_destroy(q);
    }
  };

private:
  dispatch_log_consumer(dispatch_log_consumer_config cfg, handle_ptr rk,
                        std::shared_ptr<error_sink> errors);
  /// start() (`replace`: what is assigned now goes first) and add().
  caf::expected<void> assign(const std::map<int32_t, int64_t>& starts,
                             const std::map<int32_t, int32_t>& epochs, bool replace);
  /// Readiness: every start lies in the broker's [low, high] (high: the
  /// last stable offset) right now; ec::refused naming the partition and
  /// the range otherwise.
  caf::error check_ranges(const std::map<int32_t, int64_t>& starts);
  /// KIP-320: seeks to the starts with their stored epochs.
  caf::error seek_with_epochs(const std::map<int32_t, int64_t>& starts,
                              const std::map<int32_t, int32_t>& epochs);
  /// Incremental unassign of `partitions` (all assigned) and bookkeeping.
  caf::error unassign(const std::vector<int32_t>& partitions, const std::string& call);
  /// One client-level error (`count` occurrences): counted, and either made
  /// the final `result` or logged (rate-limited).
  void client_error(rd_kafka_resp_err_t err, const std::string& text, uint64_t count,
                    caf::error& result);

  dispatch_log_consumer_config cfg_;
  handle_ptr rk_;
  std::shared_ptr<error_sink> errors_;  ///< fed by librdkafka's error_cb
  interrupter waits_;
  /// Guards queues_ and assigned_: start(), add() and remove() change them
  /// on the caller's thread while reader() and log_end() read them on others.
  std::mutex mtx_;
  /// Per-partition queues, detached from the consumer queue *before* assign:
  /// otherwise records fetched in between land on the consumer queue.  Kept
  /// after a partition's removal.
  std::map<int32_t, std::shared_ptr<partition_queue>> queues_;
  std::set<int32_t> assigned_;
  /// Rate limit of the client-error log lines: error name -> last logged.
  std::mutex log_mtx_;
  std::map<std::string, std::chrono::steady_clock::time_point> last_logged_;
  std::map<std::string, uint64_t> suppressed_;
};

} // namespace qsp::kafka
