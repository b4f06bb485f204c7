// The deterministic CAF runtime the test kit drives: an actor system whose
// actors run only when the kit says so, one message at a time, on a clock
// that moves only when the kit moves it.  Two implementations, selected by
// the build (testkit/CMakeLists.txt):
//   runtime_caf017.cpp  CAF 0.17's scheduler::test_coordinator
//   runtime_caf1.cpp    CAF 1.x: a scheduler, mailbox and clock of our own,
//                       after CAF's caf::test::fixture::deterministic, so the
//                       kit needs no CAF test runner (it runs from GoogleTest
//                       and from CAF's own framework alike)
// Jobs run in the order their messages arrived, across all actors.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "caf/actor_clock.hpp"
#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"
#include "caf/fwd.hpp"

namespace qsp::test {

class runtime {
public:
  /// `configure` (if any) runs on the configuration before the system
  /// exists (a host's own settings); the projection's types are registered.
  explicit runtime(const std::function<void(caf::actor_system_config&)>& configure = {});
  ~runtime();
  runtime(const runtime&) = delete;
  runtime& operator=(const runtime&) = delete;

  caf::actor_system& system();
  caf::actor_system_config& config();

  /// Runs one message of the actor whose message is oldest; false if none.
  bool run_once();
  /// Runs messages until none is pending (the clock does not move).
  size_t run();
  /// Looks at the actors with pending messages in the order they would
  /// run, and runs the oldest message of the first one for which `match`
  /// holds for one of its pending messages; false if none does.
  bool run_first(const std::function<bool(caf::abstract_actor*, const caf::message&)>& match);
  /// Same, matching on the actor alone.
  bool run_first_of(const std::function<bool(caf::abstract_actor*)>& match);
  /// True if an actor has a pending message.
  bool has_pending();

  /// Moves the clock by `d` and fires every timer due by then (their
  /// messages then wait to be run).
  void advance_time(caf::timespan d);
  caf::actor_clock::time_point now() const;

  /// Drops every pending message and timer (before the system goes away).
  void drop_all();

  /// CAF 1.x: `report` gets what arrived whenever a message for one of the
  /// system's scheduled actors carries a type ID the process has no meta
  /// object for (a host type whose type-ID block was not registered).  Such
  /// a message is held back: never delivered and never destroyed, since
  /// CAF 1.x can do neither without the meta object (it crashes).  CAF
  /// 0.17 carries those types within a process and never calls it.
  void on_unregistered(std::function<void(const std::string&)> report);

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace qsp::test
