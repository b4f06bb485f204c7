// The deterministic runtime on CAF 1.x (testkit/runtime.hpp): a scheduler,
// a mailbox and a clock of the kit's own, installed through the hooks CAF's
// own caf::test::fixture::deterministic uses (libcaf_test), so that the kit
// needs no CAF test runner and no libcaf_test: it runs from GoogleTest and
// from CAF's framework alike.  Selected by testkit/CMakeLists.txt.
//
// It schedules as CAF's test_coordinator (0.17's, and 1.1's legacy one in
// caf::detail) does: an actor joins the job list when a message reaches its
// empty mailbox, each step resumes the first job for one message, and a job
// with more messages stays first.  So a seed drives the same interleaving on
// both versions.  Timers live in a multimap on the simulated clock and fire
// only when advance_time() passes them.
#include "testkit/runtime.hpp"

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <unordered_set>
#include <vector>

#include "caf/abstract_mailbox.hpp"
#include "caf/action.hpp"
#include "caf/actor_clock.hpp"
#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"
#include "caf/detail/actor_system_access.hpp"
#include "caf/detail/actor_system_config_access.hpp"
#include "caf/detail/mailbox_factory.hpp"
#include "caf/detail/meta_object.hpp"
#include "caf/detail/sync_request_bouncer.hpp"
#include "caf/disposable.hpp"
#include "caf/mailbox_element.hpp"
#include "caf/resumable.hpp"
#include "caf/scheduled_actor.hpp"
#include "caf/scheduler.hpp"
#include "caf/send.hpp"

#include "qsession/projection/caf_compat.hpp"
#include "qsession/projection/projection.hpp"

namespace qsp::test {

namespace {

/// The actors with work, in the order they run: an actor is scheduled when
/// a message arrives at its empty mailbox and runs one message per step; it
/// stays first until its mailbox is empty (as CAF's test_coordinator).
using job_list = std::deque<caf::resumable*>;

/// Where the mailboxes report a message they hold back (runtime::on_unregistered).
using unregistered_sink = std::shared_ptr<std::function<void(const std::string&)>>;

class mailbox final : public caf::ref_counted, public caf::abstract_mailbox {
public:
  mailbox(caf::scheduled_actor* owner, unregistered_sink sink)
    : owner_(owner), sink_(std::move(sink)) {}

  caf::intrusive::inbox_result push_back(caf::mailbox_element_ptr ptr) override {
    // A type without a meta object (a host's block not registered): CAF
    // can neither deliver nor destroy the message (either dereferences the
    // missing meta object: a segmentation fault).  Report it and keep it.
    if (auto missing = missing_meta_objects(ptr->payload); !missing.empty()) {
      if (sink_ && *sink_)
        (*sink_)("a message to " + std::string{owner_->name()} + " #"
                 + std::to_string(owner_->id()) + " carries type ID " + missing
                 + ", which has no meta object in this process");
      (void) ptr.release(); // held back for good, never destroyed
      return caf::intrusive::inbox_result::success;
    }
    if (closed_) {
      caf::detail::sync_request_bouncer bouncer;
      bouncer(*ptr);
      return caf::intrusive::inbox_result::queue_closed;
    }
    queue_.push_back(std::move(ptr));
    if (blocked_) {
      blocked_ = false;
      return caf::intrusive::inbox_result::unblocked_reader;
    }
    return caf::intrusive::inbox_result::success;
  }

  void push_front(caf::mailbox_element_ptr ptr) override { queue_.push_front(std::move(ptr)); }

  caf::mailbox_element_ptr pop_front() override {
    if (queue_.empty())
      return nullptr;
    auto result = std::move(queue_.front());
    queue_.pop_front();
    return result;
  }

  bool closed() const noexcept override { return closed_; }
  bool blocked() const noexcept override { return blocked_; }

  bool try_block() override {
    if (!queue_.empty())
      return false;
    blocked_ = true;
    return true;
  }

  bool try_unblock() override {
    if (!blocked_)
      return false;
    blocked_ = false;
    return true;
  }

  size_t close(const caf::error&) override {
    closed_ = true;
    size_t n = 0;
    caf::detail::sync_request_bouncer bounce;
    while (!queue_.empty()) {
      auto m = std::move(queue_.front());
      queue_.pop_front();
      ++n;
      bounce(*m);
    }
    return n;
  }

