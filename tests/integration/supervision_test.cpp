// Supervision a host can rely on, against real services: the projection is
// embedded in a host's actor_system; whatever ends it (an exit message, a
// linked host actor's death) ends every child and interrupts their blocking
// Redis calls, so the host's actor_system shuts down although Redis is frozen
// and the command timeout is far away.
#include <signal.h>

#include <gtest/gtest.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include "caf/all.hpp"

#include "qsession/projection.hpp"
#include "kafka/producer.hpp"
#include "qsession/projection/projection.hpp"
#include "tests/support/integration.hpp"

using namespace qsp;
using namespace std::chrono_literals;
using test::eventually;

namespace {

struct host_config : caf::actor_system_config {
  host_config() { register_types(*this); }
};

enum class ending { exit_message, linked_host_dies };

void end_with_redis_frozen(ending how) {
  test::private_redis redis{"supervision", {}};
  ASSERT_TRUE(redis.wait_ready());
  auto topic = test::unique_name("supervision");
  auto ns = test::unique_name("ns");
  auto convs = test::unique_name("convs") + ":";
  test::create_topic(topic, 1);
  auto prod = kafka::producer::make(test::kafka_client());
  ASSERT_TRUE(prod);
  for (uint64_t i = 0; i < 50; ++i)
    ASSERT_TRUE(prod->send(topic, 0, core::encode_json(test::make_dispatch(i, 20))));
  ASSERT_TRUE(prod->flush());

  auto ps = test::projection_settings_for(topic, 1, ns, convs);
  ps.redis.port = redis.port;
  // Far beyond the test: only the interrupt can end the calls.
  ps.redis.command_timeout = 120s;

  host_config cfg;
  auto sys = std::make_unique<caf::actor_system>(cfg);
  auto proj = spawn_projection(*sys, ps);
  ASSERT_TRUE(proj) << describe(proj.error());
  auto ask_ready = [&] {
    caf::scoped_actor self{*sys};
    bool ready = false;
    self->request(*proj, 5s, atom::status_v)
      .receive([&](const projection_status& st) { ready = st.ready; }, [](caf::error&) {});
    return ready;
  };
  ASSERT_TRUE(eventually(ask_ready, 60s)) << "the embedded projection never became ready";

  caf::actor host;
  if (how == ending::linked_host_dies) {
    auto target = caf::actor_cast<caf::actor>(*proj);
    host = sys->spawn([target](caf::event_based_actor* self) -> caf::behavior {
      self->link_to(target);
      return {[](int) {}};
    });
  }
  {
    test::pause_guard frozen{redis.pid};
    // More records, and a PULL: the writer and the reader now wait on Redis.
    for (uint64_t i = 50; i < 80; ++i)
      ASSERT_TRUE(prod->send(topic, 0, core::encode_json(test::make_dispatch(i, 20))));
    ASSERT_TRUE(prod->flush());
    caf::anon_send(*proj, atom::pull_v, std::string{"u1"}, uint32_t{10});
    auto before = std::chrono::steady_clock::now();
    if (how == ending::exit_message)
      caf::anon_send_exit(*proj, caf::exit_reason::user_shutdown);
    else
      caf::anon_send_exit(host, caf::exit_reason::kill);
    // Every actor ends although Redis stays frozen: the blocking calls were
    // interrupted, not timed out (the timeouts are 120 s).
    EXPECT_TRUE(eventually([&] { return sys->registry().running() == 0; }, 30s))
      << sys->registry().running() << " actors still running with Redis frozen";
    proj = caf::error{};
    host = nullptr;
    sys.reset(); // the host's teardown returns, with Redis still frozen
    auto took = std::chrono::steady_clock::now() - before;
    std::printf("projection and actor system ended in %lld ms with Redis frozen\n",
                static_cast<long long>(
                  std::chrono::duration_cast<std::chrono::milliseconds>(took).count()));
    EXPECT_TRUE(frozen.paused());
  }
  auto admin = kafka::admin::make(test::kafka_client());
  (*admin)->delete_topic(topic);
}

} // namespace

TEST(Supervision, AnExitMessageEndsEveryChildAndBlockingCall) {
  end_with_redis_frozen(ending::exit_message);
}

TEST(Supervision, ALinkedHostActorThatDiesEndsEveryChildAndBlockingCall) {
  end_with_redis_frozen(ending::linked_host_dies);
}

/// A host's sink: keeps every formatted line.
class line_sink : public spdlog::sinks::base_sink<std::mutex> {
public:
  std::string text() {
    std::lock_guard<std::mutex> guard{mtx_};
    return text_;
  }

protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t buf;
    formatter_->format(msg, buf);
    std::lock_guard<std::mutex> guard{mtx_};
    text_.append(buf.data(), buf.size());
  }
  void flush_() override {}

private:
  std::mutex mtx_;
  std::string text_;
};

// The host's logger gets every line of the projection, librdkafka's own
// included, each tagged with topic and namespace; nothing goes through
// spdlog's registry or default logger.
TEST(Supervision, LibrdkafkaLogsGoToTheHostsLoggerTaggedWithTheProjection) {
  auto topic = test::unique_name("logs");
  auto ns = test::unique_name("ns");
  auto ps = test::projection_settings_for(topic, 1, ns, test::unique_name("convs") + ":");
  ps.kafka.bootstrap_servers = "127.0.0.1:" + std::to_string(test::free_port()); // nobody there
  ps.kafka.timeout = 1s;
  auto sink = std::make_shared<line_sink>();
  auto logger = std::make_shared<spdlog::logger>("host-logger", sink);
  logger->set_level(spdlog::level::debug);
  auto registered_before = spdlog::get("qsp");
  host_config cfg;
  {
    caf::actor_system sys{cfg};
    auto proj = spawn_projection(sys, ps, spawn_options{logger, nullptr});
    ASSERT_TRUE(proj) << describe(proj.error());
    auto text = [&] { return sink->text(); };
    EXPECT_TRUE(eventually([&] { return text().find("librdkafka") != std::string::npos; }, 30s))
      << text();
    caf::scoped_actor self{sys};
    self->request(*proj, 30s, atom::shutdown_v).receive([](caf::ok_atom) {}, [](caf::error&) {});
    auto tag = "[" + topic + " " + ns + "] ";
    std::istringstream lines{text()};
    int n = 0;
    for (std::string line; std::getline(lines, line); ++n)
      EXPECT_NE(line.find(tag), std::string::npos) << "untagged: " << line;
    EXPECT_GT(n, 0);
  }
  EXPECT_EQ(spdlog::get("qsp"), registered_before);
}
