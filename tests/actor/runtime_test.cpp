// Fail closed at run time: the identity fence, deadlines on Redis, the
// prerequisites, the startup order, PULL beside the write pipeline, the data
// callback, and supervision that ends everything however the projection ends.
// (Every test also runs the fixture's invariants, the fence's among them.)
#include "tests/actor/fixture.hpp"

using namespace qsp;
using namespace qsp::test;

namespace {

struct Runtime : projection_fixture {
  /// The topic is deleted and recreated (new topic id) under the running
  /// node, and the new topic is filled past the node's position: librdkafka
  /// keeps fetching from the old position.  No checkpoint may pass the old
  /// topic's end; the node leaves ready and refuses.
  void recreate_under_running_node() {
    fill(0, 10);
    fill(1, 10);
    start();
    ASSERT_TRUE(drive_to("ready"));
    auto before = world->checkpoints();
    ASSERT_EQ(before[0], 10);
    bool passed = false;
    world->on_checkpoint_written = [&](int32_t, int64_t next) { passed |= next > 10; };
    world->topic_id = fake_world::default_topic_id(7);
    fill(0, 20);
    fill(1, 20);
    ASSERT_TRUE(drive_to("refused"));
    EXPECT_TRUE(!passed);
    EXPECT_TRUE(world->checkpoints() == before);
    EXPECT_TRUE(contains(last_error(), "field topic_id"));
    EXPECT_EQ(failures_of("identity_changed"), 1u);
    auto gate = pull("u1", 5);
    ASSERT_TRUE(!gate);
    EXPECT_TRUE(has_code(gate.error(), ec::not_ready));
    // Nothing moves afterwards: the refusal is final.
    run_for(5s, 50ms);
    EXPECT_TRUE(world->checkpoints() == before);
    EXPECT_EQ(state(), "refused");
  }

  /// Runs the jobs runnable now from inside a port call: the deterministic
  /// scheduler's stand-in for the actors that run on other threads while a
  /// detached actor blocks in I/O.  Returns how many ran.
  size_t run_nested() {
    size_t n = 0;
    for (; n < 100000 && violations.empty() && rt.run_once(); ++n)
      check_invariants();
    return n;
  }

  /// True if a reader of `p` reached `pos` while an identity read was under
  /// way (between its identity_start and its end).
  bool fetched_during_a_read(int32_t p, int64_t pos) {
    std::lock_guard<std::recursive_mutex> g{world->mtx};
    std::set<int64_t> open;
    for (auto& e : world->events) {
      switch (e.what) {
        case fake_event::kind::identity_start:
          open.insert(e.offset);
          break;
        case fake_event::kind::identity:
        case fake_event::kind::identity_failed:
          open.erase(e.offset);
          break;
        case fake_event::kind::fetched:
          if (!open.empty() && e.partition == p && e.offset == pos)
            return true;
          break;
        default:
          break;
      }
    }
    return false;
  }
};

/// Adds the recipients of `d` to the world's sorted sets (ZADD GT), as a
/// writer would.
void project(fake_world& w, const core::dispatch& d) {
  for (auto& user : d.recipients) {
    auto [it, fresh] = w.sessions[user].emplace(d.conversation_id, d.created_at);
    if (!fresh && it->second < d.created_at)
      it->second = d.created_at;
  }
}

} // namespace

TEST_F(Runtime, ATopicRecreatedUnderARunningNodeIsCaughtByTheFence) {
  // The periodic check is far away: only the fence before each checkpoint
  // can catch it.
  settings.identity_check_interval = 1h;
  settings.identity_check_min_gap = 0ms;
  ASSERT_NO_FATAL_FAILURE(recreate_under_running_node());
}

TEST_F(Runtime, ATopicRecreatedRightAfterACheckWaitsForTheNextOne) {
  // Checks run every 100 ms; the last one before the recreation saw the old
  // id.  The batches fetched after it must wait for a later check.
  settings.identity_check_interval = 100ms;
  settings.identity_check_min_gap = 100ms;
  ASSERT_NO_FATAL_FAILURE(recreate_under_running_node());
}

