// Refusals: fail closed, never retried — an undecodable record, an identity
// change during startup, stored state that does not prove a start, old Redis.
#define CAF_SUITE refusals

#include "tests/actor/fixture.hpp"

using namespace qsp;
using namespace qsp::test;

namespace {

struct fixture : projection_fixture {
  /// Refused, and a lot of time changes nothing: no new verification, no
  /// new adapters, no write, the gate stays closed.
  void stays_refused() {
    CAF_REQUIRE_EQUAL(state(), "refused");
    auto before = world->calls;
    auto restarts = stats->restarts.load();
    auto statuses = seen->size();
    auto hashes = world->hashes;
    auto sessions = world->sessions;
    for (int i = 0; i < 20; ++i)
      run_for(60s, 1s);
    CAF_CHECK_EQUAL(world->calls.make_inspector, before.make_inspector);
    CAF_CHECK_EQUAL(world->calls.make_checkpoint_store, before.make_checkpoint_store);
    CAF_CHECK_EQUAL(world->calls.make_session_store, before.make_session_store);
    CAF_CHECK_EQUAL(world->calls.make_dispatch_log, before.make_dispatch_log);
    CAF_CHECK_EQUAL(world->calls.inspect, before.inspect);
    CAF_CHECK_EQUAL(world->calls.write_checkpoint, before.write_checkpoint);
    CAF_CHECK_EQUAL(world->calls.apply, before.apply);
    CAF_CHECK_EQUAL(world->calls.poll, before.poll);
    CAF_CHECK_EQUAL(seen->size(), statuses);
    CAF_CHECK(world->hashes == hashes);
    CAF_CHECK(world->sessions == sessions);
    CAF_CHECK_EQUAL(state(), "refused");
    CAF_CHECK_EQUAL(stats->restarts.load(), restarts);
    auto gate = pull("u1", 10);
    CAF_REQUIRE(!gate);
    CAF_CHECK(has_code(gate.error(), ec::not_ready));
    auto st = status();
    CAF_REQUIRE(st);
    CAF_CHECK(!st->ready);
    CAF_CHECK_EQUAL(st->state, "refused");
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(refusal_tests, fixture)

CAF_TEST(an undecodable record stops its partition exactly before it) {
  fill(0, 10);
  fill(1, 7);
  auto poison = world->append_raw(1, "{\"conversation_id\":\"x\",\"created_at\":-5}");
  fill(1, 5);
  fill(2, 10);
  CAF_REQUIRE_EQUAL(poison, 7);
  settings.max_batch_records = 3; // the poison record sits mid-batch (6, 7, 8)
  start();
  CAF_REQUIRE(drive_to("refused"));
  CAF_CHECK(!saw("dirty"));
  CAF_CHECK(world->checkpoint(1) == std::optional<int64_t>{7});
  CAF_CHECK_EQUAL(failures_of("undecodable"), 1u);
  CAF_CHECK(contains(last_error(), "partition 1 offset 7"));
  // Everything before it is projected, nothing after it.
  for (int64_t off = 0; off < 7; ++off)
    CAF_CHECK(world->score("u" + std::to_string(off % 5), "p1-c" + std::to_string(off)));
  for (int64_t off = 8; off < 13; ++off)
    CAF_CHECK(!world->score("u" + std::to_string(off % 5), "p1-c" + std::to_string(off)));
  stays_refused();
  CAF_CHECK(world->checkpoint(1) == std::optional<int64_t>{7});
}

CAF_TEST(an undecodable record arriving after readiness is refused there) {
  fill(0, 5);
  start();
  CAF_REQUIRE(drive_to("ready"));
  fill(0, 2);
  world->append_raw(0, "{\"conversation_id\":\"x\",\"created_at\":1.5,\"recipients\":[]}");
  fill(0, 2);
  CAF_REQUIRE(drive_to("refused"));
  CAF_CHECK(world->checkpoint(0) == std::optional<int64_t>{7});
  CAF_CHECK(contains(last_error(), "offset 7"));
  stays_refused();
}

CAF_TEST(an undecodable first record leaves the partition without a checkpoint) {
  world->append_raw(0, "not json");
  fill(0, 3);
  start();
  CAF_REQUIRE(drive_to("refused"));
  CAF_CHECK(!world->checkpoint(0));
  CAF_CHECK(contains(last_error(), "partition 0 offset 0"));
  stays_refused();
}

CAF_TEST(an undecodable record right after a resume point is refused there) {
  fill(0, 4);
  world->append_raw(0, "{\"conversation_id\":\"\",\"created_at\":1,\"recipients\":[]}");
  fill(0, 2);
  seed_checkpoints({{0, 4}});
  start();
  CAF_REQUIRE(drive_to("refused"));
  CAF_CHECK(world->checkpoint(0) == std::optional<int64_t>{4});
  CAF_CHECK(contains(last_error(), "offset 4"));
  CAF_CHECK_EQUAL(world->calls.write_checkpoint, 0u);
  stays_refused();
}

CAF_TEST(an identity change at the re-check is refused) {
  fill(0, 5);
  world->change_identity_after = 1; // inspect sees the old topic, the re-check a new one
  world->changed_topic_id = fake_world::default_topic_id(2);
  start();
  CAF_REQUIRE(drive_to("refused"));
  CAF_CHECK_EQUAL(world->calls.inspect, 1u);
  CAF_CHECK_EQUAL(world->calls.identity, 1u);
  CAF_CHECK_EQUAL(failures_of("identity_changed"), 1u);
  CAF_CHECK(contains(last_error(), "topic_id"));
  CAF_CHECK(contains(last_error(), world->topic_id));
  CAF_CHECK_EQUAL(world->calls.write_checkpoint, 0u);
  CAF_CHECK_EQUAL(world->calls.apply, 0u);
  stays_refused();
}

CAF_TEST(a cluster change at the re-check is refused) {
  fill(0, 5);
  world->change_identity_after = 1;
  world->changed_cluster_id = "another-cluster";
  start();
  CAF_REQUIRE(drive_to("refused"));
  CAF_CHECK_EQUAL(failures_of("identity_changed"), 1u);
  CAF_CHECK(contains(last_error(), "cluster_id"));
  stays_refused();
}

CAF_TEST(a partition count change at the re-check is refused) {
  // Partitions added between the inspection and the consumer's start: the
  // consumer was assigned the old layout and would never read the new ones.
  fill(0, 5);
  auto w = world.get();
  world->on_inspect = [w] { w->reported_partition_count = 4; };
  start();
  CAF_REQUIRE(drive([&] { return state() == "refused" || state() == "ready"; }));
  CAF_CHECK_EQUAL(state(), "refused");
  CAF_CHECK_EQUAL(failures_of("identity_changed"), 1u);
  CAF_CHECK(contains(last_error(), "partition_count"));
}

CAF_TEST(a topic deleted before the re-check is transient and its recreation is refused) {
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
  CAF_REQUIRE(drive_to("dirty"));
  CAF_CHECK(contains(last_error(), "does not exist"));
  CAF_CHECK(!saw("refused"));
  world->topic = original;
  world->topic_id = fake_world::default_topic_id(2);
  CAF_REQUIRE(drive_to("refused"));
  CAF_CHECK(contains(last_error(), "topic_id"));
  stays_refused();
}

CAF_TEST(redis older than 6.2 is refused) {
  fill(0, 5);
  world->server_version = "6.0.16";
  start();
  CAF_REQUIRE(drive_to("refused"));
  CAF_CHECK(contains(last_error(), "redis_version"));
  CAF_CHECK(contains(last_error(), "6.0.16"));
  CAF_CHECK(!world->has_meta());
  CAF_CHECK_EQUAL(world->calls.start, 0u);
  stays_refused();
}

CAF_TEST(redis 6.2 is accepted) {
  fill(0, 5);
  world->server_version = "6.2.0";
  start();
  CAF_REQUIRE(drive_to("ready"));
}

CAF_TEST(a checkpoint above the high watermark is refused) {
  fill(0, 10);
  fill(1, 10);
  seed_checkpoints({{0, 10}, {1, 15}});
  start();
  CAF_REQUIRE(drive_to("refused"));
  CAF_CHECK(contains(last_error(), "partition 1: field next_offset: stored \"15\""));
  CAF_CHECK(contains(last_error(), "above the high watermark"));
  CAF_CHECK_EQUAL(world->calls.start, 0u);
  stays_refused();
}

CAF_TEST(a checkpoint inside an open transaction above the LSO is refused) {
  fill(0, 4);
  auto t = world->begin_txn(0);
  world->append_txn(0, t, core::dispatch{"pending", 1, {"u1"}});
  world->append_txn(0, t, core::dispatch{"pending", 2, {"u1"}});
  seed_checkpoints({{0, 6}}); // <= true high, > LSO
  start();
  CAF_REQUIRE(drive_to("refused"));
  CAF_CHECK(contains(last_error(), "above the high watermark"));
  stays_refused();
}

CAF_TEST(a checkpoint below the low watermark is refused) {
  fill(0, 20);
  seed_checkpoints({{0, 5}});
  world->truncate(0, 10);
  start();
  CAF_REQUIRE(drive_to("refused"));
  CAF_CHECK(contains(last_error(), "below the low watermark"));
  stays_refused();
}

CAF_TEST(no checkpoint and a log that no longer starts at 0 is refused) {
  fill(0, 20);
  world->truncate(0, 3);
  start();
  CAF_REQUIRE(drive_to("refused"));
  CAF_CHECK(contains(last_error(), "no longer starts at 0"));
  CAF_CHECK(!world->has_meta());
  stays_refused();
}

CAF_TEST(stored meta of another topic id is refused) {
  fill(0, 5);
  auto other = world->identity();
  other.topic_id = fake_world::default_topic_id(9);
  world->put_meta(other);
  world->put_checkpoint(other, 0, 3);
  planted[0] = 3;
  start();
  CAF_REQUIRE(drive_to("refused"));
  CAF_CHECK(contains(last_error(), "field topic_id"));
  CAF_CHECK(contains(last_error(), "deleted and recreated"));
  stays_refused();
}

CAF_TEST(checkpoints without meta are refused) {
  fill(0, 5);
  world->put_checkpoint(world->identity(), 0, 3);
  planted[0] = 3;
  start();
  CAF_REQUIRE(drive_to("refused"));
  CAF_CHECK(contains(last_error(), "meta hash is missing"));
  CAF_CHECK(!world->has_meta());
  stays_refused();
}

CAF_TEST(a partition count that differs from the configuration is refused) {
  fill(0, 5);
  settings.partition_count = 2; // the topic has 3
  start();
  CAF_REQUIRE(drive_to("refused"));
  CAF_CHECK(contains(last_error(), "partition_count"));
  CAF_CHECK(!world->has_meta());
  stays_refused();
}

CAF_TEST(a start outside the consumer range check is refused) {
  // The plan passed (checkpoint 4 in [0, 10]) but retention moved low past it
  // before the consumer's own [low, high] check.
  fill(0, 10);
  seed_checkpoints({{0, 4}});
  auto w = world.get();
  world->on_inspect = [w] { w->truncate(0, 6); };
  start();
  CAF_REQUIRE(drive_to("refused"));
  CAF_CHECK_EQUAL(world->calls.start, 1u);
  CAF_CHECK(contains(last_error(), "start outside the retained range"));
  CAF_CHECK_EQUAL(world->calls.write_checkpoint, 0u);
  stays_refused();
}

CAF_TEST(records deleted by retention before they were projected are refused after the restart) {
  fill(0, 30);
  settings.max_batch_records = 5;
  start();
  CAF_REQUIRE(drive([&] { return world->checkpoint(0).value_or(0) >= 10; }));
  world->truncate(0, 25); // the reader's position is gone
  CAF_REQUIRE(drive_to("refused"));
  CAF_CHECK_EQUAL(count_state("dirty"), 1u);
  CAF_CHECK_EQUAL(failures_of("kafka_read"), 1u);
  CAF_CHECK(contains(last_error(), "below the low watermark"));
  CAF_CHECK_LESS(world->checkpoint(0).value_or(0), 25);
  stays_refused();
}

CAF_TEST_FIXTURE_SCOPE_END()
