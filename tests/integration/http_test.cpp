// The node's HTTP surface and shutdown, against real services: /readyz 503
// before catch-up ends and 200 after, /metrics in Prometheus text format, the
// sessions gate, SIGTERM, restart from the checkpoint.  Also the embedding
// example, which hosts the projection in its own actor system.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

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

} // namespace

TEST(Http, ReadinessMetricsSessionsAndShutdown) {
  auto topic = test::unique_name("http");
  auto ns = test::unique_name("ns");
  auto convs = test::unique_name("convs") + ":";
  test::create_topic(topic, 2);
  auto prod = kafka::producer::make(test::kafka_client());
  test::model expected;
  for (uint64_t i = 0; i < 2000; ++i) {
    auto d = test::make_dispatch(i, 30);
    ASSERT_TRUE(prod->send(topic, static_cast<int32_t>(i % 2), core::encode_json(d)));
    test::apply(expected, d);
  }
  ASSERT_TRUE(prod->flush());
  auto redis = test::redis_conn();
  auto port = test::free_port();
  auto args = test::node_args(topic, 2, ns, convs);
  args.back() = "--http.listen=127.0.0.1:" + std::to_string(port);
  args.insert(args.begin(), "run");
  // Hold every Redis client for a while: the node cannot get past verifying
  // or catching-up, so it must answer not-ready.
  ASSERT_EQ(test::redis_cmd(*redis, {"CLIENT", "PAUSE", "3000", "ALL"}), "OK");
  auto logf = "/tmp/" + test::unique_name("http") + ".log";
  auto pid = test::spawn_cli(args, logf);
  httplib::Client http{"127.0.0.1", port};
  http.set_read_timeout(15, 0);
  ASSERT_TRUE(eventually([&] { auto r = http.Get("/healthz"); return r && r->status == 200; }))
    << slurp(logf);
  auto ready = http.Get("/readyz");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 503) << ready->body;
  auto body = nlohmann::json::parse(ready->body);
  EXPECT_EQ(body["ready"], false);
  EXPECT_NE(body["state"], "ready");
  auto gated = http.Get("/v1/users/u1/sessions?limit=5");
  ASSERT_TRUE(gated);
  EXPECT_EQ(gated->status, 503);

  ASSERT_TRUE(eventually([&] { auto r = http.Get("/readyz"); return r && r->status == 200; }))
    << slurp(logf);
  body = nlohmann::json::parse(http.Get("/readyz")->body);
  EXPECT_EQ(body["state"], "ready");
  ASSERT_EQ(body["partitions"].size(), 2u);
  for (auto& p : body["partitions"])
    EXPECT_EQ(p["next_offset"], p["h0"]);

  // Sessions: newest first, exactly what Redis holds.
  auto s = http.Get("/v1/users/u1/sessions?limit=5");
  ASSERT_TRUE(s);
  ASSERT_EQ(s->status, 200) << s->body;
  auto list = nlohmann::json::parse(s->body)["sessions"];
  ASSERT_FALSE(list.empty()) << s->body;
  ASSERT_EQ(list.size(), std::min<size_t>(5, expected["u1"].size()));
  int64_t prev = INT64_MAX;
  for (auto& e : list) {
    auto conv = e["conversation_id"].get<std::string>();
    EXPECT_EQ(e["last_active"].get<int64_t>(), expected["u1"].at(conv));
    EXPECT_LE(e["last_active"].get<int64_t>(), prev);
    prev = e["last_active"].get<int64_t>();
  }
  EXPECT_EQ(http.Get("/v1/users/u1/sessions?limit=0")->status, 400);
  EXPECT_EQ(http.Get("/v1/users/u1/sessions?limit=abc")->status, 400);

  // Metrics: Prometheus text, the required families, sane values.
  auto m = http.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
  std::regex sample{R"(^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[^}]*\})? -?[0-9.e+]+(Inf)?$)"};
  std::istringstream lines{m->body};
  std::string line;
  std::map<std::string, double> values;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#')
      continue;
    EXPECT_TRUE(std::regex_match(line, sample)) << line;
    auto sp = line.rfind(' ');
    values[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
  }
  auto lbl = "{topic=\"" + topic + "\"}";
  EXPECT_EQ(values["qsp_ready" + lbl], 1);
  EXPECT_EQ(values["qsp_records_total" + lbl], 2000);
  EXPECT_GE(values["qsp_recipient_writes_total" + lbl], 2000);
  EXPECT_GE(values["qsp_batches_total" + lbl], 1);
  EXPECT_EQ(values["qsp_next_offset{topic=\"" + topic + "\",partition=\"0\"}"], 1000);
  EXPECT_EQ(values["qsp_catch_up_lag{topic=\"" + topic + "\",partition=\"1\"}"], 0);
  EXPECT_EQ(values["qsp_batch_write_seconds_count" + lbl], values["qsp_batches_total" + lbl]);
  EXPECT_TRUE(values.count("qsp_open_transaction_gap{topic=\"" + topic + "\",partition=\"0\"}"));
  EXPECT_TRUE(values.count("qsp_failures_total{topic=\"" + topic + "\",kind=\"redis_unavailable\"}"));

  // SIGTERM: clean exit, promptly.
  auto t0 = std::chrono::steady_clock::now();
  ::kill(pid, SIGTERM);
  EXPECT_EQ(test::wait_cli(pid), 0) << slurp(logf);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 15s);

  // A restart resumes from the checkpoint: nothing left to do.
  auto v = args;
  v[0] = "verify";
  v.back() = "--http.listen=off";
  auto r = test::run_cli(v);
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("caught_up"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("bootstrap"), std::string::npos) << r.out;
  auto admin = kafka::admin::make(test::kafka_client());
  (*admin)->delete_topic(topic);
}