TEST_F(Runtime, AnIdentityChangeWhileIdleLeavesReadyWithinOneInterval) {
  settings.identity_check_interval = 200ms;
  fill(0, 5);
  start();
  ASSERT_TRUE(drive_to("ready"));
  world->cluster_id = "another-cluster";
  run_for(250ms);
  EXPECT_EQ(state(), "refused");
  EXPECT_TRUE(contains(last_error(), "field cluster_id"));
  auto st = status();
  ASSERT_TRUE(st);
  EXPECT_TRUE(!st->ready);
}

TEST_F(Runtime, CheckpointsWaitForTheFenceAndThenAdvance) {
  settings.identity_check_interval = 1h;
  settings.identity_check_min_gap = 300ms;
  fill(0, 10);
  start();
  ASSERT_TRUE(drive_to("ready"));
  run_for(400ms); // the last check is now older than the gap
  auto checks = stats->identity_checks.load();
  fill(0, 5);
  run_jobs(); // the data callback wakes the consumer; no clock needed
  EXPECT_TRUE(world->checkpoint(0) == std::optional<int64_t>{15});
  EXPECT_EQ(stats->identity_checks.load(), checks + 1);
  // Right after a check, the next batch's checkpoint waits for the gap.
  fill(0, 5);
  run_jobs();
  EXPECT_TRUE(world->score("u0", "p0-c15")); // its ZADDs are written
  EXPECT_TRUE(world->checkpoint(0) == std::optional<int64_t>{15});
  run_for(300ms);
  EXPECT_TRUE(world->checkpoint(0) == std::optional<int64_t>{20});
  EXPECT_EQ(stats->identity_checks.load(), checks + 2);
}

TEST_F(Runtime, ABatchConfirmedAfterTheCheckBeforeItWasAnsweredGetsACheckOfItsOwn) {
  // Two partitions, one batch each, both sent before the first confirmation:
  // both were fetched before any check was requested.  The first batch's
  // check is answered before the second batch's replies are in; the second
  // must then request a check itself, or its checkpoint waits forever (a
  // catch-up hung a batch short of H0 once the log was drained).
  settings.identity_check_interval = 1h;
  fill(0, 50);
  fill(1, 50);
  h0 = world->lsos();
  start();
  for (int i = 0; i < 100000 && world->calls.confirm - world->calls.not_yet < 1; ++i)
    if (!rt.run_once())
      rt.advance_time(1ms);
  ASSERT_EQ(world->calls.confirm - world->calls.not_yet, 1u);
  ASSERT_EQ(world->calls.max_unconfirmed, 2u); // the second batch was sent before
  world->confirm_not_yet = 1; // its replies come after the fence answered
  ASSERT_TRUE(drive_to("ready"));
  EXPECT_TRUE(world->checkpoint(0) == std::optional<int64_t>{50});
  EXPECT_TRUE(world->checkpoint(1) == std::optional<int64_t>{50});
}

TEST_F(Runtime, ABatchConfirmedAfterTheCheckThatCoversItIsCheckpointedWithoutAnother) {
  // Both batches reach the writer before its first fence request.  The
  // second one's replies come in only after that request was answered, and
  // that check covers it (it started after the batch arrived).  Its
  // checkpoint must not wait for a further request nobody sends: the
  // periodic check is an hour away, and a catch-up stalled here for good.
  settings.identity_check_interval = 1h;
  settings.max_batch_records = 5;
  settings.max_batches_in_flight = 2;
  world->partitions.resize(1);
  fill(0, 10);
  h0 = world->lsos();
  start();
  for (size_t i = 0; i < 100000 && world->calls.confirm == 0 && rt.run_once(); ++i)
    check_invariants();
  ASSERT_EQ(world->calls.confirm, 1u); // the first batch's replies are read
  ASSERT_EQ(world->calls.apply, 2u);   // both batches were sent before that
  world->confirm_not_yet = 1;                  // the second's come in later
  ASSERT_TRUE(drive_to("ready", 200));
  EXPECT_TRUE(world->checkpoints() == h0);
  EXPECT_EQ(world->calls.not_yet, 1u);
}

