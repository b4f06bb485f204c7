// The simulated world's faults (testkit/fakes.hpp) against the real
// projection: an unclean leader election, a recreated topic, added
// partitions, a broker down or slow, Redis down, a pipelined write lost to a
// connection reset, a Redis failover that lost the last writes, evictions,
// and in Redis Cluster mode a shard failover and an ASK redirection.  Each
// test says what the projection does during the fault and after it.
#define CAF_SUITE world

#include "tests/actor/fixture.hpp"

using namespace qsp;
using namespace qsp::test;

namespace {

struct fixture : projection_fixture {
  /// Appends n dispatches to p that differ from what fill() gives at the
  /// same offsets (a new leader's records): conversation "p{p}-e{epoch}-c{offset}".
  void refill(int32_t p, int n) {
    for (int i = 0; i < n; ++i) {
      auto off = world->end(p);
      world->append(p,
                    "p" + std::to_string(p) + "-e" + std::to_string(world->part(p).leader_epoch)
                      + "-c" + std::to_string(off),
                    5000 + off, {"u" + std::to_string(off % 5)});
    }
  }

  /// The leader epoch the projection stored with p's checkpoint (the sidecar).
  std::string stored_epoch(int32_t p) {
    auto key = world->ns + ":epoch:" + world->topic + ":" + std::to_string(p);
    auto i = world->hashes.find(key);
    if (i == world->hashes.end() || i->second.count("leader_epoch") == 0)
      return "<absent>";
    return i->second.at("leader_epoch");
  }

  /// Offsets p was assigned from, from the event with index `from` on.
  std::vector<int64_t> assigned_since(size_t from, int32_t p) {
    std::vector<int64_t> out;
    for (size_t i = from; i < world->events.size(); ++i)
      if (world->events[i].what == fake_event::kind::assigned && world->events[i].partition == p)
        out.push_back(world->events[i].offset);
    return out;
  }

  /// Whether "ready" was reported at or after status number `from`.
  bool ready_since(size_t from) {
    for (size_t i = from; i < seen->size(); ++i)
      if ((*seen)[i].state == "ready")
        return true;
    return false;
  }

  /// The first status at or after `from` in state `st` (its last error), or "".
  std::string first_error_in(size_t from, const std::string& st) {
    for (size_t i = from; i < seen->size(); ++i)
      if ((*seen)[i].state == st)
        return (*seen)[i].last_error;
    return {};
  }

  /// Refused, and a lot of time changes nothing: no checkpoint or ZADD.
  void stays_refused() {
    CAF_REQUIRE_EQUAL(state(), "refused");
    auto writes = world->calls.write_checkpoint;
    auto sessions = world->sessions;
    auto cps = world->checkpoints();
    run_for(30s, 1s);
    CAF_CHECK_EQUAL(state(), "refused");
    CAF_CHECK_EQUAL(world->calls.write_checkpoint, writes);
    CAF_CHECK(world->sessions == sessions);
    CAF_CHECK(world->checkpoints() == cps);
  }

