// Transient failures: dirty, jittered exponential backoff, restart from the
// checkpoints, no loss; and checkpoints changed behind the writer's back.
#include <algorithm>
#include <random>

#include "tests/actor/fixture.hpp"

using namespace qsp;
using namespace qsp::test;

namespace {

struct Failures : projection_fixture {
  /// Three partitions of `n` records each, small batches.
  void three_partitions(int n, size_t batch = 5) {
    for (int32_t p = 0; p < 3; ++p)
      fill(p, n);
    settings.max_batch_records = batch;
  }

  /// Checkpoints as starts: absent -> 0.
  std::map<int32_t, int64_t> starts_now() {
    std::map<int32_t, int64_t> out;
    for (int32_t p = 0; p < world->partition_count(); ++p)
      out[p] = world->checkpoint(p).value_or(0);
    return out;
  }

  /// Steps the clock by 1ms (running every job) until `done()`; returns the
  /// simulated time that took (or `limit`).
  template <class Pred>
  caf::timespan time_until(Pred done, caf::timespan limit = 10s) {
    auto t0 = now();
    while (violations.empty() && !done() && now() - t0 < limit) {
      rt.advance_time(1ms);
      while (rt.run_once())
        check_invariants();
    }
    return now() - t0;
  }

  /// One transient fault: dirty once, then ready with everything projected.
  void transient_then_ready(fault& f, const std::string& code, int64_t after = 0) {
    three_partitions(12, 4);
    h0 = world->lsos();
    f.arm(1, after);
    start();
    ASSERT_TRUE(drive_to("dirty"));
    EXPECT_EQ(failures_of(code), 1u);
    EXPECT_TRUE(contains(last_error(), "injected failure"));
    auto cps = starts_now();
    ASSERT_TRUE(drive_to("ready"));
    EXPECT_EQ(count_state("dirty"), 1u);
    EXPECT_TRUE(world->checkpoints() == h0);
    EXPECT_TRUE(world->sessions == expected_sessions());
    auto st = status();
    ASSERT_TRUE(st);
    EXPECT_EQ(st->restarts, 1u);
    ASSERT_EQ(st->partitions.size(), 3u);
    for (auto& ps : st->partitions)
      EXPECT_EQ(ps.start, cps[ps.partition]);
  }
};

bool within(caf::timespan x, caf::timespan lo, caf::timespan hi) {
  return x >= lo && x <= hi;
}

std::string ms(caf::timespan x) {
  return std::to_string(std::chrono::duration_cast<std::chrono::microseconds>(x).count() / 1000.0)
         + "ms";
}

} // namespace

TEST_F(Failures, AFailedZADDPipelineLeavesTheCheckpointAndRestartsFromIt) {
  three_partitions(30);
  h0 = world->lsos();
  world->apply_fault.arm(1, 10); // the 11th batch fails before writing anything
  start();
  ASSERT_TRUE(drive_to("dirty"));
  EXPECT_GE(world->calls.apply, 5u);
  EXPECT_EQ(failures_of("redis_unavailable"), 1u);
  EXPECT_TRUE(contains(last_error(), "ZADD pipeline"));
  auto gate = pull("u1", 5);
  ASSERT_TRUE(!gate);
  EXPECT_TRUE(has_code(gate.error(), ec::not_ready));
  // Of the ten batches sent before the failed one, at most six (two per
  // partition) were still unconfirmed: those get no checkpoint when the
  // pipeline breaks; the others kept theirs.
  int64_t confirmed = 0;
  for (auto& [p, cp] : world->checkpoints())
    confirmed += cp;
  EXPECT_GE(confirmed, 20);
  EXPECT_LE(confirmed, 50);
  auto cps = starts_now();
  auto verifies = world->calls.read;
  ASSERT_TRUE(drive_to("ready"));
  EXPECT_EQ(world->calls.read, verifies + 1);
  EXPECT_TRUE(world->checkpoints() == h0);
  EXPECT_TRUE(world->sessions == expected_sessions());
  auto st = status();
  ASSERT_TRUE(st);
  EXPECT_EQ(st->restarts, 1u);
  for (auto& ps : st->partitions)
    EXPECT_EQ(ps.start, cps[ps.partition]);
  EXPECT_EQ(stats->restarts.load(), 1u);
}

