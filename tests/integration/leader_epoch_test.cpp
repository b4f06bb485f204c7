// KIP-320 against the real broker: every checkpoint carries the partition
// leader epoch of its position (a sidecar key written by the same guarded
// script), and a start whose stored epoch the broker's log no longer backs up
// to the checkpoint (a truncated, then refilled log) is refused instead of
// consuming another history from a reused offset.
//
// One broker cannot truncate a log, so the truncation is stated the way a
// node that had read further under an older leader would have stored it: the
// checkpoint's epoch is set back to the epoch before a leader change, whose
// end offset on the broker lies below the checkpoint.
#include <gtest/gtest.h>

#include "kafka/producer.hpp"
#include "redis/stores.hpp"
#include "tests/support/integration.hpp"

using namespace qsp;

namespace {

std::string hget(redis::connection& c, const std::string& key, const std::string& field) {
  return test::redis_cmd(c, {"HGET", key, field});
}

void produce(const std::string& topic, uint64_t from, uint64_t n) {
  auto prod = kafka::producer::make(test::kafka_client());
  ASSERT_TRUE(prod) << describe(prod.error());
  for (uint64_t i = from; i < from + n; ++i)
    ASSERT_TRUE(prod->send(topic, 0, core::encode_json(test::make_dispatch(i, 20))));
  ASSERT_TRUE(prod->flush());
}

} // namespace

TEST(LeaderEpoch, CheckpointCarriesItsEpochAndAStartTheLogNoLongerBacksIsRefused) {
  auto topic = test::unique_name("epoch");
  auto ns = test::unique_name("ns");
  test::create_topic(topic, 1);
  auto args = test::node_args(topic, 1, ns, ns + "-convs:");
  args.insert(args.begin(), "catch-up");
  auto redis = test::redis_conn();
  auto cp_key = redis::checkpoint_key(ns, topic, 0);
  auto side = redis::epoch_key(ns, topic, 0);

  produce(topic, 0, 100);
  auto r = test::run_cli(args);
  ASSERT_EQ(r.rc, 0) << r.err;
  auto first_end = hget(*redis, cp_key, "next_offset");
  EXPECT_EQ(hget(*redis, side, "next_offset"), first_end);
  auto epoch0 = hget(*redis, side, "leader_epoch");
  ASSERT_FALSE(epoch0.empty());
  ASSERT_GE(std::stoi(epoch0), 0) << "the checkpoint's epoch was not known";

  // A leader change: the broker restarts, the partition gets a new epoch.
  ASSERT_EQ(test::sh(QSP_SOURCE_DIR "/scripts/services restart-kafka >/dev/null 2>&1"), 0);
  produce(topic, 100, 100);
  r = test::run_cli(args);
  ASSERT_EQ(r.rc, 0) << r.err;
  auto end = hget(*redis, cp_key, "next_offset");
  ASSERT_GT(std::stoll(end), std::stoll(first_end));
  auto epoch1 = hget(*redis, side, "leader_epoch");
  ASSERT_GT(std::stoi(epoch1), std::stoi(epoch0)) << "no new leader epoch after the restart";
  EXPECT_EQ(hget(*redis, side, "next_offset"), end);

  // verify shows the stored epoch beside the checkpoint.
  auto v = test::run_cli([&] {
    auto a = args;
    a[0] = "verify";
    return a;
  }());
  EXPECT_EQ(v.rc, 0) << v.err;
  EXPECT_NE(v.out.find(" " + end + " " + std::string(6 - std::min<size_t>(6, epoch1.size()), ' ')
                       + epoch1 + " "),
            std::string::npos)
    << v.out;

  // The checkpoint now claims its position under the old epoch, which ended
  // at first_end on this log: the log does not back it up.
  produce(topic, 200, 50);
  test::redis_cmd(*redis, {"HSET", side, "leader_epoch", epoch0});
  r = test::run_cli(args);
  EXPECT_EQ(r.rc, 3) << r.err;
  std::printf("the refusal:\n%s", r.err.c_str());
  EXPECT_NE(r.err.find("partition 0: field leader_epoch"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("truncat"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("end offset"), std::string::npos) << r.err;
  EXPECT_EQ(hget(*redis, cp_key, "next_offset"), end) << "the checkpoint moved past a truncation";

  // With the true epoch the same start is accepted and catches up.
  test::redis_cmd(*redis, {"HSET", side, "leader_epoch", epoch1});
  r = test::run_cli(args);
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_GT(std::stoll(hget(*redis, cp_key, "next_offset")), std::stoll(end));
}
