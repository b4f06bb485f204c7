// qsession-projection: the durable session projection as a standalone node.
//
//   qsession-projection <run|catch-up|verify|inspect|audit> [--config-file=PATH] [--group.key=value ...]
//
// Exit codes: 0 ok · 2 bad usage/config · 3 refused · 4 dependency unreachable
//             · 5 audit found differences
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <fstream>
#include <regex>
#include <spdlog/spdlog.h>

#include "caf/actor_system.hpp"
#include "caf/scoped_actor.hpp"

#include "actors/inspection.hpp"
#include "kafka/dispatch_log_consumer.hpp"
#include "qsession/projection.hpp"
#include "adapters/real_ports.hpp"
#include "app/audit.hpp"
#include "app/http.hpp"
#include "app/node_config.hpp"
#include "app/node_main.hpp"
#include "app/progress.hpp"
#include "core/dispatch.hpp"
#include "redis/stores.hpp"

namespace {

using namespace qsp;

constexpr int exit_ok = 0, exit_usage = 2, exit_refused = 3, exit_unreachable = 4,
              exit_not_ready = 6;

const char* usage = R"(usage: qsession-projection <command> [--config-file=PATH] [--<group>.<key>=<value> ...]
       qsession-projection --version

commands:
  run        verify, catch up to this start's H0, serve, keep consuming until SIGTERM/SIGINT
             exit: 0 clean stop, 3 refused, 2 bad usage/config; a refused node stays up in
             state refused (/readyz, /metrics) until stopped, then exits 3 (or 2), unless
             --projection.exit-on-refusal=true
  catch-up   verify, project up to this start's H0, then exit
             exit: 0 caught up, 3 refused, 4 gave up on an unreachable dependency, 2 bad usage
  verify     the startup inspection without consuming or writing; per-partition table
             exit: 0 would start, 3 would refuse, 4 dependency unreachable, 2 bad usage
  inspect    meta, checkpoints and broker state side by side (--json for machines)
             exit: 0, 4, 2
  audit      replay the log (low = 0) up to the checkpoints into a model and diff it with Redis
             exit: 0 consistent, 5 differences found, 7 inconclusive (unknown members only, and
             records after the checkpoints: a running node), 3 cannot prove, 4 unreachable,
             2 bad usage
  cluster    the namespace's ownership table: owner, epoch, heartbeat, status, readiness (--json)
             exit: 0 namespace ready, 6 not ready, 4 Redis unreachable, 2 bad usage

progress (catch-up, audit, and run while it catches up), on stderr:
  --progress=auto|on|off   auto (default): a bar redrawn in place when stderr is a terminal
                           (done/total offsets to H0, %, rate, ETA; ends at 100 % with the
                           final figures), else plain log lines every projection.progress-interval;
                           on: the bar even without a terminal; off: plain lines only
  --progress-redraw=DUR    least time between two redraws of the bar (default: 200ms)

options (config file keys are the same, grouped as [group] key=value):
)";

/// The options' help without what the node refuses (--long-help and
/// --dump-config would print secrets; issue 42: --help advertised them).
std::string help_text(const app::node_config& cfg) {
  std::istringstream in{cfg.help()};
  std::string out;
  for (std::string line; std::getline(in, line);)
    if (line.find("--long-help") == std::string::npos
        && line.find("--dump-config") == std::string::npos)
      out += line + '\n';
  return out;
}

/// Partition p's stored next_offset as it is in Redis ("-" no key,
/// "(missing)" a key without the field), valid or not: verify and inspect
/// show the same.
std::string stored_next_offset(const inspection& r, int32_t p) {
  auto i = r.stored.checkpoints.find(std::to_string(p));
  if (i == r.stored.checkpoints.end())
    return "-";
  auto f = i->second.find("next_offset");
  return f != i->second.end() ? f->second : "(missing)";
}

int exit_for(const caf::error& err) {
  if (code_of(err) == ec::invalid_config)
    return exit_usage; // e.g. a wrong password, a missing ACL permission
  return is_refusal(err) ? exit_refused : exit_unreachable;
}

