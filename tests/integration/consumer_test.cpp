// The reusable dispatch-log consumer against the real broker: explicit
// starts, the [low, high] readiness check, per-partition order, and progress
// past transaction markers from the partition-EOF offset; client-level errors
// (unreachable brokers) counted, not final.
#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "adapters/real_ports.hpp"
#include "kafka/admin.hpp"
#include "kafka/dispatch_log_consumer.hpp"
#include "kafka/producer.hpp"
#include "messages/types.hpp"
#include "tests/support/integration.hpp"

using namespace qsp;
using namespace std::chrono_literals;

namespace {

kafka::dispatch_log_consumer_config consumer_config(const std::string& topic) {
  kafka::dispatch_log_consumer_config cfg;
  cfg.client = test::kafka_client();
  cfg.group_id = "qsp-test-consumer";
  cfg.topic = topic;
  return cfg;
}

} // namespace

TEST(DispatchLogConsumer, ReadersGetEveryRecordEvenWhenCreatedLongAfterAssign) {
  auto topic = test::unique_name("consumer");
  test::create_topic(topic, 3);
  auto prod = kafka::producer::make(test::kafka_client());
  for (int i = 0; i < 300; ++i)
    ASSERT_TRUE(prod->send(topic, i % 3, core::encode_json(test::make_dispatch(i))));
  ASSERT_TRUE(prod->flush());
  auto log = kafka::dispatch_log_consumer::make(consumer_config(topic));
  ASSERT_TRUE(log) << describe(log.error());
  ASSERT_TRUE((*log)->start({{0, 0}, {1, 10}, {2, 100}}));
  // Give librdkafka ample time to fetch before any reader exists (the node
  // creates readers after the identity re-check).  Records fetched in the
  // meantime must still reach their partition's reader.
  std::this_thread::sleep_for(1500ms);
  std::map<int32_t, std::shared_ptr<partition_reader>> readers;
  for (int32_t p = 0; p < 3; ++p) {
    readers[p] = (*log)->reader(p);
    ASSERT_NE(readers[p], nullptr);
  }
  std::map<int32_t, std::vector<int64_t>> offsets;
  std::map<int32_t, int64_t> passed{{0, -1}, {1, -1}, {2, -1}};
  ASSERT_TRUE(test::eventually([&] {
    for (auto& [p, r] : readers) {
      std::vector<log_record> out;
      auto ok = r->poll(100, out, passed[p]);
      EXPECT_TRUE(ok) << describe(ok.error());
      for (auto& rec : out)
        offsets[p].push_back(rec.offset);
    }
    return passed[0] == 100 && passed[1] == 100 && passed[2] == 100;
  }, 30s));
  // In order, from the explicit start, nothing missing, nothing twice.
  std::map<int32_t, int64_t> first{{0, 0}, {1, 10}, {2, 100}};
  for (auto& [p, offs] : offsets) {
    ASSERT_EQ(static_cast<int64_t>(offs.size()), 100 - first[p]) << "partition " << p;
    for (size_t i = 0; i < offs.size(); ++i)
      EXPECT_EQ(offs[i], first[p] + static_cast<int64_t>(i));
  }
  auto admin = kafka::admin::make(test::kafka_client());
  (*admin)->delete_topic(topic);
}

TEST(DispatchLogConsumer, TheReaderWakesItsOwnerWhenRecordsArrive) {
  // The node's consumers sleep on an idle timer; the data callback lets a
  // record appended to an idle partition be read at once.
  auto topic = test::unique_name("consumer-wake");
  test::create_topic(topic, 1);
  auto log = kafka::dispatch_log_consumer::make(consumer_config(topic));
  ASSERT_TRUE(log) << describe(log.error());
  ASSERT_TRUE((*log)->start({{0, 0}}));
  auto reader = (*log)->reader(0);
  ASSERT_NE(reader, nullptr);
  std::mutex mtx;
  std::condition_variable cv;
  int wakes = 0;
  reader->on_data([&] {
    std::lock_guard<std::mutex> g{mtx};
    ++wakes;
    cv.notify_all();
  });
  // Drain to the partition EOF: the queue is empty and idle now.
  int64_t passed = -1;
  std::vector<log_record> out;
  ASSERT_TRUE(test::eventually([&] {
    EXPECT_TRUE(reader->poll(100, out, passed));
    return passed == 0;
  }, 30s));
  {
    std::lock_guard<std::mutex> g{mtx};
    wakes = 0;
  }
  auto prod = kafka::producer::make(test::kafka_client());
  ASSERT_TRUE(prod->send(topic, 0, core::encode_json(test::make_dispatch(7))));
  ASSERT_TRUE(prod->flush());
  {
    std::unique_lock<std::mutex> g{mtx};
    ASSERT_TRUE(cv.wait_for(g, 30s, [&] { return wakes > 0; })) << "no wake-up within 30 s";
  }
  out.clear();
  ASSERT_TRUE(reader->poll(100, out, passed));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].offset, 0);
  reader.reset(); // unregisters the callback before `wakes` goes out of scope
  auto admin = kafka::admin::make(test::kafka_client());
  (*admin)->delete_topic(topic);
}

TEST(DispatchLogConsumer, RefusesAStartOutsideTheRetainedRange) {
  auto topic = test::unique_name("consumer-range");
  test::create_topic(topic, 1);
  auto prod = kafka::producer::make(test::kafka_client());
  for (int i = 0; i < 5; ++i)
    ASSERT_TRUE(prod->send(topic, 0, core::encode_json(test::make_dispatch(i))));
  ASSERT_TRUE(prod->flush());
  auto log = kafka::dispatch_log_consumer::make(consumer_config(topic));
  auto r = (*log)->start({{0, 6}});
  ASSERT_FALSE(r);
  EXPECT_TRUE(is_refusal(r.error()));
  EXPECT_NE(describe(r.error()).find("high=5"), std::string::npos) << describe(r.error());
  auto admin = kafka::admin::make(test::kafka_client());
  (*admin)->delete_topic(topic);
}

