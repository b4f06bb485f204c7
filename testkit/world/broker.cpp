#include "testkit/world/broker.hpp"

#include <algorithm>
#include <stdexcept>

#include "testkit/world/consumer.hpp"
#include "testkit/world/world.hpp"

namespace qsp::test {

using sim::failure;
using sim::lock;

std::string to_string(entry_kind k) {
  switch (k) {
    case entry_kind::data: return "data";
    case entry_kind::marker: return "marker";
    case entry_kind::aborted: return "aborted";
  }
  return "?";
}

int64_t fake_partition::lso() const {
  int64_t result = end();
  for (auto& [txn, first] : open)
    result = std::min(result, first);
  return result;
}

int64_t fake_partition::end_offset_for_epoch(int32_t epoch) const {
  // Epochs never decrease along the log (appends take the current one).
  auto i = std::partition_point(log.begin(), log.end(),
                                [epoch](const log_entry& e) { return e.epoch <= epoch; });
  return static_cast<int64_t>(i - log.begin());
}

// -- the broker ------------------------------------------------------------------

simulated_broker::simulated_broker(int32_t partition_count)
  : topic_id(default_topic_id()), partitions(static_cast<size_t>(partition_count)) {}

std::string simulated_broker::default_topic_id(uint64_t n) {
  return core::kafka_uuid_text(0x0123456789abcdefULL ^ n, 0xfedcba9876543210ULL + n);
}

fake_partition& simulated_broker::part(int32_t p) {
  if (p < 0 || p >= partition_count())
    throw std::out_of_range("fake_world: no partition " + std::to_string(p));
  return partitions[static_cast<size_t>(p)];
}

const fake_partition& simulated_broker::part(int32_t p) const {
  return const_cast<simulated_broker*>(this)->part(p);
}

log_entry& simulated_broker::push_entry(int32_t p, std::string value, entry_kind kind, int64_t txn) {
  auto& fp = part(p);
  fp.log.push_back(log_entry{fp.end(), std::move(value), kind, txn, fp.leader_epoch,
                             now_ms ? now_ms() : 0});
  return fp.log.back();
}

int64_t simulated_broker::append_raw(int32_t p, std::string value) {
  lock g{mtx};
  auto off = push_entry(p, std::move(value), entry_kind::data, 0).offset;
  wake(p);
  return off;
}

void simulated_broker::wake(int32_t p) {
  lock g{mtx};
  for (auto& weak : readers)
    if (auto r = weak.lock(); r && r->partition() == p)
      r->fire();
}

int64_t simulated_broker::append(int32_t p, const core::dispatch& d) {
  return append_raw(p, core::encode_json(d));
}

int64_t simulated_broker::append(int32_t p, std::string conversation, int64_t created_at,
                           std::vector<std::string> recipients) {
  return append(p, core::dispatch{std::move(conversation), created_at, std::move(recipients)});
}

int64_t simulated_broker::append_marker(int32_t p) {
  lock g{mtx};
  auto off = push_entry(p, {}, entry_kind::marker, 0).offset;
  wake(p);
  return off;
}

int64_t simulated_broker::begin_txn(int32_t p) {
  lock g{mtx};
  auto& fp = part(p);
  auto id = ++last_txn;
  fp.open.emplace(id, fp.end());
  return id;
}

int64_t simulated_broker::append_txn(int32_t p, int64_t txn, const core::dispatch& d) {
  lock g{mtx};
  auto& fp = part(p);
  if (fp.open.count(txn) == 0)
    throw std::logic_error("fake_world: transaction not open");
  return push_entry(p, core::encode_json(d), entry_kind::data, txn).offset;
}

int64_t simulated_broker::commit_txn(int32_t p, int64_t txn) {
  lock g{mtx};
  auto& fp = part(p);
  if (fp.open.erase(txn) == 0)
    throw std::logic_error("fake_world: transaction not open");
  auto off = push_entry(p, {}, entry_kind::marker, txn).offset;
  wake(p);
  return off;
}

int64_t simulated_broker::abort_txn(int32_t p, int64_t txn) {
  lock g{mtx};
  auto& fp = part(p);
  if (fp.open.erase(txn) == 0)
    throw std::logic_error("fake_world: transaction not open");
  for (auto& e : fp.log)
    if (e.txn == txn && e.kind == entry_kind::data)
      e.kind = entry_kind::aborted;
  auto off = push_entry(p, {}, entry_kind::marker, txn).offset;
  wake(p);
  return off;
}

void simulated_broker::truncate(int32_t p, int64_t low) {
  lock g{mtx};
  auto& fp = part(p);
  fp.low = std::min(std::max(fp.low, low), fp.end());
}

void simulated_broker::unclean_truncate(int32_t p, int64_t to) {
  lock g{mtx};
  auto& fp = part(p);
  to = std::min(std::max<int64_t>(to, 0), fp.end());
  fp.log.resize(static_cast<size_t>(to));
  fp.low = std::min(fp.low, to);
  for (auto i = fp.open.begin(); i != fp.open.end();)
    i = i->second >= to ? fp.open.erase(i) : std::next(i);
  ++fp.leader_epoch;
  // librdkafka learns of the new leader and wakes the fetcher's queue.
  wake(p);
}

void simulated_broker::recreate_topic() {
  lock g{mtx};
  auto n = static_cast<uint64_t>(partitions.size());
  ++topic_incarnation;
  // A new id: default_topic_id(1) is the first topic's; skip any in use.
  for (uint64_t k = topic_incarnation + 1;; ++k)
    if (auto id = default_topic_id(k); id != topic_id) {
      topic_id = id;
      break;
    }
  partitions.assign(static_cast<size_t>(n), fake_partition{});
  for (int32_t p = 0; p < partition_count(); ++p)
    wake(p);
}

void simulated_broker::add_partitions(int32_t n) {
  lock g{mtx};
  if (n > 0)
    partitions.resize(partitions.size() + static_cast<size_t>(n));
}

void simulated_broker::broker_errors(int64_t n) {
  lock g{mtx};
  inspect_fault.arm(n);
  identity_fault.arm(n);
  poll_fault.arm(n);
}

int64_t simulated_broker::visible_end(int32_t p) const {
  lock g{mtx};
  auto& fp = part(p);
  if (broker_delay_ms <= 0 || !now_ms)
    return fp.end();
  auto now = now_ms();
  // Appends come in time order: the visible ones are a prefix.
  auto i = std::partition_point(fp.log.begin(), fp.log.end(), [&](const log_entry& e) {
    return e.appended_ms + broker_delay_ms <= now;
  });
  return static_cast<int64_t>(i - fp.log.begin());
}

core::watermarks simulated_broker::marks(int32_t p) const {
  lock g{mtx};
  auto& fp = part(p);
  return core::watermarks{fp.low, fp.lso()};
}

std::map<int32_t, int64_t> simulated_broker::lsos() const {
  lock g{mtx};
  std::map<int32_t, int64_t> out;
  for (int32_t p = 0; p < partition_count(); ++p)
    out[p] = lso(p);
  return out;
}

core::identity simulated_broker::identity() const {
  lock g{mtx};
  return core::identity{topic, partition_count(), cluster_id, topic_id};
}

void simulated_broker::maybe_change_identity() {
  if (change_identity_after < 0)
    return;
  if (change_identity_after == 0) {
    if (!changed_topic_id.empty())
      topic_id = changed_topic_id;
    if (!changed_cluster_id.empty())
      cluster_id = changed_cluster_id;
    change_identity_after = -1;
    return;
  }
  --change_identity_after;
}

// -- broker inspector --------------------------------------------------------------

template <class Read>
caf::expected<broker_state> simulated_broker::timed_identity_read(Read read) {
  lock g{mtx};
  auto n = ++identity_reads;
  events.push_back(fake_event{fake_event::kind::identity_start, -1, n});
  caf::expected<broker_state> answer = read();
  // The read is under way: the world may move on before the answer arrives.
  if (during_identity && !in_during_identity_) {
    auto hook = during_identity;
    in_during_identity_ = true;
    hook();
    in_during_identity_ = false;
  }
  events.push_back(
    fake_event{answer ? fake_event::kind::identity : fake_event::kind::identity_failed, -1, n});
  return answer;
}

caf::expected<broker_state> fake_broker_inspector::inspect(const std::string& topic) {
  lock g{w_->mtx};
  ++w_->calls.inspect;
  w_->maybe_change_identity();
  auto answer = w_->timed_identity_read([&]() -> caf::expected<broker_state> {
    if (w_->broker_down)
      return caf::make_error(ec::kafka_unavailable, "fake: broker down: describe topic " + topic);
    if (w_->inspect_fault.fire())
      return failure(w_->inspect_fault, ec::kafka_unavailable, "describe topic " + topic);
    if (topic != w_->topic) // like kafka/admin.cpp: maybe still propagating, transient
      return caf::make_error(ec::kafka_unavailable,
                             "topic " + topic + " does not exist on the broker");
    broker_state st;
    st.cluster_id = w_->cluster_id;
    st.topic_id = w_->topic_id;
    st.partition_count =
      w_->reported_partition_count >= 0 ? w_->reported_partition_count : w_->partition_count();
    st.retention_ms = w_->retention_ms;
    st.cleanup_policy = w_->cleanup_policy;
    for (int32_t p = 0; p < w_->partition_count(); ++p) {
      st.marks.push_back(w_->marks(p));
      st.true_high.push_back(w_->end(p));
    }
    return st;
  });
  if (answer && w_->on_inspect)
    w_->on_inspect();
  return answer;
}

caf::expected<broker_state> fake_broker_inspector::identity(const std::string& topic) {
  lock g{w_->mtx};
  ++w_->calls.identity;
  w_->maybe_change_identity();
  return w_->timed_identity_read([&]() -> caf::expected<broker_state> {
    if (w_->broker_down)
      return caf::make_error(ec::kafka_unavailable, "fake: broker down: describe cluster");
    if (w_->identity_fault.fire())
      return failure(w_->identity_fault, ec::kafka_unavailable, "describe cluster");
    if (topic != w_->topic) // like kafka/admin.cpp: maybe still propagating, transient
      return caf::make_error(ec::kafka_unavailable,
                             "topic " + topic + " does not exist on the broker");
    broker_state st;
    st.cluster_id = w_->cluster_id;
    st.topic_id = w_->topic_id;
    st.partition_count =
      w_->reported_partition_count >= 0 ? w_->reported_partition_count : w_->partition_count();
    return st;
  });
}

} // namespace qsp::test
