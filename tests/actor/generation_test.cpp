// The generation's kill switch (actors/generation.hpp): abort() interrupts
// every store tracked before and after it, and the registrations stay bounded
// by the live stores however often an actor re-makes its store (issue 25,
// finding 5: the cluster heartbeat re-tracked a fresh store after every
// failed heartbeat, for ever).
#include "tests/actor/fixture.hpp"

#include "actors/cluster_member.hpp"
#include "actors/generation.hpp"

using namespace qsp;
using namespace qsp::test;

namespace {

/// A store that only counts its interrupts.
struct counting_store {
  int interrupts = 0;
  void interrupt() { ++interrupts; }
};

/// Sends one heartbeat to `member` and stores the answer or the error.
void heartbeat_prober(caf::event_based_actor* self,
                      std::shared_ptr<std::optional<caf::expected<cluster_report>>> res,
                      member_actor member, std::vector<owned_status> mine) {
  qsp::mail(self, atom::heartbeat_v, std::move(mine)).request(member, caf::infinite)
    .then([=](cluster_report& r) { *res = std::move(r); },
          [=](caf::error& e) { *res = std::move(e); });
}

struct Generation : projection_fixture {
  /// One heartbeat, stepped until answered.
  caf::expected<cluster_report> heartbeat(member_actor member) {
    auto res = std::make_shared<std::optional<caf::expected<cluster_report>>>();
    sys.spawn(heartbeat_prober, res, member, std::vector<owned_status>{});
    for (size_t i = 0; i < 10000 && !*res && rt.run_once(); ++i)
      ;
    if (!*res)
      return caf::make_error(ec::unspecified, "test: no answer to the heartbeat");
    return std::move(**res);
  }
};

} // namespace

TEST_F(Generation, StoresDestroyedOneAfterAnotherLeaveNoRegistrationsBehind) {
  generation gen;
  auto kept = std::make_shared<counting_store>();
  gen.track(kept);
  size_t most = 0;
  for (int i = 0; i < 1000; ++i) {
    auto brief = std::make_shared<counting_store>();
    gen.track(brief);
    most = std::max(most, gen.hooks());
    brief.reset(); // gone before any abort: nothing left to interrupt
  }
  // The long-lived store and at most the one destroyed since the last track().
  EXPECT_LE(most, 2u);
  EXPECT_LE(gen.hooks(), 2u);
  EXPECT_EQ(kept->interrupts, 0);
  gen.abort();
  EXPECT_TRUE(gen.aborted());
  EXPECT_EQ(kept->interrupts, 1);
  // A store tracked after abort() is interrupted at once.
  auto late = std::make_shared<counting_store>();
  gen.track(late);
  EXPECT_EQ(late->interrupts, 1);
  EXPECT_EQ(kept->interrupts, 1);
}

TEST_F(Generation, EveryLiveStoreIsInterruptedWhicheverOthersDied) {
  generation gen;
  std::vector<std::shared_ptr<counting_store>> live;
  for (int i = 0; i < 10; ++i) {
    auto s = std::make_shared<counting_store>();
    gen.track(s);
    if (i % 2 == 0)
      live.push_back(s); // the odd ones die at the end of this iteration
  }
  // Pruning one track() later drops dead entries only.
  gen.track(live.front());
  EXPECT_EQ(gen.hooks(), live.size() + 1);
  gen.abort();
  EXPECT_EQ(live.front()->interrupts, 2); // tracked twice, interrupted by both
  for (size_t i = 1; i < live.size(); ++i)
    EXPECT_EQ(live[i]->interrupts, 1);
}

TEST_F(Generation, AClusterHeartbeatFailingAgainAndAgainDoesNotGrowTheInterruptHooks) {
  // The heartbeat drops its store after a failed publish and makes a new
  // one at the next heartbeat, tracking it in the same long-lived generation.
  settings.partition_count = world->partition_count();
  auto io = std::make_shared<generation>();
  auto member = sys.spawn(cluster_member, settings, std::string{"node-a"},
                          std::shared_ptr<port_factory>{ports}, io);
  world->redis_frozen = true;
  const uint64_t beats = 500;
  size_t most = 0;
  for (uint64_t i = 0; i < beats; ++i) {
    auto r = heartbeat(member);
    ASSERT_TRUE(r);
    ASSERT_TRUE(!r->error.empty()); // every publish fails: a fresh store next time
    most = std::max(most, io->hooks());
  }
  EXPECT_EQ(world->calls.publishes, beats);
  EXPECT_LE(most, 1u);
  // And it recovers on the store it makes next.
  world->redis_frozen = false;
  auto r = heartbeat(member);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->error, "");
  EXPECT_EQ(r->view.size(), static_cast<size_t>(world->partition_count()));
  EXPECT_LE(io->hooks(), 1u);
  caf::anon_send_exit(member, caf::exit_reason::user_shutdown);
  rt.run();
}