  size_t size() override { return queue_.size(); }
  void ref_mailbox() noexcept override { ref(); }
  void deref_mailbox() noexcept override { deref(); }

  caf::mailbox_element* peek(caf::message_id) override {
    return queue_.empty() ? nullptr : queue_.front().get();
  }

  const std::deque<caf::mailbox_element_ptr>& queue() const { return queue_; }

private:
  static std::string missing_meta_objects(const caf::message& msg) {
    std::string out;
    for (auto id : msg.types())
      if (caf::detail::global_meta_object_or_null(id) == nullptr)
        out += (out.empty() ? "" : ", ") + std::to_string(id);
    return out;
  }

  caf::scheduled_actor* owner_;
  unregistered_sink sink_;
  bool blocked_ = false;
  bool closed_ = false;
  std::deque<caf::mailbox_element_ptr> queue_;
};

class mailbox_factory final : public caf::detail::mailbox_factory {
public:
  explicit mailbox_factory(unregistered_sink sink) : sink_(std::move(sink)) {}

  caf::abstract_mailbox* make(caf::scheduled_actor* owner) override {
    return new mailbox(owner, sink_);
  }

  /// Blocking actors (a scoped_actor) keep CAF's own mailbox.
  caf::abstract_mailbox* make(caf::blocking_actor*) override { return nullptr; }

private:
  unregistered_sink sink_;
};

class det_clock final : public caf::actor_clock {
public:
  time_point now() const noexcept override { return current; }

  caf::disposable schedule(time_point t, caf::action f) override {
    actions.emplace(t, f);
    return std::move(f).as_disposable();
  }

  /// Moves the clock by `d`, running every action due by then in order.
  void advance(duration_type d) {
    current += d;
    for (;;) {
      auto i = actions.begin();
      if (i == actions.end() || i->first > current)
        return;
      auto f = i->second;
      actions.erase(i);
      if (!f.disposed())
        f.run();
    }
  }

  void drop() {
    for (auto& [t, f] : actions)
      f.dispose();
    actions.clear();
  }

  /// As CAF's test clocks: not at the epoch.
  time_point current{duration_type{1} + std::chrono::hours(1)};
  std::multimap<time_point, caf::action> actions;
};

class det_scheduler final : public caf::scheduler {
public:
  explicit det_scheduler(job_list* jobs) : jobs_(jobs) {}

  /// CAF bumped the reference count: the job keeps it until it is done.
  void schedule(caf::resumable* ptr) override { jobs_->push_back(ptr); }
  void delay(caf::resumable* what) override { schedule(what); }
  void start() override {}
  void stop() override { drop_jobs(*jobs_); }

  static void drop_jobs(job_list& jobs) {
    while (!jobs.empty()) {
      auto* job = jobs.front();
      jobs.pop_front();
      intrusive_ptr_release(job);
    }
  }

private:
  job_list* jobs_;
};

caf::actor_system_config& prepare(caf::actor_system_config& cfg,
                                  const std::function<void(caf::actor_system_config&)>& configure,
                                  unregistered_sink sink) {
  if (configure)
    configure(cfg);
  register_types(cfg);
  cfg.set("caf.logger.file.verbosity", "quiet");
  cfg.set("caf.logger.console.verbosity", "quiet");
  caf::detail::actor_system_config_access{cfg}.mailbox_factory(
    std::make_unique<mailbox_factory>(std::move(sink)));
  return cfg;
}

class det_system final : public caf::actor_system {
public:
  det_system(caf::actor_system_config& cfg, job_list* jobs)
    : caf::actor_system(cfg, setup, jobs) {}

private:
  static void setup(caf::actor_system& sys, caf::actor_system_config&, void* data) {
    caf::detail::actor_system_access access{sys};
    access.clock(std::make_unique<det_clock>());
    access.scheduler(std::make_unique<det_scheduler>(static_cast<job_list*>(data)));
  }
};

const mailbox* mailbox_of(caf::resumable* job) {
  auto* a = dynamic_cast<caf::scheduled_actor*>(job);
  return a == nullptr ? nullptr : dynamic_cast<const mailbox*>(&a->mailbox());
}

} // namespace

struct runtime::impl {
  explicit impl(const std::function<void(caf::actor_system_config&)>& configure)
    : sys(prepare(cfg, configure, sink), &jobs) {}