TEST_F(Failures, ADisconnectAfterSomeRecipientsWereWrittenReplaysWithoutLoss) {
  // One partition, so that the failing calls are deterministic.  One
  // conversation appears with a newer, an older and a newer-again created_at:
  // GT keeps the newest, whatever is replayed.
  world->partitions.resize(1);
  world->append(0, "shared", 5000, {"a", "b", "c"});
  fill(0, 5, 3);
  world->append(0, "shared", 3000, {"a", "b", "c"}); // older: loses
  fill(0, 5, 3);
  world->append(0, "shared", 6000, {"c"}); // newer for c
  fill(0, 3, 3);
  settings.max_batch_records = 3;
  settings.max_batches_in_flight = 1; // the first batch is confirmed before the second is sent
  h0 = world->lsos();
  auto calls = std::make_shared<std::vector<std::vector<test::applied_update>>>();
  world->on_apply = [calls](const std::vector<test::applied_update>& ups) { calls->push_back(ups); };
  world->partial_apply_writes = 1;
  world->partial_apply_fault.arm(2, 1); // the 2nd and 3rd apply write one user, then fail
  start();
  ASSERT_TRUE(drive_to("dirty"));
  ASSERT_EQ(calls->size(), 2u);
  // The failed call wrote its first update only, and no checkpoint covers it.
  auto& failing = calls->back();
  ASSERT_GT(failing.size(), 1u);
  bool first_written = true, rest_complete = true;
  for (auto& [conv, score] : failing.front().members)
    first_written &= world->score(failing.front().user, conv).value_or(-1) >= score;
  for (size_t i = 1; i < failing.size(); ++i)
    for (auto& [conv, score] : failing[i].members)
      rest_complete &= world->score(failing[i].user, conv).value_or(-1) >= score;
  EXPECT_TRUE(first_written);
  EXPECT_TRUE(!rest_complete);
  // The first batch's checkpoint may still have waited for the identity
  // fence when the writer failed: none, or exactly the first batch's end.
  EXPECT_TRUE(world->checkpoint(0).value_or(3) == 3);
  ASSERT_TRUE(drive_to("ready"));
  EXPECT_EQ(count_state("dirty"), 2u);
  EXPECT_TRUE(world->checkpoints() == h0);
  EXPECT_TRUE(world->sessions == expected_sessions());
  EXPECT_TRUE(world->score("a", "shared") == std::optional<int64_t>{5000});
  EXPECT_TRUE(world->score("b", "shared") == std::optional<int64_t>{5000});
  EXPECT_TRUE(world->score("c", "shared") == std::optional<int64_t>{6000});
}

TEST_F(Failures, AFailedCheckpointWriteRestartsWithoutSkippingAnOffset) {
  three_partitions(20);
  h0 = world->lsos();
  world->write_fault.arm(1, 3);
  start();
  ASSERT_TRUE(drive_to("dirty"));
  EXPECT_EQ(failures_of("redis_unavailable"), 1u);
  EXPECT_TRUE(contains(last_error(), "guarded checkpoint write"));
  // The ZADDs of the failed batch went out, its checkpoint did not.
  EXPECT_GE(world->calls.apply, 4u);
  int64_t confirmed = 0;
  for (auto& [p, cp] : world->checkpoints())
    confirmed += cp;
  EXPECT_GE(confirmed, 15);
  EXPECT_LT(confirmed, 60);
  ASSERT_TRUE(drive_to("ready"));
  EXPECT_TRUE(world->checkpoints() == h0);
  EXPECT_TRUE(world->sessions == expected_sessions());
}

TEST_F(Failures, ACheckpointWrittenWhoseReplyWasLostIsResumedFrom) {
  three_partitions(20);
  h0 = world->lsos();
  world->write_lost_reply_fault.arm(1, 2);
  start();
  ASSERT_TRUE(drive_to("dirty"));
  auto cps = starts_now();
  int64_t confirmed = 0;
  for (auto& [p, cp] : cps)
    confirmed += cp;
  EXPECT_GE(confirmed, 15); // the third write landed
  ASSERT_TRUE(drive_to("ready"));
  auto st = status();
  ASSERT_TRUE(st);
  for (auto& ps : st->partitions)
    EXPECT_EQ(ps.start, cps[ps.partition]);
  EXPECT_TRUE(world->checkpoints() == h0);
  EXPECT_TRUE(world->sessions == expected_sessions());
}

