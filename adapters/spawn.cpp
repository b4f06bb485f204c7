// The public spawn_projection (qsession/projection/projection.hpp): the real
// adapters built from one settings struct, the projection's own log, its I/O
// token, and the check that no two live projections of this process merge
// their tenants' session sets.
#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "actors/projection.hpp"
#include "adapters/real_ports.hpp"
#include "core/dispatch.hpp"
#include "qsession/projection/projection.hpp"

namespace qsp {

namespace {

/// The live projections of this process by (Redis endpoint, convs prefix):
/// their namespaces.  The one piece of process-wide state, and only ever
/// touched at spawn and at the end of a projection.
class prefix_claims {
public:
  using key = std::tuple<std::string, uint16_t, std::string>;

  /// The namespace already writing `k` under another name, or "".
  std::string claim(const key& k, const std::string& ns) {
    std::lock_guard<std::mutex> guard{mtx_};
    auto& owners = claims_[k];
    for (auto& [other, count] : owners)
      if (other != ns && count > 0)
        return other;
    owners[ns] += 1;
    return {};
  }

  void force(const key& k, const std::string& ns) {
    std::lock_guard<std::mutex> guard{mtx_};
    claims_[k][ns] += 1;
  }

  void release(const key& k, const std::string& ns) {
    std::lock_guard<std::mutex> guard{mtx_};
    auto i = claims_.find(k);
    if (i == claims_.end())
      return;
    if (--i->second[ns] <= 0)
      i->second.erase(ns);
    if (i->second.empty())
      claims_.erase(i);
  }

private:
  std::mutex mtx_;
  std::map<key, std::map<std::string, int>> claims_;
};

prefix_claims& claims() {
  static prefix_claims instance;
  return instance;
}

} // namespace

caf::expected<projection_actor> spawn_projection(caf::actor_system& sys,
                                                 const projection_settings& settings,
                                                 spawn_options opts) {
  if (auto err = settings.validate())
    return err;
  // The Redis the prefix is written on: host:port, the primary a set of
  // Sentinels names, or (Redis Cluster mode) each seed node: two
  // projections sharing any seed write the same cluster.
  auto& rs = settings.redis;
  std::vector<std::string> redis_at;
  if (!rs.cluster_nodes.empty()) {
    for (auto& s : rs.cluster_nodes)
      redis_at.push_back("the Redis Cluster of node " + s);
  } else if (!rs.sentinels.empty()) {
    auto sentinels = rs.sentinels;
    std::sort(sentinels.begin(), sentinels.end());
    std::string at = "primary '" + rs.master_name + "' of Sentinels";
    for (auto& s : sentinels)
      at += " " + s;
    redis_at.push_back(at);
  } else {
    redis_at.push_back(rs.host + ":" + std::to_string(rs.port));
  }
  std::vector<prefix_claims::key> keys;
  for (auto& at : redis_at)
    keys.emplace_back(at, 0, settings.convs_prefix);
  auto release_all = [keys, ns = settings.ns](size_t n) {
    for (size_t i = 0; i < n; ++i)
      claims().release(keys[i], ns);
  };
  for (size_t i = 0; i < keys.size(); ++i) {
    if (settings.allow_shared_convs_prefix) {
      claims().force(keys[i], settings.ns);
    } else if (auto other = claims().claim(keys[i], settings.ns); !other.empty()) {
      release_all(i);
      return caf::make_error(
        ec::invalid_config,
        "projection.convs-prefix: \"" + settings.convs_prefix + "\" on " + redis_at[i]
          + " is already written by the projection of namespace " + other
          + " in this process; namespace " + settings.ns
          + " would merge its users' session sets with it (give each tenant its own "
            "convs-prefix, or set projection.allow-shared-convs-prefix)");
    }
  }
  auto stats = opts.stats ? opts.stats : std::make_shared<metrics>();
  auto logs = std::make_shared<const projection_log>(
    opts.logger, projection_log::tag_of(settings.topic, settings.ns,
                                        settings.clustered() ? settings.node_id : std::string{}));
  for (auto& w : security_warnings(settings))
    logs->warn("{}", w);
  auto io = std::make_shared<int>(0);
  projection_options popts;
  popts.logs = logs;
  popts.io = io;
  popts.on_end = [release_all, n = keys.size()] { release_all(n); };
  real_ports_options ropts;
  ropts.stats = stats;
  ropts.logs = logs;
  ropts.io = std::move(io);
  std::shared_ptr<port_factory> ports = make_real_ports(settings, std::move(ropts));
  if (opts.reader) {
    logs->info("kafka: reading the dispatch log through the host's reader "
               "(spawn_options.reader); its gaps are re-read through the projection's own");
    ports = std::make_shared<host_reader_ports>(std::move(ports), std::move(opts.reader));
  }
  auto proj = spawn_projection(sys, settings, std::move(ports),
                               std::make_shared<core::json_decoder>(), std::move(stats),
                               std::move(popts));
  if (!proj)
    release_all(keys.size());
  return proj;
}

} // namespace qsp