  ~impl() {
    terminate_all();
    // Nothing runs any more: drop what is pending, so that actors nobody
    // references end, and do not let the system's destructor wait for the
    // ones a test left running (a host's own): nothing would run them.
    sys.await_actors_before_shutdown(false);
    the_clock().drop();
    det_scheduler::drop_jobs(jobs);
  }

  det_clock& the_clock() { return dynamic_cast<det_clock&>(sys.clock()); }

  /// Remembers the actor of a job about to run (see terminate_all).
  void track(caf::resumable* job) {
    if (auto* a = dynamic_cast<caf::abstract_actor*>(job); a != nullptr && seen.insert(a->id()).second)
      actors.emplace_back(a->ctrl());
  }

  /// Ends every actor that ever ran and is still alive, while the system
  /// exists: a handle that outlives the kit (a host's, in a closure of its
  /// schedule_options) then releases a terminated actor.  An actor still
  /// running when its system is gone crashes when its last handle goes
  /// (its cleanup reaches the destroyed system).
  void terminate_all() {
    for (auto& w : actors)
      if (auto a = caf::actor_cast<caf::actor>(w.lock()))
        caf::anon_send_exit(a, caf::exit_reason::kill);
    for (size_t n = 0; n < 1000000 && !jobs.empty(); ++n)
      run(jobs.begin());
  }

  /// Runs the job at `i` for one message (as test_coordinator::try_run_once).
  bool run(job_list::iterator i) {
    auto* job = *i;
    track(job);
    jobs.erase(i);
    switch (job->resume(&sys.scheduler(), 1)) {
      case caf::resumable::resume_later:
        jobs.push_front(job);
        break;
      case caf::resumable::done:
      case caf::resumable::awaiting_message:
        intrusive_ptr_release(job);
        break;
      default:
        break;
    }
    return true;
  }

  /// Declared before the system: they outlive it.
  job_list jobs;
  std::unordered_set<caf::actor_id> seen;
  std::vector<caf::weak_actor_ptr> actors;
  unregistered_sink sink = std::make_shared<std::function<void(const std::string&)>>();
  caf::actor_system_config cfg;
  det_system sys;
};

runtime::runtime(const std::function<void(caf::actor_system_config&)>& configure)
  : impl_(std::make_unique<impl>(configure)) {}

runtime::~runtime() = default;

caf::actor_system& runtime::system() { return impl_->sys; }
caf::actor_system_config& runtime::config() { return impl_->cfg; }

bool runtime::run_once() {
  if (impl_->jobs.empty())
    return false;
  return impl_->run(impl_->jobs.begin());
}

size_t runtime::run() {
  size_t n = 0;
  while (run_once())
    ++n;
  return n;
}

bool runtime::has_pending() { return !impl_->jobs.empty(); }

bool runtime::run_first(
  const std::function<bool(caf::abstract_actor*, const caf::message&)>& match) {
  auto& jobs = impl_->jobs;
  for (auto i = jobs.begin(); i != jobs.end(); ++i) {
    auto* box = mailbox_of(*i);
    if (box == nullptr)
      continue;
    auto* actor = dynamic_cast<caf::abstract_actor*>(*i);
    for (auto& m : box->queue())
      if (match(actor, m->payload))
        return impl_->run(i);
  }
  return false;
}

bool runtime::run_first_of(const std::function<bool(caf::abstract_actor*)>& match) {
  auto& jobs = impl_->jobs;
  for (auto i = jobs.begin(); i != jobs.end(); ++i) {
    auto* actor = dynamic_cast<caf::abstract_actor*>(*i);
    if (actor != nullptr && match(actor))
      return impl_->run(i);
  }
  return false;
}

void runtime::advance_time(caf::timespan d) { impl_->the_clock().advance(d); }

caf::actor_clock::time_point runtime::now() const {
  return const_cast<impl&>(*impl_).the_clock().now();
}

void runtime::drop_all() {
  impl_->the_clock().drop();
  det_scheduler::drop_jobs(impl_->jobs);
}

void runtime::on_unregistered(std::function<void(const std::string&)> report) {
  *impl_->sink = std::move(report);
}

} // namespace qsp::test
