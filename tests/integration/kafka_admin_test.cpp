// The broker inspector against a real KRaft broker: KIP-516 topic ids,
// cluster id, partition count, retention.ms, cleanup.policy, watermarks.
#include <thread>

#include <gtest/gtest.h>

#include "core/checkpoint.hpp"
#include "kafka/admin.hpp"
#include "kafka/producer.hpp"
#include "messages/types.hpp"
#include "tests/support/integration.hpp"

using namespace qsp;

TEST(KafkaAdmin, DescribesTopicIdentityAndRecreationChangesTopicId) {
  auto topic = test::unique_name("admin");
  test::create_topic(topic, 3);
  auto admin = kafka::admin::make(test::kafka_client());
  ASSERT_TRUE(admin) << describe(admin.error());
  // A new topic's leaders may not have reached the broker's metadata yet
  // (NOT_LEADER_FOR_PARTITION, transient): bounded retries.
  auto st = (*admin)->inspect(topic);
  for (int i = 0; i < 100 && !st; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    st = (*admin)->inspect(topic);
  }
  ASSERT_TRUE(st) << describe(st.error());
  EXPECT_FALSE(st->cluster_id.empty());
  EXPECT_TRUE(core::is_valid_topic_id_text(st->topic_id)) << st->topic_id;
  EXPECT_EQ(st->partition_count, 3);
  EXPECT_GT(st->retention_ms, 0);
  ASSERT_EQ(st->marks.size(), 3u);
  for (auto& m : st->marks) {
    EXPECT_EQ(m.low, 0);
    EXPECT_EQ(m.high, 0);
  }
  auto first_id = st->topic_id;

  ASSERT_TRUE((*admin)->delete_topic(topic));
  // Recreation may race the deletion's propagation: retry create, bounded.
  bool created = false;
  for (int i = 0; i < 100 && !created; ++i) {
    created = static_cast<bool>((*admin)->create_topic(topic, 3));
    if (!created)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(created);
  std::string second_id;
  for (int i = 0; i < 100; ++i) {
    auto again = (*admin)->identity(topic);
    if (again && again->partition_count == 3 && again->topic_id != first_id) {
      second_id = again->topic_id;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(core::is_valid_topic_id_text(second_id)) << second_id;
  EXPECT_NE(second_id, first_id);
  (*admin)->delete_topic(topic);
}

TEST(KafkaAdmin, WatermarksUnderReadCommittedStopAtTheLastStableOffset) {
  auto topic = test::unique_name("lso");
  test::create_topic(topic, 1);
  auto prod = kafka::producer::make(test::kafka_client(), topic + "-tx");
  ASSERT_TRUE(prod) << describe(prod.error());
  ASSERT_TRUE(prod->begin());
  ASSERT_TRUE(prod->send(topic, 0, core::encode_json(test::make_dispatch(1))));
  ASSERT_TRUE(prod->flush());
  // Transaction still open: the LSO stays at 0 while the high watermark moved.
  auto admin = kafka::admin::make(test::kafka_client());
  auto st = (*admin)->inspect(topic);
  ASSERT_TRUE(st) << describe(st.error());
  EXPECT_EQ(st->marks[0].high, 0);
  EXPECT_EQ(st->true_high[0], 1);
  ASSERT_TRUE(prod->commit());
  // The coordinator writes the commit marker asynchronously after commit
  // returns: wait (bounded) until the LSO moves past it.
  for (int i = 0; i < 100; ++i) {
    st = (*admin)->inspect(topic);
    ASSERT_TRUE(st);
    if (st->marks[0].high == 2)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(st->marks[0].high, 2); // data record + commit marker
  EXPECT_EQ(st->true_high[0], 2);
  (*admin)->delete_topic(topic);
}

TEST(KafkaAdmin, MissingTopicIsTransientNotARefusal) {
  // A topic that does not exist yet (or whose metadata is still propagating
  // after creation) may appear: the caller retries.
  auto admin = kafka::admin::make(test::kafka_client());
  ASSERT_TRUE(admin) << describe(admin.error());
  auto name = test::unique_name("absent");
  for (auto st : {(*admin)->identity(name), (*admin)->inspect(name)}) {
    ASSERT_FALSE(st);
    EXPECT_EQ(st.error().code(), static_cast<uint8_t>(ec::kafka_unavailable)) << describe(st.error());
    EXPECT_FALSE(is_refusal(st.error()));
    EXPECT_NE(describe(st.error()).find("topic " + name + " does not exist on the broker"),
              std::string::npos)
      << describe(st.error());
  }
}

TEST(KafkaAdmin, IdentityAsksTheBrokerForTheClusterId) {
  auto topic = test::unique_name("ident");
  test::create_topic(topic, 2);
  auto admin = kafka::admin::make(test::kafka_client());
  auto cid = (*admin)->cluster_id(); // the client's (cached) view
  ASSERT_TRUE(cid) << describe(cid.error());
  auto st = (*admin)->identity(topic);
  ASSERT_TRUE(st) << describe(st.error());
  EXPECT_EQ(st->cluster_id, *cid);
  EXPECT_EQ(st->partition_count, 2);
  EXPECT_TRUE(core::is_valid_topic_id_text(st->topic_id)) << st->topic_id;
  (*admin)->delete_topic(topic);
}

TEST(KafkaAdmin, ReadsTheCleanupPolicyWithRetention) {
  auto admin = kafka::admin::make(test::kafka_client());
  ASSERT_TRUE(admin) << describe(admin.error());
  auto plain = test::unique_name("delete");
  test::create_topic(plain, 1);
  auto compacted = test::unique_name("compact");
  ASSERT_TRUE((*admin)->create_topic(compacted, 1, {{"cleanup.policy", "compact"},
                                                    {"retention.ms", "3600000"}}));
  auto st = (*admin)->inspect(plain);
  ASSERT_TRUE(st) << describe(st.error());
  EXPECT_EQ(st->cleanup_policy, "delete");
  EXPECT_GT(st->retention_ms, 0);
  // The new topic's metadata may take a moment to reach every broker view.
  caf::expected<broker_state> cst = caf::make_error(ec::kafka_unavailable, "not asked yet");
  for (int i = 0; i < 100; ++i) {
    cst = (*admin)->inspect(compacted);
    if (cst)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(cst) << describe(cst.error());
  EXPECT_EQ(cst->cleanup_policy, "compact");
  EXPECT_EQ(cst->retention_ms, 3600000);
  (*admin)->delete_topic(plain);
  (*admin)->delete_topic(compacted);
}

TEST(KafkaAdmin, DestroyingHandlesNeverBlocksTheCaller) {
  // A client of an unreachable broker: rd_kafka_destroy may wait for its
  // threads; the deleter hands it to the reaper instead.
  auto cfg = test::kafka_client();
  cfg.bootstrap_servers = "127.0.0.1:1";
  cfg.timeout_ms = 500;
  std::vector<std::unique_ptr<kafka::admin>> admins;
  for (int i = 0; i < 3; ++i) {
    auto a = kafka::admin::make(cfg);
    ASSERT_TRUE(a) << describe(a.error());
    if (i == 0)
      (void) (*a)->identity("t"); // some traffic towards the dead address
    admins.push_back(std::move(*a));
  }
  auto t0 = std::chrono::steady_clock::now();
  admins.clear();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(200));
  kafka::drain_reaper(); // every handle destroyed, bounded
}

TEST(KafkaClient, AnInvalidPropertyCombinationIsAConfigurationError) {
  auto cfg = test::kafka_client();
  cfg.properties.emplace_back("security.protocol", "ssl");
  cfg.properties.emplace_back("ssl.ca.location", "/nonexistent/qsp-ca.pem");
  auto a = kafka::admin::make(cfg);
  ASSERT_FALSE(a);
  EXPECT_EQ(a.error().code(), static_cast<uint8_t>(ec::invalid_config)) << describe(a.error());
  EXPECT_NE(describe(a.error()).find("ssl.ca.location"), std::string::npos) << describe(a.error());
}

// The developer tool creates topics the way the HA tests and operators need:
// a replication factor and topic configs; a bad value is a usage error and
// a replication factor the cluster cannot meet is the broker's clear refusal.
TEST(KafkaAdmin, DevtoolCreatesTopicsWithReplicationFactorAndConfigs) {
  auto devtool = std::string{QSP_BIN_DIR} + "/qsp-devtool";
  auto topic = test::unique_name("devtool");
  auto r = test::run_program(devtool, {"create-topic", test::env().kafka_bootstrap, topic, "2",
                                       "--replication-factor=1", "--config=retention.ms=7200000",
                                       "--config=cleanup.policy=delete"});
  ASSERT_EQ(r.rc, 0) << r.err;
  auto admin = kafka::admin::make(test::kafka_client());
  ASSERT_TRUE(admin) << describe(admin.error());
  caf::expected<broker_state> st = caf::make_error(ec::kafka_unavailable, "not asked yet");
  for (int i = 0; i < 100 && !(st = (*admin)->inspect(topic)); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_TRUE(st) << describe(st.error());
  EXPECT_EQ(st->partition_count, 2);
  EXPECT_EQ(st->retention_ms, 7200000);
  EXPECT_EQ(st->cleanup_policy, "delete");
  (*admin)->delete_topic(topic);

  // One broker cannot hold three replicas: the broker's error, named.
  auto three = test::run_program(devtool, {"create-topic", test::env().kafka_bootstrap,
                                           test::unique_name("devtool-rf3"), "1",
                                           "--replication-factor=3"});
  EXPECT_EQ(three.rc, 1) << three.err;
  EXPECT_NE(three.err.find("eplication"), std::string::npos) << three.err;
  for (auto bad : {std::vector<std::string>{"--replication-factor=0"},
                   std::vector<std::string>{"--config=novalue"},
                   std::vector<std::string>{"x"}}) {
    std::vector<std::string> args{"create-topic", test::env().kafka_bootstrap,
                                  test::unique_name("devtool-bad")};
    if (bad[0] != "x")
      args.push_back("1");
    args.insert(args.end(), bad.begin(), bad.end());
    auto b = test::run_program(devtool, args);
    EXPECT_EQ(b.rc, 2) << bad[0] << ": " << b.err;
  }
}
