// The public test kit (qsession/projection/testkit.hpp): a facade over the
// engine (testkit/engine.hpp) and the simulated world (testkit/world/world.hpp).
#include "qsession/projection/testkit.hpp"

#include <algorithm>

#include "caf/mailbox_element.hpp"
#include "caf/scheduled_actor.hpp"
#include "caf/send.hpp"

#include "messages/actors.hpp"
#include "testkit/engine.hpp"

namespace qsp::testkit {

using test::engine;
using lock = std::lock_guard<std::recursive_mutex>;

namespace {

std::string list(const std::vector<int32_t>& xs) {
  std::string out;
  for (auto x : xs)
    out += (out.empty() ? "" : ",") + std::to_string(x);
  return out;
}


/// Sends one ownership request and journals its answer.
void ownership_request(caf::event_based_actor* self, std::shared_ptr<std::string> answer,
                       projection_actor target, bool assign, std::vector<int32_t> parts) {
  auto what = std::string{assign ? "assign " : "revoke "} + list(parts);
  auto req = assign ? qsp::mail(self, atom::assign_v, parts).request(target, caf::infinite)
                    : qsp::mail(self, atom::revoke_v, parts).request(target, caf::infinite);
  std::move(req).then([answer, what](caf::ok_atom) { *answer = what + " answered ok"; },
           [answer, what](caf::error& e) { *answer = what + " answered " + describe(e); });
}

/// True if `job` is an actor with a message (Ts...) in its mailbox.  (The
/// kit's only look into CAF's scheduler beyond driving it: which actors
/// still hold a status push.)
template <class... Ts>
bool holds(caf::abstract_actor*, const caf::message& msg) {
  return msg.match_elements<Ts...>();
}

} // namespace

struct kit::impl : engine {
  impl(const kit_options& o) : engine(o.partitions, o.configure), opts(o) {
    check_every_job = o.check_every_step;
    incremental = true;
    seed = o.seed;
    {
      lock g{world->mtx};
      world->topic = o.topic;
      world->ns = o.ns;
      world->lazy_pipeline = true;
      if (o.redis_shards > 0)
        world->make_redis_cluster(o.redis_shards);
    }
    settings.topic = o.topic;
    settings.ns = o.ns;
    // The configured values from the start (the engine would fill the
    // partition count only at start()).
    settings.partition_count = world->partition_count();
    if (o.reader)
      host_reader = [w = world, layer = o.reader]() -> caf::expected<std::shared_ptr<dispatch_log>> {
        auto simulated = make_fake_ports(w)->make_dispatch_log();
        if (!simulated)
          return simulated.error();
        return layer(std::move(*simulated));
      };
    if (o.redis_shards > 0) {
      // Redis Cluster mode: the namespace is a hash tag (docs/DESIGN.md §15).
      if (settings.ns.empty() || settings.ns.front() != '{')
        settings.ns = "{" + settings.ns + "}";
      lock g{world->mtx};
      world->ns = settings.ns;
      for (int32_t i = 0; i < o.redis_shards; ++i)
        settings.redis.cluster_nodes.push_back("127.0.0.1:" + std::to_string(7000 + i));
    }
  }

  void on_failure(const std::string& msg) override { failures.push_back(msg); }
  void on_check() override { journal_answers(); }
  /// The kit's listener gets each push right after the job that sent it:
  /// the kit's view (state(), ready()) is never behind the projection's gate.
  void on_job() override {
    if (!listener)
      return;
    auto target = caf::actor_cast<caf::abstract_actor*>(listener);
    for (int i = 0; i < 10000 && rt.run_first_of([&](caf::abstract_actor* a) { return a == target; });
         ++i)
      ;
  }

