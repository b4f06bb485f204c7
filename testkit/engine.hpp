// The test kit's engine: a whole projection on CAF's deterministic
// runtime (testkit/runtime.hpp) over the simulated world (testkit/world/world.hpp), with the
// invariant checker.  The public qsp::testkit::kit (testkit.hpp) is a facade
// over it; the project's own actor tests (tests/actor/fixture.hpp) use it
// directly for fine-grained access to the world.  It needs no test
// framework: failures go to on_failure(), which the actor tests' GoogleTest
// fixture (tests/actor/fixture.hpp) and the kit override.
//
// Drive the system with drive()/run_for() (never rt.run(): consumers
// re-arm an idle-poll timer and the aggregator a progress timer, so run()
// would not return).  Both check the safety invariants after every job (or,
// with check_every_job off, after every tick of simulated time):
//   - nothing lost: every committed data record of partition p below p's
//     stored next_offset has all its recipients' entries (score >=
//     created_at); an undecodable record is never below a checkpoint;
//   - nothing invented: every stored (user, conversation, score) is the
//     created_at of a committed data record with that recipient (aborted and
//     open-transaction records are never projected);
//   - monotone: checkpoints never go backwards (except across a rollback the
//     test injected: rebase()) and never pass the LSO; scores never drop,
//     members never vanish (same exception, and evictions);
//   - readiness: while the latest status is "ready", every partition it
//     lists has a checkpoint >= its H0, and every H0 covers what was
//     committed when the projection was started (h0 when a test sets it);
//   - the identity fence: no checkpoint is written past what the consumers
//     had fetched when the last answered identity read *started*, since the
//     last assignment.
// (The journal and the checks are defined in testkit/invariants.cpp.)
// Violations are collected and reported through on_failure() with the last
// events that led to them.
#pragma once

#include <chrono>
#include <cstdlib>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"
#include "caf/event_based_actor.hpp"
#include "caf/scoped_actor.hpp"

#include "actors/projection.hpp"
#include "core/dispatch.hpp"
#include "messages/log.hpp"
#include "qsession/projection/projection.hpp"
#include "testkit/world/slots.hpp"
#include "testkit/world/world.hpp"
#include "testkit/runtime.hpp"

namespace qsp::test {

using namespace std::chrono_literals;

/// The projection's log in tests: silent unless QSP_TEST_LOG is set; each
/// line starts with `tag`.
log_ptr quiet_log(const std::string& tag = "[test] ");

/// Records every status notification.  (Function actors get their state as
/// spawn arguments: in CAF 0.17 a function actor spawned without arguments
/// dereferences a null shared_ptr<tuple<>>, which UBSan aborts on.)
caf::behavior status_recorder(caf::event_based_actor*,
                              std::shared_ptr<std::vector<projection_status>> log);

/// Sends one request to the projection and stores the answer or the error.
template <class T, class... Ts>
void prober(caf::event_based_actor* self, std::shared_ptr<std::optional<caf::expected<T>>> res,
            projection_actor target, Ts... xs) {
  qsp::mail(self, xs...)
    .request(target, caf::infinite)
    .then([=](T& x) { *res = std::move(x); }, [=](caf::error& e) { *res = std::move(e); });
}

/// Blocking adapters on the scheduler (the fakes never block), seed 42.
projection_options deterministic(uint64_t seed = 42);

struct engine {
  explicit engine(int32_t partitions = 3,
                  std::function<void(caf::actor_system_config&)> configure = {});
  virtual ~engine();
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;

  /// The deterministic runtime (CAF 0.17's test_coordinator or, on CAF
  /// 1.x, the kit's own scheduler) and its system.
  runtime rt;
  caf::actor_system& sys;
  caf::scoped_actor self;

