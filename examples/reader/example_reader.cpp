#include "example_reader.hpp"

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <librdkafka/rdkafka.h>

namespace example {

namespace {

using qsp::ec;

constexpr int slice_ms = 200; // every wait is cut into slices: interrupt() ends it

bool is_auth(rd_kafka_resp_err_t e) {
  switch (e) {
    case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_SASL_AUTHENTICATION_FAILED:
    case RD_KAFKA_RESP_ERR__AUTHENTICATION:
    case RD_KAFKA_RESP_ERR__SSL:
      return true;
    default:
      return false;
  }
}

/// A message error that means the log was truncated below the position
/// (KIP-320 validation with auto.offset.reset=error).
bool is_truncation(const rd_kafka_message_t* m) {
  if (m->err == RD_KAFKA_RESP_ERR__LOG_TRUNCATION)
    return true;
  if (m->err != RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET)
    return false;
  std::string text = rd_kafka_message_errstr(m);
  return text.find(rd_kafka_err2str(RD_KAFKA_RESP_ERR__LOG_TRUNCATION)) != std::string::npos;
}

caf::error broker_error(rd_kafka_resp_err_t e, const std::string& what) {
  auto text = what + ": " + rd_kafka_err2str(e) + " (" + rd_kafka_err2name(e) + ")";
  return caf::make_error(is_auth(e) ? ec::invalid_config : ec::kafka_unavailable, text);
}

/// One partition's queue, detached from the consumer queue, and the wake-up
/// of the reader that asked for one.
struct slot {
  rd_kafka_queue_t* q = nullptr;
  std::mutex mtx;
  std::function<void()> wake;
  const void* owner = nullptr;

  static void on_event(rd_kafka_t*, void* opaque) {
    auto* s = static_cast<slot*>(opaque);
    std::lock_guard<std::mutex> guard{s->mtx};
    if (s->wake)
      s->wake();
  }
};

/// What the log and its readers share: the handle and the queues.
struct core {
  reader_config cfg;
  rd_kafka_t* rk = nullptr;
  std::atomic<bool> stopped{false};
  std::mutex mtx; ///< guards queues and assigned
  std::map<int32_t, std::shared_ptr<slot>> queues;
  std::set<int32_t> assigned;

  ~core() {
    if (rk == nullptr)
      return;
    rd_kafka_assign(rk, nullptr);
    for (auto& [p, s] : queues) {
      rd_kafka_queue_cb_event_enable(s->q, nullptr, nullptr);
      rd_kafka_queue_destroy(s->q);
    }
    rd_kafka_destroy(rk);
  }

  std::string where(int32_t p) const {
    return "topic " + cfg.topic + " partition " + std::to_string(p);
  }

  caf::error stopping(const std::string& call) const {
    return caf::make_error(ec::shutting_down, call + " of " + cfg.topic + ": interrupted");
  }

  /// Errors of the consumer as a whole (not of a partition): a fatal error
  /// or a refused authentication; anything else librdkafka retries itself.
  caf::error client_errors() {
    caf::error result;
    while (auto* m = rd_kafka_consumer_poll(rk, 0)) {
      if (m->err && !result) {
        char text[512];
        if (rd_kafka_fatal_error(rk, text, sizeof(text)) != RD_KAFKA_RESP_ERR_NO_ERROR)
          result = caf::make_error(ec::kafka_read, "consumer of " + cfg.topic + ": fatal: " + text);
        else if (is_auth(m->err))
          result = caf::make_error(ec::invalid_config, "consumer of " + cfg.topic + ": "
                                                         + rd_kafka_message_errstr(m));
      }
      rd_kafka_message_destroy(m);
    }
    return result;
  }

