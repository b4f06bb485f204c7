#include "app/audit.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "actors/inspection.hpp"
#include "adapters/real_ports.hpp"
#include "core/dispatch.hpp"
#include "core/replay.hpp"
#include "kafka/dispatch_log_consumer.hpp"
#include "messages/types.hpp"
#include "redis/cluster.hpp"
#include "redis/connection.hpp"

namespace qsp::app {

namespace {

using core::audit_findings;
using core::quoted;
using core::replay_model;
using clock_type = std::chrono::steady_clock;

constexpr int exit_ok = 0, exit_refused = 3, exit_unreachable = 4, exit_differences = 5,
              exit_inconclusive = 7;

/// The replay fails (exit 4) when no partition made progress for this long.
constexpr auto stall_limit = std::chrono::seconds(120);
/// Users per pipelined round trip of ZRANGE.
constexpr size_t users_per_chunk = 1000;
/// Records per poll of one partition.
constexpr size_t poll_max = 5000;

struct partition_progress {
  int32_t partition = 0;
  int64_t target = 0;     ///< the stored checkpoint next_offset (0: none)
  int64_t position = 0;   ///< every offset below was delivered or provably passed
  uint64_t records = 0;   ///< data records below the target
  bool done = false;
  std::shared_ptr<partition_reader> reader;
};

int fail(const std::string& what, const caf::error& err) {
  std::cerr << "audit: " << what << ": " << describe(err) << '\n';
  return is_refusal(err) ? exit_refused : exit_unreachable;
}

std::string_view str(const redisReply* r) {
  return r->str != nullptr ? std::string_view{r->str, r->len} : std::string_view{};
}

// -- replay -------------------------------------------------------------------

/// Reads every partition from 0 up to its target into `m`.  Returns an exit
/// code (< 0: success).
int replay(const node_settings& s, std::vector<partition_progress>& parts, replay_model& m,
           const progress_options& progress_opts, std::shared_ptr<status_line> line) {
  std::map<int32_t, int64_t> starts;
  for (auto& pp : parts) {
    if (pp.target <= 0)
      pp.done = true;
    else
      starts[pp.partition] = 0;
  }
  if (starts.empty())
    return -1;
  auto cfg = kafka_config_of(s.projection);
  cfg.client.client_id += "-audit";
  auto log = kafka::dispatch_log_consumer::make(cfg);
  if (!log)
    return fail("consumer", log.error());
  // start() detaches every partition's queue before assigning, so each
  // record reaches its partition's reader (never the consumer queue).
  if (auto ok = (*log)->start(starts); !ok)
    return fail("assign", ok.error());
  for (auto& pp : parts) {
    if (pp.done)
      continue;
    pp.reader = (*log)->reader(pp.partition);
    if (!pp.reader) {
      std::cerr << "audit: no reader for topic " << s.projection.topic << " partition "
                << pp.partition << '\n';
      return exit_unreachable;
    }
  }
  core::json_decoder decoder;
  core::dispatch d;
  std::string why;
  std::vector<log_record> buf;
  auto last_progress = clock_type::now();
  // Offsets passed of all partitions, against the sum of the targets.
  int64_t total = 0;
  for (auto& pp : parts)
    total += std::max<int64_t>(0, pp.target);
  auto passed_offsets = [&] {
    int64_t n = 0;
    for (auto& pp : parts)
      n += pp.target <= 0 ? 0 : pp.done ? pp.target : std::min(pp.position, pp.target);
    return n;
  };
  auto model_size = [&] {
    return format_count(static_cast<int64_t>(m.users.size())) + " users / "
           + format_count(static_cast<int64_t>(m.entries)) + " entries (~"
           + std::to_string(m.approx_bytes() >> 20) + " MiB)";
  };
  progress_display progress{
    "audit", "offsets", progress_opts, std::move(line),
    [](const std::string& text) { std::cerr << text << '\n'; }, s.projection.progress_interval,
    last_progress};
  progress.update(0, total, last_progress);
  for (;;) {
    bool progressed = false, pending = false;
    for (auto& pp : parts) {
      if (pp.done)
        continue;
      buf.clear();
      int64_t passed = -1;
      if (auto ok = pp.reader->poll(poll_max, buf, passed); !ok) {
        progress.abandon();
        return fail("reading topic " + s.projection.topic + " partition "
                      + std::to_string(pp.partition),
                    ok.error());
      }
      for (auto& rec : buf) {
        if (rec.offset >= pp.target) {
          pp.done = true;
          break;
        }
        if (rec.offset < pp.position)
          continue;  // redelivery
        if (!decoder.decode(rec.value, d, why)) {
          progress.abandon();
          std::cerr << "audit: cannot prove: topic " << s.projection.topic << " partition "
                    << pp.partition << " offset " << rec.offset
                    << " is undecodable below the checkpoint next_offset " << pp.target << ": "
                    << why << " (the projection could never have passed it)\n";
          return exit_refused;
        }
        m.apply(d);
        ++pp.records;
        pp.position = rec.offset + 1;
        progressed = true;
      }
      // Partition EOF: every offset below was delivered or is a transaction
      // marker / aborted record.
      if (passed > pp.position) {
        pp.position = std::min(passed, pp.target);
        progressed = true;
      }
      if (pp.position >= pp.target)
        pp.done = true;
      pending = pending || !pp.done;
    }
    if (!pending)
      break;
    auto now = clock_type::now();
    if (progressed) {
      last_progress = now;
    } else if (now - last_progress > stall_limit) {
      progress.abandon();
      for (auto& pp : parts)
        if (!pp.done)
          std::cerr << "audit: topic " << s.projection.topic << " partition " << pp.partition
                    << ": stuck at offset " << pp.position << " of " << pp.target << '\n';
      std::cerr << "audit: the broker delivered nothing for "
                << std::chrono::duration_cast<std::chrono::seconds>(stall_limit).count()
                << " s; giving up\n";
      return exit_unreachable;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    progress.update(passed_offsets(), total, now,
                    progress.due(now) ? "model " + model_size() : std::string{});
  }
  uint64_t records = 0;
  for (auto& pp : parts)
    records += pp.records;
  progress.finish(total, clock_type::now(), format_count(static_cast<int64_t>(records)) + " records");
  if (auto err = (*log)->poll_events())
    return fail("consumer", err);
  return -1;
}

// -- diff ---------------------------------------------------------------------

/// Pipelined ZRANGE WITHSCORES over every user of the model.  Returns an exit
/// code (< 0: success).
int diff(const node_settings& s, const replay_model& m, audit_findings& f) {
  auto cfg = redis_config_of(s.projection);
  // Redis Cluster mode: each user's set is read from the primary of its
  // slot (pipelined per primary); otherwise one connection.
  std::unique_ptr<redis::cluster_router> router;
  std::unique_ptr<redis::connection> single;
  if (!cfg.cluster_nodes.empty()) {
    auto r = redis::cluster_router::open(cfg);
    if (!r)
      return fail("redis", r.error());
    router = std::move(*r);
  } else {
    auto conn = redis::connection::open(cfg);
    if (!conn)
      return fail("redis", conn.error());
    single = std::move(*conn);
  }
  auto conn_for = [&](const std::string& key) -> caf::expected<redis::connection*> {
    if (!router)
      return single.get();
    auto i = router->map().shard_of(redis::key_slot(key));
    if (i < 0)
      return caf::make_error(ec::redis_unavailable, "redis cluster: the slot of " + key
                                                      + " is served by no primary");
    return router->primary(static_cast<size_t>(i));
  };
  std::vector<redis::connection*> target;
  const auto& prefix = s.projection.convs_prefix;
  using user_ref = const std::pair<const std::string,
                                   std::unordered_map<const std::string*, int64_t>>*;
  std::vector<user_ref> chunk;
  std::vector<std::pair<std::string_view, std::string_view>> members;
  std::vector<std::string> keys;
  static const std::string zrange = "ZRANGE", zero = "0", all = "-1", withscores = "WITHSCORES";
  auto flush = [&]() -> int {
    target.clear();
    for (size_t i = 0; i < chunk.size(); ++i) {
      auto c = conn_for(keys[i]);
      if (!c)
        return fail("redis", c.error());
      target.push_back(*c);
      (*c)->append({zrange, keys[i], zero, all, withscores});
    }
    caf::error io;
    // Each connection answers in the order it was asked.
    for (size_t i = 0; i < chunk.size(); ++i) {
      auto& c = *target[i];
      auto r = c.read_reply();
      if (!r) {
        if (r.error().code() == static_cast<uint8_t>(ec::redis_reply)) {
          // WRONGTYPE and the like: the set cannot hold the user's entries.
          auto& [user, expected] = *chunk[i];
          f.users_checked += 1;
          f.entries_checked += expected.size();
          f.missing += expected.size();
          ++f.unreadable_keys;
          audit_findings::sample(f.unreadable_samples, "user " + quoted(user) + " key " + quoted(keys[i])
                                                   + ": " + describe(r.error()) + "; its "
                                                   + std::to_string(expected.size())
                                                   + " entries count as missing");
          continue;
        }
        io = r.error();
        break;
      }
      auto* rep = r->get();
      if (rep->type != REDIS_REPLY_ARRAY) {
        io = caf::make_error(ec::redis_reply,
                             c.where() + ": unexpected reply type to ZRANGE " + keys[i]);
        break;
      }
      members.clear();
      for (size_t j = 0; j + 1 < rep->elements; j += 2)
        members.emplace_back(str(rep->element[j]), str(rep->element[j + 1]));
      core::diff_user(chunk[i]->first, keys[i], chunk[i]->second, m, members, f);
    }
    chunk.clear();
    keys.clear();
    if (io)
      return fail("reading the session sets", io);
    return -1;
  };
  for (auto& u : m.users) {
    chunk.push_back(&u);
    keys.push_back(prefix + u.first);
    if (chunk.size() == users_per_chunk)
      if (int rc = flush(); rc >= 0)
        return rc;
  }
  if (!chunk.empty())
    if (int rc = flush(); rc >= 0)
      return rc;
  return -1;
}

void print_samples(const char* kind, const std::vector<std::string>& v) {
  for (auto& line : v)
    std::cout << "  " << kind << ": " << line << '\n';
}

} // namespace

int cmd_audit(const node_settings& s, const progress_options& progress,
              std::shared_ptr<status_line> line) {
  // 1. The startup inspection: the checkpoints must belong to this log.
  auto ports = make_real_ports(s.projection);
  auto broker = ports->make_inspector();
  if (!broker)
    return fail("kafka", broker.error());
  auto store = ports->make_checkpoint_store();
  if (!store)
    return fail("redis", store.error());
  auto insp = inspect_startup(s.projection, **broker, **store);
  if (!insp)
    return fail("inspection", insp.error());
  if (!insp->ok()) {
    for (auto& p : insp->problems)
      std::cerr << "refused: " << p.to_string() << '\n';
    std::cerr << "audit: cannot prove anything against stored state that does not belong to "
                 "this log ("
              << insp->problems.size() << " problem" << (insp->problems.size() == 1 ? "" : "s")
              << ")\n";
    return exit_refused;
  }
  bool gone = false;
  for (auto& pp : insp->plan.partitions)
    if (pp.low > 0) {
      std::cerr << "audit: cannot prove: partition " << pp.partition << " low=" << pp.low
                << " > 0, history is gone\n";
      gone = true;
    }
  if (gone)
    return exit_refused;

  // 2. Replay [0, next_offset) of every partition, next_offset being the
  // stored checkpoint.  Not the plan's start: in Redis Cluster mode a start
  // is the lowest of the checkpoint and every primary's copy, and a copy
  // behind the checkpoint (a failover that lost writes, or an older copy key
  // a slot move brought back) says where the next start replays from, not
  // what was projected.  Auditing only up to that start counted everything
  // projected above it as unknown and never saw what the failover lost
  // (issue 41: a caught-up node stopped before its replay rewrote the copies).
  std::vector<partition_progress> parts;
  std::vector<std::string> replays;  ///< starts below a checkpoint, with their cause
  for (auto& pp : insp->plan.partitions) {
    partition_progress p;
    p.partition = pp.partition;
    auto stored = insp->validated.next_offsets.find(pp.partition);
    p.target = stored != insp->validated.next_offsets.end() ? stored->second
                                                            : pp.checkpoint.value_or(0);
    if (pp.checkpoint && *pp.checkpoint < p.target) {
      auto cause = insp->copies.replay_cause.find(pp.partition);
      replays.push_back("partition " + std::to_string(pp.partition) + ": the next start replays from "
                        + std::to_string(*pp.checkpoint) + ", below its checkpoint "
                        + std::to_string(p.target)
                        + (cause != insp->copies.replay_cause.end() ? " (" + cause->second + ")"
                                                                    : std::string{}));
    }
    parts.push_back(std::move(p));
  }
  replay_model m;
  auto t0 = clock_type::now();
  if (int rc = replay(s, parts, m, progress, std::move(line)); rc >= 0)
    return rc;
  auto t1 = clock_type::now();

  // 3. Diff with Redis.
  audit_findings f;
  if (int rc = diff(s, m, f); rc >= 0)
    return rc;
  auto t2 = clock_type::now();
  // The log's end now: records that arrived while the audit ran (a running
  // node projects them) explain members as much as those there at the start.
  std::vector<int64_t> high_now;
  for (auto& pp : insp->plan.partitions)
    high_now.push_back(pp.high);
  if (auto later = (*broker)->inspect(s.projection.topic);
      later && later->marks.size() == high_now.size())
    for (size_t i = 0; i < high_now.size(); ++i)
      high_now[i] = std::max(high_now[i], later->marks[i].high);

  // 4. Report.
  auto ms = [](auto d) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  };
  uint64_t records = 0;
  std::cout << "audit of topic " << s.projection.topic << " (cluster " << insp->broker.cluster_id
            << ", topic id " << insp->broker.topic_id << "), namespace " << s.projection.ns
            << ", sets " << s.projection.convs_prefix << "{user}\n";
  std::cout << "replayed (read_committed, from offset 0 up to each checkpoint):\n";
  std::vector<std::string> behind;
  for (size_t i = 0; i < parts.size(); ++i) {
    auto& p = parts[i];
    records += p.records;
    bool stored = insp->validated.next_offsets.count(p.partition) != 0;
    std::cout << "  partition " << p.partition << ": offsets [0, " << p.target << ") "
              << p.records << " records" << (stored ? "" : " (no checkpoint)") << '\n';
    if (p.target < high_now[i])
      behind.push_back("partition " + std::to_string(p.partition) + " next_offset "
                       + std::to_string(p.target) + " < high " + std::to_string(high_now[i]));
  }
  std::cout << "records: " << records << " in " << ms(t1 - t0) << " ms\n";
  std::cout << "model: " << m.users.size() << " users, " << m.entries
            << " entries, " << m.convs.size() << " distinct conversations, ~"
            << (m.approx_bytes() + (1 << 20) - 1) / (1 << 20)
            << " MiB estimated (the model only; it grows with users x conversations per user,"
               " ~50 bytes per entry)\n";
  std::cout << "checked: " << f.users_checked << " users, " << f.entries_checked
            << " entries, " << f.members_read << " members read from Redis in " << ms(t2 - t1)
            << " ms\n";
  std::cout << "missing: " << f.missing << "\n";
  std::cout << "stale: " << f.stale << "\n";
  std::cout << "unknown: " << f.unknown << "\n";
  std::cout << "ahead: " << f.ahead << " (informational, not a difference)\n";
  if (f.unreadable_keys > 0)
    std::cout << "unreadable keys: " << f.unreadable_keys << " (their entries count as missing)\n";
  print_samples("missing", f.missing_samples);
  print_samples("unreadable", f.unreadable_samples);
  print_samples("stale", f.stale_samples);
  print_samples("unknown", f.unknown_samples);
  print_samples("ahead", f.ahead_samples);
  if (f.unknown > 0)
    std::cout << "note: unknown members are members of these users' sets that the log below the "
                 "checkpoints never produced for that user; during a temporary dual write the "
                 "old TCP path (session_tx) may have written them, and records after a "
                 "checkpoint (an unfinished batch, a running node) may have too\n";
  if (f.ahead > 0)
    std::cout << "note: a score above the log's is possible only from records after the "
                 "checkpoint (or a checkpoint-less writer such as the dual write)\n";
  if (!behind.empty()) {
    std::cout << "note: records exist after the checkpoints (";
    for (size_t i = 0; i < behind.size(); ++i)
      std::cout << (i ? "; " : "") << behind[i];
    std::cout << "); audit a caught-up, stopped node for a conclusive result\n";
  }
  for (auto& r : replays)
    std::cout << "note: " << r << "; entries the log below the checkpoint holds and that primary "
                 "lost count as missing until that start\n";
  std::cout << "note: only the sets of users the replayed log addressed are checked\n";
  // Missing and stale entries are differences whatever runs: the writer
  // writes a checkpoint only after Redis acknowledged every ZADD below it,
  // and ZADD GT never lowers a score.  Unknown members are one only when no
  // record after the checkpoints can explain them (issue 42: on a running
  // node, or one stopped before its checkpoints caught up, they are the
  // records it projected past its last checkpoint).
  if (f.missing > 0 || f.stale > 0) {
    std::cout << "verdict: differences found\n";
    return exit_differences;
  }
  if (f.unknown > 0 && !behind.empty()) {
    std::cout << "verdict: inconclusive: " << f.unknown
              << " unknown member(s), and records exist after the checkpoints that may have "
                 "written them (a running node, or one stopped before its checkpoints caught "
                 "up); nothing missing or stale. Audit a caught-up, stopped node to decide\n";
    return exit_inconclusive;
  }
  bool differs = f.unknown > 0;
  std::cout << "verdict: " << (differs ? "differences found" : "consistent") << '\n';
  return differs ? exit_differences : exit_ok;
}

} // namespace qsp::app
