// The reader conformance suite (qsession/projection/reader_conformance.hpp)
// against the real broker, for the two readers the product ships: its own
// librdkafka reader and the example reader a host would write
// (examples/reader).  The leader change of the epoch check is a broker
// restart (scripts/services restart-kafka), as in leader_epoch_test.cpp.
#include <gtest/gtest.h>

#include <qsession/projection/reader_conformance.hpp>

#include "example_reader.hpp"
#include "kafka/admin.hpp"
#include "kafka/dispatch_log_consumer.hpp"
#include "tests/support/integration.hpp"

using namespace qsp;

namespace {

conformance::broker real_broker() {
  conformance::broker b;
  auto c = test::kafka_client();
  b.bootstrap_servers = c.bootstrap_servers;
  b.properties = c.properties;
  b.topic_prefix = test::unique_name("conf");
  b.change_leader = [c](const std::string& topic) -> caf::error {
    if (test::sh(QSP_SOURCE_DIR "/scripts/services restart-kafka >/dev/null 2>&1") != 0)
      return caf::make_error(ec::kafka_unavailable, "scripts/services restart-kafka failed");
    // Until the restarted broker serves the topic again.
    auto admin = kafka::admin::make(c);
    if (!admin)
      return admin.error();
    if (!test::eventually([&] { return static_cast<bool>((*admin)->inspect(topic)); }))
      return caf::make_error(ec::kafka_unavailable, "the restarted broker does not serve " + topic);
    return caf::error{};
  };
  return b;
}

/// Every check passed (none skipped: the broker restart changes the leader).
void expect_conformant(const std::vector<conformance::check_result>& results) {
  ASSERT_EQ(results.size(), 10u);
  for (auto& r : results) {
    EXPECT_EQ(r.result, conformance::outcome::passed) << r;
    std::cout << r << '\n';
  }
}

} // namespace

TEST(ReaderConformance, TheProductsOwnReaderConforms) {
  auto results = conformance::run(
    [](const std::string& topic,
       const std::string& servers) -> caf::expected<std::shared_ptr<dispatch_log>> {
      kafka::dispatch_log_consumer_config cfg;
      cfg.client = test::kafka_client();
      cfg.client.bootstrap_servers = servers;
      cfg.client.timeout_ms = 5000;
      cfg.topic = topic;
      auto c = kafka::dispatch_log_consumer::make(cfg);
      if (!c)
        return c.error();
      return std::shared_ptr<dispatch_log>{std::move(*c)};
    },
    real_broker());
  expect_conformant(results);
}

TEST(ReaderConformance, TheExampleReaderConforms) {
  auto results = conformance::run(
    [](const std::string& topic, const std::string& servers) {
      example::reader_config cfg;
      cfg.bootstrap_servers = servers;
      cfg.properties = test::kafka_client().properties;
      cfg.topic = topic;
      cfg.timeout = std::chrono::milliseconds(5000);
      return example::make_reader(cfg);
    },
    real_broker());
  expect_conformant(results);
}

// The suite catches a reader that drops the stored epochs (it would read a
// truncated log on): the truncation check fails, naming what it read.
TEST(ReaderConformance, AReaderThatIgnoresTheStoredEpochsFailsTheTruncationCheck) {
  struct epoch_dropping final : dispatch_log {
    std::shared_ptr<dispatch_log> inner;
    caf::expected<void> start(const std::map<int32_t, int64_t>& starts,
                              const std::map<int32_t, int32_t>&) override {
      return inner->start(starts, {});
    }
    std::shared_ptr<partition_reader> reader(int32_t p) override { return inner->reader(p); }
    void interrupt() override { inner->interrupt(); }
  };
  auto results = conformance::run(
    [](const std::string& topic,
       const std::string& servers) -> caf::expected<std::shared_ptr<dispatch_log>> {
      example::reader_config cfg;
      cfg.bootstrap_servers = servers;
      cfg.topic = topic;
      cfg.timeout = std::chrono::milliseconds(5000);
      auto r = example::make_reader(cfg);
      if (!r)
        return r.error();
      auto wrong = std::make_shared<epoch_dropping>();
      wrong->inner = *r;
      return std::shared_ptr<dispatch_log>{wrong};
    },
    real_broker(), "truncation");
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].result, conformance::outcome::failed) << results[0];
  EXPECT_NE(results[0].detail.find("was read"), std::string::npos) << results[0];
}
