// One node in ownership = group against the real broker and Redis
// (docs/CLUSTER.md): it joins, claims every partition, opens the gate, and on
// SIGTERM leaves the group, deletes its statuses and stops cleanly.  The
// multi-node takeover scenarios are in tests/cluster/.
#include <signal.h>

#include <gtest/gtest.h>

#include "kafka/producer.hpp"
#include "redis/stores.hpp"
#include "tests/support/integration.hpp"

using namespace qsp;
using namespace std::chrono_literals;
using test::slurp;

TEST(GroupNode, JoinsClaimsEveryPartitionAndLeavesCleanlyOnSigterm) {
  auto topic = test::unique_name("grp");
  auto ns = test::unique_name("ns");
  test::create_topic(topic, 4);
  auto p = kafka::producer::make(test::kafka_client());
  ASSERT_TRUE(p);
  for (uint64_t i = 0; i < 40; ++i)
    ASSERT_TRUE(p->send(topic, static_cast<int32_t>(i % 4), core::encode_json(test::make_dispatch(i))));
  ASSERT_TRUE(p->flush());
  auto port = test::free_port();
  auto args = test::node_args(topic, 4, ns, "convs:");
  args.insert(args.begin(), "run");
  test::set_option(args, "http.listen", "127.0.0.1:" + std::to_string(port));
  args.push_back("--projection.ownership=group");
  args.push_back("--projection.node-id=node-a");
  args.push_back("--kafka.group-id=" + ns);
  auto log = "/tmp/" + test::unique_name("grp-node") + ".log";
  auto pid = test::spawn_cli(args, log);
  ASSERT_TRUE(test::readyz_reaches(port, 200, 60s)) << slurp(log);
  auto table_args = test::node_args(topic, 4, ns, "convs:");
  table_args.insert(table_args.begin(), "cluster");
  auto table = test::run_cli(table_args);
  EXPECT_EQ(table.rc, 0) << table.out << table.err;
  auto c = test::redis_conn();
  for (int32_t q = 0; q < 4; ++q) {
    EXPECT_EQ(test::redis_cmd(*c, {"HGET", redis::owner_key(ns, topic, q), "node"}), "node-a");
    EXPECT_EQ(test::redis_cmd(*c, {"HGET", redis::checkpoint_key(ns, topic, q), "next_offset"}),
              "10");
  }
  ::kill(pid, SIGTERM);
  EXPECT_EQ(test::wait_cli(pid), 0) << slurp(log);
  // It stopped within its shutdown timeout: the membership's handle and the
  // heartbeat's connection released the I/O token (they once held it until
  // the timeout).
  EXPECT_EQ(slurp(log).find("did not stop within"), std::string::npos) << slurp(log);
  // Its statuses went with it: without an owner the namespace is not ready.
  for (int32_t q = 0; q < 4; ++q)
    EXPECT_EQ(test::redis_cmd(*c, {"EXISTS", redis::status_key(ns, topic, q)}), "0");
  auto after = test::run_cli(table_args);
  EXPECT_EQ(after.rc, 6) << after.out << after.err;
  EXPECT_NE(after.out.find("published no live status"), std::string::npos) << after.out;
  // A mistyped namespace or partition count is not an outage: `cluster`
  // still exits 6 (not ready) but says what the namespace holds.
  auto typo = table_args;
  test::set_option(typo, "projection.namespace", ns + "-typo");
  auto t = test::run_cli(typo);
  EXPECT_EQ(t.rc, 6) << t.out << t.err;
  EXPECT_NE(t.err.find(ns + "-typo:meta does not exist"), std::string::npos) << t.err;
  auto count = table_args;
  test::set_option(count, "projection.partition-count", "6");
  auto n = test::run_cli(count);
  EXPECT_EQ(n.rc, 6) << n.out << n.err;
  EXPECT_NE(n.err.find("meta says partition_count 4, not 6"), std::string::npos) << n.err;
}

namespace {

/// A `run` node with static ownership of `parts` on port `port`.
int start_static(const std::string& topic, const std::string& ns, const std::string& node,
                 const std::string& parts, uint16_t port, const std::string& log) {
  auto args = test::node_args(topic, 4, ns, "convs:");
  args.insert(args.begin(), "run");
  test::set_option(args, "http.listen", "127.0.0.1:" + std::to_string(port));
  args.push_back("--projection.ownership=static");
  args.push_back("--projection.partitions=" + parts);
  args.push_back("--projection.node-id=" + node);
  return test::spawn_cli(args, log);
}

} // namespace

