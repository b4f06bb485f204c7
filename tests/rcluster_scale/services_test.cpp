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
//
// The test looks for that window among alternating failovers rather than
// assuming where it falls: a vote by whatever ran before (the last test's
// failover back) can make the second failover wait out its own window, so
// the third begins past the one it meant to test (CI, 2026-12-07: "the
// second failover ended 13863 ms ... after the first").
#include "tests/rcluster_scale/rc_kit.hpp"

#include <cstdlib>
#include <vector>

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
  // Failovers alternate between the pair's two nodes, so failover k asks
  // the masters for a vote about the same primary as failover k - 2.  When
  // k begins within 2 x node-timeout of k - 2's vote, the masters refuse
  // its first CLUSTER FAILOVER, and rc-failover must send it again.  Which
  // failover first lands inside that window depends on how long the one
  // between them took (a demoted primary is seen as a replica on the
  // cluster bus a moment late; CI once took 12.9 s for it), so the test runs
  // until one does, at most kMax failovers, every one of which must end
  // with the swap done.
  constexpr int kMax = 8;
  std::vector<clock_type::time_point> ended;
  bool met = false;
  for (int k = 0; k < kMax && !met; ++k) {
    const int to = k % 2 == 0 ? r : p, from = k % 2 == 0 ? p : r;
    auto began = clock_type::now();
    // Since failover k - 2's vote (just before its swap was seen, within
    // the script's 100 ms polls; 1 s spare).
    long since_vote = k >= 2 ? static_cast<long>(
      std::chrono::duration_cast<std::chrono::milliseconds>(began - ended[k - 2]).count()) + 1000 : -1;
    auto f = svc("rc-failover " + std::to_string(to));
    ended.push_back(clock_type::now());
    ASSERT_EQ(f.rc, 0) << "failover " << k + 1 << " (to rcluster-" << to << "):\n" << f.out;
    // rc-failover first waits for the link and for the primary to see its
    // replica; the window counts until the first CLUSTER FAILOVER is sent.
    auto at = f.out.find("CLUSTER FAILOVER sent to rcluster-");
    auto comma = at == std::string::npos ? at : f.out.find(", ", at);
    ASSERT_NE(comma, std::string::npos) << "rc-failover no longer says when it sent CLUSTER FAILOVER:\n" << f.out;
    if (since_vote >= 0)
      since_vote += std::atol(f.out.c_str() + comma + 2);
    ASSERT_EQ(role(to), "master") << "failover " << k + 1;
    ASSERT_EQ(role(from), "slave") << "failover " << k + 1;
    if (k >= 2 && since_vote < 2 * node_timeout_ms()) {
      met = true;
      std::cout << "failover " << k + 1 << " began " << since_vote << " ms (1 s spare included) after the vote of failover "
                << k - 1 << ", inside the window of " << 2 * node_timeout_ms() << " ms\n";
      EXPECT_NE(f.out.find("CLUSTER FAILOVER again"), std::string::npos)
        << "one CLUSTER FAILOVER was enough inside the vote window?\n" << f.out;
    }
  }
  // Else this proved nothing: no failover of kMax began inside the window.
  EXPECT_TRUE(met) << "none of " << kMax << " alternating failovers began within " << 2 * node_timeout_ms()
                   << " ms of the vote about the same primary two failovers before it: the test proves nothing";
}