  /// Runs the actors that still hold a status push (a host's listeners),
  /// each until it took its pushes, without moving the clock and without
  /// running anything else: when a kit call returns, every subscriber has
  /// the pushes the kit's view has.
  void deliver_pushes() {
    for (size_t n = 0; n < 100000 && violations.empty(); ++n) {
      if (!rt.run_first(holds<atom::status, projection_status>))
        break;
      after_job();
    }
    report();
  }

  /// start() and restart() return as the other calls do (docs/TESTING.md
  /// §2): the actors the on_start hooks spawned (ids above `hooks_from`)
  /// have started, the projection took the subscriptions sent so far (the
  /// kit's and theirs) and every subscriber has its first push.  Nothing
  /// else runs, and the clock does not move: the projection's own actors
  /// have not begun (no verification, no Redis call yet).
  void deliver_start(caf::actor_id hooks_from) {
    auto hooks_to = hooks_from;
    // The hooks' actors start (and run whatever they were sent), and the
    // actors they spawn meanwhile with them; the projection's supervisor
    // has not run yet, so every actor above `hooks_from` is the host's.
    for (size_t n = 0; n < 100000 && violations.empty()
                       && rt.run_first_of([&](caf::abstract_actor* a) { return a->id() > hooks_from; });
         ++n)
      after_job();
    hooks_to = sys.latest_actor_id();
    auto target = caf::actor_cast<caf::abstract_actor*>(proj);
    for (size_t n = 0; n < 100000 && violations.empty(); ++n) {
      // The supervisor takes the subscriptions (after starting, which
      // spawns its children: they do not run here), pushing the status to
      // each new subscriber; the hooks' actors take their pushes.
      if (rt.run_first([&](caf::abstract_actor* a, const caf::message& m) {
            return a == target && holds<atom::subscribe, status_listener>(a, m);
          })) {
        after_job();
        continue;
      }
      if (rt.run_first([&](caf::abstract_actor* a, const caf::message& m) {
            return (a->id() > hooks_from && a->id() <= hooks_to)
                   || holds<atom::status, projection_status>(a, m);
          })) {
        after_job();
        continue;
      }
      break;
    }
    report();
  }

  /// Asks the projection, moving the clock while nothing is runnable.
  template <class T, class... Ts>
  caf::expected<T> ask_timed(caf::timespan limit, Ts... xs) {
    if (!proj)
      return caf::make_error(ec::unspecified, "testkit: the projection is not started");
    auto res = ask_of<T>(proj, limit, xs...);
    deliver_pushes();
    return res;
  }

  bool until(const std::function<bool()>& done, caf::timespan limit, const std::string& what) {
    soft.clear();
    auto ticks = static_cast<size_t>(limit / settings.idle_poll) + 1;
    bool reached = drive(done, ticks, true);
    deliver_pushes();
    if (reached && violations.empty())
      return true;
    if (violations.empty())
      soft.push_back("not reached within " + std::to_string(limit / std::chrono::milliseconds{1})
                         + " ms of simulated time: " + what + "; " + summary());
    return false;
  }

  /// An ownership request whose answer is journaled when it comes.
  void async_request(bool assign, const std::vector<int32_t>& parts) {
    if (!proj)
      return;
    auto answer = std::make_shared<std::string>();
    answers.push_back(answer);
    sys.spawn(ownership_request, answer, proj, assign, parts);
  }

  /// Journals the answers that came since the last call.
  void journal_answers() {
    for (auto i = answers.begin(); i != answers.end();)
      if (!(*i)->empty()) {
        note(**i);
        i = answers.erase(i);
      } else {
        ++i;
      }
  }

  kit_options opts;
  std::vector<std::function<void(kit&)>> start_hooks;
  size_t starts = 0;
  /// What the last waiting call (run_until_*, assign, revoke, stop,
  /// model_equals_redis) did not get: in explain(), not in failed().
  std::vector<std::string> soft;
  std::vector<std::shared_ptr<std::string>> answers;
};


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
  d_->note("assign " + list(partitions));
  auto res = d_->ask_timed<caf::ok_atom>(std::chrono::seconds{60}, atom::assign_v, partitions);
  if (!res)
    d_->soft.push_back("assign " + list(partitions) + ": " + describe(res.error()));
  return static_cast<bool>(res);
}