  /// Every start inside [low, high] (high: the last stable offset, as a
  /// read_committed consumer's ListOffsets reports it).
  caf::error check_ranges(const std::map<int32_t, int64_t>& starts, const std::string& call) {
    auto deadline = std::chrono::steady_clock::now() + cfg.timeout;
    for (auto& [p, start] : starts) {
      int64_t low = -1, high = -1;
      for (;;) {
        if (stopped)
          return stopping(call);
        auto e = rd_kafka_query_watermark_offsets(rk, cfg.topic.c_str(), p, &low, &high, slice_ms);
        if (e == RD_KAFKA_RESP_ERR_NO_ERROR)
          break;
        // Anything but a refused authentication may pass (brokers down, a
        // topic not created yet, a leader moving): ask again until the
        // deadline, in slices that interrupt() ends.
        if (is_auth(e) || std::chrono::steady_clock::now() >= deadline)
          return broker_error(e, call + ": watermarks of " + where(p) + " (waited up to "
                                   + std::to_string(cfg.timeout.count()) + " ms)");
      }
      if (start < low || start > high)
        return caf::make_error(ec::refused, call + ": " + where(p) + ": start "
                                              + std::to_string(start)
                                              + " outside the retained range [low=" + std::to_string(low)
                                              + ", high=" + std::to_string(high) + "]");
    }
    return caf::error{};
  }

  /// KIP-320: positions with a stored epoch are validated by the broker.
  caf::error seek_epochs(const std::map<int32_t, int64_t>& starts,
                         const std::map<int32_t, int32_t>& epochs, const std::string& call) {
    std::map<int32_t, std::pair<int64_t, int32_t>> pending;
    for (auto& [p, epoch] : epochs)
      if (auto s = starts.find(p); s != starts.end() && epoch >= 0 && s->second > 0)
        pending.emplace(p, std::make_pair(s->second, epoch));
    auto deadline = std::chrono::steady_clock::now() + cfg.timeout;
    while (!pending.empty()) {
      if (stopped)
        return stopping(call);
      if (std::chrono::steady_clock::now() >= deadline)
        return caf::make_error(ec::kafka_unavailable,
                               call + ": seek of " + cfg.topic + " with stored leader epochs: no "
                               "answer within " + std::to_string(cfg.timeout.count()) + " ms");
      auto* list = rd_kafka_topic_partition_list_new(static_cast<int>(pending.size()));
      for (auto& [p, at] : pending) {
        auto* tp = rd_kafka_topic_partition_list_add(list, cfg.topic.c_str(), p);
        tp->offset = at.first;
        rd_kafka_topic_partition_set_leader_epoch(tp, at.second);
      }
      caf::error failed;
      if (auto* e = rd_kafka_seek_partitions(rk, list, slice_ms)) {
        if (rd_kafka_error_code(e) != RD_KAFKA_RESP_ERR__TIMED_OUT)
          failed = caf::make_error(ec::kafka_unavailable, call + ": seek of " + cfg.topic + ": "
                                                            + rd_kafka_error_string(e));
        rd_kafka_error_destroy(e);
      }
      for (int i = 0; !failed && i < list->cnt; ++i) {
        auto& tp = list->elems[i];
        if (tp.err == RD_KAFKA_RESP_ERR__IN_PROGRESS)
          continue;
        if (tp.err)
          failed = broker_error(tp.err, call + ": seek of " + where(tp.partition));
        else
          pending.erase(tp.partition);
      }
      rd_kafka_topic_partition_list_destroy(list);
      if (failed)
        return failed;
    }
    return caf::error{};
  }

  caf::error change(const std::vector<int32_t>& ps, bool add, const std::string& call) {
    if (ps.empty())
      return caf::error{};
    auto* list = rd_kafka_topic_partition_list_new(static_cast<int>(ps.size()));
    for (auto p : ps)
      rd_kafka_topic_partition_list_add(list, cfg.topic.c_str(), p);
    auto* e = add ? nullptr : rd_kafka_incremental_unassign(rk, list);
    rd_kafka_topic_partition_list_destroy(list);
    if (e) {
      auto err = caf::make_error(ec::kafka_read, call + ": unassign: " + rd_kafka_error_string(e));
      rd_kafka_error_destroy(e);
      return err;
    }
    std::lock_guard<std::mutex> guard{mtx};
    for (auto p : ps)
      assigned.erase(p);
    return caf::error{};
  }