// -- verify / inspect ----------------------------------------------------------

caf::expected<inspection> inspect_now(const app::node_settings& s) {
  auto ports = make_real_ports(s.projection);
  auto broker = ports->make_inspector();
  if (!broker)
    return broker.error();
  auto store = ports->make_checkpoint_store();
  if (!store)
    return store.error();
  std::shared_ptr<checkpoint_store> st = std::move(*store);
  return inspect_startup(s.projection, **broker, *st);
}

int cmd_verify(const app::node_settings& s) {
  auto r = inspect_now(s);
  if (!r) {
    std::cerr << "verify: " << describe(r.error()) << '\n';
    return exit_for(r.error());
  }
  std::set<int32_t> bad;
  for (auto& p : r->problems)
    if (p.partition)
      bad.insert(*p.partition);
  std::printf("topic %s  cluster_id %s  topic_id %s  partitions %d (expected %d)  redis %s\n",
              s.projection.topic.c_str(), r->broker.cluster_id.c_str(),
              r->broker.topic_id.c_str(), r->broker.partition_count, s.projection.partition_count,
              r->redis_version.c_str());
  std::printf("prerequisites: redis maxmemory-policy %s%s, topic cleanup.policy %s\n",
              r->maxmemory_policy.c_str(),
              s.projection.redis.allow_eviction && r->maxmemory_policy != "noeviction"
                ? " (allowed by redis.allow-eviction)" : "",
              r->broker.cleanup_policy.empty() ? "(not reported)"
                                               : r->broker.cleanup_policy.c_str());
  std::printf("%-9s %12s %12s %12s %6s %12s  %s\n", "partition", "low", "high", "checkpoint",
              "epoch", "start", "verdict");
  for (auto& pp : r->plan.partitions) {
    // The stored checkpoint as inspect shows it, refused or not (issue 42:
    // a refused one read "-", as if there were none).  Not pp.checkpoint:
    // that is where the start plan begins, below the stored one when a
    // Redis Cluster copy replays.
    auto cp = stored_next_offset(*r, pp.partition);
    // The leader epoch stored with the checkpoint: the start is validated
    // against the broker with it (a truncated log refuses once consuming).
    auto e = r->leader_epochs.find(pp.partition);
    auto epoch = e != r->leader_epochs.end() ? std::to_string(e->second) : std::string{"-"};
    auto st = pp.start && !bad.count(pp.partition) ? std::to_string(*pp.start) : std::string{"-"};
    std::string verdict = bad.count(pp.partition) ? "refuse" : core::to_string(pp.v);
    std::printf("%-9d %12lld %12lld %12s %6s %12s  %s\n", pp.partition,
                static_cast<long long>(pp.low), static_cast<long long>(pp.high), cp.c_str(),
                epoch.c_str(), st.c_str(), verdict.c_str());
  }
  for (auto& p : r->problems)
    std::cerr << "refused: " << p.to_string() << '\n';
  if (!r->ok()) {
    std::printf("verdict: would refuse (%zu problem%s)\n", r->problems.size(),
                r->problems.size() == 1 ? "" : "s");
    return exit_refused;
  }
  std::printf("verdict: would start\n");
  return exit_ok;
}

// -- cluster --------------------------------------------------------------------

