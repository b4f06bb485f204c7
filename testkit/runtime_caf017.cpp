// The deterministic runtime on CAF 0.17: its scheduler::test_coordinator
// (testkit/runtime.hpp).  Selected by testkit/CMakeLists.txt.
#include "testkit/runtime.hpp"

#include <algorithm>
#include <unordered_set>
#include <vector>

#include "caf/atom.hpp"
#include "caf/scheduled_actor.hpp"
#include "caf/scheduler/test_coordinator.hpp"
#include "caf/send.hpp"
#include "caf/weak_intrusive_ptr.hpp"

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
  /// Remembers the actor of the job about to run (see terminate_all).
  void track(caf::resumable* job) {
    if (auto* a = dynamic_cast<caf::abstract_actor*>(job); a != nullptr && seen.insert(a->id()).second)
      actors.emplace_back(a->ctrl());
  }
  void track_first() {
    if (!sched.jobs.empty())
      track(sched.jobs.front());
  }

  /// Ends every actor that ever ran and is still alive, while the system
  /// exists: a handle that outlives the kit (a host's, in a closure of its
  /// schedule_options) then releases a terminated actor.  An actor still
  /// running when its system is gone crashes when its last handle goes
  /// (its cleanup reaches the destroyed system's clock).
  void terminate_all() {
    for (auto& w : actors)
      if (auto a = caf::actor_cast<caf::actor>(w.lock()))
        caf::anon_send_exit(a, caf::exit_reason::kill);
    for (size_t n = 0; n < 1000000; ++n) {
      track_first();
      if (!sched.try_run_once())
        break;
    }
  }

  caf::actor_system_config cfg;
  caf::actor_system sys;
  caf::scheduler::test_coordinator& sched;
  std::unordered_set<caf::actor_id> seen;
  std::vector<caf::weak_actor_ptr> actors;
};

runtime::runtime(const std::function<void(caf::actor_system_config&)>& configure)
  : impl_(std::make_unique<impl>(configure)) {}

runtime::~runtime() {
  impl_->terminate_all();
  // Actors a test spawned and left running (a host's own) must not keep the
  // system's destructor waiting for ever: nothing runs them any more.
  impl_->sys.await_actors_before_shutdown(false);
}

caf::actor_system& runtime::system() { return impl_->sys; }
caf::actor_system_config& runtime::config() { return impl_->cfg; }

bool runtime::run_once() {
  impl_->track_first();
  return impl_->sched.try_run_once();
}

size_t runtime::run() {
  size_t n = 0;
  while (run_once())
    ++n;
  return n;
}

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
  impl_->track_first();
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
  impl_->track_first();
  impl_->sched.run_once();
  return true;
}

void runtime::advance_time(caf::timespan d) { impl_->sched.advance_time(d); }

caf::actor_clock::time_point runtime::now() const { return impl_->sched.clock().now(); }

void runtime::drop_all() {}

void runtime::on_unregistered(std::function<void(const std::string&)>) {}

} // namespace qsp::test
