// The lifecycle a host relies on (docs/DESIGN.md §13): status pushes that name the
// projection, typed subscribers that are monitored and removable, and a
// shutdown that answers only once every child and all of the projection's
// I/O has stopped, bounded by projection.shutdown-timeout.
#define CAF_SUITE lifecycle

#include "actors/supervisor.hpp"
#include "tests/actor/fixture.hpp"

using namespace qsp;
using namespace qsp::test;

namespace {

struct fixture : projection_fixture {

  supervisor_state& sup() {
    return deref<std::remove_pointer_t<supervisor_actor::stateful_pointer<supervisor_state>>>(
             caf::actor_cast<supervisor_actor>(proj))
      .state;
  }

  /// Sends `shutdown` from a helper actor; the answer lands in the result.
  std::shared_ptr<std::optional<caf::expected<caf::ok_atom>>> request_shutdown() {
    auto res = std::make_shared<std::optional<caf::expected<caf::ok_atom>>>();
    sys.spawn(prober<caf::ok_atom, atom::shutdown>, res, proj, atom::shutdown_v);
    return res;
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(lifecycle_tests, fixture)

CAF_TEST(status pushes name the topic and namespace of the projection) {
  settings.ns = "tenant-ns";
  world->ns = "tenant-ns";
  fill(0, 5);
  start();
  CAF_REQUIRE(drive_to("ready"));
  CAF_REQUIRE(!seen->empty());
  for (auto& s : *seen) {
    CAF_CHECK_EQUAL(s.topic, settings.topic);
    CAF_CHECK_EQUAL(s.ns, "tenant-ns");
  }
  auto st = status();
  CAF_REQUIRE(st);
  CAF_CHECK_EQUAL(st->topic, settings.topic);
  CAF_CHECK_EQUAL(st->ns, "tenant-ns");
}

CAF_TEST(a subscriber that terminates is dropped and an unsubscribed one hears nothing more) {
  fill(0, 5);
  start();
  run_jobs();
  auto second = std::make_shared<std::vector<projection_status>>();
  auto l2 = sys.spawn(status_recorder, second);
  qsp::mail(self, atom::subscribe_v, caf::actor_cast<status_listener>(l2)).send(proj);
  qsp::mail(self, atom::subscribe_v, caf::actor_cast<status_listener>(l2)).send(proj); // once only
  run_jobs();
  CAF_CHECK_EQUAL(sup().subscribers.size(), 2u);
  caf::anon_send_exit(l2, caf::exit_reason::user_shutdown);
  run_jobs();
  CAF_CHECK_EQUAL(sup().subscribers.size(), 1u);
  // Unsubscribe the fixture's listener: no push reaches it afterwards.
  qsp::mail(self, atom::unsubscribe_v, caf::actor_cast<status_listener>(listener)).send(proj);
  run_jobs();
  CAF_CHECK_EQUAL(sup().subscribers.size(), 0u);
  auto heard = seen->size();
  CAF_REQUIRE(drive([&] { return sup().state == "ready"; }));
  CAF_CHECK_EQUAL(seen->size(), heard);
}

CAF_TEST(shutdown answers once every child is down and the io token is released) {
  auto before = sys.registry().running();
  auto io = std::make_shared<int>(0);
  fill(0, 5);
  auto opts = deterministic();
  opts.io = io;
  start(opts);
  CAF_REQUIRE(drive_to("ready"));
  auto res = request_shutdown();
  run_jobs();
  // Every child is down, but the I/O is still held: no answer yet.
  CAF_CHECK(!*res);
  CAF_CHECK_EQUAL(sup().dying.size(), 0u);
  CAF_CHECK_EQUAL(state(), "stopped");
  auto pull = this->pull("u1", 10);
  CAF_CHECK(!pull);
  run_for(1s);
  CAF_CHECK(!*res);
  io.reset(); // the last connection closed
  run_for(50ms);
  CAF_REQUIRE(*res);
  CAF_CHECK(static_cast<bool>(**res));
  CAF_CHECK_EQUAL(sys.registry().running(), before + 1); // the listener
  proj = nullptr;
}

CAF_TEST(shutdown answers an error naming what is left at the deadline) {
  auto io = std::make_shared<int>(0);
  fill(0, 5);
  settings.shutdown_timeout = 2s;
  auto opts = deterministic();
  opts.io = io;
  start(opts);
  CAF_REQUIRE(drive_to("ready"));
  auto res = request_shutdown();
  run_for(1900ms);
  CAF_CHECK(!*res);
  run_for(200ms);
  CAF_REQUIRE(*res);
  CAF_REQUIRE(!**res);
  auto err = (*res)->error();
  CAF_CHECK_EQUAL(static_cast<ec>(err.code()), ec::shutting_down);
  CAF_CHECK(contains(describe(err), "projection.shutdown-timeout"));
  CAF_CHECK(contains(describe(err), "I/O still open"));
  proj = nullptr;
}

CAF_TEST(a second shutdown request is answered too) {
  fill(0, 5);
  start();
  CAF_REQUIRE(drive_to("ready"));
  auto a = request_shutdown();
  auto b = request_shutdown();
  run_for(50ms);
  CAF_REQUIRE(*a);
  CAF_REQUIRE(*b);
  CAF_CHECK(static_cast<bool>(**a));
  CAF_CHECK(static_cast<bool>(**b));
  proj = nullptr;
}

CAF_TEST(errors of the qsp category render by name) {
  auto err = caf::make_error(ec::invalid_config, "projection.partition-count: required");
  auto text = sys.render(err);
  CAF_CHECK(contains(text, "invalid_config"));
  CAF_CHECK(contains(text, "projection.partition-count: required"));
}

CAF_TEST_FIXTURE_SCOPE_END()
