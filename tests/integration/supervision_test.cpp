// Supervision a host can rely on, against real services: the projection is
// embedded in a host's actor_system; whatever ends it (an exit message, a
// linked host actor's death) ends every child and interrupts their blocking
// Redis calls, so the host's actor_system shuts down although Redis is frozen
// and the command timeout is far away.
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <vector>

#include <gtest/gtest.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include "caf/actor_registry.hpp"
#include "caf/all.hpp"

#include "actors/projection.hpp"
#include "adapters/real_ports.hpp"
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
    qsp::mail(self, atom::status_v).request(*proj, 5s)
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
    qsp::anon_mail(atom::pull_v, std::string{"u1"}, uint32_t{10}).send(*proj);
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

namespace {

/// The broker calls of one side of the ports: how many began, and how each
/// ended (describe() of the error, "" for success).
struct broker_calls {
  std::atomic<int> entered{0};
  std::mutex mtx;
  std::vector<caf::error> ended;
  template <class T>
  T done(T result) {
    std::lock_guard<std::mutex> g{mtx};
    ended.push_back(result ? caf::error{} : result.error());
    return result;
  }
  std::vector<caf::error> results() {
    std::lock_guard<std::mutex> g{mtx};
    return ended;
  }
};

class watched_inspector final : public broker_inspector {
public:
  watched_inspector(std::unique_ptr<broker_inspector> inner, std::shared_ptr<broker_calls> calls)
    : inner_(std::move(inner)), calls_(std::move(calls)) {}
  caf::expected<broker_state> inspect(const std::string& topic) override {
    ++calls_->entered;
    return calls_->done(inner_->inspect(topic));
  }
  caf::expected<broker_state> identity(const std::string& topic) override {
    ++calls_->entered;
    return calls_->done(inner_->identity(topic));
  }
  void interrupt() override { inner_->interrupt(); }

private:
  std::unique_ptr<broker_inspector> inner_;
  std::shared_ptr<broker_calls> calls_;
};

class watched_log final : public dispatch_log {
public:
  watched_log(std::shared_ptr<dispatch_log> inner, std::shared_ptr<broker_calls> calls)
    : inner_(std::move(inner)), calls_(std::move(calls)) {}
  caf::expected<void> start(const std::map<int32_t, int64_t>& starts,
                            const std::map<int32_t, int32_t>& epochs) override {
    ++calls_->entered;
    return calls_->done(inner_->start(starts, epochs));
  }
  caf::expected<void> add(const std::map<int32_t, int64_t>& starts,
                          const std::map<int32_t, int32_t>& epochs) override {
    ++calls_->entered;
    return calls_->done(inner_->add(starts, epochs));
  }
  caf::expected<void> remove(const std::vector<int32_t>& ps) override { return inner_->remove(ps); }
  std::shared_ptr<partition_reader> reader(int32_t p) override { return inner_->reader(p); }
  int64_t log_end(int32_t p) override { return inner_->log_end(p); }
  void interrupt() override { inner_->interrupt(); }

private:
  std::shared_ptr<dispatch_log> inner_;
  std::shared_ptr<broker_calls> calls_;
};

/// Real ports with the inspector and the dispatch log taken from the ports
/// given for each, their broker calls watched.
class split_ports final : public port_factory {
public:
  std::shared_ptr<port_factory> inspection, log, redis;
  std::shared_ptr<broker_calls> inspector_calls = std::make_shared<broker_calls>();
  std::shared_ptr<broker_calls> log_calls = std::make_shared<broker_calls>();

