// Refusals: fail closed, never retried — an undecodable record, an identity
// change during startup, stored state that does not prove a start, old Redis.
#include "tests/actor/fixture.hpp"

using namespace qsp;
using namespace qsp::test;

namespace {

struct Refusals : projection_fixture {
  /// Refused, and a lot of time changes nothing: no new verification, no
  /// new adapters, no write, the gate stays closed.
  void stays_refused() {
    ASSERT_EQ(state(), "refused");
    auto before = world->calls;
    auto restarts = stats->restarts.load();
    auto statuses = seen->size();
    auto hashes = world->hashes;
    auto sessions = world->sessions;
    for (int i = 0; i < 20; ++i)
      run_for(60s, 1s);
    EXPECT_EQ(world->calls.make_inspector, before.make_inspector);
    EXPECT_EQ(world->calls.make_checkpoint_store, before.make_checkpoint_store);
    EXPECT_EQ(world->calls.make_session_store, before.make_session_store);
    EXPECT_EQ(world->calls.make_dispatch_log, before.make_dispatch_log);
    EXPECT_EQ(world->calls.inspect, before.inspect);
    EXPECT_EQ(world->calls.write_checkpoint, before.write_checkpoint);
    EXPECT_EQ(world->calls.apply, before.apply);
    EXPECT_EQ(world->calls.poll, before.poll);
    EXPECT_EQ(seen->size(), statuses);
    EXPECT_TRUE(world->hashes == hashes);
    EXPECT_TRUE(world->sessions == sessions);
    EXPECT_EQ(state(), "refused");
    EXPECT_EQ(stats->restarts.load(), restarts);
    auto gate = pull("u1", 10);
    ASSERT_TRUE(!gate);
    EXPECT_TRUE(has_code(gate.error(), ec::not_ready));
    auto st = status();
    ASSERT_TRUE(st);
    EXPECT_TRUE(!st->ready);
    EXPECT_EQ(st->state, "refused");
  }
};

} // namespace

TEST_F(Refusals, AnUndecodableRecordStopsItsPartitionExactlyBeforeIt) {
  fill(0, 10);
  fill(1, 7);
  auto poison = world->append_raw(1, "{\"conversation_id\":\"x\",\"created_at\":-5}");
  fill(1, 5);
  fill(2, 10);
  ASSERT_EQ(poison, 7);
  settings.max_batch_records = 3; // the poison record sits mid-batch (6, 7, 8)
  start();
  ASSERT_TRUE(drive_to("refused"));
  EXPECT_TRUE(!saw("dirty"));
  EXPECT_TRUE(world->checkpoint(1) == std::optional<int64_t>{7});
  EXPECT_EQ(failures_of("undecodable"), 1u);
  EXPECT_TRUE(contains(last_error(), "partition 1 offset 7"));
  // Everything before it is projected, nothing after it.
  for (int64_t off = 0; off < 7; ++off)
    EXPECT_TRUE(world->score("u" + std::to_string(off % 5), "p1-c" + std::to_string(off)));
  for (int64_t off = 8; off < 13; ++off)
    EXPECT_TRUE(!world->score("u" + std::to_string(off % 5), "p1-c" + std::to_string(off)));
  ASSERT_NO_FATAL_FAILURE(stays_refused());
  EXPECT_TRUE(world->checkpoint(1) == std::optional<int64_t>{7});
}

TEST_F(Refusals, AnUndecodableRecordArrivingAfterReadinessIsRefusedThere) {
  fill(0, 5);
  start();
  ASSERT_TRUE(drive_to("ready"));
  fill(0, 2);
  world->append_raw(0, "{\"conversation_id\":\"x\",\"created_at\":1.5,\"recipients\":[]}");
  fill(0, 2);
  ASSERT_TRUE(drive_to("refused"));
  EXPECT_TRUE(world->checkpoint(0) == std::optional<int64_t>{7});
  EXPECT_TRUE(contains(last_error(), "offset 7"));
  ASSERT_NO_FATAL_FAILURE(stays_refused());
}

TEST_F(Refusals, AnUndecodableFirstRecordLeavesThePartitionWithoutACheckpoint) {
  world->append_raw(0, "not json");
  fill(0, 3);
  start();
  ASSERT_TRUE(drive_to("refused"));
  EXPECT_TRUE(!world->checkpoint(0));
  EXPECT_TRUE(contains(last_error(), "partition 0 offset 0"));
  ASSERT_NO_FATAL_FAILURE(stays_refused());
}

