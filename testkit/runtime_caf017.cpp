// The deterministic runtime on CAF 0.17: its scheduler::test_coordinator
// (testkit/runtime.hpp).  Selected by testkit/CMakeLists.txt.
#include "testkit/runtime.hpp"

#include <algorithm>

#include "caf/atom.hpp"
#include "caf/scheduled_actor.hpp"
#include "caf/scheduler/test_coordinator.hpp"

#include "qsession/projection/projection.hpp"

namespace qsp::test {

namespace {

caf::actor_system_config& prepare(caf::actor_system_config& cfg,
                                  const std::function<void(caf::actor_system_config&)>& configure) {
  if (configure)
    configure(cfg);
  register_types(cfg);
  cfg.set("logger.file-verbosity", caf::atom("quiet"));
  cfg.set("logger.console-verbosity", caf::atom("quiet"));
  cfg.set("scheduler.policy", caf::atom("testing"));
  return cfg;
}

} // namespace

struct runtime::impl {
  explicit impl(const std::function<void(caf::actor_system_config&)>& configure)
    : sys(prepare(cfg, configure)),
      sched(dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler())) {
    // As CAF's test_coordinator_fixture: each batch item takes 1us, and the
    // clock does not start at 0.
    sched.clock().time_per_unit.emplace(caf::atom("batch"), caf::timespan{1000});
    sched.clock().current_time += std::chrono::hours(1);
  }
  caf::actor_system_config cfg;
  caf::actor_system sys;
  caf::scheduler::test_coordinator& sched;
};

runtime::runtime(const std::function<void(caf::actor_system_config&)>& configure)
  : impl_(std::make_unique<impl>(configure)) {}

runtime::~runtime() {
  // Actors a test spawned and left running (a host's own) must not keep the
  // system's destructor waiting for ever: nothing runs them any more.
  impl_->sys.await_actors_before_shutdown(false);
}

caf::actor_system& runtime::system() { return impl_->sys; }
caf::actor_system_config& runtime::config() { return impl_->cfg; }

bool runtime::run_once() { return impl_->sched.try_run_once(); }

size_t runtime::run() { return impl_->sched.run(); }

bool runtime::has_pending() { return impl_->sched.has_job(); }

bool runtime::run_first(
  const std::function<bool(caf::abstract_actor*, const caf::message&)>& match) {
  auto& jobs = impl_->sched.jobs;
  auto i = std::find_if(jobs.begin(), jobs.end(), [&](caf::resumable* job) {
    auto a = dynamic_cast<caf::scheduled_actor*>(job);
    if (a == nullptr)
      return false;
    bool found = false;
    a->mailbox().peek(); // moves what arrived into the queue peek_all sees
    a->mailbox().queue().peek_all([&](const caf::mailbox_element& x) {
      if (!found && match(a, x.copy_content_to_message()))
        found = true;
    });
    return found;
  });
  if (i == jobs.end())
    return false;
  std::rotate(jobs.begin(), i, i + 1);
  impl_->sched.run_once();
  return true;
}

bool runtime::run_first_of(const std::function<bool(caf::abstract_actor*)>& match) {
  auto& jobs = impl_->sched.jobs;
  auto i = std::find_if(jobs.begin(), jobs.end(), [&](caf::resumable* job) {
    auto a = dynamic_cast<caf::abstract_actor*>(job);
    return a != nullptr && match(a);
  });
  if (i == jobs.end())
    return false;
  std::rotate(jobs.begin(), i, i + 1);
  impl_->sched.run_once();
  return true;
}

void runtime::advance_time(caf::timespan d) { impl_->sched.advance_time(d); }

caf::actor_clock::time_point runtime::now() const { return impl_->sched.clock().now(); }

void runtime::drop_all() {}

} // namespace qsp::test
