// The simulated world's faults (testkit/world/world.hpp) against the real
// projection: an unclean leader election, a recreated topic, added
// partitions, a broker down or slow, Redis down, a pipelined write lost to a
// connection reset, a Redis failover that lost the last writes, evictions,
// and in Redis Cluster mode a shard failover and an ASK redirection.  Each
// test says what the projection does during the fault and after it.
#include "tests/actor/fixture.hpp"

using namespace qsp;
using namespace qsp::test;

namespace {

struct World : projection_fixture {
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
    ASSERT_EQ(state(), "refused");
    auto writes = world->calls.write_checkpoint;
    auto sessions = world->sessions;
    auto cps = world->checkpoints();
    run_for(30s, 1s);
    EXPECT_EQ(state(), "refused");
    EXPECT_EQ(world->calls.write_checkpoint, writes);
    EXPECT_TRUE(world->sessions == sessions);
    EXPECT_TRUE(world->checkpoints() == cps);
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

// -- the broker -------------------------------------------------------------------

TEST_F(World, AnUncleanTruncationBelowThePositionRefusesTheLiveReader) {
  fill(0, 10);
  start();
  ASSERT_TRUE(drive_to("ready"));
  ASSERT_TRUE(world->checkpoint(0) == std::optional<int64_t>{10});
  EXPECT_EQ(stored_epoch(0), "0");
  // The new leader lacks 6..9 and gets other records there, in epoch 1.
  retire(0, 6);
  world->unclean_truncate(0, 6);
  EXPECT_EQ(world->end(0), 6);
  EXPECT_EQ(world->part(0).leader_epoch, 1);
  refill(0, 8);
  ASSERT_TRUE(drive_to("refused"));
  EXPECT_TRUE(contains(last_error(), "partition 0: field leader_epoch"));
  EXPECT_TRUE(contains(last_error(), "truncated below the position"));
  EXPECT_TRUE(contains(last_error(), "leader epoch 0"));
  // Nothing of the new leader's log was projected, the checkpoint stayed.
  EXPECT_TRUE(world->checkpoint(0) == std::optional<int64_t>{10});
  for (int64_t off = 6; off < 14; ++off)
    EXPECT_TRUE(!world->score("u" + std::to_string(off % 5), "p0-e1-c" + std::to_string(off)));
  ASSERT_NO_FATAL_FAILURE(stays_refused());
}

TEST_F(World, AnUncleanTruncationBelowAStoredEpochIsRefusedAtTheStart) {
  fill(0, 10);
  start();
  ASSERT_TRUE(drive_to("ready"));
  ASSERT_EQ(stored_epoch(0), "0");
  // The live reader fails once (transient) before it sees the truncation:
  // the restart's consumer starts at 10 with the stored epoch 0, which the
  // new log ends at 6.
  world->poll_fault_partition = 0;
  world->poll_fault.arm(1);
  auto events = world->events.size();
  retire(0, 6);
  world->unclean_truncate(0, 6);
  refill(0, 8);
  ASSERT_TRUE(drive_to("refused"));
  EXPECT_EQ(failures_of("kafka_read"), 1u);
  auto at = assigned_since(events, 0);
  ASSERT_EQ(at.size(), 1u);
  EXPECT_EQ(at.front(), 10);
  EXPECT_TRUE(contains(last_error(), "partition 0: field leader_epoch"));
  EXPECT_TRUE(contains(last_error(), "end offset 6"));
  EXPECT_TRUE(world->checkpoint(0) == std::optional<int64_t>{10});
  ASSERT_NO_FATAL_FAILURE(stays_refused());
}

TEST_F(World, AnUncleanTruncationTheReaderHadNotReachedIsHarmless) {
  settings.max_batch_records = 5;
  settings.max_batches_in_flight = 1;
  fill(0, 10);
  start();
  ASSERT_TRUE(drive_to("ready"));
  // Each checkpoint stores the epoch of the record below it (not the
  // partition's current one).
  std::map<int64_t, std::string> epochs;
  world->on_checkpoint_written = [&](int32_t p, int64_t next) { epochs[next] = stored_epoch(p); };
  // 10..19 are appended, then lost from 15 on before the reader fetched them.
  fill(0, 10);
  retire(0, 15);
  world->unclean_truncate(0, 15);
  refill(0, 5);
  ASSERT_TRUE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{20}; }));
  run_for(1s);
  world->on_checkpoint_written = nullptr;
  EXPECT_EQ(state(), "ready");
  EXPECT_TRUE(!saw("refused"));
  EXPECT_TRUE(!saw("dirty"));
  EXPECT_EQ(epochs[15], "0");
  EXPECT_EQ(epochs[20], "1");
  EXPECT_TRUE(world->sessions == expected_sessions());
}

