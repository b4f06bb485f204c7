// The host's own test of its sessions gate (gate.hpp), written the way a
// qsession developer tests their code: in the projection's test kit
// (qsession::projection_testkit, docs/TESTING.md), with the host's actors
// spawned in the kit's actor system.  No Kafka, no Redis, no sleeping: the
// kit simulates both on a manual clock.
#include <qsession/projection/testkit.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "caf/event_based_actor.hpp"

#include "gate.hpp"
#include "messages.hpp"

namespace {

using namespace std::chrono_literals;
using qsp::testkit::kit;
using qsp::testkit::kit_options;

/// A kit whose actor system knows the host's own messages.
kit_options host_options() {
  kit_options o;
  o.configure = [](caf::actor_system_config& cfg) {
    qsp::add_type_blocks<caf::id_block::host>(cfg);
  };
  return o;
}

bool not_ready(const caf::expected<qsp::session_list>& x) {
  return !x && qsp::code_of(x.error()) == qsp::ec::not_ready;
}

/// The host under test: its gate in front of the kit's projection, and
/// the alerts it raised.
struct host_fixture : testing::Test {
  kit k{host_options()};
  host::gate_actor gate;
  std::shared_ptr<std::vector<std::string>> alerts = std::make_shared<std::vector<std::string>>();

  void fill(int per_partition) {
    for (int32_t p = 0; p < k.partition_count(); ++p)
      for (int i = 0; i < per_partition; ++i)
        k.produce(p, "conv-" + std::to_string(p) + "-" + std::to_string(i), 1000 + 10 * i + p,
                  {"alice", "user-" + std::to_string(i % 4)});
  }

  /// Starts the projection and the host's gate in front of it; the hook
  /// spawns a new gate in front of every new projection (a restart).
  void start() {
    auto log = alerts;
    k.on_start([this, log](kit& kk) {
      gate = host::spawn_gate(kk.system(), "tenant-a", kk.projection(),
                              [log](const std::string& tenant, const std::string& error) {
                                log->push_back(tenant + ": " + error);
                              },
                              2s);
    });
    k.start();
    k.run();
  }

  /// The host's own shutdown: stop the projection; the gate quits with it.
  void TearDown() override { k.stop(); }

  caf::expected<qsp::session_list> pull(const std::string& user, uint32_t limit = 10000) {
    return k.request<qsp::session_list>(gate, host::atom::pull_v, user, limit);
  }

  std::string health() {
    auto h = k.request<std::string>(gate, host::atom::health_v);
    return h ? *h : "no answer: " + qsp::describe(h.error());
  }

