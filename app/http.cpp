#include "app/http.hpp"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "caf/scoped_actor.hpp"

#include "messages/types.hpp"

namespace qsp::app {

namespace {

caf::expected<projection_status> ask_status(caf::actor_system& sys, const projection_actor& p) {
  caf::scoped_actor self{sys};
  caf::expected<projection_status> result = caf::make_error(ec::shutting_down, "no answer");
  qsp::mail(self, atom::status_v).request(p, std::chrono::seconds(5))
    .receive([&](projection_status& s) { result = std::move(s); },
             [&](caf::error& e) { result = std::move(e); });
  return result;
}

} // namespace

namespace {

// The ownership table (docs/DESIGN.md §12) and the partitions holding the gate closed.
void put_cluster(nlohmann::json& j, const std::vector<cluster_partition>& view) {
  auto& held = j["held_closed"] = nlohmann::json::array();
  auto& cl = j["cluster"] = nlohmann::json::array();
  for (auto& c : view) {
    cl.push_back({{"partition", c.partition}, {"owner", c.owner}, {"epoch", c.epoch},
                  {"heartbeat_ms", c.heartbeat_ms}, {"live", c.live}, {"state", c.state},
                  {"h0", c.h0}, {"next_offset", c.next_offset}, {"caught_up", c.caught_up},
                  {"ready", c.ready}});
    if (!c.ready)
      held.push_back({{"partition", c.partition}, {"why", c.why}});
  }
}

} // namespace

std::string cluster_table_json(const std::string& ns, const std::string& topic,
                               const std::vector<cluster_partition>& view, bool ready) {
  nlohmann::json j{{"namespace", ns}, {"topic", topic}, {"namespace_ready", ready}};
  put_cluster(j, view);
  j["partitions"] = std::move(j["cluster"]);
  j.erase("cluster");
  return j.dump(2);
}

std::string status_json(const projection_status& s) {
  nlohmann::json j;
  j["topic"] = s.topic;
  j["namespace"] = s.ns;
  j["state"] = s.state;
  j["ready"] = s.ready;
  j["restarts"] = s.restarts;
  j["last_error"] = s.last_error;  // "" until the first failure (both answers carry it)
  auto& parts = j["partitions"] = nlohmann::json::array();
  for (auto& p : s.partitions)
    parts.push_back({{"partition", p.partition}, {"start", p.start}, {"h0", p.h0},
                     {"next_offset", p.next_offset},
                     {"caught_up", p.next_offset >= p.h0}, {"log_end", p.log_end},
                     {"live_lag", p.live_lag},
                     {"progress_age_seconds", static_cast<double>(p.progress_age_ms) / 1e3}});
  if (s.ownership != "all") {
    // docs/DESIGN.md §12: the gate is the namespace's; say which partitions hold it closed.
    j["ownership"] = s.ownership;
    j["node"] = s.node;
    j["owned"] = s.owned;
    j["namespace_ready"] = s.namespace_ready;
    put_cluster(j, s.cluster);
  }
  return j.dump();
}

std::string prometheus_text(const projection_status& s, const metrics& m, const std::string& topic) {
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help) {
    out += std::string{"# HELP "} + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  };
  auto lbl = "topic=\"" + topic + "\"";
  metric("qsp_ready", "gauge", "1 when every partition reached its start target H0");
  out += "qsp_ready{" + lbl + "} " + (s.ready ? "1" : "0") + "\n";
  metric("qsp_namespace_ready", "gauge",
         "1 when every partition of the namespace has a live owner at its H0 (docs/DESIGN.md §12; with "
         "ownership all, the same as qsp_ready)");
  out += "qsp_namespace_ready{" + lbl + "} " + (s.namespace_ready ? "1" : "0") + "\n";
  metric("qsp_owned_partitions", "gauge", "partitions this node owns now");
  out += "qsp_owned_partitions{" + lbl + "} " + std::to_string(s.owned.size()) + "\n";
  metric("qsp_state", "gauge", "current supervisor state (1 for the active one)");
  for (auto* st : {"starting", "verifying", "catching-up", "ready", "dirty", "refused", "stopped"})
    out += "qsp_state{" + lbl + ",state=\"" + st + "\"} " + (s.state == st ? "1" : "0") + "\n";
  // One gauge per partition: `value` gives its sample text.
  auto per_partition = [&](const char* name, const char* help, auto value) {
    metric(name, "gauge", help);
    for (auto& p : s.partitions)
      out += std::string{name} + "{" + lbl + ",partition=\"" + std::to_string(p.partition) + "\"} "
             + value(p) + "\n";
  };
  auto num = [](int64_t v) { return std::to_string(v); };
  per_partition("qsp_next_offset", "checkpointed next offset per partition",
                [&](const partition_status& p) { return num(p.next_offset); });
  per_partition("qsp_start_target_offset", "H0: the last stable offset at this start",
                [&](const partition_status& p) { return num(p.h0); });
  per_partition("qsp_catch_up_lag", "offsets left until H0", [&](const partition_status& p) {
    return num(std::max<int64_t>(0, p.h0 - p.next_offset));
  });
  per_partition("qsp_log_end_offset",
                "end of the log as the consumer last saw it (cached high watermark, at least H0)",
                [&](const partition_status& p) { return num(p.log_end); });
  per_partition("qsp_live_lag", "offsets between the checkpoint and the log end",
                [&](const partition_status& p) { return num(p.live_lag); });
  per_partition("qsp_last_progress_age_seconds",
                "seconds since the checkpoint last advanced while there is live lag (0: nothing to do)",
                [](const partition_status& p) {
                  return fmt::format("{:.3f}", static_cast<double>(p.progress_age_ms) / 1e3);
                });
  metric("qsp_open_transaction_gap", "gauge",
         "high watermark minus last stable offset at start (an open transaction pins progress)");
  for (auto& p : s.partitions) {
    auto i = s.true_high.find(p.partition);
    if (i != s.true_high.end())
      out += "qsp_open_transaction_gap{" + lbl + ",partition=\"" + std::to_string(p.partition)
             + "\"} " + std::to_string(std::max<int64_t>(0, i->second - p.h0)) + "\n";
  }
  metric("qsp_records_total", "counter", "dispatch records projected");
  out += "qsp_records_total{" + lbl + "} " + std::to_string(m.records.load()) + "\n";
  metric("qsp_recipient_writes_total", "counter", "ZADD members written");
  out += "qsp_recipient_writes_total{" + lbl + "} " + std::to_string(m.recipient_writes.load()) + "\n";
  metric("qsp_batches_total", "counter", "batches confirmed with a checkpoint");
  out += "qsp_batches_total{" + lbl + "} " + std::to_string(m.batches.load()) + "\n";
  metric("qsp_restarts_total", "counter", "restarts after a transient failure");
  out += "qsp_restarts_total{" + lbl + "} " + std::to_string(m.restarts.load()) + "\n";
  metric("qsp_kafka_client_errors_total", "counter",
         "librdkafka client-level errors (all brokers down, transport, authentication)");
  out += "qsp_kafka_client_errors_total{" + lbl + "} " + std::to_string(m.kafka_client_errors.load()) + "\n";
  {
    // Redis Cluster mode: per primary (the families are declared in every
    // mode, with samples only in Redis Cluster mode).
    auto shards = m.shard_snapshot();
    auto per_shard = [&](const char* name, const char* help, uint64_t metrics::shard_counters::*f) {
      metric(name, "counter", help);
      for (auto& [primary, c] : shards)
        out += std::string{name} + "{" + lbl + ",primary=\"" + primary + "\"} "
               + std::to_string(c.*f) + "\n";
    };
    per_shard("qsp_redis_shard_writes_total", "ZADDs sent to a primary (Redis Cluster mode)",
              &metrics::shard_counters::writes);
    per_shard("qsp_redis_shard_errors_total",
              "error replies from a primary other than redirections (Redis Cluster mode)",
              &metrics::shard_counters::errors);
    per_shard("qsp_redis_shard_moved_total", "MOVED redirections followed (Redis Cluster mode)",
              &metrics::shard_counters::moved);
    per_shard("qsp_redis_shard_ask_total", "ASK redirections followed (Redis Cluster mode)",
              &metrics::shard_counters::asked);
  }
  metric("qsp_identity_checks_total", "counter", "run-time broker identity checks (the fence)");
  out += "qsp_identity_checks_total{" + lbl + "} " + std::to_string(m.identity_checks.load()) + "\n";
  metric("qsp_identity_check_errors_total", "counter", "identity checks the broker did not answer");
  out += "qsp_identity_check_errors_total{" + lbl + "} " + std::to_string(m.identity_check_errors.load()) + "\n";
  metric("qsp_failures_total", "counter", "failures by kind");
  for (size_t i = 1; i < metrics::error_kinds; ++i) {
    auto name = to_string(static_cast<ec>(i));
    if (name == "unknown")
      continue;
    out += "qsp_failures_total{" + lbl + ",kind=\"" + name + "\"} "
           + std::to_string(m.failures[i].load()) + "\n";
  }
  metric("qsp_batch_write_seconds", "histogram", "from a batch reaching the writer to its checkpoint (ZADD replies, identity fence, checkpoint write)");
  uint64_t cum = 0;
  for (size_t i = 0; i < metrics::latency_bounds.size(); ++i) {
    cum += m.latency_buckets[i].load();
    out += "qsp_batch_write_seconds_bucket{" + lbl + ",le=\""
           + fmt::format("{}", metrics::latency_bounds[i]) + "\"} " + std::to_string(cum) + "\n";
  }
  cum += m.latency_buckets[metrics::latency_bounds.size()].load();
  out += "qsp_batch_write_seconds_bucket{" + lbl + ",le=\"+Inf\"} " + std::to_string(cum) + "\n";
  out += "qsp_batch_write_seconds_sum{" + lbl + "} "
         + fmt::format("{}", static_cast<double>(m.latency_sum_ns.load()) / 1e9) + "\n";
  out += "qsp_batch_write_seconds_count{" + lbl + "} " + std::to_string(m.latency_count.load()) + "\n";
  return out;
}

