// Live lag against the real broker: once ready, qsp_catch_up_lag is 0 for
// good (H0 never moves), so the node exports the log end its consumer sees,
// the live lag against it and the age of the last progress.  Records produced
// while ready move the log end; a Redis that holds every write (CLIENT PAUSE
// WRITE) stops the checkpoint, and the age grows while the lag stays; readiness
// does not change meanwhile.
#include <map>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "kafka/admin.hpp"
#include "kafka/producer.hpp"
#include "tests/support/integration.hpp"

using namespace qsp;
using test::eventually;
using test::slurp;
using namespace std::chrono_literals;

namespace {

/// Sample name with labels -> value, from Prometheus text.
std::map<std::string, double> scrape(uint16_t port) {
  std::map<std::string, double> out;
  auto r = test::http_get(port, "/metrics");
  if (r.status != 200)
    return out;
  std::istringstream lines{r.body};
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#')
      continue;
    auto sp = line.rfind(' ');
    out[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
  }
  return out;
}

/// Pauses every write command of the test Redis for at most `ms` (it ends by
/// itself if the test dies) and lifts the pause when it goes out of scope.
class write_pause {
public:
  explicit write_pause(int ms) : conn_(test::redis_conn()) {
    ok_ = test::redis_cmd(*conn_, {"CLIENT", "PAUSE", std::to_string(ms), "WRITE"}) == "OK";
  }
  ~write_pause() { lift(); }
  bool ok() const { return ok_; }
  void lift() {
    if (ok_)
      test::redis_cmd(*conn_, {"CLIENT", "UNPAUSE"});
    ok_ = false;
  }

private:
  std::unique_ptr<redis::connection> conn_;
  bool ok_ = false;
};

} // namespace

TEST(LiveLag, LogEndMovesWhileReadyAndTheAgeGrowsWhileRedisHoldsTheWrites) {
  auto topic = test::unique_name("livelag");
  auto ns = test::unique_name("ns");
  auto convs = test::unique_name("convs") + ":";
  test::create_topic(topic, 1);
  auto prod = kafka::producer::make(test::kafka_client());
  ASSERT_TRUE(prod);
  auto produce = [&](uint64_t from, uint64_t n) {
    for (uint64_t i = from; i < from + n; ++i)
      if (!prod->send(topic, 0, core::encode_json(test::make_dispatch(i, 10))))
        return false;
    return static_cast<bool>(prod->flush());
  };
  ASSERT_TRUE(produce(0, 100));
  auto port = test::free_port();
  auto args = test::node_args(topic, 1, ns, convs);
  args.insert(args.begin(), "run");
  test::set_option(args, "http.listen", "127.0.0.1:" + std::to_string(port));
  // Held writes must stay held (not time out into dirty) while we watch.
  test::set_option(args, "redis.command-timeout", "60s");
  auto logf = "/tmp/" + test::unique_name("livelag") + ".log";
  test::node_process node{args, logf};
  ASSERT_TRUE(test::readyz_reaches(port, 200, 60s)) << slurp(logf);

  auto sel = [&](const std::string& name) {
    return name + "{topic=\"" + topic + "\",partition=\"0\"}";
  };
  auto m = scrape(port);
  EXPECT_EQ(m[sel("qsp_log_end_offset")], 100);
  EXPECT_EQ(m[sel("qsp_live_lag")], 0);
  EXPECT_EQ(m[sel("qsp_last_progress_age_seconds")], 0);

  // Records produced while ready: the log end moves and the node follows.
  ASSERT_TRUE(produce(100, 50));
  ASSERT_TRUE(eventually([&] {
    m = scrape(port);
    return m[sel("qsp_log_end_offset")] == 150 && m[sel("qsp_next_offset")] == 150;
  }, 30s)) << slurp(logf);
  EXPECT_EQ(m[sel("qsp_live_lag")], 0);
  EXPECT_EQ(m[sel("qsp_catch_up_lag")], 0);
  EXPECT_EQ(m[sel("qsp_start_target_offset")], 100); // H0 stays

  // Redis holds every write: records arrive, the checkpoint cannot follow.
  write_pause pause{30000};
  ASSERT_TRUE(pause.ok());
  ASSERT_TRUE(produce(150, 20));
  ASSERT_TRUE(eventually([&] {
    m = scrape(port);
    return m[sel("qsp_log_end_offset")] == 170;
  }, 20s)) << slurp(logf);
  EXPECT_EQ(m[sel("qsp_next_offset")], 150);
  EXPECT_EQ(m[sel("qsp_live_lag")], 20);
  double first_age = m[sel("qsp_last_progress_age_seconds")];
  // The age grows with the wall clock while the lag stays.
  ASSERT_TRUE(eventually([&] {
    m = scrape(port);
    return m[sel("qsp_last_progress_age_seconds")] >= first_age + 1.5;
  }, 20s)) << slurp(logf);
  EXPECT_EQ(m[sel("qsp_live_lag")], 20);
  EXPECT_EQ(m[sel("qsp_next_offset")], 150);
  // Lag is not unreadiness; /readyz shows it.
  auto ready = test::http_get(port, "/readyz");
  ASSERT_EQ(ready.status, 200) << ready.body;
  auto body = nlohmann::json::parse(ready.body);
  ASSERT_EQ(body["partitions"].size(), 1u);
  auto p0 = body["partitions"][0];
  EXPECT_EQ(p0["log_end"], 170);
  EXPECT_EQ(p0["live_lag"], 20);
  EXPECT_EQ(p0["caught_up"], true); // against H0
  EXPECT_GE(p0["progress_age_seconds"].get<double>(), first_age + 1.5);

  // Redis takes writes again: lag and age return to 0, without a restart.
  pause.lift();
  ASSERT_TRUE(eventually([&] {
    m = scrape(port);
    return m[sel("qsp_next_offset")] == 170;
  }, 30s)) << slurp(logf);
  EXPECT_EQ(m[sel("qsp_live_lag")], 0);
  EXPECT_EQ(m[sel("qsp_last_progress_age_seconds")], 0);
  EXPECT_EQ(m["qsp_restarts_total{topic=\"" + topic + "\"}"], 0);
  EXPECT_EQ(m["qsp_ready{topic=\"" + topic + "\"}"], 1);
  EXPECT_EQ(node.stop(), 0) << slurp(logf);
  auto admin = kafka::admin::make(test::kafka_client());
  (*admin)->delete_topic(topic);
}
