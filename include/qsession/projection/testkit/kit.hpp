// The projection's deterministic test kit: one simulated world and one
// projection over it, on a manual clock (docs/TESTING.md).  Include
// qsession/projection/testkit.hpp, which includes this header and the
// randomized schedules (testkit/schedule.hpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"
#include "caf/error.hpp"
#include "caf/event_based_actor.hpp"
#include "caf/expected.hpp"
#include "caf/sec.hpp"
#include "caf/timespan.hpp"
#include "caf/type_id.hpp"
#if CAF_MAJOR_VERSION >= 1
#  include "caf/detail/meta_object.hpp"
#else
#  include <typeinfo>

#  include "caf/detail/is_complete.hpp"
#  include "caf/uniform_type_info_map.hpp"
#endif

#include "qsession/projection/projection.hpp"
#include "qsession/projection/reader.hpp"
#include "qsession/projection/settings.hpp"
#include "qsession/projection/types.hpp"

namespace qsp::testkit {

struct kit_options {
  /// Partitions of the dispatch topic.
  int32_t partitions = 3;
  std::string topic = "dispatch";
  std::string ns = "session_projection";
  /// > 0: Redis Cluster mode with this many primaries (each with one
  /// replica); 0: one standalone Redis.
  int32_t redis_shards = 0;
  /// Seed of the projection's backoff jitter (the same seed, the same run).
  uint64_t seed = 42;
  /// Check the invariants after every step (every job the scheduler runs
  /// and every tick of simulated time).  Off: after every tick only (and
  /// whenever the test calls check_invariants()).
  bool check_every_step = true;
  /// Runs on the actor system's config before the system exists: a host
  /// registers its own message types here
  /// (qsp::add_type_blocks<caf::id_block::host>(cfg)).  A host type sent
  /// without it is named, not a crash: see request_within().
  std::function<void(caf::actor_system_config&)> configure;
  /// Print the projection's log to stderr (also: QSP_TEST_LOG=1).  Every
  /// line starts with "[<topic> <namespace>] " ("[<topic> <namespace>
  /// <node_id>] " in the clustered modes), as the node's lines do.
  bool log = false;
  /// A host's own reader layer (qsession/projection/reader.hpp) over the
  /// simulated broker: called once per generation with the kit's simulated
  /// reader; what it returns is the projection's reader, as
  /// spawn_options::reader would make it.  So a host tests what its layer
  /// does with the kit's broker faults (slow, unavailable, erroring) under
  /// simulated time, checked as a host reader is (order, epochs, gaps
  /// audited through the simulated broker).  A reader that talks to Kafka
  /// itself is tested by the conformance suite against a real broker
  /// (docs/EMBEDDING.md §8).  Empty: the simulated reader itself.
  std::function<std::shared_ptr<dispatch_log>(std::shared_ptr<dispatch_log> simulated)> reader;
};

class kit;

/// A host invariant: "" while it holds, else what broke.  It runs between
/// two jobs (after every step, as the projection's invariants do), so it
/// may read the kit (ready(), statuses(), score()...) and the host's own
/// records, but must not drive it (no run, advance, request, pull...).
using invariant_check = std::function<std::string(const kit&)>;

namespace detail {

/// Asks `whom` once and keeps the answer or the error (kit::request).
/// (CAF 0.17: a function actor gets its state as spawn arguments.)
template <class T, class Handle, class... Ts>
void asker(caf::event_based_actor* self, std::shared_ptr<std::optional<caf::expected<T>>> out,
           Handle whom, caf::timespan limit, Ts... xs) {
  qsp::mail(self, xs...).request(whom, limit)
    .then([out](T& x) { *out = std::move(x); }, [out](caf::error& e) { *out = std::move(e); });
}

/// `T`'s name and type ID if the kit's actor system cannot carry it in a
/// message because its type-ID block was not registered (kit_options::
/// configure, schedule_host::configure); "" if it can.  (CAF 1.x keeps one
/// meta object per type ID per process and cannot even destroy a message
/// of a type without one; CAF 0.17 registers per configuration, and a type
/// of a block it was not given is not known to the system.)
template <class T>
std::string unregistered_type(caf::actor_system& sys) {
#if CAF_MAJOR_VERSION >= 1
  (void) sys;
  if (caf::detail::global_meta_object_or_null(caf::type_id_v<T>) != nullptr)
    return {};
  return std::string{caf::type_name_v<T>} + " (type ID " + std::to_string(caf::type_id_v<T>) + ")";
#else
  // Only types of a type-ID block can be registered by one; CAF's own
  // (below first_custom_type_id) and atoms need nothing on 0.17.
  if constexpr (caf::detail::is_complete<caf::type_id<T>>::value) {
    if (caf::type_id<T>::value < caf::first_custom_type_id
        || &sys.types().portable_name(0, &typeid(T)) != &sys.types().default_type_name())
      return {};
    return std::string{caf::type_name<T>::value} + " (type ID "
           + std::to_string(caf::type_id<T>::value) + ")";
  } else {
    (void) sys;
    return {};
  }
#endif
}

/// The unregistered ones of `Ts...` (above), comma-separated.
template <class... Ts>
std::string unregistered_types(caf::actor_system& sys) {
  std::string out;
  for (auto& name : {unregistered_type<Ts>(sys)...})
    if (!name.empty())
      out += (out.empty() ? "" : ", ") + name;
  return out;
}

} // namespace detail

/// One simulated world and one projection over it, on a manual clock.
/// Not thread-safe: one test drives it from one thread.
///
/// Readiness: ready() is the PULL_SESSION_LIST gate, what a pull answers
/// (the `ready` of the projection's latest push; in the clustered ownership
/// modes the namespace's), not the node's state; state() is the state.
/// When a call that runs the kit returns, every status push the projection
/// sent so far has reached every subscriber (the host's actors too).
class kit {
public:
  explicit kit(kit_options opts = {});
  ~kit();
  kit(const kit&) = delete;
  kit& operator=(const kit&) = delete;