  caf::expected<std::unique_ptr<broker_inspector>> make_inspector() override {
    auto made = inspection->make_inspector();
    if (!made)
      return made.error();
    return std::unique_ptr<broker_inspector>{
      new watched_inspector(std::move(*made), inspector_calls)};
  }
  caf::expected<std::shared_ptr<dispatch_log>> make_dispatch_log() override {
    auto made = log->make_dispatch_log();
    if (!made)
      return made.error();
    return std::shared_ptr<dispatch_log>{std::make_shared<watched_log>(*made, log_calls)};
  }
  caf::expected<std::unique_ptr<checkpoint_store>> make_checkpoint_store() override {
    return redis->make_checkpoint_store();
  }
  caf::expected<std::unique_ptr<session_store>> make_session_store() override {
    return redis->make_session_store();
  }
  caf::expected<std::unique_ptr<cluster_store>> make_cluster_store() override {
    return redis->make_cluster_store();
  }
};

enum class dark { everything, the_log };

// Issue 25: a shutdown while the projection waits on a broker that never
// answers.  The Kafka calls are interrupted, so `shutdown` answers ok within
// projection.shutdown-timeout (2 s) with every librdkafka handle gone,
// although kafka.timeout-ms (30 s) is far away.
void shutdown_while_the_broker_is_black_holed(dark what) {
  test::black_hole hole;
  auto topic = test::unique_name("black-holed");
  auto ns = test::unique_name("ns");
  auto convs = test::unique_name("convs") + ":";
  test::create_topic(topic, 2);
  auto ps = test::projection_settings_for(topic, 2, ns, convs);
  ps.kafka.timeout = 30s;
  ps.shutdown_timeout = 2s;
  auto blind = ps;
  blind.kafka.bootstrap_servers = hole.address();
  // The projection's I/O token: every handle and connection holds it.
  auto io = std::make_shared<int>(0);
  std::weak_ptr<void> io_left = io;
  real_ports_options ro;
  ro.io = io;
  auto ports = std::make_shared<split_ports>();
  ports->redis = make_real_ports(ps, ro);
  ports->log = make_real_ports(blind, ro);
  // everything: the verifier waits in the inspection; the_log: the real
  // broker answers it, and the verifier waits in the consumer's start().
  ports->inspection = what == dark::everything ? ports->log : ports->redis;
  ro.io.reset();
  io.reset();
  auto waiting = what == dark::everything ? ports->inspector_calls : ports->log_calls;

  host_config cfg;
  auto sys = std::make_unique<caf::actor_system>(cfg);
  projection_options opts;
  opts.io = io_left;
  auto proj = spawn_projection(*sys, ps, ports, std::make_shared<core::json_decoder>(),
                               std::make_shared<metrics>(), opts);
  ports.reset();
  ASSERT_TRUE(proj) << describe(proj.error());
  ASSERT_TRUE(eventually([&] { return waiting->entered.load() > 0; }, 30s))
    << "the projection never called the black-holed broker";
  EXPECT_TRUE(waiting->results().empty()) << "the broker call returned";
  EXPECT_GT(hole.accepted(), 0);
  auto self = std::make_unique<caf::scoped_actor>(*sys);
  // What the node claims meanwhile: verifying, not ready.
  qsp::mail(*self, atom::status_v).request(*proj, 5s)
    .receive(
      [&](const projection_status& st) {
        EXPECT_EQ(st.state, "verifying");
        EXPECT_FALSE(st.ready);
      },
      [&](caf::error& err) { ADD_FAILURE() << "status: " << describe(err); });

  auto before = std::chrono::steady_clock::now();
  caf::error answer = caf::make_error(ec::unspecified, "no answer");
  qsp::mail(*self, atom::shutdown_v).request(*proj, 60s)
    .receive([&](caf::ok_atom) { answer = caf::error{}; }, [&](caf::error& err) { answer = err; });
  auto took = std::chrono::steady_clock::now() - before;
  std::printf("shutdown answered in %lld ms with the broker black-holed\n",
              static_cast<long long>(
                std::chrono::duration_cast<std::chrono::milliseconds>(took).count()));
  EXPECT_FALSE(answer) << describe(answer);
  EXPECT_LT(took, ps.shutdown_timeout);
  // Every handle and connection is gone: `shutdown` waited for it.
  EXPECT_TRUE(io_left.expired());
  // The waiting call ended interrupted, not timed out.
  auto ended = waiting->results();
  ASSERT_EQ(ended.size(), 1u);
  ASSERT_TRUE(ended[0]);
  EXPECT_EQ(static_cast<ec>(ended[0].code()), ec::shutting_down) << describe(ended[0]);
  self.reset();
  proj = caf::error{};
  sys.reset();
  auto admin = kafka::admin::make(test::kafka_client());
  (*admin)->delete_topic(topic);
}

} // namespace

TEST(Supervision, ShutdownWhileTheInspectionWaitsOnABlackHoledBroker) {
  shutdown_while_the_broker_is_black_holed(dark::everything);
}

TEST(Supervision, ShutdownWhileTheConsumersStartWaitsOnABlackHoledBroker) {
  shutdown_while_the_broker_is_black_holed(dark::the_log);
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
    auto proj = spawn_projection(sys, ps, spawn_options{logger, nullptr, {}});
    ASSERT_TRUE(proj) << describe(proj.error());
    auto text = [&] { return sink->text(); };
    EXPECT_TRUE(eventually([&] { return text().find("librdkafka") != std::string::npos; }, 30s))
      << text();
    caf::scoped_actor self{sys};
    qsp::mail(self, atom::shutdown_v).request(*proj, 30s).receive([](caf::ok_atom) {}, [](caf::error&) {});
    auto tag = "[" + topic + " " + ns + "] ";
    std::istringstream lines{text()};
    int n = 0;
    for (std::string line; std::getline(lines, line); ++n)
      EXPECT_NE(line.find(tag), std::string::npos) << "untagged: " << line;
    EXPECT_GT(n, 0);
  }
  EXPECT_EQ(spdlog::get("qsp"), registered_before);
}
