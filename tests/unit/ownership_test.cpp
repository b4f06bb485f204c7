// docs/DESIGN.md §12: the re-claim rule, the owner check of guarded writes and
// heartbeats, and this node's ownership book, transition by transition.
#include "core/cluster.hpp"
#include "core/ownership.hpp"

#include <gtest/gtest.h>

namespace qsp::core {
namespace {

owner_record rec(std::string node, uint64_t epoch) {
  return owner_record{true, std::move(node), epoch, 0};
}

TEST(OwnerCheck, NamesEveryCase) {
  const owner_record none;
  // A writer outside any cluster (ownership = all) requires no record.
  EXPECT_EQ(check_owner(none, "a", 0), owner_check::ok);
  EXPECT_EQ(check_owner(rec("b", 1), "a", 0), owner_check::fenced);
  // This node with this epoch: the claim holds.
  EXPECT_EQ(check_owner(rec("a", 4), "a", 4), owner_check::ok);
  // Another node, equal or newer epoch: moved.
  EXPECT_EQ(check_owner(rec("b", 4), "a", 4), owner_check::fenced);
  EXPECT_EQ(check_owner(rec("b", 9), "a", 4), owner_check::fenced);
  // Rolled back: absent, another node older, this node another epoch.
  EXPECT_EQ(check_owner(none, "a", 4), owner_check::lost);
  EXPECT_EQ(check_owner(rec("b", 3), "a", 4), owner_check::lost);
  EXPECT_EQ(check_owner(rec("a", 2), "a", 4), owner_check::lost);
  EXPECT_EQ(check_owner(rec("a", 7), "a", 4), owner_check::lost);
}

TEST(DecideClaim, AFirstClaimAlwaysTakesTheNextEpoch) {
  auto d = decide_claim(owner_record{}, "a", 0);
  EXPECT_EQ(d.verdict, claim_verdict::claim);
  EXPECT_EQ(d.epoch, 1u);
  d = decide_claim(rec("b", 6), "a", 0);
  EXPECT_EQ(d.verdict, claim_verdict::claim);
  EXPECT_EQ(d.epoch, 7u);
}

TEST(DecideClaim, KeepsAnIntactClaim) {
  auto d = decide_claim(rec("a", 5), "a", 5);
  EXPECT_EQ(d.verdict, claim_verdict::keep);
  EXPECT_EQ(d.epoch, 5u);
}

TEST(DecideClaim, ReClaimsALostClaimAboveEveryEpochSeen) {
  // Deleted: above this node's own epoch, not 1.
  auto d = decide_claim(owner_record{}, "a", 5);
  EXPECT_EQ(d.verdict, claim_verdict::claim);
  EXPECT_EQ(d.epoch, 6u);
  // Rolled back to a former owner's record: that owner is fenced again.
  d = decide_claim(rec("b", 3), "a", 5);
  EXPECT_EQ(d.verdict, claim_verdict::claim);
  EXPECT_EQ(d.epoch, 6u);
  // This node's name at another epoch (an older claim of its own, or a newer
  // one of an earlier incarnation): above both.
  d = decide_claim(rec("a", 8), "a", 5);
  EXPECT_EQ(d.verdict, claim_verdict::claim);
  EXPECT_EQ(d.epoch, 9u);
}

TEST(DecideClaim, NeverTakesAPartitionThatMoved) {
  auto d = decide_claim(rec("b", 5), "a", 5);
  EXPECT_EQ(d.verdict, claim_verdict::fenced);
  EXPECT_EQ(d.epoch, 5u);
  d = decide_claim(rec("b", 12), "a", 5);
  EXPECT_EQ(d.verdict, claim_verdict::fenced);
  EXPECT_EQ(d.epoch, 12u);
}

TEST(Ownership, AssignAndRevokeAnswerOnlyWhatChanged) {
  ownership o{true, false};
  EXPECT_EQ(o.assign({1, 2}), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(o.assign({2, 3}), (std::vector<int32_t>{3}));
  o.claimed(1, 4);
  auto r = o.revoke({1, 3, 7});
  EXPECT_EQ(r.dropped, (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(r.claims, (std::map<int32_t, uint64_t>{{1, 4}}));
  EXPECT_EQ(o.owned(), (std::set<int32_t>{2}));
  EXPECT_FALSE(o.epoch(1));
}

TEST(Ownership, EpochAsksWithoutInserting) {
  ownership o{true, false};
  o.assign({0});
  EXPECT_FALSE(o.epoch(0));
  EXPECT_FALSE(o.epoch(5));
  EXPECT_TRUE(o.epochs().empty());
}

TEST(Ownership, AClaimIsRecordedOnlyWhileOwnedAndNeverGoesBack) {
  ownership o{true, false};
  o.assign({0});
  o.claimed(1, 3); // revoked before its verification answered
  EXPECT_FALSE(o.epoch(1));
  o.claimed(0, 3);
  o.claimed(0, 2); // an older claim's answer, late
  EXPECT_EQ(o.epoch(0), 3u);
  o.claimed(0, 5); // re-claimed after Redis lost it
  EXPECT_EQ(o.epoch(0), 5u);
}

TEST(Ownership, AReportForAnotherClaimIsStale) {
  ownership o{true, false};
  o.assign({0});
  o.claimed(0, 2);
  // A heartbeat that started before a revoke and a re-assign (epoch 1) must
  // not fence the new claim (epoch 2).
  EXPECT_EQ(o.judge_report(0, 1, true), ownership::report::stale);
  EXPECT_EQ(o.judge_report(3, 2, true), ownership::report::stale);
  EXPECT_EQ(o.judge_report(0, 2, true), ownership::report::moved);
  EXPECT_EQ(o.judge_report(0, 2, false), ownership::report::lost);
}

TEST(Ownership, AMovedPartitionIsGivenUpOnlyWhenTheSetChanges) {
  ownership fixed{true, true};
  fixed.assign({0});
  fixed.claimed(0, 1);
  EXPECT_TRUE(fixed.moved_away(0));
  EXPECT_TRUE(fixed.owns(0));
  ownership changing{true, false};
  changing.assign({0});
  changing.claimed(0, 1);
  EXPECT_FALSE(changing.moved_away(0));
  EXPECT_FALSE(changing.owns(0));
  EXPECT_FALSE(changing.epoch(0));
}

} // namespace
} // namespace qsp::core
