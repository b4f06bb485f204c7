// The deterministic runtime on CAF 1.x (testkit/runtime.hpp): a scheduler,
// a mailbox and a clock of the kit's own, installed through the hooks CAF's
// own caf::test::fixture::deterministic uses (libcaf_test), so that the kit
// needs no CAF test runner and no libcaf_test: it runs from GoogleTest and
// from CAF's framework alike.  Selected by testkit/CMakeLists.txt.
//
// Every message of a scheduled actor is one event in a single list, in the
// order it was enqueued; running an event resumes its actor for one message
// (its oldest).  Timers live in a multimap on the simulated clock and fire
// only when advance_time() passes them.
#include "testkit/runtime.hpp"

#include <list>
#include <map>
#include <memory>
#include <set>

#include "caf/abstract_mailbox.hpp"
#include "caf/action.hpp"
#include "caf/actor_clock.hpp"
#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"
#include "caf/detail/actor_system_access.hpp"
#include "caf/detail/actor_system_config_access.hpp"
#include "caf/detail/mailbox_factory.hpp"
#include "caf/detail/sync_request_bouncer.hpp"
#include "caf/disposable.hpp"
#include "caf/mailbox_element.hpp"
#include "caf/resumable.hpp"
#include "caf/scheduled_actor.hpp"
#include "caf/scheduler.hpp"

#include "qsession/projection/caf_compat.hpp"
#include "qsession/projection/projection.hpp"

namespace qsp::test {

namespace {

struct event {
  event(caf::resumable* t, caf::mailbox_element_ptr m) : target(t), item(std::move(m)) {}
  caf::intrusive_ptr<caf::resumable> target;
  /// The message, or null for a resumable that is not an actor.
  caf::mailbox_element_ptr item;
};

using event_list = std::list<std::unique_ptr<event>>;

caf::mailbox_element_ptr pop_for(event_list& events, caf::scheduled_actor* owner) {
  for (auto i = events.begin(); i != events.end(); ++i) {
    if ((*i)->target.get() == owner && (*i)->item) {
      auto result = std::move((*i)->item);
      events.erase(i);
      return result;
    }
  }
  return nullptr;
}

size_t count_for(const event_list& events, caf::scheduled_actor* owner) {
  size_t n = 0;
  for (auto& e : events)
    if (e->target.get() == owner && e->item)
      ++n;
  return n;
}

class mailbox final : public caf::ref_counted, public caf::abstract_mailbox {
public:
  mailbox(event_list* events, caf::scheduled_actor* owner) : events_(events), owner_(owner) {}

  caf::intrusive::inbox_result push_back(caf::mailbox_element_ptr ptr) override {
    if (closed_) {
      caf::detail::sync_request_bouncer bouncer;
      bouncer(*ptr);
      return caf::intrusive::inbox_result::queue_closed;
    }
    auto unblocked = count_for(*events_, owner_) == 0;
    events_->push_back(std::make_unique<event>(owner_, std::move(ptr)));
    return unblocked ? caf::intrusive::inbox_result::unblocked_reader
                     : caf::intrusive::inbox_result::success;
  }

  void push_front(caf::mailbox_element_ptr ptr) override {
    events_->push_front(std::make_unique<event>(owner_, std::move(ptr)));
  }

  caf::mailbox_element_ptr pop_front() override { return pop_for(*events_, owner_); }

  bool closed() const noexcept override { return closed_; }
  bool blocked() const noexcept override { return blocked_; }

  bool try_block() override {
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
    for (auto m = pop_for(*events_, owner_); m != nullptr; m = pop_for(*events_, owner_)) {
      ++n;
      bounce(*m);
    }
    return n;
  }

  size_t size() override { return count_for(*events_, owner_); }
  void ref_mailbox() noexcept override { ref(); }
  void deref_mailbox() noexcept override { deref(); }

  caf::mailbox_element* peek(caf::message_id) override {
    for (auto& e : *events_)
      if (e->target.get() == owner_ && e->item)
        return e->item.get();
    return nullptr;
  }

private:
  bool blocked_ = false;
  bool closed_ = false;
  event_list* events_;
  caf::scheduled_actor* owner_;
};

class mailbox_factory final : public caf::detail::mailbox_factory {
public:
  explicit mailbox_factory(event_list* events) : events_(events) {}

  caf::abstract_mailbox* make(caf::scheduled_actor* owner) override {
    return new mailbox(events_, owner);
  }

  /// Blocking actors (a scoped_actor) keep CAF's own mailbox.
  caf::abstract_mailbox* make(caf::blocking_actor*) override { return nullptr; }

private:
  event_list* events_;
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
  explicit det_scheduler(event_list* events) : events_(events) {}

