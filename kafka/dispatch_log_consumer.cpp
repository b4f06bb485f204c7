#include "kafka/dispatch_log_consumer.hpp"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <utility>

#include <spdlog/spdlog.h>

#include "messages/types.hpp"

namespace qsp::kafka {

namespace {

// librdkafka reports errors not tied to a record with a logical offset
// (RD_KAFKA_OFFSET_INVALID, -1001): say nothing rather than print it as one.
std::string offset_text(int64_t offset) {
  return offset >= 0 ? " offset " + std::to_string(offset) : std::string{};
}

// librdkafka reports a failed position validation (KIP-320) with
// auto.offset.reset=error as _AUTO_OFFSET_RESET whose text ends with the
// cause, "Local: Partition log truncation detected"; so does "no epoch found
// less or equal to" the position's epoch.
bool is_log_truncation(const rd_kafka_message_t* m) {
  if (m->err == RD_KAFKA_RESP_ERR__LOG_TRUNCATION)
    return true;
  if (m->err != RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET)
    return false;
  std::string text = rd_kafka_message_errstr(m);
  return text.find(rd_kafka_err2str(RD_KAFKA_RESP_ERR__LOG_TRUNCATION)) != std::string::npos;
}

class rd_partition_reader final : public partition_reader {
public:
  using slot_ptr = std::shared_ptr<dispatch_log_consumer::partition_queue>;

  rd_partition_reader(std::shared_ptr<dispatch_log_consumer> owner, slot_ptr slot,
                      std::string topic, int32_t partition)
    : owner_(std::move(owner)), slot_(std::move(slot)), q_(slot_->q), topic_(std::move(topic)),
      partition_(partition) {}

  ~rd_partition_reader() override {
    if (!wake_)
      return;
    // A reader made after this one (the partition was removed and added
    // again) may have registered its own callback: that one stays.
    std::lock_guard<std::mutex> guard{slot_->mtx};
    if (slot_->waker != this)
      return;
    // Takes the queue's lock: once it returns, the callback neither runs
    // nor will run, so `wake_` may go.
    rd_kafka_queue_cb_event_enable(q_, nullptr, nullptr);
    slot_->waker = nullptr;
  }

  int32_t position_epoch(int64_t offset) override {
    return owner_->position_epoch(partition_, offset);
  }

  void on_data(std::function<void()> wake) override {
    auto next = std::make_unique<std::function<void()>>(std::move(wake));
    std::lock_guard<std::mutex> guard{slot_->mtx};
    // librdkafka calls this from its own thread when an element is enqueued
    // on the (previously empty) partition queue.  Replacing the callback
    // takes the queue's lock: the former one (this reader's or an earlier
    // reader's) neither runs nor will run once this returns.
    rd_kafka_queue_cb_event_enable(q_, &rd_partition_reader::on_event, next.get());
    slot_->waker = this;
    wake_ = std::move(next);
  }

  caf::expected<void> poll(size_t max, std::vector<log_record>& out, int64_t& passed) override {
    return poll_each(
      max,
      [&out](const log_record_view& r) {
        out.push_back(log_record{r.offset, std::string{r.value}, r.timestamp_ms, r.leader_epoch});
        return true;
      },
      passed);
  }

