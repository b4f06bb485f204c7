// Ownership changes and the cluster heartbeat of the supervisor (docs/DESIGN.md
// §12): whole-generation restarts, incremental assign and revoke, what a
// heartbeat publishes and what its report means.  The rules themselves are
// core::ownership's; the lifecycle is actors/supervisor.cpp's.
#include <algorithm>
#include <utility>

#include "caf/event_based_actor.hpp"
#include "caf/stateful_actor.hpp"
#include "caf/typed_event_based_actor.hpp"

#include "actors/supervisor.hpp"
#include "actors/supervisor_internal.hpp"
#include "core/cluster.hpp"

namespace qsp::supervision {

// Another node claimed partition `p` (its epoch is newer than ours): in the
// group and host modes it moved on and this node lets it go; with static
// ownership two nodes list it, which an operator must fix.
caf::error on_fenced(supervisor_pointer self, int32_t p, const std::string& why) {
  auto& st = state_of(self);
  if (!st.cfg.clustered())
    return caf::make_error(ec::refused,
                           why + " (projection.ownership = all, but the namespace has owner "
                                 "records: a cluster projects it; docs/CLUSTER.md)");
  if (st.own.moved_away(p))
    return caf::make_error(ec::refused, why + " (projection.ownership = static: is partition "
                                          + std::to_string(p)
                                          + " in projection.partitions of two nodes?)");
  st.logs->warn("partition {}: fenced, another node owns it now; giving it up: {}", p, why);
  return caf::none;
}

// -- ownership changes (docs/DESIGN.md §12) -----------------------------------------

void finish_regeneration(supervisor_pointer self) {
  auto& st = state_of(self);
  st.regenerating = false;
  if (st.state == "refused" || st.stopping)
    return;
  // Nothing of the old generation runs any more: no checkpoint of a revoked
  // partition can follow (and a late one would be fenced anyway).
  for (auto& rp : st.revokes)
    rp.deliver(caf::ok_atom_v);
  st.revokes.clear();
  st.attempt = 0;
  start_generation(self);
}

// Stops the running generation (unconfirmed batches get no checkpoint) and
// starts the next one, with the current ownership, once all of it is down.
void regenerate(supervisor_pointer self) {
  auto& st = state_of(self);
  if (st.stopping)
    return;
  if (st.state == "refused") {
    for (auto& rp : st.revokes)
      rp.deliver(caf::ok_atom_v);
    st.revokes.clear();
    for (auto& rp : st.assigns)
      rp.deliver(caf::make_error(ec::refused, st.last_error));
    st.assigns.clear();
    return;
  }
  st.regenerating = true;
  // Claims the ending generation made stand, for the partitions still owned.
  if (st.life->gen)
    for (auto& [p, e] : st.life->gen->claims())
      st.own.claimed(p, e);
  // Queued additions are part of the new generation's set already.
  st.queued_adds.clear();
  ++st.generation; // outdates a pending verification and backoff timer
  stop_children(self, caf::exit_reason::user_shutdown, true);
  // Not ready for the new ownership until its generation says so.
  transition(self, "verifying", "ownership changed");
  if (st.dying.empty())
    finish_regeneration(self);
}

// -- incremental ownership changes (docs/DESIGN.md §12, "Decision — handover") ------

// The generation runs (verified, its children up) and no regeneration is
// pending: an ownership change can touch only the partitions that move.
bool running(const supervisor_state& st) {
  return st.writer && st.verifier && st.aggregator && !st.regenerating && !st.stopping
         && (st.state == "catching-up" || st.state == "ready");
}

void on_extended(supervisor_pointer self, verified_start vs, std::shared_ptr<generation> gen);

// Verifies `added` (claims, the full §4 checks) and adds them to the running
// generation's consumer; one addition at a time, later ones queue.  The
// partitions kept go on as they are.
void extend(supervisor_pointer self, std::vector<int32_t> added) {
  auto& st = state_of(self);
  if (!st.extending.empty()) {
    st.queued_adds.insert(st.queued_adds.end(), added.begin(), added.end());
    return;
  }
  st.extending = added;
  // This node is not ready until the added partitions reach their H0; the
  // ones it keeps publish their own (ready) state meanwhile.
  transition(self, "catching-up",
             "partitions " + core::format_partition_list(added) + " added; the others go on");
  auto gen = st.life->gen;
  auto id = st.generation;
  qsp::mail(self, atom::assign_v, std::move(added)).request(st.verifier, caf::infinite)
    .then(
      [=](verified_start& vs) {
        // A failure or refusal meanwhile ended the generation (its answer
        // may already have been queued): nothing is added to it.
        auto& st = state_of(self);
        if (st.generation == id && !st.stopping && st.writer && !st.extending.empty())
          on_extended(self, std::move(vs), gen);
      },
      [=](caf::error& err) {
        auto& st = state_of(self);
        if (st.generation != id || st.stopping || !st.writer)
          return;
        for (auto& [p, e] : gen->claims())
          st.own.claimed(p, e);
        fail(self, err);
      });
}

void on_extended(supervisor_pointer self, verified_start vs, std::shared_ptr<generation> gen) {
  auto& st = state_of(self);
  st.extending.clear();
  for (auto& [p, e] : vs.owner_epochs)
    st.own.claimed(p, e);
  for (auto& [p, h] : vs.true_high)
    st.true_high[p] = h;
  for (auto& [p, start] : vs.starts)
    st.logs->info("partition {}: start {} H0 {}", p, start, vs.h0[p]);
  // Both hear of the partitions before any batch of them exists: the
  // consumers spawned below send only after these are in the mailboxes.
  qsp::mail(self, atom::assign_v, vs).send(st.aggregator);
  qsp::mail(self, atom::assign_v, vs).send(st.writer);
  if (!spawn_consumers(self, vs, *gen))
    return;
  // Partitions revoked while their addition was verified go again at once.
  for (auto& d : std::exchange(st.deferred_revokes, {}))
    shrink(self, d.partitions, d.rp);
  if (!st.queued_adds.empty()) {
    extend(self, std::exchange(st.queued_adds, {}));
    return;
  }
  for (auto& rp : st.assigns)
    rp.deliver(caf::ok_atom_v);
  st.assigns.clear();
}

// Stops the consumers of `dropped` and lets the writer finish what they
// sent (confirmed and checkpointed, or failed with no checkpoint): only then
// is `rp` answered and the partitions handed on.  The others go on.
void shrink(supervisor_pointer self, const std::vector<int32_t>& dropped,
            caf::typed_response_promise<caf::ok_atom> rp) {
  auto& st = state_of(self);
  for (auto p : dropped) {
    auto c = st.consumers.find(p);
    if (c == st.consumers.end())
      continue;
    auto addr = c->second.address();
    st.watch.demonitor(self, addr);
    st.children.erase(addr);
    auto& kids = st.life->children;
    kids.erase(std::remove_if(kids.begin(), kids.end(),
                              [&](const caf::actor& a) { return a.address() == addr; }),
               kids.end());
    self->send_exit(c->second, caf::exit_reason::user_shutdown);
    st.consumers.erase(c);
  }
  qsp::mail(self, atom::revoke_v, dropped).send(st.aggregator);
  st.draining.insert(dropped.begin(), dropped.end());
  // The writer may fail meanwhile: then nothing of these partitions is
  // written any more either, and the revoke is answered all the same.
  auto done = [=]() mutable {
    auto& st = state_of(self);
    for (auto p : dropped)
      if (auto i = st.draining.find(p); i != st.draining.end())
        st.draining.erase(i);
    rp.deliver(caf::ok_atom_v);
  };
  qsp::mail(self, atom::revoke_v, dropped).request(st.writer, caf::infinite)
    .then([=](caf::ok_atom) mutable { done(); }, [=](caf::error&) mutable { done(); });
}

std::vector<owned_status> published(const supervisor_state& st,
                                    const std::vector<partition_status>& parts) {
  std::map<int32_t, const partition_status*> progress;
  for (auto& ps : parts)
    progress[ps.partition] = &ps;
  bool running = st.state == "catching-up" || st.state == "ready";
  std::vector<owned_status> out;
  // Only claimed partitions: nothing to publish before the claim.
  for (auto& [p, epoch] : st.own.epochs()) {
    owned_status o;
    o.partition = p;
    o.epoch = epoch;
    o.state = st.state;
    if (auto i = progress.find(p); running && i != progress.end()) {
      o.h0 = i->second->h0;
      o.next_offset = i->second->next_offset;
      o.caught_up = o.next_offset >= o.h0;
      // Each partition's own state while the generation runs: one added
      // to it catches up while the ones kept stay ready (docs/DESIGN.md §12).
      o.state = o.caught_up ? "ready" : "catching-up";
    }
    out.push_back(o);
  }
  return out;
}

// What holds the namespace closed: "2: no owner; 3: owner n1 is verifying".
std::string namespace_held(const supervisor_state& st) {
  if (!st.cluster_error.empty())
    return "cluster view unavailable: " + st.cluster_error;
  std::string held;
  for (auto& c : st.cluster)
    if (!c.ready)
      held += (held.empty() ? "" : "; ") + std::to_string(c.partition) + ": " + c.why;
  return held.empty() ? std::string{"not read yet"} : held;
}

void on_report(supervisor_pointer self, const cluster_report& rep) {
  auto& st = state_of(self);
  bool refresh = false;
  for (auto& f : rep.fenced) {
    auto p = f.partition;
    // A report about a claim this node no longer holds (revoked, or
    // re-claimed since the heartbeat started) says nothing about the
    // current one.
    auto verdict = st.own.judge_report(p, f.epoch, f.state == "fenced");
    if (verdict == core::ownership::report::stale)
      continue;
    std::string record = "there is no owner record";
    for (auto& c : rep.view)
      if (c.partition == p && !c.owner.empty())
        record = "the owner record names node \"" + c.owner + "\" with epoch "
                 + std::to_string(c.epoch);
    auto why = "partition " + std::to_string(p) + ": " + record + " (this node \"" + st.node
               + "\" holds epoch " + std::to_string(f.epoch) + ")";
    if (verdict == core::ownership::report::lost) {
      // Only a running generation writes under the claim; a verification
      // (or the restart after a failure) re-claims anyway.
      if (!st.writer)
        continue;
      // Redis lost the claim (a failover to a lagging replica, a restore):
      // transient, the next verification re-claims (docs/DESIGN.md §12).
      fail(self, caf::make_error(ec::checkpoint_conflict,
                                 why + ": the ownership claim was lost (rolled back by Redis); "
                                       "re-claiming"));
      return;
    }
    // Counted like a fenced checkpoint write (qsp_failures_total{kind="fenced"}).
    st.failures[to_string(ec::fenced)] += 1;
    st.stats->failures[static_cast<uint8_t>(ec::fenced)] += 1;
    if (auto refused = on_fenced(self, p, why)) {
      fail(self, refused);
      return;
    }
    refresh = true;
  }
  bool was = st.namespace_ready;
  if (!rep.error.empty()) {
    if (st.cluster_error.empty())
      st.logs->warn("cluster view unavailable, namespace not ready: {}", rep.error);
    st.cluster_error = rep.error;
    st.namespace_ready = false;
  } else {
    st.cluster_error.clear();
    st.cluster = rep.view;
    st.namespace_ready = !rep.view.empty()
                         && std::all_of(rep.view.begin(), rep.view.end(),
                                        [](const cluster_partition& c) { return c.ready; });
  }
  if (was != st.namespace_ready) {
    if (st.namespace_ready) {
      st.logs->info("namespace ready: every partition has a live owner at its H0");
    } else {
      st.logs->info("namespace not ready: {}", namespace_held(st));
    }
  }
  bool gate = gate_open(st);
  if (gate != st.ready || was != st.namespace_ready) {
    st.ready = gate;
    notify(self);
  }
  if (refresh)
    regenerate(self);
}

caf::timespan heartbeat_delay(const supervisor_state& st) {
  auto every = st.cfg.heartbeat_interval;
  if (st.namespace_ready || !st.cluster_error.empty())
    return every;
  return std::max<caf::timespan>(every / 5, std::chrono::milliseconds(10));
}

// One cluster heartbeat: the aggregator's progress, published; the
// namespace's view, read; the next one after the answer.
void heartbeat(supervisor_pointer self) {
  auto& st = state_of(self);
  if (st.stopping || !st.member)
    return;
  if (st.hb_in_flight) {
    st.hb_again = true;
    return;
  }
  st.hb_in_flight = true;
  auto id = st.generation;
  // After an answer: at once if asked meanwhile, else after the interval,
  // or a fifth of it while the namespace is readable but not ready (a
  // handover in progress: the gate opens as soon as the view shows the new
  // owner at its H0, not up to one interval later; one EVAL per read).
  auto next = [=] {
    auto& st = state_of(self);
    st.hb_in_flight = false;
    if (st.hb_again) {
      st.hb_again = false;
      heartbeat(self);
      return;
    }
    qsp::mail(self, atom::heartbeat_v, ++st.hb_token).delay(heartbeat_delay(st)).send(self);
  };
  auto timeout = st.cfg.redis.command_timeout + std::chrono::seconds(1);
  auto send = [=](std::vector<partition_status> parts) {
    auto& st = state_of(self);
    if (st.stopping)
      return;
    qsp::mail(self, atom::heartbeat_v, published(st, parts)).request(st.member, timeout)
      .then(
        [=](cluster_report& rep) {
          if (state_of(self).stopping)
            return;
          on_report(self, rep);
          next();
        },
        [=](caf::error& err) {
          if (state_of(self).stopping)
            return;
          on_report(self, cluster_report{{}, {}, describe(err)});
          next();
        });
  };
  if (!st.aggregator) {
    send({});
    return;
  }
  qsp::mail(self, atom::status_v).request(st.aggregator, timeout)
    .then([=](std::vector<partition_status>& parts) {
            // A generation started meanwhile: its aggregator's H0 is the one to publish.
            send(state_of(self).generation == id ? std::move(parts)
                                              : std::vector<partition_status>{});
          },
          [=](caf::error&) { send({}); });
}

} // namespace qsp::supervision
