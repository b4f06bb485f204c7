// The pipeline without faults: catch-up, readiness, the PULL gate, appends
// during catch-up, transaction markers and aborted transactions.
#include "tests/actor/fixture.hpp"

#include <random>

#include "actors/redis_writer.hpp"

using namespace qsp;
using namespace qsp::test;

namespace {

struct Pipeline : projection_fixture {
  /// One partition of `records` in batches of 5 with `depth` batches in
  /// flight: catches up completely, never more than `depth` unconfirmed.
  void catch_up_one_partition(int records, size_t depth) {
    world->partitions.resize(1);
    fill(0, records);
    settings.max_batch_records = 5;
    settings.max_batches_in_flight = depth;
    h0 = world->lsos();
    start();
    ASSERT_TRUE(drive_to("ready"));
    EXPECT_EQ(world->calls.max_unconfirmed, depth);
    EXPECT_TRUE(world->checkpoint(0) == std::optional<int64_t>{records});
    EXPECT_TRUE(world->sessions == expected_sessions());
  }
};

bool all_reached(const std::shared_ptr<fake_world>& w, const std::map<int32_t, int64_t>& h0) {
  for (auto& [p, target] : h0)
    if (w->checkpoint(p).value_or(0) < target)
      return false;
  return true;
}

} // namespace

TEST_F(Pipeline, HappyPathThreePartitionsCatchUpAndTheGateOpens) {
  fill(0, 40);
  fill(1, 17);
  // Partition 2 stays empty: H0 = 0, ready from the start.
  h0 = world->lsos();
  start();
  // Before the first verification the gate is closed.
  auto early = pull("u1", 10);
  ASSERT_TRUE(!early);
  EXPECT_TRUE(has_code(early.error(), ec::not_ready));
  ASSERT_TRUE(drive_to("ready"));
  EXPECT_TRUE(saw("verifying"));
  EXPECT_TRUE(saw("catching-up"));
  EXPECT_EQ(count_state("ready"), 1u);
  EXPECT_TRUE(!saw("dirty"));
  // Checkpoints at H0 (an empty partition needs none).
  EXPECT_TRUE(world->checkpoint(0) == std::optional<int64_t>{40});
  EXPECT_TRUE(world->checkpoint(1) == std::optional<int64_t>{17});
  EXPECT_TRUE(world->checkpoint(2).value_or(0) == 0);
  EXPECT_TRUE(world->sessions == expected_sessions());
  // Meta was created with the broker's identity.
  ASSERT_TRUE(world->has_meta());
  EXPECT_TRUE(world->hashes[world->meta_key()] == core::encode_meta(world->identity()));
  EXPECT_EQ(world->calls.create_meta, 1u);
  // Status: ready, H0 and positions per partition, counters.
  auto st = status();
  ASSERT_TRUE(st);
  EXPECT_TRUE(st->ready);
  EXPECT_EQ(st->state, "ready");
  ASSERT_EQ(st->partitions.size(), 3u);
  for (auto& ps : st->partitions) {
    EXPECT_EQ(ps.start, 0);
    EXPECT_EQ(ps.h0, h0[ps.partition]);
    EXPECT_EQ(ps.next_offset, h0[ps.partition]);
  }
  EXPECT_EQ(st->records, 57u);
  EXPECT_EQ(st->restarts, 0u);
  EXPECT_EQ(st->true_high.size(), 3u);
  EXPECT_EQ(stats->records.load(), 57u);
  // PULL_SESSION_LIST: newest first, limited.
  auto all = pull("u1", 100);
  ASSERT_TRUE(all);
  auto want = expected_sessions()["u1"];
  ASSERT_EQ(all->size(), want.size());
  for (size_t i = 1; i < all->size(); ++i)
    EXPECT_GE((*all)[i - 1].last_active, (*all)[i].last_active);
  for (auto& e : *all)
    EXPECT_EQ(want[e.conversation_id], e.last_active);
  auto top = pull("u1", 3);
  ASSERT_TRUE(top);
  ASSERT_EQ(top->size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ((*top)[i].conversation_id, (*all)[i].conversation_id);
    EXPECT_EQ((*top)[i].last_active, (*all)[i].last_active);
  }
  auto nobody = pull("nobody", 10);
  ASSERT_TRUE(nobody);
  EXPECT_TRUE(nobody->empty());
  // Idle afterwards: polling goes on, nothing more is written.
  auto writes = world->calls.write_checkpoint;
  run_for(500ms);
  EXPECT_EQ(world->calls.write_checkpoint, writes);
  EXPECT_EQ(state(), "ready");
}