  /// Redis Cluster mode with `shards` primaries and a hash-tag namespace.
  void redis_cluster(int32_t shards) {
    settings.redis.cluster_nodes = {"127.0.0.1:7000"};
    world->ns = "{session_projection}";
    settings.ns = world->ns;
    world->make_redis_cluster(shards);
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(world_tests, fixture)

// -- the broker -------------------------------------------------------------------

CAF_TEST(an unclean truncation below the position refuses the live reader) {
  fill(0, 10);
  start();
  CAF_REQUIRE(drive_to("ready"));
  CAF_REQUIRE(world->checkpoint(0) == std::optional<int64_t>{10});
  CAF_CHECK_EQUAL(stored_epoch(0), "0");
  // The new leader lacks 6..9 and gets other records there, in epoch 1.
  retire(0, 6);
  world->unclean_truncate(0, 6);
  CAF_CHECK_EQUAL(world->end(0), 6);
  CAF_CHECK_EQUAL(world->part(0).leader_epoch, 1);
  refill(0, 8);
  CAF_REQUIRE(drive_to("refused"));
  CAF_CHECK(contains(last_error(), "partition 0: field leader_epoch"));
  CAF_CHECK(contains(last_error(), "truncated below the position"));
  CAF_CHECK(contains(last_error(), "leader epoch 0"));
  // Nothing of the new leader's log was projected, the checkpoint stayed.
  CAF_CHECK(world->checkpoint(0) == std::optional<int64_t>{10});
  for (int64_t off = 6; off < 14; ++off)
    CAF_CHECK(!world->score("u" + std::to_string(off % 5), "p0-e1-c" + std::to_string(off)));
  stays_refused();
}

CAF_TEST(an unclean truncation below a stored epoch is refused at the start) {
  fill(0, 10);
  start();
  CAF_REQUIRE(drive_to("ready"));
  CAF_REQUIRE_EQUAL(stored_epoch(0), "0");
  // The live reader fails once (transient) before it sees the truncation:
  // the restart's consumer starts at 10 with the stored epoch 0, which the
  // new log ends at 6.
  world->poll_fault_partition = 0;
  world->poll_fault.arm(1);
  auto events = world->events.size();
  retire(0, 6);
  world->unclean_truncate(0, 6);
  refill(0, 8);
  CAF_REQUIRE(drive_to("refused"));
  CAF_CHECK_EQUAL(failures_of("kafka_read"), 1u);
  auto at = assigned_since(events, 0);
  CAF_REQUIRE_EQUAL(at.size(), 1u);
  CAF_CHECK_EQUAL(at.front(), 10);
  CAF_CHECK(contains(last_error(), "partition 0: field leader_epoch"));
  CAF_CHECK(contains(last_error(), "end offset 6"));
  CAF_CHECK(world->checkpoint(0) == std::optional<int64_t>{10});
  stays_refused();
}

CAF_TEST(an unclean truncation the reader had not reached is harmless) {
  settings.max_batch_records = 5;
  settings.max_batches_in_flight = 1;
  fill(0, 10);
  start();
  CAF_REQUIRE(drive_to("ready"));
  // Each checkpoint stores the epoch of the record below it (not the
  // partition's current one).
  std::map<int64_t, std::string> epochs;
  world->on_checkpoint_written = [&](int32_t p, int64_t next) { epochs[next] = stored_epoch(p); };
  // 10..19 are appended, then lost from 15 on before the reader fetched them.
  fill(0, 10);
  retire(0, 15);
  world->unclean_truncate(0, 15);
  refill(0, 5);
  CAF_REQUIRE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{20}; }));
  run_for(1s);
  world->on_checkpoint_written = nullptr;
  CAF_CHECK_EQUAL(state(), "ready");
  CAF_CHECK(!saw("refused"));
  CAF_CHECK(!saw("dirty"));
  CAF_CHECK_EQUAL(epochs[15], "0");
  CAF_CHECK_EQUAL(epochs[20], "1");
  CAF_CHECK(world->sessions == expected_sessions());
}

CAF_TEST(a recreated topic is refused and nothing is written after it) {
  fill(0, 10);
  fill(1, 5);
  start();
  CAF_REQUIRE(drive_to("ready"));
  auto old_id = world->topic_id;
  auto cps = world->checkpoints();
  auto sessions = world->sessions;
  auto writes = world->calls.write_checkpoint;
  for (int32_t p = 0; p < world->partition_count(); ++p)
    retire(p, 0);
  world->recreate_topic();
  CAF_CHECK_NOT_EQUAL(world->topic_id, old_id);
  CAF_CHECK_EQUAL(world->partition_count(), 3);
  CAF_CHECK_EQUAL(world->end(0), 0);
  fill(0, 12); // producers write to the new topic at once
  auto statuses = seen->size();
  CAF_REQUIRE(drive_to("refused"));
  // The consumers' fetches fail first (transient); the restart's
  // verification finds meta naming the old topic id.
  CAF_CHECK_EQUAL(failures_of("kafka_read"), 1u);
  CAF_CHECK(contains(first_error_in(statuses, "dirty"), "unknown topic id"));
  CAF_CHECK(contains(last_error(), "field topic_id"));
  CAF_CHECK(contains(last_error(), "deleted and recreated"));
  CAF_CHECK(contains(last_error(), world->topic_id));
  CAF_CHECK_EQUAL(world->calls.write_checkpoint, writes);
  CAF_CHECK(world->checkpoints() == cps);
  CAF_CHECK(world->sessions == sessions);
  stays_refused();
}

