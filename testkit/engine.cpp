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
  for (auto& [p, cp] : world->checkpoints()) {
    auto& h = holes[p];
    h.below = std::max(h.below, cp);
    h.shards.insert(shard);
    h.reassigned = false;
  }
  rebase();
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

// -- the journal -------------------------------------------------------------------

void engine::note(const std::string& what) {
  char stamp[32];
  auto ms = std::chrono::duration_cast<std::chrono::microseconds>(
              rt.now().time_since_epoch() - std::chrono::hours(1))
              .count();
  std::snprintf(stamp, sizeof stamp, "[%9.3f ms] ", static_cast<double>(ms) / 1000.0);
  journal_.push_back(stamp + what);
  for (unsigned char c : journal_.back())
    digest = (digest ^ c) * 1099511628211ull;
  if (journal_.size() > 5000)
    journal_.pop_front();
}

std::vector<std::string> engine::last_events(size_t n) const {
  auto from = journal_.size() > n ? journal_.size() - n : 0;
  return {journal_.begin() + static_cast<std::ptrdiff_t>(from), journal_.end()};
}

void engine::journal_world_events() {
  for (; events_journaled_ < world->events.size(); ++events_journaled_) {
    auto& e = world->events[events_journaled_];
    auto p = " partition " + std::to_string(e.partition);
    switch (e.what) {
      case fake_event::kind::fetched:
        if (polled_.count(e.partition) == 0 || e.offset > polled_[e.partition])
          note("fetched" + p + " up to " + std::to_string(e.offset));
        break;
      case fake_event::kind::assigned:
        note(e.partition < 0 ? std::string{"consumer assigned"}
                             : "assigned" + p + " from " + std::to_string(e.offset));
        break;
      case fake_event::kind::checkpoint:
        note("checkpoint" + p + " written: " + std::to_string(e.offset));
        break;
      case fake_event::kind::identity_start:
        note("identity read #" + std::to_string(e.offset) + " started");
        break;
      case fake_event::kind::identity:
        note("identity read #" + std::to_string(e.offset) + " answered");
        break;
      case fake_event::kind::identity_failed:
        note("identity read #" + std::to_string(e.offset) + " failed");
        break;
    }
  }
  for (; statuses_journaled_ < seen->size(); ++statuses_journaled_) {
    auto& s = (*seen)[statuses_journaled_];
    auto prev = statuses_journaled_ > 0 ? &(*seen)[statuses_journaled_ - 1] : nullptr;
    if (prev == nullptr || prev->state != s.state)
      note("state " + s.state
           + (s.last_error.empty() ? std::string{} : " (" + s.last_error + ")"));
    // The gate (what a pull sees) has a line of its own: in the clustered
    // modes it closes while this node's state stays ready.
    if (s.ready != (prev != nullptr && prev->ready)) {
      std::string held;
      if (!s.ready && s.state == "ready")
        for (auto& c : s.cluster)
          if (!c.ready)
            held += (held.empty() ? ": namespace not ready: " : "; ") + std::to_string(c.partition)
                    + ": " + c.why;
      note(s.ready ? std::string{"gate open"} : "gate closed" + held);
    }
  }
}

// -- invariants --------------------------------------------------------------------