TEST_F(Failures, AConsumerReadErrorMakesTheProjectionDirtyAndItRestarts) {
  three_partitions(20);
  h0 = world->lsos();
  world->poll_fault_partition = 1;
  world->poll_fault.arm(1, 2);
  start();
  ASSERT_TRUE(drive_to("dirty"));
  EXPECT_EQ(failures_of("kafka_read"), 1u);
  ASSERT_TRUE(drive_to("ready"));
  EXPECT_TRUE(world->checkpoints() == h0);
  EXPECT_TRUE(world->sessions == expected_sessions());
}

TEST_F(Failures, AFailureAfterReadinessClosesTheGateUntilReadyAgain) {
  three_partitions(10);
  start();
  ASSERT_TRUE(drive_to("ready"));
  ASSERT_TRUE(pull("u1", 3));
  world->poll_fault.arm(1);
  ASSERT_TRUE(drive_to("dirty"));
  auto gate = pull("u1", 3);
  ASSERT_TRUE(!gate);
  EXPECT_TRUE(has_code(gate.error(), ec::not_ready));
  fill(0, 5);
  ASSERT_TRUE(drive_to("ready"));
  EXPECT_TRUE(world->checkpoint(0) == std::optional<int64_t>{15});
  EXPECT_TRUE(pull("u1", 3));
  EXPECT_TRUE(world->sessions == expected_sessions());
}

// Issue 45, rule 6: ready is a claim about Redis even while idle.  A pull
// that meets a lost Redis connection (a failover or restart may have rolled
// writes back under the gate) answers the puller and closes the gate: no
// later pull is served until the restart from the checkpoints has replayed
// what Redis lost.  (Before: the projection stayed ready and the next pull
// served from a fresh connection.)
TEST_F(Failures, AFailedSessionReadAnswersThePullerAndClosesTheGateUntilReplayed) {
  three_partitions(5);
  start();
  ASSERT_TRUE(drive_to("ready"));
  world->sessions_fault.arm(1);
  auto r = pull("u1", 3);
  ASSERT_TRUE(!r);
  EXPECT_TRUE(has_code(r.error(), ec::redis_unavailable));
  ASSERT_TRUE(drive_to("dirty"));
  auto refused = pull("u1", 3);
  ASSERT_TRUE(!refused);
  EXPECT_TRUE(has_code(refused.error(), ec::not_ready));
  ASSERT_TRUE(drive_to("ready"));
  EXPECT_EQ(count_state("dirty"), 1u);
  EXPECT_TRUE(pull("u1", 3));
}

TEST_F(Failures, TransientCheckpointReadFails) {
  ASSERT_NO_FATAL_FAILURE(transient_then_ready(world->read_fault, "redis_unavailable"));
}

TEST_F(Failures, TransientServerVersionFails) {
  ASSERT_NO_FATAL_FAILURE(transient_then_ready(world->version_fault, "redis_unavailable"));
}

TEST_F(Failures, TransientMetaCreationFails) {
  ASSERT_NO_FATAL_FAILURE(transient_then_ready(world->create_meta_fault, "redis_unavailable"));
  EXPECT_TRUE(world->has_meta());
}

TEST_F(Failures, TransientConsumerStartFails) {
  ASSERT_NO_FATAL_FAILURE(transient_then_ready(world->start_fault, "kafka_unavailable"));
}

TEST_F(Failures, TransientIdentityReCheckCannotReachTheBroker) {
  ASSERT_NO_FATAL_FAILURE(transient_then_ready(world->identity_fault, "kafka_unavailable"));
}

TEST_F(Failures, TransientInspectorCannotBeMade) {
  ASSERT_NO_FATAL_FAILURE(transient_then_ready(world->make_inspector_fault, "kafka_unavailable"));
}

TEST_F(Failures, TransientCheckpointConnectionCannotBeMade) {
  ASSERT_NO_FATAL_FAILURE(transient_then_ready(world->make_checkpoint_store_fault, "redis_unavailable"));
}

TEST_F(Failures, TransientSessionConnectionCannotBeMade) {
  ASSERT_NO_FATAL_FAILURE(transient_then_ready(world->make_session_store_fault, "redis_unavailable"));
}

TEST_F(Failures, TransientDispatchLogConsumerCannotBeMade) {
  ASSERT_NO_FATAL_FAILURE(transient_then_ready(world->make_dispatch_log_fault, "kafka_unavailable"));
}