TEST_F(Pipeline, TheWriterPipelinesBatchesOfSeveralPartitionsAndConfirmsThemInOrder) {
  // Three partitions, several batches each: the writer sends a batch while
  // earlier ones still await their replies (the fake store checks that every
  // confirm matches its oldest unconfirmed send), and each checkpoint follows
  // its own batch's replies.
  fill(0, 30);
  fill(1, 30);
  fill(2, 30);
  settings.max_batch_records = 5;
  h0 = world->lsos();
  start();
  ASSERT_TRUE(drive_to("ready"));
  EXPECT_TRUE(!saw("dirty"));
  EXPECT_GE(world->calls.max_unconfirmed, 2u);
  EXPECT_EQ(world->calls.confirm, 18u); // one per batch: 3 x 30 / 5
  EXPECT_TRUE(world->checkpoints() == h0);
  EXPECT_TRUE(world->sessions == expected_sessions());
}

TEST_F(Pipeline, OnePartitionKeepsMaxBatchesInFlightBatchesUnconfirmed) {
  // A single consumer decodes its next batch while the writer still waits
  // for the replies of the previous one, up to the configured depth.
  ASSERT_NO_FATAL_FAILURE(catch_up_one_partition(60, 3));
  EXPECT_EQ(world->calls.confirm, 12u);
  // Idle afterwards: one poll tick at a time, nothing written.
  auto polls = world->calls.poll;
  run_for(100ms);
  EXPECT_LE(world->calls.poll - polls, 21u); // one per 5-ms tick
  EXPECT_EQ(world->calls.confirm, 12u);
}

TEST_F(Pipeline, MaxBatchesInFlight1WritesStrictlyOneBatchAfterTheOther) {
  ASSERT_NO_FATAL_FAILURE(catch_up_one_partition(20, 1));
}

TEST_F(Pipeline, PullAnswersNewestFirstAcrossPartitions) {
  world->append(0, "old", 100, {"alice"});
  world->append(1, "newest", 900, {"alice", "bob"});
  world->append(2, "middle", 500, {"alice"});
  world->append(0, "newer", 700, {"alice"});
  world->append(2, "old", 50, {"alice"}); // older duplicate: GT keeps 100
  start();
  ASSERT_TRUE(drive_to("ready"));
  auto l = pull("alice", 10);
  ASSERT_TRUE(l);
  std::vector<std::pair<std::string, int64_t>> got;
  for (auto& e : *l)
    got.emplace_back(e.conversation_id, e.last_active);
  std::vector<std::pair<std::string, int64_t>> want{
    {"newest", 900}, {"newer", 700}, {"middle", 500}, {"old", 100}};
  EXPECT_TRUE(got == want);
  auto two = pull("alice", 2);
  ASSERT_TRUE(two);
  ASSERT_EQ(two->size(), 2u);
  EXPECT_EQ((*two)[1].conversation_id, "newer");
  auto bob = pull("bob", 10);
  ASSERT_TRUE(bob);
  ASSERT_EQ(bob->size(), 1u);
  EXPECT_EQ((*bob)[0].conversation_id, "newest");
}

TEST_F(Pipeline, ReadinessOpensExactlyWhenTheLastPartitionReachesH0) {
  fill(0, 5);
  fill(1, 3);
  fill(2, 200);
  settings.max_batch_records = 7; // partition 2 needs 29 batches
  h0 = world->lsos();
  start();
  // Step until the fast partitions are done while partition 2 still lags.
  ASSERT_TRUE(drive([&] {
    return world->checkpoint(0).value_or(0) == 5 && world->checkpoint(1).value_or(0) == 3
           && world->checkpoint(2).value_or(0) > 0;
  }));
  ASSERT_LT(world->checkpoint(2).value_or(0), 200);
  EXPECT_EQ(state(), "catching-up");
  auto mid = status();
  ASSERT_TRUE(mid);
  EXPECT_TRUE(!mid->ready);
  ASSERT_EQ(mid->partitions.size(), 3u);
  EXPECT_EQ(mid->partitions[2].h0, 200);
  EXPECT_LT(mid->partitions[2].next_offset, 200);
  auto gate = pull("u1", 10);
  ASSERT_TRUE(!gate);
  EXPECT_TRUE(has_code(gate.error(), ec::not_ready));
  // Not ready at any step before partition 2's checkpoint reaches 200 (the
  // invariant checker asserts that after every job) ...
  ASSERT_TRUE(drive([&] { return all_reached(world, h0); }));
  EXPECT_EQ(world->checkpoint(2).value_or(0), 200);
  EXPECT_TRUE(!saw("ready"));
  // ... and ready right after it, without any timer.
  auto t = now();
  rt.run();
  EXPECT_TRUE(now() == t);
  EXPECT_EQ(state(), "ready");
  EXPECT_TRUE(world->sessions == expected_sessions());
}

