// Failing closed at run time, black-box against the real broker and Redis
// through the node binary (`run` with /readyz):
//  - the topic is deleted and recreated (same name, same partition count)
//    under a running node and filled past the node's position: the node must
//    leave ready, refuse (exit 3) naming topic_id, and no checkpoint may ever
//    pass the old topic's end or carry another topic id;
//  - a private Redis is frozen (SIGSTOP) past the command deadline while a
//    producer writes: /readyz must say 503 while it is frozen, 200 again
//    after SIGCONT, and every produced record must end up projected.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <optional>
#include <regex>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "kafka/admin.hpp"
#include "kafka/producer.hpp"
#include "messages/types.hpp"
#include "redis/stores.hpp"
#include "tests/support/integration.hpp"

using namespace qsp;
using test::eventually;
using test::slurp;
using namespace std::chrono_literals;

namespace {

/// Deletes the test's topic however the test ends.
struct topic_cleanup {
  kafka::admin& a;
  std::string t;
  ~topic_cleanup() { a.delete_topic(t); }
};

/// Runs `step` again and again on its own thread until stop() (or
/// destruction): the samplers that watch the node while the main thread
/// drives the scenario.
class background {
public:
  explicit background(std::function<void()> step)
    : step_(std::move(step)), thread_([this] {
        while (!stop_)
          step_();
      }) {}
  ~background() { stop(); }
  void stop() {
    stop_ = true;
    if (thread_.joinable())
      thread_.join();
  }

private:
  std::function<void()> step_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

/// What a /readyz poller saw.
struct readyz_log {
  std::mutex mu;
  std::map<int, int> answers; // status (0: no answer) -> count
  std::string last_not_ready_body;

