// scripts/services' Redis Cluster fault commands as the tests rely on them
// (against the Redis Cluster service set; label `rcluster`, like
// tests/rcluster_scale; RUN_SERIAL).
//
// rc-failover twice the same way within 2 x cluster-node-timeout: the
// masters refuse a vote about a shard's primary that soon after they last
// voted about it, and a manual CLUSTER FAILOVER that gets no votes lapses
// after 5 s.  The nemesis's first step once met that window after the last
// scale test had failed pair 1 over and back ("failover to rcluster-4: not
// done after 30s (rcluster-4: role slave)"); rc-failover now sends the
// command again while the node is still the same primary's replica.
#include "tests/rcluster_scale/rc_kit.hpp"

using namespace qsp;
using namespace qsp::rckit;

namespace {

long node_timeout_ms() {
  const char* v = std::getenv("QSP_RCLUSTER_NODE_TIMEOUT_MS");
  return v != nullptr && *v != '\0' ? std::stol(v) : 3000;
}

} // namespace

TEST(rc_services, AFailoverTheSameWayAgainWithinTheVoteWindowIsDone) {
  std::cout.setf(std::ios::unitbuf);
  REQUIRE_RCLUSTER_SET();
  ASSERT_EQ(ensure_healthy(), "") << "the Redis Cluster set is not healthy at the start";
  struct leave {
    ~leave() { EXPECT_EQ(leave_healthy(), "") << "the test left the Redis Cluster set unhealthy"; }
  } healed_at_exit;
  // Pair 3: its shard serves neither the namespace's slot nor anything a
  // test running before left behind.
  const int p = primary_in(3), r = replica_in(3);
  ASSERT_EQ(p, 3);
  ASSERT_EQ(r, 6);
  // A protocol timer, not a synchronisation: whatever ran before may have
  // failed pair 3 over, and its window would make the first two failovers
  // wait out theirs, so the third would begin past the window it tests.
  std::this_thread::sleep_for(std::chrono::milliseconds(2 * node_timeout_ms() + 500));
  ASSERT_SVC("rc-failover " + std::to_string(r));  // the masters vote about node p
  // The vote came just before node r was seen owning the slots (within the
  // script's 100 ms polls): the window is measured from here, with 1 s spare.
  auto t_voted = clock_type::now();
  ASSERT_SVC("rc-failover " + std::to_string(p));  // ... about node r
  auto within = ms_since(t_voted) + 1000;
  auto again = svc("rc-failover " + std::to_string(r));  // about node p again
  EXPECT_EQ(again.rc, 0) << "scripts/services rc-failover " << r << ":\n" << again.out;
  EXPECT_EQ(role(r), "master");
  EXPECT_EQ(role(p), "slave");
  // The third began inside the window, so the masters refused the first
  // attempt and rc-failover had to send it again: else this proved nothing.
  ASSERT_LT(within, 2 * node_timeout_ms())
    << "the second failover ended " << within << " ms (1 s spare included) after the first, past the vote window of "
    << 2 * node_timeout_ms() << " ms: the test proves nothing";
  EXPECT_NE(again.out.find("CLUSTER FAILOVER again"), std::string::npos)
    << "one CLUSTER FAILOVER was enough inside the vote window?\n" << again.out;
}
