// redis.wait-replicas (issue 14 item 2, optional): after every checkpoint
// write the node sends WAIT N timeout on the checkpoint connection.  A private
// primary with one replica (real redis-servers on free loopback ports), the
// broker of scripts/services.  The cost is measured in RELIABILITY.md
// ("WAIT for replicas"), not here.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "redis/cluster.hpp"
#include "core/dispatch.hpp"
#include "kafka/producer.hpp"
#include "redis/stores.hpp"
#include "tests/support/integration.hpp"

using namespace std::chrono_literals;
using qsp::test::eventually;

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

/// A field of `INFO section` ("" if absent).
std::string info_field(qsp::redis::connection& c, const std::string& section,
                       const std::string& field) {
  return qsp::redis::info_fields(qsp::test::redis_cmd(c, {"INFO", section}))[field];
}

/// The calls of `command` since the last CONFIG RESETSTAT (0 if never called).
long calls(qsp::redis::connection& c, const std::string& command) {
  auto v = info_field(c, "commandstats", "cmdstat_" + command); // calls=N,usec=...
  return v.rfind("calls=", 0) == 0 ? std::stol(v.substr(6)) : 0;
}

struct WaitReplicas : ::testing::Test {
  std::string topic = qsp::test::unique_name("wait-replicas");
  std::string ns = qsp::test::unique_name("ns");
  std::string convs = qsp::test::unique_name("convs") + ":";
  static constexpr int records = 2000;
  std::optional<qsp::test::private_redis> primary, replica;

  void SetUp() override {
    primary.emplace("wait-primary", std::vector<std::string>{});
    ASSERT_TRUE(primary->wait_ready());
    replica.emplace("wait-replica", std::vector<std::string>{
                                      "--replicaof", "127.0.0.1", std::to_string(primary->port)});
    ASSERT_TRUE(replica->wait_ready());
    auto r = qsp::test::redis_conn_at("127.0.0.1:" + std::to_string(replica->port));
    ASSERT_TRUE(eventually([&] { return info_field(*r, "replication", "master_link_status") == "up"; },
                           30s))
      << "the replica did not link to the primary";
    qsp::test::create_topic(topic, 1);
    auto p = qsp::kafka::producer::make(qsp::test::kafka_client());
    ASSERT_TRUE(p);
    for (uint64_t i = 0; i < records; ++i)
      ASSERT_TRUE(p->send(topic, 0, qsp::core::encode_json(qsp::test::make_dispatch(i))));
    ASSERT_TRUE(p->flush());
  }

  std::vector<std::string> args(const std::string& cmd, std::vector<std::string> extra) {
    auto a = qsp::test::node_args(topic, 1, ns, convs);
    a.insert(a.begin(), cmd);
    qsp::test::set_option(a, "redis.port", std::to_string(primary->port));
    qsp::test::set_option(a, "redis.host", "127.0.0.1");
    a.push_back("--projection.max-batch-records=100"); // many checkpoint writes
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }

  std::unique_ptr<qsp::redis::connection> at(uint16_t port) {
    return qsp::test::redis_conn_at("127.0.0.1:" + std::to_string(port));
  }

  std::string checkpoint(qsp::redis::connection& c) {
    return qsp::test::redis_cmd(c, {"HGET", qsp::redis::checkpoint_key(ns, topic, 0),
                                    "next_offset"});
  }
};

} // namespace

TEST_F(WaitReplicas, BadValuesExitTwoNamingTheKey) {
  auto r = qsp::test::run_cli(args("verify", {"--redis.wait-replicas=-1"}));
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "redis.wait-replicas")) << r.err;
  r = qsp::test::run_cli(args("verify", {"--redis.wait-replicas=1", "--redis.wait-timeout=5s",
                                         "--redis.command-timeout=5s"}));
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "redis.wait-timeout")) << r.err;
  EXPECT_TRUE(contains(r.err, "redis.command-timeout")) << r.err;
}

TEST_F(WaitReplicas, CheckpointWritesAreFollowedByAWait) {
  auto p = at(primary->port);
  // The control: without the option, no WAIT.
  ASSERT_EQ(qsp::test::redis_cmd(*p, {"CONFIG", "RESETSTAT"}), "OK");
  auto r = qsp::test::run_cli(args("catch-up", {}));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(calls(*p, "wait"), 0);
  long evals_without = calls(*p, "eval");
  EXPECT_GT(evals_without, 5) << "too few checkpoint writes to tell";

  // A fresh namespace, with the option: a WAIT after every checkpoint script
  // (EVAL also runs the start's reads and the meta creation: fewer WAITs).
  ns = qsp::test::unique_name("ns");
  ASSERT_EQ(qsp::test::redis_cmd(*p, {"CONFIG", "RESETSTAT"}), "OK");
  r = qsp::test::run_cli(args("catch-up", {"--redis.wait-replicas=1"}));
  ASSERT_EQ(r.rc, 0) << r.err;
  long waits = calls(*p, "wait"), evals = calls(*p, "eval");
  EXPECT_GT(waits, 5);
  EXPECT_LT(waits, evals);
  // The last checkpoint was acknowledged by the replica before catch-up exited.
  auto rep = at(replica->port);
  EXPECT_EQ(checkpoint(*rep), std::to_string(records));
  EXPECT_EQ(checkpoint(*p), std::to_string(records));
}

TEST_F(WaitReplicas, APausedReplicaDoesNotFailTheCheckpoints) {
  auto p = at(primary->port);
  ASSERT_EQ(qsp::test::redis_cmd(*p, {"CONFIG", "RESETSTAT"}), "OK");
  qsp::test::pause_guard paused{replica->pid};
  ASSERT_TRUE(paused.paused());
  // Every WAIT times out with 0 acknowledgements (below the command timeout):
  // the checkpoints are written anyway, each one 20 ms later.
  auto r = qsp::test::run_cli(args("catch-up", {"--redis.wait-replicas=1",
                                                "--redis.wait-timeout=20ms"}));
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(checkpoint(*p), std::to_string(records));
  EXPECT_GT(calls(*p, "wait"), 5);
  paused.resume();
  auto rep = at(replica->port);
  EXPECT_TRUE(eventually([&] { return checkpoint(*rep) == std::to_string(records); }, 30s))
    << "the replica did not catch up after its resume";
}
