// A host type the host did not register with the kit's actor system
// (kit_options::configure, schedule_host::configure): the kit names the
// type and the hook to register it with, and never crashes.  Its own
// program (qsp_kit_host_types_tests), written as a host writes its tests
// (the public header only): CAF 1.x registers types per process, so no
// other test may register the block `kit_host_unregistered` before these
// run, and nothing in this program ever does.
#include <qsession/projection/testkit.hpp>

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "caf/type_id.hpp"

namespace kit_host {

/// A host's own message types: one the tests never register, and one they
/// register through the kit's hooks.
struct ping {
  std::string who;
};

struct pong {
  std::string who;
};

template <class Inspector>
auto inspect(Inspector& f, ping& x) {
  return qsp::inspect_object(f, x, "kit_host.ping", QSP_FIELD(x, who));
}

template <class Inspector>
auto inspect(Inspector& f, pong& x) {
  return qsp::inspect_object(f, x, "kit_host.pong", QSP_FIELD(x, who));
}

} // namespace kit_host

// Never registered in this program.
CAF_BEGIN_TYPE_ID_BLOCK(kit_host_unregistered, caf::first_custom_type_id + 10)
  CAF_ADD_TYPE_ID(kit_host_unregistered, (kit_host::ping))
CAF_END_TYPE_ID_BLOCK(kit_host_unregistered)

// Registered through kit_options::configure / schedule_host::configure.
CAF_BEGIN_TYPE_ID_BLOCK(kit_host_registered, caf::first_custom_type_id + 20)
  CAF_ADD_TYPE_ID(kit_host_registered, (kit_host::pong))
CAF_END_TYPE_ID_BLOCK(kit_host_registered)

namespace {

using qsp::testkit::kit;
using qsp::testkit::kit_options;
using qsp::testkit::run_schedule;
using qsp::testkit::schedule_options;

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

/// The host's echo: answers a ping or a pong with the name in it.  (CAF
/// 0.17: a function actor gets at least one spawn argument.)
caf::behavior echo(caf::event_based_actor*, int) {
  return {
    [](const kit_host::ping& x) { return "ping " + x.who; },
    [](const kit_host::pong& x) { return "pong " + x.who; },
  };
}

void register_pong(caf::actor_system_config& cfg) {
  qsp::add_type_blocks<caf::id_block::kit_host_registered>(cfg);
}

// What the host team met: a schedule whose host step sends a type it did
// not register ended in a bare segmentation fault (CAF 1.x).  Now the
// schedule fails, naming the type and the hook that registers it.
TEST(KitHostTypes, AnUnregisteredTypeInAHostStepFailsTheScheduleByName) {
  schedule_options o;
  auto front = std::make_shared<caf::actor>();
  auto sent = std::make_shared<size_t>(0);
  o.host.start = [front](kit& k) { *front = k.system().spawn(echo, 0); };
  o.host.step = [front, sent](kit& k, uint64_t draw) {
    ++*sent;
    (void) k.request<std::string>(*front, kit_host::ping{"u" + std::to_string(draw % 8)});
  };
  bool failed = false;
  for (uint64_t seed = 1; seed <= 20 && !failed; ++seed) {
    *sent = 0;
    auto r = run_schedule(seed, 200, o);
    if (*sent == 0) {
      EXPECT_TRUE(r.ok) << r.failure; // no host step drawn: nothing unregistered was sent
      continue;
    }
    failed = true;
    ASSERT_FALSE(r.ok) << r.summary;
    EXPECT_EQ(r.host_steps, 1u) << "the schedule went on after the unregistered type: "
                                << r.failure;
    EXPECT_TRUE(has(r.failure, "kit_host::ping")) << r.failure;
    EXPECT_TRUE(has(r.failure, "schedule_host::configure")) << r.failure;
    EXPECT_TRUE(has(r.failure, "add_type_blocks")) << r.failure;
  }
  EXPECT_TRUE(failed) << "no seed of 20 drew a host step";
}

// The same in a kit: the request answers an error naming the type, the kit
// has failed (every wait stops), and explain() says what to do.
TEST(KitHostTypes, AnUnregisteredTypeInARequestIsAnErrorNamingIt) {
  kit k;
  auto echoer = k.system().spawn(echo, 0);
  auto got = k.request<std::string>(echoer, kit_host::ping{"alice"});
  ASSERT_FALSE(got);
  auto why = qsp::describe(got.error());
  EXPECT_TRUE(has(why, "kit_host::ping")) << why;
  EXPECT_TRUE(has(why, "kit_options::configure")) << why;
  EXPECT_TRUE(k.failed());
  EXPECT_TRUE(has(k.explain(), "kit_host::ping")) << k.explain();
  EXPECT_FALSE(k.run_until_ready());
}

// The answer's type counts too: a host actor answering with an
// unregistered type is caught before the answer is sent.
TEST(KitHostTypes, AnUnregisteredAnswerTypeIsNamed) {
  kit k;
  auto echoer = k.system().spawn(
    [](caf::event_based_actor*, int) -> caf::behavior {
      return {[](const std::string& who) { return kit_host::ping{who}; }};
    },
    0);
  auto got = k.request<kit_host::ping>(echoer, std::string{"bob"});
  ASSERT_FALSE(got);
  auto why = qsp::describe(got.error());
  EXPECT_TRUE(has(why, "kit_host::ping")) << why;
  EXPECT_TRUE(k.failed());
}

// Registered through the hooks, the same host types work, in a kit and in
// a schedule.
TEST(KitHostTypes, ARegisteredTypeWorks) {
  kit_options ko;
  ko.configure = register_pong;
  kit k{ko};
  auto echoer = k.system().spawn(echo, 0);
  auto got = k.request<std::string>(echoer, kit_host::pong{"alice"});
  ASSERT_TRUE(got) << qsp::describe(got.error());
  EXPECT_EQ(*got, "pong alice");
  EXPECT_FALSE(k.failed()) << k.explain();

  schedule_options o;
  o.host.configure = register_pong;
  auto front = std::make_shared<caf::actor>();
  auto answered = std::make_shared<size_t>(0);
  o.host.start = [front](kit& kk) { *front = kk.system().spawn(echo, 0); };
  o.host.step = [front, answered](kit& kk, uint64_t draw) {
    auto who = "u" + std::to_string(draw % 8);
    if (auto x = kk.request<std::string>(*front, kit_host::pong{who}); x && *x == "pong " + who)
      ++*answered;
  };
  auto r = run_schedule(3, 200, o);
  EXPECT_TRUE(r.ok) << r.failure;
  EXPECT_EQ(*answered, r.host_steps);
}

// Outside a request (a host actor mailing another): on CAF 1.x the kit
// holds the message back, never delivering nor destroying it (either
// would crash), and fails naming the type ID and the hook; CAF 0.17
// carries an unregistered type within a process and delivers it.
TEST(KitHostTypes, AnUnregisteredTypeMailedOutsideARequest) {
  kit k;
  auto echoer = k.system().spawn(echo, 0);
  qsp::anon_mail(kit_host::ping{"carol"}).send(echoer);
  k.run();
#if CAF_MAJOR_VERSION >= 1
  ASSERT_TRUE(k.failed());
  auto why = k.explain();
  EXPECT_TRUE(has(why, "type ID " + std::to_string(caf::type_id_v<kit_host::ping>))) << why;
  EXPECT_TRUE(has(why, "kit_options::configure")) << why;
  EXPECT_TRUE(has(why, "held back")) << why;
#else
  EXPECT_FALSE(k.failed()) << k.explain();
#endif
}

} // namespace
