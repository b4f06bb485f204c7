// Seed gates 2, 3, 4 and 5 end to end through `verify` (and `catch-up` to
// produce real checkpoints), against the real broker and Redis.
#include <thread>

#include <regex>

#include <gtest/gtest.h>

#include "kafka/admin.hpp"
#include "kafka/producer.hpp"
#include "messages/types.hpp"
#include "redis/stores.hpp"
#include "tests/support/integration.hpp"

using namespace qsp;

namespace {

struct fixture : ::testing::Test {
  std::string topic = test::unique_name("verify");
  std::string ns = test::unique_name("ns");
  std::string convs = test::unique_name("convs") + ":";
  std::unique_ptr<kafka::admin> admin;
  std::unique_ptr<redis::connection> redis = test::redis_conn();

  void SetUp() override {
    auto a = kafka::admin::make(test::kafka_client());
    ASSERT_TRUE(a) << describe(a.error());
    admin = std::move(*a);
  }
  void TearDown() override { admin->delete_topic(topic); }

  void produce(int partitions, int per_partition, uint64_t first = 0) {
    auto p = kafka::producer::make(test::kafka_client());
    ASSERT_TRUE(p) << describe(p.error());
    uint64_t i = first;
    for (int n = 0; n < per_partition; ++n)
      for (int part = 0; part < partitions; ++part)
        ASSERT_TRUE(p->send(topic, part, core::encode_json(test::make_dispatch(i++))));
    ASSERT_TRUE(p->flush());
  }

  test::cli_result cli(const std::string& cmd, int partitions) {
    auto args = test::node_args(topic, partitions, ns, convs);
    args.insert(args.begin(), cmd);
    return test::run_cli(args);
  }

  std::string checkpoint_key(int p) { return redis::checkpoint_key(ns, topic, p); }
  std::string meta_key() { return redis::meta_key(ns); }
  void hset(const std::string& key, const std::string& field, const std::string& value) {
    test::redis_cmd(*redis, {"HSET", key, field, value});
  }
};

} // namespace

TEST_F(fixture, Gate3NoCheckpointAndLowZeroBootstrapsFromZero) {
  test::create_topic(topic, 2);
  produce(2, 5);
  auto r = cli("verify", 2);
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("bootstrap"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("would start"), std::string::npos);
}

TEST_F(fixture, Gate3NoCheckpointAndLowAboveZeroRefuses) {
  test::create_topic(topic, 1);
  produce(1, 10);
  ASSERT_TRUE(admin->delete_records(topic, 0, 4));
  auto r = cli("verify", 1);
  EXPECT_EQ(r.rc, 3) << r.out << r.err;
  EXPECT_NE(r.err.find("partition 0"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("low=4"), std::string::npos) << r.err;
}

TEST_F(fixture, Gate3DeletedCheckpointsWithLowZeroBootstrapAgain) {
  test::create_topic(topic, 1);
  produce(1, 5);
  ASSERT_EQ(cli("catch-up", 1).rc, 0);
  test::redis_cmd(*redis, {"DEL", checkpoint_key(0)});
  auto r = cli("verify", 1);
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("bootstrap"), std::string::npos) << r.out;
}

TEST_F(fixture, Gate2ResumesFromTheCheckpointAndCaughtUpPassesAtOnce) {
  test::create_topic(topic, 2);
  produce(2, 5);
  auto first = cli("catch-up", 2);
  ASSERT_EQ(first.rc, 0) << first.err;
  EXPECT_EQ(test::redis_cmd(*redis, {"HGET", checkpoint_key(0), "next_offset"}), "5");
  // More records on partition 0 only; partition 1 stays caught up.
  auto p = kafka::producer::make(test::kafka_client());
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(p->send(topic, 0, core::encode_json(test::make_dispatch(100 + i))));
  ASSERT_TRUE(p->flush());
  auto r = cli("verify", 2);
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("resume"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("caught_up"), std::string::npos) << r.out;
  auto again = cli("catch-up", 2);
  ASSERT_EQ(again.rc, 0) << again.err;
  EXPECT_EQ(test::redis_cmd(*redis, {"HGET", checkpoint_key(0), "next_offset"}), "8");
  EXPECT_EQ(test::redis_cmd(*redis, {"HGET", checkpoint_key(1), "next_offset"}), "5");
}