  // -- the system and the projection ---------------------------------------------

  /// The deterministic actor system: spawn the host's own actors here; they
  /// run when the kit runs (run(), advance(), run_until...).  Actors still
  /// alive when the kit is destroyed are ended with it (exit reason kill),
  /// so a handle kept past the kit is harmless.
  caf::actor_system& system();
  /// The projection's settings (topic, namespace, ownership, timeouts...):
  /// change them before start().  They hold the configured values from the
  /// kit's construction on: topic and ns are the kit's, partition_count the
  /// topic's (kit_options::partitions; add_partitions() before the first
  /// start moves it along, unless the test set a count of its own).
  /// Defaults suit the simulation: 5 ms idle poll, 100 ms first backoff.
  projection_settings& settings();
  /// Spawns the projection (verifying, catching up, ready), then runs the
  /// on_start() hooks with its handle.  Returns as the kit's other calls
  /// do, once every status push sent so far was delivered: the hooks'
  /// actors have started, the projection took the subscriptions sent so
  /// far (the kit's and theirs) and each subscriber has its first push.
  /// Nothing else runs and the clock does not move: the projection has not
  /// begun verifying (no broker or Redis call yet).
  void start();
  /// `hook` runs every time the kit spawns a projection: at start() and at
  /// every restart(), whose projection is a new actor with a new handle
  /// (the old one is gone).  A host binds (or re-spawns) its actors there,
  /// as a host process restarting with the node would.  Add hooks before
  /// start().
  void on_start(std::function<void(kit&)> hook);
  /// Shuts it down and runs until it stopped; false (with explain()) if
  /// it did not stop cleanly within projection.shutdown-timeout.
  bool stop();
  /// A restart of the node: stop, then start (pipelined writes whose
  /// replies were not read are lost with their connection); false as stop().
  /// Returns as start() does: the new projection's first push delivered to
  /// the kit and to the actors the on_start() hooks spawned.
  bool restart();
  /// The projection's handle (valid after start(); a new one after every
  /// restart(): see on_start()).  It has a public type ID (qsp_handles): a
  /// host sends it to its own actors typed, e.g. to re-bind a front.
  projection_actor projection() const;
  /// How many projections the kit spawned (start() and every restart()).
  size_t starts() const;
  /// projection.ownership = host: take partitions on or give them up;
  /// false (with explain()) if the projection answered an error.  Both
  /// return once the projection answered; the gate follows later: a revoke
  /// that leaves a partition without an owner closes it at this node's next
  /// cluster heartbeat (up to settings().heartbeat_interval later), and
  /// until then pull serves.  run_until_not_ready() waits for that.
  bool assign(const std::vector<int32_t>& partitions);
  bool revoke(const std::vector<int32_t>& partitions);
  /// The same without waiting: the projection answers when it can (an
  /// assign waits for verification, which waits for a broker that is down).
  /// The answer lands in events(); what it changed, in status().
  void assign_async(const std::vector<int32_t>& partitions);
  void revoke_async(const std::vector<int32_t>& partitions);