TEST_F(Pipeline, RecordsAppendedDuringCatchUpAreConsumedWithoutMovingH0) {
  fill(0, 50);
  fill(1, 5);
  settings.max_batch_records = 10;
  h0 = world->lsos();
  start();
  ASSERT_TRUE(drive([&] { return world->checkpoint(0).value_or(0) >= 10; }));
  ASSERT_TRUE(!saw("ready"));
  fill(0, 20);
  fill(1, 5);
  fill(2, 3);
  ASSERT_TRUE(drive_to("ready"));
  auto st = status();
  ASSERT_TRUE(st);
  ASSERT_EQ(st->partitions.size(), 3u);
  EXPECT_EQ(st->partitions[0].h0, 50);
  EXPECT_EQ(st->partitions[1].h0, 5);
  EXPECT_EQ(st->partitions[2].h0, 0);
  // Consumption goes on past H0.
  ASSERT_TRUE(drive([&] {
    return world->checkpoint(0).value_or(0) == 70 && world->checkpoint(1).value_or(0) == 10
           && world->checkpoint(2).value_or(0) == 3;
  }));
  st = status();
  ASSERT_TRUE(st);
  EXPECT_EQ(st->partitions[0].h0, 50);
  EXPECT_EQ(st->partitions[0].next_offset, 70);
  EXPECT_GT(st->partitions[0].next_offset, st->partitions[0].h0);
  EXPECT_EQ(st->partitions[2].next_offset, 3);
  EXPECT_TRUE(st->ready);
  EXPECT_TRUE(world->sessions == expected_sessions());
  EXPECT_EQ(count_state("ready"), 1u);
}

TEST_F(Pipeline, TransactionMarkersAtTheEndAndAnAbortedTransactionInTheMiddle) {
  // p0: data, then a committed transaction: the log ends in its marker.  12
  // data records fill 4 batches of 3 exactly, so the EOF comes in a poll of
  // its own, after the marker.
  fill(0, 10);
  auto t0 = world->begin_txn(0);
  for (int i = 0; i < 2; ++i)
    world->append_txn(0, t0, core::dispatch{"p0-txn-" + std::to_string(i), 5000 + i, {"u1"}});
  world->commit_txn(0, t0);
  // p1: data, an aborted transaction, more data.
  fill(1, 4);
  auto t1 = world->begin_txn(1);
  for (int i = 0; i < 3; ++i)
    world->append_txn(1, t1, core::dispatch{"aborted-" + std::to_string(i), 9000 + i, {"u2", "u3"}});
  world->abort_txn(1, t1);
  fill(1, 4);
  // p2: markers of empty transactions, then an aborted one ends the log.
  world->commit_txn(2, world->begin_txn(2));
  world->commit_txn(2, world->begin_txn(2));
  auto t2 = world->begin_txn(2);
  world->append_txn(2, t2, core::dispatch{"aborted-at-end", 1, {"u2"}});
  world->append_txn(2, t2, core::dispatch{"aborted-at-end", 2, {"u2"}});
  world->abort_txn(2, t2);
  h0 = world->lsos();
  ASSERT_EQ(h0[0], 13);
  ASSERT_EQ(h0[1], 12);
  ASSERT_EQ(h0[2], 5);
  settings.max_batch_records = 3;
  start();
  ASSERT_TRUE(drive_to("ready"));
  EXPECT_TRUE(world->checkpoints() == h0);
  EXPECT_TRUE(world->sessions == expected_sessions());
  for (int i = 0; i < 3; ++i)
    EXPECT_TRUE(!world->score("u2", "aborted-" + std::to_string(i)));
  EXPECT_TRUE(!world->score("u2", "aborted-at-end"));
  for (int i = 0; i < 2; ++i)
    EXPECT_TRUE(world->score("u1", "p0-txn-" + std::to_string(i)) == std::optional<int64_t>{5000 + i});
}

