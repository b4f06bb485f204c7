#include "kafka/client.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cctype>
#include <cstring>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

#include <openssl/ssl.h>

#include "core/checkpoint.hpp"
#include "messages/types.hpp"

namespace qsp::kafka {

namespace {

/// Set once the reaper is destroyed (static destruction): handles released
/// after that are destroyed on the caller's thread.  Constant-initialized, so
/// it is valid at any point of static destruction.
std::atomic<bool> reaper_gone{false};

/// One background thread destroying handles in the order they arrive.
class reaper {
public:
  reaper() {
    // OpenSSL (librdkafka's and hiredis' TLS) registers its cleanup with
    // atexit on first use.  Initialising it here, before this object is
    // complete, orders that cleanup after this destructor: the handles the
    // reaper still destroys at exit (their threads free OpenSSL thread state
    // as they end) never meet an OpenSSL that is already torn down, which
    // hung the process in CRYPTO_THREAD_write_lock.
    OPENSSL_init_ssl(0, nullptr);
    thread_ = std::thread([this] { run(); });
  }

  ~reaper() {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      stopping_ = true;
    }
    work_.notify_all();
    thread_.join(); // after draining the queue
    reaper_gone.store(true, std::memory_order_release);
  }

  void push(rd_kafka_t* rk, std::shared_ptr<void> keepalive) {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      queue_.emplace_back(rk, std::move(keepalive));
    }
    work_.notify_one();
  }

  void drain() {
    std::unique_lock<std::mutex> lock{mtx_};
    idle_.wait(lock, [this] { return queue_.empty() && !busy_; });
  }

private:
  void run() {
    std::unique_lock<std::mutex> lock{mtx_};
    for (;;) {
      work_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty())
        return; // stopping, and drained
      auto item = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      lock.unlock();
      rd_kafka_destroy(item.first);
      item.second.reset(); // what the handle's callbacks pointed into
      lock.lock();
      busy_ = false;
      if (queue_.empty())
        idle_.notify_all();
    }
  }

  std::mutex mtx_;
  std::condition_variable work_;
  std::condition_variable idle_;
  std::deque<std::pair<rd_kafka_t*, std::shared_ptr<void>>> queue_;
  bool busy_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

/// What librdkafka's callbacks of one handle point into (its opaque).
struct handle_context {
  std::shared_ptr<error_sink> errors;
  log_ptr logs;
  std::shared_ptr<void> keepalive;
  bool group_in_use = false;
  rebalance_fn on_rebalance;
};

bool about_coordinator(const char* text) {
  // error_cb: "GroupCoordinator: host:port: ..."; log_cb: "[thrd:GroupCoordinator]: ...".
  return text != nullptr && std::strstr(text, "GroupCoordinator") != nullptr;
}

reaper& the_reaper() {
  static reaper instance;
  return instance;
}

} // namespace

void handle_deleter::operator()(rd_kafka_t* rk) const {
  if (rk == nullptr)
    return;
  if (reaper_gone.load(std::memory_order_acquire))
    rd_kafka_destroy(rk);
  else
    the_reaper().push(rk, keepalive);
}

void error_sink::push(rd_kafka_resp_err_t err, const char* reason) {
  std::lock_guard<std::mutex> guard{mtx_};
  for (auto& e : items_)
    if (e.err == err) {
      ++e.count;
      e.last_text = reason != nullptr ? reason : "";
      return;
    }
  items_.push_back(entry{err, 1, reason != nullptr ? reason : ""});
}

std::vector<error_sink::entry> error_sink::take() {
  std::lock_guard<std::mutex> guard{mtx_};
  return std::exchange(items_, {});
}

void drain_reaper() {
  if (!reaper_gone.load(std::memory_order_acquire))
    the_reaper().drain();
}

namespace {

/// The first dotted lower-case word of a librdkafka message: the property
/// it is about (e.g. "ssl.ca.location"), or "" if there is none.
std::string property_named_in(const std::string& text) {
  size_t i = 0;
  while (i < text.size()) {
    auto is_word = [&](size_t k) {
      char c = text[k];
      return std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c))
             || c == '.' || c == '_';
    };
    if (!is_word(i)) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < text.size() && is_word(j))
      ++j;
    auto word = text.substr(i, j - i);
    while (!word.empty() && word.back() == '.')
      word.pop_back();
    if (word.find('.') != std::string::npos && word.front() != '.'
        && std::isalpha(static_cast<unsigned char>(word.front())))
      return word;
    i = j;
  }
  return {};
}

} // namespace

