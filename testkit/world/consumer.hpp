// The simulated broker's consumer port: a static assignment with explicit
// start offsets (fake_dispatch_log) and one reader per assigned partition
// (fake_partition_reader), over the broker room (broker.hpp).
//
// Fidelity notes:
// - A partition reader delivers committed data records only (markers and
//   aborted records are skipped), at most `max` per poll, never past the LSO,
//   and reports partition EOF (`passed` = LSO) once per position reached, in a
//   poll that still had room (librdkafka puts the EOF event in the batch).
//   Like librdkafka's partition queues it calls the reader's data callback
//   (on_data) when records or an EOF event become available to it.
// - fake_dispatch_log::start checks [low, high] with the LSO as high, as
//   rd_kafka_query_watermark_offsets does under read_committed.
// - A reader validates its position's leader epoch as librdkafka does after
//   a leader change (KIP-320, see broker.hpp) and fails every poll once the
//   topic was recreated.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "testkit/world/common.hpp"

namespace qsp::test {

class fake_partition_reader final : public partition_reader {
public:
  /// `start_epoch`: the stored leader epoch of `start` (-1: none), validated
  /// on the first poll; `incarnation`: the topic's (fake_world::topic_incarnation)
  /// when the partition was assigned (-1: now).
  fake_partition_reader(std::shared_ptr<fake_world> w, int32_t partition, int64_t start,
                        int32_t start_epoch = -1, int64_t incarnation = -1);
  caf::expected<void> poll(size_t max, std::vector<log_record>& out, int64_t& passed) override;
  void on_data(std::function<void()> wake) override;
  int32_t position_epoch(int64_t offset) override;
  int64_t position() const { return pos_; }
  int32_t partition() const { return partition_; }
  /// Calls the data callback, if any (the world's lock is held).
  void fire();

private:
  std::function<void()> wake_;
  std::shared_ptr<fake_world> w_;
  int32_t partition_;
  int64_t pos_;
  int64_t eof_reported_ = -1;
  /// The leader epoch of the position: of the last entry read below it, or
  /// the stored epoch it was started with; -1 unknown (not validated).
  int32_t epoch_ = -1;
  uint64_t incarnation_ = 0;
};

class fake_dispatch_log final : public dispatch_log {
public:
  explicit fake_dispatch_log(std::shared_ptr<fake_world> w) : w_(std::move(w)) {}
  caf::expected<void> start(const std::map<int32_t, int64_t>& starts,
                            const std::map<int32_t, int32_t>& epochs = {}) override;
  /// Incremental assignment: the same checks per partition as start().
  caf::expected<void> add(const std::map<int32_t, int64_t>& starts,
                          const std::map<int32_t, int32_t>& epochs = {}) override;
  caf::expected<void> remove(const std::vector<int32_t>& partitions) override;
  /// nullptr before start() or for a partition start() did not assign.
  std::shared_ptr<partition_reader> reader(int32_t partition) override;
  /// The high watermark (end of the log, open transactions included) of an
  /// assigned partition, always current: librdkafka's fetcher keeps its
  /// cached value fresh in the background, whatever the application polls.
  int64_t log_end(int32_t partition) override;
  const std::map<int32_t, int64_t>& starts() const { return starts_; }
  /// The stored leader epochs the last start() was given to validate.
  const std::map<int32_t, int32_t>& epochs() const { return epochs_; }

private:
  /// The [low, high] check of a start (the caller holds the lock).
  caf::error check_start(int32_t p, int64_t start) const;
  /// start() (replace: the assignment becomes `starts`) and add() (the
  /// partitions join it), under the caller's lock.
  caf::expected<void> assign(const std::map<int32_t, int64_t>& starts,
                             const std::map<int32_t, int32_t>& epochs, bool replace);
  std::shared_ptr<fake_world> w_;
  std::map<int32_t, int64_t> starts_;
  std::map<int32_t, int32_t> epochs_;
  std::map<int32_t, uint64_t> incarnations_;  ///< the topic's when assigned
  std::map<int32_t, std::shared_ptr<fake_partition_reader>> readers_;
  std::map<int32_t, int64_t> last_end_;  ///< log_end as last learnt (broker down)
};

} // namespace qsp::test
