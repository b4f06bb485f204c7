// The public test kit (qsession/projection/testkit.hpp): a facade over the
// engine (testkit/engine.hpp) and the simulated world (testkit/world/world.hpp).
// The kit's lifecycle, running and checks; the world's calls are in
// kit_world.cpp.
#include "testkit/kit_impl.hpp"

namespace qsp::testkit {

kit::kit(kit_options opts) : d_(std::make_unique<impl>(opts)) {
  d_->log_to_stderr = opts.log || std::getenv("QSP_TEST_LOG") != nullptr;
}

kit::~kit() = default;

caf::actor_system& kit::system() { return d_->sys; }

projection_settings& kit::settings() { return d_->settings; }

void kit::start() {
  if (d_->proj)
    d_->note("start: the running projection is replaced");
  d_->start();
  if (!d_->proj)
    return;
  ++d_->starts;
  if (d_->starts > 1)
    d_->note("projection #" + std::to_string(d_->starts) + " (a new handle)");
  auto before_hooks = d_->sys.latest_actor_id();
  for (auto& hook : d_->start_hooks)
    hook(*this);
  d_->deliver_start(before_hooks);
}

void kit::on_start(std::function<void(kit&)> hook) {
  if (hook)
    d_->start_hooks.push_back(std::move(hook));
}

size_t kit::starts() const { return d_->starts; }

bool kit::stop() {
  d_->soft.clear();
  if (!d_->proj)
    return true;
  d_->note("stop");
  auto res = d_->ask_timed<caf::ok_atom>(d_->settings.shutdown_timeout + std::chrono::seconds{1},
                                         atom::shutdown_v);
  // A projection that already ended (the actor is gone) has nothing to stop.
  if (!res && code_of(res.error()))
    d_->soft.push_back("stop: " + describe(res.error()));
  d_->proj = nullptr;
  d_->run_jobs();
  return d_->soft.empty();
}

bool kit::restart() {
  d_->note("restart");
  auto stopped = stop();
  start();
  return stopped;
}

projection_actor kit::projection() const { return d_->proj; }

bool kit::assign(const std::vector<int32_t>& partitions) {
  d_->soft.clear();
  d_->note("assign " + internal::list(partitions));
  auto res = d_->ask_timed<caf::ok_atom>(std::chrono::seconds{60}, atom::assign_v, partitions);
  if (!res)
    d_->soft.push_back("assign " + internal::list(partitions) + ": " + describe(res.error()));
  return static_cast<bool>(res);
}

bool kit::revoke(const std::vector<int32_t>& partitions) {
  d_->soft.clear();
  d_->note("revoke " + internal::list(partitions));
  auto res = d_->ask_timed<caf::ok_atom>(std::chrono::seconds{60}, atom::revoke_v, partitions);
  if (!res)
    d_->soft.push_back("revoke " + internal::list(partitions) + ": " + describe(res.error()));
  return static_cast<bool>(res);
}


void kit::assign_async(const std::vector<int32_t>& partitions) {
  d_->note("assign " + internal::list(partitions) + " (not waiting)");
  d_->async_request(true, partitions);
}

void kit::revoke_async(const std::vector<int32_t>& partitions) {
  d_->note("revoke " + internal::list(partitions) + " (not waiting)");
  d_->async_request(false, partitions);
}

// -- time and running ---------------------------------------------------------------

void kit::run() { d_->run_jobs(); }

void kit::advance(caf::timespan d) { d_->run_for(d, d_->settings.idle_poll); }

bool kit::run_until_state(const std::string& state, caf::timespan limit) {
  return d_->until([&] { return d_->state() == state; }, limit, "state " + state);
}

bool kit::run_until_ready(caf::timespan limit) {
  return d_->until([&] { return d_->gate_open(); }, limit, "the gate open");
}

bool kit::run_until_not_ready(caf::timespan limit) {
  return d_->until([&] { return !d_->gate_open(); }, limit, "the gate closed");
}

bool kit::run_until_offset(int32_t p, int64_t next_offset, caf::timespan limit) {
  // Nothing below offset 0: an empty partition is there at once (the
  // projection stores no checkpoint for a partition it has read nothing of).
  if (next_offset <= 0)
    return true;
  return d_->until(
    [&] {
      auto cp = d_->world->checkpoint(p);
      return cp && *cp >= next_offset;
    },
    limit,
    "partition " + std::to_string(p) + "'s stored checkpoint at offset "
      + std::to_string(next_offset) + " or beyond");
}

bool kit::run_until(const std::function<bool()>& done, caf::timespan limit) {
  return d_->until(done, limit, "the test's condition");
}

caf::timespan kit::elapsed() const {
  return d_->rt.now().time_since_epoch() - std::chrono::hours(1);
}

int64_t kit::wall_ms() const { return d_->wall_ms(); }

// -- what the projection says --------------------------------------------------------

std::string kit::state() const { return d_->state(); }

bool kit::ready() const { return d_->gate_open(); }

caf::expected<projection_status> kit::status() {
  return d_->ask_timed<projection_status>(std::chrono::seconds{10}, atom::status_v);
}

caf::expected<partition_status> kit::partition(int32_t p) {
  auto s = status();
  if (!s)
    return s.error();
  for (auto& ps : s->partitions)
    if (ps.partition == p)
      return ps;
  return caf::make_error(ec::invalid_config,
                         "testkit: the projection reports no partition " + std::to_string(p));
}

caf::expected<session_list> kit::pull(const std::string& user, uint32_t limit) {
  // A pull the closed gate answers reads nothing from Redis, so it meets
  // no rollback and the projection claims nothing by it (Redis frozen, for
  // one: the node is still in state ready, but its gate is closed).
  bool gate_was_open = d_->gate_open();
  auto res = d_->ask_timed<session_list>(std::chrono::seconds{10}, atom::pull_v, user, limit);
  if (d_->exemption_ends_when_met && d_->rollback_unmet && gate_was_open) {
    // The pull met the rollback (its connection was reset).  Whatever that
    // set off runs first; a projection still ready then claims Redis holds
    // everything below its checkpoints and H0 (issue 45, rule 6), so the
    // exemptions end here and the checks judge that claim.
    d_->run_jobs();
    d_->rollback_unmet = false;
    if (d_->state() == "ready") {
      d_->note("a pull met the rollback and the projection is still ready: the exemptions end");
      d_->rolled_back = false;
      d_->holes.clear();
      d_->rebase();
      d_->check_invariants();
      // The pushes carry no partitions: ask for them, and hold each H0
      // against what Redis holds now.
      auto s = d_->ask_timed<projection_status>(std::chrono::seconds{10}, atom::status_v);
      if (s && s->ready) {
        lock g{d_->world->mtx};
        for (auto& ps : s->partitions)
          if (auto cp = d_->world->checkpoint(ps.partition); ps.h0 > 0 && (!cp || *cp < ps.h0))
            d_->violation("[ready implies H0] ready after a pull met a rollback, while partition "
                          + std::to_string(ps.partition) + "'s checkpoint is "
                          + (cp ? std::to_string(*cp) : std::string{"<absent>"}) + " < H0 "
                          + std::to_string(ps.h0));
        d_->report();
      }
    }
  }
  return res;
}

const std::vector<projection_status>& kit::statuses() const { return *d_->seen; }

void kit::repeat_status(int times) {
  if (!d_->proj || times <= 0)
    return;
  d_->note("the projection repeats its status " + std::to_string(times) + " time"
           + (times == 1 ? "" : "s"));
  auto sup = caf::actor_cast<supervisor_actor>(d_->proj);
  for (int i = 0; i < times; ++i)
    qsp::anon_mail(atom::repeat_v).send(sup);
  // Only the projection's supervisor runs (until it took the requests),
  // then the pushes are delivered: nothing else moves.
  auto target = caf::actor_cast<caf::abstract_actor*>(d_->proj);
  for (size_t n = 0; n < 100000 && d_->violations.empty()
                     && d_->rt.run_first([&](caf::abstract_actor* a, const caf::message& m) {
                          return a == target && internal::holds<atom::repeat>(a, m);
                        });
       ++n)
    d_->after_job();
  d_->deliver_pushes();
}

void kit::add_invariant(const std::string& name, invariant_check check) {
  if (!check)
    return;
  d_->host_invariants.push_back(
    {name, [this, check = std::move(check)] { return check(*this); }});
}

caf::error kit::unregistered(const std::string& types, const std::string& where) {
  auto what = engine::unregistered_text(where + " carries " + types + " (nothing was sent)");
  d_->note("not sent: " + where + " carries " + types + ", not registered");
  d_->violation(what);
  d_->report();
  return caf::make_error(ec::invalid_config, "testkit: " + what);
}

// -- checks --------------------------------------------------------------------------

std::map<std::string, std::map<std::string, int64_t>> kit::model() {
  return d_->expected_sessions();
}

bool kit::model_equals_redis() {
  d_->soft.clear();
  auto diff = d_->model_diff();
  if (diff.empty())
    return true;
  d_->soft.push_back("Redis differs from the model:\n" + diff);
  return false;
}

bool kit::check_invariants() {
  auto was = d_->checks_on;
  d_->checks_on = true;
  d_->check_invariants();
  d_->checks_on = was;
  d_->report();
  return d_->violations.empty();
}

std::string kit::explain() const {
  if (d_->violations.empty() && d_->soft.empty())
    return {};
  // Every violation once, then what the last wait did not get, the state and
  // the last events, once.  (The engine's failure reports, d_->failures,
  // carry the events too: printing them here printed the events twice.)
  std::string out;
  if (!d_->violations.empty())
    out += "invariant violated:\n" + d_->violations_text();
  for (auto& f : d_->soft)
    out += f + "\n";
  out += "state: " + d_->state() + (d_->gate_open() ? ", gate open" : ", gate closed")
         + "\nlast events:\n";
  for (auto& e : d_->last_events(20))
    out += "  " + e + "\n";
  return out;
}

bool kit::failed() const { return !d_->violations.empty(); }

std::vector<std::string> kit::events(size_t n) const { return d_->last_events(n); }

uint64_t kit::digest() const { return d_->digest; }

} // namespace qsp::testkit