CAF_TEST(a reader of a recreated topic fails every poll) {
  // The fake's own contract, which the projection above never reaches
  // twice (its identity fence refuses first).
  fill(0, 3);
  auto log = ports->make_dispatch_log();
  CAF_REQUIRE(log);
  CAF_REQUIRE((*log)->start({{0, 0}}));
  auto r = (*log)->reader(0);
  CAF_REQUIRE(r);
  world->recreate_topic();
  fill(0, 3);
  for (int i = 0; i < 2; ++i) {
    std::vector<log_record> out;
    int64_t passed = -1;
    auto ok = r->poll(10, out, passed);
    CAF_REQUIRE(!ok);
    CAF_CHECK(has_code(ok.error(), ec::kafka_read));
    CAF_CHECK(contains(describe(ok.error()), "unknown topic id"));
    CAF_CHECK(out.empty());
  }
  // A consumer assigned afterwards reads the new topic.
  CAF_REQUIRE((*log)->start({{0, 0}}));
  std::vector<log_record> out;
  int64_t passed = -1;
  CAF_REQUIRE((*log)->reader(0)->poll(10, out, passed));
  CAF_CHECK_EQUAL(out.size(), 3u);
}

CAF_TEST(added partitions are refused) {
  fill(0, 5);
  start();
  CAF_REQUIRE(drive_to("ready"));
  world->add_partitions(2);
  CAF_CHECK_EQUAL(world->partition_count(), 5);
  CAF_REQUIRE(drive_to("refused"));
  CAF_CHECK_EQUAL(failures_of("identity_changed"), 1u);
  CAF_CHECK(contains(last_error(), "partition_count"));
  stays_refused();
}

CAF_TEST(a broker outage longer than every timeout keeps readiness closed until it ends) {
  for (int32_t p = 0; p < 3; ++p)
    fill(p, 10);
  start();
  CAF_REQUIRE(drive_to("ready"));
  world->broker_down = true;
  fill(0, 5);
  fill(1, 5);
  auto inspects = world->calls.inspect;
  CAF_REQUIRE(drive_to("dirty"));
  CAF_CHECK(contains(last_error(), "broker down"));
  // Far longer than the identity check interval and the longest backoff.
  auto dirty_at = seen->size() - 1;
  run_for(20s, 50ms);
  CAF_CHECK_EQUAL(state(), "dirty");
  CAF_CHECK(!ready_since(dirty_at));
  CAF_CHECK_GREATER(world->calls.inspect, inspects + 3); // it kept trying
  auto gate = pull("u1", 10);
  CAF_REQUIRE(!gate);
  CAF_CHECK(has_code(gate.error(), ec::not_ready));
  // Nothing appended during the outage reached the projection.
  CAF_CHECK(world->checkpoint(0) == std::optional<int64_t>{10});
  CAF_CHECK(!world->score("u0", "p0-c10"));
  world->broker_down = false;
  CAF_REQUIRE(drive_to("ready"));
  CAF_CHECK(world->checkpoints() == world->lsos());
  CAF_CHECK(world->sessions == expected_sessions());
}

CAF_TEST(a slow broker delays readiness until the records arrive and loses nothing) {
  world->broker_delay_ms = 1500;
  for (int32_t p = 0; p < 3; ++p)
    fill(p, 10);
  h0 = world->lsos();
  auto t0 = now();
  start();
  run_for(1s);
  CAF_CHECK_NOT_EQUAL(state(), "ready");
  CAF_CHECK(world->checkpoints().empty());
  CAF_REQUIRE(drive_to("ready"));
  CAF_CHECK_GREATER_OR_EQUAL(now() - t0, caf::timespan{1500ms});
  CAF_CHECK(world->checkpoints() == h0);
  // Live: a record reaches the consumer broker_delay_ms after its append.
  fill(0, 5);
  run_for(1s);
  CAF_CHECK(world->checkpoint(0) == std::optional<int64_t>{10});
  run_for(1s);
  CAF_CHECK(world->checkpoint(0) == std::optional<int64_t>{15});
  CAF_CHECK_EQUAL(state(), "ready");
  CAF_CHECK(world->sessions == expected_sessions());
}