TEST_F(Refusals, AnUndecodableRecordRightAfterAResumePointIsRefusedThere) {
  fill(0, 4);
  world->append_raw(0, "{\"conversation_id\":\"\",\"created_at\":1,\"recipients\":[]}");
  fill(0, 2);
  seed_checkpoints({{0, 4}});
  start();
  ASSERT_TRUE(drive_to("refused"));
  EXPECT_TRUE(world->checkpoint(0) == std::optional<int64_t>{4});
  EXPECT_TRUE(contains(last_error(), "offset 4"));
  EXPECT_EQ(world->calls.write_checkpoint, 0u);
  ASSERT_NO_FATAL_FAILURE(stays_refused());
}

TEST_F(Refusals, AnIdentityChangeAtTheReCheckIsRefused) {
  fill(0, 5);
  world->change_identity_after = 1; // inspect sees the old topic, the re-check a new one
  world->changed_topic_id = fake_world::default_topic_id(2);
  start();
  ASSERT_TRUE(drive_to("refused"));
  EXPECT_EQ(world->calls.inspect, 1u);
  EXPECT_EQ(world->calls.identity, 1u);
  EXPECT_EQ(failures_of("identity_changed"), 1u);
  EXPECT_TRUE(contains(last_error(), "topic_id"));
  EXPECT_TRUE(contains(last_error(), world->topic_id));
  EXPECT_EQ(world->calls.write_checkpoint, 0u);
  EXPECT_EQ(world->calls.apply, 0u);
  ASSERT_NO_FATAL_FAILURE(stays_refused());
}

TEST_F(Refusals, AClusterChangeAtTheReCheckIsRefused) {
  fill(0, 5);
  world->change_identity_after = 1;
  world->changed_cluster_id = "another-cluster";
  start();
  ASSERT_TRUE(drive_to("refused"));
  EXPECT_EQ(failures_of("identity_changed"), 1u);
  EXPECT_TRUE(contains(last_error(), "cluster_id"));
  ASSERT_NO_FATAL_FAILURE(stays_refused());
}

TEST_F(Refusals, APartitionCountChangeAtTheReCheckIsRefused) {
  // Partitions added between the inspection and the consumer's start: the
  // consumer was assigned the old layout and would never read the new ones.
  fill(0, 5);
  auto w = world.get();
  world->on_inspect = [w] { w->reported_partition_count = 4; };
  start();
  ASSERT_TRUE(drive([&] { return state() == "refused" || state() == "ready"; }));
  EXPECT_EQ(state(), "refused");
  EXPECT_EQ(failures_of("identity_changed"), 1u);
  EXPECT_TRUE(contains(last_error(), "partition_count"));
}

TEST_F(Refusals, ATopicDeletedBeforeTheReCheckIsTransientAndItsRecreationIsRefused) {
  // A missing topic may be metadata still propagating: dirty and retried,
  // never a permanent verdict.  Recreated under the same name, it has a new
  // topic id, which the stored meta refuses.
  fill(0, 5);
  seed_checkpoints({{0, 0}});
  auto w = world.get();
  auto original = world->topic;
  world->on_inspect = [w] {
    w->topic = "gone";
    w->on_inspect = nullptr;
  };
  start();
  ASSERT_TRUE(drive_to("dirty"));
  EXPECT_TRUE(contains(last_error(), "does not exist"));
  EXPECT_TRUE(!saw("refused"));
  world->topic = original;
  world->topic_id = fake_world::default_topic_id(2);
  ASSERT_TRUE(drive_to("refused"));
  EXPECT_TRUE(contains(last_error(), "topic_id"));
  ASSERT_NO_FATAL_FAILURE(stays_refused());
}

TEST_F(Refusals, RedisOlderThan6Dot2IsRefused) {
  fill(0, 5);
  world->server_version = "6.0.16";
  start();
  ASSERT_TRUE(drive_to("refused"));
  EXPECT_TRUE(contains(last_error(), "redis_version"));
  EXPECT_TRUE(contains(last_error(), "6.0.16"));
  EXPECT_TRUE(!world->has_meta());
  EXPECT_EQ(world->calls.start, 0u);
  ASSERT_NO_FATAL_FAILURE(stays_refused());
}

TEST_F(Refusals, Redis6Dot2IsAccepted) {
  fill(0, 5);
  world->server_version = "6.2.0";
  start();
  ASSERT_TRUE(drive_to("ready"));
}

TEST_F(Refusals, ACheckpointAboveTheHighWatermarkIsRefused) {
  fill(0, 10);
  fill(1, 10);
  seed_checkpoints({{0, 10}, {1, 15}});
  start();
  ASSERT_TRUE(drive_to("refused"));
  EXPECT_TRUE(contains(last_error(), "partition 1: field next_offset: stored \"15\""));
  EXPECT_TRUE(contains(last_error(), "above the high watermark"));
  EXPECT_EQ(world->calls.start, 0u);
  ASSERT_NO_FATAL_FAILURE(stays_refused());
}

