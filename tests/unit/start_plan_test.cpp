#include "core/start_plan.hpp"

#include <gtest/gtest.h>

#include <random>

namespace qsp::core {
namespace {

struct plan_row {
  const char* name;
  std::optional<int64_t> checkpoint;
  watermarks marks;
  verdict expected_verdict;
  std::optional<int64_t> expected_start;
  // For refusals: the problem's field, stored and observed values.
  std::string field = {};
  std::string stored = {};
  std::string observed = {};
};

TEST(PlanStart, SinglePartitionTable) {
  const plan_row rows[] = {
      {"checkpoint inside [low, high] resumes", 7, {3, 10}, verdict::resume, 7},
      {"checkpoint == low resumes", 3, {3, 10}, verdict::resume, 3},
      {"checkpoint == high passes at once", 10, {3, 10}, verdict::caught_up, 10},
      {"checkpoint 0 on an empty log", 0, {0, 0}, verdict::caught_up, 0},
      {"missing checkpoint, low = 0 bootstraps", std::nullopt, {0, 10}, verdict::bootstrap, 0},
      {"missing checkpoint, empty log bootstraps", std::nullopt, {0, 0}, verdict::bootstrap, 0},
      {"missing checkpoint, low > 0 refuses", std::nullopt, {5, 10}, verdict::refuse,
       std::nullopt, "next_offset", "<absent>", "low=5"},
      {"missing checkpoint, low = high > 0 refuses", std::nullopt, {9, 9}, verdict::refuse,
       std::nullopt, "next_offset", "<absent>", "low=9"},
      {"checkpoint < low refuses", 2, {3, 10}, verdict::refuse, std::nullopt, "next_offset", "2",
       "low=3,high=10"},
      {"checkpoint > high refuses", 11, {3, 10}, verdict::refuse, std::nullopt, "next_offset",
       "11", "low=3,high=10"},
      {"checkpoint far above an emptied log refuses", 17, {12, 12}, verdict::refuse, std::nullopt,
       "next_offset", "17", "low=12,high=12"},
      {"low > high refuses", 5, {6, 4}, verdict::refuse, std::nullopt, "watermarks", "5",
       "low=6,high=4"},
      {"negative low refuses", std::nullopt, {-1, 4}, verdict::refuse, std::nullopt, "watermarks",
       "<absent>", "low=-1,high=4"},
  };
  for (const plan_row& row : rows) {
    std::map<int32_t, int64_t> checkpoints;
    if (row.checkpoint) checkpoints[0] = *row.checkpoint;
    const start_plan plan = plan_start(checkpoints, {row.marks});
    ASSERT_EQ(plan.partitions.size(), 1u) << row.name;
    const partition_plan& p = plan.partitions[0];
    EXPECT_EQ(p.partition, 0) << row.name;
    EXPECT_EQ(p.low, row.marks.low) << row.name;
    EXPECT_EQ(p.high, row.marks.high) << row.name;
    EXPECT_EQ(p.checkpoint, row.checkpoint) << row.name;
    EXPECT_EQ(p.v, row.expected_verdict) << row.name;
    EXPECT_EQ(p.start, row.expected_start) << row.name;
    EXPECT_FALSE(p.reason.empty()) << row.name;
    EXPECT_EQ(plan.h0(), (std::map<int32_t, int64_t>{{0, row.marks.high}})) << row.name;
    if (row.expected_verdict == verdict::refuse) {
      EXPECT_FALSE(plan.ok()) << row.name;
      ASSERT_EQ(plan.problems.size(), 1u) << row.name;
      const problem& pr = plan.problems[0];
      EXPECT_EQ(pr.partition, 0) << row.name;
      EXPECT_EQ(pr.field, row.field) << row.name;
      EXPECT_EQ(pr.stored, row.stored) << row.name;
      EXPECT_EQ(pr.observed, row.observed) << row.name;
      EXPECT_EQ(pr.reason, p.reason) << row.name;
      EXPECT_TRUE(plan.starts().empty()) << row.name;
    } else {
      EXPECT_TRUE(plan.ok()) << row.name;
      EXPECT_EQ(plan.starts(), (std::map<int32_t, int64_t>{{0, *row.expected_start}})) << row.name;
    }
  }
}

TEST(PlanStart, SeveralPartitionsOneRefusalBlocksTheStart) {
  const start_plan plan =
      plan_start({{0, 5}, {2, 10}}, {{0, 10}, {0, 4}, {3, 10}, {20, 30}});
  ASSERT_EQ(plan.partitions.size(), 4u);
  EXPECT_EQ(plan.partitions[0].v, verdict::resume);
  EXPECT_EQ(plan.partitions[1].v, verdict::bootstrap);
  EXPECT_EQ(plan.partitions[2].v, verdict::caught_up);
  EXPECT_EQ(plan.partitions[3].v, verdict::refuse);
  EXPECT_FALSE(plan.ok());
  ASSERT_EQ(plan.problems.size(), 1u);
  EXPECT_EQ(plan.problems[0].to_string(),
            "partition 3: field next_offset: stored \"<absent>\", observed \"low=20\": no "
            "checkpoint and the log no longer starts at 0: nothing proves history was projected");
  EXPECT_EQ(plan.starts(), (std::map<int32_t, int64_t>{{0, 5}, {1, 0}, {2, 10}}));
  EXPECT_EQ(plan.h0(), (std::map<int32_t, int64_t>{{0, 10}, {1, 4}, {2, 10}, {3, 30}}));
}

TEST(PlanStart, CheckpointForAPartitionWithoutWatermarksRefuses) {
  const start_plan plan = plan_start({{0, 1}, {2, 1}, {-1, 0}}, {{0, 1}, {0, 1}});
  EXPECT_FALSE(plan.ok());
  ASSERT_EQ(plan.problems.size(), 2u);
  EXPECT_EQ(plan.problems[0].partition, -1);
  EXPECT_EQ(plan.problems[1].partition, 2);
  EXPECT_EQ(plan.problems[1].observed, "partitions=2");
  EXPECT_EQ(plan.partitions.size(), 2u);
}

TEST(PlanStart, ZeroPartitionsIsAnEmptyOkPlan) {
  const start_plan plan = plan_start({}, {});
  EXPECT_TRUE(plan.ok());
  EXPECT_TRUE(plan.partitions.empty());
  EXPECT_TRUE(plan.starts().empty());
}

TEST(Verdict, ToString) {
  EXPECT_STREQ(to_string(verdict::resume), "resume");
  EXPECT_STREQ(to_string(verdict::bootstrap), "bootstrap");
  EXPECT_STREQ(to_string(verdict::caught_up), "caught_up");
  EXPECT_STREQ(to_string(verdict::refuse), "refuse");
}

// Offsets clustered around a few interesting points so that equalities
// (cp == low, cp == high, low == 0, low == high) occur often.
int64_t random_offset(std::mt19937_64& rng) {
  switch (rng() % 6) {
    case 0: return 0;
    case 1: return static_cast<int64_t>(rng() % 4);
    case 2: return static_cast<int64_t>(rng() % 64);
    case 3: return INT64_MAX - static_cast<int64_t>(rng() % 4);
    case 4: return -static_cast<int64_t>(rng() % 3);  // malformed
    default: return static_cast<int64_t>(rng() >> 1);
  }
}

TEST(PlanStart, PropertyStartsAreAlwaysProvable) {
  std::mt19937_64 rng(20241202);
  int refused = 0;
  int accepted = 0;
  for (int iteration = 0; iteration < 100000; ++iteration) {
    const size_t partitions = 1 + rng() % 4;
    std::vector<watermarks> marks;
    std::map<int32_t, int64_t> checkpoints;
    for (size_t i = 0; i < partitions; ++i) {
      watermarks m{random_offset(rng), random_offset(rng)};
      if (rng() % 4 != 0 && m.low > m.high) std::swap(m.low, m.high);  // mostly well-formed
      marks.push_back(m);
      switch (rng() % 4) {
        case 0: break;  // no checkpoint
        case 1: checkpoints[static_cast<int32_t>(i)] = m.low; break;
        case 2: checkpoints[static_cast<int32_t>(i)] = m.high; break;
        default: checkpoints[static_cast<int32_t>(i)] = random_offset(rng); break;
      }
    }
    const start_plan plan = plan_start(checkpoints, marks);
    ASSERT_EQ(plan.partitions.size(), partitions);

    size_t refusals = 0;
    for (size_t i = 0; i < partitions; ++i) {
      const partition_plan& p = plan.partitions[i];
      const watermarks& m = marks[i];
      auto it = checkpoints.find(static_cast<int32_t>(i));
      const std::optional<int64_t> cp =
          it == checkpoints.end() ? std::nullopt : std::optional<int64_t>(it->second);
      ASSERT_EQ(p.partition, static_cast<int32_t>(i));
      ASSERT_EQ(p.checkpoint, cp);
      ASSERT_EQ(p.start.has_value(), p.v != verdict::refuse);
      if (p.v == verdict::refuse) {
        ++refusals;
        continue;
      }
      const int64_t start = *p.start;
      ASSERT_GE(start, 0);
      ASSERT_GE(start, m.low);  // never a start below the retained range
      ASSERT_LE(start, m.high);  // never a start beyond what exists
      ASSERT_FALSE(start == 0 && m.low > 0);
      if (cp) {
        ASSERT_EQ(start, *cp);  // a checkpoint is never overridden
        ASSERT_EQ(p.v, *cp == m.high ? verdict::caught_up : verdict::resume);
      } else {
        ASSERT_EQ(m.low, 0);  // bootstrap only with the full history
        ASSERT_EQ(start, 0);
        ASSERT_EQ(p.v, verdict::bootstrap);
      }
    }
    // Independent oracle for which partitions must refuse.
    size_t expected_refusals = 0;
    for (size_t i = 0; i < partitions; ++i) {
      const watermarks& m = marks[i];
      auto it = checkpoints.find(static_cast<int32_t>(i));
      const bool well_formed = m.low >= 0 && m.low <= m.high;
      const bool provable = it != checkpoints.end()
                                ? (m.low <= it->second && it->second <= m.high)
                                : m.low == 0;
      if (!well_formed || !provable) ++expected_refusals;
    }
    ASSERT_EQ(refusals, expected_refusals);
    ASSERT_EQ(plan.problems.size(), refusals);
    ASSERT_EQ(plan.ok(), refusals == 0);
    ASSERT_EQ(plan.starts().size(), partitions - refusals);
    for (const problem& pr : plan.problems) {
      ASSERT_TRUE(pr.partition.has_value());
      ASSERT_EQ(plan.partitions[static_cast<size_t>(*pr.partition)].v, verdict::refuse);
    }
    (refusals == 0 ? accepted : refused) += 1;
  }
  // The generator must exercise both outcomes substantially.
  EXPECT_GT(accepted, 10000);
  EXPECT_GT(refused, 10000);
}

}  // namespace
}  // namespace qsp::core
