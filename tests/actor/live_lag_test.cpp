// Live lag after readiness: the log end the consumer sees, the live lag
// against it, and the age of the last progress, on the test clock.  H0 never
// moves, so qsp_catch_up_lag is 0 forever once ready; these must not be.
#define CAF_SUITE liveness

#include "tests/actor/fixture.hpp"

using namespace qsp;
using namespace qsp::test;

namespace {

struct fixture : projection_fixture {
  fixture() {
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

CAF_TEST_FIXTURE_SCOPE(liveness_tests, fixture)

CAF_TEST(after readiness the live lag follows the log end and the age grows only while stalled) {
  fill(0, 10);
  start();
  CAF_REQUIRE(drive_to("ready"));
  auto p0 = part(0);
  CAF_CHECK_EQUAL(p0.log_end, 10);
  CAF_CHECK_EQUAL(p0.live_lag, 0);
  CAF_CHECK_EQUAL(p0.progress_age_ms, 0);
  CAF_CHECK_EQUAL(part(1).log_end, 0); // an empty partition: nothing to do
  // Idle with nothing to do: no age, however long.
  run_for(10s, 100ms);
  CAF_CHECK_EQUAL(part(0).progress_age_ms, 0);
  // Records arrive while ready and are projected: the log end moves, the
  // live lag returns to 0 (H0 and the catch-up lag stay where they were).
  fill(0, 5);
  CAF_REQUIRE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{15}; }));
  p0 = part(0);
  CAF_CHECK_EQUAL(p0.log_end, 15);
  CAF_CHECK_EQUAL(p0.h0, 10);
  CAF_CHECK_EQUAL(p0.live_lag, 0);
  CAF_CHECK_EQUAL(p0.progress_age_ms, 0);
  // Redis stops answering (replies "not in yet"): records arrive, the
  // checkpoint cannot advance.  The age counts from the moment the partition
  // was last seen with nothing to do (the status above), not from the last
  // advance, and grows with the clock while the lag stays.
  world->confirm_not_yet = 1000000000;
  run_for(2s, 100ms);
  CAF_CHECK_EQUAL(part(0).progress_age_ms, 0); // still nothing to do: no age
  fill(0, 7);
  run_jobs();
  p0 = part(0);
  CAF_CHECK_EQUAL(p0.log_end, 22);
  CAF_CHECK_EQUAL(p0.next_offset, 15);
  CAF_CHECK_EQUAL(p0.live_lag, 7);
  CAF_CHECK_EQUAL(p0.progress_age_ms, 0);
  run_for(3s, 100ms);
  p0 = part(0);
  CAF_CHECK_EQUAL(p0.live_lag, 7);
  CAF_CHECK_EQUAL(p0.progress_age_ms, 3000);
  run_for(2s, 100ms);
  CAF_CHECK_EQUAL(part(0).progress_age_ms, 5000);
  // Other partitions have nothing to do: no age there.
  CAF_CHECK_EQUAL(part(1).progress_age_ms, 0);
  // Lag is not unreadiness.
  CAF_CHECK_EQUAL(state(), "ready");
  // Redis answers again: the checkpoint catches up, lag and age return to 0.
  world->confirm_not_yet = 0;
  CAF_REQUIRE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{22}; }));
  p0 = part(0);
  CAF_CHECK_EQUAL(p0.live_lag, 0);
  CAF_CHECK_EQUAL(p0.progress_age_ms, 0);
  CAF_CHECK(!saw("dirty"));
}

CAF_TEST(an open transaction counts as live lag and pins progress) {
  fill(0, 4);
  start();
  CAF_REQUIRE(drive_to("ready"));
  CAF_CHECK_EQUAL(part(0).live_lag, 0);
  auto txn = world->begin_txn(0);
  world->append_txn(0, txn, core::dispatch{"t-1", 5000, {"u1"}});
  world->append_txn(0, txn, core::dispatch{"t-2", 5001, {"u2"}});
  run_for(4s, 100ms);
  auto p0 = part(0);
  CAF_CHECK_EQUAL(p0.next_offset, 4); // the LSO is pinned at 4
  CAF_CHECK_EQUAL(p0.log_end, 6);     // the high watermark is not
  CAF_CHECK_EQUAL(p0.live_lag, 2);
  CAF_CHECK_EQUAL(p0.progress_age_ms, 4000);
  world->commit_txn(0, txn);
  CAF_REQUIRE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{7}; }));
  p0 = part(0);
  CAF_CHECK_EQUAL(p0.live_lag, 0);
  CAF_CHECK_EQUAL(p0.progress_age_ms, 0);
}

CAF_TEST(during catch-up the live lag is at least the catch-up lag) {
  fill(0, 300);
  world->confirm_not_yet = 1000000000;
  start();
  CAF_REQUIRE(drive_to("catching-up"));
  run_for(1s, 100ms);
  auto p0 = part(0);
  CAF_CHECK_EQUAL(p0.h0, 300);
  CAF_CHECK_EQUAL(p0.log_end, 300);
  CAF_CHECK_EQUAL(p0.live_lag, 300 - p0.next_offset);
  CAF_CHECK_GREATER(p0.live_lag, 0);
  CAF_CHECK_GREATER(p0.progress_age_ms, 0);
  world->confirm_not_yet = 0;
  CAF_REQUIRE(drive_to("ready"));
  CAF_CHECK_EQUAL(part(0).live_lag, 0);
}

CAF_TEST_FIXTURE_SCOPE_END()