TEST_F(Refusals, ACheckpointInsideAnOpenTransactionAboveTheLSOIsRefused) {
  fill(0, 4);
  auto t = world->begin_txn(0);
  world->append_txn(0, t, core::dispatch{"pending", 1, {"u1"}});
  world->append_txn(0, t, core::dispatch{"pending", 2, {"u1"}});
  seed_checkpoints({{0, 6}}); // <= true high, > LSO
  start();
  ASSERT_TRUE(drive_to("refused"));
  EXPECT_TRUE(contains(last_error(), "above the high watermark"));
  ASSERT_NO_FATAL_FAILURE(stays_refused());
}

TEST_F(Refusals, ACheckpointBelowTheLowWatermarkIsRefused) {
  fill(0, 20);
  seed_checkpoints({{0, 5}});
  world->truncate(0, 10);
  start();
  ASSERT_TRUE(drive_to("refused"));
  EXPECT_TRUE(contains(last_error(), "below the low watermark"));
  ASSERT_NO_FATAL_FAILURE(stays_refused());
}

TEST_F(Refusals, NoCheckpointAndALogThatNoLongerStartsAt0IsRefused) {
  fill(0, 20);
  world->truncate(0, 3);
  start();
  ASSERT_TRUE(drive_to("refused"));
  EXPECT_TRUE(contains(last_error(), "no longer starts at 0"));
  EXPECT_TRUE(!world->has_meta());
  ASSERT_NO_FATAL_FAILURE(stays_refused());
}

TEST_F(Refusals, StoredMetaOfAnotherTopicIdIsRefused) {
  fill(0, 5);
  auto other = world->identity();
  other.topic_id = fake_world::default_topic_id(9);
  world->put_meta(other);
  world->put_checkpoint(other, 0, 3);
  planted[0] = 3;
  start();
  ASSERT_TRUE(drive_to("refused"));
  EXPECT_TRUE(contains(last_error(), "field topic_id"));
  EXPECT_TRUE(contains(last_error(), "deleted and recreated"));
  ASSERT_NO_FATAL_FAILURE(stays_refused());
}

TEST_F(Refusals, CheckpointsWithoutMetaAreRefused) {
  fill(0, 5);
  world->put_checkpoint(world->identity(), 0, 3);
  planted[0] = 3;
  start();
  ASSERT_TRUE(drive_to("refused"));
  EXPECT_TRUE(contains(last_error(), "meta hash is missing"));
  EXPECT_TRUE(!world->has_meta());
  ASSERT_NO_FATAL_FAILURE(stays_refused());
}

TEST_F(Refusals, APartitionCountThatDiffersFromTheConfigurationIsRefused) {
  fill(0, 5);
  settings.partition_count = 2; // the topic has 3
  start();
  ASSERT_TRUE(drive_to("refused"));
  EXPECT_TRUE(contains(last_error(), "partition_count"));
  EXPECT_TRUE(!world->has_meta());
  ASSERT_NO_FATAL_FAILURE(stays_refused());
}

TEST_F(Refusals, AStartOutsideTheConsumerRangeCheckIsRefused) {
  // The plan passed (checkpoint 4 in [0, 10]) but retention moved low past it
  // before the consumer's own [low, high] check.
  fill(0, 10);
  seed_checkpoints({{0, 4}});
  auto w = world.get();
  world->on_inspect = [w] { w->truncate(0, 6); };
  start();
  ASSERT_TRUE(drive_to("refused"));
  EXPECT_EQ(world->calls.start, 1u);
  EXPECT_TRUE(contains(last_error(), "start outside the retained range"));
  EXPECT_EQ(world->calls.write_checkpoint, 0u);
  ASSERT_NO_FATAL_FAILURE(stays_refused());
}

TEST_F(Refusals, RecordsDeletedByRetentionBeforeTheyWereProjectedAreRefusedAfterTheRestart) {
  fill(0, 30);
  settings.max_batch_records = 5;
  start();
  ASSERT_TRUE(drive([&] { return world->checkpoint(0).value_or(0) >= 10; }));
  world->truncate(0, 25); // the reader's position is gone
  ASSERT_TRUE(drive_to("refused"));
  EXPECT_EQ(count_state("dirty"), 1u);
  EXPECT_EQ(failures_of("kafka_read"), 1u);
  EXPECT_TRUE(contains(last_error(), "below the low watermark"));
  EXPECT_LT(world->checkpoint(0).value_or(0), 25);
  ASSERT_NO_FATAL_FAILURE(stays_refused());
}
