// Findings: the randomized schedules in a world as unkind as Redis where
// today's rules assume it kinder (qsp::test::set_worlds_as_unkind_as_redis:
// waits_as_the_product, stamps_as_read, registry_in_shard, the checker's
// rollback exemptions ending once met) drawing what Redis does
// (schedule_options::as_unkind_as_redis), and a host team's sequence.
// The single-Redis schedules, the host team's sequence and the planted
// mutants pass (CTest `findings_one_redis`, label `testkit`, in the test
// command).  The Redis Cluster schedules fail today: each failing seed is a
// loss or a refusal the rules do not handle yet; they run under the CTest
// label `findings`, which the test command (scripts/test) leaves out until
// those rules are fixed:
//
//     ctest --test-dir build -L findings --output-on-failure
//
// QSP_SCHEDULE_SEEDS (default 1000) scales the seed range (each test runs
// its topology's seeds of the mix); QSP_SCHEDULE_SEED=N replays one
// (--gtest_filter picks the test); QSP_COPIES_BETWEEN=1 draws them with
// schedule_options::copies_between_cluster_events.  docs/TESTING.md §8 lists what they find.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/mutants.hpp"
#include "qsession/projection/testkit.hpp"
#include "testkit/world/world.hpp"

namespace {

using qsp::testkit::run_schedule;
using qsp::testkit::schedule_options;

/// The schedule mix (tests/testkit/schedule_test.cpp), as unkind as Redis:
/// every other seed with ownership changes, every third in Redis Cluster
/// mode with three shards.
schedule_options unkind_options(uint64_t seed) {
  schedule_options o;
  o.ownership_changes = seed % 2 == 1;
  o.redis_shards = seed % 3 == 0 ? 3 : 0;
  o.as_unkind_as_redis = true;
  return o;
}

/// The finding in a failure: the first invariant broken (a loss), else a
/// difference the final comparison found (a loss), else the refusal (its
/// cause), else the first line after the header.
std::string finding_of(const std::string& failure) {
  auto line_at = [&](size_t at) {
    auto end = failure.find('\n', at);
    return failure.substr(at, std::min<size_t>(end - at, 300));
  };
  static const std::string broke = "invariant violated:\n";
  if (auto i = failure.find(broke); i != std::string::npos)
    return "broken: " + line_at(i + broke.size());
  // A loss found by the final comparison (before any "refused: " in the
  // events after it, which may quote a connection refused).
  static const std::string differs = "Redis differs from the model:\n";
  if (auto i = failure.find(differs); i != std::string::npos)
    return "differs: " + line_at(i + differs.size());
  if (auto i = failure.find("refused: "); i != std::string::npos)
    return "refusal: " + line_at(i);
  auto first = failure.find('\n');
  return first == std::string::npos ? failure : line_at(first + 1);
}

/// Runs the seeds of the mix that `pick` takes (QSP_SCHEDULE_SEED=N: N
/// alone, verbose), printing one line per failing seed; the failures.
size_t run_findings(const char* what, bool (*pick)(uint64_t)) {
  // QSP_MUTANT=<name>: the same seeds with a planted bug (core/mutants.hpp),
  // to see which findings it adds.
  if (auto m = std::getenv("QSP_MUTANT"))
    if (auto x = qsp::mutant::from_name(m))
      qsp::mutant::activate(*x);
  qsp::test::set_worlds_as_unkind_as_redis(true);
  std::vector<uint64_t> seeds;
  if (auto one = std::getenv("QSP_SCHEDULE_SEED")) {
    seeds.push_back(std::strtoull(one, nullptr, 10));
  } else {
    auto n = std::getenv("QSP_SCHEDULE_SEEDS");
    auto last = n == nullptr ? 1000 : std::strtoull(n, nullptr, 10);
    for (uint64_t s = 1; s <= last; ++s)
      if (pick(s))
        seeds.push_back(s);
  }
  size_t failed = 0;
  for (auto seed : seeds) {
    auto o = unkind_options(seed);
    o.copies_between_cluster_events = std::getenv("QSP_COPIES_BETWEEN") != nullptr;
    o.verbose = seeds.size() == 1;
    auto r = run_schedule(seed, 200, o);
    if (!r.ok) {
      ++failed;
      if (o.verbose)  // one seed replayed: the whole failure
        std::printf("%s\n", r.failure.c_str());
      std::printf("[findings] %s seed %llu, step %zu: %s\n", what,
                  static_cast<unsigned long long>(seed), r.steps, finding_of(r.failure).c_str());
      // The Redis events among the last ones before it: which fault led there.
      for (size_t at = r.failure.find("last events:"); at != std::string::npos;) {
        auto end = r.failure.find('\n', at + 1);
        auto line = r.failure.substr(at + 1, end == std::string::npos ? end : end - at - 1);
        if (line.find("Redis") != std::string::npos)
          std::printf("[findings]     %s\n", line.c_str());
        at = end;
      }
    }
  }
  qsp::test::set_worlds_as_unkind_as_redis(false);
  qsp::mutant::activate(qsp::mutant::id::none);
  std::printf("[findings] %s: %zu of %zu seeds failed\n", what, failed, seeds.size());
  return failed;
}

TEST(Findings, SchedulesInARedisClusterAsUnkindAsRedis) {
  auto failed = run_findings("redis-cluster", [](uint64_t s) { return s % 3 == 0; });
  EXPECT_EQ(failed, 0u) << "Redis Cluster schedules failed (each line above names its seed)";
}

// Every topology: an idle, ready projection after a rollback it met (a
// pull right after a lossy failover) must not serve what Redis lost.
TEST(Findings, SchedulesWithOneRedisAsUnkindAsRedis) {
  auto failed = run_findings("one-redis", [](uint64_t s) { return s % 3 != 0; });
  EXPECT_EQ(failed, 0u) << "single-Redis schedules failed (each line above names its seed)";
}

// Issue 44, item 3: the unkind schedules catch the planted mutants of the
// rules issue 45 changes.  Under joined_without_replicas and
// copies_plain_hset a seed below refuses (or passes) under the fixed rules
// and is a silent loss ("[nothing lost]") under the mutant.  Under
// copies_stamped_at_open (a running node's copies stamped with the epochs
// its store read when it opened) a seed drawn with
// copies_between_cluster_events (copies written between two cluster
// events in a row) refuses a failed-over primary's copy for an epoch spent
// before the copy was written ("copy epoch ... held by none"), which the
// fixed rules do not (they refuse that seed for another primary's missing
// copy only); the kit's ClusterWorld.ACopyCarriesTheEpochReadWhenItIsWritten
// shows the rule alone.
std::string outcome(uint64_t seed, bool copies_between = false) {
  qsp::test::set_worlds_as_unkind_as_redis(true);
  auto o = unkind_options(seed);
  o.copies_between_cluster_events = copies_between;
  auto r = run_schedule(seed, 200, o);
  qsp::test::set_worlds_as_unkind_as_redis(false);
  return r.ok ? std::string{"ok"} : finding_of(r.failure);
}

TEST(Findings, TheUnkindSchedulesCatchTheMutantsOfRoundThree) {
  struct planted {
    qsp::mutant::id m;
    uint64_t seed;
    bool copies_between;         // schedule_options::copies_between_cluster_events
    const char* fixed_lacks;     // what the fixed rules' outcome must not contain
    const char* planted_shows;   // what the mutant's outcome must contain
  };
  for (auto& p : {planted{qsp::mutant::id::joined_without_replicas, 9, false, "[nothing lost]",
                          "[nothing lost]"},
                  planted{qsp::mutant::id::copies_plain_hset, 270, false, "[nothing lost]",
                          "[nothing lost]"},
                  planted{qsp::mutant::id::copies_stamped_at_open, 2364, true, "copy epoch",
                          "held by none"}}) {
    auto fixed = outcome(p.seed, p.copies_between);
    qsp::mutant::activate(p.m);
    auto planted_out = outcome(p.seed, p.copies_between);
    qsp::mutant::activate(qsp::mutant::id::none);
    EXPECT_EQ(fixed.find(p.fixed_lacks), std::string::npos)
      << "seed " << p.seed << " under the fixed rules shows " << p.fixed_lacks << ": " << fixed;
    EXPECT_NE(planted_out.find(p.planted_shows), std::string::npos)
      << "seed " << p.seed << " under " << qsp::mutant::name(p.m) << " does not show "
      << p.planted_shows << ": " << planted_out;
  }
}

} // namespace