TEST_F(World, ARecreatedTopicIsRefusedAndNothingIsWrittenAfterIt) {
  fill(0, 10);
  fill(1, 5);
  start();
  ASSERT_TRUE(drive_to("ready"));
  auto old_id = world->topic_id;
  auto cps = world->checkpoints();
  auto sessions = world->sessions;
  auto writes = world->calls.write_checkpoint;
  for (int32_t p = 0; p < world->partition_count(); ++p)
    retire(p, 0);
  world->recreate_topic();
  EXPECT_NE(world->topic_id, old_id);
  EXPECT_EQ(world->partition_count(), 3);
  EXPECT_EQ(world->end(0), 0);
  fill(0, 12); // producers write to the new topic at once
  auto statuses = seen->size();
  ASSERT_TRUE(drive_to("refused"));
  // The consumers' fetches fail first (transient); the restart's
  // verification finds meta naming the old topic id.
  EXPECT_EQ(failures_of("kafka_read"), 1u);
  EXPECT_TRUE(contains(first_error_in(statuses, "dirty"), "unknown topic id"));
  EXPECT_TRUE(contains(last_error(), "field topic_id"));
  EXPECT_TRUE(contains(last_error(), "deleted and recreated"));
  EXPECT_TRUE(contains(last_error(), world->topic_id));
  EXPECT_EQ(world->calls.write_checkpoint, writes);
  EXPECT_TRUE(world->checkpoints() == cps);
  EXPECT_TRUE(world->sessions == sessions);
  ASSERT_NO_FATAL_FAILURE(stays_refused());
}

TEST_F(World, AReaderOfARecreatedTopicFailsEveryPoll) {
  // The fake's own contract, which the projection above never reaches
  // twice (its identity fence refuses first).
  fill(0, 3);
  auto log = ports->make_dispatch_log();
  ASSERT_TRUE(log);
  ASSERT_TRUE((*log)->start({{0, 0}}));
  auto r = (*log)->reader(0);
  ASSERT_TRUE(r);
  world->recreate_topic();
  fill(0, 3);
  for (int i = 0; i < 2; ++i) {
    std::vector<log_record> out;
    int64_t passed = -1;
    auto ok = r->poll(10, out, passed);
    ASSERT_TRUE(!ok);
    EXPECT_TRUE(has_code(ok.error(), ec::kafka_read));
    EXPECT_TRUE(contains(describe(ok.error()), "unknown topic id"));
    EXPECT_TRUE(out.empty());
  }
  // A consumer assigned afterwards reads the new topic.
  ASSERT_TRUE((*log)->start({{0, 0}}));
  std::vector<log_record> out;
  int64_t passed = -1;
  ASSERT_TRUE((*log)->reader(0)->poll(10, out, passed));
  EXPECT_EQ(out.size(), 3u);
}

TEST_F(World, AddedPartitionsAreRefused) {
  fill(0, 5);
  start();
  ASSERT_TRUE(drive_to("ready"));
  world->add_partitions(2);
  EXPECT_EQ(world->partition_count(), 5);
  ASSERT_TRUE(drive_to("refused"));
  EXPECT_EQ(failures_of("identity_changed"), 1u);
  EXPECT_TRUE(contains(last_error(), "partition_count"));
  ASSERT_NO_FATAL_FAILURE(stays_refused());
}

TEST_F(World, ABrokerOutageLongerThanEveryTimeoutKeepsReadinessClosedUntilItEnds) {
  for (int32_t p = 0; p < 3; ++p)
    fill(p, 10);
  start();
  ASSERT_TRUE(drive_to("ready"));
  world->broker_down = true;
  fill(0, 5);
  fill(1, 5);
  auto inspects = world->calls.inspect;
  ASSERT_TRUE(drive_to("dirty"));
  EXPECT_TRUE(contains(last_error(), "broker down"));
  // Far longer than the identity check interval and the longest backoff.
  auto dirty_at = seen->size() - 1;
  run_for(20s, 50ms);
  EXPECT_EQ(state(), "dirty");
  EXPECT_TRUE(!ready_since(dirty_at));
  EXPECT_GT(world->calls.inspect, inspects + 3); // it kept trying
  auto gate = pull("u1", 10);
  ASSERT_TRUE(!gate);
  EXPECT_TRUE(has_code(gate.error(), ec::not_ready));
  // Nothing appended during the outage reached the projection.
  EXPECT_TRUE(world->checkpoint(0) == std::optional<int64_t>{10});
  EXPECT_TRUE(!world->score("u0", "p0-c10"));
  world->broker_down = false;
  ASSERT_TRUE(drive_to("ready"));
  EXPECT_TRUE(world->checkpoints() == world->lsos());
  EXPECT_TRUE(world->sessions == expected_sessions());
}

