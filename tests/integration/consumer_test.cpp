// The reusable dispatch-log consumer against the real broker: explicit
// starts, the [low, high] readiness check, per-partition order, and progress
// past transaction markers from the partition-EOF offset; client-level errors
// (unreachable brokers) counted, not final; partitions added and removed on a
// running consumer; a start() interrupted while the broker never answers.
#include <chrono>
#include <cstdio>
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

namespace {

/// Polls `r` until it has passed `end` (partition EOF), for at most 30 s;
/// the offsets of the records read, in the order read.
std::vector<int64_t> read_to(partition_reader& r, int64_t& passed, int64_t end) {
  std::vector<int64_t> offsets;
  bool reached = test::eventually(
    [&] {
      std::vector<log_record> out;
      auto ok = r.poll(100, out, passed);
      EXPECT_TRUE(ok) << describe(ok.error());
      for (auto& rec : out)
        offsets.push_back(rec.offset);
      return passed >= end;
    },
    30s);
  EXPECT_TRUE(reached) << "passed " << passed << ", expected " << end;
  return offsets;
}

std::vector<int64_t> range(int64_t from, int64_t to) {
  std::vector<int64_t> out;
  for (auto o = from; o < to; ++o)
    out.push_back(o);
  return out;
}

} // namespace

// docs/DESIGN.md §12 (handover): partitions join and leave a running consumer;
// the others keep fetching from where they are.
TEST(DispatchLogConsumer, AddsAndRemovesPartitionsIncrementally) {
  auto topic = test::unique_name("consumer-incr");
  test::create_topic(topic, 3);
  auto prod = kafka::producer::make(test::kafka_client());
  auto append = [&](int32_t p, int n) {
    for (int i = 0; i < n; ++i)
      ASSERT_TRUE(prod->send(topic, p, core::encode_json(test::make_dispatch(p * 1000 + i))));
  };
  for (int32_t p = 0; p < 3; ++p)
    append(p, 20);
  ASSERT_TRUE(prod->flush());
  auto made = kafka::dispatch_log_consumer::make(consumer_config(topic));
  ASSERT_TRUE(made) << describe(made.error());
  auto log = *made;
  ASSERT_TRUE(log->start({{0, 0}, {1, 5}}));
  EXPECT_EQ(log->reader(2), nullptr);
  auto r0 = log->reader(0);
  auto r1 = log->reader(1);
  ASSERT_NE(r0, nullptr);
  ASSERT_NE(r1, nullptr);
  // The first reader of partition 0 asks for wake-ups; it outlives the
  // partition's removal below.
  std::atomic<int> old_wakes{0};
  r0->on_data([&] { ++old_wakes; });
  int64_t passed0 = -1, passed1 = -1, passed2 = -1;
  EXPECT_EQ(read_to(*r0, passed0, 20), range(0, 20));
  EXPECT_EQ(read_to(*r1, passed1, 20), range(5, 20));

  // Added at an explicit start: read from exactly there.  (How long an add
  // takes while the consumer idles at the end of its partitions is printed:
  // its range check waits behind the fetch in flight on the connection.)
  auto add_t0 = std::chrono::steady_clock::now();
  auto added = log->add({{2, 7}});
  std::printf("add() with the consumer idle at the end of its partitions: %lld ms\n",
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                       std::chrono::steady_clock::now() - add_t0)
                                       .count()));
  ASSERT_TRUE(added) << describe(added.error());
  auto r2 = log->reader(2);
  ASSERT_NE(r2, nullptr);
  EXPECT_EQ(read_to(*r2, passed2, 20), range(7, 20));

  // Removed: partition 0 delivers nothing more, 1 and 2 go on.
  ASSERT_TRUE(log->remove({0}));
  EXPECT_EQ(log->reader(0), nullptr);
  EXPECT_EQ(log->log_end(0), -1);
  ASSERT_TRUE(log->remove({0})) << "removing a partition not assigned is ignored";
  for (int32_t p = 0; p < 3; ++p)
    append(p, 5);
  ASSERT_TRUE(prod->flush());
  EXPECT_EQ(read_to(*r1, passed1, 25), range(20, 25));
  EXPECT_EQ(read_to(*r2, passed2, 25), range(20, 25));
  // Partitions 1 and 2 fetched the records produced with partition 0's:
  // had 0 still been fetched, its records would have come by now.
  {
    std::vector<log_record> out;
    int64_t passed = passed0;
    auto ok = r0->poll(100, out, passed);
    ASSERT_TRUE(ok) << describe(ok.error());
    EXPECT_TRUE(out.empty()) << out.size() << " records of removed partition 0, the first at "
                             << out.front().offset;
    EXPECT_EQ(passed, passed0);
  }

  // Added again at a new start: read from exactly there, through the same
  // queue; the old reader's end leaves the new reader's wake-ups alone.
  ASSERT_TRUE(log->add({{0, 12}}));
  auto r0b = log->reader(0);
  ASSERT_NE(r0b, nullptr);
  std::mutex mtx;
  std::condition_variable cv;
  int wakes = 0;
  r0b->on_data([&] {
    std::lock_guard<std::mutex> g{mtx};
    ++wakes;
    cv.notify_all();
  });
  r0.reset();
  passed0 = -1;
  EXPECT_EQ(read_to(*r0b, passed0, 25), range(12, 25));
  {
    std::lock_guard<std::mutex> g{mtx};
    wakes = 0;
  }
  append(0, 1);
  ASSERT_TRUE(prod->flush());
  {
    std::unique_lock<std::mutex> g{mtx};
    EXPECT_TRUE(cv.wait_for(g, 30s, [&] { return wakes > 0; }))
      << "no wake-up of the new reader within 30 s";
  }
  EXPECT_EQ(read_to(*r0b, passed0, 26), range(25, 26));

  // A start outside [low, high] is refused, naming partition and range, and
  // nothing is assigned.
  ASSERT_TRUE(log->remove({2}));
  auto outside = log->add({{2, 26}});
  ASSERT_FALSE(outside);
  EXPECT_TRUE(is_refusal(outside.error()));
  EXPECT_NE(describe(outside.error()).find("partition 2"), std::string::npos)
    << describe(outside.error());
  EXPECT_NE(describe(outside.error()).find("low=0,high=25"), std::string::npos)
    << describe(outside.error());
  EXPECT_EQ(log->reader(2), nullptr);

  // A partition already assigned is an error, and the others are not added.
  auto twice = log->add({{1, 0}, {2, 0}});
  ASSERT_FALSE(twice);
  EXPECT_NE(describe(twice.error()).find("partition 1 is already assigned"), std::string::npos)
    << describe(twice.error());
  EXPECT_EQ(log->reader(2), nullptr);
  EXPECT_EQ(read_to(*r1, passed1, 25), std::vector<int64_t>{}) << "partition 1 moved";

  r0b.reset(); // unregisters the callback before `wakes` goes out of scope
  r1.reset();
  r2.reset();
  log.reset();
  auto admin = kafka::admin::make(test::kafka_client());
  (*admin)->delete_topic(topic);
}

// Kafka calls are interruptible (issue 25): start() against a broker that
// never answers returns ec::shutting_down at once when interrupted, long
// before kafka.timeout-ms, and so does every later start() or add().
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
  for (auto again : {log->start({{2, 0}}), log->add({{2, 0}})}) {
    ASSERT_FALSE(again);
    EXPECT_EQ(static_cast<ec>(again.error().code()), ec::shutting_down) << describe(again.error());
  }
  EXPECT_LT(std::chrono::steady_clock::now() - before, 1s);
}