int cmd_cluster(const app::node_settings& s, bool json) {
  auto store = redis::redis_cluster_store::open(redis_config_of(s.projection));
  if (!store) {
    std::cerr << "cluster: " << describe(store.error()) << '\n';
    return exit_for(store.error());
  }
  auto view = (*store)->view(s.projection.topic, s.projection.partition_count);
  if (!view) {
    std::cerr << "cluster: " << describe(view.error()) << '\n';
    return exit_for(view.error());
  }
  // projection.ownership = all (the default): one node owns every partition
  // and writes no ownership records, so there is no table to judge (issue
  // 42: `cluster` said "NOT ready ... no owner" and exited 6 beside a node
  // whose /readyz was 200).  Said so, exit 0, when the namespace holds no
  // owner record at all and this command's configuration says `all` too.
  bool no_owner = std::none_of(view->begin(), view->end(), [](auto& c) { return !c.owner.empty(); });
  bool ready = std::all_of(view->begin(), view->end(), [](auto& c) { return c.ready; });
  // The namespace's stored state, read once, for the two cases below.
  std::optional<core::stored_state> st;
  if ((!s.projection.clustered() && no_owner) || !ready)
    if (auto cps = redis::redis_checkpoint_store::open(redis_config_of(s.projection)); cps)
      if (auto read = (*cps)->read(s.projection.topic, s.projection.partition_count); read)
        st = std::move(*read);
  if (!s.projection.clustered() && no_owner) {
    if (st && st->meta) {
      auto note = "projection.ownership = all: one node owns every partition and writes no "
                  "ownership table; its GET /readyz is the namespace's readiness, and `verify` "
                  "shows every partition's checkpoint. `cluster` judges namespaces projected "
                  "with ownership static, group or host (docs/CLUSTER.md)";
      if (json) {
        nlohmann::json j;
        j["namespace"] = s.projection.ns;
        j["topic"] = s.projection.topic;
        j["ownership"] = "all";
        j["ready"] = nullptr;
        j["partitions"] = nlohmann::json::array();
        j["note"] = note;
        std::cout << j.dump(2) << '\n';
      } else {
        std::cout << "namespace " << s.projection.ns << ", topic " << s.projection.topic << ": "
                  << note << "\n";
      }
      return exit_ok;
    }
  }
  // A mistyped namespace, topic or partition count looks like an outage in
  // the table ("no owner" everywhere): say what the namespace holds.
  if (!ready && st) {
    if (!st->meta) {
      std::cerr << "cluster: note: " << s.projection.ns << ":meta does not exist: no node has "
                << "projected topic " << s.projection.topic << " in namespace "
                << s.projection.ns << " yet (check --projection.namespace and "
                << "--projection.dispatch-topic)\n";
    } else {
      auto& m = *st->meta;
      auto f = [&](std::string_view k) {
        auto i = m.find(std::string{k});
        return i == m.end() ? std::string{} : i->second;
      };
      if (f(core::fields::dispatch_topic) != s.projection.topic)
        std::cerr << "cluster: note: the namespace's meta is for topic \""
                  << f(core::fields::dispatch_topic) << "\", not " << s.projection.topic << '\n';
      if (f(core::fields::partition_count) != std::to_string(s.projection.partition_count))
        std::cerr << "cluster: note: the namespace's meta says partition_count "
                  << f(core::fields::partition_count) << ", not "
                  << s.projection.partition_count << " (--projection.partition-count)\n";
    }
  }
  auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
               .count();
  if (json) {
    std::cout << app::cluster_table_json(s.projection.ns, s.projection.topic, *view, ready)
              << '\n';
    return ready ? exit_ok : exit_not_ready;
  }
  std::cout << "namespace " << s.projection.ns << ", topic " << s.projection.topic << ": "
            << (ready ? "ready" : "NOT ready") << "\n\n";
  std::cout << fmt::format("{:>9}  {:<24} {:>6} {:>10}  {:<12} {:>22}  {}\n", "partition", "owner",
                           "epoch", "heartbeat", "state", "next_offset / H0", "ready");
  for (auto& c : *view) {
    auto age = c.heartbeat_ms > 0 ? fmt::format("{:.1f}s ago", (now - c.heartbeat_ms) / 1e3)
                                  : std::string{"-"};
    auto prog = c.live ? fmt::format("{} / {}", c.next_offset, c.h0) : std::string{"-"};
    std::cout << fmt::format("{:>9}  {:<24} {:>6} {:>10}  {:<12} {:>22}  {}\n", c.partition,
                             c.owner.empty() ? "-" : c.owner, c.epoch, age,
                             c.live ? c.state : "-", prog, c.ready ? "yes" : "no: " + c.why);
  }
  return ready ? exit_ok : exit_not_ready;
}