// Issue 42: a refusal monitoring can see.  A refused `run` stays up in state
// refused (/readyz 503 with the refusal in last_error, /metrics
// qsp_state{state="refused"} 1) until it is stopped, then exits 3; with
// projection.exit-on-refusal=true it exits 3 at once (the tests' and the
// supervisors' mode).  The refusal: 3 partitions configured, 2 in the topic.
TEST(Http, ARefusedNodeStaysVisibleUntilStopped) {
  auto topic = test::unique_name("http-refused");
  auto ns = test::unique_name("ns");
  auto convs = test::unique_name("convs") + ":";
  test::create_topic(topic, 2);
  auto port = test::free_port();
  auto args = test::node_args(topic, 3, ns, convs);
  args.back() = "--http.listen=127.0.0.1:" + std::to_string(port);
  args.insert(args.begin(), "run");
  auto stay = args;
  stay.push_back("--projection.exit-on-refusal=false");  // the default, named
  auto logf = "/tmp/" + test::unique_name("http-refused") + ".log";
  auto pid = test::spawn_cli(stay, logf);
  httplib::Client http{"127.0.0.1", port};
  http.set_read_timeout(15, 0);
  nlohmann::json body;
  ASSERT_TRUE(eventually([&] {
    auto r = http.Get("/readyz");
    if (!r || r->status != 503)
      return false;
    body = nlohmann::json::parse(r->body, nullptr, false);
    return !body.is_discarded() && body.value("state", "") == "refused";
  }, 30s)) << slurp(logf);
  EXPECT_EQ(body["ready"], false);
  EXPECT_NE(body.value("last_error", "").find("partition_count"), std::string::npos) << body.dump();
  auto scrape = [&] {
    auto m = http.Get("/metrics");
    return m && m->status == 200 ? m->body : std::string{};
  };
  auto refused = "qsp_state{topic=\"" + topic + "\",state=\"refused\"} 1";
  EXPECT_NE(scrape().find(refused), std::string::npos) << scrape();
  // Still up, and still saying so, at the next scrape.
  EXPECT_FALSE(test::wait_cli_for(pid, 0ms)) << slurp(logf);
  EXPECT_NE(scrape().find(refused), std::string::npos);
  EXPECT_EQ(http.Get("/v1/users/u1/sessions")->status, 503);
  EXPECT_NE(slurp(logf).find("staying up in state refused"), std::string::npos) << slurp(logf);
  ::kill(pid, SIGTERM);
  EXPECT_EQ(test::wait_cli(pid), 3) << slurp(logf);

  // The supervisors' mode: exit 3 at once, nothing to stop.
  auto at_once = args;
  at_once.push_back("--projection.exit-on-refusal=true");
  auto pid2 = test::spawn_cli(at_once, logf + ".2");
  auto rc = test::wait_cli_for(pid2, 60s);
  ASSERT_TRUE(rc) << "still running:\n" << slurp(logf + ".2");
  EXPECT_EQ(*rc, 3) << slurp(logf + ".2");
  auto admin = kafka::admin::make(test::kafka_client());
  (*admin)->delete_topic(topic);
}

