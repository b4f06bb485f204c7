// /healthz, /readyz, /metrics, /v1/users/{user}/sessions on http.listen.
#pragma once

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "caf/actor_system.hpp"

#include "qsession/projection/metrics.hpp"
#include "messages/actors.hpp"

namespace httplib { class Server; }

namespace qsp::app {

class http_endpoint {
public:
  http_endpoint(caf::actor_system& sys, projection_actor proj, std::shared_ptr<metrics> stats,
                std::string topic);
  ~http_endpoint();
  /// Binds and serves on a background thread; returns the bound port or an error.
  caf::expected<uint16_t> start(const std::string& host, uint16_t port);
  void stop();

private:
  caf::actor_system& sys_;
  projection_actor proj_;
  std::shared_ptr<metrics> stats_;
  std::string topic_;
  std::unique_ptr<httplib::Server> srv_;
  std::thread thread_;
};

/// Prometheus text exposition of a status snapshot and the counters.
std::string prometheus_text(const projection_status& s, const metrics& m, const std::string& topic);

/// JSON body of /readyz.
std::string status_json(const projection_status& s);
/// `cluster --json`: the namespace's ownership table and what holds it closed.
std::string cluster_table_json(const std::string& ns, const std::string& topic,
                               const std::vector<cluster_partition>& view, bool ready);

} // namespace qsp::app
