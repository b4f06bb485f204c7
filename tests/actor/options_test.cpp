// The option helpers a host uses (qsession/projection/options.hpp): the
// projection's keys under a group the host names, read back into one
// validated settings struct, errors naming the full key.
#include <gtest/gtest.h>

#include "caf/all.hpp"

#include "qsession/projection/options.hpp"
#include "qsession/projection/projection.hpp"

using namespace qsp;

namespace {

struct host_config : caf::actor_system_config {
  std::string own_redis = "cache";
  host_config() {
    register_types(*this);
    opt_group{custom_options_, "redis"}.add(own_redis, "host", "the host's own Redis");
    add_options(custom_options_, "sessions");
  }
};

caf::expected<projection_settings> parse(std::vector<std::string> args,
                                         host_config& cfg) {
  std::vector<char*> argv{const_cast<char*>("host")};
  for (auto& a : args)
    argv.push_back(a.data());
  if (auto err = cfg.parse(static_cast<int>(argv.size()), argv.data()))
    return err;
  return read_settings(cfg.content, "sessions");
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

} // namespace

TEST(Options, OptionsUnderAHostGroupFillOneSettingsStruct) {
  host_config cfg;
  auto s = parse({"--redis.host=the-hosts-own", "--sessions.projection.dispatch-topic=dispatch",
                  "--sessions.projection.partition-count=12", "--sessions.projection.namespace=t1",
                  "--sessions.projection.convs-prefix=t1:convs:",
                  "--sessions.redis.host=10.0.0.9", "--sessions.redis.port=6380",
                  "--sessions.redis.command-timeout=750ms", "--sessions.redis.allow-eviction",
                  "--sessions.kafka.bootstrap-servers=b1:9092,b2:9092",
                  "--sessions.kafka.properties=[\"security.protocol=ssl\"]",
                  "--sessions.projection.shutdown-timeout=3s"},
                 cfg);
  ASSERT_TRUE(s);
  EXPECT_EQ(cfg.own_redis, "the-hosts-own");
  EXPECT_EQ(s->topic, "dispatch");
  EXPECT_EQ(s->partition_count, 12);
  EXPECT_EQ(s->ns, "t1");
  EXPECT_EQ(s->convs_prefix, "t1:convs:");
  EXPECT_EQ(s->redis.host, "10.0.0.9");
  EXPECT_EQ(s->redis.port, 6380);
  EXPECT_EQ(s->redis.command_timeout.count(), 750);
  EXPECT_TRUE(s->redis.allow_eviction);
  EXPECT_EQ(s->kafka.bootstrap_servers, "b1:9092,b2:9092");
  ASSERT_EQ(s->kafka.properties.size(), 1u);
  EXPECT_EQ(s->kafka.properties[0].first, "security.protocol");
  EXPECT_EQ(s->kafka.properties[0].second, "ssl");
  EXPECT_TRUE(s->shutdown_timeout == std::chrono::seconds(3));
  // Defaults where nothing was given.
  EXPECT_EQ(s->max_batch_records, 5000u);
  EXPECT_TRUE(s->identity_check_interval == std::chrono::seconds(1));
}

TEST(Options, ErrorsNameTheFullKeyUnderTheHostGroup) {
  {
    host_config cfg;
    auto s = parse({"--sessions.projection.dispatch-topic=d"}, cfg);
    ASSERT_TRUE(!s);
    EXPECT_TRUE(contains(describe(s.error()), "sessions.projection.partition-count"));
    EXPECT_EQ(code_of(s.error()), ec::invalid_config) << describe(s.error());
  }
  {
    host_config cfg;
    auto s = parse({"--sessions.projection.dispatch-topic=d",
                    "--sessions.projection.partition-count=3",
                    "--sessions.projection.identity-check-interval=1s",
                    "--sessions.projection.identity-check-min-gap=2s"},
                   cfg);
    ASSERT_TRUE(!s);
    EXPECT_TRUE(contains(describe(s.error()), "sessions.projection.identity-check-min-gap"));
  }
  {
    host_config cfg;
    auto s = parse({"--sessions.projection.dispatch-topic=d",
                    "--sessions.projection.partition-count=3",
                    "--sessions.kafka.properties=[\"novalue\"]"},
                   cfg);
    ASSERT_TRUE(!s);
    EXPECT_TRUE(contains(describe(s.error()), "sessions.kafka.properties"));
  }
}

TEST(Options, SettingsMadeInCodeAreValidatedTheSameWay) {
  projection_settings s;
  s.topic = "t";
  s.partition_count = 1;
  EXPECT_TRUE(!s.validate());
  s.redis.command_timeout = std::chrono::milliseconds(0);
  EXPECT_TRUE(contains(describe(s.validate()), "redis.command-timeout"));
  s.redis.command_timeout = std::chrono::milliseconds(5000);
  s.convs_prefix.clear();
  EXPECT_TRUE(contains(describe(s.validate()), "projection.convs-prefix"));
}