TEST_F(Failures, RepliesLostAfterRedisRanTheZADDsLeaveNoCheckpointAndAreReplayed) {
  // The second batch's ZADDs are executed but their replies never arrive:
  // its checkpoint must not be written, and the replay converges.
  three_partitions(12, 4);
  h0 = world->lsos();
  world->confirm_fault.arm(1, 1);
  start();
  ASSERT_TRUE(drive_to("dirty"));
  EXPECT_EQ(failures_of("redis_unavailable"), 1u);
  EXPECT_TRUE(contains(last_error(), "pipelined ZADD replies"));
  // At most the first batch (4 records) was confirmed and checkpointed (its
  // checkpoint may still have waited for the identity fence).
  int64_t confirmed = 0;
  for (auto& [p, cp] : world->checkpoints())
    confirmed += cp;
  EXPECT_TRUE(confirmed == 0 || confirmed == 4);
  ASSERT_TRUE(drive_to("ready"));
  EXPECT_EQ(count_state("dirty"), 1u);
  EXPECT_TRUE(world->checkpoints() == h0);
  EXPECT_TRUE(world->sessions == expected_sessions());
}

TEST_F(Failures, TheRestartWaitsForTheBackoffDelay) {
  three_partitions(5);
  world->inspect_fault.arm(1);
  start();
  ASSERT_TRUE(drive_to("dirty"));
  ASSERT_EQ(world->calls.inspect, 1u);
  auto logs = world->calls.make_dispatch_log;
  // Jitter is in [0.5, 1.5]: nothing happens before half the initial delay ...
  run_for(settings.backoff_initial / 2 - 1ms, 1ms);
  EXPECT_EQ(world->calls.inspect, 1u);
  EXPECT_EQ(world->calls.make_dispatch_log, logs);
  EXPECT_EQ(state(), "dirty");
  // ... and the restart has happened once 1.5 times the delay passed.
  run_for(settings.backoff_initial + 2ms, 1ms);
  EXPECT_EQ(world->calls.inspect, 2u);
  EXPECT_EQ(world->calls.make_dispatch_log, logs + 1);
  ASSERT_TRUE(drive_to("ready"));
}

TEST_F(Failures, BackoffGrowsExponentiallyAcrossConsecutiveFailuresAndResetsOnReady) {
  three_partitions(5);
  h0 = world->lsos();
  world->inspect_fault.arm(4);
  start();
  ASSERT_TRUE(drive_to("dirty"));
  std::vector<caf::timespan> waits;
  for (int k = 0; k < 4; ++k) {
    auto calls = world->calls.inspect;
    waits.push_back(time_until([&] { return world->calls.inspect > calls; }));
  }
  ASSERT_TRUE(drive_to("ready"));
  for (size_t k = 0; k < waits.size(); ++k) {
    auto delay = settings.backoff_initial * (int64_t{1} << k);
    EXPECT_TRUE(within(waits[k], delay / 2, delay * 3 / 2 + 1ms))
      << "restart " << k << " after " << ms(waits[k]);
  }
  EXPECT_GT(waits[3], waits[0]);
  EXPECT_EQ(count_state("dirty"), 4u);
  // Ready reset the attempt counter: the next failure backs off from the start.
  world->poll_fault.arm(1);
  ASSERT_TRUE(drive_to("dirty"));
  auto logs = world->calls.make_dispatch_log;
  auto w = time_until([&] { return world->calls.make_dispatch_log > logs; });
  EXPECT_TRUE(within(w, settings.backoff_initial / 2, settings.backoff_initial * 3 / 2 + 1ms));
  ASSERT_TRUE(drive_to("ready"));
  EXPECT_TRUE(world->sessions == expected_sessions());
}

TEST_F(Failures, BackoffIsCappedAtBackoffMax) {
  three_partitions(2);
  settings.backoff_max = 300ms;
  world->inspect_fault.arm(6);
  start();
  ASSERT_TRUE(drive_to("dirty"));
  std::vector<caf::timespan> waits;
  for (int k = 0; k < 6; ++k) {
    auto calls = world->calls.inspect;
    waits.push_back(time_until([&] { return world->calls.inspect > calls; }));
  }
  for (size_t k = 2; k < waits.size(); ++k)
    EXPECT_TRUE(within(waits[k], 150ms, 451ms));
  ASSERT_TRUE(drive_to("ready"));
}

