// The lifecycle a host relies on (docs/DESIGN.md §13): status pushes that name the
// projection, typed subscribers that are monitored and removable, and a
// shutdown that answers only once every child and all of the projection's
// I/O has stopped, bounded by projection.shutdown-timeout.
#include "actors/supervisor.hpp"
#include "tests/actor/fixture.hpp"

using namespace qsp;
using namespace qsp::test;

namespace {

struct Lifecycle : projection_fixture {

  supervisor_state& sup() {
    return state_of(
      deref<std::remove_pointer_t<supervisor_actor::stateful_pointer<supervisor_state>>>(
        caf::actor_cast<supervisor_actor>(proj)));
  }

  /// Sends `shutdown` from a helper actor; the answer lands in the result.
  std::shared_ptr<std::optional<caf::expected<caf::ok_atom>>> request_shutdown() {
    auto res = std::make_shared<std::optional<caf::expected<caf::ok_atom>>>();
    sys.spawn(prober<caf::ok_atom, atom::shutdown>, res, proj, atom::shutdown_v);
    return res;
  }
};

} // namespace

TEST_F(Lifecycle, StatusPushesNameTheTopicAndNamespaceOfTheProjection) {
  settings.ns = "tenant-ns";
  world->ns = "tenant-ns";
  fill(0, 5);
  start();
  ASSERT_TRUE(drive_to("ready"));
  ASSERT_TRUE(!seen->empty());
  for (auto& s : *seen) {
    EXPECT_EQ(s.topic, settings.topic);
    EXPECT_EQ(s.ns, "tenant-ns");
  }
  auto st = status();
  ASSERT_TRUE(st);
  EXPECT_EQ(st->topic, settings.topic);
  EXPECT_EQ(st->ns, "tenant-ns");
}

TEST_F(Lifecycle, ASubscriberThatTerminatesIsDroppedAndAnUnsubscribedOneHearsNothingMore) {
  fill(0, 5);
  start();
  run_jobs();
  auto second = std::make_shared<std::vector<projection_status>>();
  auto l2 = sys.spawn(status_recorder, second);
  qsp::mail(self, atom::subscribe_v, caf::actor_cast<status_listener>(l2)).send(proj);
  qsp::mail(self, atom::subscribe_v, caf::actor_cast<status_listener>(l2)).send(proj); // once only
  run_jobs();
  EXPECT_EQ(sup().subscribers.size(), 2u);
  caf::anon_send_exit(l2, caf::exit_reason::user_shutdown);
  run_jobs();
  EXPECT_EQ(sup().subscribers.size(), 1u);
  // Unsubscribe the fixture's listener: no push reaches it afterwards.
  qsp::mail(self, atom::unsubscribe_v, caf::actor_cast<status_listener>(listener)).send(proj);
  run_jobs();
  EXPECT_EQ(sup().subscribers.size(), 0u);
  auto heard = seen->size();
  ASSERT_TRUE(drive([&] { return sup().state == "ready"; }));
  EXPECT_EQ(seen->size(), heard);
}

TEST_F(Lifecycle, ShutdownAnswersOnceEveryChildIsDownAndTheIoTokenIsReleased) {
  auto before = sys.registry().running();
  auto io = std::make_shared<int>(0);
  fill(0, 5);
  auto opts = deterministic();
  opts.io = io;
  start(opts);
  ASSERT_TRUE(drive_to("ready"));
  auto res = request_shutdown();
  run_jobs();
  // Every child is down, but the I/O is still held: no answer yet.
  EXPECT_TRUE(!*res);
  EXPECT_EQ(sup().dying.size(), 0u);
  EXPECT_EQ(state(), "stopped");
  auto pull = this->pull("u1", 10);
  EXPECT_TRUE(!pull);
  run_for(1s);
  EXPECT_TRUE(!*res);
  io.reset(); // the last connection closed
  run_for(50ms);
  ASSERT_TRUE(*res);
  EXPECT_TRUE(static_cast<bool>(**res));
  EXPECT_EQ(sys.registry().running(), before + 1); // the listener
  proj = nullptr;
}

TEST_F(Lifecycle, ShutdownAnswersAnErrorNamingWhatIsLeftAtTheDeadline) {
  auto io = std::make_shared<int>(0);
  fill(0, 5);
  settings.shutdown_timeout = 2s;
  auto opts = deterministic();
  opts.io = io;
  start(opts);
  ASSERT_TRUE(drive_to("ready"));
  auto res = request_shutdown();
  run_for(1900ms);
  EXPECT_TRUE(!*res);
  run_for(200ms);
  ASSERT_TRUE(*res);
  ASSERT_TRUE(!**res);
  auto err = (*res)->error();
  EXPECT_EQ(code_of(err), ec::shutting_down) << describe(err);
  EXPECT_TRUE(contains(describe(err), "projection.shutdown-timeout"));
  EXPECT_TRUE(contains(describe(err), "I/O still open"));
  proj = nullptr;
}

TEST_F(Lifecycle, ASecondShutdownRequestIsAnsweredToo) {
  fill(0, 5);
  start();
  ASSERT_TRUE(drive_to("ready"));
  auto a = request_shutdown();
  auto b = request_shutdown();
  run_for(50ms);
  ASSERT_TRUE(*a);
  ASSERT_TRUE(*b);
  EXPECT_TRUE(static_cast<bool>(**a));
  EXPECT_TRUE(static_cast<bool>(**b));
  proj = nullptr;
}

TEST_F(Lifecycle, ErrorsOfTheQspCategoryRenderByName) {
  auto err = caf::make_error(ec::invalid_config, "projection.partition-count: required");
  auto text = render_error(sys, err);
  EXPECT_TRUE(contains(text, "invalid_config"));
  EXPECT_TRUE(contains(text, "projection.partition-count: required"));
}