TEST_F(Pipeline, AnOpenTransactionPinsH0AtTheLSOAndIsProjectedOnceCommitted) {
  fill(0, 5);
  auto t = world->begin_txn(0);
  world->append_txn(0, t, core::dispatch{"pending-1", 7000, {"u9"}});
  world->append_txn(0, t, core::dispatch{"pending-2", 7001, {"u9"}});
  fill(0, 2); // after the open transaction: above the LSO too
  ASSERT_EQ(world->lso(0), 5);
  ASSERT_EQ(world->end(0), 9);
  h0 = world->lsos();
  start();
  ASSERT_TRUE(drive_to("ready"));
  EXPECT_TRUE(world->checkpoint(0) == std::optional<int64_t>{5});
  auto st = status();
  ASSERT_TRUE(st);
  EXPECT_EQ(st->partitions[0].h0, 5);
  EXPECT_EQ(st->true_high[0], 9);
  run_for(200ms);
  EXPECT_TRUE(!world->score("u9", "pending-1"));
  EXPECT_TRUE(world->checkpoint(0) == std::optional<int64_t>{5});
  world->commit_txn(0, t);
  ASSERT_TRUE(drive([&] { return world->checkpoint(0).value_or(0) == 10; }));
  EXPECT_TRUE(world->score("u9", "pending-2") == std::optional<int64_t>{7001});
  EXPECT_TRUE(world->sessions == expected_sessions());
  EXPECT_EQ(state(), "ready");
}

TEST_F(Pipeline, ARestartAtTheCheckpointsIsReadyAtOnceAndWritesNothing) {
  fill(0, 8);
  fill(1, 3);
  seed_checkpoints({{0, 8}, {1, 3}});
  start();
  ASSERT_TRUE(drive_to("ready"));
  EXPECT_EQ(world->calls.apply, 0u);
  EXPECT_EQ(world->calls.create_meta, 0u);
  EXPECT_TRUE(world->checkpoints() == (std::map<int32_t, int64_t>{{0, 8}, {1, 3}}));
  // Resuming mid-log: only the records after the checkpoint are projected.
  fill(0, 4);
  ASSERT_TRUE(drive([&] { return world->checkpoint(0).value_or(0) == 12; }));
  EXPECT_TRUE(world->sessions == expected_sessions());
  EXPECT_TRUE(!world->score("u0", "p0-c0"));
}

TEST_F(Pipeline, ResumeFromStoredCheckpointsMidLog) {
  fill(0, 30);
  fill(1, 30);
  fill(2, 30);
  seed_checkpoints({{0, 10}, {1, 30}, {2, 0}});
  settings.max_batch_records = 4;
  h0 = world->lsos();
  start();
  ASSERT_TRUE(drive_to("ready"));
  auto st = status();
  ASSERT_TRUE(st);
  EXPECT_EQ(st->partitions[0].start, 10);
  EXPECT_EQ(st->partitions[1].start, 30);
  EXPECT_EQ(st->partitions[2].start, 0);
  EXPECT_TRUE(world->checkpoints() == h0);
  EXPECT_TRUE(world->sessions == expected_sessions());
  EXPECT_TRUE(!world->score("u0", "p0-c5"));
}

TEST_F(Pipeline, RecordsWithoutRecipientsAdvanceTheCheckpoint) {
  world->append(0, "nobody-1", 10, {});
  world->append(0, "nobody-2", 11, {});
  world->append(0, "somebody", 12, {"u1"});
  world->append(0, "nobody-3", 13, {});
  world->append(1, "nobody-4", 14, {}); // a batch without any ZADD
  settings.max_batch_records = 2;
  h0 = world->lsos();
  start();
  ASSERT_TRUE(drive_to("ready"));
  EXPECT_TRUE(world->checkpoint(0) == std::optional<int64_t>{4});
  EXPECT_TRUE(world->checkpoint(1) == std::optional<int64_t>{1});
  EXPECT_TRUE(world->sessions == expected_sessions());
  EXPECT_EQ(world->sessions.size(), 1u);
}