  caf::expected<void> poll_each(size_t max,
                                const std::function<bool(const log_record_view&)>& visit,
                                int64_t& passed) override {
    if (auto err = owner_->poll_events())
      return err;
    buf_.resize(max);
    auto n = rd_kafka_consume_batch_queue(q_, 0, buf_.data(), max);
    if (n < 0)
      return kafka_error(rd_kafka_last_error(), where());
    caf::error failure;
    bool stopped = false;
    for (ssize_t i = 0; i < n; ++i) {
      rd_kafka_message_t* m = buf_[static_cast<size_t>(i)];
      if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        if (m->offset > passed)
          passed = m->offset;
      } else if (m->err) {
        // The log was truncated below this position (KIP-320: the broker's
        // end offset for the position's leader epoch is lower, e.g. after an
        // unclean leader election): records already projected are gone and
        // their offsets may be reused by other records.  Final.
        if (!failure && is_log_truncation(m)) {
          failure = caf::make_error(
            ec::refused, "partition " + std::to_string(partition_) + ": field leader_epoch: "
                           + "the log was truncated below the position ("
                           + rd_kafka_message_errstr(m)
                           + "): records already projected are gone and their offsets may be "
                             "reused; rebuild under a new namespace (OPERATIONS.md, \"A truncated "
                             "log\")");
          rd_kafka_message_destroy(m);
          continue;
        }
        // Not authorized to read the topic: final (an operator must grant
        // it); anything else: transient.
        if (!failure)
          failure = is_auth_error(m->err)
                      ? auth_error(m->err, where() + offset_text(m->offset),
                                   rd_kafka_message_errstr(m), read_permission(topic_))
                      : caf::make_error(ec::kafka_read, where() + offset_text(m->offset) + ": "
                                                          + rd_kafka_message_errstr(m) + " ("
                                                          + rd_kafka_err2name(m->err) + ")");
      } else if (!failure && !stopped) {
        // Straight from librdkafka's buffer: the value is not copied.
        rd_kafka_timestamp_type_t tt;
        stopped = !visit(log_record_view{
          m->offset, std::string_view{static_cast<const char*>(m->payload), m->len},
          rd_kafka_message_timestamp(m, &tt), rd_kafka_message_leader_epoch(m)});
      }
      rd_kafka_message_destroy(m);
    }
    if (failure)
      return failure;
    return {};
  }

private:
  static void on_event(rd_kafka_t*, void* opaque) {
    (*static_cast<std::function<void()>*>(opaque))();
  }

  std::string where() const { return "topic " + topic_ + " partition " + std::to_string(partition_); }

  std::shared_ptr<dispatch_log_consumer> owner_;
  slot_ptr slot_;
  rd_kafka_queue_t* q_;
  std::string topic_;
  int32_t partition_;
  std::vector<rd_kafka_message_t*> buf_;
  std::unique_ptr<std::function<void()>> wake_;
};

} // namespace

dispatch_log_consumer::dispatch_log_consumer(dispatch_log_consumer_config cfg, handle_ptr rk,
                                             std::shared_ptr<error_sink> errors)
  : cfg_(std::move(cfg)), rk_(std::move(rk)), errors_(std::move(errors)) {}

dispatch_log_consumer::~dispatch_log_consumer() {
  // Readers hold this object: none is left.  The queues go before the handle.
  if (rk_ && !assigned_.empty())
    rd_kafka_assign(rk_.get(), nullptr);
  queues_.clear();
}

caf::expected<std::shared_ptr<dispatch_log_consumer>>
dispatch_log_consumer::make(dispatch_log_consumer_config cfg) {
  auto errors = std::make_shared<error_sink>();
  auto rk = make_handle(RD_KAFKA_CONSUMER, cfg.client,
                        {{"group.id", cfg.group_id},
                         {"enable.auto.commit", "false"},
                         {"enable.auto.offset.store", "false"},
                         {"auto.offset.reset", "error"},
                         {"isolation.level", "read_committed"},
                         {"enable.partition.eof", "true"}},
                        // Memory versus throughput: operators may size these.
                        {{"queued.max.messages.kbytes", std::to_string(cfg.queued_max_kbytes)},
                         {"fetch.max.bytes", std::to_string(cfg.fetch_max_bytes)},
                         // librdkafka postpones a partition's next fetch by
                         // this much once its prefetch queue is full (default
                         // 1000 ms): in catch-up the queue drains far sooner,
                         // and one partition starved for most of each second.
                         {"fetch.queue.backoff.ms", std::to_string(cfg.fetch_queue_backoff_ms)},
                         // The broker answers one connection's requests in
                         // order: an idle partition's fetch waits up to this
                         // long for data (default 500 ms), and a partition's
                         // incremental add (its ListOffsets range check and
                         // epoch validation) queues behind it.  A fetch still
                         // returns as soon as a record arrives; idle, it is
                         // ten small requests a second per broker.
                         {"fetch.wait.max.ms", "100"}},
                        errors);
  if (!rk)
    return rk.error();
  rd_kafka_poll_set_consumer(rk->get());
  return std::shared_ptr<dispatch_log_consumer>{
    new dispatch_log_consumer(std::move(cfg), std::move(*rk), std::move(errors))};
}

