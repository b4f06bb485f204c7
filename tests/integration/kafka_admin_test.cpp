// The broker inspector against a real KRaft broker: KIP-516 topic ids,
// cluster id, partition count, retention.ms, watermarks.
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
  auto st = (*admin)->inspect(topic);
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

TEST(KafkaAdmin, MissingTopicIsARefusalNotAnOutage) {
  auto admin = kafka::admin::make(test::kafka_client());
  auto st = (*admin)->inspect(test::unique_name("absent"));
  ASSERT_FALSE(st);
  EXPECT_TRUE(is_refusal(st.error())) << describe(st.error());
}
