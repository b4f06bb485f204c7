#include "core/progress.hpp"

#include <gtest/gtest.h>

#include <stdexcept>

namespace qsp::core {
namespace {

TEST(ReadinessTracker, ZeroPartitionsIsReady) {
  const readiness_tracker t({}, {});
  EXPECT_TRUE(t.ready());
  EXPECT_EQ(t.remaining(), 0);
  EXPECT_DOUBLE_EQ(t.fraction_done(), 1.0);
  EXPECT_TRUE(t.snapshot().empty());
}

TEST(ReadinessTracker, StartAtH0IsReadyAtOnce) {
  const readiness_tracker t({{0, 10}, {1, 0}}, {{0, 10}, {1, 0}});
  EXPECT_TRUE(t.ready());
  EXPECT_EQ(t.remaining(), 0);
  EXPECT_DOUBLE_EQ(t.fraction_done(), 1.0);
}

TEST(ReadinessTracker, ReadyOnlyWhenEveryPartitionReachesH0) {
  readiness_tracker t({{0, 10}, {1, 20}, {2, 5}}, {{0, 0}, {1, 10}, {2, 5}});
  EXPECT_FALSE(t.ready());
  EXPECT_EQ(t.remaining(), 20);
  EXPECT_DOUBLE_EQ(t.fraction_done(), 0.0);

  EXPECT_TRUE(t.on_checkpoint(0, 10));
  EXPECT_FALSE(t.ready());
  EXPECT_EQ(t.remaining(), 10);
  EXPECT_DOUBLE_EQ(t.fraction_done(), 0.5);

  EXPECT_TRUE(t.on_checkpoint(1, 19));
  EXPECT_FALSE(t.ready());
  EXPECT_EQ(t.remaining(), 1);

  EXPECT_TRUE(t.on_checkpoint(1, 25));  // records appended after startup
  EXPECT_TRUE(t.ready());
  EXPECT_EQ(t.remaining(), 0);
  EXPECT_DOUBLE_EQ(t.fraction_done(), 1.0);

  const std::vector<partition_progress> snap = t.snapshot();
  ASSERT_EQ(snap.size(), 3u);
  EXPECT_EQ(snap[0].partition, 0);
  EXPECT_EQ(snap[0].h0, 10);
  EXPECT_EQ(snap[0].next_offset, 10);
  EXPECT_EQ(snap[1].partition, 1);
  EXPECT_EQ(snap[1].h0, 20);  // H0 never moves
  EXPECT_EQ(snap[1].next_offset, 25);
  EXPECT_EQ(snap[2].next_offset, 5);
}

TEST(ReadinessTracker, RegressionIsRejectedAndChangesNothing) {
  readiness_tracker t({{0, 10}}, {{0, 2}});
  EXPECT_TRUE(t.on_checkpoint(0, 10));
  EXPECT_TRUE(t.ready());
  EXPECT_FALSE(t.on_checkpoint(0, 9));
  EXPECT_TRUE(t.ready());
  EXPECT_EQ(t.snapshot()[0].next_offset, 10);
  EXPECT_TRUE(t.on_checkpoint(0, 10));  // repeating the same position is fine
  EXPECT_TRUE(t.ready());
}

TEST(ReadinessTracker, UnknownPartitionIsRejected) {
  readiness_tracker t({{0, 10}}, {{0, 2}});
  EXPECT_FALSE(t.on_checkpoint(1, 10));
  EXPECT_FALSE(t.on_checkpoint(-1, 10));
  EXPECT_FALSE(t.ready());
  EXPECT_EQ(t.remaining(), 8);
}

TEST(ReadinessTracker, RemainingSaturates) {
  const readiness_tracker t({{0, INT64_MAX}, {1, INT64_MAX}}, {{0, 0}, {1, 0}});
  EXPECT_EQ(t.remaining(), INT64_MAX);
  EXPECT_DOUBLE_EQ(t.fraction_done(), 0.0);
}

TEST(ReadinessTracker, RejectsInconsistentConstruction) {
  using map = std::map<int32_t, int64_t>;
  EXPECT_THROW(readiness_tracker(map{{0, 10}}, map{}), std::invalid_argument);
  EXPECT_THROW(readiness_tracker(map{{0, 10}}, map{{1, 0}}), std::invalid_argument);
  EXPECT_THROW(readiness_tracker(map{{0, 10}}, map{{0, 11}}), std::invalid_argument);
  EXPECT_THROW(readiness_tracker(map{{0, 10}}, map{{0, -1}}), std::invalid_argument);
}

}  // namespace
}  // namespace qsp::core