  void add(const test::http_reply& r) {
    std::lock_guard<std::mutex> guard{mu};
    ++answers[r.status];
    if (r.status == 503)
      last_not_ready_body = r.body;
  }
  int count(int status) {
    std::lock_guard<std::mutex> guard{mu};
    return answers[status];
  }
  std::string summary() {
    std::lock_guard<std::mutex> guard{mu};
    std::string out;
    for (auto& [st, n] : answers)
      out += std::to_string(st) + "x" + std::to_string(n) + " ";
    return out + "last 503 body: " + last_not_ready_body;
  }
};

std::unique_ptr<redis::connection> connect(uint16_t port, const std::string& ns,
                                           const std::string& convs) {
  auto cfg = test::redis_settings(ns, convs);
  cfg.port = port;
  auto c = redis::connection::open(cfg);
  return c ? std::move(*c) : nullptr;
}

/// next_offset of a checkpoint, -1 if absent.
int64_t checkpoint(redis::connection& c, const std::string& ns, const std::string& topic, int p) {
  auto v = test::redis_cmd(c, {"HGET", redis::checkpoint_key(ns, topic, p), "next_offset"});
  return v.empty() || v.rfind("ERR", 0) == 0 ? -1 : std::stoll(v);
}

std::vector<std::string> node_run_args(const std::string& topic, int partitions,
                                       const std::string& ns, const std::string& convs,
                                       uint16_t http_port, uint16_t redis_port,
                                       const std::vector<std::string>& extra) {
  auto a = test::node_args(topic, partitions, ns, convs);
  a.insert(a.begin(), "run");
  test::set_option(a, "redis.port", std::to_string(redis_port));
  test::set_option(a, "http.listen", "127.0.0.1:" + std::to_string(http_port));
  for (auto& e : extra) {
    auto eq = e.find('=');
    test::set_option(a, e.substr(2, eq - 2), e.substr(eq + 1));
  }
  return a;
}

// ---------------------------------------------------------------------------
// a) The topic is recreated under a running node.

/// `hold_node`: the node is SIGSTOPped while the topic is deleted, recreated
/// and filled, so the new topic is past the node's position before the node
/// can fetch from it or run another identity check (a stalled node; with a
/// check interval longer than the hold, its first fetch from the new topic
/// comes before its next periodic check).
void topic_recreated_under_a_running_node(const std::vector<std::string>& extra, bool hold_node) {
  constexpr int partitions = 2;
  constexpr int64_t old_end = 200;
  auto topic = test::unique_name("fence");
  auto ns = test::unique_name("ns");
  auto convs = test::unique_name("convs") + ":";
  auto admin_or = kafka::admin::make(test::kafka_client());
  ASSERT_TRUE(admin_or);
  auto admin = std::move(*admin_or);
  topic_cleanup cleanup{*admin, topic};
  test::create_topic(topic, partitions);
  {
    auto prod = kafka::producer::make(test::kafka_client());
    ASSERT_TRUE(prod);
    for (uint64_t i = 0; i < old_end * partitions; ++i)
      ASSERT_TRUE(prod->send(topic, static_cast<int32_t>(i % partitions), core::encode_json(test::make_dispatch(i, 40))));
    ASSERT_TRUE(prod->flush());
  }
  auto old_identity = admin->identity(topic);
  ASSERT_TRUE(old_identity);
  auto old_id = old_identity->topic_id;
  ASSERT_FALSE(old_id.empty());

  auto port = test::free_port();
  auto logf = "/tmp/" + test::unique_name("fence") + ".log";
  test::node_process node{
    node_run_args(topic, partitions, ns, convs, port, test::env().redis_port, extra), logf};
  ASSERT_TRUE(test::readyz_reaches(port, 200, 60s)) << slurp(logf);
  auto redis = test::redis_conn();
  ASSERT_TRUE(eventually([&] {
    return checkpoint(*redis, ns, topic, 0) == old_end && checkpoint(*redis, ns, topic, 1) == old_end;
  })) << slurp(logf);

  // From here on, every sample of every checkpoint must carry the old topic
  // id and stay at or below the old topic's end.
  std::mutex sample_mu;
  size_t samples = 0;
  std::vector<std::string> violations;
  auto sampler_conn = test::redis_conn();
  background checkpoints{[&] {
    for (int p = 0; p < partitions; ++p) {
      auto r = sampler_conn->command(
        {"HMGET", redis::checkpoint_key(ns, topic, p), "topic_id", "next_offset"});
      std::lock_guard<std::mutex> guard{sample_mu};
      if (!r || (*r)->type != REDIS_REPLY_ARRAY || (*r)->elements != 2) {
        violations.push_back("partition " + std::to_string(p) + ": unreadable checkpoint");
        continue;
      }
      auto field = [&](size_t i) {
        auto* e = (*r)->element[i];
        return e->str != nullptr ? std::string{e->str, e->len} : std::string{"<absent>"};
      };
      auto id = field(0), next = field(1);
      ++samples;
      bool over = next == "<absent>" || std::stoll(next) > old_end;
      if ((id != old_id || over) && violations.size() < 20)
        violations.push_back("partition " + std::to_string(p) + ": topic_id " + id
                             + " next_offset " + next);
    }
    std::this_thread::sleep_for(5ms); // the sampling rate
  }};
  // /readyz as often as it answers: the refusal may be followed by the exit
  // within milliseconds.
  readyz_log readiness;
  background poller{[&] {
    readiness.add(test::http_get(port, "/readyz", 2s));
    std::this_thread::sleep_for(2ms);
  }};

  // Delete the topic, recreate it under the same name and partition count,
  // and fill it well past the node's position as fast as possible.
  auto filler = kafka::producer::make(test::kafka_client());
  ASSERT_TRUE(filler);
  std::optional<test::pause_guard> held;
  auto t0 = std::chrono::steady_clock::now();
  if (hold_node) {
    held.emplace(node.pid());
    ASSERT_TRUE(held->paused());
  }
  ASSERT_TRUE(admin->delete_topic(topic));
  ASSERT_TRUE(eventually([&] { return static_cast<bool>(admin->create_topic(topic, partitions)); }, 60s))
    << "could not recreate " << topic;
  std::string new_id;
  ASSERT_TRUE(eventually([&] {
    auto id = admin->identity(topic);
    if (!id || id->topic_id.empty() || id->topic_id == old_id || id->partition_count != partitions)
      return false;
    new_id = id->topic_id;
    return true;
  }, 60s));
  for (uint64_t i = 0; i < 1000 * partitions; ++i)
    ASSERT_TRUE(filler->send(topic, static_cast<int32_t>(i % partitions), core::encode_json(test::make_dispatch(100000 + i, 40))));
  ASSERT_TRUE(filler->flush());
  if (held) {
    auto st = admin->inspect(topic);
    ASSERT_TRUE(st);
    for (auto& m : st->marks)
      ASSERT_GT(m.high, old_end) << "the new topic is not past the node's position";
    held->resume();
  }
  std::printf("topic deleted, recreated and filled in %lld ms%s\n",
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                       std::chrono::steady_clock::now() - t0).count()),
              hold_node ? " with the node stopped" : "");

