// scripts/bench --sink measures the node against qsp-bench-resp-sink (a RESP
// server that acknowledges at once) instead of Redis.  The sink answers only
// the commands and scripts it knows; when the node gains one it does not
// know, the node's catch-up fails against it.  This test keeps the two in
// step: a catch-up of a small backlog against the sink must end ready with
// every record's entries sent and no command refused.
#include <signal.h>

#include <chrono>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "core/dispatch.hpp"
#include "kafka/producer.hpp"
#include "tests/support/integration.hpp"

using namespace qsp;

namespace {

/// The value of `name=` in the sink's closing counts line, or -1.
long long count_of(const std::string& text, const std::string& name) {
  auto at = text.find(" " + name + "=");
  if (at == std::string::npos)
    at = text.find(name + "=");
  if (at == std::string::npos)
    return -1;
  return std::stoll(text.substr(text.find('=', at) + 1));
}

std::string read_all(const std::string& path) {
  std::ifstream in{path};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

} // namespace

TEST(BenchSink, ACatchUpAgainstTheSinkEndsReadyWithNothingRefused) {
  const auto topic = test::unique_name("bench-sink");
  const int partitions = 2;
  test::create_topic(topic, partitions);
  auto producer = kafka::producer::make(test::kafka_client());
  ASSERT_TRUE(producer);
  // Distinct (user, conversation) pairs: what the coalesced ZADDs carry at
  // least once; recipients: at most.
  std::set<std::pair<std::string, std::string>> pairs;
  size_t recipients = 0;
  for (uint64_t i = 0; i < 400; ++i) {
    auto d = test::make_dispatch(i);
    for (auto& u : d.recipients)
      pairs.emplace(u, d.conversation_id);
    recipients += d.recipients.size();
    ASSERT_TRUE(producer->send(topic, static_cast<int32_t>(i % partitions), core::encode_json(d)));
  }
  ASSERT_TRUE(producer->flush());

  const std::string dir = ::testing::TempDir() + test::unique_name("sink");
  ASSERT_EQ(std::system(("mkdir -p " + dir).c_str()), 0);
  const std::string port_file = dir + "/port", log = dir + "/sink.log";
  const int sink = test::spawn_program(std::string{QSP_BIN_DIR} + "/qsp-bench-resp-sink",
                                       {port_file}, log);
  std::string port;
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
       port.empty() && std::chrono::steady_clock::now() < deadline;
       std::this_thread::sleep_for(std::chrono::milliseconds(10)))
    port = read_all(port_file);
  ASSERT_FALSE(port.empty()) << "the sink wrote no port within 10 s: " << read_all(log);
  while (!port.empty() && (port.back() == '\n' || port.back() == '\r'))
    port.pop_back();

  const auto ns = test::unique_name("ns");
  auto r = test::run_cli({"catch-up", "--projection.dispatch-topic=" + topic,
                          "--projection.partition-count=" + std::to_string(partitions),
                          "--projection.namespace=" + ns, "--projection.convs-prefix=" + ns + ":",
                          "--kafka.bootstrap-servers=" + test::env().kafka_bootstrap,
                          "--redis.host=127.0.0.1", "--redis.port=" + port,
                          "--projection.catch-up-max-attempts=1", "--http.listen=off"});
  ::kill(sink, SIGTERM);
  EXPECT_EQ(test::wait_cli(sink), 0);
  const std::string counts = read_all(log);
  EXPECT_EQ(r.rc, 0) << r.err << "\nsink: " << counts;
  EXPECT_EQ(count_of(counts, "errors"), 0) << counts;
  EXPECT_GT(count_of(counts, "zadd"), 0) << counts;
  const auto members = count_of(counts, "members");
  EXPECT_GE(members, static_cast<long long>(pairs.size())) << counts;
  EXPECT_LE(members, static_cast<long long>(recipients)) << counts;
}