  std::shared_ptr<fake_world> world;
  std::shared_ptr<fake_port_factory> ports;
  /// A host's own reader (spawn_options::reader) in place of the world's:
  /// the projection then audits its gaps through the world's reader.
  dispatch_log_factory host_reader;
  projection_settings settings;
  std::shared_ptr<metrics> stats = std::make_shared<metrics>();
  std::shared_ptr<const core::decoder> decoder = std::make_shared<core::json_decoder>();
  projection_actor proj;
  caf::actor listener;
  /// Every (atom::status, projection_status) the subscribed listener received.
  std::shared_ptr<std::vector<projection_status>> seen =
    std::make_shared<std::vector<projection_status>>();
  /// Check after every job (the actor tests); off: after every tick.
  bool check_every_job = true;
  /// Judge only what changed since the last check (the kit: its checks run
  /// after every job).  Off (the actor tests): everything, every time, so
  /// direct edits of the world are judged too.
  bool incremental = false;
  /// Checks at all (a test that breaks them on purpose turns them off).
  bool checks_on = true;
  /// The projection's log on stderr (else quiet_log()).
  bool log_to_stderr = false;
  uint64_t seed = 42;

  // -- invariant bookkeeping -----------------------------------------------------

  /// Records below floor[p] were projected by an earlier run (not checked).
  std::map<int32_t, int64_t> floor;
  /// Records an operator skipped (an edited checkpoint), not checked.
  std::set<std::pair<int32_t, int64_t>> exempt;
  /// Users whose convs set was evicted: their entries of records below
  /// these offsets (per partition) may be gone.
  std::map<std::string, std::map<int32_t, int64_t>> evicted;
  /// (user, conversation) -> created_at of records that were committed
  /// and are gone from the log (a recreated topic, an unclean truncation):
  /// Redis may hold them (nothing invented), the model does not require them.
  std::map<std::pair<std::string, std::string>, std::set<int64_t>> retired;
  /// Before records of `p` from `from` on vanish: remembers the committed
  /// ones (retired), and plants the checkpoint if it lies above `from` (the
  /// projection must refuse it; the checker does not judge it).
  void retire(int32_t p, int64_t from);
  /// Checkpoint values a test planted (not checked while stored as such).
  std::map<int32_t, int64_t> planted;
  /// When not empty: "ready" implies checkpoint >= h0[p] for every entry.
  std::map<int32_t, int64_t> h0;
  /// The LSOs when the projection was last started: every H0 it reports
  /// covers them (cleared when the log shrinks: truncation, recreation).
  std::map<int32_t, int64_t> lso_at_start;
  /// Redis was rolled back while the projection was ready: until it
  /// notices (leaves "ready"), its checkpoints may lie below its H0.
  bool rolled_back = false;
  /// The rollback behind rolled_back (or a lossy shard failover) reset the
  /// projection's connections: its next pull meets it.  With
  /// exemption_ends_when_met, once a pull was answered and the projection
  /// is still ready, the exemptions end (rolled_back, holes): ready is a
  /// claim about this Redis again (issue 44; the kit's pull).
  bool rollback_unmet = false;
  /// Off (the default): a ready projection is exempt from [ready implies
  /// H0] and [nothing lost] below a rollback until it leaves ready or is
  /// reassigned.  On (worlds as unkind as Redis, the findings tests): only
  /// until it met the rollback.
  bool exemption_ends_when_met = false;
  /// `shard` lost writes (a failover, a restart, a flush, a loss) while
  /// the projection may be ready: its hole, the rollback exemption, and
  /// whether its next pull meets the loss (`met_by_a_pull`: the
  /// connections reset).
  void shard_rolled_back(int32_t shard, bool met_by_a_pull) {
    shard_failed_over(shard);
    rolled_back = state() == "ready";
    rollback_unmet = rolled_back && met_by_a_pull;
  }
  /// A Redis Cluster shard failed over (Redis Cluster mode): that shard lost
  /// writes below checkpoints kept on other shards, which the projection
  /// repairs from its per-shard copies at its next start (docs/DESIGN.md §15).
  /// Per partition: until it was assigned again after the failover and its
  /// checkpoint then moved past the one it had, entries of users in the
  /// failed shards' slots (as they were at the loss) below that checkpoint
  /// may be missing.  Slots, not shard indexes: a lost key stays lost when
  /// its slot later moves to another shard.
  struct shard_hole {
    int64_t below = 0;
    sim::slot_ranges slots;
    bool reassigned = false;
  };
  std::map<int32_t, shard_hole> holes;
  /// Partitions whose log start rose only past records the projection had
  /// checkpointed (retention): the model keeps what those records gave.
  std::set<int32_t> retained;
  /// Marks a shard failover (see hole): the slots `shard` serves now.
  void shard_failed_over(int32_t shard);
  /// Marks a loss of `slots` (a shard's "a-b,c,..." as it was at the loss).
  void slots_lost(const std::string& slots);
  /// Whether `key` is in a hole of partition `p` below offset `off`.
  bool in_hole(int32_t p, int64_t off, const std::string& key) const;
  std::map<int32_t, int64_t> last_cp;
  std::map<std::pair<std::string, std::string>, int64_t> last_scores;
  std::vector<std::string> violations;
  uint64_t steps = 0;

