#include "core/cluster.hpp"

#include <gtest/gtest.h>

namespace qsp::core {
namespace {

TEST(PartitionList, ParsesRangesAndSingles) {
  std::string why;
  auto l = parse_partition_list("0-2,5,9-10", 12, why);
  ASSERT_TRUE(l) << why;
  EXPECT_EQ(*l, (std::vector<int32_t>{0, 1, 2, 5, 9, 10}));
  EXPECT_EQ(format_partition_list(*l), "0-2,5,9-10");
  auto one = parse_partition_list("7", 8, why);
  ASSERT_TRUE(one);
  EXPECT_EQ(*one, (std::vector<int32_t>{7}));
}

TEST(PartitionList, RefusesWhatItCannotMean) {
  struct row {
    const char* text;
    const char* why_contains;
  };
  const row rows[] = {
    {"", "empty"},           {"1,,2", "is not a partition"}, {"a", "is not a partition"},
    {"3-1", "backwards"},    {"0-12", "outside [0, 11]"},    {"-1", "is not a partition"},
    {"1,1", "listed twice"}, {"0-3,2", "listed twice"},      {"1 ,2", "is not a partition"},
  };
  for (auto& r : rows) {
    std::string why;
    EXPECT_FALSE(parse_partition_list(r.text, 12, why)) << r.text;
    EXPECT_NE(why.find(r.why_contains), std::string::npos) << r.text << ": " << why;
  }
}

TEST(Readiness, NeedsALiveCaughtUpStatusOfTheCurrentOwner) {
  owner_record o{true, "a", 3, 0};
  status_record s{true, "a", 3, "ready", 100, 100, true};
  EXPECT_TRUE(judge(o, s).ready);
  EXPECT_FALSE(judge(owner_record{}, s).ready);                     // nobody owns it
  EXPECT_NE(judge(owner_record{}, s).why.find("no owner"), std::string::npos);
  EXPECT_FALSE(judge(o, status_record{}).ready);                    // expired status
  auto stale = s;
  stale.epoch = 2;                                                  // a former owner's
  EXPECT_FALSE(judge(o, stale).ready);
  EXPECT_FALSE(judge(o, stale).live);
  auto other = s;
  other.node = "b";
  EXPECT_FALSE(judge(o, other).ready);
  auto behind = s;
  behind.caught_up = false;
  behind.state = "catching-up";
  behind.next_offset = 40;
  EXPECT_FALSE(judge(o, behind).ready);
  EXPECT_TRUE(judge(o, behind).live);
  EXPECT_NE(judge(o, behind).why.find("40 of H0 100"), std::string::npos);
  auto verifying = s;                                               // no H0 taken yet
  verifying.caught_up = false;
  verifying.state = "verifying";
  verifying.h0 = -1;
  verifying.next_offset = -1;
  EXPECT_FALSE(judge(o, verifying).ready);
  EXPECT_EQ(judge(o, verifying).why, "owner a is verifying");
  auto dirty = s;
  dirty.state = "dirty";                                            // caught up, but dirty
  EXPECT_FALSE(judge(o, dirty).ready);
}

} // namespace
} // namespace qsp::core