void engine::check_invariants() {
  ++steps;
  on_check();
  if (!checks_on)
    return;
  std::lock_guard<std::recursive_mutex> g{world->mtx};
  journal_world_events();
  auto where = [](int32_t p, int64_t off) {
    return "partition " + std::to_string(p) + " offset " + std::to_string(off);
  };
  auto evicted_below = [&](const std::string& user, int32_t p) -> int64_t {
    auto u = evicted.find(user);
    if (u == evicted.end())
      return 0;
    auto i = u->second.find(p);
    return i == u->second.end() ? 0 : i->second;
  };
  // Checkpoints: monotone, within the stable log, nothing unprojected below.
  for (int32_t p = 0; p < world->partition_count(); ++p) {
    auto& fp = world->part(p);
    auto cp = world->checkpoint(p);
    if (!cp)
      continue;
    if (auto i = planted.find(p); i != planted.end() && i->second == *cp)
      continue;
    if (*cp > fp.lso())
      violation("[in the log] checkpoint of partition " + std::to_string(p) + " is "
                + std::to_string(*cp) + ", past the LSO " + std::to_string(fp.lso()));
    if (auto i = last_cp.find(p); i != last_cp.end() && *cp < i->second)
      violation("[monotone] checkpoint of partition " + std::to_string(p) + " went back from "
                + std::to_string(i->second) + " to " + std::to_string(*cp));
    last_cp[p] = *cp;
    auto stop = std::min(*cp, fp.end());
    // Incremental: what was judged intact stays so until Redis loses
    // something the kit injected (rebase() starts over) or changes (a
    // dropped score is caught by the monotone check).
    auto from = std::max(floor_of(p), fp.low);
    if (incremental && redis_now_same_history())
      from = std::max(from, std::min(lost_checked_[p], stop));
    lost_checked_[p] = stop;
    for (int64_t off = from; off < stop; ++off) {
      auto& e = fp.log[static_cast<size_t>(off)];
      if (e.kind != entry_kind::data || exempt.count({p, off}) > 0)
        continue;
      auto& d = decoded(p, off);
      if (!d) {
        violation("[nothing lost] checkpoint " + std::to_string(*cp)
                  + " passed the undecodable record at " + where(p, off));
        continue;
      }
      for (auto& r : d->recipients) {
        if (off < evicted_below(r, p))
          continue;
        if (auto h = holes.find(p); h != holes.end() && off < h->second.below
                                    && h->second.shards.count(
                                         world->shard_of(world->convs_prefix + r)) > 0)
          continue;
        auto s = world->score(r, d->conversation_id);
        if (!s || *s < d->created_at)
          violation("[nothing lost] checkpoint " + std::to_string(*cp) + " passed "
                    + where(p, off) + " but " + r + "/" + d->conversation_id + " is "
                    + (s ? std::to_string(*s) : std::string{"absent"}) + ", want >= "
                    + std::to_string(d->created_at));
      }
    }
  }
  resets_seen_ = world->redis_resets;
  // Nothing invented: every stored score comes from a committed record.
  // Incremental: the allowed scores grow with the LSOs (rebuilt when a log
  // shrank or the topic changed), and Redis' sets are judged only after
  // Redis changed (a write or a reset since the last check).
  auto redis_now = std::make_pair(world->redis_writes(), world->redis_resets);
  bool redis_changed = !incremental || redis_now != redis_seen_ || sessions_dirty_;
  redis_seen_ = redis_now;
  sessions_dirty_ = false;
  bool rebuild = !incremental || allowed_topic_ != world->topic_id;
  for (auto& [p, upto] : allowed_upto_)
    if (p >= world->partition_count() || world->lso(p) < upto)
      rebuild = true;
  if (rebuild) {
    allowed_ = retired;
    allowed_upto_.clear();
    allowed_topic_ = world->topic_id;
    redis_changed = true;
  }
  for (int32_t p = 0; p < world->partition_count(); ++p) {
    auto& fp = world->part(p);
    auto& upto = allowed_upto_[p];
    for (int64_t off = upto; off < fp.lso(); ++off) {
      auto& e = fp.log[static_cast<size_t>(off)];
      if (e.kind != entry_kind::data)
        continue;
      if (auto& d = decoded(p, off))
        for (auto& r : d->recipients)
          allowed_[{r, d->conversation_id}].insert(d->created_at);
    }
    upto = std::max(upto, fp.lso());
  }
  if (redis_changed) {
    for (auto& [user, convs] : world->sessions)
      for (auto& [conv, score] : convs) {
        auto i = allowed_.find({user, conv});
        if (i == allowed_.end() || i->second.count(score) == 0)
          violation("[nothing invented] stored " + user + "/" + conv + " = "
                    + std::to_string(score) + " is no committed record's created_at");
      }
    for (auto& [key, prev] : last_scores) {
      auto s = world->score(key.first, key.second);
      if ((!s && evicted.count(key.first) == 0) || (s && *s < prev))
        violation("[monotone] score of " + key.first + "/" + key.second + " dropped from "
                  + std::to_string(prev) + " to " + (s ? std::to_string(*s) : "absent"));
    }
    last_scores.clear();
    for (auto& [user, convs] : world->sessions)
      for (auto& [conv, score] : convs)
        last_scores[{user, conv}] = score;
  }
  // The identity fence, over the world's event log.
  for (; events_seen_ < world->events.size(); ++events_seen_) {
    auto& e = world->events[events_seen_];
    switch (e.what) {
      case fake_event::kind::assigned:
        // A whole new assignment (-1), or one partition added to it: a read
        // begun before covers nothing of what was (re)assigned.
        for (auto& [hp, h] : holes)
          if (e.partition < 0 || e.partition == hp)
            h.reassigned = true;
        if (e.partition < 0) {
          polled_.clear();
          verified_.clear();
          reads_.clear();
        } else {
          polled_.erase(e.partition);
          verified_.erase(e.partition);
          for (auto& [id, snap] : reads_)
            snap.erase(e.partition);
        }
        break;
      case fake_event::kind::fetched:
        polled_[e.partition] = std::max(polled_[e.partition], e.offset);
        break;
      case fake_event::kind::identity_start:
        reads_[e.offset] = polled_;
        break;
      case fake_event::kind::identity:
        // The answer covers what was fetched when the read began, not
        // what was fetched while it ran.  (Reads may overlap: each covers
        // its own start, so keep the furthest.)
        if (auto r = reads_.find(e.offset); r != reads_.end()) {
          for (auto& [p, off] : r->second)
            verified_[p] = std::max(verified_[p], off);
          reads_.erase(r);
        }
        break;
      case fake_event::kind::identity_failed:
        reads_.erase(e.offset);
        break;
      case fake_event::kind::checkpoint: {
        // A partition replayed after the shard failover: its hole is closed
        // (every ZADD below a checkpoint was confirmed first); judge it whole.
        if (auto h = holes.find(e.partition);
            h != holes.end() && h->second.reassigned && e.offset > h->second.below) {
          holes.erase(h);
          lost_checked_.erase(e.partition);
        }
        auto i = verified_.find(e.partition);
        if (i == verified_.end() || e.offset > i->second)
          violation("[identity fence] checkpoint of partition " + std::to_string(e.partition)
                    + " written to " + std::to_string(e.offset)
                    + " before an identity check that started after its records were "
                      "fetched (verified up to "
                    + (i == verified_.end() ? std::string{"nothing"} : std::to_string(i->second))
                    + ")");
        break;
      }
    }
  }
  // Readiness never opens before every partition reached H0.
  for (auto i = lso_at_start.begin(); i != lso_at_start.end();)
    if (i->first >= world->partition_count() || world->lso(i->first) < i->second)
      i = lso_at_start.erase(i); // the log shrank (truncation, recreation)
    else
      ++i;
  // The host's own invariants (the kit's add_invariant), named as these are.
  for (auto& h : host_invariants)
    if (h.check)
      if (auto broke = h.check(); !broke.empty())
        violation("[" + h.name + "] " + broke);
  if (state() != "ready")
    rolled_back = false;
  // The shard hole closes once the projection restarted and is ready again.

  if (state() == "ready") {
    for (auto& [p, target] : h0) {
      auto cp = world->checkpoint(p);
      if (target > 0 && (!cp || *cp < target))
        violation("[ready implies H0] ready while partition " + std::to_string(p) + " is at "
                  + (cp ? std::to_string(*cp) : std::string{"<absent>"}) + " < H0 "
                  + std::to_string(target));
    }
    for (auto& ps : seen->back().partitions) {
      auto cp = world->checkpoint(ps.partition);
      if (ps.h0 > 0 && ps.next_offset < ps.h0)
        violation("[ready implies H0] ready while partition " + std::to_string(ps.partition)
                  + " reports next_offset " + std::to_string(ps.next_offset) + " < H0 "
                  + std::to_string(ps.h0));
      if (ps.h0 > 0 && !rolled_back && (!cp || *cp < ps.h0))
        violation("[ready implies H0] ready while partition " + std::to_string(ps.partition)
                  + "'s checkpoint is " + (cp ? std::to_string(*cp) : std::string{"<absent>"})
                  + " < H0 " + std::to_string(ps.h0));
      if (auto i = lso_at_start.find(ps.partition); i != lso_at_start.end() && ps.h0 < i->second)
        violation("[ready implies H0] partition " + std::to_string(ps.partition) + "'s H0 "
                  + std::to_string(ps.h0) + " is below the LSO " + std::to_string(i->second)
                  + " it had when the projection was started");
    }
  }
}

} // namespace qsp::test