CAF_TEST(broker errors fail the next calls of the admin and the fetcher) {
  world->broker_errors(2);
  CAF_CHECK_EQUAL(world->inspect_fault.count, 2);
  CAF_CHECK_EQUAL(world->identity_fault.count, 2);
  CAF_CHECK_EQUAL(world->poll_fault.count, 2);
  for (int32_t p = 0; p < 3; ++p)
    fill(p, 10);
  h0 = world->lsos();
  start();
  CAF_REQUIRE(drive_to("ready"));
  CAF_CHECK(saw("dirty"));
  CAF_CHECK(world->checkpoints() == h0);
  CAF_CHECK(world->sessions == expected_sessions());
}

// -- Redis ------------------------------------------------------------------------

CAF_TEST(a Redis outage makes the projection dirty until Redis is back) {
  for (int32_t p = 0; p < 3; ++p)
    fill(p, 10);
  start();
  CAF_REQUIRE(drive_to("ready"));
  world->redis_down = true;
  fill(0, 5);
  CAF_REQUIRE(drive_to("dirty"));
  CAF_CHECK(contains(last_error(), "connection refused"));
  auto dirty_at = seen->size() - 1;
  auto makes = world->calls.make_checkpoint_store;
  run_for(10s, 50ms);
  CAF_CHECK_EQUAL(state(), "dirty");
  CAF_CHECK(!ready_since(dirty_at));
  CAF_CHECK_GREATER(world->calls.make_checkpoint_store, makes); // retried, refused
  CAF_CHECK_GREATER(world->redis_resets, 0u);
  CAF_CHECK(world->checkpoint(0) == std::optional<int64_t>{10});
  world->redis_down = false;
  CAF_REQUIRE(drive_to("ready"));
  CAF_CHECK(world->checkpoints() == world->lsos());
  CAF_CHECK(world->sessions == expected_sessions());
}

CAF_TEST(pipelined ZADDs not read before a connection reset are lost and replayed) {
  world->lazy_pipeline = true;
  fill(0, 10);
  start();
  CAF_REQUIRE(drive_to("ready"));
  // Frozen: the next batch is sent, but Redis does not execute it yet.
  world->redis_frozen = true;
  auto applies = world->calls.apply;
  fill(0, 5);
  CAF_REQUIRE(drive([&] { return world->calls.apply > applies; }));
  run_for(50ms);
  CAF_CHECK(!world->score("u0", "p0-c10"));
  // A failover that lost nothing, then Redis answers again: the connection
  // was reset, the unread ZADDs are gone with it.
  CAF_CHECK_EQUAL(world->redis_rollback(0), 0u);
  world->redis_frozen = false;
  auto statuses = seen->size();
  CAF_REQUIRE(drive_to("dirty"));
  CAF_CHECK(contains(first_error_in(statuses, "dirty"), "connection reset"));
  CAF_CHECK(!world->score("u0", "p0-c10"));
  CAF_CHECK(world->checkpoint(0) == std::optional<int64_t>{10});
  CAF_REQUIRE(drive_to("ready"));
  CAF_CHECK(world->checkpoint(0) == std::optional<int64_t>{15});
  CAF_CHECK(world->sessions == expected_sessions());
}

