// The deterministic fixture of the actor tests: a whole projection on CAF's
// test coordinator over the in-memory fakes (tests/support/fakes.hpp).
//
// Include after defining CAF_SUITE.  Drive the system with drive()/run_for()
// (never the fixture's run(): consumers re-arm an idle-poll timer and the
// aggregator a progress timer, so run() would not return).  Both run one job at
// a time and check the safety invariants after every job:
//   - no loss: every committed data record of partition p below p's stored
//     next_offset has all its recipients' entries (score >= created_at);
//     an undecodable record is never below a checkpoint;
//   - nothing invented: every stored (user, conversation, score) is the
//     created_at of a committed data record with that recipient (aborted and
//     open-transaction records are never projected);
//   - monotonic: checkpoints never go backwards (unless a test rebases after
//     editing one) and never pass the LSO; scores never drop, members never vanish;
//   - readiness: while the latest status is "ready", every partition of `h0`
//     (when a test sets it) has a checkpoint >= its H0;
//   - the identity fence: no checkpoint is written past what the consumers
//     had fetched when the last answered identity read *started* (a check
//     that started after the records were fetched), since the last
//     assignment.  A read takes time in the fakes (identity_start, then its
//     answer; fake_world::during_identity runs in between), so a record
//     fetched while a check ran is not covered by that check.
// Violations are collected (a failed CAF_REQUIRE aborts the whole binary in
// CAF 0.17) and reported as a failed check, with their text, when drive()
// gives up or the fixture is destroyed.  Note: CAF 0.17 prints a failed
// CAF_CHECK's expression only at -v 4 (CTest passes it); fail_with() prints
// at the default verbosity.
#pragma once

#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "caf/all.hpp"
#include "caf/test/dsl.hpp"

#include "messages/log.hpp"
#include "actors/projection.hpp"
#include "core/dispatch.hpp"
#include "qsession/projection/projection.hpp"
#include "tests/support/fakes.hpp"

namespace qsp::test {

using namespace std::chrono_literals;

/// The projection's log in tests: silent unless QSP_TEST_LOG is set.
inline log_ptr quiet_log() {
  auto l = std::make_shared<spdlog::logger>("qsp-test");
  if (std::getenv("QSP_TEST_LOG") != nullptr)
    return std::make_shared<const projection_log>(nullptr, "[test] ");
  l->set_level(spdlog::level::off);
  return std::make_shared<const projection_log>(l, "[test] ");
}

struct test_config : caf::actor_system_config {
  test_config() { qsp::register_types(*this); }
};

/// Records every status notification.  (Function actors get their state as
/// spawn arguments: in CAF 0.17 a function actor spawned without arguments
/// dereferences a null shared_ptr<tuple<>>, which UBSan aborts on.)
inline caf::behavior status_recorder(caf::event_based_actor*,
                                     std::shared_ptr<std::vector<projection_status>> log) {
  return {
    [log](atom::status, const projection_status& s) { log->push_back(s); },
  };
}

/// Sends one request to the projection and stores the answer or the error.
template <class T, class... Ts>
void prober(caf::event_based_actor* self, std::shared_ptr<std::optional<caf::expected<T>>> res,
            projection_actor target, Ts... xs) {
  self->request(target, caf::infinite, xs...)
    .then([=](T& x) { *res = std::move(x); }, [=](caf::error& e) { *res = std::move(e); });
}

/// Blocking adapters on the scheduler (the fakes never block), seed 42.
inline projection_options deterministic() {
  projection_options opts;
  opts.detached_io = false;
  opts.seed = 42;
  return opts;
}

struct projection_fixture : test_coordinator_fixture<test_config> {
  std::shared_ptr<fake_world> world = make_world(3);
  std::shared_ptr<fake_port_factory> ports = make_fake_ports(world);
  projection_settings settings;
  std::shared_ptr<metrics> stats = std::make_shared<metrics>();
  std::shared_ptr<const core::decoder> decoder = std::make_shared<core::json_decoder>();
  projection_actor proj;
  caf::actor listener;
  /// Every (atom::status, projection_status) the subscribed listener received.
  std::shared_ptr<std::vector<projection_status>> seen =
    std::make_shared<std::vector<projection_status>>();

  // -- invariant bookkeeping -----------------------------------------------------

