// The deterministic fixture of the actor tests: the test kit's engine
// (testkit/engine.hpp: the whole projection on the kit's deterministic
// runtime over the simulated world, with the invariant checker) as a
// GoogleTest fixture.  The tests reach the world directly (`world->...`),
// which the public kit (qsession/projection/testkit.hpp) hides from hosts.
//
// Each suite derives its fixture from projection_fixture and names it after
// the suite (TEST_F(Pipeline, ...)); CTest runs one suite per test
// (--gtest_filter=Pipeline.*).  Invariant violations are collected and
// reported as a failure of the running test, with their text and the last
// events, when drive() gives up or the fixture is destroyed.
#pragma once

#include <stdexcept>
#include <string>

#include <gtest/gtest.h>

#include "caf/actor_registry.hpp"
#include "caf/all.hpp"

#include "testkit/engine.hpp"

namespace qsp::test {

struct projection_fixture : engine, ::testing::Test {
  projection_fixture() = default;

  ~projection_fixture() override {
    // Report here: the base destructor no longer reaches this override.
    // (GoogleTest destroys the fixture before it closes the test, so a
    // failure reported here is the test's.)
    report();
  }

  /// The actor behind a handle (as CAF's test_coordinator_fixture::deref).
  /// A null handle fails the test: the exception ends it (GoogleTest reports
  /// it with the test) where a reference cannot be returned.
  template <class T = caf::scheduled_actor, class Handle = caf::actor>
  T& deref(const Handle& hdl) {
    auto ptr = caf::actor_cast<caf::abstract_actor*>(hdl);
    if (ptr == nullptr) {
      ADD_FAILURE() << "deref: a null actor handle";
      throw std::logic_error("deref: a null actor handle");
    }
    return dynamic_cast<T&>(*ptr);
  }

  /// A failed check of the running test, with its message.
  void on_failure(const std::string& msg) override {
    ADD_FAILURE() << msg;
  }
};

/// The state of a stateful actor behind a reference (caf_compat.hpp's
/// state_of takes the pointer).
template <class Actor>
auto& state_of(Actor& self) {
  return qsp::state_of(&self);
}

} // namespace qsp::test