namespace {

// A host team's finding (every topology): an idle, ready projection serves
// rolled-back data.  Six conversations for alice; a failover to a replica
// that missed the last two writes (the ZADDs and the first checkpoint);
// every pull after the first must either be refused or serve all six.
TEST(Findings, AnIdleReadyProjectionAfterARollbackItMet) {
  qsp::test::set_worlds_as_unkind_as_redis(true);
  qsp::testkit::kit_options o;
  o.partitions = 1;
  qsp::testkit::kit k{o};
  for (int i = 0; i < 6; ++i)
    k.produce(0, "c" + std::to_string(i), 1000 + i, {"alice"});
  k.start();
  ASSERT_TRUE(k.run_until_ready(std::chrono::seconds{10})) << k.explain();
  ASSERT_EQ(k.redis_failover(2), 2u);
  for (int i = 0; i < 3; ++i) {
    auto served = k.pull("alice", 10);
    if (served) {
      EXPECT_EQ(served->size(), 6u) << "pull " << i << " served " << served->size()
                                    << " of alice's 6 conversations while "
                                    << (k.ready() ? "ready" : "not ready");
    }
  }
  EXPECT_FALSE(k.failed()) << k.explain();
  qsp::test::set_worlds_as_unkind_as_redis(false);
}

} // namespace