TEST_F(Runtime, AnIdentityCheckTheBrokerDoesNotAnswerMakesTheNodeDirtyUntilItDoes) {
  fill(0, 5);
  start();
  ASSERT_TRUE(drive_to("ready"));
  world->identity_fault.arm(-1);
  run_for(2s);
  EXPECT_EQ(state(), "dirty");
  EXPECT_GE(failures_of("kafka_unavailable"), 1u);
  EXPECT_GE(stats->identity_check_errors.load(), 1u);
  auto readies = count_state("ready");
  run_for(10s, 50ms);
  EXPECT_EQ(count_state("ready"), readies); // not ready while unanswered
  world->identity_fault.disarm();
  ASSERT_TRUE(drive_to("ready"));
}

TEST_F(Runtime, TheFenceInvariantCountsACheckFromItsStartNotFromItsAnswer) {
  // A writer driven by hand over the fakes, not the projection: its consumer
  // fetches more records while the check runs, and it checkpoints them on
  // that check's answer.  Only that write breaks the fence, and the
  // invariant must say so (a check logged only when answered, as before,
  // covered them).
  fill(0, 10);
  world->put_meta(world->identity());
  fake_dispatch_log log{world};
  ASSERT_TRUE(log.start({{0, 0}}));
  auto reader = log.reader(0);
  ASSERT_TRUE(reader != nullptr);
  fake_broker_inspector broker{world};
  fake_checkpoint_store store{world};
  auto fetch_and_project = [&](size_t n) {
    std::vector<log_record> out;
    int64_t passed = -1;
    EXPECT_TRUE(reader->poll(n, out, passed));
    core::json_decoder dec;
    for (auto& r : out) {
      core::dispatch d;
      std::string why;
      EXPECT_TRUE(dec.decode(r.value, d, why));
      project(*world, d);
    }
  };
  fetch_and_project(5);
  world->during_identity = [&] { fetch_and_project(5); };
  ASSERT_TRUE(broker.identity(world->topic));
  world->during_identity = nullptr;
  check_invariants();
  ASSERT_TRUE(violations.empty());
  auto id = world->identity();
  // Fetched before the check began: covered.
  ASSERT_TRUE(store.write_checkpoint(id, 0, -1, 5));
  check_invariants();
  EXPECT_TRUE(violations.empty());
  // Fetched while it ran: not covered, although every ZADD is in.
  ASSERT_TRUE(store.write_checkpoint(id, 0, 5, 10));
  check_invariants();
  ASSERT_EQ(violations.size(), 1u);
  EXPECT_TRUE(contains(violations[0], "checkpoint of partition 0 written to 10"));
  EXPECT_TRUE(contains(violations[0], "verified up to 5"));
  violations.clear(); // the violation this test provoked
  // A check that begins after them covers them.
  ASSERT_TRUE(broker.identity(world->topic));
  ASSERT_TRUE(store.write_checkpoint(id, 0, 10, 10));
  check_invariants();
  EXPECT_TRUE(violations.empty());
}

TEST_F(Runtime, RecordsFetchedWhileACheckRunsWaitForACheckThatStartsAfterThem) {
  settings.identity_check_interval = 1h; // min gap 0: every confirmed batch asks at once
  fill(0, 10);
  start();
  ASSERT_TRUE(drive_to("ready"));
  ASSERT_TRUE(world->checkpoint(0) == std::optional<int64_t>{10});
  auto checks = stats->identity_checks.load();
  size_t nested = 0;
  world->during_identity = [&] {
    world->during_identity = nullptr;
    fill(0, 5); // 15..19: the consumer fetches them and the writer sends them
    nested = run_nested();
  };
  fill(0, 5); // 10..14: their batch asks the fence, whose check lets 15..19 in
  run_jobs();
  ASSERT_GT(nested, 0u);
  ASSERT_TRUE(fetched_during_a_read(0, 20));
  EXPECT_TRUE(world->score("u0", "p0-c15")); // the ZADDs went out meanwhile
  ASSERT_TRUE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{20}; }));
  // The check that was running covered 10..14 only; 15..19 needed another.
  EXPECT_EQ(stats->identity_checks.load(), checks + 2);
  EXPECT_TRUE(world->sessions == expected_sessions());
}