  /// Records below floor[p] were projected by an earlier run (not checked).
  std::map<int32_t, int64_t> floor;
  /// Records an operator skipped (an edited checkpoint), not checked.
  std::set<std::pair<int32_t, int64_t>> exempt;
  /// Checkpoint values a test planted (not checked while stored as such).
  std::map<int32_t, int64_t> planted;
  /// When not empty: "ready" implies checkpoint >= h0[p] for every entry.
  std::map<int32_t, int64_t> h0;
  std::map<int32_t, int64_t> last_cp;
  std::map<std::pair<std::string, std::string>, int64_t> last_scores;
  std::vector<std::string> violations;
  uint64_t steps = 0;

  projection_fixture() {
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
    // Status TTLs run on the test clock.
    world->now_ms = [this] {
      return std::chrono::duration_cast<std::chrono::milliseconds>(
               sched.clock().now().time_since_epoch())
        .count();
    };
  }

  ~projection_fixture() override {
    report();
    if (proj) {
      caf::anon_send(proj, atom::shutdown_v);
      sched.run();
    }
    // The base destructor's run() now only fires stale timers of dead actors.
    std::lock_guard<std::recursive_mutex> g{world->mtx};
    world->now_ms = nullptr;
  }

  // -- setup ---------------------------------------------------------------------

  /// Spawns the projection (detached_io off, seed 42) and subscribes the listener.
  void start(projection_options opts = deterministic()) {
    if (settings.partition_count == 0)
      settings.partition_count = world->partition_count();
    listener = sys.spawn(status_recorder, seen);
    if (!opts.logs)
      opts.logs = quiet_log();
    auto p = spawn_projection(sys, settings, ports, decoder, stats, opts);
    if (!p) {
      violations.push_back("spawn_projection failed: " + describe(p.error()));
      return;
    }
    proj = *p;
    self->send(proj, atom::subscribe_v, caf::actor_cast<status_listener>(listener));
  }

  /// Appends n dispatches to p: conversation "p{p}-c{offset}", created_at
  /// 1000 + offset, recipients u{offset % users} and u{(offset + 1) % users}.
  void fill(int32_t p, int n, int users = 5) {
    for (int i = 0; i < n; ++i) {
      auto off = world->end(p);
      world->append(p, "p" + std::to_string(p) + "-c" + std::to_string(off), 1000 + off,
                    {"u" + std::to_string(off % users), "u" + std::to_string((off + 1) % users)});
    }
  }

  /// Pre-seeds meta and a checkpoint per entry, as a previous run left them;
  /// records below are taken as projected (floor).
  void seed_checkpoints(const std::map<int32_t, int64_t>& cps) {
    world->put_meta(world->identity());
    for (auto& [p, next] : cps) {
      world->put_checkpoint(world->identity(), p, next);
      floor[p] = next;
      planted[p] = next;
    }
  }

  // -- observation -------------------------------------------------------------------

  std::string state() const { return seen->empty() ? std::string{} : seen->back().state; }

  std::string last_error() const {
    return seen->empty() ? std::string{} : seen->back().last_error;
  }

  /// Failures of kind `code` so far, as the latest status counts them.
  uint64_t failures_of(const std::string& code) const {
    if (seen->empty())
      return 0;
    auto i = seen->back().failures.find(code);
    return i == seen->back().failures.end() ? 0 : i->second;
  }

  size_t count_state(const std::string& st) const {
    size_t n = 0;
    for (auto& s : *seen)
      n += s.state == st ? 1 : 0;
    return n;
  }

  bool saw(const std::string& st) const { return count_state(st) > 0; }

  /// Asks the projection (from a fresh helper actor) and steps until answered.
  template <class T, class... Ts>
  caf::expected<T> ask(Ts... xs) {
    auto res = std::make_shared<std::optional<caf::expected<T>>>();
    sys.spawn(prober<T, Ts...>, res, proj, xs...);
    for (size_t i = 0; i < 1000000 && !*res && sched.try_run_once(); ++i)
      check_invariants();
    if (!*res)
      return caf::make_error(ec::unspecified, "test: no answer");
    return std::move(**res);
  }

  caf::expected<projection_status> status() { return ask<projection_status>(atom::status_v); }

  caf::expected<session_list> pull(const std::string& user, uint32_t limit) {
    return ask<session_list>(atom::pull_v, user, limit);
  }

