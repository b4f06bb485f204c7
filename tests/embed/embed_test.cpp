// examples/host, built against the installed package and as a subproject
// (tests/embed/CMakeLists.txt), run against the real services: two tenants
// in one host system, the same convs prefix refused, five respawns under a
// live producer with nothing lost, and the host's own actor answering while
// the projections cannot reach Redis.
#include <algorithm>
#include <atomic>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "core/dispatch.hpp"
#include "kafka/admin.hpp"
#include "kafka/producer.hpp"
#include "messages/types.hpp"
#include "tests/support/integration.hpp"

using namespace qsp;
using namespace std::chrono_literals;

namespace {

/// `--tenant-X.<group>.<key>=value` arguments for one tenant.
std::vector<std::string> tenant_args(const std::string& tenant, const std::string& topic,
                                     int partitions, const std::string& ns,
                                     const std::string& convs, uint16_t redis_port = 0) {
  auto port = redis_port != 0 ? redis_port : test::env().redis_port;
  return {"--" + tenant + ".projection.dispatch-topic=" + topic,
          "--" + tenant + ".projection.partition-count=" + std::to_string(partitions),
          "--" + tenant + ".projection.namespace=" + ns,
          "--" + tenant + ".projection.convs-prefix=" + convs,
          "--" + tenant + ".kafka.bootstrap-servers=" + test::env().kafka_bootstrap,
          "--" + tenant + ".redis.host=" + test::env().redis_host,
          "--" + tenant + ".redis.port=" + std::to_string(port)};
}

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

/// The lines of `out` that start with `prefix`.
std::vector<std::string> lines_with(const std::string& out, const std::string& prefix) {
  std::vector<std::string> res;
  std::istringstream in{out};
  for (std::string line; std::getline(in, line);)
    if (line.rfind(prefix, 0) == 0)
      res.push_back(line);
  return res;
}

/// The value of `key=` in a "k=v k=v" line.
std::string field(const std::string& line, const std::string& key) {
  auto i = line.find(" " + key + "=");
  if (i == std::string::npos)
    i = line.rfind(key + "=", 0) == 0 ? 0 : std::string::npos;
  else
    i += 1;
  if (i == std::string::npos)
    return {};
  auto start = i + key.size() + 1;
  auto end = line.find(' ', start);
  return line.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

void delete_topic(const std::string& topic) {
  if (auto admin = kafka::admin::make(test::kafka_client()))
    (*admin)->delete_topic(topic);
}

class EmbedHost : public ::testing::TestWithParam<std::string> {
protected:
  const std::string& bin() const { return GetParam(); }
};

TEST_P(EmbedHost, TwoProjectionsInOneHostServeTheirOwnTenants) {
  auto ta = test::unique_name("embed-a"), tb = test::unique_name("embed-b");
  auto na = test::unique_name("ns-a"), nb = test::unique_name("ns-b");
  auto ca = test::unique_name("ca") + ":", cb = test::unique_name("cb") + ":";
  test::create_topic(ta, 2);
  test::create_topic(tb, 2);
  auto prod = kafka::producer::make(test::kafka_client());
  ASSERT_TRUE(prod);
  std::set<std::string> want_a, want_b;
  for (int i = 0; i < 40; ++i) {
    core::dispatch a{"a-conv-" + std::to_string(i), 1000 + i, {"u1", "u2"}};
    core::dispatch b{"b-conv-" + std::to_string(i), 2000 + i, {"u1", "u3"}};
    ASSERT_TRUE(prod->send(ta, i % 2, core::encode_json(a)));
    ASSERT_TRUE(prod->send(tb, i % 2, core::encode_json(b)));
    want_a.insert(a.conversation_id);
    want_b.insert(b.conversation_id);
  }
  ASSERT_TRUE(prod->flush());
  auto r = test::run_program(
    bin(), concat(concat({"--host.mode=serve", "--host.user=u1"}, tenant_args("tenant-a", ta, 2, na, ca)),
                  tenant_args("tenant-b", tb, 2, nb, cb)));
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  std::set<std::string> got_a, got_b;
  for (auto& line : lines_with(r.out, "session ")) {
    (field(line, "tenant") == "tenant-a" ? got_a : got_b).insert(field(line, "conversation"));
  }
  EXPECT_EQ(got_a, want_a);
  EXPECT_EQ(got_b, want_b);
  // Both stopped cleanly, every log line of a projection names it.
  EXPECT_EQ(lines_with(r.out, "stopped ").size(), 2u);
  for (auto& line : lines_with(r.out, "stopped "))
    EXPECT_EQ(field(line, "ok"), "1") << line;
  std::istringstream err{r.err};
  int tagged = 0;
  for (std::string line; std::getline(err, line);) {
    if (line.find("[qsp]") == std::string::npos)
      continue;
    bool names = line.find("[" + ta + " " + na + "]") != std::string::npos
                 || line.find("[" + tb + " " + nb + "]") != std::string::npos;
    EXPECT_TRUE(names) << "a projection's log line without its topic/namespace: " << line;
    tagged += names;
  }
  EXPECT_GT(tagged, 0) << r.err;
  // The tenants' sets live under their own prefixes only.
  auto c = test::redis_conn();
  EXPECT_EQ(test::zset(*c, ca + "u3").size(), 0u);
  EXPECT_EQ(test::zset(*c, cb + "u2").size(), 0u);
  EXPECT_EQ(test::zset(*c, cb + "u3").size(), want_b.size());
  delete_topic(ta);
  delete_topic(tb);
}

TEST_P(EmbedHost, TheSameConvsPrefixInTwoNamespacesIsRefusedUnlessAllowed) {
  auto ta = test::unique_name("embed-a"), tb = test::unique_name("embed-b");
  auto na = test::unique_name("ns-a"), nb = test::unique_name("ns-b");
  auto shared = test::unique_name("shared") + ":";
  test::create_topic(ta, 1);
  test::create_topic(tb, 1);
  auto args = concat(concat({"--host.mode=serve"}, tenant_args("tenant-a", ta, 1, na, shared)),
                     tenant_args("tenant-b", tb, 1, nb, shared));
  auto r = test::run_program(bin(), args);
  EXPECT_EQ(r.rc, 2) << r.out << r.err;
  auto refused = lines_with(r.out, "spawn-refused tenant=tenant-b");
  ASSERT_EQ(refused.size(), 1u) << r.out;
  EXPECT_NE(refused[0].find("projection.convs-prefix"), std::string::npos) << refused[0];
  EXPECT_NE(refused[0].find(na), std::string::npos) << refused[0];
  // The first tenant was shut down in order all the same.
  EXPECT_EQ(lines_with(r.out, "stopped tenant=tenant-a ok=1").size(), 1u) << r.out;

  args.push_back("--tenant-b.projection.allow-shared-convs-prefix");
  auto allowed = test::run_program(bin(), args);
  EXPECT_EQ(allowed.rc, 0) << allowed.out << allowed.err;
  EXPECT_EQ(lines_with(allowed.out, "ready ").size(), 2u) << allowed.out;

  // Redis Cluster mode: the claim is on the cluster, named by its seed
  // nodes; sharing any one seed is sharing the cluster.  (Nothing needs to
  // answer at those seeds: the refusal comes at spawn.)
  auto cluster_tenant = [&](const std::string& t, const std::string& topic, const std::string& ns,
                            const std::string& seeds) {
    std::vector<std::string> out;
    for (auto& a : tenant_args(t, topic, 1, ns, shared))
      if (a.find(".redis.") == std::string::npos)
        out.push_back(a);
    out.push_back("--" + t + ".redis.cluster-nodes=[" + seeds + "]");
    return out;
  };
  auto in_cluster = concat(
    concat({"--host.mode=serve"},
           cluster_tenant("tenant-a", ta, "{" + na + "}", "\"127.0.0.1:1\",\"127.0.0.1:2\"")),
    cluster_tenant("tenant-b", tb, "{" + nb + "}", "\"127.0.0.1:2\""));
  auto c = test::run_program(bin(), in_cluster);
  EXPECT_EQ(c.rc, 2) << c.out << c.err;
  auto refused_c = lines_with(c.out, "spawn-refused tenant=tenant-b");
  ASSERT_EQ(refused_c.size(), 1u) << c.out << c.err;
  EXPECT_NE(refused_c[0].find("the Redis Cluster of node 127.0.0.1:2"), std::string::npos)
    << refused_c[0];
  delete_topic(ta);
  delete_topic(tb);
}

TEST_P(EmbedHost, RespawnedFiveTimesUnderALiveProducerLosesNothingAndLeaksNoThread) {
  auto topic = test::unique_name("embed-respawn");
  auto ns = test::unique_name("ns");
  auto convs = test::unique_name("convs") + ":";
  test::create_topic(topic, 2);
  test::model m;
  std::mutex mtx;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> sent{0};
  // The live producer: bounded in count and time.
  std::thread producer{[&] {
    auto prod = kafka::producer::make(test::kafka_client());
    if (!prod)
      return;
    auto until = std::chrono::steady_clock::now() + 120s;
    for (uint64_t i = 0; i < 50000 && !stop && std::chrono::steady_clock::now() < until; ++i) {
      auto d = test::make_dispatch(i, 40);
      if (!prod->send(topic, static_cast<int32_t>(i % 2), core::encode_json(d)))
        break;
      {
        std::lock_guard<std::mutex> guard{mtx};
        test::apply(m, d);
      }
      sent = i + 1;
      if (i % 50 == 49) {
        prod->flush();
        std::this_thread::sleep_for(10ms); // ~5000 records/s: pacing, not synchronisation
      }
    }
    prod->flush();
  }};
  ASSERT_TRUE(test::eventually([&] { return sent.load() >= 200; }, 30s));
  auto r = test::run_program(
    bin(), concat({"--host.mode=respawn", "--host.cycles=5"}, tenant_args("tenant-a", topic, 2, ns, convs)));
  uint64_t during = sent.load();
  stop = true;
  producer.join();
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  auto cycles = lines_with(r.out, "cycle=");
  ASSERT_EQ(cycles.size(), 5u) << r.out;
  auto stopped = lines_with(r.out, "stopped tenant=tenant-a");
  ASSERT_EQ(stopped.size(), 5u) << r.out;
  for (auto& line : stopped)
    EXPECT_EQ(field(line, "ok"), "1") << line;
  // No thread left behind by a projection: the count after every later
  // shutdown is at most the first one's (which includes the Kafka reaper).
  int first = std::stoi(field(cycles[0], "threads"));
  for (size_t i = 1; i < cycles.size(); ++i)
    EXPECT_LE(std::stoi(field(cycles[i], "threads")), first) << cycles[i];
  EXPECT_GT(during, 200u) << "the producer was not live during the respawns";
  // What the five projections checkpointed plus one catch-up: exactly the log.
  auto args = test::node_args(topic, 2, ns, convs);
  // The node's endpoint off by "off": node_args' `--http.listen=""` is an
  // empty string to CAF 0.17's parser but two quote characters to CAF 1.1's
  // (the node then refuses "host:port, got """"").
  for (auto& a : args)
    if (a.rfind("--http.listen=", 0) == 0)
      a = "--http.listen=off";
  auto cu = test::run_cli(concat({"catch-up"}, args));
  ASSERT_EQ(cu.rc, 0) << cu.err;
  std::lock_guard<std::mutex> guard{mtx};
  auto diffs = test::diff_with_redis(m, convs);
  EXPECT_TRUE(diffs.empty()) << diffs.size() << " differences, first: " << diffs.front();
  auto audit = test::run_cli(concat({"audit"}, args));
  EXPECT_EQ(audit.rc, 0) << audit.out << audit.err;
  delete_topic(topic);
}

TEST_P(EmbedHost, TheHostsOwnActorAnswersWhileTheProjectionsCannotReachRedis) {
  // Tenant A's Redis accepts connections and never answers (a listening
  // socket nobody accepts from); tenant B's refuses them (a closed port).
  int hole = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(hole, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(hole, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(hole, 64), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::getsockname(hole, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  auto hole_port = ntohs(addr.sin_port);
  auto closed_port = test::free_port();
  auto ta = test::unique_name("embed-a"), tb = test::unique_name("embed-b");
  // 200 pings, 20 ms apart: 4 s, inside tenant A's 5-s command timeout, so
  // its verifier is blocked on Redis the whole time.
  auto r = test::run_program(
    bin(), concat(concat({"--host.mode=ping", "--host.pings=200"},
                         tenant_args("tenant-a", ta, 1, test::unique_name("ns-a"),
                                     test::unique_name("ca") + ":", hole_port)),
                  tenant_args("tenant-b", tb, 1, test::unique_name("ns-b"),
                              test::unique_name("cb") + ":", closed_port)));
  ::close(hole);
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  auto pings = lines_with(r.out, "pings=");
  ASSERT_EQ(pings.size(), 1u) << r.out;
  std::printf("%s\n", pings[0].c_str());
  EXPECT_EQ(field(pings[0], "pings"), "200");
  // A host actor sharing a scheduler thread with a blocked Redis call would
  // wait for tenant A's whole 5-s command timeout; scheduler noise on a busy
  // box is milliseconds (a 10-ms bound failed once under load).  The bound
  // tells the two apart without timing the machine.
  EXPECT_LT(std::stol(field(pings[0], "max_us")), 1000000) << pings[0];
  // Neither projection claims readiness meanwhile.
  auto states = lines_with(r.out, "state ");
  ASSERT_EQ(states.size(), 2u) << r.out;
  for (auto& s : states)
    EXPECT_EQ(field(s, "ready"), "0") << s;
  EXPECT_EQ(lines_with(r.out, "host-status cache-port=7000").size(), 1u) << r.out;
  // And both shut down although tenant A's Redis call is still blocked.
  for (auto& line : lines_with(r.out, "stopped "))
    EXPECT_EQ(field(line, "ok"), "1") << line;
  EXPECT_EQ(lines_with(r.out, "stopped ").size(), 2u) << r.out;
}

INSTANTIATE_TEST_SUITE_P(Builds, EmbedHost,
                         ::testing::Values(std::string{QSP_HOST_PACKAGE_BIN},
                                           std::string{QSP_HOST_SUBPROJECT_BIN}),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.index == 0 ? std::string{"InstalledPackage"}
                                                  : std::string{"Subproject"};
                         });

} // namespace