TEST_F(Runtime, ATopicReplacedWhileACheckRunsIsRefusedBeforeItsRecordsAreCheckpointed) {
  settings.identity_check_interval = 1h;
  fill(0, 10);
  start();
  ASSERT_TRUE(drive_to("ready"));
  world->during_identity = [&] {
    world->during_identity = nullptr;
    // Deleted and recreated while the check is under way; the check still
    // answers what it read when it began (the old topic id).  The consumer
    // fetches the new topic's records meanwhile.
    world->topic_id = fake_world::default_topic_id(7);
    fill(0, 10);
    run_nested();
  };
  fill(0, 5);
  ASSERT_TRUE(drive_to("refused"));
  EXPECT_TRUE(fetched_during_a_read(0, 25));
  // The old topic's records, fetched before that check began, and no further.
  EXPECT_TRUE(world->checkpoint(0) == std::optional<int64_t>{15});
  EXPECT_TRUE(contains(last_error(), "field topic_id"));
  EXPECT_EQ(failures_of("identity_changed"), 1u);
}

TEST_F(Runtime, AFrozenRedisMakesTheNodeDirtyWithinTheDeadlineAndItRecovers) {
  settings.redis.command_timeout = 1s;
  fill(0, 10);
  fill(1, 10);
  start();
  ASSERT_TRUE(drive_to("ready"));
  auto readies = count_state("ready");
  world->redis_frozen = true;
  fill(0, 10);
  run_for(1500ms);
  EXPECT_EQ(state(), "dirty");
  EXPECT_TRUE(contains(last_error(), "redis.command-timeout")
            || contains(last_error(), "timed out"));
  // The freeze outlasts every timeout and backoff: never ready meanwhile.
  run_for(20s, 50ms);
  EXPECT_EQ(count_state("ready"), readies);
  EXPECT_NE(state(), "ready");
  auto gate = pull("u1", 5);
  ASSERT_TRUE(!gate);
  EXPECT_TRUE(has_code(gate.error(), ec::not_ready));
  world->redis_frozen = false;
  h0 = world->lsos();
  ASSERT_TRUE(drive_to("ready"));
  ASSERT_TRUE(drive([&] {
    return world->checkpoint(0) == std::optional<int64_t>{20}
           && world->checkpoint(1) == std::optional<int64_t>{10};
  }));
  EXPECT_TRUE(world->sessions == expected_sessions());
}

TEST_F(Runtime, OneFailedZADDReplyOnALiveConnectionIsAFailureAndTheReplayRepairsIt) {
  fill(0, 30);
  fill(1, 30);
  h0 = world->lsos();
  settings.max_batch_records = 5;
  world->reply_error_fault.arm(1, 3); // the 4th send's first ZADD fails
  start();
  ASSERT_TRUE(drive_to("dirty"));
  EXPECT_EQ(failures_of("redis_reply"), 1u);
  EXPECT_TRUE(contains(last_error(), "error reply"));
  ASSERT_TRUE(drive_to("ready"));
  EXPECT_TRUE(world->checkpoint(0) == std::optional<int64_t>{30});
  EXPECT_TRUE(world->checkpoint(1) == std::optional<int64_t>{30});
  EXPECT_TRUE(world->sessions == expected_sessions());
}

TEST_F(Runtime, RepliesThatAreNotInYetAreWaitedForAndNotFailed) {
  fill(0, 30);
  h0 = world->lsos();
  world->confirm_not_yet = 40;
  start();
  ASSERT_TRUE(drive_to("ready"));
  EXPECT_TRUE(!saw("dirty"));
  EXPECT_GE(world->calls.not_yet, 40u);
  EXPECT_TRUE(world->sessions == expected_sessions());
}

TEST_F(Runtime, RecordsAreFoundThroughTheDataCallbackWithoutTheIdleTimer) {
  fill(0, 5);
  start();
  ASSERT_TRUE(drive_to("ready"));
  settings.idle_poll = 1h; // only affects how drive() moves the clock from here
  auto wakes = world->calls.wakes;
  fill(0, 7);
  run_jobs();
  EXPECT_GT(world->calls.wakes, wakes);
  EXPECT_TRUE(world->checkpoint(0) == std::optional<int64_t>{12});
}