caf::expected<handle_ptr>
make_handle(rd_kafka_type_t type, const client_settings& cfg,
            const std::vector<std::pair<std::string, std::string>>& fixed,
            const std::vector<std::pair<std::string, std::string>>& defaults,
            std::shared_ptr<error_sink> errors, rebalance_fn on_rebalance) {
  for (auto& [k, v] : cfg.properties)
    for (auto& [fk, fv] : fixed)
      if (k == fk)
        return caf::make_error(ec::invalid_config,
                               "kafka.properties: " + k + " is fixed by the projection (" + fv
                                 + ") and cannot be set");
  char err[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  auto set = [&](const std::string& key, const std::string& value) -> caf::error {
    if (rd_kafka_conf_set(conf, key.c_str(), value.c_str(), err, sizeof(err))
        != RD_KAFKA_CONF_OK)
      return caf::make_error(ec::invalid_config, "kafka property " + key + ": " + err);
    return caf::none;
  };
  std::vector<std::pair<std::string, std::string>> all{
    {"bootstrap.servers", cfg.bootstrap_servers},
    {"client.id", cfg.client_id},
    {"log_level", "3"},
  };
  all.insert(all.end(), defaults.begin(), defaults.end());
  all.insert(all.end(), cfg.properties.begin(), cfg.properties.end());
  all.insert(all.end(), fixed.begin(), fixed.end());
  for (auto& [k, v] : all)
    if (auto e = set(k, v)) {
      rd_kafka_conf_destroy(conf);
      return e;
    }
  // Make sure the reaper exists before the first handle does: it is then
  // destroyed (drained, joined) after anything static holding a handle made
  // later.
  (void) the_reaper();
  // The callbacks' context lives until the handle is destroyed (the
  // deleter's keepalive), also on the reaper's thread.
  auto ctx = std::make_shared<handle_context>();
  ctx->errors = std::move(errors);
  ctx->logs = cfg.logs;
  ctx->keepalive = cfg.keepalive;
  ctx->group_in_use = cfg.group_in_use;
  ctx->on_rebalance = std::move(on_rebalance);
  rd_kafka_conf_set_opaque(conf, ctx.get());
  if (ctx->on_rebalance)
    rd_kafka_conf_set_rebalance_cb(conf, [](rd_kafka_t* rk, rd_kafka_resp_err_t err,
                                            rd_kafka_topic_partition_list_t* parts, void* opaque) {
      static_cast<handle_context*>(opaque)->on_rebalance(rk, err, parts);
    });
  if (ctx->errors)
    rd_kafka_conf_set_error_cb(conf, [](rd_kafka_t*, int code, const char* reason, void* opaque) {
      auto* c = static_cast<handle_context*>(opaque);
      if (!c->group_in_use && about_coordinator(reason))
        return;
      c->errors->push(static_cast<rd_kafka_resp_err_t>(code), reason);
    });
  if (ctx->logs)
    rd_kafka_conf_set_log_cb(conf, [](const rd_kafka_t* rk, int level, const char* fac,
                                      const char* buf) {
      auto* c = static_cast<handle_context*>(rd_kafka_opaque(rk));
      if (c == nullptr || !c->logs)
        return;
      // syslog levels: 0-3 error, 4 warning, 5-6 info, 7 debug.
      auto lvl = level <= 3   ? spdlog::level::err
                 : level == 4 ? spdlog::level::warn
                 : level <= 6 ? spdlog::level::info
                              : spdlog::level::debug;
      if (!c->group_in_use && about_coordinator(buf))
        lvl = spdlog::level::debug;
      c->logs->raw(lvl, std::string{"librdkafka "} + (fac != nullptr ? fac : "") + ": "
                          + (buf != nullptr ? buf : ""));
    });
  rd_kafka_t* rk = rd_kafka_new(type, conf, err, sizeof(err));
  if (rk == nullptr) {
    rd_kafka_conf_destroy(conf);
    // Invalid (combinations of) properties, SSL/SASL set-up from properties
    // (files that cannot be loaded, a missing SASL provider): the operator
    // must fix the configuration.  Anything else (threads, memory) is not a
    // verdict on the configuration: transient.
    std::string text = err;
    if (rd_kafka_last_error() == RD_KAFKA_RESP_ERR__INVALID_ARG) {
      auto prop = property_named_in(text);
      return caf::make_error(ec::invalid_config,
                             "kafka property " + (prop.empty() ? std::string{"(unknown)"} : prop)
                               + ": cannot create a kafka client: " + text);
    }
    return caf::make_error(ec::kafka_unavailable, "cannot create a kafka client: " + text);
  }
  return handle_ptr{rk, handle_deleter{std::move(ctx)}};
}

bool is_auth_error(rd_kafka_resp_err_t err) {
  switch (err) {
    case RD_KAFKA_RESP_ERR__AUTHENTICATION:
    case RD_KAFKA_RESP_ERR_SASL_AUTHENTICATION_FAILED:
    case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_DELEGATION_TOKEN_AUTHORIZATION_FAILED:
      return true;
    default:
      return false;
  }
}

caf::error kafka_error(rd_kafka_resp_err_t err, const std::string& what) {
  return caf::make_error(is_auth_error(err) ? ec::invalid_config : ec::kafka_unavailable,
                         what + ": " + rd_kafka_err2str(err) + " (" + rd_kafka_err2name(err)
                           + ")");
}

caf::error kafka_error(rd_kafka_error_t* err, const std::string& what) {
  if (err == nullptr)
    return caf::none;
  std::string text = rd_kafka_error_string(err);
  auto code = rd_kafka_error_code(err);
  rd_kafka_error_destroy(err);
  return kafka_error(code, what + " (" + text + ")");
}

// -- waiting for the broker, interruptibly -----------------------------------

void interrupter::interrupt() {
  std::lock_guard<std::mutex> guard{mtx_};
  interrupted_ = true;
  // Under the lock: a queue stays registered (and alive, its poller is
  // inside poll()) while it is yielded.  A yield before the poll starts
  // makes that poll return at once (librdkafka keeps the flag).
  for (auto* q : waiting_)
    rd_kafka_queue_yield(q);
}

bool interrupter::interrupted() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return interrupted_;
}