namespace {

std::string partition_list(const std::vector<int32_t>& ps) {
  std::string out;
  for (auto p : ps)
    out += (out.empty() ? "" : ",") + std::to_string(p);
  return out;
}

struct partition_list_deleter {
  void operator()(rd_kafka_topic_partition_list_t* l) const {
    rd_kafka_topic_partition_list_destroy(l);
  }
};
using partition_list_ptr =
  std::unique_ptr<rd_kafka_topic_partition_list_t, partition_list_deleter>;

caf::error stopping(const std::string& call, const std::string& topic) {
  return caf::make_error(ec::shutting_down,
                         call + " of " + topic + ": interrupted (the consumer is stopping)");
}

} // namespace

caf::expected<void> dispatch_log_consumer::start(const std::map<int32_t, int64_t>& starts,
                                                 const std::map<int32_t, int32_t>& epochs) {
  return assign(starts, epochs, true);
}

caf::expected<void> dispatch_log_consumer::add(const std::map<int32_t, int64_t>& starts,
                                               const std::map<int32_t, int32_t>& epochs) {
  return assign(starts, epochs, false);
}

void dispatch_log_consumer::interrupt() {
  waits_.interrupt();
}

caf::expected<void> dispatch_log_consumer::assign(const std::map<int32_t, int64_t>& starts,
                                                  const std::map<int32_t, int32_t>& epochs,
                                                  bool replace) {
  std::string call = replace ? "start" : "add";
  if (waits_.interrupted())
    return stopping(call, cfg_.topic);
  std::vector<int32_t> before;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    before.assign(assigned_.begin(), assigned_.end());
  }
  if (!replace)
    for (auto& [p, start] : starts)
      if (std::binary_search(before.begin(), before.end(), p))
        return caf::make_error(ec::invalid_config,
                               call + " of " + cfg_.topic + ": partition " + std::to_string(p)
                                 + " is already assigned to this consumer");
  if (auto err = check_ranges(starts))
    return err;
  // Detach each partition's queue from the consumer queue before assigning,
  // so no record of it can be fetched onto the consumer queue.  A queue made
  // for an earlier assignment of the partition is still detached.
  std::vector<int32_t> added;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    for (auto& [p, start] : starts) {
      added.push_back(p);
      if (queues_.count(p) > 0)
        continue;
      auto* q = rd_kafka_queue_get_partition(rk_.get(), cfg_.topic.c_str(), p);
      if (q == nullptr)
        return caf::make_error(ec::kafka_read, "no queue for " + cfg_.topic + " partition "
                                                 + std::to_string(p));
      rd_kafka_queue_forward(q, nullptr);
      auto slot = std::make_shared<partition_queue>();
      slot->q = q;
      queues_.emplace(p, std::move(slot));
    }
  }
  // start(): the assignment becomes exactly `starts`, as rd_kafka_assign
  // would make it; an unsubscribed consumer may mix both kinds of call.
  if (replace && !before.empty())
    if (auto err = unassign(before, call))
      return err;
  if (!added.empty()) {
    partition_list_ptr list{rd_kafka_topic_partition_list_new(static_cast<int>(starts.size()))};
    for (auto& [p, start] : starts)
      rd_kafka_topic_partition_list_add(list.get(), cfg_.topic.c_str(), p)->offset = start;
    if (auto* e = rd_kafka_incremental_assign(rk_.get(), list.get()))
      return kafka_error(e, call + ": incremental assign of " + cfg_.topic + " partitions "
                              + partition_list(added));
    std::lock_guard<std::mutex> guard{mtx_};
    assigned_.insert(added.begin(), added.end());
  }
  if (auto err = seek_with_epochs(starts, epochs)) {
    // Not half added: the caller may add them again.
    if (auto undo = unassign(added, call); undo && cfg_.client.logs)
      cfg_.client.logs->warn("{}", describe(undo));
    return err;
  }
  return {};
}

