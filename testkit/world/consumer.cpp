#include "testkit/world/consumer.hpp"

#include <algorithm>

#include "testkit/world/world.hpp"

namespace qsp::test {

using sim::failure;
using sim::lock;

fake_partition_reader::fake_partition_reader(std::shared_ptr<fake_world> w, int32_t partition,
                                             int64_t start, int32_t start_epoch,
                                             int64_t incarnation)
  : w_(std::move(w)), partition_(partition), pos_(start), epoch_(start_epoch) {
  incarnation_ = incarnation >= 0 ? static_cast<uint64_t>(incarnation) : w_->topic_incarnation;
}

caf::expected<void> fake_partition_reader::poll(size_t max, std::vector<log_record>& out,
                                                int64_t& passed) {
  lock g{w_->mtx};
  ++w_->calls.poll;
  auto where = "topic " + w_->topic + " partition " + std::to_string(partition_);
  if ((w_->poll_fault_partition < 0 || w_->poll_fault_partition == partition_)
      && w_->poll_fault.fire())
    return failure(w_->poll_fault, ec::kafka_read, where);
  if (incarnation_ != w_->topic_incarnation)
    return caf::make_error(ec::kafka_read, "fake: " + where
                                             + ": the topic was recreated (unknown topic id)");
  if (w_->broker_down)
    return {}; // librdkafka retries in the background: nothing arrives
  auto& fp = w_->part(partition_);
  // KIP-320, as librdkafka validates a position after a leader change: the
  // log's end offset for the position's epoch lies below the position.
  {
    std::string why;
    if (pos_ > fp.end()) {
      why = "position " + std::to_string(pos_) + " is past the log end "
            + std::to_string(fp.end()) + " of leader epoch " + std::to_string(fp.leader_epoch);
    } else if (epoch_ >= 0 && pos_ > 0) {
      if (auto end = fp.end_offset_for_epoch(epoch_); end < pos_)
        why = "offset " + std::to_string(pos_) + " of leader epoch " + std::to_string(epoch_)
              + " lies past that epoch's end offset " + std::to_string(end)
              + " in the log of leader epoch " + std::to_string(fp.leader_epoch);
    }
    if (!why.empty())
      return caf::make_error(
        ec::refused, "partition " + std::to_string(partition_)
                       + ": field leader_epoch: the log was truncated below the position (fake: "
                       + where + ": " + why
                       + ", unclean leader election): records already projected are gone and "
                         "their offsets may be reused; rebuild under a new namespace "
                         "(OPERATIONS.md, \"A truncated log\")");
  }
  if (pos_ < fp.low)
    return caf::make_error(ec::kafka_read, "fake: topic " + w_->topic + " partition "
                                             + std::to_string(partition_) + " offset "
                                             + std::to_string(pos_)
                                             + ": offset out of range (deleted by retention)");
  auto stable = std::min(fp.lso(), w_->visible_end(partition_));
  size_t delivered = 0;
  while (pos_ < stable && delivered < max) {
    auto& e = fp.log[static_cast<size_t>(pos_)];
    if (e.kind == entry_kind::data) {
      out.push_back(log_record{e.offset, e.value, 1700000000000 + e.offset, e.epoch});
      ++delivered;
    }
    epoch_ = e.epoch;
    ++pos_;
  }
  // Partition EOF: once per position reached, if the batch had room for it.
  if (pos_ >= stable && delivered < max && eof_reported_ != pos_) {
    eof_reported_ = pos_;
    if (pos_ > passed)
      passed = pos_;
  }
  w_->events.push_back(fake_event{fake_event::kind::fetched, partition_, pos_});
  return {};
}

int32_t fake_partition_reader::position_epoch(int64_t offset) {
  lock g{w_->mtx};
  auto& fp = w_->part(partition_);
  if (offset != pos_ || pos_ <= 0 || pos_ > fp.end())
    return -1;
  return fp.log[static_cast<size_t>(pos_ - 1)].epoch;
}

void fake_partition_reader::on_data(std::function<void()> wake) {
  lock g{w_->mtx};
  wake_ = std::move(wake);
}

void fake_partition_reader::fire() {
  if (wake_) {
    ++w_->calls.wakes;
    wake_();
  }
}

caf::error fake_dispatch_log::check_start(int32_t p, int64_t start) const {
  if (p < 0 || p >= w_->partition_count())
    return caf::make_error(ec::kafka_unavailable,
                           "fake: topic " + w_->topic + " has no partition " + std::to_string(p));
  // Like rd_kafka_query_watermark_offsets under read_committed: the LSO as high.
  auto low = w_->part(p).low, high = w_->part(p).lso();
  if (start < low || start > high)
    return caf::make_error(ec::refused, "partition " + std::to_string(p)
                                          + ": field start: stored \"" + std::to_string(start)
                                          + "\", observed \"low=" + std::to_string(low)
                                          + ",high=" + std::to_string(high)
                                          + "\": start outside the retained range");
  return caf::none;
}

caf::expected<void> fake_dispatch_log::start(const std::map<int32_t, int64_t>& starts,
                                             const std::map<int32_t, int32_t>& epochs) {
  lock g{w_->mtx};
  ++w_->calls.start;
  return assign(starts, epochs, true);
}

caf::expected<void> fake_dispatch_log::add(const std::map<int32_t, int64_t>& starts,
                                           const std::map<int32_t, int32_t>& epochs) {
  lock g{w_->mtx};
  ++w_->calls.adds;
  return assign(starts, epochs, false);
}

caf::expected<void> fake_dispatch_log::assign(const std::map<int32_t, int64_t>& starts,
                                              const std::map<int32_t, int32_t>& epochs,
                                              bool replace) {
  if (w_->broker_down)
    return caf::make_error(ec::kafka_unavailable, "fake: broker down: query watermarks");
  if (w_->start_fault.fire())
    return failure(w_->start_fault, ec::kafka_unavailable, "query watermarks");
  for (auto& [p, start] : starts) {
    if (!replace && starts_.count(p) > 0)
      // As the real consumer answers: a caller's bug, not a broker's state.
      return caf::make_error(ec::invalid_config, "fake: partition " + std::to_string(p)
                                                   + " is already assigned");
    if (auto err = check_start(p, start))
      return err;
  }
  if (replace) {
    starts_.clear();
    epochs_.clear();
    incarnations_.clear();
    readers_.clear();
  }
  for (auto& [p, start] : starts) {
    starts_[p] = start;
    readers_.erase(p);
    epochs_.erase(p);
    incarnations_[p] = w_->topic_incarnation;
    if (auto e = epochs.find(p); e != epochs.end())
      epochs_[p] = e->second;
    // Per partition: several nodes may share the world, and another node's
    // start says nothing about this node's partitions.
    w_->events.push_back(fake_event{fake_event::kind::assigned, p, start});
  }
  return {};
}

caf::expected<void> fake_dispatch_log::remove(const std::vector<int32_t>& partitions) {
  lock g{w_->mtx};
  ++w_->calls.removes;
  for (auto p : partitions) {
    starts_.erase(p);
    epochs_.erase(p);
    incarnations_.erase(p);
    readers_.erase(p);
    last_end_.erase(p);
  }
  return {};
}

std::shared_ptr<partition_reader> fake_dispatch_log::reader(int32_t partition) {
  lock g{w_->mtx};
  ++w_->calls.reader;
  auto s = starts_.find(partition);
  if (s == starts_.end())
    return nullptr;
  auto& r = readers_[partition];
  if (!r) {
    auto e = epochs_.find(partition);
    auto inc = incarnations_.find(partition);
    r = std::make_shared<fake_partition_reader>(
      w_, partition, s->second, e == epochs_.end() ? -1 : e->second,
      inc == incarnations_.end() ? -1 : static_cast<int64_t>(inc->second));
    w_->readers.push_back(r);
  }
  return r;
}

int64_t fake_dispatch_log::log_end(int32_t partition) {
  lock g{w_->mtx};
  if (starts_.count(partition) == 0)
    return -1;
  if (partition >= w_->partition_count())
    return -1;
  // What the fetcher last learnt: nothing new while the broker is down.
  if (w_->broker_down) {
    auto i = last_end_.find(partition);
    return i == last_end_.end() ? -1 : i->second;
  }
  return last_end_[partition] = w_->visible_end(partition);
}

} // namespace qsp::test