  void schedule(caf::resumable* ptr) override {
    using subtype = caf::resumable::subtype_t;
    switch (ptr->subtype()) {
      case subtype::scheduled_actor:
      case subtype::io_actor: {
        // Their messages are events already; an actor that is not
        // initialized yet runs its initialization now (as CAF's fixture).
        auto dptr = dynamic_cast<caf::scheduled_actor*>(ptr);
        if (!dptr->initialized() && !dptr->inactive())
          dptr->resume(this, 0);
        break;
      }
      default:
        events_->push_back(std::make_unique<event>(ptr, nullptr));
    }
    // CAF bumps the reference count before it schedules.
    intrusive_ptr_release(ptr);
  }

  void delay(caf::resumable* what) override { schedule(what); }
  void start() override {}
  void stop() override { drop_events(*events_); }

  static void drop_events(event_list& events) {
    // Not events.clear(): dropping a message can end an actor, which then
    // closes its mailbox and takes events out of the list meanwhile.
    while (!events.empty()) {
      event_list tmp;
      tmp.splice(tmp.end(), events);
    }
  }

private:
  event_list* events_;
};

caf::actor_system_config& prepare(caf::actor_system_config& cfg, event_list* events,
                                  const std::function<void(caf::actor_system_config&)>& configure) {
  if (configure)
    configure(cfg);
  register_types(cfg);
  cfg.set("caf.logger.file.verbosity", "quiet");
  cfg.set("caf.logger.console.verbosity", "quiet");
  caf::detail::actor_system_config_access{cfg}.mailbox_factory(
    std::make_unique<mailbox_factory>(events));
  return cfg;
}

class det_system final : public caf::actor_system {
public:
  det_system(caf::actor_system_config& cfg, event_list* events)
    : caf::actor_system(cfg, setup, events) {}

private:
  static void setup(caf::actor_system& sys, caf::actor_system_config&, void* data) {
    auto* events = static_cast<event_list*>(data);
    caf::detail::actor_system_access access{sys};
    access.clock(std::make_unique<det_clock>());
    access.scheduler(std::make_unique<det_scheduler>(events));
  }
};

} // namespace

struct runtime::impl {
  explicit impl(const std::function<void(caf::actor_system_config&)>& configure)
    : sys(prepare(cfg, &events, configure), &events) {}

  ~impl() {
    // Nothing runs any more: drop what is pending, so that actors nobody
    // references end and the system's destructor does not wait for them.
    the_clock().drop();
    det_scheduler::drop_events(events);
  }

  det_clock& the_clock() { return dynamic_cast<det_clock&>(sys.clock()); }

  bool run(event_list::iterator i) {
    auto target = (*i)->target;
    if (!(*i)->item) {
      events.erase(i);
      auto res = target->resume(&sys.scheduler(), 1);
      while (res == caf::resumable::resume_later)
        res = target->resume(&sys.scheduler(), 0);
      return true;
    }
    // An actor takes its oldest message (this one: the first of its own).
    target->resume(&sys.scheduler(), 1);
    return true;
  }

  /// Declared before the system: it outlives it (the system's shutdown
  /// still closes mailboxes, which look at it).
  event_list events;
  caf::actor_system_config cfg;
  det_system sys;
};

runtime::runtime(const std::function<void(caf::actor_system_config&)>& configure)
  : impl_(std::make_unique<impl>(configure)) {}

runtime::~runtime() = default;

caf::actor_system& runtime::system() { return impl_->sys; }
caf::actor_system_config& runtime::config() { return impl_->cfg; }

bool runtime::run_once() {
  if (impl_->events.empty())
    return false;
  return impl_->run(impl_->events.begin());
}

size_t runtime::run() {
  size_t n = 0;
  while (run_once())
    ++n;
  return n;
}

bool runtime::has_pending() { return !impl_->events.empty(); }

bool runtime::run_first(
  const std::function<bool(caf::abstract_actor*, const caf::message&)>& match) {
  auto& events = impl_->events;
  std::set<caf::resumable*> seen;
  for (auto i = events.begin(); i != events.end(); ++i) {
    auto* target = (*i)->target.get();
    if (!(*i)->item || seen.count(target) > 0)
      continue;
    seen.insert(target);
    auto* actor = dynamic_cast<caf::abstract_actor*>(target);
    for (auto j = i; j != events.end(); ++j)
      if ((*j)->target.get() == target && (*j)->item && match(actor, (*j)->item->payload))
        return impl_->run(i);
  }
  return false;
}

bool runtime::run_first_of(const std::function<bool(caf::abstract_actor*)>& match) {
  auto& events = impl_->events;
  for (auto i = events.begin(); i != events.end(); ++i) {
    if (!(*i)->item)
      continue;
    auto* actor = dynamic_cast<caf::abstract_actor*>((*i)->target.get());
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
  det_scheduler::drop_events(impl_->events);
}

} // namespace qsp::test
