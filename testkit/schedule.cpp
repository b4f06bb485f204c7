// Randomized schedules (qsp::testkit::run_schedule): produce, faults,
// restarts and ownership changes interleaved at random from a seed, the
// invariants checked after every job, and at the end every fault healed and
// the projection required ready with Redis equal to the model.
#include "qsession/projection/testkit.hpp"

#include <algorithm>
#include <cstdio>
#include <random>
#include <set>

namespace qsp::testkit {

namespace {

using namespace std::chrono_literals;

/// One fault in force, healed after `left` more steps.
struct active_fault {
  std::string name;
  int left = 0;
};

class schedule {
public:
  schedule(uint64_t seed, size_t steps, const schedule_options& opts)
    : seed_(seed), steps_(steps), opts_(opts), rng_(seed), k_(make_options(seed, opts)) {
    res_.seed = seed;
  }

  schedule_result run() {
    setup();
    // Every schedule has at least one Redis fault, one broker fault and
    // one restart or ownership change, at steps drawn from the seed.
    std::set<size_t> forced_redis{pick(steps_)}, forced_broker{pick(steps_)},
      forced_restart{pick(steps_)};
    for (size_t i = 0; i < steps_ && !k_.failed() && !stop_failed_; ++i) {
      res_.steps = i + 1;
      if (forced_redis.count(i) > 0)
        redis_fault();
      else if (forced_broker.count(i) > 0)
        broker_fault();
      else if (forced_restart.count(i) > 0)
        restart_or_move();
      else
        random_step();
      heal_due();
      if (!k_.failed())
        k_.check_invariants();
    }
    bool finished = !k_.failed() && !stop_failed_ && finish();
    res_.ok = finished && !k_.failed();
    res_.records = produced_;
    res_.digest = k_.digest();
    res_.summary = "seed " + std::to_string(seed_) + ": " + std::to_string(res_.steps)
                   + " steps, " + std::to_string(produced_) + " records, "
                   + std::to_string(res_.redis_faults) + " Redis faults, "
                   + std::to_string(res_.broker_faults) + " broker faults, "
                   + std::to_string(res_.restarts) + " restarts, "
                   + std::to_string(res_.ownership_changes) + " ownership changes"
                   + (opts_.redis_shards > 0
                        ? ", " + std::to_string(res_.cluster_failovers) + " shard failovers, "
                            + std::to_string(res_.cluster_reshards) + " reshards, "
                            + std::to_string(res_.retentions) + " retentions"
                        : std::string{})
                   + (opts_.host.step ? ", " + std::to_string(res_.host_steps) + " host steps"
                                      : std::string{});
    if (opts_.verbose)
      for (auto& e : k_.events(5000))
        std::fprintf(stderr, "  %s\n", e.c_str());
    if (!res_.ok)
      res_.failure = "run_schedule(seed " + std::to_string(seed_) + ", "
                     + std::to_string(steps_) + " steps) failed at step "
                     + std::to_string(res_.steps) + " (" + res_.summary
                     + "; replay: the same seed, steps and options replay this run):\n"
                     + k_.explain();
    return res_;
  }

private:
  static kit_options make_options(uint64_t seed, const schedule_options& opts) {
    kit_options o;
    o.partitions = opts.partitions;
    o.redis_shards = opts.redis_shards;
    o.seed = seed == 0 ? 1 : seed;
    o.configure = opts.host.configure;
    return o;
  }

