// Live lag after readiness: the log end the consumer sees, the live lag
// against it, and the age of the last progress, on the test clock.  H0 never
// moves, so qsp_catch_up_lag is 0 forever once ready; these must not be.
#include "tests/actor/fixture.hpp"

using namespace qsp;
using namespace qsp::test;

namespace {

struct Liveness : projection_fixture {
  Liveness() {
    // A stalled write pipeline must stay stalled (not fail) while we watch.
    settings.redis.command_timeout = std::chrono::minutes(10);
  }

  partition_status part(int32_t p) {
    auto s = status();
    if (!s) {
      fail_with("status: " + describe(s.error()));
      return {};
    }
    for (auto& ps : s->partitions)
      if (ps.partition == p)
        return ps;
    fail_with("status: no partition " + std::to_string(p));
    return {};
  }
};

} // namespace

TEST_F(Liveness, AfterReadinessTheLiveLagFollowsTheLogEndAndTheAgeGrowsOnlyWhileStalled) {
  fill(0, 10);
  start();
  ASSERT_TRUE(drive_to("ready"));
  auto p0 = part(0);
  EXPECT_EQ(p0.log_end, 10);
  EXPECT_EQ(p0.live_lag, 0);
  EXPECT_EQ(p0.progress_age_ms, 0);
  EXPECT_EQ(part(1).log_end, 0); // an empty partition: nothing to do
  // Idle with nothing to do: no age, however long.
  run_for(10s, 100ms);
  EXPECT_EQ(part(0).progress_age_ms, 0);
  // Records arrive while ready and are projected: the log end moves, the
  // live lag returns to 0 (H0 and the catch-up lag stay where they were).
  fill(0, 5);
  ASSERT_TRUE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{15}; }));
  p0 = part(0);
  EXPECT_EQ(p0.log_end, 15);
  EXPECT_EQ(p0.h0, 10);
  EXPECT_EQ(p0.live_lag, 0);
  EXPECT_EQ(p0.progress_age_ms, 0);
  // Redis stops answering (replies "not in yet"): records arrive, the
  // checkpoint cannot advance.  The age counts from the moment the partition
  // was last seen with nothing to do (the status above), not from the last
  // advance, and grows with the clock while the lag stays.
  world->confirm_not_yet = 1000000000;
  run_for(2s, 100ms);
  EXPECT_EQ(part(0).progress_age_ms, 0); // still nothing to do: no age
  fill(0, 7);
  run_jobs();
  p0 = part(0);
  EXPECT_EQ(p0.log_end, 22);
  EXPECT_EQ(p0.next_offset, 15);
  EXPECT_EQ(p0.live_lag, 7);
  EXPECT_EQ(p0.progress_age_ms, 0);
  run_for(3s, 100ms);
  p0 = part(0);
  EXPECT_EQ(p0.live_lag, 7);
  EXPECT_EQ(p0.progress_age_ms, 3000);
  run_for(2s, 100ms);
  EXPECT_EQ(part(0).progress_age_ms, 5000);
  // Other partitions have nothing to do: no age there.
  EXPECT_EQ(part(1).progress_age_ms, 0);
  // Lag is not unreadiness.
  EXPECT_EQ(state(), "ready");
  // Redis answers again: the checkpoint catches up, lag and age return to 0.
  world->confirm_not_yet = 0;
  ASSERT_TRUE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{22}; }));
  p0 = part(0);
  EXPECT_EQ(p0.live_lag, 0);
  EXPECT_EQ(p0.progress_age_ms, 0);
  EXPECT_TRUE(!saw("dirty"));
}

TEST_F(Liveness, AnOpenTransactionCountsAsLiveLagAndPinsProgress) {
  fill(0, 4);
  start();
  ASSERT_TRUE(drive_to("ready"));
  EXPECT_EQ(part(0).live_lag, 0);
  auto txn = world->begin_txn(0);
  world->append_txn(0, txn, core::dispatch{"t-1", 5000, {"u1"}});
  world->append_txn(0, txn, core::dispatch{"t-2", 5001, {"u2"}});
  run_for(4s, 100ms);
  auto p0 = part(0);
  EXPECT_EQ(p0.next_offset, 4); // the LSO is pinned at 4
  EXPECT_EQ(p0.log_end, 6);     // the high watermark is not
  EXPECT_EQ(p0.live_lag, 2);
  EXPECT_EQ(p0.progress_age_ms, 4000);
  world->commit_txn(0, txn);
  ASSERT_TRUE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{7}; }));
  p0 = part(0);
  EXPECT_EQ(p0.live_lag, 0);
  EXPECT_EQ(p0.progress_age_ms, 0);
}

TEST_F(Liveness, DuringCatchUpTheLiveLagIsAtLeastTheCatchUpLag) {
  fill(0, 300);
  world->confirm_not_yet = 1000000000;
  start();
  ASSERT_TRUE(drive_to("catching-up"));
  run_for(1s, 100ms);
  auto p0 = part(0);
  EXPECT_EQ(p0.h0, 300);
  EXPECT_EQ(p0.log_end, 300);
  EXPECT_EQ(p0.live_lag, 300 - p0.next_offset);
  EXPECT_GT(p0.live_lag, 0);
  EXPECT_GT(p0.progress_age_ms, 0);
  world->confirm_not_yet = 0;
  ASSERT_TRUE(drive_to("ready"));
  EXPECT_EQ(part(0).live_lag, 0);
}
