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
    ASSERT_TRUE(p->send(topic, static_cast<int32_t>(i % 4),
                           core::encode_json(test::make_dispatch(i))));
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
}