caf::error dispatch_log_consumer::check_ranges(const std::map<int32_t, int64_t>& starts) {
  std::vector<int32_t> ps;
  for (auto& [p, start] : starts)
    ps.push_back(p);
  // What rd_kafka_query_watermark_offsets answered (it cannot be
  // interrupted): the earliest offset and, under this consumer's
  // read_committed, the last stable offset as high, asked together; here
  // for every partition at once.
  auto marks = list_offsets(
    rk_.get(), waits_, cfg_.client.timeout_ms, "watermarks of " + cfg_.topic, cfg_.topic, ps,
    {{RD_KAFKA_OFFSET_SPEC_EARLIEST, RD_KAFKA_ISOLATION_LEVEL_READ_COMMITTED},
     {RD_KAFKA_OFFSET_SPEC_LATEST, RD_KAFKA_ISOLATION_LEVEL_READ_COMMITTED}});
  if (!marks)
    return marks.error();
  auto& low = (*marks)[0];
  auto& high = (*marks)[1];
  for (auto& [p, start] : starts) {
    int64_t lo = low.at(p), hi = high.at(p);
    if (lo < 0 && hi >= 0)
      lo = hi; // an empty partition, as rd_kafka_query_watermark_offsets reported it
    if (start < lo || start > hi)
      return caf::make_error(ec::refused, "partition " + std::to_string(p)
                                            + ": field start: stored \"" + std::to_string(start)
                                            + "\", observed \"low=" + std::to_string(lo)
                                            + ",high=" + std::to_string(hi)
                                            + "\": start outside the retained range");
  }
  return caf::none;
}

caf::error dispatch_log_consumer::seek_with_epochs(const std::map<int32_t, int64_t>& starts,
                                                   const std::map<int32_t, int32_t>& epochs) {
  // KIP-320: an assignment is not validated, a seek with a leader epoch is.
  // Where the checkpoint's epoch is known, seek to the same start with it:
  // librdkafka asks the leader for the end offset of that epoch
  // (OffsetForLeaderEpoch) before fetching, and a log truncated below the
  // start comes back on the partition's queue as a truncation error (the
  // reader's refusal) instead of records of another history.
  std::map<int32_t, std::pair<int64_t, int32_t>> pending; // partition -> (offset, epoch)
  for (auto& [p, epoch] : epochs) {
    auto s = starts.find(p);
    if (s != starts.end() && epoch >= 0 && s->second > 0)
      pending.emplace(p, std::make_pair(s->second, epoch));
  }
  // The seek answers once the partition's fetcher took the new position
  // (no broker round trip), but rd_kafka_seek_partitions cannot be
  // interrupted: it waits in slices, and a partition without an answer
  // in a slice is sought again (same position and epoch: no change).
  constexpr int slice_ms = 200;
  auto deadline = std::chrono::steady_clock::now()
                  + std::chrono::milliseconds(cfg_.client.timeout_ms);
  int rounds = cfg_.client.timeout_ms / slice_ms + 1;
  for (int round = 0; round < rounds && !pending.empty(); ++round) {
    if (waits_.interrupted())
      return stopping("seek", cfg_.topic);
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                  deadline - std::chrono::steady_clock::now())
                  .count();
    if (left <= 0)
      break;
    partition_list_ptr seek{rd_kafka_topic_partition_list_new(static_cast<int>(pending.size()))};
    for (auto& [p, at] : pending) {
      auto* tp = rd_kafka_topic_partition_list_add(seek.get(), cfg_.topic.c_str(), p);
      tp->offset = at.first;
      rd_kafka_topic_partition_set_leader_epoch(tp, at.second);
    }
    auto wait = static_cast<int>(std::min<int64_t>(left, slice_ms));
    if (auto* e = rd_kafka_seek_partitions(rk_.get(), seek.get(), wait)) {
      auto code = rd_kafka_error_code(e);
      std::string text = rd_kafka_error_string(e);
      rd_kafka_error_destroy(e);
      if (code != RD_KAFKA_RESP_ERR__TIMED_OUT)
        return caf::make_error(ec::kafka_unavailable,
                               "seek " + cfg_.topic + " with the stored leader epochs: " + text);
    }
    for (int i = 0; i < seek->cnt; ++i) {
      auto& tp = seek->elems[i];
      if (tp.err == RD_KAFKA_RESP_ERR__IN_PROGRESS)
        continue; // no answer in this slice
      if (tp.err)
        return caf::make_error(ec::kafka_unavailable,
                               "seek " + cfg_.topic + " partition " + std::to_string(tp.partition)
                                 + " with its stored leader epoch: " + rd_kafka_err2str(tp.err));
      pending.erase(tp.partition);
    }
  }
  if (!pending.empty()) {
    std::vector<int32_t> ps;
    for (auto& [p, at] : pending)
      ps.push_back(p);
    return caf::make_error(ec::kafka_unavailable,
                           "seek " + cfg_.topic + " partitions " + partition_list(ps)
                             + " with their stored leader epochs: no answer within "
                             + std::to_string(cfg_.client.timeout_ms) + " ms");
  }
  return caf::none;
}

