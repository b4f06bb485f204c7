#include "testkit/engine.hpp"

#include <algorithm>
#include <cstdio>

#include "caf/send.hpp"

namespace qsp::test {

log_ptr quiet_log(const std::string& tag) {
  if (std::getenv("QSP_TEST_LOG") != nullptr)
    return std::make_shared<const projection_log>(nullptr, tag);
  auto l = std::make_shared<spdlog::logger>("qsp-test");
  l->set_level(spdlog::level::off);
  return std::make_shared<const projection_log>(l, tag);
}

caf::behavior status_recorder(caf::event_based_actor*,
                              std::shared_ptr<std::vector<projection_status>> log) {
  return {
    [log](atom::status, const projection_status& s) { log->push_back(s); },
  };
}

projection_options deterministic(uint64_t seed) {
  projection_options opts;
  opts.detached_io = false;
  opts.seed = seed;
  return opts;
}

bool has_code(const caf::error& err, ec code) {
  return code_of(err) == code;
}

// -- engine ----------------------------------------------------------------------

engine::engine(int32_t partitions, std::function<void(caf::actor_system_config&)> configure)
  : rt(configure),
    sys(rt.system()),
    self(sys, true),
    world(make_world(partitions)),
    ports(make_fake_ports(world)) {
  exemption_ends_when_met = worlds_are_unkind_as_redis();
  settings.topic = world->topic;
  settings.ns = world->ns;
  settings.max_batch_records = 100;
  settings.idle_poll = 5ms;
  settings.backoff_initial = 100ms;
  settings.backoff_max = 2s;
  settings.progress_interval = 1s;
  // The identity fence answers each checkpoint's request at once; the
  // fence tests set a gap (and the periodic interval) themselves.
  settings.identity_check_min_gap = 0ms;
  // Status TTLs and the projection's wall clock run on the test clock.
  world->now_ms = [this] { return wall_ms(); };
  // CAF 1.x: a message of a type without a meta object is held back by the
  // runtime (it would crash CAF): a failure that names what to do.
  rt.on_unregistered([this](const std::string& what) {
    violation(unregistered_text(what + " (held back, never delivered)"));
  });
}

std::string engine::unregistered_text(const std::string& what) {
  return "[host types registered] " + what
         + ": a host type whose type-ID block is not registered in the kit's actor system. "
           "Register the block before the system exists, in kit_options::configure (in "
           "run_schedule: schedule_host::configure): qsp::add_type_blocks<caf::id_block::"
           "<the host's block>>(cfg) (docs/TESTING.md, section 4)";
}

engine::~engine() {
  report();
  if (proj) {
    qsp::anon_mail(atom::shutdown_v).send(proj);
    rt.run();
  }
  if (listener) {
    caf::anon_send_exit(listener, caf::exit_reason::user_shutdown);
    listener = nullptr;
  }
  proj = nullptr;
  rt.run();
  std::lock_guard<std::recursive_mutex> g{world->mtx};
  world->now_ms = nullptr;
}

int64_t engine::wall_ms() const {
  // 2023-11-14T22:13:20Z plus the simulated time.
  return 1700000000000
         + std::chrono::duration_cast<std::chrono::milliseconds>(
             rt.now().time_since_epoch())
             .count();
}

void engine::start(projection_options opts) {
  if (settings.partition_count == 0)
    settings.partition_count = world->partition_count();
  if (!listener)
    listener = sys.spawn(status_recorder, seen);
  if (!opts.logs) {
    // Tagged as spawn_projection tags a projection's lines (docs/EMBEDDING.md:
    // "[<topic> <namespace>] ", with the node id in the clustered modes).
    auto tag = projection_log::tag_of(settings.topic, settings.ns,
                                      settings.clustered() ? settings.node_id : std::string{});
    opts.logs = log_to_stderr ? std::make_shared<const projection_log>(nullptr, tag)
                              : quiet_log(tag);
  }
  if (!opts.wall_clock)
    opts.wall_clock = [this] { return wall_ms(); };
  {
    std::lock_guard<std::recursive_mutex> g{world->mtx};
    lso_at_start = world->lsos();
  }
  std::shared_ptr<port_factory> used = ports;
  if (host_reader)
    used = std::make_shared<host_reader_ports>(ports, host_reader);
  auto p = spawn_projection(sys, settings, used, decoder, stats, opts);
  if (!p) {
    violations.push_back("spawn_projection failed: " + describe(p.error()));
    return;
  }
  proj = *p;
  note("projection started");
  qsp::mail(self, atom::subscribe_v, caf::actor_cast<status_listener>(listener)).send(proj);
}

void engine::fill(int32_t p, int n, int users) {
  for (int i = 0; i < n; ++i) {
    auto off = world->end(p);
    world->append(p, "p" + std::to_string(p) + "-c" + std::to_string(off), 1000 + off,
                  {"u" + std::to_string(off % users), "u" + std::to_string((off + 1) % users)});
  }
}

void engine::seed_checkpoints(const std::map<int32_t, int64_t>& cps) {
  world->put_meta(world->identity());
  for (auto& [p, next] : cps) {
    world->put_checkpoint(world->identity(), p, next);
    floor[p] = next;
    planted[p] = next;
  }
}

uint64_t engine::failures_of(const std::string& code) const {
  if (seen->empty())
    return 0;
  auto i = seen->back().failures.find(code);
  return i == seen->back().failures.end() ? 0 : i->second;
}

size_t engine::count_state(const std::string& st) const {
  size_t n = 0;
  for (auto& s : *seen)
    n += s.state == st ? 1 : 0;
  return n;
}

std::map<std::string, std::map<std::string, int64_t>> engine::expected_sessions() {
  std::lock_guard<std::recursive_mutex> g{world->mtx};
  std::map<std::string, std::map<std::string, int64_t>> out;
  for (int32_t p = 0; p < world->partition_count(); ++p) {
    auto& fp = world->part(p);
    auto from = retained.count(p) != 0 ? floor_of(p) : std::max(floor_of(p), fp.low);
    for (int64_t off = from; off < fp.lso(); ++off) {
      auto& e = fp.log[static_cast<size_t>(off)];
      if (e.kind != entry_kind::data || exempt.count({p, off}) > 0)
        continue;
      auto& d = decoded(p, off);
      if (!d)
        continue;
      for (auto& r : d->recipients) {
        auto [it, fresh] = out[r].emplace(d->conversation_id, d->created_at);
        if (!fresh && it->second < d->created_at)
          it->second = d->created_at;
      }
    }
  }
  return out;
}

std::string engine::model_diff() {
  auto want = expected_sessions();
  std::lock_guard<std::recursive_mutex> g{world->mtx};
  std::string out;
  int shown = 0;
  auto add = [&](const std::string& line) {
    if (shown++ < 10)
      out += line + "\n";
  };
  auto may_be_evicted = [&](const std::string& user) { return evicted.count(user) > 0; };
  for (auto& [user, convs] : want)
    for (auto& [conv, score] : convs) {
      auto s = world->score(user, conv);
      if (!s && may_be_evicted(user))
        continue;
      if (!s || *s != score)
        add("Redis lacks " + user + "/" + conv + " = " + std::to_string(score) + " (holds "
            + (s ? std::to_string(*s) : std::string{"nothing"}) + ")");
    }
  for (auto& [user, convs] : world->sessions)
    for (auto& [conv, score] : convs) {
      auto u = want.find(user);
      auto r = retired.find({user, conv});
      if ((u == want.end() || u->second.count(conv) == 0)
          && (r == retired.end() || r->second.count(score) == 0))
        add("Redis holds " + user + "/" + conv + " = " + std::to_string(score)
            + ", which no committed record gives");
    }
  if (shown > 10)
    out += "... and " + std::to_string(shown - 10) + " more\n";
  return out;
}

void engine::retire(int32_t p, int64_t from) {
  std::lock_guard<std::recursive_mutex> g{world->mtx};
  auto& fp = world->part(p);
  for (int64_t off = std::max<int64_t>(from, 0); off < fp.lso(); ++off) {
    auto& e = fp.log[static_cast<size_t>(off)];
    if (e.kind != entry_kind::data)
      continue;
    if (auto& d = decoded(p, off))
      for (auto& r : d->recipients)
        retired[{r, d->conversation_id}].insert(d->created_at);
  }
  if (auto cp = world->checkpoint(p); cp && *cp > from)
    planted[p] = *cp;
  last_cp.erase(p);
  lost_checked_.erase(p);
  sessions_dirty_ = true;
}

void engine::shard_failed_over(int32_t shard) {
  std::lock_guard<std::recursive_mutex> g{world->mtx};
  auto& shards = world->cluster.shards;
  slots_lost(shard >= 0 && static_cast<size_t>(shard) < shards.size()
               ? shards[static_cast<size_t>(shard)].slots
               : std::string{});
}

void engine::slots_lost(const std::string& slots) {
  std::lock_guard<std::recursive_mutex> g{world->mtx};
  auto lost = sim::parse_slots(slots);
  for (auto& [p, cp] : world->checkpoints()) {
    auto& h = holes[p];
    h.below = std::max(h.below, cp);
    h.slots.insert(h.slots.end(), lost.begin(), lost.end());
    h.reassigned = false;
  }
  rebase();
}

bool engine::in_hole(int32_t p, int64_t off, const std::string& key) const {
  auto h = holes.find(p);
  return h != holes.end() && off < h->second.below
         && sim::in_ranges(h->second.slots, redis::key_slot(key));
}

bool engine::drive(const std::function<bool()>& done, size_t ticks, bool quiet) {
  for (size_t i = 0; i <= ticks; ++i) {
    size_t jobs = 0;
    while (violations.empty() && !done() && jobs < 1000000 && rt.run_once()) {
      ++jobs;
      after_job();
    }
    if (!check_every_job)
      check_invariants();
    if (!violations.empty())
      break;
    if (done())
      return true;
    rt.advance_time(settings.idle_poll);
  }
  if (done() && violations.empty())
    return true;
  report();
  if (!quiet && violations.empty())
    fail_with("drive: condition not reached; " + summary());
  return false;
}

void engine::run_jobs() {
  while (violations.empty() && rt.run_once())
    after_job();
  if (!check_every_job)
    check_invariants();
}

void engine::run_for(caf::timespan d, caf::timespan step) {
  auto until = rt.now() + d;
  while (violations.empty() && rt.now() < until) {
    run_jobs();
    rt.advance_time(std::min<caf::timespan>(step, until - rt.now()));
  }
  run_jobs();
}

const std::optional<core::dispatch>& engine::decoded(int32_t p, int64_t off) {
  // A recreated topic or an unclean truncation reuses offsets: the cache
  // belongs to one topic id, and an entry is re-decoded if its value changed.
  if (decode_topic_id_ != world->topic_id) {
    decode_cache_.clear();
    decode_topic_id_ = world->topic_id;
  }
  auto key = std::make_pair(p, off);
  auto& value = world->part(p).log[static_cast<size_t>(off)].value;
  auto i = decode_cache_.find(key);
  if (i != decode_cache_.end() && i->second.first == value)
    return i->second.second;
  core::dispatch d;
  std::string why;
  std::optional<core::dispatch> v;
  if (decoder->decode(value, d, why))
    v = std::move(d);
  auto& slot = decode_cache_[key];
  slot = {value, std::move(v)};
  return slot.second;
}

void engine::violation(std::string what) {
  if (violations.size() < 10)
    violations.push_back("after " + std::to_string(steps) + " steps: " + std::move(what));
}

void engine::report() {
  if (reported_ < violations.size()) {
    reported_ = violations.size();
    std::string events;
    for (auto& e : last_events(20))
      events += "  " + e + "\n";
    fail_with("invariant violated:\n" + violations_text() + "last events:\n" + events);
  }
}

void engine::on_failure(const std::string& msg) { failures.push_back(msg); }

std::string engine::summary() {
  std::string out = "state " + (state().empty() ? std::string{"<none>"} : state());
  out += gate_open() ? ", gate open" : ", gate closed";
  if (!seen->empty() && !seen->back().last_error.empty())
    out += ", last error: " + seen->back().last_error;
  out += ", checkpoints:";
  for (auto& [p, cp] : world->checkpoints())
    out += " p" + std::to_string(p) + "=" + std::to_string(cp);
  out += ", LSOs:";
  for (auto& [p, lso] : world->lsos())
    out += " p" + std::to_string(p) + "=" + std::to_string(lso);
  return out + ", after " + std::to_string(steps) + " steps";
}

std::string engine::violations_text() const {
  std::string out;
  for (auto& v : violations)
    out += v + "\n";
  return out;
}

} // namespace qsp::test
