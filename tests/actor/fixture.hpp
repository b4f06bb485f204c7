// The deterministic fixture of the actor tests: the test kit's engine
// (testkit/engine.hpp: the whole projection on CAF's test coordinator over
// the simulated world, with the invariant checker) reporting to CAF's test
// framework.  The tests reach the world directly (`world->...`), which the
// public kit (qsession/projection/testkit.hpp) hides from hosts.
//
// Include after defining CAF_SUITE.  Violations are collected (a failed
// CAF_REQUIRE aborts the whole binary in CAF 0.17) and reported as a failed
// check, with their text and the last events, when drive() gives up or the
// fixture is destroyed.  Note: CAF 0.17 prints a failed CAF_CHECK's
// expression only at -v 4 (CTest passes it); fail_with() prints at the
// default verbosity.
#pragma once

#include "caf/all.hpp"
#include "caf/test/dsl.hpp"

#include "testkit/engine.hpp"

namespace qsp::test {

struct projection_fixture : engine {
  projection_fixture() = default;

  ~projection_fixture() override {
    // Report here: the base destructor no longer reaches this override.
    report();
  }

  /// The actor behind a handle (as CAF's test_coordinator_fixture::deref).
  template <class T = caf::scheduled_actor, class Handle = caf::actor>
  T& deref(const Handle& hdl) {
    auto ptr = caf::actor_cast<caf::abstract_actor*>(hdl);
    CAF_REQUIRE(ptr != nullptr);
    return dynamic_cast<T&>(*ptr);
  }

  /// A failed check with a message printed at the default verbosity (a failed
  /// CAF_CHECK prints its expression only with -v 4).
  void on_failure(const std::string& msg) override {
    CAF_TEST_PRINT_ERROR(msg);
    caf::test::engine::current_test()->fail(false);
  }
};

} // namespace qsp::test