  // -- setup ---------------------------------------------------------------------

  /// Spawns the projection (detached_io off, seed `seed`) and subscribes the listener.
  void start(projection_options opts);
  void start() { start(deterministic(seed)); }

  /// Appends n dispatches to p: conversation "p{p}-c{offset}", created_at
  /// 1000 + offset, recipients u{offset % users} and u{(offset + 1) % users}.
  void fill(int32_t p, int n, int users = 5);

  /// Pre-seeds meta and a checkpoint per entry, as a previous run left them;
  /// records below are taken as projected (floor).
  void seed_checkpoints(const std::map<int32_t, int64_t>& cps);

  // -- observation -------------------------------------------------------------------

  std::string state() const { return seen->empty() ? std::string{} : seen->back().state; }
  /// The PULL_SESSION_LIST gate as the latest push says (`ready`; in the
  /// clustered modes the namespace's, not only this node's state).
  bool gate_open() const { return !seen->empty() && seen->back().ready; }
  std::string last_error() const {
    return seen->empty() ? std::string{} : seen->back().last_error;
  }
  /// Failures of kind `code` so far, as the latest status counts them.
  uint64_t failures_of(const std::string& code) const;
  size_t count_state(const std::string& st) const;
  bool saw(const std::string& st) const { return count_state(st) > 0; }

  /// Asks the projection (from a fresh helper actor) and steps until answered.
  template <class T, class... Ts>
  caf::expected<T> ask(Ts... xs) {
    auto res = std::make_shared<std::optional<caf::expected<T>>>();
    sys.spawn(prober<T, Ts...>, res, proj, xs...);
    for (size_t i = 0; i < 1000000 && !*res && rt.run_once(); ++i)
      after_job();
    if (!*res)
      return caf::make_error(ec::unspecified, "test: no answer");
    return std::move(**res);
  }
  /// Asks `target` and runs, moving the clock by one idle poll whenever
  /// nothing is runnable, until answered or `limit` of simulated time passed.
  template <class T, class... Ts>
  caf::expected<T> ask_of(projection_actor target, caf::timespan limit, Ts... xs) {
    auto res = std::make_shared<std::optional<caf::expected<T>>>();
    sys.spawn(prober<T, Ts...>, res, target, xs...);
    auto until = now() + limit;
    while (!*res && violations.empty()) {
      if (rt.run_once()) {
        after_job();
        continue;
      }
      if (!check_every_job)
        check_invariants();
      if (now() >= until)
        break;
      rt.advance_time(settings.idle_poll);
    }
    report();
    if (!*res)
      return caf::make_error(ec::unspecified, "test: no answer within the limit");
    return std::move(**res);
  }
  caf::expected<projection_status> status() { return ask<projection_status>(atom::status_v); }
  caf::expected<session_list> pull(const std::string& user, uint32_t limit) {
    return ask<session_list>(atom::pull_v, user, limit);
  }

  /// What the session store must hold once every committed, decodable record
  /// of every partition (from floor, not exempt) is projected.
  std::map<std::string, std::map<std::string, int64_t>> expected_sessions();
  /// Empty if Redis holds exactly expected_sessions() (evicted users: only
  /// their entries of records produced after the eviction), else the first
  /// differences.
  std::string model_diff();

  // -- driving -----------------------------------------------------------------------