  /// What the session store must hold once every committed, decodable record
  /// of every partition (from floor, not exempt) is projected.
  std::map<std::string, std::map<std::string, int64_t>> expected_sessions() {
    std::lock_guard<std::recursive_mutex> g{world->mtx};
    std::map<std::string, std::map<std::string, int64_t>> out;
    for (int32_t p = 0; p < world->partition_count(); ++p) {
      auto& fp = world->part(p);
      for (int64_t off = floor_of(p); off < fp.lso(); ++off) {
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

  // -- driving -----------------------------------------------------------------------

  /// Runs jobs one at a time (checking the invariants after each) and advances
  /// the clock by one idle_poll whenever nothing is runnable, until done() or
  /// `ticks` clock advances.  Stops early on an invariant violation.
  template <class Pred>
  bool drive(Pred done, size_t ticks = 2000) {
    for (size_t i = 0; i <= ticks; ++i) {
      size_t jobs = 0;
      while (violations.empty() && !done() && jobs < 1000000 && sched.try_run_once()) {
        ++jobs;
        check_invariants();
      }
      if (!violations.empty())
        break;
      if (done())
        return true;
      sched.advance_time(settings.idle_poll);
    }
    if (done() && violations.empty())
      return true;
    // Print why before the caller's CAF_REQUIRE aborts the binary.
    report();
    fail_with("drive: condition not reached; " + summary());
    return false;
  }

  bool drive_to(const std::string& st, size_t ticks = 2000) {
    return drive([&] { return state() == st; }, ticks);
  }

  /// Runs every runnable job without moving the clock.
  void run_jobs() {
    while (violations.empty() && sched.try_run_once())
      check_invariants();
  }

  /// Lets `d` of simulated time pass in steps of `step`, running every job.
  void run_for(caf::timespan d, caf::timespan step = 5ms) {
    auto until = sched.clock().now() + d;
    while (violations.empty() && sched.clock().now() < until) {
      while (violations.empty() && sched.try_run_once())
        check_invariants();
      sched.advance_time(std::min<caf::timespan>(step, until - sched.clock().now()));
    }
    while (violations.empty() && sched.try_run_once())
      check_invariants();
  }

  /// Forget the checkpoint history (after a test edited a checkpoint).
  void rebase() { last_cp.clear(); }

  caf::actor_clock::time_point now() { return sched.clock().now(); }

  // -- invariants ----------------------------------------------------------------------

  int64_t floor_of(int32_t p) const {
    auto i = floor.find(p);
    return i == floor.end() ? 0 : i->second;
  }

  const std::optional<core::dispatch>& decoded(int32_t p, int64_t off) {
    auto key = std::make_pair(p, off);
    auto i = decode_cache_.find(key);
    if (i != decode_cache_.end())
      return i->second;
    core::dispatch d;
    std::string why;
    std::optional<core::dispatch> v;
    if (decoder->decode(world->part(p).log[static_cast<size_t>(off)].value, d, why))
      v = std::move(d);
    return decode_cache_.emplace(key, std::move(v)).first->second;
  }

  void violation(std::string what) {
    if (violations.size() < 10)
      violations.push_back("after " + std::to_string(steps) + " steps: " + std::move(what));
  }

  /// Reports the invariant violations (once).
  void report() {
    if (reported_ < violations.size()) {
      reported_ = violations.size();
      fail_with("invariant violated:\n" + violations_text());
    }
  }

  /// A failed check with a message printed at the default verbosity (a failed
  /// CAF_CHECK prints its expression only with -v 4).
  static void fail_with(const std::string& msg) {
    CAF_TEST_PRINT_ERROR(msg);
    caf::test::engine::current_test()->fail(false);
  }

  /// State, last error and checkpoints, for failure messages.
  std::string summary() {
    std::string out = "state " + (state().empty() ? std::string{"<none>"} : state());
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

  std::string violations_text() const {
    std::string out;
    for (auto& v : violations)
      out += v + "\n";
    return out;
  }

  void check_invariants() {
    ++steps;
    std::lock_guard<std::recursive_mutex> g{world->mtx};
    auto where = [](int32_t p, int64_t off) {
      return "partition " + std::to_string(p) + " offset " + std::to_string(off);
    };
    // Checkpoints: monotonic, within the stable log, nothing unprojected below.
    for (int32_t p = 0; p < world->partition_count(); ++p) {
      auto& fp = world->part(p);
      auto cp = world->checkpoint(p);
      if (!cp)
        continue;
      if (auto i = planted.find(p); i != planted.end() && i->second == *cp)
        continue;
      if (*cp > fp.lso())
        violation("checkpoint of partition " + std::to_string(p) + " is " + std::to_string(*cp)
                  + ", past the LSO " + std::to_string(fp.lso()));
      if (auto i = last_cp.find(p); i != last_cp.end() && *cp < i->second)
        violation("checkpoint of partition " + std::to_string(p) + " went back from "
                  + std::to_string(i->second) + " to " + std::to_string(*cp));
      last_cp[p] = *cp;
      auto stop = std::min(*cp, fp.end());
      for (int64_t off = std::max(floor_of(p), fp.low); off < stop; ++off) {
        auto& e = fp.log[static_cast<size_t>(off)];
        if (e.kind != entry_kind::data || exempt.count({p, off}) > 0)
          continue;
        auto& d = decoded(p, off);
        if (!d) {
          violation("checkpoint " + std::to_string(*cp) + " passed the undecodable record at "
                    + where(p, off));
          continue;
        }
        for (auto& r : d->recipients) {
          auto s = world->score(r, d->conversation_id);
          if (!s || *s < d->created_at)
            violation("checkpoint " + std::to_string(*cp) + " passed " + where(p, off) + " but "
                      + r + "/" + d->conversation_id + " is "
                      + (s ? std::to_string(*s) : std::string{"absent"}) + ", want >= "
                      + std::to_string(d->created_at));
        }
      }
    }
    // Nothing invented: every stored score comes from a committed record.
    std::map<std::pair<std::string, std::string>, std::set<int64_t>> allowed;
    for (int32_t p = 0; p < world->partition_count(); ++p) {
      auto& fp = world->part(p);
      for (int64_t off = 0; off < fp.lso(); ++off) {
        auto& e = fp.log[static_cast<size_t>(off)];
        if (e.kind != entry_kind::data)
          continue;
        if (auto& d = decoded(p, off))
          for (auto& r : d->recipients)
            allowed[{r, d->conversation_id}].insert(d->created_at);
      }
    }
    for (auto& [user, convs] : world->sessions)
      for (auto& [conv, score] : convs) {
        auto i = allowed.find({user, conv});
        if (i == allowed.end() || i->second.count(score) == 0)
          violation("stored " + user + "/" + conv + " = " + std::to_string(score)
                    + " is no committed record's created_at");
      }
    // Scores never drop, members never vanish.
    for (auto& [key, prev] : last_scores) {
      auto s = world->score(key.first, key.second);
      if (!s || *s < prev)
        violation("score of " + key.first + "/" + key.second + " dropped from "
                  + std::to_string(prev) + " to " + (s ? std::to_string(*s) : "absent"));
    }
    last_scores.clear();
    for (auto& [user, convs] : world->sessions)
      for (auto& [conv, score] : convs)
        last_scores[{user, conv}] = score;
    // The identity fence, over the world's event log.
    for (; events_seen_ < world->events.size(); ++events_seen_) {
      auto& e = world->events[events_seen_];
      switch (e.what) {
        case fake_event::kind::assigned:
          // A whole new assignment (-1), or one partition added to it: a read
          // begun before covers nothing of what was (re)assigned.
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
          auto i = verified_.find(e.partition);
          if (i == verified_.end() || e.offset > i->second)
            violation("checkpoint of partition " + std::to_string(e.partition) + " written to "
                      + std::to_string(e.offset)
                      + " before an identity check that started after its records were "
                        "fetched (verified up to "
                      + (i == verified_.end() ? std::string{"nothing"} : std::to_string(i->second))
                      + ")");
          break;
        }
      }
    }
    // Readiness never opens before every partition reached H0.
    if (!h0.empty() && state() == "ready")
      for (auto& [p, target] : h0) {
        auto cp = world->checkpoint(p);
        if (target > 0 && (!cp || *cp < target))
          violation("ready while partition " + std::to_string(p) + " is at "
                    + (cp ? std::to_string(*cp) : std::string{"<absent>"}) + " < H0 "
                    + std::to_string(target));
      }
  }

private:
  size_t events_seen_ = 0;
  std::map<int32_t, int64_t> polled_, verified_;
  /// Identity reads under way (by number): what was fetched when each began.
  std::map<int64_t, std::map<int32_t, int64_t>> reads_;
  std::map<std::pair<int32_t, int64_t>, std::optional<core::dispatch>> decode_cache_;
  size_t reported_ = 0;
};

/// True if `err` carries the qsp code `code`.
inline bool has_code(const caf::error& err, ec code) {
  return err.category() == caf::atom("qsp") && err.code() == static_cast<uint8_t>(code);
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

} // namespace qsp::test