  /// What the host's clients get for `user` equals the model (what the
  /// committed dispatches say), newest first.
  void expect_pull_equals_model(const std::string& user) {
    auto got = pull(user);
    ASSERT_TRUE(got) << qsp::describe(got.error()) << "\n" << k.explain();
    std::map<std::string, int64_t> seen;
    for (size_t i = 0; i < got->size(); ++i) {
      auto& e = (*got)[i];
      seen[e.conversation_id] = e.last_active;
      if (i > 0) {
        EXPECT_GE((*got)[i - 1].last_active, e.last_active) << "not newest first";
      }
    }
    EXPECT_EQ(seen, k.model()[user]);
  }
};

using HostGate = host_fixture;

// Until every partition reached its H0, the host's clients get not-ready,
// from the gate itself (no round trip), and no alert.
TEST_F(HostGate, AnswersNotReadyUntilTheProjectionCaughtUp) {
  // A slow broker: the records reach the consumers half a second after
  // H0 was taken, so the projection is catching up for that long.
  k.broker_slow(500ms);
  fill(120);
  start();
  ASSERT_EQ(k.state(), "catching-up") << k.explain();
  EXPECT_EQ(health(), "waiting");
  auto early = pull("alice");
  EXPECT_TRUE(not_ready(early)) << (early ? "served before ready" : qsp::describe(early.error()));
  // The gate has every status push the kit has seen: no k.run() needed.
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  EXPECT_EQ(health(), "ready");
  expect_pull_equals_model("alice");
  EXPECT_TRUE(alerts->empty());
}

// Redis freezes (SIGSTOP) for longer than every timeout and backoff: the
// host answers not-ready all along and raises no alert (a freeze is not a
// refusal); once Redis is back the projection catches up, the host serves
// again and Redis equals the model.
TEST_F(HostGate, NotReadyWhileRedisIsFrozenThenServesTheModel) {
  fill(20);
  start();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  ASSERT_EQ(health(), "ready");
  expect_pull_equals_model("alice");

  k.redis_freeze();
  // A pull meets the frozen Redis (redis_unavailable): the host says
  // not-ready, and the projection closes its gate (ready is a claim about
  // Redis even while idle: what stops answering may be failing over under
  // it), dirty until Redis answers and the checkpoints are replayed.
  auto frozen = pull("alice");
  EXPECT_TRUE(not_ready(frozen)) << (frozen ? "served while frozen"
                                            : qsp::describe(frozen.error()));
  ASSERT_TRUE(k.run_until_state("dirty")) << k.explain();
  EXPECT_FALSE(k.ready());
  k.produce(1, "late", 9000, {"alice"});
  EXPECT_EQ(health(), "waiting");
  EXPECT_TRUE(not_ready(pull("alice")));
  // The fault outlasts Redis' command timeout and every backoff of the
  // projection's restarts: still not-ready, nothing half-served.
  for (int i = 0; i < 5; ++i) {
    k.advance(2s);
    EXPECT_FALSE(k.ready()) << k.explain();
    EXPECT_TRUE(not_ready(pull("alice"))) << "second " << 2 * (i + 1) << " of the freeze";
  }
  EXPECT_FALSE(k.score("alice", "late"));
  EXPECT_TRUE(alerts->empty());

  k.redis_release();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  ASSERT_TRUE(k.run_until_offset(1, k.log_end(1))) << k.explain();
  EXPECT_EQ(health(), "ready");
  expect_pull_equals_model("alice");
  auto newest = pull("alice");
  ASSERT_TRUE(newest);
  ASSERT_FALSE(newest->empty());
  EXPECT_EQ(newest->front().conversation_id, "late");
  EXPECT_TRUE(k.model_equals_redis()) << k.explain();
  EXPECT_TRUE(k.check_invariants()) << k.explain();
  EXPECT_TRUE(alerts->empty());
}

// The dispatch topic is deleted and re-created under the projection: it
// refuses (final), the host alerts once and stops serving the tenant.
TEST_F(HostGate, ARecreatedTopicIsRefusedAndAlertedOnce) {
  fill(5);
  start();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  k.recreate_topic();
  k.produce(0, "new-topic", 9999, {"gina"});
  ASSERT_TRUE(k.run_until_state("refused")) << k.explain();
  EXPECT_EQ(health(), "refused");
  ASSERT_EQ(alerts->size(), 1u);
  EXPECT_NE(alerts->front().find("tenant-a: "), std::string::npos) << alerts->front();
  // The refusal names the field: the topic id pinned in Redis differs.
  EXPECT_NE(alerts->front().find("topic_id"), std::string::npos) << alerts->front();
  auto refused = pull("gina");
  ASSERT_TRUE(not_ready(refused));
  EXPECT_NE(qsp::describe(refused.error()).find("refused"), std::string::npos)
    << qsp::describe(refused.error());
  // Refused is final: time passes, nothing changes, no second alert, even
  // when the projection pushes the refusal again (a push may repeat).
  k.advance(10s);
  k.repeat_status(3);
  EXPECT_EQ(k.state(), "refused");
  EXPECT_EQ(alerts->size(), 1u);
  EXPECT_FALSE(k.score("gina", "new-topic"));
  EXPECT_TRUE(k.check_invariants()) << k.explain();
}

// The node restarts: the old gate quits with the old projection, the hook
// puts a new gate in front of the new one, which serves once ready.
TEST_F(HostGate, ARestartGetsANewGateInFrontOfTheNewProjection) {
  fill(10);
  start();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  auto old_gate = gate;
  auto old_projection = k.projection();
  ASSERT_TRUE(k.restart()) << k.explain();
  EXPECT_EQ(k.starts(), 2u);
  EXPECT_NE(k.projection(), old_projection);
  EXPECT_NE(gate, old_gate);
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  EXPECT_EQ(health(), "ready");
  expect_pull_equals_model("alice");
  EXPECT_TRUE(alerts->empty());
}

// The gate under the kit's randomized schedules: a gate in front of every
// projection the schedule spawns, a client pulling through it with the
// host's own atom now and then, and the host's invariant: a list served by
// the gate was served while the projection said ready.  Its messages are
// the host's types, so the schedule's systems need the host's block
// (schedule_host::configure): on CAF 1.x this test crashes without it when
// it runs in a process of its own, as ctest runs it.
TEST(HostGateSchedules, TheGateServesOnlyWhileReadyUnderEverySchedule) {
  size_t served = 0, refused = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    auto gate = std::make_shared<host::gate_actor>();
    auto served_not_ready = std::make_shared<size_t>(0);
    qsp::testkit::schedule_options o;
    o.host.configure = [](caf::actor_system_config& cfg) {
      qsp::add_type_blocks<caf::id_block::host>(cfg);
    };
    o.host.start = [gate](kit& k) {
      *gate = host::spawn_gate(k.system(), "tenant-a", k.projection(),
                               [](const std::string&, const std::string&) {}, 2s);
    };
    o.host.step = [&, gate, served_not_ready](kit& k, uint64_t draw) {
      auto was_ready = k.ready();
      auto got = k.request<qsp::session_list>(*gate, host::atom::pull_v,
                                              "u" + std::to_string(draw % 4), uint32_t{10});
      if (!got) {
        ++refused;
        return;
      }
      ++served;
      if (!was_ready && !k.ready())
        ++*served_not_ready;
    };
    o.host.invariants.emplace_back("gate serves only while ready", [served_not_ready](const kit&) {
      return *served_not_ready == 0 ? std::string{}
                                    : std::to_string(*served_not_ready)
                                        + " lists served while the projection was not ready";
    });
    auto r = qsp::testkit::run_schedule(seed, 120, o);
    EXPECT_TRUE(r.ok) << r.failure;
  }
  // Both answers happened: the schedules exercised the gate.
  EXPECT_GT(served, 0u);
  EXPECT_GT(refused, 0u);
}

} // namespace