http_endpoint::http_endpoint(caf::actor_system& sys, projection_actor proj,
                             std::shared_ptr<metrics> stats, std::string topic)
  : sys_(sys), proj_(std::move(proj)), stats_(std::move(stats)), topic_(std::move(topic)),
    srv_(std::make_unique<httplib::Server>()) {}

http_endpoint::~http_endpoint() { stop(); }

caf::expected<uint16_t> http_endpoint::start(const std::string& host, uint16_t port) {
  auto& srv = *srv_;
  srv.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  srv.Get("/readyz", [this](const httplib::Request&, httplib::Response& res) {
    auto s = ask_status(sys_, proj_);
    if (!s) {
      res.status = 503;
      res.set_content(nlohmann::json{{"state", "unknown"}, {"ready", false}}.dump(), "application/json");
      return;
    }
    res.status = s->ready ? 200 : 503;
    res.set_content(status_json(*s), "application/json");
  });
  srv.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    auto s = ask_status(sys_, proj_);
    projection_status empty;
    empty.state = "stopped";
    res.set_content(prometheus_text(s ? *s : empty, *stats_, topic_),
                    "text/plain; version=0.0.4");
  });
  srv.Get(R"(/v1/users/([^/]+)/sessions)", [this](const httplib::Request& req,
                                                 httplib::Response& res) {
    auto user = req.matches[1].str();
    uint32_t limit = 100;
    if (req.has_param("limit")) {
      auto text = req.get_param_value("limit");
      char* end = nullptr;
      long v = std::strtol(text.c_str(), &end, 10);
      if (text.empty() || *end != '\0' || v <= 0 || v > 10000) {
        res.status = 400;
        res.set_content(nlohmann::json{{"error", "limit must be an integer in [1, 10000]"}}.dump(),
                        "application/json");
        return;
      }
      limit = static_cast<uint32_t>(v);
    }
    if (user.empty() || user.size() > 512) {
      res.status = 400;
      res.set_content(nlohmann::json{{"error", "bad user"}}.dump(), "application/json");
      return;
    }
    caf::scoped_actor self{sys_};
    qsp::mail(self, atom::pull_v, user, limit).request(proj_, std::chrono::seconds(10))
      .receive(
        [&](session_list& list) {
          nlohmann::json arr = nlohmann::json::array();
          for (auto& e : list)
            arr.push_back({{"conversation_id", e.conversation_id}, {"last_active", e.last_active}});
          res.set_content(nlohmann::json{{"user", user}, {"sessions", arr}}.dump(),
                          "application/json");
        },
        [&](caf::error& e) {
          res.status = 503;
          res.set_content(nlohmann::json{{"error", describe(e)}}.dump(), "application/json");
        });
  });
  // One node per address: the library's default socket options add
  // SO_REUSEPORT, with which a second node binds the same port and the
  // kernel splits the probes between the two.  SO_REUSEADDR alone still
  // allows a restart while old connections sit in TIME_WAIT.
  srv.set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  errno = 0;
  int bound = port == 0 ? srv.bind_to_any_port(host.c_str()) : (srv.bind_to_port(host.c_str(), port) ? port : -1);
  if (bound <= 0) {
    int why = errno;
    return caf::make_error(ec::invalid_config,
                           "http.listen: cannot bind " + host + ":" + std::to_string(port)
                             + (why != 0 ? std::string{" ("} + std::strerror(why) + ")" : std::string{})
                             + (why == EADDRINUSE ? "; another process (another node?) listens there"
                                                  : ""));
  }
  thread_ = std::thread{[this] { srv_->listen_after_bind(); }};
  return static_cast<uint16_t>(bound);
}

void http_endpoint::stop() {
  if (srv_)
    srv_->stop();
  if (thread_.joinable())
    thread_.join();
}

} // namespace qsp::app