TEST_F(Failures, ACheckpointRolledBackByAnotherWriterIsAConflictAndTheRestartResumesThere) {
  fill(0, 60);
  fill(1, 10);
  settings.max_batch_records = 5;
  start();
  ASSERT_TRUE(drive([&] { return world->checkpoint(0).value_or(0) >= 20; }));
  world->set_next_offset(0, 10);
  rebase();
  ASSERT_TRUE(drive_to("dirty"));
  EXPECT_EQ(failures_of("checkpoint_conflict"), 1u);
  EXPECT_TRUE(contains(last_error(), "changed behind"));
  EXPECT_EQ(world->calls.checkpoint_conflicts, 1u);
  EXPECT_TRUE(world->checkpoint(0) == std::optional<int64_t>{10});
  ASSERT_TRUE(drive_to("ready"));
  auto st = status();
  ASSERT_TRUE(st);
  EXPECT_EQ(st->partitions[0].start, 10);
  EXPECT_TRUE(world->checkpoint(0) == std::optional<int64_t>{60});
  EXPECT_TRUE(world->sessions == expected_sessions());
}

TEST_F(Failures, ACheckpointMovedAheadBehindTheWriterIsReVerifiedAndFollowed) {
  fill(0, 60);
  settings.max_batch_records = 5;
  start();
  ASSERT_TRUE(drive([&] { return world->checkpoint(0).value_or(0) >= 20; }));
  auto at = *world->checkpoint(0);
  world->set_next_offset(0, 45);
  rebase();
  for (auto off = at; off < 45; ++off)
    exempt.insert({0, off}); // an operator skipped them
  ASSERT_TRUE(drive_to("dirty"));
  EXPECT_EQ(failures_of("checkpoint_conflict"), 1u);
  ASSERT_TRUE(drive_to("ready"));
  auto st = status();
  ASSERT_TRUE(st);
  EXPECT_EQ(st->partitions[0].start, 45);
  EXPECT_TRUE(world->checkpoint(0) == std::optional<int64_t>{60});
  EXPECT_TRUE(!world->score("u4", "p0-c44")); // skipped, not projected after the restart
  EXPECT_TRUE(world->score("u0", "p0-c45") == std::optional<int64_t>{1045});
}

TEST_F(Failures, ACheckpointEditedPastTheHighWatermarkIsAConflictThenARefusal) {
  fill(0, 60);
  settings.max_batch_records = 5;
  start();
  ASSERT_TRUE(drive([&] { return world->checkpoint(0).value_or(0) >= 20; }));
  world->set_next_offset(0, 1000);
  planted[0] = 1000;
  rebase();
  ASSERT_TRUE(drive_to("refused"));
  EXPECT_EQ(count_state("dirty"), 1u);
  EXPECT_EQ(failures_of("checkpoint_conflict"), 1u);
  EXPECT_EQ(failures_of("refused"), 1u);
  EXPECT_TRUE(contains(last_error(), "above the high watermark"));
  auto verifies = world->calls.make_inspector;
  run_for(30s, 100ms);
  EXPECT_EQ(world->calls.make_inspector, verifies);
  EXPECT_EQ(state(), "refused");
}

TEST_F(Failures, MetaRewrittenForAnotherTopicIdBehindTheWriterIsAConflictThenARefusal) {
  fill(0, 40);
  settings.max_batch_records = 5;
  start();
  ASSERT_TRUE(drive([&] { return world->checkpoint(0).value_or(0) >= 10; }));
  auto other = world->identity();
  other.topic_id = fake_world::default_topic_id(7);
  world->put_meta(other);
  ASSERT_TRUE(drive_to("refused"));
  EXPECT_EQ(failures_of("checkpoint_conflict"), 1u);
  EXPECT_TRUE(contains(last_error(), "topic_id"));
}