caf::expected<void> dispatch_log_consumer::remove(const std::vector<int32_t>& partitions) {
  std::vector<int32_t> gone;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    for (auto p : partitions)
      if (assigned_.count(p) > 0 && std::find(gone.begin(), gone.end(), p) == gone.end())
        gone.push_back(p);
  }
  if (gone.empty())
    return {};
  if (auto err = unassign(gone, "remove"))
    return err;
  return {};
}

caf::error dispatch_log_consumer::unassign(const std::vector<int32_t>& partitions,
                                           const std::string& call) {
  if (partitions.empty())
    return caf::none;
  partition_list_ptr list{rd_kafka_topic_partition_list_new(static_cast<int>(partitions.size()))};
  for (auto p : partitions)
    rd_kafka_topic_partition_list_add(list.get(), cfg_.topic.c_str(), p);
  // Stops the partitions' fetchers (their queued records are dropped as
  // outdated); a local operation, no broker round trip.
  if (auto* e = rd_kafka_incremental_unassign(rk_.get(), list.get()))
    return kafka_error(e, call + ": incremental unassign of " + cfg_.topic + " partitions "
                            + partition_list(partitions));
  std::lock_guard<std::mutex> guard{mtx_};
  for (auto p : partitions)
    assigned_.erase(p);
  return caf::none;
}

int32_t dispatch_log_consumer::position_epoch(int32_t partition, int64_t offset) {
  auto* list = rd_kafka_topic_partition_list_new(1);
  rd_kafka_topic_partition_list_add(list, cfg_.topic.c_str(), partition);
  int32_t epoch = -1;
  if (!rd_kafka_position(rk_.get(), list) && list->elems[0].offset == offset)
    epoch = rd_kafka_topic_partition_get_leader_epoch(&list->elems[0]);
  rd_kafka_topic_partition_list_destroy(list);
  return epoch;
}

std::shared_ptr<partition_reader> dispatch_log_consumer::reader(int32_t partition) {
  std::shared_ptr<partition_queue> slot;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    auto i = queues_.find(partition);
    if (i == queues_.end() || assigned_.count(partition) == 0)
      return nullptr; // not assigned
    slot = i->second;
  }
  return std::make_shared<rd_partition_reader>(shared_from_this(), std::move(slot), cfg_.topic,
                                               partition);
}

