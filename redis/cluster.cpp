#include "redis/cluster.hpp"

#include <charconv>

#include "messages/types.hpp"

namespace qsp::redis {

namespace {

/// "field:value" lines of an INFO or CLUSTER INFO reply.
std::map<std::string, std::string> info_lines(const redisReply* r) {
  if (r == nullptr || (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_VERB))
    return {};
  return info_fields(std::string_view{r->str, r->len});
}

address address_of(const cluster_node& n) { return address{n.host, n.port}; }

} // namespace

std::map<std::string, std::string> info_fields(std::string_view text) {
  std::map<std::string, std::string> out;
  while (!text.empty()) {
    auto eol = text.find('\n');
    auto line = text.substr(0, eol);
    if (!line.empty() && line.back() == '\r')
      line.remove_suffix(1);
    if (auto colon = line.find(':'); colon != std::string_view::npos && line.front() != '#')
      out.emplace(std::string{line.substr(0, colon)}, std::string{line.substr(colon + 1)});
    if (eol == std::string_view::npos)
      break;
    text.remove_prefix(eol + 1);
  }
  return out;
}

std::optional<redirection> parse_redirection(std::string_view text) {
  redirection r;
  if (text.rfind("MOVED ", 0) == 0) {
    text.remove_prefix(6);
  } else if (text.rfind("ASK ", 0) == 0) {
    r.ask = true;
    text.remove_prefix(4);
  } else {
    return std::nullopt;
  }
  auto sp = text.find(' ');
  if (sp == std::string_view::npos)
    return std::nullopt;
  unsigned slot = 0;
  auto s = text.substr(0, sp);
  if (std::from_chars(s.data(), s.data() + s.size(), slot).ptr != s.data() + s.size()
      || slot >= slot_count)
    return std::nullopt;
  r.slot = static_cast<uint16_t>(slot);
  auto hp = text.substr(sp + 1);
  auto colon = hp.rfind(':');
  if (colon == std::string_view::npos)
    return std::nullopt;
  unsigned port = 0;
  auto p = hp.substr(colon + 1);
  if (std::from_chars(p.data(), p.data() + p.size(), port).ptr != p.data() + p.size() || port == 0
      || port > 65535)
    return std::nullopt;
  r.to = address{std::string{hp.substr(0, colon)}, static_cast<uint16_t>(port)};
  return r;
}

bool transient_cluster_error(std::string_view text) {
  for (auto* code : {"TRYAGAIN", "CLUSTERDOWN", "LOADING", "MASTERDOWN"})
    if (text.rfind(code, 0) == 0)
      return true;
  return false;
}

caf::error scan_keys(connection& c, const std::string& pattern,
                     const std::function<caf::error(const std::string& key)>& visit) {
  std::string cursor = "0";
  // Bounded: SCAN ends when the cursor comes back to 0; the guard stops a
  // server that never does.
  for (int guard = 0; guard < 1000000; ++guard) {
    auto r = c.command({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"});
    if (!r)
      return r.error();
    auto* rep = r->get();
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2)
      return caf::make_error(ec::redis_reply, c.where() + ": unexpected reply to SCAN");
    cursor.assign(rep->element[0]->str, rep->element[0]->len);
    for (size_t k = 0; k < rep->element[1]->elements; ++k)
      if (auto err = visit(std::string{rep->element[1]->element[k]->str,
                                       rep->element[1]->element[k]->len}))
        return err;
    if (cursor == "0")
      return caf::none;
  }
  return caf::make_error(ec::redis_reply, c.where() + ": SCAN never ended");
}

caf::expected<std::unique_ptr<cluster_router>> cluster_router::open(const settings& cfg) {
  std::unique_ptr<cluster_router> r{new cluster_router(cfg)};
  std::string failures;
  bool all_final = true;
  for (auto& seed : cfg.cluster_nodes) {
    auto c = connection::open_at(cfg, seed);
    if (!c) {
      failures += (failures.empty() ? "" : "; ") + describe(c.error());
      all_final = all_final && c.error().code() == static_cast<uint8_t>(ec::invalid_config);
      continue;
    }
    if (auto err = r->read_map(**c, seed.host)) {
      failures += (failures.empty() ? "" : "; ") + seed.to_string() + ": " + describe(err);
      all_final = all_final && err.code() == static_cast<uint8_t>(ec::invalid_config);
      continue;
    }
    return r;
  }
  return caf::make_error(all_final ? ec::invalid_config : ec::redis_unavailable,
                         "redis.cluster-nodes: no seed node answered CLUSTER SLOTS: " + failures);
}

caf::error cluster_router::read_map(connection& c, const std::string& host) {
  auto rep = c.command({"CLUSTER", "SLOTS"});
  if (!rep) {
    auto text = describe(rep.error());
    if (text.find("cluster support disabled") != std::string::npos)
      return caf::make_error(ec::invalid_config,
                             c.where() + " is not a Redis Cluster node (cluster support disabled): "
                                         "redis.cluster-nodes selects Redis Cluster mode; for a "
                                         "standalone server set redis.host/redis.port (standalone "
                                         "mode)");
    return rep.error();
  }
  auto m = parse_cluster_slots(rep->get(), host);
  if (!m)
    return m.error();
  map_ = std::move(*m);
  return caf::none;
}

caf::error cluster_router::refresh(const address* first) {
  caf::error last;
  // The primaries this router knows first (their view is the newest the
  // node can have), then the seeds.
  std::vector<address> ask;
  if (first != nullptr)
    ask.push_back(*first);
  for (auto& s : map_.shards())
    ask.push_back(address_of(s.primary));
  for (auto& s : cfg_.cluster_nodes)
    ask.push_back(s);
  for (auto& a : ask) {
    // A lane of its own: never a connection a caller is reading from.
    auto c = at(a, map_lane);
    if (!c) {
      last = c.error();
      continue;
    }
    if (auto err = read_map(**c, a.host)) {
      drop(a, map_lane);
      last = err;
      continue;
    }
    return caf::none;
  }
  return last ? last : caf::make_error(ec::redis_unavailable, "redis.cluster-nodes: no node to ask");
}

caf::expected<connection*> cluster_router::primary(size_t i) {
  if (i >= map_.shards().size())
    return caf::make_error(ec::redis_unavailable, "no shard " + std::to_string(i));
  return at(address_of(map_.shards()[i].primary));
}

caf::expected<connection*> cluster_router::at(const address& to, int lane) {
  std::lock_guard<std::mutex> guard{mtx_};
  if (interrupted_)
    return caf::make_error(ec::redis_unavailable, "redis " + to.to_string() + ": interrupted");
  auto key = std::make_pair(to.to_string(), lane);
  if (auto i = conns_.find(key); i != conns_.end())
    return i->second.get();
  auto c = connection::open_at(cfg_, to);
  if (!c)
    return c.error();
  auto* raw = c->get();
  conns_.emplace(key, std::move(*c));
  return raw;
}

void cluster_router::drop(const address& to, int lane) {
  std::lock_guard<std::mutex> guard{mtx_};
  conns_.erase(std::make_pair(to.to_string(), lane));
}

caf::expected<std::vector<primary_facts>> cluster_router::facts() {
  std::vector<primary_facts> out;
  for (size_t i = 0; i < map_.shards().size(); ++i) {
    auto& s = map_.shards()[i];
    // Never the pipelined lane: its replies may be outstanding.
    auto c = at(address{s.primary.host, s.primary.port}, sync_lane);
    if (!c)
      return c.error();
    primary_facts f;
    f.node_id = s.primary.id;
    f.address = s.primary.address();
    f.slots = s.slots;
    f.replicas = s.replicas.size();
    auto info = (*c)->command({"INFO", "all"});
    if (!info)
      return info.error();
    auto lines = info_lines(info->get());
    f.replid = lines["master_replid"];
    f.replid2 = lines["master_replid2"];
    f.version = lines["redis_version"];
    f.maxmemory_policy = lines["maxmemory_policy"];
    auto role = lines["role"];
    if (role != "master")
      return caf::make_error(ec::redis_unavailable,
                             (*c)->where() + ": the slot map names it a primary but INFO says role "
                               + role + " (a failover in progress)");
    auto ci = (*c)->command({"CLUSTER", "INFO"});
    if (!ci)
      return ci.error();
    auto cl = info_lines(ci->get());
    f.cluster_state = cl["cluster_state"];
    if (auto e = core::parse_decimal(cl["cluster_my_epoch"]))
      f.config_epoch = *e;
    if (auto e = core::parse_decimal(cl["cluster_current_epoch"]))
      f.current_epoch = *e;
    out.push_back(std::move(f));
  }
  return out;
}

void cluster_router::interrupt() {
  std::lock_guard<std::mutex> guard{mtx_};
  interrupted_ = true;
  for (auto& [k, c] : conns_)
    c->interrupt();
}

} // namespace qsp::redis