  // -- time and running --------------------------------------------------------------

  /// Runs every job that is due, without moving the clock.
  void run();
  /// Lets `d` of simulated time pass (in steps of the idle poll).
  void advance(caf::timespan d);
  /// Runs (moving the clock as needed) until the projection reports `state`
  /// (starting|verifying|catching-up|ready|dirty|refused|stopped), at most
  /// `limit` of simulated time.  False: not reached, or an invariant broke.
  /// The node's state, not the gate: with clustered ownership a node is in
  /// state ready before its namespace's gate opens.
  bool run_until_state(const std::string& state, caf::timespan limit = std::chrono::seconds{60});
  /// Until the gate is open (ready()): a pull then serves.
  bool run_until_ready(caf::timespan limit = std::chrono::seconds{60});
  /// Until the gate is closed (!ready()): a pull then answers not_ready.
  bool run_until_not_ready(caf::timespan limit = std::chrono::seconds{60});
  /// Until partition `p`'s stored checkpoint is at least `next_offset`
  /// (0 or less: true at once, an empty partition has no checkpoint).
  bool run_until_offset(int32_t p, int64_t next_offset,
                        caf::timespan limit = std::chrono::seconds{60});
  /// Until `done()` holds (checked between jobs).
  bool run_until(const std::function<bool()>& done,
                 caf::timespan limit = std::chrono::seconds{60});
  /// Simulated time since the kit was made.
  caf::timespan elapsed() const;
  /// The wall clock the projection reads (Unix ms, simulated).
  int64_t wall_ms() const;

  // -- what the projection says ------------------------------------------------------

  /// The latest state it pushed ("" before the first push): the node's.
  std::string state() const;
  /// The PULL_SESSION_LIST gate: true while a pull serves (the `ready` of
  /// its latest push; with clustered ownership the namespace's readiness
  /// and this node's state ready).  Kept current after every job, so
  /// run_until([&] { return !k.ready(); }) stops as soon as the gate closes.
  bool ready() const;
  /// Asks it for its status (per-partition progress included).
  caf::expected<projection_status> status();
  /// One partition's progress from status().
  caf::expected<partition_status> partition(int32_t p);
  /// PULL_SESSION_LIST: a user's conversations, or ec::not_ready.
  caf::expected<session_list> pull(const std::string& user, uint32_t limit = 100);
  /// Every status it pushed, in order.
  const std::vector<projection_status>& statuses() const;
  /// The projection pushes its current status again, `times` times, to every
  /// subscriber, as it may at any time (a push may repeat the previous
  /// one): a host that alerts once per refusal, not once per push, passes;
  /// one that counts pushes does not.  Returns once they were delivered.
  void repeat_status(int times = 1);

  // -- the host's actors -----------------------------------------------------------------

  /// Asks a host actor (or any actor of system()) and runs the kit, moving
  /// the clock as needed, until it answers or `limit` of simulated time
  /// passed (then caf::sec::request_timeout).  T is the answer's type:
  ///   auto list = k.request<qsp::session_list>(front, host::atom::pull_v, user, 10u);
  template <class T, class Handle, class... Ts>
  caf::expected<T> request(const Handle& whom, Ts... xs) {
    return request_within<T>(std::chrono::seconds{10}, whom, std::move(xs)...);
  }
  /// The request's and the answer's types must be registered in the kit's
  /// actor system (a host's own: kit_options::configure, in run_schedule
  /// schedule_host::configure).  One that is not is named: nothing is sent,
  /// the answer is an error (ec::invalid_config) naming the type and the
  /// hook, and the kit has failed (failed(), explain()), as after a broken
  /// invariant.
  template <class T, class Handle, class... Ts>
  caf::expected<T> request_within(caf::timespan limit, const Handle& whom, Ts... xs) {
    if (auto missing = detail::unregistered_types<Ts..., T>(system()); !missing.empty())
      return unregistered(missing, "a request (kit::request)");
    auto out = std::make_shared<std::optional<caf::expected<T>>>();
    system().spawn(detail::asker<T, Handle, Ts...>, out, whom, limit, std::move(xs)...);
    // The request's own timeout answers at `limit` at the latest.
    if (!run_until([out] { return out->has_value(); }, limit + std::chrono::milliseconds{100}))
      if (!out->has_value())
        return caf::make_error(caf::sec::request_timeout, "testkit: no answer; " + explain());
    return std::move(**out);
  }
  /// A host invariant, checked with the projection's after every step and
  /// named as theirs are: explain() says "[name] what broke", failed()
  /// turns true, every run_until... stops.
  void add_invariant(const std::string& name, invariant_check check);
  /// (request_within) Reports host types that are not registered in the
  /// kit's actor system: `types` names them, `where` what would have sent
  /// them.  The kit fails ("[host types registered] ..." in explain());
  /// returns the error the request answers.
  caf::error unregistered(const std::string& types, const std::string& where);