  auto rc = node.wait_for(90s);
  poller.stop();
  checkpoints.stop();
  ASSERT_TRUE(rc.has_value()) << "the node still runs 90 s after the topic was recreated\n"
                              << slurp(logf);
  auto log = slurp(logf);
  EXPECT_EQ(*rc, 3) << log;
  std::printf("/readyz answers while the topic was replaced: %s\n", readiness.summary().c_str());
  // Readiness drops at the refusal: the node goes from ready straight to
  // refused and `run` exits 3 at once, so /readyz answers 503 only for the
  // moment before the exit (the actor tests check the dropped flag itself).
  EXPECT_NE(log.find("ready -> refused"), std::string::npos)
    << "no transition from ready to refused: " << readiness.summary() << "\n" << log;
  EXPECT_NE(log.find("topic_id"), std::string::npos) << log;
  // A partition error without a record (the topic vanished) names no offset
  // rather than librdkafka's logical -1001; every refusal line is prefixed once.
  // (As a token: the random topic name may contain "-1001" itself.)
  EXPECT_FALSE(std::regex_search(log, std::regex{"(^|[^A-Za-z0-9_-])-1001([^0-9]|$)"})) << log;
  EXPECT_EQ(log.find("refused: refused:"), std::string::npos) << log;
  EXPECT_NE(log.find(old_id), std::string::npos) << "stored topic id not named\n" << log;
  EXPECT_NE(log.find(new_id), std::string::npos) << "observed topic id not named\n" << log;
  {
    std::lock_guard<std::mutex> guard{sample_mu};
    EXPECT_GT(samples, 0u);
    EXPECT_TRUE(violations.empty()) << ::testing::PrintToString(violations);
  }
  // And after the exit.
  for (int p = 0; p < partitions; ++p) {
    auto key = redis::checkpoint_key(ns, topic, p);
    EXPECT_EQ(test::redis_cmd(*redis, {"HGET", key, "topic_id"}), old_id) << key;
    EXPECT_LE(checkpoint(*redis, ns, topic, p), old_end) << key;
  }
}

} // namespace

TEST(RuntimeFence, TopicRecreatedUnderARunningNodeIsRefused) {
  // The default check interval (1 s); the node runs throughout.
  topic_recreated_under_a_running_node({}, false);
}

TEST(RuntimeFence, TopicRecreatedAndFilledBetweenTwoPeriodicChecksIsFenced) {
  // A 2-s interval and a stalled node: the new topic is filled past the
  // node's position before the node fetches again or runs its next periodic
  // check, so the checkpoint of a batch read from the new topic must wait for
  // an identity check that started after the fetch (the fence).
  topic_recreated_under_a_running_node({"--projection.identity-check-interval=2s"}, true);
}

// ---------------------------------------------------------------------------
// b) Redis frozen past the command deadline while a producer writes.