TEST(DispatchLogConsumer, EofPositionPassesTrailingCommitMarkers) {
  auto topic = test::unique_name("consumer-eof");
  test::create_topic(topic, 1);
  auto prod = kafka::producer::make(test::kafka_client(), topic + "-tx");
  ASSERT_TRUE(prod->begin());
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(prod->send(topic, 0, core::encode_json(test::make_dispatch(i))));
  ASSERT_TRUE(prod->commit());
  auto admin = kafka::admin::make(test::kafka_client());
  ASSERT_TRUE(test::eventually([&] {
    auto st = (*admin)->inspect(topic);
    return st && st->marks[0].high == 4;
  }));
  auto log = kafka::dispatch_log_consumer::make(consumer_config(topic));
  ASSERT_TRUE((*log)->start({{0, 0}}));
  auto reader = (*log)->reader(0);
  int64_t passed = -1, last = -1;
  ASSERT_TRUE(test::eventually([&] {
    std::vector<log_record> out;
    EXPECT_TRUE(reader->poll(100, out, passed));
    for (auto& rec : out)
      last = rec.offset;
    return passed >= 4;
  }, 30s));
  EXPECT_EQ(last, 2);   // the last data record
  EXPECT_EQ(passed, 4); // past the commit marker at 3
  (*admin)->delete_topic(topic);
}

TEST(DispatchLogConsumer, UnreachableBrokersAreCountedAndNotFinal) {
  auto cfg = consumer_config(test::unique_name("unreachable"));
  cfg.client.bootstrap_servers = "127.0.0.1:" + std::to_string(test::free_port());
  cfg.client.timeout_ms = 500;
  std::mutex mtx;
  std::vector<std::string> names;
  cfg.on_client_error = [&](const std::string& name) {
    std::lock_guard<std::mutex> guard{mtx};
    names.push_back(name);
  };
  auto stats = std::make_shared<metrics>();
  auto ps = test::projection_settings_for(cfg.topic, 1, "ns", "convs:");
  ps.kafka.bootstrap_servers = cfg.client.bootstrap_servers;
  ps.kafka.timeout = std::chrono::milliseconds(cfg.client.timeout_ms);
  real_ports_options ro;
  ro.stats = stats;
  ro.on_client_error = cfg.on_client_error;
  auto ports = make_real_ports(ps, ro);
  auto log = ports->make_dispatch_log();
  ASSERT_TRUE(log) << describe(log.error());
  auto* consumer = dynamic_cast<kafka::dispatch_log_consumer*>(log->get());
  ASSERT_NE(consumer, nullptr);
  caf::error failure;
  bool counted = test::eventually(
    [&] {
      if (auto err = consumer->poll_events(); err && !failure)
        failure = err;
      return stats->kafka_client_errors.load() >= 2;
    },
    20s);
  EXPECT_FALSE(failure) << describe(failure);
  EXPECT_TRUE(counted);
  std::lock_guard<std::mutex> guard{mtx};
  // The host's own callback still sees every error the metric counts.
  EXPECT_GE(names.size(), 2u);
  bool transport = false;
  for (auto& n : names)
    transport |= n == "_TRANSPORT" || n == "_ALL_BROKERS_DOWN" || n == "_RESOLVE";
  EXPECT_TRUE(transport) << (names.empty() ? std::string{"none"} : names.front());
}

// Kafka calls are interruptible (issue 25): start() against a broker that
// never answers returns ec::shutting_down at once when interrupted, long
// before kafka.timeout-ms, and so does every later start().
TEST(DispatchLogConsumer, InterruptEndsAStartWaitingOnABlackHoledBroker) {
  test::black_hole hole;
  auto cfg = consumer_config(test::unique_name("consumer-hole"));
  cfg.client.bootstrap_servers = hole.address();
  cfg.client.timeout_ms = 30000;
  auto made = kafka::dispatch_log_consumer::make(cfg);
  ASSERT_TRUE(made) << describe(made.error());
  auto log = *made;
  std::atomic<bool> entered{false};
  std::promise<caf::expected<void>> result;
  auto done = result.get_future();
  std::thread caller([&] {
    entered = true;
    result.set_value(log->start({{0, 0}, {1, 0}}));
  });
  ASSERT_TRUE(test::eventually([&] { return entered.load() && hole.accepted() > 0; }, 10s));
  // Blocked in the broker call: the black hole never answers.
  ASSERT_EQ(done.wait_for(500ms), std::future_status::timeout) << "start() returned";
  auto before = std::chrono::steady_clock::now();
  log->interrupt();
  auto status = done.wait_for(5s);
  auto took = std::chrono::steady_clock::now() - before;
  // Without the interrupt it returns after kafka.timeout-ms (bounded).
  caller.join();
  ASSERT_EQ(status, std::future_status::ready) << "start() still waited 5 s after interrupt()";
  auto r = done.get();
  ASSERT_FALSE(r);
  EXPECT_EQ(static_cast<ec>(r.error().code()), ec::shutting_down) << describe(r.error());
  EXPECT_LT(took, 1s);
  // Every later call returns at once.
  before = std::chrono::steady_clock::now();
  auto again = log->start({{2, 0}});
  ASSERT_FALSE(again);
  EXPECT_EQ(static_cast<ec>(again.error().code()), ec::shutting_down) << describe(again.error());
  EXPECT_LT(std::chrono::steady_clock::now() - before, 1s);
}