  // -- the dispatch log (Kafka) --------------------------------------------------------

  /// Appends a committed dispatch; returns its offset.
  int64_t produce(int32_t p, const std::string& conversation, int64_t created_at,
                  const std::vector<std::string>& recipients);
  /// Appends a raw record value (e.g. one the decoder cannot read).
  int64_t produce_raw(int32_t p, const std::string& value);
  /// Transactions: an open one pins the last stable offset (LSO) at its
  /// first record until it commits or aborts (each ends with a marker).
  int64_t begin_transaction(int32_t p);
  int64_t produce_in(int32_t p, int64_t txn, const std::string& conversation, int64_t created_at,
                     const std::vector<std::string>& recipients);
  int64_t commit(int32_t p, int64_t txn);
  int64_t abort(int32_t p, int64_t txn);
  /// delete-records / retention: the log start rises to `before`.
  void delete_records(int32_t p, int64_t before);
  /// Deletes and re-creates the topic (a new topic id, empty partitions).
  void recreate_topic();
  /// Adds partitions to the topic.
  void add_partitions(int32_t n);
  /// An unclean leader election: records at offsets >= `to` vanish, the
  /// leader epoch rises; later records refill those offsets.
  void unclean_truncate(int32_t p, int64_t to);
  /// The broker is unreachable until broker_up(): every request fails,
  /// fetches return nothing.
  void broker_down();
  void broker_up();
  /// Records reach the consumer `delay` after they were produced (0: at once).
  void broker_slow(caf::timespan delay);
  /// The next `n` metadata requests and fetches each fail with an error.
  void broker_errors(int64_t n);
  int64_t log_start(int32_t p) const;
  int64_t log_end(int32_t p) const;
  int64_t last_stable_offset(int32_t p) const;
  int32_t partition_count() const;

  // -- Redis ---------------------------------------------------------------------------

  /// Connections are refused until redis_up(); pipelined commands not yet
  /// executed are lost.
  void redis_down();
  void redis_up();
  /// Redis stops answering (SIGSTOP) until redis_release(): nothing
  /// executes, replies never come, blocking calls time out.
  void redis_freeze();
  void redis_release();
  /// The next ZADD gets an error reply (the others of its batch apply).
  void redis_error_reply();
  /// A failover to a replica that missed the last `writes` writes (each
  /// checkpoint write, each ZADD batch, each ownership write counts as
  /// one); returns how many were rolled back.  Connections reset.
  size_t redis_failover(size_t writes);
  /// Writes Redis executed so far.
  size_t redis_writes() const;
  /// Evicts a key (as maxmemory would): a convs set ("convs:alice"), meta,
  /// a checkpoint... (redis_keys() lists them).  False: no such key.
  bool redis_evict(const std::string& key);
  std::vector<std::string> redis_keys() const;
  /// The stored checkpoint (next offset) of `p`, if any.
  std::optional<int64_t> checkpoint(int32_t p) const;
  /// A member's score in a user's set, if any.
  std::optional<int64_t> score(const std::string& user, const std::string& conversation) const;
  /// Every convs set: user -> conversation -> score.
  std::map<std::string, std::map<std::string, int64_t>> redis_sessions() const;

  // -- Redis Cluster mode (kit_options::redis_shards > 0) ------------------------------