TEST(Embedding, HostSpawnsTheProjectionInItsOwnActorSystem) {
  auto topic = test::unique_name("embed");
  auto ns = test::unique_name("ns");
  auto convs = test::unique_name("convs") + ":";
  test::create_topic(topic, 1);
  auto prod = kafka::producer::make(test::kafka_client());
  ASSERT_TRUE(prod->send(topic, 0, core::encode_json({"c-old", 100, {"eve"}})));
  ASSERT_TRUE(prod->send(topic, 0, core::encode_json({"c-new", 200, {"eve", "max"}})));
  ASSERT_TRUE(prod->flush());
  auto logf = "/tmp/" + test::unique_name("embed") + ".log";
  std::vector<std::string> argv{QSP_BIN_DIR "/qsp-embed-example", test::env().kafka_bootstrap,
                                test::env().redis_host, std::to_string(test::env().redis_port),
                                topic, "1", ns, convs, "eve"};
  // spawn_cli runs qsession-projection; run the example binary directly.
  std::string cmd;
  for (auto& a : argv)
    cmd += "'" + a + "' ";
  cmd += "2>" + logf;
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[256];
  while (std::fgets(buf, sizeof(buf), p) != nullptr)
    out += buf;
  int status = ::pclose(p);
  EXPECT_EQ(WEXITSTATUS(status), 0) << slurp(logf);
  EXPECT_EQ(out, "c-new 200\nc-old 100\n");
  auto admin = kafka::admin::make(test::kafka_client());
  (*admin)->delete_topic(topic);
}

// One node per HTTP port: a second `run` on the address a running node serves
// must fail at start (exit 2, naming http.listen), not share the port (the
// HTTP library sets SO_REUSEPORT by default, so both bound and probes were
// split between them).
TEST(Http, SecondNodeOnTheSamePortFailsToStart) {
  auto topic = test::unique_name("http-bind");
  auto ns = test::unique_name("ns");
  test::create_topic(topic, 1);
  auto port = test::free_port();
  auto args = test::node_args(topic, 1, ns, ns + "-convs");
  args.back() = "--http.listen=127.0.0.1:" + std::to_string(port);
  args.insert(args.begin(), "run");
  auto logf = "/tmp/" + test::unique_name("http-bind") + ".log";
  auto first = test::spawn_cli(args, logf);
  httplib::Client http{"127.0.0.1", port};
  ASSERT_TRUE(eventually([&] { auto r = http.Get("/healthz"); return r && r->status == 200; }))
    << slurp(logf);
  auto ns2 = test::unique_name("ns");
  auto args2 = test::node_args(topic, 1, ns2, ns2 + "-convs");
  args2.back() = "--http.listen=127.0.0.1:" + std::to_string(port);
  args2.insert(args2.begin(), "run");
  auto logf2 = "/tmp/" + test::unique_name("http-bind2") + ".log";
  auto second = test::spawn_cli(args2, logf2);
  auto rc = test::wait_cli_for(second, 30s);
  if (!rc) {
    ::kill(second, SIGKILL);
    test::wait_cli(second);
  }
  ASSERT_TRUE(rc.has_value()) << "the second node kept running on a bound port\n" << slurp(logf2);
  EXPECT_EQ(*rc, 2) << slurp(logf2);
  auto err = slurp(logf2);
  EXPECT_NE(err.find("http.listen"), std::string::npos) << err;
  EXPECT_NE(err.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << err;
  // The first node still serves the port.
  auto r = http.Get("/healthz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  ::kill(first, SIGTERM);
  EXPECT_EQ(test::wait_cli(first), 0) << slurp(logf);
}