int64_t dispatch_log_consumer::log_end(int32_t partition) {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (assigned_.count(partition) == 0)
      return -1; // not assigned
  }
  int64_t low = -1, high = -1;
  if (rd_kafka_get_watermark_offsets(rk_.get(), cfg_.topic.c_str(), partition, &low, &high)
      != RD_KAFKA_RESP_ERR_NO_ERROR)
    return -1;
  return high >= 0 ? high : -1; // RD_KAFKA_OFFSET_INVALID before the first fetch response
}


caf::error dispatch_log_consumer::poll_events() {
  caf::error result;
  // Serves the main queue (forwarded to the consumer queue): error_cb runs in
  // here and feeds errors_; consumer errors come back as messages.
  while (auto* m = rd_kafka_consumer_poll(rk_.get(), 0)) {
    if (!m->err) {
      // Every assigned partition has its own queue: a record here means the
      // queues were set up wrong.  Never drop it silently.
      if (!result)
        result = caf::make_error(ec::kafka_read, "consumer of " + cfg_.topic
                                                   + ": record of partition "
                                                   + std::to_string(m->partition) + " offset "
                                                   + std::to_string(m->offset)
                                                   + " arrived on the consumer queue");
      rd_kafka_message_destroy(m);
      continue;
    }
    auto err = m->err;
    std::string text = rd_kafka_message_errstr(m);
    rd_kafka_message_destroy(m);
    if (err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
      client_error(err, text, 1, result);
  }
  for (auto& e : errors_->take())
    client_error(e.err, e.last_text, e.count, result);
  return result;
}

void dispatch_log_consumer::client_error(rd_kafka_resp_err_t err, const std::string& text,
                                         uint64_t count, caf::error& result) {
  std::string name = rd_kafka_err2name(err);
  if (cfg_.on_client_error)
    for (uint64_t i = 0; i < count; ++i)
      cfg_.on_client_error(name);
  auto where = "consumer of " + cfg_.topic + ": ";
  if (auto final = final_client_error(err, text, where.substr(0, where.size() - 2),
                                      err == RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED
                                        ? group_permission(cfg_.group_id)
                                        : read_permission(cfg_.topic))) {
    if (!result)
      result = std::move(final);
  } else if (err == RD_KAFKA_RESP_ERR__FATAL) {
    char reason[512] = "";
    auto orig = rd_kafka_fatal_error(rk_.get(), reason, sizeof(reason));
    if (!result)
      result = caf::make_error(ec::kafka_read,
                               where + "fatal client error "
                                 + (orig ? std::string{rd_kafka_err2name(orig)} : name) + ": "
                                 + (reason[0] != '\0' ? std::string{reason} : text));
  } else if (err == RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET
             || err == RD_KAFKA_RESP_ERR_OFFSET_OUT_OF_RANGE) {
    if (!result)
      result = caf::make_error(ec::kafka_read, where + text);
  } else {
    // Brokers down, transport, resolve, ...: librdkafka retries by itself;
    // the projection only lags.  Say so, but not on every poll.
    auto now = std::chrono::steady_clock::now();
    uint64_t skipped = 0;
    bool log = false;
    {
      std::lock_guard<std::mutex> guard{log_mtx_};
      auto i = last_logged_.find(name);
      if (i == last_logged_.end() || now - i->second >= cfg_.client_error_log_interval) {
        last_logged_[name] = now;
        skipped = std::exchange(suppressed_[name], 0) + (count - 1);
        log = true;
      } else {
        suppressed_[name] += count;
      }
    }
    if (log)
      (cfg_.client.logs ? cfg_.client.logs : default_log())
        ->warn("{}kafka client error {} (retried by the client; the projection "
                            "lags meanwhile): {}{}",
                            where, name, text,
                            skipped > 0 ? " (" + std::to_string(skipped)
                                            + " more since the last report)"
                                        : std::string{});
  }
}

} // namespace qsp::kafka