TEST(RuntimeFence, RedisFrozenPastTheDeadlineMakesTheNodeDirtyThenItRecovers) {
  constexpr int partitions = 2;
  test::private_redis frozen{"frozen", {}};
  ASSERT_TRUE(frozen.wait_ready());
  auto topic = test::unique_name("frozen");
  auto ns = test::unique_name("ns");
  auto convs = test::unique_name("convs") + ":";
  auto admin_or = kafka::admin::make(test::kafka_client());
  ASSERT_TRUE(admin_or);
  auto admin = std::move(*admin_or);
  topic_cleanup cleanup{*admin, topic};
  test::create_topic(topic, partitions);

  // Every record, per partition in offset order (one idempotent producer at
  // a time, so offsets are the indices).  Guarded by log_mu.
  std::mutex log_mu;
  std::map<int, std::vector<core::dispatch>> log;
  uint64_t next_id = 0;
  auto next_record = [&](int part) {
    std::lock_guard<std::mutex> guard{log_mu};
    auto d = test::make_dispatch(next_id++, 60);
    log[part].push_back(d);
    return d;
  };
  {
    auto prod = kafka::producer::make(test::kafka_client());
    ASSERT_TRUE(prod);
    for (int i = 0; i < 500; ++i)
      for (int p = 0; p < partitions; ++p)
        ASSERT_TRUE(prod->send(topic, p, core::encode_json(next_record(p))));
    ASSERT_TRUE(prod->flush());
  }
  auto snapshot = [&] {
    std::lock_guard<std::mutex> guard{log_mu};
    return log;
  };
  auto redis = [&] { return connect(frozen.port, ns, convs); };
  auto caught_up = [&] {
    auto c = redis();
    if (!c)
      return false;
    for (auto& [p, recs] : snapshot())
      if (checkpoint(*c, ns, topic, p) != static_cast<int64_t>(recs.size()))
        return false;
    return true;
  };
  // Every record below each checkpoint is in Redis with at least its score,
  // and no checkpoint passes the end of what was produced.
  auto overshoots = [&] {
    std::vector<std::string> out;
    auto c = redis();
    if (!c)
      return std::vector<std::string>{"cannot connect to redis"};
    std::map<int, int64_t> cps;
    for (int p = 0; p < partitions; ++p)
      cps[p] = checkpoint(*c, ns, topic, p);
    auto recs = snapshot(); // after the checkpoints: it covers them
    test::model below;
    for (auto& [p, cp] : cps) {
      if (cp > static_cast<int64_t>(recs[p].size()))
        out.push_back("partition " + std::to_string(p) + " checkpoint " + std::to_string(cp)
                      + " passes the end " + std::to_string(recs[p].size()));
      for (int64_t off = 0; off < cp && off < static_cast<int64_t>(recs[p].size()); ++off)
        test::apply(below, recs[p][static_cast<size_t>(off)]);
    }
    for (auto& [user, cv] : below) {
      auto got = test::zset(*c, convs + user);
      for (auto& [conv, score] : cv) {
        auto i = got.find(conv);
        if ((i == got.end() || i->second < score) && out.size() < 20)
          out.push_back(user + " " + conv + (i == got.end() ? " missing" : " stale"));
      }
    }
    return out;
  };

  auto port = test::free_port();
  auto logf = "/tmp/" + test::unique_name("frozen") + ".log";
  test::node_process node{node_run_args(topic, partitions, ns, convs, port, frozen.port,
                                        {"--redis.command-timeout=500ms"}),
                          logf};
  ASSERT_TRUE(test::readyz_reaches(port, 200, 60s)) << slurp(logf);
  ASSERT_TRUE(eventually(caught_up, 60s)) << slurp(logf);

  // A producer writes throughout the freeze.
  std::atomic<bool> producer_failed{false};
  background producer{[&, prod = std::shared_ptr<kafka::producer>()]() mutable {
    if (producer_failed) {
      std::this_thread::sleep_for(10ms);
      return;
    }
    if (!prod) {
      auto p = kafka::producer::make(test::kafka_client());
      if (!p) {
        producer_failed = true;
        return;
      }
      prod = std::make_shared<kafka::producer>(std::move(*p));
    }
    for (int round = 0; round < 10; ++round)
      for (int p = 0; p < partitions; ++p)
        if (!prod->send(topic, p, core::encode_json(next_record(p))))
          producer_failed = true;
    if (!prod->flush())
      producer_failed = true;
    std::this_thread::sleep_for(20ms); // the rate
  }};
  {
    auto c = redis();
    ASSERT_TRUE(c);
    auto before = checkpoint(*c, ns, topic, 0);
    ASSERT_TRUE(eventually([&] { return checkpoint(*c, ns, topic, 0) > before; }, 30s))
      << "the node does not write the producer's records\n" << slurp(logf);
  }
  {
    test::pause_guard freeze{frozen.pid};
    ASSERT_TRUE(freeze.paused());
    test::http_reply last;
    EXPECT_TRUE(test::readyz_reaches(port, 503, 30s, &last))
      << "/readyz never answered 503 while Redis was frozen; last answer " << last.status << " "
      << last.body << "\n" << slurp(logf);
  } // SIGCONT, on every path
  EXPECT_EQ(overshoots(), std::vector<std::string>{});
  test::http_reply last;
  EXPECT_TRUE(test::readyz_reaches(port, 200, 120s, &last))
    << "/readyz not 200 after Redis came back; last answer " << last.status << " " << last.body
    << "\n" << slurp(logf);
  producer.stop();
  ASSERT_FALSE(producer_failed);

  EXPECT_TRUE(eventually(caught_up, 90s)) << slurp(logf);
  EXPECT_EQ(overshoots(), std::vector<std::string>{});
  EXPECT_EQ(node.stop(), 0) << slurp(logf);
  // Redis holds exactly the model of everything produced.
  test::model expected;
  for (auto& [p, recs] : snapshot())
    for (auto& d : recs)
      test::apply(expected, d);
  auto c = redis();
  ASSERT_TRUE(c);
  std::vector<std::string> diff;
  for (auto& [user, cv] : expected) {
    auto got = test::zset(*c, convs + user);
    if (got != cv && diff.size() < 20)
      diff.push_back(user + ": " + std::to_string(got.size()) + " members, expected "
                     + std::to_string(cv.size()));
  }
  EXPECT_EQ(diff, std::vector<std::string>{});
}