event_ptr interrupter::poll(rd_kafka_queue_t* q, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (interrupted_)
      return nullptr;
    waiting_.push_back(q);
  }
  event_ptr ev;
  // rd_kafka_queue_poll returns nothing early only when yielded, i.e.
  // interrupted; the bound on rounds only guards against a surprise.
  for (int round = 0; round < 16 && !ev; ++round) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                  deadline - std::chrono::steady_clock::now())
                  .count();
    if (left <= 0 || interrupted())
      break;
    ev.reset(rd_kafka_queue_poll(q, static_cast<int>(left)));
  }
  std::lock_guard<std::mutex> guard{mtx_};
  waiting_.erase(std::find(waiting_.begin(), waiting_.end(), q));
  return ev;
}

options_ptr make_admin_options(rd_kafka_t* rk, rd_kafka_admin_op_t op, int timeout_ms) {
  options_ptr o{rd_kafka_AdminOptions_new(rk, op)};
  char err[256];
  rd_kafka_AdminOptions_set_request_timeout(o.get(), timeout_ms, err, sizeof(err));
  return o;
}

caf::error final_client_error(rd_kafka_resp_err_t err, const std::string& text,
                              const std::string& what, const std::string& permission) {
  if (is_auth_error(err))
    return auth_error(err, what, text, permission);
  // librdkafka's own diagnosis of a TLS handshake the listener answered as
  // plaintext (reported as a transport error).
  if (text.find("PLAINTEXT broker listener") != std::string::npos)
    return caf::make_error(ec::invalid_config,
                           what + ": TLS to a listener that speaks plaintext (" + text
                             + "): security.protocol in kafka.properties does not match the "
                               "listener of kafka.bootstrap-servers");
  if (err != RD_KAFKA_RESP_ERR__SSL)
    return caf::none;
  if (text.find("certificate") != std::string::npos || text.find("Certificate") != std::string::npos)
    return caf::make_error(ec::invalid_config,
                           what + ": TLS: the broker's certificate does not verify (" + text
                             + "): check ssl.ca.location in kafka.properties and that the "
                               "certificate holds the broker's address as advertised (endpoint "
                               "identification)");
  return caf::none;
}

std::string read_permission(const std::string& topic) {
  return "Read on topic " + topic + " (Read implies the Describe this request needs)";
}

std::string group_permission(const std::string& group) {
  return "Describe on group " + group
         + " (librdkafka's consumer looks up its group's coordinator even with static "
           "assignment; ownership = group needs Read on group "
         + group + ")";
}