TEST_F(World, ASlowBrokerDelaysReadinessUntilTheRecordsArriveAndLosesNothing) {
  world->broker_delay_ms = 1500;
  for (int32_t p = 0; p < 3; ++p)
    fill(p, 10);
  h0 = world->lsos();
  auto t0 = now();
  start();
  run_for(1s);
  EXPECT_NE(state(), "ready");
  EXPECT_TRUE(world->checkpoints().empty());
  ASSERT_TRUE(drive_to("ready"));
  EXPECT_GE(now() - t0, caf::timespan{1500ms});
  EXPECT_TRUE(world->checkpoints() == h0);
  // Live: a record reaches the consumer broker_delay_ms after its append.
  fill(0, 5);
  run_for(1s);
  EXPECT_TRUE(world->checkpoint(0) == std::optional<int64_t>{10});
  run_for(1s);
  EXPECT_TRUE(world->checkpoint(0) == std::optional<int64_t>{15});
  EXPECT_EQ(state(), "ready");
  EXPECT_TRUE(world->sessions == expected_sessions());
}

TEST_F(World, BrokerErrorsFailTheNextCallsOfTheAdminAndTheFetcher) {
  world->broker_errors(2);
  EXPECT_EQ(world->inspect_fault.count, 2);
  EXPECT_EQ(world->identity_fault.count, 2);
  EXPECT_EQ(world->poll_fault.count, 2);
  for (int32_t p = 0; p < 3; ++p)
    fill(p, 10);
  h0 = world->lsos();
  start();
  ASSERT_TRUE(drive_to("ready"));
  EXPECT_TRUE(saw("dirty"));
  EXPECT_TRUE(world->checkpoints() == h0);
  EXPECT_TRUE(world->sessions == expected_sessions());
}

// -- Redis ------------------------------------------------------------------------

TEST_F(World, ARedisOutageMakesTheProjectionDirtyUntilRedisIsBack) {
  for (int32_t p = 0; p < 3; ++p)
    fill(p, 10);
  start();
  ASSERT_TRUE(drive_to("ready"));
  world->redis_down = true;
  fill(0, 5);
  ASSERT_TRUE(drive_to("dirty"));
  EXPECT_TRUE(contains(last_error(), "connection refused"));
  auto dirty_at = seen->size() - 1;
  auto makes = world->calls.make_checkpoint_store;
  run_for(10s, 50ms);
  EXPECT_EQ(state(), "dirty");
  EXPECT_TRUE(!ready_since(dirty_at));
  EXPECT_GT(world->calls.make_checkpoint_store, makes); // retried, refused
  EXPECT_GT(world->redis_resets, 0u);
  EXPECT_TRUE(world->checkpoint(0) == std::optional<int64_t>{10});
  world->redis_down = false;
  ASSERT_TRUE(drive_to("ready"));
  EXPECT_TRUE(world->checkpoints() == world->lsos());
  EXPECT_TRUE(world->sessions == expected_sessions());
}

TEST_F(World, PipelinedZADDsNotReadBeforeAConnectionResetAreLostAndReplayed) {
  world->lazy_pipeline = true;
  fill(0, 10);
  start();
  ASSERT_TRUE(drive_to("ready"));
  // Frozen: the next batch is sent, but Redis does not execute it yet.
  world->redis_frozen = true;
  auto applies = world->calls.apply;
  fill(0, 5);
  ASSERT_TRUE(drive([&] { return world->calls.apply > applies; }));
  run_for(50ms);
  EXPECT_TRUE(!world->score("u0", "p0-c10"));
  // A failover that lost nothing, then Redis answers again: the connection
  // was reset, the unread ZADDs are gone with it.
  EXPECT_EQ(world->redis_rollback(0), 0u);
  world->redis_frozen = false;
  auto statuses = seen->size();
  ASSERT_TRUE(drive_to("dirty"));
  EXPECT_TRUE(contains(first_error_in(statuses, "dirty"), "connection reset"));
  EXPECT_TRUE(!world->score("u0", "p0-c10"));
  EXPECT_TRUE(world->checkpoint(0) == std::optional<int64_t>{10});
  ASSERT_TRUE(drive_to("ready"));
  EXPECT_TRUE(world->checkpoint(0) == std::optional<int64_t>{15});
  EXPECT_TRUE(world->sessions == expected_sessions());
}