  /// Runs jobs one at a time (checking the invariants) and advances the
  /// clock by one idle_poll whenever nothing is runnable, until done() or
  /// `ticks` clock advances.  Stops early on an invariant violation.
  /// `quiet`: a condition not reached is not a failure (the caller decides).
  bool drive(const std::function<bool()>& done, size_t ticks = 2000, bool quiet = false);
  bool drive_to(const std::string& st, size_t ticks = 2000) {
    return drive([&] { return state() == st; }, ticks);
  }
  /// Runs every runnable job without moving the clock.
  void run_jobs();
  /// Lets `d` of simulated time pass in steps of `step`, running every job.
  void run_for(caf::timespan d, caf::timespan step = 5ms);
  /// Forget the checkpoint and score history (after a test edited a
  /// checkpoint, or rolled Redis back).
  void rebase() {
    last_cp.clear();
    last_scores.clear();
    lost_checked_.clear();
    sessions_dirty_ = true;
  }
  caf::actor_clock::time_point now() { return rt.now(); }
  /// Simulated Unix milliseconds (the projection's wall clock).
  int64_t wall_ms() const;

  // -- invariants ----------------------------------------------------------------------

  int64_t floor_of(int32_t p) const {
    auto i = floor.find(p);
    return i == floor.end() ? 0 : i->second;
  }
  const std::optional<core::dispatch>& decoded(int32_t p, int64_t off);
  void violation(std::string what);
  /// The failure for a host type not registered in the kit's actor system:
  /// `what` carried it; the text names the hooks that register it.
  static std::string unregistered_text(const std::string& what);
  /// Reports the invariant violations not reported yet (once each).
  void report();
  /// A failure message; the CAF fixture prints it and fails the test.
  virtual void on_failure(const std::string& msg);
  void fail_with(const std::string& msg) { on_failure(msg); }
  /// Every failure message so far (the default on_failure keeps them).
  std::vector<std::string> failures;
  /// State, last error and checkpoints, for failure messages.
  std::string summary();
  std::string violations_text() const;
  void check_invariants();
  /// Runs first in every check (the kit journals answers here).
  virtual void on_check() {}
  /// Runs after every job, before its check (the kit delivers the status
  /// pushes to its listener there, so its view is never behind the gate).
  virtual void on_job() {}
  /// After one job: on_job(), then checks if check_every_job.
  void after_job() {
    on_job();
    if (check_every_job)
      check_invariants();
  }
  /// Host invariants (the kit's add_invariant): checked with the
  /// projection's, reported as "[name] what broke".
  struct host_invariant {
    std::string name;
    std::function<std::string()> check;
  };
  std::vector<host_invariant> host_invariants;

  // -- the event journal ---------------------------------------------------------------

  /// One line, stamped with the simulated time, into the journal (the kit's
  /// actions; the checker adds the world's events and status changes).
  void note(const std::string& what);
  /// FNV-1a over every journal line so far: equal for equal runs.
  uint64_t digest = 1469598103934665603ull;
  /// The last `n` journal lines, oldest first.
  std::vector<std::string> last_events(size_t n = 20) const;

private:
  void journal_world_events();
  /// True while Redis saw no reset since the last check (a reset may
  /// come with lost writes: judge everything again).
  bool redis_now_same_history() const { return world->redis_resets == resets_seen_; }
  uint64_t resets_seen_ = 0;
  std::map<int32_t, int64_t> lost_checked_;
  std::pair<size_t, uint64_t> redis_seen_{0, 0};
  bool sessions_dirty_ = true;
  std::map<std::pair<std::string, std::string>, std::set<int64_t>> allowed_;
  std::map<int32_t, int64_t> allowed_upto_;
  std::string allowed_topic_;
  size_t events_seen_ = 0;
  size_t events_journaled_ = 0;
  size_t statuses_journaled_ = 0;
  std::deque<std::string> journal_;
  std::map<int32_t, int64_t> polled_, verified_;
  /// Identity reads under way (by number): what was fetched when each began.
  std::map<int64_t, std::map<int32_t, int64_t>> reads_;
  std::map<std::pair<int32_t, int64_t>, std::pair<std::string, std::optional<core::dispatch>>>
    decode_cache_;
  std::string decode_topic_id_;
  size_t reported_ = 0;
};

/// True if `err` carries the qsp code `code`.
bool has_code(const caf::error& err, ec code);

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

} // namespace qsp::test