TEST_F(Pipeline, OneBatchWithAConversationTwiceStoresTheNewestCreatedAt) {
  world->append(0, "c", 300, {"u1", "u2"});
  world->append(0, "c", 100, {"u1"});
  world->append(0, "c", 200, {"u2"});
  world->append(0, "c", 400, {"u2"});
  start();
  ASSERT_TRUE(drive_to("ready"));
  EXPECT_TRUE(world->score("u1", "c") == std::optional<int64_t>{300});
  EXPECT_TRUE(world->score("u2", "c") == std::optional<int64_t>{400});
  EXPECT_EQ(world->calls.apply, 1u);
}

TEST_F(Pipeline, ShutdownStopsThePipeline) {
  fill(0, 50);
  settings.max_batch_records = 5;
  start();
  ASSERT_TRUE(drive([&] { return world->checkpoint(0).value_or(0) >= 10; }));
  qsp::mail(self, atom::shutdown_v).send(proj);
  run_for(1s);
  EXPECT_EQ(state(), "stopped");
  auto writes = world->calls.write_checkpoint;
  auto polls = world->calls.poll;
  run_for(1s);
  EXPECT_EQ(world->calls.write_checkpoint, writes);
  EXPECT_EQ(world->calls.poll, polls);
  EXPECT_LT(world->checkpoint(0).value_or(0), 50);
  auto st = status(); // the projection actor is gone
  EXPECT_TRUE(!st);
}

TEST_F(Pipeline, GarbageInsideAnAbortedTransactionIsNeverRead) {
  fill(0, 3);
  auto t = world->begin_txn(0);
  world->append_txn(0, t, core::dispatch{"ok", 1, {"u1"}});
  {
    std::lock_guard<std::recursive_mutex> g{world->mtx};
    world->part(0).log.push_back(log_entry{world->end(0), "garbage", entry_kind::data, t});
  }
  world->abort_txn(0, t);
  fill(0, 3);
  start();
  ASSERT_TRUE(drive_to("ready"));
  EXPECT_TRUE(world->checkpoint(0) == std::optional<int64_t>{world->end(0)});
  EXPECT_TRUE(!world->score("u1", "ok"));
  EXPECT_TRUE(world->sessions == expected_sessions());
}

// The writer's coalescing on its own (a state method: the suite's fixture is
// here only because every test of a GoogleTest suite shares it; its projection
// is never started): one update per user, one member per (user, conversation) holding the highest
// score, nothing lost or invented, against a plain map over random batches
// with many repeats (duplicated recipients within a record too), names that
// differ in their last byte only and names longer than 16 bytes.
TEST_F(Pipeline, CoalescingKeepsTheHighestScorePerUserAndConversation) {
  std::mt19937_64 rng(11);
  writer_state st;
  auto name = [&](const char* stem, size_t n) {
    auto i = rng() % n;
    return i % 3 == 0 ? std::string(stem) + std::string(20, 'x') + std::to_string(i)
                      : std::string(stem) + std::to_string(i);
  };
  for (int round = 0; round < 30; ++round) {
    partition_batch b;
    std::map<std::string, std::map<std::string, int64_t>> want;
    const size_t records = round == 0 ? 0 : rng() % 400;
    const size_t users = 1 + rng() % 60, convs = 1 + rng() % 40;
    for (size_t i = 0; i < records; ++i) {
      core::dispatch d{name("c", convs), static_cast<int64_t>(rng() % 1000), {}};
      for (size_t r = rng() % 6; r > 0; --r)
        d.recipients.push_back(name("u", users));
      for (auto& u : d.recipients) {
        auto [it, fresh] = want[u].emplace(d.conversation_id, d.created_at);
        if (!fresh)
          it->second = std::max(it->second, d.created_at);
      }
      b.records.push_back(d);
    }
    std::map<std::string, std::map<std::string, int64_t>> got;
    size_t members = 0;
    for (auto& u : st.coalesce(b)) {
      auto& set = got[std::string{u.user}];
      EXPECT_TRUE(set.empty()); // one update per user
      EXPECT_GT(u.count, 0u);
      for (size_t i = 0; i < u.count; ++i) {
        auto fresh = set.emplace(std::string{u.members[i].conversation}, u.members[i].created_at);
        EXPECT_TRUE(fresh.second); // one member per conversation
        ++members;
      }
    }
    EXPECT_TRUE(got == want);
    size_t want_members = 0;
    for (auto& [u, set] : want)
      want_members += set.size();
    EXPECT_EQ(members, want_members);
  }
}