int cmd_inspect(const app::node_settings& s, bool json) {
  auto r = inspect_now(s);
  if (!r) {
    std::cerr << "inspect: " << describe(r.error()) << '\n';
    return exit_for(r.error());
  }
  nlohmann::json j;
  j["redis_version"] = r->redis_version;
  j["redis_maxmemory_policy"] = r->maxmemory_policy;
  j["namespace"] = s.projection.ns;
  j["meta"] = r->stored.meta ? nlohmann::json(*r->stored.meta) : nlohmann::json(nullptr);
  j["checkpoints"] = nlohmann::json(r->stored.checkpoints);
  auto& ep = j["epochs"] = nlohmann::json::object();
  for (auto& [p, fields] : r->stored.epochs)
    ep[std::to_string(p)] = fields;
  auto& b = j["broker"];
  b["cluster_id"] = r->broker.cluster_id;
  b["topic"] = s.projection.topic;
  b["topic_id"] = r->broker.topic_id;
  b["partition_count"] = r->broker.partition_count;
  b["retention_ms"] = r->broker.retention_ms;
  b["cleanup_policy"] = r->broker.cleanup_policy;
  auto& parts = b["partitions"] = nlohmann::json::array();
  for (size_t p = 0; p < r->broker.marks.size(); ++p)
    parts.push_back({{"partition", p}, {"low", r->broker.marks[p].low},
                     {"last_stable_offset", r->broker.marks[p].high},
                     {"high_watermark", r->broker.true_high[p]}});
  // Redis Cluster mode: every primary and its copy (docs/DESIGN.md §15).
  if (!r->cluster.shards.empty()) {
    auto& rc = j["redis_cluster"];
    rc["copies_established"] = r->cluster.copies_marked;
    rc["uncovered_slots"] = r->cluster.uncovered;
    auto& shards = rc["shards"] = nlohmann::json::array();
    for (auto& sh : r->cluster.shards) {
      nlohmann::json pos = nlohmann::json::object();
      for (auto& [p, at] : sh.positions)
        pos[std::to_string(p)] = {{"next_offset", at.first}, {"leader_epoch", at.second}};
      shards.push_back({{"node_id", sh.node_id}, {"address", sh.address}, {"role", "master"},
                        {"slots", sh.slots}, {"replicas", sh.replicas}, {"version", sh.version},
                        {"maxmemory_policy", sh.maxmemory_policy},
                        {"cluster_state", sh.cluster_state}, {"replid", sh.replid},
                        {"replid2", sh.replid2}, {"copy", sh.copy},
                        {"copy_replid", sh.copy_replid}, {"slots_grew", sh.slots_grew},
                        {"positions", pos}});
    }
    auto& rp = rc["replay_from"] = nlohmann::json::object();
    for (auto& [p, at] : r->copies.replay_from)
      rp[std::to_string(p)] = at.first;
  }
  auto& probs = j["problems"] = nlohmann::json::array();
  for (auto& p : r->problems)
    probs.push_back(p.to_string());
  if (json) {
    std::cout << j.dump(2) << '\n';
    return exit_ok;
  }
  std::cout << "redis " << r->redis_version << ", maxmemory-policy " << r->maxmemory_policy
            << ", namespace " << s.projection.ns << "\n\nmeta:\n";
  if (r->stored.meta)
    for (auto& [k, v] : *r->stored.meta)
      std::cout << "  " << k << " = " << v << '\n';
  else
    std::cout << "  (absent)\n";
  std::cout << "\nbroker: cluster_id " << r->broker.cluster_id << ", topic " << s.projection.topic
            << ", topic_id " << r->broker.topic_id << ", partitions " << r->broker.partition_count
            << ", retention.ms " << r->broker.retention_ms << ", cleanup.policy "
            << (r->broker.cleanup_policy.empty() ? "(not reported)" : r->broker.cleanup_policy)
            << "\n\n";
  std::printf("%-9s %12s %12s %12s %12s %6s\n", "partition", "low", "lso", "high", "next_offset",
              "epoch");
  for (size_t p = 0; p < r->broker.marks.size(); ++p) {
    auto cp = stored_next_offset(*r, static_cast<int32_t>(p));
    // The stored sidecar as it is: "next_offset/epoch" when it belongs to
    // another offset than the checkpoint (then the start is not validated).
    std::string epoch = "-";
    if (auto e = r->stored.epochs.find(static_cast<int32_t>(p)); e != r->stored.epochs.end()) {
      auto field = [&](const char* f) {
        auto i = e->second.find(f);
        return i != e->second.end() ? i->second : std::string{"?"};
      };
      epoch = field("next_offset") == cp ? field("leader_epoch")
                                         : field("next_offset") + "/" + field("leader_epoch");
    }
    std::printf("%-9zu %12lld %12lld %12lld %12s %6s\n", p,
                static_cast<long long>(r->broker.marks[p].low),
                static_cast<long long>(r->broker.marks[p].high),
                static_cast<long long>(r->broker.true_high[p]), cp.c_str(), epoch.c_str());
  }
  for (auto& [suffix, fields] : r->stored.checkpoints)
    if (!core::parse_decimal(suffix) || *core::parse_decimal(suffix) >= r->broker.partition_count)
      std::cout << "stray checkpoint key suffix \"" << suffix << "\"\n";
  if (!r->cluster.shards.empty()) {
    // Redis Cluster mode: the shards and each partition's position on each.
    std::cout << "\nredis cluster: copies " << (r->cluster.copies_marked ? "established" : "not yet seeded")
              << (r->cluster.uncovered.empty() ? "" : ", unserved slots " + r->cluster.uncovered)
              << "\n";
    std::printf("%-22s %-8s %-6s %-24s %8s  %s\n", "primary", "node", "role", "slots", "replicas",
                "copy");
    for (auto& sh : r->cluster.shards)
      std::printf("%-22s %-8s %-6s %-24s %8zu  %s%s\n", sh.address.c_str(),
                  sh.node_id.substr(0, 8).c_str(), "master", sh.slots.c_str(), sh.replicas,
                  sh.copy.c_str(), sh.slots_grew ? " (slots grew since)" : "");
    std::printf("\n%-9s", "partition");
    for (auto& sh : r->cluster.shards)
      std::printf(" %14s", sh.address.c_str());
    std::printf(" %14s\n", "start");
    for (size_t p = 0; p < r->broker.marks.size(); ++p) {
      std::printf("%-9zu", p);
      for (auto& sh : r->cluster.shards) {
        auto i = sh.positions.find(static_cast<int32_t>(p));
        std::printf(" %14s", i == sh.positions.end() ? "-" : std::to_string(i->second.first).c_str());
      }
      auto rp = r->copies.replay_from.find(static_cast<int32_t>(p));
      std::printf(" %14s\n", rp == r->copies.replay_from.end()
                                ? "checkpoint"
                                : ("replay " + std::to_string(rp->second.first)).c_str());
    }
  }
  for (auto& p : r->problems)
    std::cout << "problem: " << p.to_string() << '\n';
  return exit_ok;
}