CAF_TEST(a failover that lost the last Redis writes is noticed and replayed) {
  world->lazy_pipeline = true;
  settings.max_batch_records = 4;
  settings.max_batches_in_flight = 1;
  fill(0, 20);
  start();
  CAF_REQUIRE(drive_to("ready"));
  CAF_REQUIRE(world->checkpoint(0) == std::optional<int64_t>{20});
  auto writes = world->redis_writes();
  CAF_CHECK_GREATER_OR_EQUAL(writes, 10u); // 5 sends and 5 checkpoints, at least
  CAF_CHECK_EQUAL(world->redis_rollback(3), 3u);
  CAF_CHECK_EQUAL(world->redis_writes(), writes); // a count of writes made, not kept
  // The replica lacks the last checkpoint write and the batch before it:
  // the checkpoint went back, entries are gone.  (The checker's history is
  // the lost primary's: rebase it.)
  rebase();
  rolled_back = true;
  CAF_CHECK_LESS(world->checkpoint(0).value_or(0), 20);
  CAF_CHECK(world->sessions != expected_sessions());
  // Idle, the projection cannot know; its next Redis call finds the reset.
  auto statuses = seen->size();
  fill(0, 2);
  CAF_REQUIRE(drive_to("dirty"));
  CAF_CHECK(contains(first_error_in(statuses, "dirty"), "connection reset"));
  CAF_CHECK_EQUAL(failures_of("redis_unavailable"), 1u);
  CAF_CHECK_EQUAL(failures_of("checkpoint_conflict"), 0u);
  CAF_REQUIRE(drive_to("ready"));
  CAF_CHECK(world->checkpoint(0) == std::optional<int64_t>{22});
  CAF_CHECK(world->sessions == expected_sessions());
}

CAF_TEST(an evicted session set is gone without the projection knowing) {
  fill(0, 10);
  start();
  CAF_REQUIRE(drive_to("ready"));
  auto key = world->convs_prefix + "u1";
  auto keys = world->keys();
  CAF_CHECK(std::find(keys.begin(), keys.end(), key) != keys.end());
  CAF_CHECK(std::find(keys.begin(), keys.end(), world->meta_key()) != keys.end());
  auto cps = world->checkpoints();
  auto sessions = world->sessions;
  CAF_CHECK(world->evict(key));
  CAF_CHECK(!world->evict(key));
  evicted["u1"][0] = 10;
  // The projection has no way to notice (it never reads the sets back): it
  // stays ready, its checkpoint and every other user's set are untouched.
  run_for(2s, 50ms);
  CAF_CHECK_EQUAL(state(), "ready");
  CAF_CHECK(world->checkpoints() == cps);
  CAF_CHECK_EQUAL(world->sessions.count("u1"), 0u);
  sessions.erase("u1");
  CAF_CHECK(world->sessions == sessions);
  // Later records of u1 land in a new set.
  fill(0, 5);
  CAF_REQUIRE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{15}; }));
  CAF_CHECK(world->score("u1", "p0-c11"));
  CAF_CHECK(!world->score("u1", "p0-c1"));
}

CAF_TEST(an evicted meta is refused at the next start) {
  fill(0, 10);
  start();
  CAF_REQUIRE(drive_to("ready"));
  CAF_CHECK(world->evict(world->meta_key()));
  CAF_CHECK(!world->has_meta());
  // The next checkpoint write finds no meta (conflict, transient); the
  // restart's verification finds checkpoints without meta.
  fill(0, 5);
  CAF_REQUIRE(drive_to("refused"));
  CAF_CHECK_GREATER_OR_EQUAL(failures_of("checkpoint_conflict"), 1u);
  CAF_CHECK(contains(last_error(), "meta"));
  CAF_CHECK(!world->has_meta());
  CAF_CHECK(world->checkpoint(0) == std::optional<int64_t>{10});
  stays_refused();
}

// -- Redis Cluster mode -------------------------------------------------------------

CAF_TEST(make_redis_cluster splits the slots and shard_of follows the hash tags) {
  world->make_redis_cluster(3);
  CAF_REQUIRE_EQUAL(world->cluster.shards.size(), 3u);
  CAF_CHECK_EQUAL(world->cluster.shards[0].slots, "0-5460");
  CAF_CHECK_EQUAL(world->cluster.shards[1].slots, "5461-10921");
  CAF_CHECK_EQUAL(world->cluster.shards[2].slots, "10922-16383");
  CAF_CHECK_NOT_EQUAL(world->cluster.shards[0].replid, world->cluster.shards[1].replid);
  CAF_CHECK_EQUAL(world->cluster.shards[0].replid.size(), 40u);
  // "foo" is slot 12182, "bar" 5061 (the Redis Cluster specification's CRC16).
  CAF_CHECK_EQUAL(world->shard_of("foo"), 2);
  CAF_CHECK_EQUAL(world->shard_of("bar"), 0);
  CAF_CHECK_EQUAL(world->shard_of("{bar}:anything"), 0);
  CAF_CHECK_EQUAL(world->shard_of("{foo}:anything"), 2);
}

