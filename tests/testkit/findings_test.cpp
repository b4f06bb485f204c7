// Findings: the randomized schedules in a simulated Redis Cluster that is
// as unkind as Redis where today's rules assume it kinder (testkit/world/
// redis_cluster.hpp: waits_as_the_product, a start's refresh makes durable
// only what the product WAITs for; stamps_as_read, a copy carries what its
// store read of the primary).  These schedules fail today: each
// failing seed is a loss or a refusal the Redis Cluster rules do not handle
// yet.  They run under the CTest label `findings`, which the test command
// (scripts/test) leaves out until those rules are fixed; run them with
//
//     ctest --test-dir build -L findings --output-on-failure
//
// QSP_SCHEDULE_SEEDS (default 1000) scales the seed range (only the seeds
// in Redis Cluster mode run: every third); QSP_SCHEDULE_SEED=N replays one.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "qsession/projection/testkit.hpp"
#include "testkit/world/world.hpp"

namespace {

using qsp::testkit::run_schedule;
using qsp::testkit::schedule_options;

/// The schedule mix's Redis Cluster seeds (tests/testkit/schedule_test.cpp).
schedule_options cluster_options(uint64_t seed) {
  schedule_options o;
  o.ownership_changes = seed % 2 == 1;
  o.redis_shards = 3;
  return o;
}

TEST(Findings, SchedulesInARedisClusterAsUnkindAsRedis) {
  qsp::test::set_worlds_as_unkind_as_redis(true);
  std::vector<uint64_t> seeds;
  if (auto one = std::getenv("QSP_SCHEDULE_SEED")) {
    seeds.push_back(std::strtoull(one, nullptr, 10));
  } else {
    auto n = std::getenv("QSP_SCHEDULE_SEEDS");
    auto last = n == nullptr ? 1000 : std::strtoull(n, nullptr, 10);
    for (uint64_t s = 3; s <= last; s += 3)
      seeds.push_back(s);
  }
  size_t failed = 0;
  for (auto seed : seeds) {
    auto o = cluster_options(seed);
    o.verbose = seeds.size() == 1;
    auto r = run_schedule(seed, 200, o);
    if (!r.ok) {
      ++failed;
      std::printf("[findings] seed %llu: %s\n", static_cast<unsigned long long>(seed),
                  r.failure.substr(0, r.failure.find('\n', r.failure.find('\n') + 1)).c_str());
    }
  }
  qsp::test::set_worlds_as_unkind_as_redis(false);
  EXPECT_EQ(failed, 0u) << failed << " of " << seeds.size()
                        << " Redis Cluster schedules failed (each line above names its seed)";
}

} // namespace