  /// The next ZADD batch meets a MOVED (slot moved) / an ASK (slot
  /// migrating): applied only after the redirection is followed.
  void redis_moved();
  void redis_ask();
  /// One shard's primary fails over to a replica that missed its last
  /// `writes` writes (0: a graceful failover, nothing lost); the other
  /// shards keep everything.  The replica becomes the primary with its own
  /// node id (the old primary lives on as its replica), its former replid
  /// as replid2, and a new configuration epoch.  `reset`: the projection's
  /// connections reset (it had commands in flight there); false: it
  /// notices only at its next write to that shard (a MOVED).  Failovers in
  /// a row are a chain.  Returns how many writes it rolled back.
  size_t redis_shard_failover(int32_t shard, size_t writes, bool reset = true);
  int32_t redis_shard_count() const;
  /// The shard serving the namespace's slot (meta, checkpoints), -1 none.
  int32_t redis_shard_of_namespace() const;
  /// A new primary joins the cluster (no slots yet, no former history).
  /// Returns its shard index.
  int32_t redis_add_primary();
  /// Moves `count` slots of shard `from` (its highest, never the
  /// namespace's) to shard `to`, keys with them; the projection meets
  /// MOVED.  A later failover of `to` that loses this import loses those
  /// keys.  Returns how many slots moved.
  int32_t redis_move_slots(int32_t from, int32_t to, int32_t count);
  /// The same, taking `from`'s lowest slots as redis-cli --cluster reshard
  /// does (a copy key lives in its primary's lowest slot).
  int32_t redis_reshard_lowest(int32_t from, int32_t to, int32_t count);
  /// Moves every slot of `shard` to the next primary and removes it from
  /// the cluster (shard indexes above it shift down).  False if it serves
  /// the namespace's slot or is the last primary.
  bool redis_remove_primary(int32_t shard);
  /// `shard`'s primary restarts without its data (same node id, a new
  /// history): every key in its slots is gone.  The projection refuses
  /// that shard by design (docs/OPERATIONS.md, "A shard without a copy").
  /// False if it serves the namespace's slot.
  bool redis_shard_restart_empty(int32_t shard);
  /// `shard`'s primary restarts from its own persistence, having lost its
  /// last `writes` writes (what its AOF had not synced; 0: a clean
  /// shutdown): the same node id, a new replid; `rdb`: the file kept the
  /// old replid, which becomes its replid2, else (an AOF) no former
  /// history.  Its replicas resync from it.  Returns the writes lost.
  size_t redis_shard_restart_from_disk(int32_t shard, size_t writes, bool rdb);
  /// FLUSHALL on `shard`'s primary, replicated: every key in its slots is
  /// gone, in the same history.  False if it serves the namespace's slot.
  bool redis_shard_flushall(int32_t shard);
  /// An election that failed spends an epoch: every node's current epoch
  /// rises; no primary's configuration epoch changes.
  void redis_spend_epoch();
  /// Shards `a` and `b` hold the same configuration epoch; Redis resolves
  /// it (the smaller node id takes a new, the largest, epoch).
  void redis_epoch_collision(int32_t a, int32_t b);
  /// `shard`'s primary and replica are lost and shard `to` covers its slots
  /// again, empty (CLUSTER ADDSLOTS; `bump`: then CLUSTER BUMPEPOCH, as
  /// redis-cli --cluster fix does).  False if `shard` serves the
  /// namespace's slot or `to` is not another shard.
  bool redis_shard_lost_and_covered(int32_t shard, int32_t to, bool bump = true);
  /// Whether `shard`'s primary holds its own copy of the positions,
  /// written in its current history after its last slot import: a
  /// failover of it now loses only what the projection can replay.
  bool redis_shard_copy_current(int32_t shard) const;
  /// Every shard's copy is current (above) and no shard lost writes the
  /// projection has not replayed yet: a failover now, or retention up to a
  /// checkpoint, leaves the projection a start it can prove.
  bool redis_cluster_settled() const;

  // -- checks ------------------------------------------------------------------------------

  /// What Redis must hold: every committed, decodable record's recipients'
  /// entries (user -> conversation -> newest created_at).
  std::map<std::string, std::map<std::string, int64_t>> model();
  /// Redis holds exactly model() (entries of evicted sets excepted); else
  /// explain() shows the differences.
  bool model_equals_redis();
  /// Runs every invariant now; false: explain() names the invariant, the
  /// partition and the last events.
  bool check_invariants();
  /// What went wrong: every invariant violation so far, and what the last
  /// waiting call (run_until_*, assign, revoke, stop, model_equals_redis)
  /// did not get; then the state and the last 20 events (once each).  ""
  /// if nothing.
  std::string explain() const;
  /// True once an invariant broke (for good: the projection did something
  /// it must never do).  A condition not reached is only that call's false.
  bool failed() const;
  /// The last `n` events: the kit's actions, the projection's state
  /// changes, fetches, checkpoint writes, identity checks.
  std::vector<std::string> events(size_t n = 20) const;
  /// A digest of every event so far: two runs that did the same have the
  /// same digest (the kit is deterministic: same actions, same run).
  uint64_t digest() const;

  struct impl;

private:
  std::unique_ptr<impl> d_;
};

} // namespace qsp::testkit
