// The option helpers a host uses (qsession/projection/options.hpp): the
// projection's keys under a group the host names, read back into one
// validated settings struct, errors naming the full key.
#define CAF_SUITE options

#include "caf/all.hpp"
#include "caf/test/dsl.hpp"

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

CAF_TEST(options under a host group fill one settings struct) {
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
  CAF_REQUIRE(s);
  CAF_CHECK_EQUAL(cfg.own_redis, "the-hosts-own");
  CAF_CHECK_EQUAL(s->topic, "dispatch");
  CAF_CHECK_EQUAL(s->partition_count, 12);
  CAF_CHECK_EQUAL(s->ns, "t1");
  CAF_CHECK_EQUAL(s->convs_prefix, "t1:convs:");
  CAF_CHECK_EQUAL(s->redis.host, "10.0.0.9");
  CAF_CHECK_EQUAL(s->redis.port, 6380);
  CAF_CHECK_EQUAL(s->redis.command_timeout.count(), 750);
  CAF_CHECK(s->redis.allow_eviction);
  CAF_CHECK_EQUAL(s->kafka.bootstrap_servers, "b1:9092,b2:9092");
  CAF_REQUIRE_EQUAL(s->kafka.properties.size(), 1u);
  CAF_CHECK_EQUAL(s->kafka.properties[0].first, "security.protocol");
  CAF_CHECK_EQUAL(s->kafka.properties[0].second, "ssl");
  CAF_CHECK(s->shutdown_timeout == std::chrono::seconds(3));
  // Defaults where nothing was given.
  CAF_CHECK_EQUAL(s->max_batch_records, 5000u);
  CAF_CHECK(s->identity_check_interval == std::chrono::seconds(1));
}

CAF_TEST(errors name the full key under the host group) {
  {
    host_config cfg;
    auto s = parse({"--sessions.projection.dispatch-topic=d"}, cfg);
    CAF_REQUIRE(!s);
    CAF_CHECK(contains(describe(s.error()), "sessions.projection.partition-count"));
    CAF_CHECK_EQUAL(static_cast<ec>(s.error().code()), ec::invalid_config);
  }
  {
    host_config cfg;
    auto s = parse({"--sessions.projection.dispatch-topic=d",
                    "--sessions.projection.partition-count=3",
                    "--sessions.projection.identity-check-interval=1s",
                    "--sessions.projection.identity-check-min-gap=2s"},
                   cfg);
    CAF_REQUIRE(!s);
    CAF_CHECK(contains(describe(s.error()), "sessions.projection.identity-check-min-gap"));
  }
  {
    host_config cfg;
    auto s = parse({"--sessions.projection.dispatch-topic=d",
                    "--sessions.projection.partition-count=3",
                    "--sessions.kafka.properties=[\"novalue\"]"},
                   cfg);
    CAF_REQUIRE(!s);
    CAF_CHECK(contains(describe(s.error()), "sessions.kafka.properties"));
  }
}

CAF_TEST(settings made in code are validated the same way) {
  projection_settings s;
  s.topic = "t";
  s.partition_count = 1;
  CAF_CHECK(!s.validate());
  s.redis.command_timeout = std::chrono::milliseconds(0);
  CAF_CHECK(contains(describe(s.validate()), "redis.command-timeout"));
  s.redis.command_timeout = std::chrono::milliseconds(5000);
  s.convs_prefix.clear();
  CAF_CHECK(contains(describe(s.validate()), "projection.convs-prefix"));
}
