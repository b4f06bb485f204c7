// The test kit's implementation (qsession/projection/testkit/kit.hpp):
// kit::impl, the engine (testkit/engine.hpp) as the kit drives it.  Shared by
// kit.cpp (the kit's lifecycle, running and checks) and kit_world.cpp (the
// simulated world's calls: the dispatch log, Redis, Redis Cluster).
#pragma once

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "caf/mailbox_element.hpp"
#include "caf/scheduled_actor.hpp"
#include "caf/send.hpp"

#include "messages/actors.hpp"
#include "qsession/projection/testkit.hpp"
#include "testkit/engine.hpp"

namespace qsp::testkit {

using test::engine;
using lock = std::lock_guard<std::recursive_mutex>;

namespace internal {

inline std::string list(const std::vector<int32_t>& xs) {
  std::string out;
  for (auto x : xs)
    out += (out.empty() ? "" : ",") + std::to_string(x);
  return out;
}


/// Sends one ownership request and journals its answer.
inline void ownership_request(caf::event_based_actor* self, std::shared_ptr<std::string> answer,
                       projection_actor target, bool assign, std::vector<int32_t> parts) {
  auto what = std::string{assign ? "assign " : "revoke "} + list(parts);
  auto req = assign ? qsp::mail(self, atom::assign_v, parts).request(target, caf::infinite)
                    : qsp::mail(self, atom::revoke_v, parts).request(target, caf::infinite);
  std::move(req).then([answer, what](caf::ok_atom) { *answer = what + " answered ok"; },
           [answer, what](caf::error& e) { *answer = what + " answered " + describe(e); });
}

/// True if `job` is an actor with a message (Ts...) in its mailbox.  (The
/// kit's only look into CAF's scheduler beyond driving it: which actors
/// still hold a status push.)
template <class... Ts>
inline bool holds(caf::abstract_actor*, const caf::message& msg) {
  return msg.match_elements<Ts...>();
}

} // namespace internal

struct kit::impl : engine {
  impl(const kit_options& o) : engine(o.partitions, o.configure), opts(o) {
    check_every_job = o.check_every_step;
    incremental = true;
    seed = o.seed;
    {
      lock g{world->mtx};
      world->topic = o.topic;
      world->ns = o.ns;
      world->lazy_pipeline = true;
      if (o.redis_shards > 0)
        world->make_redis_cluster(o.redis_shards);
    }
    settings.topic = o.topic;
    settings.ns = o.ns;
    // The configured values from the start (the engine would fill the
    // partition count only at start()).
    settings.partition_count = world->partition_count();
    if (o.reader)
      host_reader = [w = world, layer = o.reader]() -> caf::expected<std::shared_ptr<dispatch_log>> {
        auto simulated = make_fake_ports(w)->make_dispatch_log();
        if (!simulated)
          return simulated.error();
        return layer(std::move(*simulated));
      };
    if (o.redis_shards > 0) {
      // Redis Cluster mode: the namespace is a hash tag (docs/DESIGN.md §15).
      if (settings.ns.empty() || settings.ns.front() != '{')
        settings.ns = "{" + settings.ns + "}";
      lock g{world->mtx};
      world->ns = settings.ns;
      for (int32_t i = 0; i < o.redis_shards; ++i)
        settings.redis.cluster_nodes.push_back("127.0.0.1:" + std::to_string(7000 + i));
    }
  }

  void on_failure(const std::string& msg) override { failures.push_back(msg); }
  void on_check() override { journal_answers(); }
  /// The kit's listener gets each push right after the job that sent it:
  /// the kit's view (state(), ready()) is never behind the projection's gate.
  void on_job() override {
    if (!listener)
      return;
    auto target = caf::actor_cast<caf::abstract_actor*>(listener);
    for (int i = 0; i < 10000 && rt.run_first_of([&](caf::abstract_actor* a) { return a == target; });
         ++i)
      ;
  }