TEST_F(Failures, AReadyAnnouncedByAPreviousGenerationDoesNotOpenTheGate) {
  // The old aggregator still holds the progress report that completes its
  // generation when the supervisor fails and restarts; it runs late, after
  // the new generation started catching up to a larger H0.
  fill(0, 5);
  start();
  ASSERT_TRUE(drive([&] { return world->checkpoint(0).value_or(0) == 5; }));
  ASSERT_EQ(state(), "catching-up");
  // The current aggregator (the only one so far): held back below.
  caf::abstract_actor* old_aggregator = nullptr;
  rt.run_first_of([&](caf::abstract_actor* a) {
    if (auto* l = dynamic_cast<caf::local_actor*>(a);
        l != nullptr && std::string{l->name()} == "readiness-aggregator")
      old_aggregator = a;
    return false;
  });
  ASSERT_TRUE(old_aggregator != nullptr);
  // One job of any actor but the held one.
  auto step_others = [&] {
    return rt.run_first_of([&](caf::abstract_actor* a) { return a != old_aggregator; });
  };
  auto run_others_until = [&](auto done) {
    for (int i = 0; i < 2000 && !done(); ++i) {
      while (!done() && step_others())
        check_invariants();
      if (!done())
        rt.advance_time(settings.idle_poll);
    }
    return done();
  };
  world->poll_fault.arm(1);
  ASSERT_TRUE(run_others_until([&] { return state() == "dirty"; }));
  fill(0, 5); // the next generation's H0 is 10
  h0 = {{0, 10}};
  ASSERT_TRUE(run_others_until([&] { return count_state("catching-up") == 2; }));
  ASSERT_EQ(world->checkpoint(0).value_or(0), 5);
  // Now the stale report is processed (and the old aggregator exits), and
  // the supervisor reads its mailbox before the new pipeline progresses.
  auto run_job = [&](auto match) {
    if (!rt.run_first_of(match))
      return false;
    check_invariants();
    return true;
  };
  ASSERT_TRUE(run_job([&](caf::abstract_actor* a) { return a == old_aggregator; }));
  auto supervisor = caf::actor_cast<caf::abstract_actor*>(proj);
  while (run_job([&](caf::abstract_actor* a) { return a == supervisor; }))
    ; // drain the supervisor's mailbox
  while (run_job([&](caf::abstract_actor* a) {
    return a == caf::actor_cast<caf::abstract_actor*>(listener); }))
    ; // and deliver its notifications
  EXPECT_EQ(state(), "catching-up");
  EXPECT_TRUE(drive([&] { return state() == "ready"; }));
  EXPECT_EQ(world->checkpoint(0).value_or(0), 10);
}

TEST_F(Failures, SoakRandomTransientFaultsAndAppendsNeverLoseARecord) {
  // Random faults at every port while records keep arriving (some in
  // transactions, some aborted); the invariants are checked after every job.
  std::mt19937_64 rng{7};
  for (int32_t p = 0; p < 3; ++p)
    fill(p, 40);
  settings.max_batch_records = 4;
  start();
  std::vector<fault*> faults{&world->apply_fault,      &world->partial_apply_fault,
                             &world->write_fault,      &world->write_lost_reply_fault,
                             &world->poll_fault,       &world->read_fault,
                             &world->start_fault,      &world->identity_fault,
                             &world->inspect_fault,    &world->create_meta_fault,
                             &world->make_session_store_fault};
  std::map<int32_t, int64_t> open_txn;
  for (int round = 0; round < 150 && violations.empty(); ++round) {
    auto dice = rng() % 10;
    if (dice < 3)
      faults[rng() % faults.size()]->arm(1, static_cast<int64_t>(rng() % 4));
    auto p = static_cast<int32_t>(rng() % 3);
    if (dice == 4 && open_txn.count(p) == 0) {
      open_txn[p] = world->begin_txn(p);
    } else if (dice == 5 && open_txn.count(p) > 0) {
      auto t = open_txn[p];
      open_txn.erase(p);
      if (rng() % 2 == 0)
        world->commit_txn(p, t);
      else
        world->abort_txn(p, t);
    } else if (open_txn.count(p) > 0) {
      auto off = world->end(p);
      world->append_txn(p, open_txn[p],
                        core::dispatch{"t" + std::to_string(p) + "-" + std::to_string(off),
                                       2000 + off, {"u" + std::to_string(off % 7)}});
    } else {
      fill(p, static_cast<int>(rng() % 5), 7);
    }
    run_for(caf::timespan{std::chrono::milliseconds(rng() % 200)}, 5ms);
  }
  for (auto& [p, t] : open_txn)
    world->commit_txn(p, t);
  for (auto* f : faults)
    f->disarm();
  EXPECT_GT(count_state("dirty"), 5u) << "restarts during the soak";
  auto target = world->lsos();
  ASSERT_TRUE(drive([&] { return state() == "ready" && world->checkpoints() == target; }, 20000));
  EXPECT_TRUE(world->sessions == expected_sessions());
}