// Issue 42: one checkpoint's topic_id damaged while meta and the broker
// agree.  verify refuses naming a damaged checkpoint (not a recreated
// topic) and shows the stored next_offset of that partition, as inspect
// does, not "-"; the documented way out (delete that checkpoint key and its
// epoch sidecar, low being 0) replays that partition from 0 and nothing is
// lost.
TEST_F(fixture, ADamagedCheckpointIsToldApartFromARecreatedTopic) {
  test::create_topic(topic, 2);
  produce(2, 5);
  ASSERT_EQ(cli("catch-up", 2).rc, 0);
  hset(checkpoint_key(1), "topic_id", "Q1b4AAAAAAAAAAAAAAAAAA");
  auto r = cli("verify", 2);
  EXPECT_EQ(r.rc, 3) << r.out << r.err;
  EXPECT_NE(r.err.find("partition 1: field topic_id"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the checkpoint is damaged"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("deleted and recreated"), std::string::npos) << r.err;
  std::regex row{R"(\n1 +0 +5 +5 +\S+ +- +refuse)"};
  EXPECT_TRUE(std::regex_search(r.out, row)) << "partition 1's row shows its stored 5:\n" << r.out;
  // The runbook's way out.
  test::redis_cmd(*redis, {"DEL", checkpoint_key(1), redis::epoch_key(ns, topic, 1)});
  r = cli("verify", 2);
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("bootstrap"), std::string::npos) << r.out;
  EXPECT_EQ(cli("catch-up", 2).rc, 0);
  EXPECT_EQ(test::redis_cmd(*redis, {"HGET", checkpoint_key(1), "next_offset"}), "5");
  EXPECT_EQ(cli("audit", 2).rc, 0);
}

TEST_F(fixture, Gate4EveryMismatchRefusesAndNothingIsReset) {
  test::create_topic(topic, 2);
  produce(2, 4);
  ASSERT_EQ(cli("catch-up", 2).rc, 0);
  auto snapshot = [&] {
    return test::redis_cmd(*redis, {"HGET", checkpoint_key(0), "next_offset"}) + "/"
           + test::redis_cmd(*redis, {"HGET", checkpoint_key(1), "next_offset"});
  };
  auto before = snapshot();
  struct edit {
    std::string name, key_kind, field, value, expect;
  };
  std::vector<edit> edits{
    {"checkpoint above high", "cp", "next_offset", "99", "next_offset"},
    {"corrupt next_offset", "cp", "next_offset", "04", "next_offset"},
    {"non-numeric next_offset", "cp", "next_offset", "abc", "next_offset"},
    {"format version newer", "cp", "format_version", "2", "format_version"},
    {"format version older", "meta", "format_version", "0", "format_version"},
    {"topic id differs", "meta", "topic_id", "AAAAAAAAAAAAAAAAAAAAAQ", "topic_id"},
    {"cluster id differs", "cp", "cluster_id", "another-cluster", "cluster_id"},
    {"topic name differs", "meta", "dispatch_topic", "other-topic", "dispatch_topic"},
    {"partition count differs", "meta", "partition_count", "3", "partition_count"},
    {"partition field disagrees", "cp", "partition", "1", "partition"},
  };
  for (auto& e : edits) {
    auto key = e.key_kind == "cp" ? checkpoint_key(0) : meta_key();
    auto old = test::redis_cmd(*redis, {"HGET", key, e.field});
    hset(key, e.field, e.value);
    auto r = cli("verify", 2);
    EXPECT_EQ(r.rc, 3) << e.name << "\n" << r.out << r.err;
    EXPECT_NE(r.err.find(e.expect), std::string::npos) << e.name << "\n" << r.err;
    // run refuses too, and never rewrites the stored state.
    auto run = cli("catch-up", 2);
    EXPECT_EQ(run.rc, 3) << e.name << "\n" << run.err;
    EXPECT_EQ(test::redis_cmd(*redis, {"HGET", key, e.field}), e.value) << e.name;
    hset(key, e.field, old);
  }
  EXPECT_EQ(snapshot(), before);

  // Missing field.
  test::redis_cmd(*redis, {"HDEL", checkpoint_key(1), "topic_id"});
  auto r = cli("verify", 2);
  EXPECT_EQ(r.rc, 3);
  EXPECT_NE(r.err.find("topic_id"), std::string::npos) << r.err;
  hset(checkpoint_key(1), "topic_id", test::redis_cmd(*redis, {"HGET", meta_key(), "topic_id"}));

  // Configured partition count differs from the broker's.
  r = cli("verify", 3);
  EXPECT_EQ(r.rc, 3);
  EXPECT_NE(r.err.find("partition_count"), std::string::npos) << r.err;

  // A checkpoint key for a partition beyond the count; meta missing.
  hset(redis::checkpoint_prefix(ns, topic) + "5", "next_offset", "0");
  r = cli("verify", 2);
  EXPECT_EQ(r.rc, 3);
  test::redis_cmd(*redis, {"DEL", redis::checkpoint_prefix(ns, topic) + "5"});
  test::redis_cmd(*redis, {"RENAME", meta_key(), meta_key() + "-moved"});
  r = cli("verify", 2);
  EXPECT_EQ(r.rc, 3);
  EXPECT_NE(r.err.find("meta"), std::string::npos) << r.err;
  test::redis_cmd(*redis, {"RENAME", meta_key() + "-moved", meta_key()});

  // Checkpoint below low: retention deleted records the projection never saw.
  hset(checkpoint_key(0), "next_offset", "1");
  ASSERT_TRUE(admin->delete_records(topic, 0, 3));
  r = cli("verify", 2);
  EXPECT_EQ(r.rc, 3);
  EXPECT_NE(r.err.find("low=3"), std::string::npos) << r.err;
  EXPECT_EQ(test::redis_cmd(*redis, {"HGET", checkpoint_key(0), "next_offset"}), "1");
}

TEST_F(fixture, Gate5RecreatedTopicWithTheSameNameIsRefusedByTopicId) {
  test::create_topic(topic, 1);
  produce(1, 3);
  ASSERT_EQ(cli("catch-up", 1).rc, 0);
  ASSERT_EQ(test::redis_cmd(*redis, {"HGET", checkpoint_key(0), "next_offset"}), "3");
  ASSERT_TRUE(admin->delete_topic(topic));
  bool created = false;
  for (int i = 0; i < 100 && !created; ++i) {
    created = static_cast<bool>(admin->create_topic(topic, 1));
    if (!created)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(created);
  // Enough records that the old checkpoint lies inside the new [low, high].
  for (int i = 0; i < 100; ++i) {
    auto st = admin->identity(topic);
    if (st && st->partition_count == 1)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  produce(1, 10);
  auto st = admin->inspect(topic);
  ASSERT_TRUE(st);
  ASSERT_GT(st->marks[0].high, 3);
  ASSERT_EQ(st->marks[0].low, 0);
  auto r = cli("verify", 1);
  EXPECT_EQ(r.rc, 3) << r.out << r.err;
  EXPECT_NE(r.err.find("topic_id"), std::string::npos) << r.err;
  EXPECT_EQ(cli("catch-up", 1).rc, 3);
  EXPECT_EQ(test::redis_cmd(*redis, {"HGET", checkpoint_key(0), "next_offset"}), "3");
}