  /// Runs the actors that still hold a status push (a host's listeners),
  /// each until it took its pushes, without moving the clock and without
  /// running anything else: when a kit call returns, every subscriber has
  /// the pushes the kit's view has.
  void deliver_pushes() {
    for (size_t n = 0; n < 100000 && violations.empty(); ++n) {
      if (!rt.run_first(internal::holds<atom::status, projection_status>))
        break;
      after_job();
    }
    report();
  }

  /// start() and restart() return as the other calls do (docs/TESTING.md
  /// §2): the actors the on_start hooks spawned (ids above `hooks_from`)
  /// have started, the projection took the subscriptions sent so far (the
  /// kit's and theirs) and every subscriber has its first push.  Nothing
  /// else runs, and the clock does not move: the projection's own actors
  /// have not begun (no verification, no Redis call yet).
  void deliver_start(caf::actor_id hooks_from) {
    auto hooks_to = hooks_from;
    // The hooks' actors start (and run whatever they were sent), and the
    // actors they spawn meanwhile with them; the projection's supervisor
    // has not run yet, so every actor above `hooks_from` is the host's.
    for (size_t n = 0; n < 100000 && violations.empty()
                       && rt.run_first_of([&](caf::abstract_actor* a) { return a->id() > hooks_from; });
         ++n)
      after_job();
    hooks_to = sys.latest_actor_id();
    auto target = caf::actor_cast<caf::abstract_actor*>(proj);
    for (size_t n = 0; n < 100000 && violations.empty(); ++n) {
      // The supervisor takes the subscriptions (after starting, which
      // spawns its children: they do not run here), pushing the status to
      // each new subscriber; the hooks' actors take their pushes.
      if (rt.run_first([&](caf::abstract_actor* a, const caf::message& m) {
            return a == target && internal::holds<atom::subscribe, status_listener>(a, m);
          })) {
        after_job();
        continue;
      }
      if (rt.run_first([&](caf::abstract_actor* a, const caf::message& m) {
            return (a->id() > hooks_from && a->id() <= hooks_to)
                   || internal::holds<atom::status, projection_status>(a, m);
          })) {
        after_job();
        continue;
      }
      break;
    }
    report();
  }

  /// Asks the projection, moving the clock while nothing is runnable.
  template <class T, class... Ts>
  caf::expected<T> ask_timed(caf::timespan limit, Ts... xs) {
    if (!proj)
      return caf::make_error(ec::unspecified, "testkit: the projection is not started");
    auto res = ask_of<T>(proj, limit, xs...);
    deliver_pushes();
    return res;
  }

  bool until(const std::function<bool()>& done, caf::timespan limit, const std::string& what) {
    soft.clear();
    auto ticks = static_cast<size_t>(limit / settings.idle_poll) + 1;
    bool reached = drive(done, ticks, true);
    deliver_pushes();
    if (reached && violations.empty())
      return true;
    if (violations.empty())
      soft.push_back("not reached within " + std::to_string(limit / std::chrono::milliseconds{1})
                         + " ms of simulated time: " + what + "; " + summary());
    return false;
  }

  /// An ownership request whose answer is journaled when it comes.
  void async_request(bool assign, const std::vector<int32_t>& parts) {
    if (!proj)
      return;
    auto answer = std::make_shared<std::string>();
    answers.push_back(answer);
    sys.spawn(internal::ownership_request, answer, proj, assign, parts);
  }

  /// Journals the answers that came since the last call.
  void journal_answers() {
    for (auto i = answers.begin(); i != answers.end();)
      if (!(*i)->empty()) {
        note(**i);
        i = answers.erase(i);
      } else {
        ++i;
      }
  }

  kit_options opts;
  std::vector<std::function<void(kit&)>> start_hooks;
  size_t starts = 0;
  /// What the last waiting call (run_until_*, assign, revoke, stop,
  /// model_equals_redis) did not get: in explain(), not in failed().
  std::vector<std::string> soft;
  std::vector<std::shared_ptr<std::string>> answers;
};

} // namespace qsp::testkit