bool kit::revoke(const std::vector<int32_t>& partitions) {
  d_->soft.clear();
  d_->note("revoke " + list(partitions));
  auto res = d_->ask_timed<caf::ok_atom>(std::chrono::seconds{60}, atom::revoke_v, partitions);
  if (!res)
    d_->soft.push_back("revoke " + list(partitions) + ": " + describe(res.error()));
  return static_cast<bool>(res);
}


void kit::assign_async(const std::vector<int32_t>& partitions) {
  d_->note("assign " + list(partitions) + " (not waiting)");
  d_->async_request(true, partitions);
}

void kit::revoke_async(const std::vector<int32_t>& partitions) {
  d_->note("revoke " + list(partitions) + " (not waiting)");
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
  return d_->ask_timed<session_list>(std::chrono::seconds{10}, atom::pull_v, user, limit);
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
                          return a == target && holds<atom::repeat>(a, m);
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

// -- the dispatch log ----------------------------------------------------------------

int64_t kit::produce(int32_t p, const std::string& conversation, int64_t created_at,
                     const std::vector<std::string>& recipients) {
  lock g{d_->world->mtx};
  auto off = d_->world->append(p, conversation, created_at, recipients);
  d_->note("produce partition " + std::to_string(p) + " offset " + std::to_string(off));
  return off;
}

int64_t kit::produce_raw(int32_t p, const std::string& value) {
  lock g{d_->world->mtx};
  auto off = d_->world->append_raw(p, value);
  d_->note("produce raw record at partition " + std::to_string(p) + " offset "
           + std::to_string(off));
  return off;
}

int64_t kit::begin_transaction(int32_t p) {
  lock g{d_->world->mtx};
  auto txn = d_->world->begin_txn(p);
  d_->note("begin transaction " + std::to_string(txn) + " on partition " + std::to_string(p));
  return txn;
}

int64_t kit::produce_in(int32_t p, int64_t txn, const std::string& conversation,
                        int64_t created_at, const std::vector<std::string>& recipients) {
  lock g{d_->world->mtx};
  core::dispatch d;
  d.conversation_id = conversation;
  d.created_at = created_at;
  d.recipients = recipients;
  auto off = d_->world->append_txn(p, txn, d);
  d_->note("produce in transaction " + std::to_string(txn) + " at partition "
           + std::to_string(p) + " offset " + std::to_string(off));
  return off;
}

int64_t kit::commit(int32_t p, int64_t txn) {
  lock g{d_->world->mtx};
  d_->note("commit transaction " + std::to_string(txn));
  return d_->world->commit_txn(p, txn);
}

int64_t kit::abort(int32_t p, int64_t txn) {
  lock g{d_->world->mtx};
  d_->note("abort transaction " + std::to_string(txn));
  return d_->world->abort_txn(p, txn);
}

void kit::delete_records(int32_t p, int64_t before) {
  lock g{d_->world->mtx};
  d_->note("delete records of partition " + std::to_string(p) + " below " + std::to_string(before));
  // Retention past records the projection had checkpointed keeps them in
  // the model (Redis holds what they gave); past others it does not.
  auto cp = d_->world->checkpoint(p);
  auto low = d_->world->part(p).low;
  if (low < before) {
    if (cp && *cp >= before && (d_->retained.count(p) != 0 || low == 0))
      d_->retained.insert(p);
    else
      d_->retained.erase(p);
  }
  d_->world->truncate(p, before);
}

void kit::recreate_topic() {
  lock g{d_->world->mtx};
  d_->note("recreate the topic");
  for (int32_t p = 0; p < d_->world->partition_count(); ++p)
    d_->retire(p, 0);
  d_->world->recreate_topic();
}

void kit::add_partitions(int32_t n) {
  lock g{d_->world->mtx};
  d_->note("add " + std::to_string(n) + " partitions");
  // Before the first start the settings' count follows the topic (unless
  // the test set one of its own); after it, it is what the node was
  // configured with, and the added partitions are refused.
  bool follows = d_->starts == 0 && d_->settings.partition_count == d_->world->partition_count();
  d_->world->add_partitions(n);
  if (follows)
    d_->settings.partition_count = d_->world->partition_count();
}

void kit::unclean_truncate(int32_t p, int64_t to) {
  lock g{d_->world->mtx};
  d_->note("unclean leader election: partition " + std::to_string(p) + " truncated to "
           + std::to_string(to));
  d_->retire(p, to);
  d_->world->unclean_truncate(p, to);
}

void kit::broker_down() {
  lock g{d_->world->mtx};
  d_->note("broker down");
  d_->world->broker_down = true;
}

void kit::broker_up() {
  lock g{d_->world->mtx};
  d_->note("broker up");
  d_->world->broker_down = false;
}

void kit::broker_slow(caf::timespan delay) {
  lock g{d_->world->mtx};
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(delay).count();
  d_->note("broker delivers records after " + std::to_string(ms) + " ms");
  d_->world->broker_delay_ms = ms;
}

void kit::broker_errors(int64_t n) {
  lock g{d_->world->mtx};
  d_->note("broker: the next " + std::to_string(n) + " requests fail");
  d_->world->broker_errors(n);
}

int64_t kit::log_start(int32_t p) const {
  lock g{d_->world->mtx};
  return d_->world->part(p).low;
}

int64_t kit::log_end(int32_t p) const {
  lock g{d_->world->mtx};
  return d_->world->end(p);
}

int64_t kit::last_stable_offset(int32_t p) const {
  lock g{d_->world->mtx};
  return d_->world->lso(p);
}

int32_t kit::partition_count() const {
  lock g{d_->world->mtx};
  return d_->world->partition_count();
}

// -- Redis ---------------------------------------------------------------------------

void kit::redis_down() {
  lock g{d_->world->mtx};
  d_->note("Redis down");
  d_->world->redis_down = true;
}

void kit::redis_up() {
  lock g{d_->world->mtx};
  d_->note("Redis up");
  d_->world->redis_down = false;
}

void kit::redis_freeze() {
  lock g{d_->world->mtx};
  d_->note("Redis frozen");
  d_->world->redis_frozen = true;
}

void kit::redis_release() {
  lock g{d_->world->mtx};
  d_->note("Redis released");
  d_->world->redis_frozen = false;
}

void kit::redis_error_reply() {
  lock g{d_->world->mtx};
  d_->note("Redis: the next ZADD gets an error reply");
  d_->world->reply_error_fault.arm(1);
}

size_t kit::redis_failover(size_t writes) {
  lock g{d_->world->mtx};
  auto n = d_->world->redis_rollback(writes);
  d_->note("Redis failover: " + std::to_string(n) + " writes rolled back");
  d_->rebase();
  d_->rolled_back = d_->state() == "ready";
  return n;
}

size_t kit::redis_writes() const {
  lock g{d_->world->mtx};
  return d_->world->redis_writes();
}

bool kit::redis_evict(const std::string& key) {
  lock g{d_->world->mtx};
  auto& w = *d_->world;
  auto& prefix = d_->settings.convs_prefix;
  if (key.compare(0, prefix.size(), prefix) == 0) {
    auto user = key.substr(prefix.size());
    for (int32_t p = 0; p < w.partition_count(); ++p)
      d_->evicted[user][p] = w.end(p);
  }
  auto gone = w.evict(key);
  d_->note("evict " + key + (gone ? "" : " (no such key)"));
  d_->rebase();
  return gone;
}

std::vector<std::string> kit::redis_keys() const {
  lock g{d_->world->mtx};
  return d_->world->keys();
}

std::optional<int64_t> kit::checkpoint(int32_t p) const {
  lock g{d_->world->mtx};
  return d_->world->checkpoint(p);
}

std::optional<int64_t> kit::score(const std::string& user, const std::string& conversation) const {
  lock g{d_->world->mtx};
  return d_->world->score(user, conversation);
}

std::map<std::string, std::map<std::string, int64_t>> kit::redis_sessions() const {
  lock g{d_->world->mtx};
  return d_->world->sessions;
}

void kit::redis_moved() {
  lock g{d_->world->mtx};
  d_->note("Redis Cluster: the next ZADD batch meets a MOVED");
  d_->world->moved_fault.arm(1);
}

void kit::redis_ask() {
  lock g{d_->world->mtx};
  d_->note("Redis Cluster: the next ZADD batch meets an ASK");
  d_->world->ask_fault.arm(1);
}

size_t kit::redis_shard_failover(int32_t shard, size_t writes, bool reset) {
  lock g{d_->world->mtx};
  auto n = d_->world->shard_failover(shard, writes, reset);
  d_->note("Redis Cluster: shard " + std::to_string(shard) + " failed over"
           + (writes == 0 ? std::string{" gracefully"} : std::string{}) + ", "
           + std::to_string(n) + " writes rolled back"
           + (reset ? std::string{} : std::string{", unnoticed until the next write there"}));
  if (n > 0) {
    d_->shard_failed_over(shard);
    d_->rolled_back = d_->state() == "ready";
  }
  return n;
}

int32_t kit::redis_shard_of_namespace() const {
  lock g{d_->world->mtx};
  return d_->world->shard_of(d_->world->meta_key());
}

int32_t kit::redis_add_primary() {
  lock g{d_->world->mtx};
  auto i = d_->world->add_primary();
  d_->note("Redis Cluster: a primary joined as shard " + std::to_string(i));
  return i;
}

int32_t kit::redis_move_slots(int32_t from, int32_t to, int32_t count) {
  lock g{d_->world->mtx};
  auto n = d_->world->move_slots(from, to, count);
  d_->note("Redis Cluster: " + std::to_string(n) + " slots moved from shard " + std::to_string(from)
           + " to shard " + std::to_string(to));
  if (n > 0)
    d_->world->moved_fault.arm(1);
  return n;
}

bool kit::redis_remove_primary(int32_t shard) {
  lock g{d_->world->mtx};
  bool ok = d_->world->remove_primary(shard);
  d_->note("Redis Cluster: shard " + std::to_string(shard)
           + (ok ? " emptied and removed" : " not removed (it serves the namespace's slot)"));
  if (ok)
    d_->world->moved_fault.arm(1);
  return ok;
}

bool kit::redis_shard_restart_empty(int32_t shard) {
  lock g{d_->world->mtx};
  bool ok = d_->world->shard_restart_empty(shard);
  d_->note("Redis Cluster: shard " + std::to_string(shard)
           + (ok ? " restarted without its data" : " not restarted (it serves the namespace's slot)"));
  if (ok) {
    d_->shard_failed_over(shard);
    d_->rolled_back = d_->state() == "ready";
  }
  return ok;
}

bool kit::redis_shard_copy_current(int32_t shard) const {
  lock g{d_->world->mtx};
  return d_->world->shard_copy_current(shard);
}

bool kit::redis_cluster_settled() const {
  lock g{d_->world->mtx};
  for (size_t i = 0; i < d_->world->cluster.shards.size(); ++i)
    if (!d_->world->shard_copy_current(static_cast<int32_t>(i)))
      return false;
  return d_->holes.empty();
}

int32_t kit::redis_shard_count() const {
  lock g{d_->world->mtx};
  return static_cast<int32_t>(d_->world->cluster.shards.size());
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