CAF_TEST(a shard failover that lost writes is replayed from its copy) {
  redis_cluster(3);
  world->lazy_pipeline = true;
  settings.max_batch_records = 4;
  settings.max_batches_in_flight = 1;
  fill(0, 20);
  start();
  CAF_REQUIRE(drive_to("ready"));
  CAF_REQUIRE(world->checkpoint(0) == std::optional<int64_t>{20});
  // A primary that holds session sets but not the namespace's keys: the
  // checkpoint survives its failover, the entries below it do not.
  auto home = world->shard_of(world->meta_key());
  int32_t victim = -1;
  for (int u = 0; u < 5 && victim < 0; ++u)
    if (auto s = world->shard_of(world->convs_prefix + "u" + std::to_string(u)); s != home)
      victim = s;
  CAF_REQUIRE_GREATER_OR_EQUAL(victim, 0);
  auto& sh = world->cluster.shards[static_cast<size_t>(victim)];
  CAF_REQUIRE(sh.positions[0].first == 20);
  auto old_replid = sh.replid;
  CAF_CHECK_EQUAL(world->shard_failover(victim, 3), 3u);
  CAF_CHECK_EQUAL(sh.replid2, old_replid);
  CAF_CHECK_NOT_EQUAL(sh.replid, old_replid);
  CAF_CHECK_EQUAL(sh.copy, "valid"); // written before: still its history (replid2)
  CAF_CHECK_LESS(sh.positions[0].first, 20);
  CAF_CHECK(world->checkpoint(0) == std::optional<int64_t>{20});
  CAF_CHECK(world->sessions != expected_sessions());
  // The checker may not demand the lost entries until the replay is done.
  rebase();
  for (int64_t off = 0; off < 20; ++off)
    exempt.insert({0, off});
  auto events = world->events.size();
  fill(0, 2);
  CAF_REQUIRE(drive_to("dirty"));
  CAF_CHECK(contains(last_error(), "connection reset"));
  CAF_REQUIRE(drive_to("ready"));
  // The restart started at the failed-over shard's copy, below the checkpoint.
  auto at = assigned_since(events, 0);
  CAF_REQUIRE(!at.empty());
  CAF_CHECK_LESS(at.front(), 20);
  exempt.clear();
  CAF_CHECK(world->checkpoint(0) == std::optional<int64_t>{22});
  CAF_CHECK(world->sessions == expected_sessions());
  for (auto& w : world->copy_writes)
    CAF_CHECK(w.unapplied.empty());
}

CAF_TEST(an ASK holds a batch until the resend) {
  redis_cluster(3);
  world->lazy_pipeline = true;
  settings.max_batch_records = 5;
  fill(0, 20);
  world->ask_fault.arm(1, 1); // the second send meets a migrating slot
  h0 = world->lsos();
  start();
  CAF_REQUIRE(drive([&] { return world->calls.asks == 1; }));
  auto not_yet = world->calls.not_yet;
  CAF_REQUIRE(drive_to("ready"));
  CAF_CHECK_EQUAL(world->calls.asks, 1u);
  CAF_CHECK_GREATER(world->calls.not_yet, not_yet); // one round trip for the resend
  CAF_CHECK(world->checkpoint(0) == std::optional<int64_t>{20});
  for (auto& w : world->copy_writes)
    CAF_CHECK(w.unapplied.empty());
  for (auto& s : world->cluster.shards)
    CAF_CHECK(s.positions[0].first == 20);
  CAF_CHECK(world->sessions == expected_sessions());
}

CAF_TEST_FIXTURE_SCOPE_END()