  caf::expected<void> assign(const std::map<int32_t, int64_t>& starts,
                             const std::map<int32_t, int32_t>& epochs, bool replace) {
    std::string call = replace ? "start" : "add";
    if (stopped)
      return stopping(call);
    std::vector<int32_t> before;
    {
      std::lock_guard<std::mutex> guard{mtx};
      before.assign(assigned.begin(), assigned.end());
    }
    if (!replace)
      for (auto& [p, s] : starts)
        if (std::count(before.begin(), before.end(), p) > 0)
          return caf::make_error(ec::invalid_config,
                                 call + ": " + where(p) + " is already assigned");
    if (auto err = check_ranges(starts, call))
      return err;
    if (replace)
      if (auto err = change(before, false, call))
        return err;
    std::vector<int32_t> added;
    auto* list = rd_kafka_topic_partition_list_new(static_cast<int>(starts.size()));
    {
      std::lock_guard<std::mutex> guard{mtx};
      for (auto& [p, start] : starts) {
        if (queues.count(p) == 0) {
          // Detached before the assignment, so that no record of it reaches
          // the consumer queue.
          auto s = std::make_shared<slot>();
          s->q = rd_kafka_queue_get_partition(rk, cfg.topic.c_str(), p);
          rd_kafka_queue_forward(s->q, nullptr);
          queues.emplace(p, std::move(s));
        }
        rd_kafka_topic_partition_list_add(list, cfg.topic.c_str(), p)->offset = start;
        added.push_back(p);
      }
    }
    auto* e = rd_kafka_incremental_assign(rk, list);
    rd_kafka_topic_partition_list_destroy(list);
    if (e) {
      auto err = caf::make_error(ec::kafka_read, call + ": assign: " + rd_kafka_error_string(e));
      rd_kafka_error_destroy(e);
      return err;
    }
    {
      std::lock_guard<std::mutex> guard{mtx};
      assigned.insert(added.begin(), added.end());
    }
    if (auto err = seek_epochs(starts, epochs, call)) {
      change(added, false, call);
      return err;
    }
    return {};
  }
};

class reader final : public qsp::partition_reader {
public:
  reader(std::shared_ptr<core> c, std::shared_ptr<slot> s, int32_t p)
    : c_(std::move(c)), s_(std::move(s)), p_(p) {}

  ~reader() override {
    std::lock_guard<std::mutex> guard{s_->mtx};
    if (s_->owner == this) {
      s_->wake = nullptr;
      s_->owner = nullptr;
    }
  }

  caf::expected<void> poll(size_t max, std::vector<qsp::log_record>& out,
                           int64_t& passed) override {
    return poll_each(
      max,
      [&out](const qsp::log_record_view& r) {
        out.push_back(qsp::log_record{r.offset, std::string{r.value}, r.timestamp_ms,
                                      r.leader_epoch});
        return true;
      },
      passed);
  }

  caf::expected<void> poll_each(size_t max,
                                const std::function<bool(const qsp::log_record_view&)>& visit,
                                int64_t& passed) override {
    if (auto err = c_->client_errors())
      return err;
    buf_.resize(std::max<size_t>(max, 1));
    auto n = rd_kafka_consume_batch_queue(s_->q, 0, buf_.data(), buf_.size());
    if (n < 0)
      return caf::make_error(ec::kafka_read, c_->where(p_) + ": "
                                               + rd_kafka_err2str(rd_kafka_last_error()));
    caf::error failure;
    bool stop = false;
    for (ssize_t i = 0; i < n; ++i) {
      auto* m = buf_[static_cast<size_t>(i)];
      if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        passed = std::max(passed, m->offset);
      } else if (m->err) {
        if (!failure) {
          if (is_truncation(m))
            failure = caf::make_error(ec::refused, c_->where(p_) + ": field leader_epoch: the "
                                                     "log was truncated below the position: "
                                                     + rd_kafka_message_errstr(m));
          else if (is_auth(m->err))
            failure = caf::make_error(ec::invalid_config,
                                      c_->where(p_) + ": " + rd_kafka_message_errstr(m));
          else
            failure = caf::make_error(ec::kafka_read, c_->where(p_) + ": "
                                                        + rd_kafka_message_errstr(m) + " ("
                                                        + rd_kafka_err2name(m->err) + ")");
        }
      } else if (!failure && !stop) {
        rd_kafka_timestamp_type_t tt;
        stop = !visit(qsp::log_record_view{
          m->offset, std::string_view{static_cast<const char*>(m->payload), m->len},
          rd_kafka_message_timestamp(m, &tt), rd_kafka_message_leader_epoch(m)});
      }
      rd_kafka_message_destroy(m);
    }
    if (failure)
      return failure;
    return {};
  }