TEST_F(World, AFailoverThatLostTheLastRedisWritesIsNoticedAndReplayed) {
  world->lazy_pipeline = true;
  settings.max_batch_records = 4;
  settings.max_batches_in_flight = 1;
  fill(0, 20);
  start();
  ASSERT_TRUE(drive_to("ready"));
  ASSERT_TRUE(world->checkpoint(0) == std::optional<int64_t>{20});
  auto writes = world->redis_writes();
  EXPECT_GE(writes, 10u); // 5 sends and 5 checkpoints, at least
  EXPECT_EQ(world->redis_rollback(3), 3u);
  EXPECT_EQ(world->redis_writes(), writes); // a count of writes made, not kept
  // The replica lacks the last checkpoint write and the batch before it:
  // the checkpoint went back, entries are gone.  (The checker's history is
  // the lost primary's: rebase it.)
  rebase();
  rolled_back = true;
  EXPECT_LT(world->checkpoint(0).value_or(0), 20);
  EXPECT_TRUE(world->sessions != expected_sessions());
  // Idle, the projection cannot know; its next Redis call finds the reset.
  auto statuses = seen->size();
  fill(0, 2);
  ASSERT_TRUE(drive_to("dirty"));
  EXPECT_TRUE(contains(first_error_in(statuses, "dirty"), "connection reset"));
  EXPECT_EQ(failures_of("redis_unavailable"), 1u);
  EXPECT_EQ(failures_of("checkpoint_conflict"), 0u);
  ASSERT_TRUE(drive_to("ready"));
  EXPECT_TRUE(world->checkpoint(0) == std::optional<int64_t>{22});
  EXPECT_TRUE(world->sessions == expected_sessions());
}

TEST_F(World, AnEvictedSessionSetIsGoneWithoutTheProjectionKnowing) {
  fill(0, 10);
  start();
  ASSERT_TRUE(drive_to("ready"));
  auto key = world->convs_prefix + "u1";
  auto keys = world->keys();
  EXPECT_TRUE(std::find(keys.begin(), keys.end(), key) != keys.end());
  EXPECT_TRUE(std::find(keys.begin(), keys.end(), world->meta_key()) != keys.end());
  auto cps = world->checkpoints();
  auto sessions = world->sessions;
  EXPECT_TRUE(world->evict(key));
  EXPECT_TRUE(!world->evict(key));
  evicted["u1"][0] = 10;
  // The projection has no way to notice (it never reads the sets back): it
  // stays ready, its checkpoint and every other user's set are untouched.
  run_for(2s, 50ms);
  EXPECT_EQ(state(), "ready");
  EXPECT_TRUE(world->checkpoints() == cps);
  EXPECT_EQ(world->sessions.count("u1"), 0u);
  sessions.erase("u1");
  EXPECT_TRUE(world->sessions == sessions);
  // Later records of u1 land in a new set.
  fill(0, 5);
  ASSERT_TRUE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{15}; }));
  EXPECT_TRUE(world->score("u1", "p0-c11"));
  EXPECT_TRUE(!world->score("u1", "p0-c1"));
}

TEST_F(World, AnEvictedMetaIsRefusedAtTheNextStart) {
  fill(0, 10);
  start();
  ASSERT_TRUE(drive_to("ready"));
  EXPECT_TRUE(world->evict(world->meta_key()));
  EXPECT_TRUE(!world->has_meta());
  // The next checkpoint write finds no meta (conflict, transient); the
  // restart's verification finds checkpoints without meta.
  fill(0, 5);
  ASSERT_TRUE(drive_to("refused"));
  EXPECT_GE(failures_of("checkpoint_conflict"), 1u);
  EXPECT_TRUE(contains(last_error(), "meta"));
  EXPECT_TRUE(!world->has_meta());
  EXPECT_TRUE(world->checkpoint(0) == std::optional<int64_t>{10});
  ASSERT_NO_FATAL_FAILURE(stays_refused());
}

// -- Redis Cluster mode -------------------------------------------------------------

