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
//
// A log that ends in transaction markers has no record at its end: the
// checkpoint there takes librdkafka's position epoch, which must be the
// leader epoch, not -1 (that would switch the truncation check off at the
// next start without a word).
#include <gtest/gtest.h>

#include "caf/all.hpp"

#include "kafka/admin.hpp"
#include "kafka/dispatch_log_consumer.hpp"
#include "kafka/producer.hpp"
#include "qsession/projection.hpp"
#include "qsession/projection/projection.hpp"
#include "redis/stores.hpp"
#include "tests/support/integration.hpp"

using namespace qsp;
using namespace std::chrono_literals;

namespace {

struct host_config : caf::actor_system_config {
  host_config() { register_types(*this); }
};

/// Writes, in one transaction on partition 0, `n` records for "kept"
/// (`commit`) or "aborted-user", ends it, and waits (bounded) until the log
/// ends `n + 1` further on (the marker lands asynchronously); the new end.
int64_t transaction(kafka::producer& prod, const std::string& topic, int64_t end, int n,
                    bool commit, test::model& committed) {
  EXPECT_TRUE(prod.begin());
  for (int i = 0; i < n; ++i) {
    core::dispatch d{"c-tail-" + std::to_string(end + i), 1733150000000 + end + i,
                     {commit ? "kept" : "aborted-user"}};
    EXPECT_TRUE(prod.send(topic, 0, core::encode_json(d)));
    if (commit)
      test::apply(committed, d);
  }
  // Flushed first: an abort would purge records never sent, and the test
  // wants the aborted records on the log.
  EXPECT_TRUE(prod.flush());
  EXPECT_TRUE(commit ? prod.commit() : prod.abort());
  auto next = end + n + 1;
  auto admin = kafka::admin::make(test::kafka_client());
  EXPECT_TRUE(admin) << describe(admin.error());
  EXPECT_TRUE(test::eventually([&] {
    auto st = (*admin)->inspect(topic);
    return st && st->marks[0].high == next;
  })) << "the marker of the transaction ending at " << next << " did not land";
  return next;
}

/// The leader epoch librdkafka reports on the records of partition 0 (all
/// alike: one broker, no leader change) and on its position at the end of
/// the log, after reading the whole log with a fresh consumer through
/// poll_each (the projection's path) or poll (the audit's).
struct tail_read {
  std::vector<int32_t> record_epochs;
  int64_t passed = -1;
  int32_t end_epoch = -2;     ///< position_epoch(passed)
  int32_t before_end = -2;    ///< position_epoch(passed - 1): not the position
};

tail_read read_to_end(const std::string& topic, int64_t end, bool each) {
  tail_read out;
  kafka::dispatch_log_consumer_config cfg;
  cfg.client = test::kafka_client();
  cfg.group_id = "qsp-test-epoch";
  cfg.topic = topic;
  auto log = kafka::dispatch_log_consumer::make(cfg);
  EXPECT_TRUE(log) << describe(log.error());
  if (!log)
    return out;
  EXPECT_TRUE((*log)->start({{0, 0}}));
  auto reader = (*log)->reader(0);
  EXPECT_NE(reader, nullptr);
  if (!reader)
    return out;
  EXPECT_TRUE(test::eventually([&] {
    if (each) {
      auto ok = reader->poll_each(
        100,
        [&](const log_record_view& r) {
          out.record_epochs.push_back(r.leader_epoch);
          return true;
        },
        out.passed);
      EXPECT_TRUE(ok) << describe(ok.error());
    } else {
      std::vector<log_record> recs;
      auto ok = reader->poll(100, recs, out.passed);
      EXPECT_TRUE(ok) << describe(ok.error());
      for (auto& r : recs)
        out.record_epochs.push_back(r.leader_epoch);
    }
    return out.passed >= end;
  }, 30s)) << "partition EOF at " << end << " not reached; passed " << out.passed;
  out.end_epoch = reader->position_epoch(out.passed);
  out.before_end = reader->position_epoch(out.passed - 1);
  return out;
}

void expect_epoch_at_end(const tail_read& r, int64_t end, size_t records, const char* how) {
  SCOPED_TRACE(how);
  EXPECT_EQ(r.passed, end);
  ASSERT_EQ(r.record_epochs.size(), records);
  auto epoch = r.record_epochs.front();
  EXPECT_GE(epoch, 0) << "the records carry no leader epoch";
  for (auto e : r.record_epochs)
    EXPECT_EQ(e, epoch);
  // Past the trailing marker: the leader epoch still, never "unknown".
  EXPECT_EQ(r.end_epoch, epoch) << "position epoch at the last stable offset " << end
                                << " past a transaction marker";
  EXPECT_EQ(r.before_end, -1) << "an offset that is not the position has no epoch";
}

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

TEST(LeaderEpoch, ThePositionPastTrailingTransactionMarkersHasTheLeaderEpoch) {
  auto topic = test::unique_name("epoch-tx");
  test::create_topic(topic, 1);
  int64_t lso = 0;
  // 5 committed, 4 aborted, 3 committed: ends with a commit marker at 14.
  auto committed = test::write_transactional_log(topic, lso);
  ASSERT_EQ(lso, 15);
  expect_epoch_at_end(read_to_end(topic, lso, true), lso, 8, "commit marker, poll_each");
  expect_epoch_at_end(read_to_end(topic, lso, false), lso, 8, "commit marker, poll");
  // Now an aborted transaction at the end: past aborted records and the
  // abort marker, no record since the committed ones.
  auto prod = kafka::producer::make(test::kafka_client(), topic + "-tail");
  ASSERT_TRUE(prod) << describe(prod.error());
  auto end = transaction(*prod, topic, lso, 3, false, committed);
  ASSERT_EQ(end, 19);
  expect_epoch_at_end(read_to_end(topic, end, true), end, 8, "abort marker, poll_each");
  auto admin = kafka::admin::make(test::kafka_client());
  (*admin)->delete_topic(topic);
}

TEST(LeaderEpoch, AProjectionOverATransactionalTailStoresTheLeaderEpochAtTheLso) {
  auto topic = test::unique_name("epoch-tail");
  auto ns = test::unique_name("ns");
  auto convs = test::unique_name("convs") + ":";
  test::create_topic(topic, 1);
  int64_t lso = 0;
  auto committed = test::write_transactional_log(topic, lso); // ends with a commit marker
  auto epoch = read_to_end(topic, lso, true).record_epochs.at(0);
  ASSERT_GE(epoch, 0);
  auto redis = test::redis_conn();
  auto cp_key = redis::checkpoint_key(ns, topic, 0);
  auto side = redis::epoch_key(ns, topic, 0);
  auto stored = [&](const char* field) { return hget(*redis, side, field); };
  auto at = [&](int64_t next) {
    return hget(*redis, cp_key, "next_offset") == std::to_string(next);
  };

  host_config cfg;
  caf::actor_system sys{cfg};
  auto proj = spawn_projection(sys, test::projection_settings_for(topic, 1, ns, convs));
  ASSERT_TRUE(proj) << describe(proj.error());
  auto ready = [&] {
    caf::scoped_actor self{sys};
    bool r = false;
    qsp::mail(self, atom::status_v).request(*proj, 5s)
      .receive([&](const projection_status& st) { r = st.ready; }, [](caf::error&) {});
    return r;
  };
  // Catch-up to H0 = the LSO, past the commit marker.
  ASSERT_TRUE(test::eventually(ready, 60s)) << "the projection never became ready";
  ASSERT_TRUE(test::eventually([&] { return at(lso); }, 30s))
    << "checkpoint " << hget(*redis, cp_key, "next_offset") << ", want " << lso;
  EXPECT_EQ(stored("next_offset"), std::to_string(lso));
  EXPECT_EQ(stored("leader_epoch"), std::to_string(epoch))
    << "the checkpoint at the LSO past a commit marker lost its leader epoch";

  // Live: a committed transaction, then an aborted one, so the log ends in
  // aborted records and an abort marker.
  auto prod = kafka::producer::make(test::kafka_client(), topic + "-live");
  ASSERT_TRUE(prod) << describe(prod.error());
  auto end = transaction(*prod, topic, lso, 3, true, committed);
  end = transaction(*prod, topic, end, 2, false, committed);
  ASSERT_TRUE(test::eventually([&] { return at(end); }, 30s))
    << "checkpoint " << hget(*redis, cp_key, "next_offset") << ", want " << end;
  EXPECT_EQ(stored("next_offset"), std::to_string(end));
  EXPECT_EQ(stored("leader_epoch"), std::to_string(epoch))
    << "the checkpoint at the LSO past an abort marker lost its leader epoch";
  EXPECT_EQ(test::diff_with_redis(committed, convs), std::vector<std::string>{});
  EXPECT_TRUE(test::zset(*redis, convs + "aborted-user").empty());

  caf::scoped_actor self{sys};
  qsp::mail(self, atom::shutdown_v).request(*proj, 30s).receive([](caf::ok_atom) {}, [](caf::error&) {});
  auto admin = kafka::admin::make(test::kafka_client());
  (*admin)->delete_topic(topic);
}