  void on_data(std::function<void()> wake) override {
    std::lock_guard<std::mutex> guard{s_->mtx};
    s_->wake = std::move(wake);
    s_->owner = this;
    rd_kafka_queue_cb_event_enable(s_->q, &slot::on_event, s_.get());
  }

  int32_t position_epoch(int64_t offset) override {
    auto* list = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(list, c_->cfg.topic.c_str(), p_);
    int32_t epoch = -1;
    if (!rd_kafka_position(c_->rk, list) && list->elems[0].offset == offset)
      epoch = rd_kafka_topic_partition_get_leader_epoch(&list->elems[0]);
    rd_kafka_topic_partition_list_destroy(list);
    return epoch;
  }

private:
  std::shared_ptr<core> c_;
  std::shared_ptr<slot> s_;
  int32_t p_;
  std::vector<rd_kafka_message_t*> buf_;
};

class log final : public qsp::dispatch_log {
public:
  explicit log(std::shared_ptr<core> c) : c_(std::move(c)) {}

  caf::expected<void> start(const std::map<int32_t, int64_t>& starts,
                            const std::map<int32_t, int32_t>& epochs) override {
    return c_->assign(starts, epochs, true);
  }
  caf::expected<void> add(const std::map<int32_t, int64_t>& starts,
                          const std::map<int32_t, int32_t>& epochs) override {
    return c_->assign(starts, epochs, false);
  }
  caf::expected<void> remove(const std::vector<int32_t>& partitions) override {
    std::vector<int32_t> gone;
    {
      std::lock_guard<std::mutex> guard{c_->mtx};
      for (auto p : partitions)
        if (c_->assigned.count(p) > 0)
          gone.push_back(p);
    }
    if (auto err = c_->change(gone, false, "remove"))
      return err;
    return {};
  }
  std::shared_ptr<qsp::partition_reader> reader(int32_t partition) override {
    std::lock_guard<std::mutex> guard{c_->mtx};
    auto i = c_->queues.find(partition);
    if (i == c_->queues.end() || c_->assigned.count(partition) == 0)
      return nullptr;
    return std::make_shared<example::reader>(c_, i->second, partition);
  }
  int64_t log_end(int32_t partition) override {
    int64_t low = -1, high = -1;
    if (rd_kafka_get_watermark_offsets(c_->rk, c_->cfg.topic.c_str(), partition, &low, &high)
        != RD_KAFKA_RESP_ERR_NO_ERROR)
      return -1;
    return high >= 0 ? high : -1;
  }
  void interrupt() override { c_->stopped = true; }

private:
  std::shared_ptr<core> c_;
};

} // namespace

caf::expected<std::shared_ptr<qsp::dispatch_log>> make_reader(const reader_config& cfg) {
  if (cfg.topic.empty())
    return caf::make_error(ec::invalid_config, "example reader: no topic");
  auto* conf = rd_kafka_conf_new();
  char err[512];
  std::vector<std::pair<std::string, std::string>> props{
    {"bootstrap.servers", cfg.bootstrap_servers},
    {"group.id", cfg.group_id},
    {"client.id", cfg.client_id},
    {"enable.auto.commit", "false"},
    {"enable.auto.offset.store", "false"},
    {"auto.offset.reset", "error"},
    {"isolation.level", "read_committed"},
    {"enable.partition.eof", "true"},
    {"fetch.wait.max.ms", "100"}};
  props.insert(props.end(), cfg.properties.begin(), cfg.properties.end());
  for (auto& [k, v] : props)
    if (rd_kafka_conf_set(conf, k.c_str(), v.c_str(), err, sizeof(err)) != RD_KAFKA_CONF_OK) {
      rd_kafka_conf_destroy(conf);
      return caf::make_error(ec::invalid_config, "example reader: property " + k + ": " + err);
    }
  auto* rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err));
  if (rk == nullptr) {
    rd_kafka_conf_destroy(conf);
    return caf::make_error(ec::invalid_config, std::string{"example reader: "} + err);
  }
  rd_kafka_poll_set_consumer(rk);
  auto c = std::make_shared<core>();
  c->cfg = cfg;
  c->rk = rk;
  return std::shared_ptr<qsp::dispatch_log>{std::make_shared<log>(std::move(c))};
}

} // namespace example