TEST_F(Runtime, PullIsAnsweredWhileTheWritePipelineWaitsForReplies) {
  fill(0, 5);
  start();
  ASSERT_TRUE(drive_to("ready"));
  world->confirm_not_yet = 1000000;
  fill(0, 5);
  run_jobs();
  ASSERT_TRUE(world->checkpoint(0) == std::optional<int64_t>{5}); // still waiting
  auto got = pull("u1", 10);
  ASSERT_TRUE(got);
  session_list want;
  for (auto& [conv, score] : world->sessions["u1"])
    want.push_back(session_entry{conv, score});
  std::sort(want.begin(), want.end(),
            [](auto& a, auto& b) { return a.last_active > b.last_active; });
  ASSERT_EQ(got->size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_EQ((*got)[i].conversation_id, want[i].conversation_id);
  world->confirm_not_yet = 0;
}

TEST_F(Runtime, StartupReadsRedisBeforeTheBroker) {
  fill(0, 5);
  auto w = world.get();
  auto reads_at_inspect = std::make_shared<uint64_t>(0);
  world->on_inspect = [w, reads_at_inspect] { *reads_at_inspect = w->calls.read; };
  start();
  ASSERT_TRUE(drive_to("ready"));
  EXPECT_EQ(*reads_at_inspect, 1u);
}

TEST_F(Runtime, AnEvictingRedisIsRefusedUnlessTheOperatorAllowsIt) {
  fill(0, 5);
  world->maxmemory_policy = "allkeys-lru";
  start();
  ASSERT_TRUE(drive_to("refused"));
  EXPECT_TRUE(contains(last_error(), "maxmemory-policy"));
  EXPECT_TRUE(contains(last_error(), "allkeys-lru"));
  EXPECT_TRUE(!world->has_meta());
}

TEST_F(Runtime, AnEvictingRedisStartsWithRedisAllowEviction) {
  fill(0, 5);
  world->maxmemory_policy = "allkeys-lru";
  settings.redis.allow_eviction = true;
  start();
  ASSERT_TRUE(drive_to("ready"));
}

TEST_F(Runtime, ACompactedDispatchTopicIsRefused) {
  fill(0, 5);
  world->cleanup_policy = "compact,delete";
  start();
  ASSERT_TRUE(drive_to("refused"));
  EXPECT_TRUE(contains(last_error(), "cleanup.policy"));
  EXPECT_TRUE(contains(last_error(), "compact,delete"));
}

TEST_F(Runtime, AnExitMessageToTheProjectionEndsEveryChild) {
  auto before = sys.registry().running();
  fill(0, 5);
  start();
  ASSERT_TRUE(drive_to("ready"));
  ASSERT_GT(sys.registry().running(), before + 8); // listener + 8 of the projection
  caf::anon_send_exit(proj, caf::exit_reason::user_shutdown);
  run_jobs();
  EXPECT_EQ(sys.registry().running(), before + 1); // the listener
  auto polls = world->calls.poll;
  auto identities = world->calls.identity;
  fill(0, 5);
  run_for(5s, 50ms);
  EXPECT_EQ(world->calls.poll, polls);
  EXPECT_EQ(world->calls.identity, identities);
  proj = nullptr;
}

TEST_F(Runtime, ALinkedHostActorThatDiesEndsTheProjectionAndItsChildren) {
  auto before = sys.registry().running();
  fill(0, 5);
  start();
  ASSERT_TRUE(drive_to("ready"));
  auto target = caf::actor_cast<caf::actor>(proj);
  auto host = sys.spawn([target](caf::event_based_actor* self) -> caf::behavior {
    self->link_to(target);
    return {[](int) {}};
  });
  run_jobs();
  caf::anon_send_exit(host, caf::exit_reason::kill);
  run_jobs();
  EXPECT_EQ(sys.registry().running(), before + 1); // the listener
  proj = nullptr;
}

TEST_F(Runtime, AKilledProjectionStillEndsItsChildren) {
  auto before = sys.registry().running();
  fill(0, 5);
  start();
  ASSERT_TRUE(drive_to("ready"));
  caf::anon_send_exit(proj, caf::exit_reason::kill); // cannot be trapped
  run_jobs();
  EXPECT_EQ(sys.registry().running(), before + 1); // the listener
  proj = nullptr;
}