// -- run / catch-up -----------------------------------------------------------

int cmd_run(caf::actor_system& sys, const app::node_settings& s, bool catch_up_only,
            sigset_t& signals, std::shared_ptr<spdlog::logger> logger,
            const app::progress_options& progress_opts, std::shared_ptr<app::status_line> line,
            const app::node_hooks& hooks) {
  auto stats = std::make_shared<metrics>();
  spawn_options opts{logger, stats, {}};
  if (hooks.reader)
    opts.reader = hooks.reader(s.projection);
  auto proj = spawn_projection(sys, s.projection, std::move(opts));
  if (!proj) {
    std::cerr << "error: " << describe(proj.error()) << '\n';
    return exit_usage;
  }
  std::unique_ptr<app::http_endpoint> http;
  if (!s.http_host.empty()) {
    http = std::make_unique<app::http_endpoint>(sys, *proj, stats, s.projection.topic);
    auto port = http->start(s.http_host, s.http_port);
    if (!port) {
      std::cerr << "error: " << describe(port.error()) << '\n';
      qsp::anon_mail(atom::shutdown_v).send(*proj);
      return exit_usage;
    }
    logger->info("http on {}:{} (/healthz /readyz /metrics /v1/users/{{user}}/sessions)",
                 s.http_host, *port);
  }
  caf::scoped_actor self{sys};
  qsp::mail(self, atom::subscribe_v, caf::actor_cast<status_listener>(self)).send(*proj);
  app::catch_up_progress progress{progress_opts, std::move(line), logger};
  auto poll_progress = [&] {
    qsp::mail(self, atom::status_v).request(*proj, std::chrono::seconds(5))
      .receive([&](projection_status& st) { progress.on_status(st); },
               [&](caf::error&) { progress.on_status_error(); });
  };
  auto tick = std::min<std::chrono::milliseconds>(std::chrono::milliseconds(200),
                                                  progress_opts.redraw);
  int rc = -1;
  int refused_rc = -1;  ///< run, staying up in state refused: the exit code once stopped
  int failures_in_a_row = 0;
  bool stop = false;
  while (rc < 0 && !stop) {
    self->receive(
      [&](atom::status, projection_status& st) {
        progress.on_status(st);
        if (st.state == "refused") {
          // The projection has logged each problem as a full log line.
          // A configuration error found while running (authentication,
          // authorization, a TLS certificate) is exit 2, like a bad flag.
          auto code = st.last_error.rfind("invalid_config", 0) == 0 ? exit_usage : exit_refused;
          if (catch_up_only || s.exit_on_refusal || !http) {
            rc = code;
          } else if (refused_rc < 0) {
            // A refusal monitoring can see (issue 42): the node stays up in
            // state refused, /readyz answers 503 with last_error and
            // /metrics qsp_state{state="refused"} 1, until it is told to
            // stop; then it exits with the refusal's code.
            refused_rc = code;
            progress.abandon();
            logger->warn("refused: staying up in state refused (GET /readyz has last_error, "
                         "/metrics qsp_state{{state=\"refused\"}} 1) until SIGTERM/SIGINT, then "
                         "exit {} (projection.exit-on-refusal=true exits at once)",
                         code);
          }
        } else if (st.state == "ready") {
          failures_in_a_row = 0;
          if (catch_up_only)
            rc = exit_ok;
        } else if (st.state == "dirty" && catch_up_only
                   && ++failures_in_a_row >= s.catch_up_max_attempts) {
          progress.abandon();
          std::cerr << "catch-up: giving up after " << failures_in_a_row
                    << " failed attempts: " << st.last_error << '\n';
          rc = exit_unreachable;
        }
      },
      caf::after(tick) >> [] {});
    // The bar's snapshot; also once more after `ready`, for the final figures.
    if (progress.wants_status(std::chrono::steady_clock::now()))
      poll_progress();
    timespec zero{0, 0};
    int sig = sigtimedwait(&signals, nullptr, &zero);
    if (sig > 0) {
      progress.abandon();
      logger->info("signal {}: stopping (a second signal exits at once)", sig);
      stop = true;
    }
  }
  progress.abandon();
  if (rc < 0 && refused_rc >= 0)
    rc = refused_rc;
  // Ordered teardown: stop the pipeline (an in-flight batch either finishes
  // with its checkpoint or is abandoned without one; both are safe), then HTTP.
  if (http)
    http->stop();
  self->monitor(*proj);
  qsp::mail(self, atom::shutdown_v).send(*proj);
  bool down = false;
  for (int i = 0; i < 100 && !down; ++i) {
    self->receive([&](caf::down_msg&) { down = true; },
                      [&](atom::status, projection_status&) {},
                      [&](caf::ok_atom) {},
                      [&](caf::error& err) { logger->error("{}", describe(err)); },
                      caf::after(std::chrono::milliseconds(100)) >> [] {});
    timespec zero{0, 0};
    if (sigtimedwait(&signals, nullptr, &zero) > 0) {
      std::fflush(nullptr);
      std::_Exit(rc >= 0 ? rc : 130);
    }
  }
  return rc >= 0 ? rc : exit_ok;
}

} // namespace

