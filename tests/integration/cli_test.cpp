// The operator contract of the binary: --help, bad usage and bad config
// (exit 2 naming the key), unreachable dependencies (exit 4).
#include <fstream>
#include <gtest/gtest.h>

#include "qsession/projection/config.hpp"
#include "tests/support/integration.hpp"

using namespace qsp;

TEST(Cli, HelpListsEverySubcommandAndOptionDefaults) {
  auto r = test::run_cli({"--help"});
  EXPECT_EQ(r.rc, 0);
  for (auto* cmd : {"run", "catch-up", "verify", "inspect", "audit"})
    EXPECT_NE(r.out.find(std::string{"\n  "} + cmd + " "), std::string::npos) << cmd;
  for (auto* key : {"--projection.dispatch-topic", "--projection.partition-count",
                    "--projection.namespace", "--projection.convs-prefix",
                    "--kafka.bootstrap-servers", "--kafka.client-id", "--kafka.group-id",
                    "--kafka.properties", "--redis.host", "--redis.port", "--redis.username",
                    "--redis.password", "--redis.tls", "--http.listen"})
    EXPECT_NE(r.out.find(key), std::string::npos) << key;
  EXPECT_NE(r.out.find("(default: session_projection)"), std::string::npos);
  // Issue 42: what the node refuses (it would print secrets) is not offered.
  EXPECT_EQ(r.out.find("--dump-config"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("--long-help"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--projection.exit-on-refusal"), std::string::npos) << r.out;
  auto v = test::run_cli({"--version"});
  EXPECT_EQ(v.rc, 0);
  EXPECT_EQ(v.out, "qsession-projection " QSP_VERSION_STRING "\n");
}

TEST(Cli, BadUsageAndBadConfigExitTwoNamingTheKey) {
  struct row {
    std::vector<std::string> args;
    std::string expect;
  };
  std::vector<row> rows{
    {{}, "usage"},
    {{"frobnicate"}, "unknown command"},
    {{"verify"}, "projection.partition-count"},
    {{"verify", "--projection.partition-count=3"}, "projection.dispatch-topic"},
    {{"verify", "--projection.dispatch-topic=t", "--projection.partition-count=-1"},
     "projection.partition-count"},
    {{"verify", "--projection.dispatch-topic=t", "--projection.partition-count=1",
      "--redis.port=70000"}, "redis.port"},
    {{"verify", "--projection.dispatch-topic=t", "--projection.partition-count=1",
      "--http.listen=nocolon"}, "http.listen"},
    {{"verify", "--projection.dispatch-topic=t", "--projection.partition-count=1",
      "--kafka.properties=[\"no-equals\"]"}, "kafka.properties"},
    {{"verify", "--projection.dispatch-topic=t", "--projection.partition-count=1",
      "--kafka.properties=[\"bogus.property=1\"]"}, "bogus.property"},
    // The properties the guarantees rest on cannot be overridden.
    {{"verify", "--projection.dispatch-topic=t", "--projection.partition-count=1",
      "--kafka.properties=[\"isolation.level=read_uncommitted\"]"}, "isolation.level is fixed"},
    {{"verify", "--projection.dispatch-topic=t", "--projection.partition-count=1",
      "--kafka.properties=[\"enable.auto.commit=true\"]"}, "enable.auto.commit is fixed"},
    {{"verify", "--projection.dispatch-topic=t", "--projection.partition-count=1",
      "--projection.max-batches-in-flight=0"}, "projection.max-batches-in-flight"},
    {{"verify", "--no-such-option=1"}, "no-such-option"},
    // Issue 42: a value CAF cannot read says what the option takes.
    {{"verify", "--projection.dispatch-topic=t", "--projection.partition-count=1",
      "--redis.command-timeout=5"},
     "--redis.command-timeout=5: \"5\" is not a duration with its unit, e.g. 5s"},
    {{"verify", "--projection.dispatch-topic=t", "--projection.partition-count=1",
      "--redis.port=abc"}, "--redis.port=abc: \"abc\" is not an integer"},
    {{"verify", "--config-file=/nonexistent/x.conf"}, "/nonexistent/x.conf"},
    {{"verify", "--projection.dispatch-topic=t", "--projection.partition-count=1",
      "--redis.password-file=/nonexistent/pw"}, "redis.password-file"},
    {{"verify", "--projection.dispatch-topic=t", "--projection.partition-count=1",
      "--kafka.sasl-password-file=/nonexistent/pw"}, "kafka.sasl-password-file: cannot read"},
    {{"verify", "--projection.dispatch-topic=t", "--projection.partition-count=1",
      "--kafka.sasl-password-file=/dev/null"}, "holds no password"},
    {{"verify", "--projection.dispatch-topic=t", "--projection.partition-count=1",
      "--kafka.sasl-password-file=" QSP_SOURCE_DIR "/README.md",
      "--kafka.properties=[\"sasl.password=x\"]"}, "not both"},
    // A boolean option takes =true/=false besides the bare flag; other values are refused.
    {{"verify", "--projection.dispatch-topic=t", "--projection.partition-count=1",
      "--redis.tls-verify-hostname=maybe"}, "redis.tls-verify-hostname"},
    // Ownership (docs/CLUSTER.md).
    {{"verify", "--projection.dispatch-topic=t", "--projection.partition-count=4",
      "--projection.ownership=leader"}, "projection.ownership: one of all, static, group, host"},
    {{"verify", "--projection.dispatch-topic=t", "--projection.partition-count=4",
      "--projection.ownership=static"}, "projection.partitions: required with"},
    {{"verify", "--projection.dispatch-topic=t", "--projection.partition-count=4",
      "--projection.ownership=static", "--projection.partitions=0-4"}, "outside [0, 3]"},
    {{"verify", "--projection.dispatch-topic=t", "--projection.partition-count=4",
      "--projection.ownership=static", "--projection.partitions=1,1"}, "listed twice"},
    {{"verify", "--projection.dispatch-topic=t", "--projection.partition-count=4",
      "--projection.partitions=1"}, "only with projection.ownership = static"},
    {{"verify", "--projection.dispatch-topic=t", "--projection.partition-count=4",
      "--kafka.session-timeout-ms=10"}, "kafka.session-timeout-ms"},
    {{"catch-up", "--projection.dispatch-topic=t", "--projection.partition-count=4",
      "--projection.ownership=group"}, "catch-up: projection.ownership = group"},
  };
  for (auto& r : rows) {
    auto res = test::run_cli(r.args);
    EXPECT_EQ(res.rc, 2) << r.expect << "\n" << res.err;
    EXPECT_NE((res.err + res.out).find(r.expect), std::string::npos) << res.err;
  }
}

TEST(Cli, TheShippedConfigFilesParse) {
  // Every key in the templates is known and well-formed: what stops the node
  // is the first thing the file leaves to the host (its secrets).
  auto prod = test::run_cli({"verify", "--config-file=" QSP_SOURCE_DIR "/config/production.conf"});
  EXPECT_EQ(prod.rc, 2) << prod.err;
  EXPECT_NE(prod.err.find("/etc/qsession-projection/kafka-password"), std::string::npos) << prod.err;
  auto local = test::run_cli({"verify", "--config-file=" QSP_SOURCE_DIR "/config/local.conf",
                              "--redis.port=70000"});
  EXPECT_EQ(local.rc, 2) << local.err;
  EXPECT_NE(local.err.find("redis.port"), std::string::npos) << local.err;
}

TEST(Cli, UnreachableDependenciesExitFour) {
  auto r = test::run_cli({"verify", "--projection.dispatch-topic=t",
                          "--projection.partition-count=1", "--redis.port=1",
                          "--kafka.timeout-ms=500"});
  EXPECT_EQ(r.rc, 4) << r.err;
  EXPECT_NE(r.err.find("redis 127.0.0.1:1"), std::string::npos) << r.err;
  auto k = test::run_cli({"inspect", "--projection.dispatch-topic=t",
                          "--projection.partition-count=1", "--kafka.bootstrap-servers=127.0.0.1:1",
                          "--redis.port=" + std::to_string(test::env().redis_port),
                          "--kafka.timeout-ms=1000"});
  EXPECT_EQ(k.rc, 4) << k.err;
  auto c = test::run_cli({"catch-up", "--projection.dispatch-topic=t",
                          "--projection.partition-count=1", "--redis.port=1",
                          "--kafka.timeout-ms=500", "--projection.catch-up-max-attempts=2",
                          "--http.listen=off"});
  EXPECT_EQ(c.rc, 4) << c.err;
  EXPECT_NE(c.err.find("giving up"), std::string::npos) << c.err;
}

// A refusal with several problems: each problem is one full log line (the
// logger's timestamp and level), prefixed "refused: " exactly once.
TEST(Cli, RefusalPrintsOneFullLogLinePerProblem) {
  auto topic = test::unique_name("cli-refuse");
  auto ns = test::unique_name("ns");
  test::create_topic(topic, 1);
  auto args = test::node_args(topic, 1, ns, ns + "-convs");
  args.insert(args.begin(), "catch-up");
  auto first = test::run_cli(args);
  ASSERT_EQ(first.rc, 0) << first.err;
  // Two stray checkpoint keys: two problems in one refusal.
  auto c = test::redis_conn();
  for (auto* suffix : {"07", "x"})
    test::redis_cmd(*c, {"HSET", ns + ":checkpoint:" + topic + ":" + suffix, "next_offset", "0"});
  auto r = test::run_cli(args);
  EXPECT_EQ(r.rc, 3) << r.err;
  EXPECT_EQ(r.err.find("refused: refused:"), std::string::npos) << r.err;
  std::vector<std::string> lines;
  size_t pos = 0;
  while (pos < r.err.size()) {
    auto nl = r.err.find('\n', pos);
    auto line = r.err.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    if (line.find("checkpoint key: field key") != std::string::npos)
      lines.push_back(line);
    pos = nl == std::string::npos ? r.err.size() : nl + 1;
  }
  ASSERT_EQ(lines.size(), 2u) << r.err;
  for (auto& line : lines) {
    // spdlog's default pattern: "[2026-12-04 05:40:01.123] [qsp] [error] ..."
    EXPECT_EQ(line.rfind("[20", 0), 0u) << line;
    EXPECT_NE(line.find("[error]"), std::string::npos) << line;
    EXPECT_NE(line.find("] refused: checkpoint key: field key: stored \""), std::string::npos)
      << line;
  }
}

TEST(Cli, AnUnquotedHashTagNamespaceInAConfigFileGetsAHint) {
  auto file = "/tmp/" + test::unique_name("ns") + ".conf";
  std::ofstream{file} << "[projection]\nnamespace = {session_projection}\n";
  auto r = test::run_cli({"verify", "--config-file=" + file});
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("quote a hash-tag namespace"), std::string::npos) << r.err;
  std::remove(file.c_str());
}