TEST_F(World, MakeRedisClusterSplitsTheSlotsAndShardOfFollowsTheHashTags) {
  world->make_redis_cluster(3);
  ASSERT_EQ(world->cluster.shards.size(), 3u);
  EXPECT_EQ(world->cluster.shards[0].slots, "0-5460");
  EXPECT_EQ(world->cluster.shards[1].slots, "5461-10921");
  EXPECT_EQ(world->cluster.shards[2].slots, "10922-16383");
  EXPECT_NE(world->cluster.shards[0].replid, world->cluster.shards[1].replid);
  EXPECT_EQ(world->cluster.shards[0].replid.size(), 40u);
  // "foo" is slot 12182, "bar" 5061 (the Redis Cluster specification's CRC16).
  EXPECT_EQ(world->shard_of("foo"), 2);
  EXPECT_EQ(world->shard_of("bar"), 0);
  EXPECT_EQ(world->shard_of("{bar}:anything"), 0);
  EXPECT_EQ(world->shard_of("{foo}:anything"), 2);
}

TEST_F(World, AShardFailoverThatLostWritesIsReplayedFromItsCopy) {
  redis_cluster(3);
  world->lazy_pipeline = true;
  settings.max_batch_records = 4;
  settings.max_batches_in_flight = 1;
  fill(0, 20);
  start();
  ASSERT_TRUE(drive_to("ready"));
  ASSERT_TRUE(world->checkpoint(0) == std::optional<int64_t>{20});
  // A primary that holds session sets but not the namespace's keys: the
  // checkpoint survives its failover, the entries below it do not.
  auto home = world->shard_of(world->meta_key());
  int32_t victim = -1;
  for (int u = 0; u < 5 && victim < 0; ++u)
    if (auto s = world->shard_of(world->convs_prefix + "u" + std::to_string(u)); s != home)
      victim = s;
  ASSERT_GE(victim, 0);
  auto& sh = world->cluster.shards[static_cast<size_t>(victim)];
  ASSERT_TRUE(sh.positions[0].first == 20);
  auto old_replid = sh.replid;
  EXPECT_EQ(world->shard_failover(victim, 3), 3u);
  EXPECT_EQ(sh.replid2, old_replid);
  EXPECT_NE(sh.replid, old_replid);
  EXPECT_EQ(sh.copy, "valid"); // written before: still its history (replid2)
  EXPECT_LT(sh.positions[0].first, 20);
  EXPECT_TRUE(world->checkpoint(0) == std::optional<int64_t>{20});
  EXPECT_TRUE(world->sessions != expected_sessions());
  // The checker may not demand the lost entries until the replay is done.
  rebase();
  for (int64_t off = 0; off < 20; ++off)
    exempt.insert({0, off});
  auto events = world->events.size();
  fill(0, 2);
  ASSERT_TRUE(drive_to("dirty"));
  EXPECT_TRUE(contains(last_error(), "connection reset"));
  ASSERT_TRUE(drive_to("ready"));
  // The restart started at the failed-over shard's copy, below the checkpoint.
  auto at = assigned_since(events, 0);
  ASSERT_TRUE(!at.empty());
  EXPECT_LT(at.front(), 20);
  exempt.clear();
  EXPECT_TRUE(world->checkpoint(0) == std::optional<int64_t>{22});
  EXPECT_TRUE(world->sessions == expected_sessions());
  for (auto& w : world->copy_writes)
    EXPECT_TRUE(w.unapplied.empty());
}

TEST_F(World, AnASKHoldsABatchUntilTheResend) {
  redis_cluster(3);
  world->lazy_pipeline = true;
  settings.max_batch_records = 5;
  fill(0, 20);
  world->ask_fault.arm(1, 1); // the second send meets a migrating slot
  h0 = world->lsos();
  start();
  ASSERT_TRUE(drive([&] { return world->calls.asks == 1; }));
  auto not_yet = world->calls.not_yet;
  ASSERT_TRUE(drive_to("ready"));
  EXPECT_EQ(world->calls.asks, 1u);
  EXPECT_GT(world->calls.not_yet, not_yet); // one round trip for the resend
  EXPECT_TRUE(world->checkpoint(0) == std::optional<int64_t>{20});
  for (auto& w : world->copy_writes)
    EXPECT_TRUE(w.unapplied.empty());
  for (auto& s : world->cluster.shards)
    EXPECT_TRUE(s.positions[0].first == 20);
  EXPECT_TRUE(world->sessions == expected_sessions());
}