int qsp::app::node_main(int argc, char** argv, const node_hooks& hooks) {
  std::vector<std::string> commands{"run", "catch-up", "verify", "inspect", "audit", "cluster"};
  std::string cmd = argc > 1 ? argv[1] : "";
  app::node_config cfg;
  if (cmd == "--version" || cmd == "version") {
    std::cout << "qsession-projection " << QSP_VERSION_STRING << '\n';
    return exit_ok;
  }
  if (cmd.empty() || cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::cout << usage << help_text(cfg);
    return cmd.empty() ? exit_usage : exit_ok;
  }
  if (std::find(commands.begin(), commands.end(), cmd) == commands.end()) {
    std::cerr << "unknown command \"" << cmd << "\"\n" << usage;
    return exit_usage;
  }
  // Block the stop signals in every thread (CAF's included); main polls them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  bool json = false;
  app::progress_options progress;
  bool shows_progress = cmd == "run" || cmd == "catch-up" || cmd == "audit";
  std::vector<char*> args{argv[0]};
  // CAF takes a boolean option as a bare flag (--redis.tls) only: accept
  // --NAME=true and --NAME=false too (a flag that defaults to true, such as
  // redis.tls-verify-hostname, can be turned off only so).
  std::vector<std::string> flags_off;
  // CAF's own options keep their 0.17 names on every CAF (caf_cli_arg).
  std::vector<std::unique_ptr<std::string>> renamed;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (auto eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos
                               && cfg.is_flag_option(a.substr(2, eq - 2))
                               && (a.substr(eq + 1) == "true" || a.substr(eq + 1) == "false")) {
      if (a.substr(eq + 1) == "false") {
        flags_off.push_back(a.substr(2, eq - 2));
      } else {
        argv[i][eq] = '\0'; // the bare flag
        args.push_back(argv[i]);
      }
      continue;
    }
    if (a == "--json" && (cmd == "inspect" || cmd == "cluster"))
      json = true;
    else if (a.rfind("--progress=", 0) == 0 && shows_progress) {
      auto m = app::parse_progress_mode(a.substr(11));
      if (!m) {
        std::cerr << "error: --progress: auto, on or off, got \"" << a.substr(11) << "\"\n";
        return exit_usage;
      }
      progress.mode = *m;
    } else if (a.rfind("--progress-redraw=", 0) == 0 && shows_progress) {
      auto d = app::parse_redraw(a.substr(18));
      if (!d) {
        std::cerr << "error: --progress-redraw: a duration in [1ms, 1min] with a unit (ms or s), "
                     "got \"" << a.substr(18) << "\"\n";
        return exit_usage;
      }
      progress.redraw = *d;
    }
    else if (a == "--dump-config" || a == "--long-help") {
      // CAF would print every value, secrets included.
      std::cerr << "error: " << a << " is not supported (it would print secrets); use --help\n";
      return exit_usage;
    }
    else if (a == "--help" || a == "-h") {
      std::cout << usage << help_text(cfg);
      return exit_ok;
    } else if (auto b = caf_cli_arg(a); b != a) {
      renamed.push_back(std::make_unique<std::string>(std::move(b)));
      args.push_back(renamed.back()->data());
    } else
      args.push_back(argv[i]);
  }
  if (auto err = parse_config(cfg, args)) {
    // CAF names the argument it could not read; say what the option takes
    // (issue 42: "parser_error(unexpected_eof, ...)" for a duration
    // without a unit).
    auto text = caf::to_string(err);
    // CAF 0.17: ... ({"argument" = "--k=v"}); CAF 1.x: ...("--k=v").
    static const std::regex arg_re{R"re("(--([^="]+)=([^"]*))")re"};
    std::smatch m;
    if (std::regex_search(text, m, arg_re)) {
      auto type = cfg.option_type(m[2].str());
      std::string want;
      if (type.find("timespan") != std::string::npos)
        want = "a duration with its unit, e.g. 5s, 500ms or 1min";
      else if (type.find("int") != std::string::npos)
        want = "an integer";
      else if (!type.empty())
        want = "a value of type " + type;
      if (!want.empty()) {
        std::cerr << "error: " << m[1].str() << ": \"" << m[3].str() << "\" is not " << want
                  << " (" << text << ")\n";
        return exit_usage;
      }
    }
    std::cerr << "error: " << text << '\n';
    // The likeliest cause in Redis Cluster mode: a hash-tag namespace left
    // unquoted in the config file ({...} is a CAF dictionary there).
    std::string file = "qsession-projection.conf";
    for (auto* a : args)
      if (std::string_view{a}.rfind("--config-file=", 0) == 0)
        file = std::string{a}.substr(14);
    std::ifstream in{file};
    static const std::regex unquoted{R"(^\s*namespace\s*=\s*\{)"};
    for (std::string line; std::getline(in, line);)
      if (std::regex_search(line, unquoted)) {
        std::cerr << "hint: " << file << ": quote a hash-tag namespace, e.g. namespace = "
                  << "\"{session_projection}\" (unquoted, {...} is a dictionary)\n";
        break;
      }
    return exit_usage;
  }
  if (auto rest = remainder_of(cfg); !rest.empty()) {
    std::cerr << "error: unexpected argument \"" << rest.front() << "\"\n";
    return exit_usage;
  }
  for (auto& name : flags_off)
    cfg.set(name, false);
  // The node's own logger (the process is the node's: it may register it).
  // Its sink keeps the progress bar below the log lines.
  auto line = std::make_shared<app::status_line>(stderr);
  auto logger = std::make_shared<spdlog::logger>("qsp", line);
  spdlog::register_logger(logger);
  spdlog::set_level(spdlog::level::from_str(cfg.log_level));
  logger->set_level(spdlog::level::from_str(cfg.log_level));
  auto settings = app::to_settings(cfg);
  if (!settings) {
    std::cerr << "error: " << describe(settings.error()) << '\n';
    return exit_usage;
  }
  // librdkafka rejects unknown or malformed properties when a client is made:
  // check once here so a typo is a usage error, not a restart loop.
  if (auto probe = kafka::dispatch_log_consumer::make(kafka_config_of(settings->projection)); !probe) {
    std::cerr << "error: " << describe(probe.error()) << '\n';
    return exit_usage;
  }
  // run and catch-up warn through spawn_projection.
  if (cmd != "run" && cmd != "catch-up")
    for (auto& w : security_warnings(settings->projection))
      logger->warn("{}", w);
  if (cmd == "cluster")
    return cmd_cluster(*settings, json);
  if (cmd == "catch-up" && (settings->projection.ownership == ownership_mode::group
                            || settings->projection.ownership == ownership_mode::host)) {
    std::cerr << "error: catch-up: projection.ownership = "
              << to_string(settings->projection.ownership)
              << " takes partitions while running; use run (or ownership all or static)\n";
    return exit_usage;
  }
  if (cmd == "verify")
    return cmd_verify(*settings);
  if (cmd == "inspect")
    return cmd_inspect(*settings, json);
  if (cmd == "audit")
    return app::cmd_audit(*settings, progress, app::bar_enabled(progress.mode) ? line : nullptr);
  caf::actor_system sys{cfg};
  return cmd_run(sys, *settings, cmd == "catch-up", signals, std::move(logger), progress, line,
                 hooks);
}