  size_t pick(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }
  int between(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  int32_t any_partition() { return static_cast<int32_t>(pick(static_cast<size_t>(opts_.partitions))); }

  void setup() {
    auto& s = k_.settings();
    if (opts_.ownership_changes) {
      s.ownership = ownership_mode::host;
      s.node_id = "node-a";
      s.heartbeat_interval = 50ms;
    }
    // Timeouts short enough that faults outlast them within a schedule.
    s.redis.command_timeout = 300ms;
    s.identity_check_interval = 200ms;
    for (int32_t p = 0; p < opts_.partitions; ++p)
      for (int i = between(0, 3); i > 0; --i)
        produce(p);
    // The host's per-schedule hook, once, on this fresh kit before its first
    // start; then its actors (again after every restart) and its invariants.
    if (opts_.host.begin)
      opts_.host.begin(k_);
    k_.on_start(opts_.host.start);
    for (auto& [name, check] : opts_.host.invariants)
      k_.add_invariant(name, check);
    k_.start();
    if (opts_.ownership_changes) {
      for (int32_t p = 0; p < opts_.partitions; ++p)
        owned_.insert(p);
      k_.assign(std::vector<int32_t>(owned_.begin(), owned_.end()));
    }
  }

  void produce(int32_t p) {
    // A small pool of users and conversations, so ZADD GT meets older and
    // newer scores for the same member.
    std::vector<std::string> to;
    for (int n = between(1, 3); n > 0; --n)
      to.push_back("u" + std::to_string(between(0, 7)));
    auto conv = "c" + std::to_string(between(0, 15));
    auto at = 1000 + static_cast<int64_t>(between(0, 500)) + 10 * static_cast<int64_t>(produced_);
    if (auto t = open_txn_.find(p); t != open_txn_.end() && chance(0.5))
      k_.produce_in(p, t->second, conv, at, to);
    else
      k_.produce(p, conv, at, to);
    ++produced_;
  }

  void random_step() {
    auto r = between(0, 99);
    if (r < 38) {
      for (int n = between(1, 4); n > 0; --n)
        produce(any_partition());
    } else if (r < 60) {
      k_.advance(std::chrono::milliseconds{between(1, 60)});
    } else if (r < 64) {
      k_.advance(std::chrono::milliseconds{between(200, 1500)});
    } else if (r < 70) {
      transaction();
    } else if (r < 78) {
      redis_fault();
    } else if (r < 85) {
      broker_fault();
    } else if (r < 90) {
      restart_or_move();
    } else if (opts_.host.step && chance(0.5)) {
      ++res_.host_steps;
      opts_.host.step(k_, rng_());
    } else {
      auto user = "u" + std::to_string(between(0, 7));
      (void) k_.pull(user, 10);
    }
  }

  void transaction() {
    auto p = any_partition();
    if (auto t = open_txn_.find(p); t != open_txn_.end()) {
      if (chance(0.7))
        k_.commit(p, t->second);
      else
        k_.abort(p, t->second);
      open_txn_.erase(t);
      return;
    }
    open_txn_[p] = k_.begin_transaction(p);
    produce(p);
  }

  bool in_force(const std::string& name) const {
    return std::any_of(faults_.begin(), faults_.end(),
                       [&](const active_fault& f) { return f.name == name; });
  }

  void hold(const std::string& name, int steps) { faults_.push_back({name, steps}); }

  void redis_fault() {
    ++res_.redis_faults;
    auto r = between(0, opts_.redis_shards > 0 ? 8 : 4);
    if (r == 0 && !in_force("redis-frozen")) {
      k_.redis_freeze();
      hold("redis-frozen", between(1, 12));
    } else if (r == 1 && !in_force("redis-down")) {
      k_.redis_down();
      hold("redis-down", between(1, 12));
    } else if (r == 2) {
      k_.redis_error_reply();
    } else if ((r == 3 || r == 4) && opts_.redis_shards == 0) {
      // (In Redis Cluster mode a failover is one shard's: below.)
      if (k_.redis_failover(static_cast<size_t>(between(1, 6))) > 0)
        idle_pulls();
    } else if (r == 3 || r == 4) {
      k_.redis_error_reply();
    } else if (r == 5) {
      if (chance(0.5))
        k_.redis_moved();
      else
        k_.redis_ask();
    } else if (opts_.redis_shards > 0 && r > 5) {
      cluster_fault();
    } else {
      // (A fault already in force was drawn again.)
      k_.redis_error_reply();
    }
    // Let the fault meet the projection, sometimes for longer than every timeout.
    k_.advance(std::chrono::milliseconds{chance(0.3) ? between(300, 1500) : between(1, 50)});
  }

  // Redis Cluster: failovers (lossy or graceful, chains once the
  // projection re-judged the shard), a primary joining and slots moving to
  // it, slots moving between primaries (back and forth), a primary leaving,
  // and retention up to a checkpoint.  Only what a correct projection can
  // prove is drawn: a failover or retention while a shard's copy is not
  // current (a failover, an import or a new primary the projection has not
  // re-judged yet) could leave it no proof, which it refuses by design
  // (docs/RELIABILITY.md; tests/testkit/rcluster_kit_test.cpp); so could
  // slots moving into a primary that failed over since its copy (the start
  // cannot tell an import before the failover from one after it).
  void cluster_fault() {
    if (opts_.as_unkind_as_redis) {
      unkind_cluster_fault();
      if (chance(0.3)) {  // two in a row: the second before anything re-judged the first
        if (opts_.copies_between_cluster_events)
          copies_written();
        unkind_cluster_fault();
      }
      return;
    }
    auto shards = k_.redis_shard_count();
    auto shard = static_cast<int32_t>(pick(static_cast<size_t>(shards)));
    auto r = between(0, 5);
    bool settled = k_.redis_cluster_settled();
    if (r == 0 && settled && !(retained_ && shard == k_.redis_shard_of_namespace())) {
      // (A lossy failover of the namespace's shard can take back a
      // checkpoint write: after retention past it, refused by design.)
      ++res_.cluster_failovers;
      k_.redis_shard_failover(shard, static_cast<size_t>(between(1, 6)), chance(0.7));
    } else if (r == 1 && settled) {
      ++res_.cluster_failovers;
      k_.redis_shard_failover(shard, 0, chance(0.5));
    } else if (r == 2 && settled && shards < opts_.redis_shards + 2) {
      ++res_.cluster_reshards;
      auto joined = k_.redis_add_primary();
      k_.redis_move_slots(shard, joined, between(1, 400));
    } else if (r == 3 && settled && shards > 1) {
      ++res_.cluster_reshards;
      auto to = static_cast<int32_t>((shard + 1 + static_cast<int32_t>(pick(
                                                    static_cast<size_t>(shards - 1))))
                                     % shards);
      k_.redis_move_slots(shard, to, between(1, 400));
      if (chance(0.5))
        k_.redis_move_slots(to, shard, between(1, 400));
    } else if (r == 4 && settled && shards > opts_.redis_shards) {
      ++res_.cluster_reshards;
      k_.redis_remove_primary(shard);
    } else if (r == 5 && settled && k_.ready()) {
      // Retention up to a checkpoint: what the copies and the checkpoint
      // prove lets the next start begin there.
      auto p = any_partition();
      if (auto cp = k_.checkpoint(p); cp && *cp > 0) {
        ++res_.retentions;
        retained_ = true;
        k_.delete_records(p, *cp);
      }
    } else {
      k_.redis_error_reply();
    }
  }

  /// Records on every partition and time for the running node to write
  /// them, its checkpoints and its copies (copies_between_cluster_events).
  void copies_written() {
    for (int32_t p = 0; p < opts_.partitions; ++p)
      produce(p);
    k_.advance(std::chrono::milliseconds{between(100, 400)});
  }

  /// The host's clients right after a lossy fault, before any record
  /// arrives: an idle, ready projection must not serve what Redis lost.
  void idle_pulls() {
    if (!opts_.as_unkind_as_redis)
      return;
    for (int n = between(1, 2); n > 0; --n)
      (void) k_.pull("u" + std::to_string(between(0, 7)), 10);
  }

  /// Redis Cluster as Redis is: any event at any time, whatever the copies
  /// can prove (as_unkind_as_redis).
  void unkind_cluster_fault() {
    auto shards = k_.redis_shard_count();
    auto shard = static_cast<int32_t>(pick(static_cast<size_t>(shards)));
    auto other = [&] {
      return static_cast<int32_t>(
        (shard + 1 + static_cast<int32_t>(pick(static_cast<size_t>(shards - 1)))) % shards);
    };
    switch (between(0, 11)) {
      case 0:
        ++res_.cluster_failovers;
        if (k_.redis_shard_failover(shard, static_cast<size_t>(between(1, 6)), chance(0.7)) > 0)
          idle_pulls();
        break;
      case 1:
        ++res_.cluster_failovers;
        k_.redis_shard_failover(shard, 0, chance(0.5));
        break;
      case 2:
        if (shards < opts_.redis_shards + 2) {
          ++res_.cluster_reshards;
          auto joined = k_.redis_add_primary();
          k_.redis_move_slots(shard, joined, between(1, 400));
        }
        break;
      case 3:
        if (shards > 1) {
          ++res_.cluster_reshards;
          auto to = other();
          k_.redis_move_slots(shard, to, between(1, 400));
          if (chance(0.5))
            k_.redis_move_slots(to, shard, between(1, 400));
        }
        break;
      case 4:
        if (shards > opts_.redis_shards) {
          ++res_.cluster_reshards;
          k_.redis_remove_primary(shard);
        }
        break;
      case 5:
        if (auto p = any_partition(); k_.checkpoint(p).value_or(0) > 0) {
          ++res_.retentions;
          k_.delete_records(p, *k_.checkpoint(p));
        }
        break;
      case 6:
        ++res_.cluster_failovers;
        if (k_.redis_shard_restart_empty(shard))
          idle_pulls();
        break;
      case 7:
        ++res_.cluster_failovers;
        k_.redis_shard_restart_from_disk(shard, static_cast<size_t>(between(0, 4)), chance(0.5));
        idle_pulls();
        break;
      case 8:
        if (k_.redis_shard_flushall(shard))
          idle_pulls();
        break;
      case 9:
        if (shards > 1 && chance(0.5))
          k_.redis_epoch_collision(shard, other());
        else
          k_.redis_spend_epoch();
        break;
      case 10:
        if (shards > 1 && k_.redis_shard_lost_and_covered(shard, other(), chance(0.7)))
          idle_pulls();
        break;
      default:
        if (shards > 1) {
          ++res_.cluster_reshards;
          k_.redis_reshard_lowest(shard, other(), between(1, 400));
        }
        break;
    }
  }

  void broker_fault() {
    ++res_.broker_faults;
    auto r = between(0, 2);
    if (r == 0 && !in_force("broker-down")) {
      k_.broker_down();
      hold("broker-down", between(1, 12));
    } else if (r == 1 && !in_force("broker-slow")) {
      k_.broker_slow(std::chrono::milliseconds{between(20, 400)});
      hold("broker-slow", between(1, 12));
    } else {
      k_.broker_errors(between(1, 3));
    }
    k_.advance(std::chrono::milliseconds{chance(0.3) ? between(300, 1500) : between(1, 50)});
  }

  void restart_or_move() {
    if (!opts_.ownership_changes || chance(0.4)) {
      ++res_.restarts;
      if (!k_.restart())
        stop_failed_ = true;
      if (opts_.ownership_changes && !owned_.empty())
        k_.assign_async(std::vector<int32_t>(owned_.begin(), owned_.end()));
      if (opts_.as_unkind_as_redis && chance(0.4)) {
        // A Redis fault soon after the start, when a rollback can take back
        // what the catch-up wrote (its first checkpoints included).
        k_.advance(std::chrono::milliseconds{between(20, 400)});
        redis_fault();
      }
      return;
    }
    ++res_.ownership_changes;
    auto p = any_partition();
    // An assign waits for verification, which a fault in force may hold
    // up: the schedule goes on, the answer comes when it comes.
    if (owned_.count(p) > 0) {
      k_.revoke_async({p});
      owned_.erase(p);
    } else {
      k_.assign_async({p});
      owned_.insert(p);
    }
  }

  void heal(const std::string& name) {
    if (name == "redis-frozen")
      k_.redis_release();
    else if (name == "redis-down")
      k_.redis_up();
    else if (name == "broker-down")
      k_.broker_up();
    else if (name == "broker-slow")
      k_.broker_slow(0ms);
  }

  void heal_due() {
    for (auto i = faults_.begin(); i != faults_.end();) {
      if (--i->left <= 0) {
        heal(i->name);
        i = faults_.erase(i);
      } else {
        ++i;
      }
    }
  }

  bool finish() {
    for (auto& f : faults_)
      heal(f.name);
    faults_.clear();
    for (auto& [p, txn] : open_txn_)
      k_.commit(p, txn);
    open_txn_.clear();
    // Let the ownership requests in flight be answered.
    k_.advance(2s);
    if (opts_.ownership_changes) {
      std::vector<int32_t> missing;
      for (int32_t p = 0; p < opts_.partitions; ++p)
        if (owned_.count(p) == 0)
          missing.push_back(p);
      if (!missing.empty() && !k_.assign(missing))
        return false;
    }
    if (!k_.run_until_ready(120s))
      return false;
    for (int32_t p = 0; p < opts_.partitions; ++p)
      if (!k_.run_until_offset(p, k_.last_stable_offset(p), 120s))
        return false;
    // Every reply read: nothing more in flight that could still change Redis.
    k_.advance(100ms);
    return k_.model_equals_redis() && k_.check_invariants();
  }

  uint64_t seed_;
  size_t steps_;
  schedule_options opts_;
  std::mt19937_64 rng_;
  kit k_;
  schedule_result res_;
  std::vector<active_fault> faults_;
  std::map<int32_t, int64_t> open_txn_;
  std::set<int32_t> owned_;
  size_t produced_ = 0;
  bool stop_failed_ = false;
  bool retained_ = false;
};

} // namespace

schedule_result run_schedule(uint64_t seed, size_t steps, const schedule_options& opts) {
  if (steps == 0 || opts.partitions <= 0) {
    schedule_result r;
    r.seed = seed;
    r.failure = "run_schedule: steps and partitions must be positive";
    return r;
  }
  return schedule{seed, steps, opts}.run();
}

} // namespace qsp::testkit