// Issue 42: `cluster` beside a node with the default ownership (`all`),
// which writes no ownership table: it says so and exits 0, not "NOT ready
// ... no owner" with exit 6 while the node's /readyz is 200.
TEST(AllOwnership, ClusterSaysThereIsNoTableAndDoesNotReportFailure) {
  auto topic = test::unique_name("all");
  auto ns = test::unique_name("ns");
  test::create_topic(topic, 2);
  auto p = kafka::producer::make(test::kafka_client());
  ASSERT_TRUE(p);
  for (uint64_t i = 0; i < 20; ++i)
    ASSERT_TRUE(p->send(topic, static_cast<int32_t>(i % 2), core::encode_json(test::make_dispatch(i))));
  ASSERT_TRUE(p->flush());
  auto port = test::free_port();
  auto args = test::node_args(topic, 2, ns, "convs:");
  args.insert(args.begin(), "run");
  test::set_option(args, "http.listen", "127.0.0.1:" + std::to_string(port));
  auto log = "/tmp/" + test::unique_name("all-node") + ".log";
  test::node_process node{args, log};
  ASSERT_TRUE(test::readyz_reaches(port, 200, 60s)) << slurp(log);
  auto table_args = test::node_args(topic, 2, ns, "convs:");
  table_args.insert(table_args.begin(), "cluster");
  auto table = test::run_cli(table_args);
  EXPECT_EQ(table.rc, 0) << table.out << table.err;
  EXPECT_NE(table.out.find("projection.ownership = all"), std::string::npos) << table.out;
  EXPECT_EQ(table.out.find("NOT ready"), std::string::npos) << table.out;
  table_args.push_back("--json");
  auto json = test::run_cli(table_args);
  EXPECT_EQ(json.rc, 0) << json.out << json.err;
  EXPECT_NE(json.out.find("\"ownership\": \"all\""), std::string::npos) << json.out;
  EXPECT_EQ(node.stop(), 0) << slurp(log);
}

TEST(StaticNodes, SplitThePartitionsShareOneGateAndAnOverlapIsRefused) {
  auto topic = test::unique_name("stat");
  auto ns = test::unique_name("ns");
  test::create_topic(topic, 4);
  auto p = kafka::producer::make(test::kafka_client());
  ASSERT_TRUE(p);
  auto produce = [&](uint64_t from, uint64_t to) {
    for (uint64_t i = from; i < to; ++i)
      ASSERT_TRUE(p->send(topic, static_cast<int32_t>(i % 4), core::encode_json(test::make_dispatch(i))));
    ASSERT_TRUE(p->flush());
  };
  produce(0, 40);
  auto pa = test::free_port(), pb = test::free_port();
  auto la = "/tmp/" + test::unique_name("static-a") + ".log";
  auto lb = "/tmp/" + test::unique_name("static-b") + ".log";
  auto a = start_static(topic, ns, "node-a", "0-1", pa, la);
  // node-a alone: its partitions caught up, yet its gate stays closed while
  // partitions 2 and 3 have no owner, and /readyz says so.
  auto c = test::redis_conn();
  ASSERT_TRUE(test::eventually([&] {
    return test::redis_cmd(*c, {"HGET", redis::checkpoint_key(ns, topic, 1), "next_offset"})
           == "10";
  })) << slurp(la);
  test::http_reply r;
  ASSERT_TRUE(test::eventually([&] {
    r = test::http_get(pa, "/readyz");
    return r.body.find("\"state\":\"ready\"") != std::string::npos;
  })) << slurp(la);
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_NE(r.body.find("{\"partition\":2,\"why\":\"no owner\"}"), std::string::npos) << r.body;
  EXPECT_EQ(test::http_get(pa, "/v1/users/u1/sessions").status, 503);
  // node-b takes the rest: both gates open.
  auto b = start_static(topic, ns, "node-b", "2-3", pb, lb);
  EXPECT_TRUE(test::readyz_reaches(pa, 200, 60s)) << slurp(la) << slurp(lb);
  EXPECT_TRUE(test::readyz_reaches(pb, 200, 60s)) << slurp(lb);
  EXPECT_EQ(test::http_get(pb, "/v1/users/u1/sessions").status, 200);
  // node-c lists partition 1 too, while node-a (its owner) is alive: node-c
  // refuses at its start (exit 3) naming the partition and node-a, before
  // it claims anything; node-a keeps projecting it.
  auto pc = test::free_port();
  auto lc = "/tmp/" + test::unique_name("static-c") + ".log";
  auto cpid = start_static(topic, ns, "node-c", "1", pc, lc);
  auto rc = test::wait_cli_for(cpid, 60s);
  ASSERT_TRUE(rc) << slurp(lc);
  EXPECT_EQ(*rc, 3) << slurp(lc);
  EXPECT_NE(slurp(lc).find("partition 1: field owner: stored \"node-a (epoch 1, alive)\""),
            std::string::npos)
    << slurp(lc);
  EXPECT_NE(slurp(lc).find("projection.partitions of two nodes"), std::string::npos) << slurp(lc);
  EXPECT_EQ(test::redis_cmd(*c, {"HGET", redis::owner_key(ns, topic, 1), "node"}), "node-a");
  produce(40, 80);
  ASSERT_TRUE(test::eventually([&] {
    return test::redis_cmd(*c, {"HGET", redis::checkpoint_key(ns, topic, 1), "next_offset"})
           == "20";
  })) << slurp(la);
  EXPECT_TRUE(test::readyz_reaches(pa, 200, 30s)) << slurp(la);
  for (auto pid : {a, b}) {
    ::kill(pid, SIGTERM);
    EXPECT_EQ(test::wait_cli(pid), 0);
  }
}