caf::error auth_error(rd_kafka_resp_err_t code, const std::string& what, const std::string& detail,
                      const std::string& permission) {
  std::string need;
  switch (code) {
    case RD_KAFKA_RESP_ERR__AUTHENTICATION:
    case RD_KAFKA_RESP_ERR_SASL_AUTHENTICATION_FAILED:
      need = "the broker refused the credentials (check sasl.username and sasl.mechanism in "
             "kafka.properties, and kafka.sasl-password-file)";
      break;
    case RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED:
      need = "the principal lacks a permission on the cluster (" + permission + ")";
      break;
    default:
      need = "the principal lacks " + permission;
  }
  return caf::make_error(ec::invalid_config, what + ": not authorized ("
                                               + rd_kafka_err2name(code) + "): " + need
                                               + (detail.empty() ? "" : ": " + detail));
}

caf::expected<event_ptr> await_result(interrupter& waits, rd_kafka_queue_t* q, int timeout_ms,
                                      const std::string& what, const std::string& permission) {
  // The request itself times out after timeout_ms; the 2 s more let its
  // timeout come back as the answer.
  auto ev = waits.poll(q, timeout_ms + 2000);
  if (!ev) {
    if (waits.interrupted())
      return caf::make_error(ec::shutting_down,
                             what + ": interrupted while waiting for the broker (stopping)");
    return caf::make_error(ec::kafka_unavailable, what + ": no answer within "
                                                    + std::to_string(timeout_ms) + " ms");
  }
  if (auto err = rd_kafka_event_error(ev.get())) {
    std::string text = rd_kafka_event_error_string(ev.get());
    if (is_auth_error(err))
      return auth_error(err, what, text, permission);
    return caf::make_error(ec::kafka_unavailable,
                           what + ": " + text + " (" + rd_kafka_err2name(err) + ")");
  }
  return ev;
}

caf::expected<std::vector<std::map<int32_t, int64_t>>>
list_offsets(rd_kafka_t* rk, interrupter& waits, int timeout_ms, const std::string& what,
             const std::string& topic, const std::vector<int32_t>& partitions,
             const std::vector<offset_query>& queries) {
  std::vector<std::map<int32_t, int64_t>> out(queries.size());
  if (partitions.empty())
    return out;
  // Every request first (each on its queue), then every answer.
  std::vector<queue_ptr> qs;
  for (auto& query : queries) {
    auto* list = rd_kafka_topic_partition_list_new(static_cast<int>(partitions.size()));
    for (auto p : partitions)
      rd_kafka_topic_partition_list_add(list, topic.c_str(), p)->offset = query.spec;
    qs.emplace_back(rd_kafka_queue_new(rk));
    auto opts = make_admin_options(rk, RD_KAFKA_ADMIN_OP_LISTOFFSETS, timeout_ms);
    rd_kafka_AdminOptions_set_isolation_level(opts.get(), query.isolation);
    rd_kafka_ListOffsets(rk, list, opts.get(), qs.back().get());
    rd_kafka_topic_partition_list_destroy(list);
  }
  for (size_t k = 0; k < queries.size(); ++k) {
    auto ev = await_result(waits, qs[k].get(), timeout_ms, what, "Describe on topic " + topic);
    if (!ev)
      return ev.error();
    size_t n = 0;
    auto** infos =
      rd_kafka_ListOffsets_result_infos(rd_kafka_event_ListOffsets_result(ev->get()), &n);
    for (size_t i = 0; i < n; ++i) {
      auto* tp = rd_kafka_ListOffsetsResultInfo_topic_partition(infos[i]);
      if (std::find(partitions.begin(), partitions.end(), tp->partition) == partitions.end())
        continue; // not asked for
      if (tp->err)
        return kafka_error(tp->err, what + " partition " + std::to_string(tp->partition));
      out[k][tp->partition] = tp->offset;
    }
    for (auto p : partitions)
      if (out[k].count(p) == 0)
        return caf::make_error(ec::kafka_unavailable,
                               what + ": partition " + std::to_string(p) + " missing");
  }
  return out;
}

std::string topic_id_text(const rd_kafka_Uuid_t* id) {
  if (id == nullptr)
    return {};
  return core::kafka_uuid_text(
    static_cast<uint64_t>(rd_kafka_Uuid_most_significant_bits(id)),
    static_cast<uint64_t>(rd_kafka_Uuid_least_significant_bits(id)));
}

} // namespace qsp::kafka
