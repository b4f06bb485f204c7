// The supervisor: owns the state machine
//   starting -> verifying -> catching-up -> ready
//   any failure -> dirty (not ready) -> jittered exponential backoff -> verifying
//   refusal     -> refused (no retry; an operator must act)
// It monitors its children; they fail by exiting with an error and only the
// supervisor decides what that means.  `shutdown` ends the children, keeps
// watching them, and answers once every one is down and every I/O resource
// of the projection (Redis connections, librdkafka handles) is released.
#include <algorithm>
#include <utility>
#include <optional>
#include <unistd.h>
#include <random>
#include <string_view>
#include <set>

#include "caf/event_based_actor.hpp"
#include "caf/send.hpp"
#include "caf/stateful_actor.hpp"
#include "caf/typed_event_based_actor.hpp"

#include "actors/cluster_member.hpp"
#include "actors/generation.hpp"
#include "actors/identity_fence.hpp"
#include "actors/metadata_verifier.hpp"
#include "actors/partition_consumer.hpp"
#include "actors/projection.hpp"
#include "actors/readiness_aggregator.hpp"
#include "actors/redis_writer.hpp"
#include "actors/session_reader.hpp"
#include "actors/supervisor.hpp"
#include "actors/supervisor_internal.hpp"
#include "caf/scoped_actor.hpp"
#include "core/cluster.hpp"

namespace qsp {

namespace supervision {

// The PULL_SESSION_LIST gate: this node runs (state ready) and, in the
// clustered modes, every partition of the namespace is ready (docs/DESIGN.md §12).
bool gate_open(const supervisor_state& st) {
  return st.state == "ready" && (!st.cfg.clustered() || st.namespace_ready);
}

projection_status snapshot(const supervisor_state& st) {
  projection_status s;
  s.topic = st.cfg.topic;
  s.ns = st.cfg.ns;
  s.state = st.state;
  s.ready = st.ready;
  s.last_error = st.last_error;
  s.restarts = static_cast<uint32_t>(st.stats->restarts.load());
  s.records = st.stats->records.load();
  s.recipient_writes = st.stats->recipient_writes.load();
  s.batches = st.stats->batches.load();
  s.failures = st.failures;
  s.true_high = st.true_high;
  s.ownership = to_string(st.cfg.ownership);
  s.node = st.node;
  s.owned.assign(st.own.owned().begin(), st.own.owned().end());
  s.namespace_ready = st.cfg.clustered() ? st.namespace_ready : st.ready;
  s.cluster = st.cluster;
  return s;
}

void notify(supervisor_pointer self) {
  auto s = snapshot(state_of(self));
  for (auto& sub : state_of(self).subscribers)
    qsp::mail(self, atom::status_v, s).send(sub);
}

void transition(supervisor_pointer self, std::string next, const std::string& why) {
  auto& st = state_of(self);
  bool changed = st.state != next;
  if (st.state != next)
    st.logs->info("{} -> {}{}{}", st.state, next, why.empty() ? "" : ": ", why);
  st.state = std::move(next);
  st.ready = gate_open(st);
  notify(self);
  // The namespace hears of it now, not at the next tick: a partition that
  // caught up opens the gate sooner, a dirty one closes it sooner.
  if (changed && st.member && !st.stopping)
    heartbeat(self);
}

// Children are monitored (the down handler decides what their end means);
// the termination hook ends them whatever ends the supervisor.
template <class Handle>
void adopt(supervisor_pointer self, const Handle& child) {
  state_of(self).watch.monitor(self, child);
  state_of(self).children.insert(child.address());
  state_of(self).life->children.push_back(caf::actor_cast<caf::actor>(child));
}

// Ends the generation: every child, and every blocking call of theirs.
// With `watch`, the children stay monitored and are remembered in `dying`
// (an ordered shutdown waits for their down messages).
void stop_children(supervisor_pointer self, caf::error reason, bool watch) {
  auto& st = state_of(self);
  auto kill = [&](auto& h) {
    if (h) {
      if (watch)
        st.dying.insert(h.address());
      else
        st.watch.demonitor(self, h.address());
      self->send_exit(h, reason);
      h = nullptr;
    }
  };
  kill(st.verifier);
  kill(st.aggregator);
  kill(st.fence);
  kill(st.writer);
  kill(st.reader);
  for (auto& [p, c] : st.consumers)
    kill(c);
  st.consumers.clear();
  st.extending.clear();
  st.draining.clear();
  // Revokes that waited for an addition: nothing of the generation runs any
  // more once its children are down (watched: answered with the others).
  for (auto& d : st.deferred_revokes) {
    if (watch)
      st.revokes.push_back(d.rp);
    else
      d.rp.deliver(caf::ok_atom_v);
  }
  st.deferred_revokes.clear();
  st.children.clear();
  st.life->children.clear();
  if (st.life->gen) {
    st.life->gen->abort();
    st.life->gen.reset();
  }
}

void fail(supervisor_pointer self, caf::error err) {
  auto& st = state_of(self);
  stop_children(self);
  // Outdates the generation's answers still on their way (a verification
  // that answers after this must not start consumers under a refusal).
  ++st.generation;
  if (auto p = fenced_partition(err))
    if (auto refused = on_fenced(self, *p, describe(err)))
      err = refused;
  auto code = code_of(err);
  std::string kind = code ? to_string(*code) : caf::to_string(err);
  st.failures[kind] += 1;
  if (code && static_cast<size_t>(*code) < metrics::error_kinds)
    st.stats->failures[static_cast<size_t>(*code)] += 1;
  st.last_error = describe(err);
  if (is_refusal(err)) {
    // One full log line per problem (a refusal may list several), each
    // prefixed once: last_error itself starts with the code ("refused: ").
    std::string_view text = st.last_error;
    if (text.substr(0, 9) == "refused: ")
      text.remove_prefix(9);
    while (!text.empty()) {
      auto nl = text.find('\n');
      auto line = text.substr(0, nl);
      if (!line.empty())
        st.logs->error("refused: {}", line);
      text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    }
    for (auto& rp : st.assigns)
      rp.deliver(err);
    st.assigns.clear();
    // A regeneration in progress ends here: the down messages of its
    // children must not start another generation (that would quietly
    // undo the refusal).  Its revokes are answered: nothing of it runs.
    st.regenerating = false;
    st.queued_adds.clear();
    for (auto& rp : st.revokes)
      rp.deliver(caf::ok_atom_v);
    st.revokes.clear();
    transition(self, "refused", "operator action needed");
    return;
  }
  auto base = std::chrono::duration_cast<std::chrono::microseconds>(st.cfg.backoff_initial);
  auto cap = std::chrono::duration_cast<std::chrono::microseconds>(st.cfg.backoff_max);
  auto delay = base * (int64_t{1} << std::min<uint32_t>(st.attempt, 20));
  delay = std::min(delay, cap);
  std::uniform_real_distribution<double> jitter{0.5, 1.5};
  auto wait = std::chrono::microseconds(
    static_cast<int64_t>(static_cast<double>(delay.count()) * jitter(st.rng)));
  ++st.attempt;
  st.stats->restarts += 1;
  st.logs->warn("dirty: {}; restarting from the checkpoints in {} ms", st.last_error,
                wait.count() / 1000);
  transition(self, "dirty", st.last_error);
  qsp::mail(self, atom::restart_v, st.generation).delay(caf::timespan{wait}).send(self);
}

// One consumer per partition of `vs`, reading from its explicit start.
bool spawn_consumers(supervisor_pointer self, const verified_start& vs, generation& gen) {
  auto& st = state_of(self);
  for (auto& [p, start] : vs.starts) {
    auto reader = gen.log->reader(p);
    if (!reader) {
      fail(self, caf::make_error(ec::kafka_read, "no reader for partition " + std::to_string(p)));
      return false;
    }
    // The stored epoch of a start at its checkpoint: the floor for the
    // epochs the reader delivers from there.
    int32_t epoch = -1;
    if (auto cp = vs.checkpoints.find(p); cp != vs.checkpoints.end() && cp->second == start)
      if (auto e = vs.epochs.find(p); e != vs.epochs.end())
        epoch = e->second;
    // A host's reader: the gap audit waits on the broker, so its consumers
    // get threads of their own where the projection's I/O does.
    auto c = gen.audit && st.opts.detached_io
               ? self->spawn<caf::detached>(partition_consumer, st.cfg, p, start, epoch, reader,
                                            st.decoder, st.writer, gen.audit)
               : self->spawn(partition_consumer, st.cfg, p, start, epoch, reader, st.decoder,
                             st.writer, gen.audit);
    adopt(self, c);
    st.consumers[p] = c;
  }
  return true;
}

void on_verified(supervisor_pointer self, verified_start vs, std::shared_ptr<generation> gen) {
  auto& st = state_of(self);
  st.true_high = vs.true_high;
  for (auto& [p, e] : vs.owner_epochs)
    st.own.claimed(p, e);
  // The partitions asked for are claimed, verified and consuming.
  for (auto& rp : st.assigns)
    rp.deliver(caf::ok_atom_v);
  st.assigns.clear();
  if (vs.meta_created)
    st.logs->info("created {}:meta (cluster {}, topic id {})", st.cfg.ns, vs.id.cluster_id,
                  vs.id.topic_id);
  for (auto& [p, start] : vs.starts)
    st.logs->info("partition {}: start {} H0 {}", p, start, vs.h0[p]);
  auto io = st.opts.detached_io;
  // Actors that block on Redis or the broker get their own threads.
  auto spawn_io = [&](auto fun, auto&&... xs) {
    return io ? self->spawn<caf::detached>(fun, std::forward<decltype(xs)>(xs)...)
              : self->spawn(fun, std::forward<decltype(xs)>(xs)...);
  };
  st.aggregator = self->spawn(readiness_aggregator, st.cfg, vs, supervisor_actor{self}, st.logs,
                              gen->log);
  adopt(self, st.aggregator);
  st.fence = spawn_io(identity_fence, st.cfg, vs.id, gen, st.stats);
  adopt(self, st.fence);
  st.writer = spawn_io(redis_writer, st.cfg, vs, gen, st.aggregator, st.fence, st.stats);
  adopt(self, st.writer);
  st.reader = spawn_io(session_reader, gen, st.cfg.identity_check_interval);
  adopt(self, st.reader);
  if (!spawn_consumers(self, vs, *gen))
    return;
  if (st.state == "verifying")
    transition(self, "catching-up", "");
}

void start_generation(supervisor_pointer self) {
  auto& st = state_of(self);
  ++st.generation;
  transition(self, "verifying", "");
  auto gen = std::make_shared<generation>();
  gen->ports = st.ports;
  gen->logs = st.logs;
  gen->wall_ms = st.opts.wall_clock;
  gen->own_all = !st.cfg.clustered();
  gen->owned = st.own.owned();
  gen->set_claims(st.own.epochs());
  gen->node = st.node;
  st.life->gen = gen;
  st.verifier = st.opts.detached_io ? self->spawn<caf::detached>(metadata_verifier, st.cfg, gen)
                                    : self->spawn(metadata_verifier, st.cfg, gen);
  adopt(self, st.verifier);
  auto id = st.generation;
  qsp::mail(self, atom::verify_v).request(st.verifier, caf::infinite)
    .then(
      [=](verified_start& vs) {
        if (state_of(self).generation == id && !state_of(self).stopping)
          on_verified(self, std::move(vs), gen);
      },
      [=](caf::error& err) {
        auto& st = state_of(self);
        if (st.generation != id || st.stopping)
          return;
        // Claims made before the failure stand: this node still owns them.
        for (auto& [p, e] : gen->claims())
          st.own.claimed(p, e);
        fail(self, err);
      });
}

// Answers every shutdown request once the children are down and the
// projection's I/O is released, or with an error at the deadline; then quits.
void shutdown_tick(supervisor_pointer self) {
  auto& st = state_of(self);
  bool io_done = st.opts.io.expired();
  bool done = st.dying.empty() && io_done;
  if (!done && self->clock().now() < st.shutdown_deadline) {
    qsp::mail(self, atom::tick_v).delay(std::chrono::milliseconds(5)).send(self);
    return;
  }
  if (done) {
    for (auto& rp : st.shutdowns)
      rp.deliver(caf::ok_atom_v);
  } else {
    auto err = caf::make_error(
      ec::shutting_down,
      "projection of " + st.cfg.topic + " (" + st.cfg.ns + ") did not stop within "
        + std::to_string(
          std::chrono::duration_cast<std::chrono::milliseconds>(st.cfg.shutdown_timeout).count())
        + " ms (projection.shutdown-timeout): " + std::to_string(st.dying.size())
        + " actor(s) still running" + (io_done ? "" : ", I/O still open"));
    st.logs->error("{}", describe(err));
    for (auto& rp : st.shutdowns)
      rp.deliver(err);
  }
  st.shutdowns.clear();
  self->quit();
}

void begin_shutdown(supervisor_pointer self) {
  auto& st = state_of(self);
  st.stopping = true;
  for (auto& rp : st.revokes)
    rp.deliver(caf::ok_atom_v);
  st.revokes.clear();
  for (auto& rp : st.assigns)
    rp.deliver(caf::make_error(ec::shutting_down, "the projection is stopping"));
  st.assigns.clear();
  if (st.group)
    st.group->leave(); // the survivors rebalance at once
  if (st.member) {
    // This node's statuses go first: its partitions are not ready from now
    // on, whatever their next owner says.  The member quits after that.
    std::vector<owned_status> gone;
    for (auto& [p, e] : st.own.epochs())
      gone.push_back(owned_status{p, e, "stopped", -1, -1, false});
    st.dying.insert(st.member.address());
    auto member = st.member;
    qsp::mail(self, atom::revoke_v, std::move(gone)).request(member, st.cfg.shutdown_timeout)
      .then([=](caf::ok_atom) { self->send_exit(member, caf::exit_reason::user_shutdown); },
            [=](caf::error&) { self->send_exit(member, caf::exit_reason::user_shutdown); });
    st.member = nullptr;
  }
  st.shutdown_deadline = self->clock().now() + st.cfg.shutdown_timeout;
  stop_children(self, caf::exit_reason::user_shutdown, true);
  // The factory holds the I/O token too: nothing restarts from here on.
  st.ports.reset();
  transition(self, "stopped", "shutdown requested");
  shutdown_tick(self);
}

} // namespace supervision

using namespace supervision;

supervisor_actor::behavior_type
supervisor(supervisor_pointer self, projection_settings cfg, std::shared_ptr<port_factory> ports,
           std::shared_ptr<const core::decoder> decoder, std::shared_ptr<metrics> stats,
           projection_options opts) {
  auto& st = state_of(self);
  st.cfg = std::move(cfg);
  st.ports = std::move(ports);
  st.decoder = std::move(decoder);
  st.stats = std::move(stats);
  st.logs = opts.logs ? opts.logs : default_log();
  st.opts = std::move(opts);
  st.rng.seed(st.opts.seed != 0 ? st.opts.seed
                                 : static_cast<uint64_t>(
                                   self->clock().now().time_since_epoch().count()));
  st.watch.on_down(self, [=](const caf::actor_addr& source, const caf::error& down_reason) {
    auto& st = state_of(self);
    // A subscriber that terminated: forget it.
    auto sub = std::find_if(st.subscribers.begin(), st.subscribers.end(),
                            [&](const status_listener& x) { return x.address() == source; });
    if (sub != st.subscribers.end()) {
      st.subscribers.erase(sub);
      return;
    }
    if (st.stopping) {
      st.dying.erase(source);
      return;
    }
    if (st.dying.erase(source) > 0) {
      if (st.regenerating && st.dying.empty())
        finish_regeneration(self);
      return;
    }
    if (st.children.erase(source) == 0)
      return;
    // A child whose request found its peer (another child) gone: the peer's
    // own down message carries the real reason and fails the generation.
    if (down_reason == caf::sec::request_receiver_down)
      return;
    auto reason = down_reason ? down_reason
                             : caf::make_error(ec::unspecified, "a child exited unexpectedly");
    fail(self, reason);
  });
  // Trapping exits: an exit message (a host's send_exit, a linked host
  // actor that died) ends the projection at once, children and blocking
  // calls included (use `shutdown` to learn when all of it has stopped).
  // A normal exit of a linked actor is ignored, as CAF's default handler does.
  auto on_exit = [=](caf::exit_msg& msg) {
    auto& st = state_of(self);
    if (!msg.reason || st.stopping)
      return;
    st.logs->info("exit message ({}), stopping", caf::to_string(msg.reason));
    st.stopping = true;
    stop_children(self, msg.reason);
    transition(self, "stopped", "exit message");
    self->quit(msg.reason);
  };
  // However the supervisor ends (even by exit_reason::kill, which cannot be
  // trapped), no child and no blocking call of the current generation
  // outlives it.
  self->attach_functor([life = st.life, on_end = st.opts.on_end](const caf::error&) {
    for (auto& child : life->children)
      caf::anon_send_exit(child, caf::exit_reason::user_shutdown);
    life->children.clear();
    if (life->gen)
      life->gen->abort();
    if (life->member)
      caf::anon_send_exit(life->member, caf::exit_reason::user_shutdown);
    if (life->member_io)
      life->member_io->abort();
    if (on_end)
      on_end();
  });
  // Ownership (docs/DESIGN.md §12).
  st.node = st.cfg.node_id;
  if (st.node.empty()) {
    char host[256] = {};
    if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0')
      std::snprintf(host, sizeof(host), "node");
    st.node = std::string{host} + "-" + std::to_string(getpid());
  }
  st.own = core::ownership{st.cfg.clustered(), st.cfg.ownership == ownership_mode::all
                                                  || st.cfg.ownership == ownership_mode::static_set};
  switch (st.cfg.ownership) {
    case ownership_mode::all:
      for (int32_t p = 0; p < st.cfg.partition_count; ++p)
        st.own.assign({p});
      break;
    case ownership_mode::static_set:
      st.own.assign(st.cfg.partitions);
      break;
    case ownership_mode::group:
    case ownership_mode::host:
      break; // until assigned
  }
  if (st.cfg.clustered()) {
    st.logs->info("ownership {}, node {}{}", to_string(st.cfg.ownership), st.node,
                  st.own.owned().empty()
                    ? std::string{}
                    : ", partitions "
                        + core::format_partition_list(std::vector<int32_t>(
                          st.own.owned().begin(), st.own.owned().end())));
    st.member_io = std::make_shared<qsp::generation>();
    st.member_io->wall_ms = st.opts.wall_clock;
    st.member = st.opts.detached_io ? self->spawn<caf::detached>(cluster_member, st.cfg, st.node,
                                                                 st.ports, st.member_io)
                                    : self->spawn(cluster_member, st.cfg, st.node, st.ports,
                                                  st.member_io);
    st.life->member = caf::actor_cast<caf::actor>(st.member);
    st.life->member_io = st.member_io;
    st.watch.monitor(self, st.member);
    qsp::mail(self, atom::heartbeat_v, st.hb_token).send(self);
  }
  if (st.cfg.ownership == ownership_mode::group) {
    auto* sys = &self->system();
    auto addr = self->address();
    auto timeout = st.cfg.shutdown_timeout;
    group_events ev;
    ev.assigned = [sys, addr](const std::vector<int32_t>& parts) {
      if (auto sup = caf::actor_cast<caf::actor>(addr))
        qsp::anon_mail(atom::assign_v, parts).send(caf::actor_cast<projection_actor>(sup));
    };
    ev.revoked = [sys, addr, timeout](const std::vector<int32_t>& parts, bool) {
      auto sup = caf::actor_cast<caf::actor>(addr);
      if (!sup)
        return;
      // The group moves them on only after this returns.
      caf::scoped_actor blocking{*sys};
      qsp::mail(blocking, atom::revoke_v, parts).request(caf::actor_cast<projection_actor>(sup), timeout)
        .receive([](caf::ok_atom) {}, [](caf::error&) {});
    };
    ev.failed = [addr](const caf::error& err) {
      if (auto sup = caf::actor_cast<caf::actor>(addr))
        qsp::anon_mail(atom::verify_v, err).send(caf::actor_cast<supervisor_actor>(sup));
    };
    auto made = st.ports->make_group_member(std::move(ev));
    if (!made) {
      qsp::mail(self, atom::verify_v, made.error()).send(self);
    } else {
      st.group = std::move(*made);
    }
  }
  qsp::mail(self, atom::restart_v, uint64_t{0}).send(self);
  return with_exit_handler<supervisor_actor::behavior_type>(
    self, on_exit,
    [=](atom::status) -> caf::result<projection_status> {
      auto rp = self->make_response_promise<projection_status>();
      auto s = snapshot(state_of(self));
      if (!state_of(self).aggregator) {
        rp.deliver(s);
        return rp;
      }
      qsp::mail(self, atom::status_v).request(state_of(self).aggregator, std::chrono::seconds(5))
        .then(
          [=](std::vector<partition_status>& parts) mutable {
            s.partitions = std::move(parts);
            rp.deliver(s);
          },
          [=](caf::error&) mutable { rp.deliver(s); });
      return rp;
    },
    [=](atom::pull, const std::string& user, uint32_t limit) -> caf::result<session_list> {
      // The PULL_SESSION_LIST gate.
      auto& st = state_of(self);
      if (!st.ready || !st.reader) {
        auto text = "projection of " + st.cfg.topic + " (" + st.cfg.ns + ") is " + st.state;
        if (st.state == "ready" && st.cfg.clustered() && !st.namespace_ready)
          text += ", but its namespace is not: " + namespace_held(st);
        return caf::make_error(ec::not_ready, std::move(text));
      }
      // Ready is a claim about Redis even while idle (issue 45, rule 6): a
      // read that meets a lost connection (a failover, a restart: writes may
      // have been rolled back under the gate) closes the gate before any
      // later pull is served; the restart from the checkpoints replays what
      // Redis lost and opens it again.  Other errors (a wrong reply) leave
      // the gate as it is.
      auto rp = self->make_response_promise<session_list>();
      auto at = st.generation;
      qsp::mail(self, atom::sessions_v, user, limit)
        .request(st.reader, caf::infinite)
        .then([rp](session_list& l) mutable { rp.deliver(std::move(l)); },
              [=](caf::error& err) mutable {
                rp.deliver(err);
                auto& now = state_of(self);
                if (code_of(err) == ec::redis_unavailable && now.generation == at && now.ready) {
                  now.logs->warn("a pull met a lost Redis connection while ready: closing the "
                                 "gate until the checkpoints are replayed");
                  fail(self, err);
                }
              });
      return rp;
    },
    [=](atom::subscribe, const status_listener& listener) {
      auto& st = state_of(self);
      if (!listener)
        return;
      auto known = std::any_of(st.subscribers.begin(), st.subscribers.end(),
                               [&](const status_listener& x) { return x == listener; });
      if (!known) {
        st.subscribers.push_back(listener);
        st.watch.monitor(self, listener);
      }
      qsp::mail(self, atom::status_v, snapshot(st)).send(listener);
    },
    [=](atom::unsubscribe, const status_listener& listener) {
      auto& st = state_of(self);
      auto i = std::find(st.subscribers.begin(), st.subscribers.end(), listener);
      if (i != st.subscribers.end()) {
        st.watch.demonitor(self, listener.address());
        st.subscribers.erase(i);
      }
    },
    [=](atom::ready) {
      // Only this generation's aggregator may open the gate: a previous
      // generation's aggregator can still announce after a restart.
      if (caf::actor_cast<caf::actor_addr>(self->current_sender())
          != state_of(self).aggregator.address())
        return;
      if (state_of(self).state == "catching-up") {
        state_of(self).attempt = 0;
        transition(self, "ready",
                   state_of(self).cfg.clustered() && state_of(self).own.owned().empty()
                     ? "owns no partition (yet); the gate follows the namespace"
                     : "every partition reached its start target H0");
      }
    },
    [=](atom::restart, uint64_t gen) {
      auto& st = state_of(self);
      if (gen == st.generation && !st.stopping && (st.state == "starting" || st.state == "dirty"))
        start_generation(self);
    },
    [=](atom::tick) {
      if (state_of(self).stopping && !state_of(self).shutdowns.empty())
        shutdown_tick(self);
    },
    [=](atom::repeat) { notify(self); },
    [=](atom::assign, const std::vector<int32_t>& parts) -> caf::result<caf::ok_atom> {
      auto& st = state_of(self);
      if (st.cfg.ownership != ownership_mode::host && st.cfg.ownership != ownership_mode::group)
        return caf::make_error(ec::invalid_config,
                               std::string{"assign: projection.ownership is "}
                                 + to_string(st.cfg.ownership) + ", not host");
      for (auto p : parts)
        if (p < 0 || p >= st.cfg.partition_count)
          return caf::make_error(ec::invalid_config,
                                 "assign: partition " + std::to_string(p) + " is outside [0, "
                                   + std::to_string(st.cfg.partition_count - 1) + "]");
      if (st.stopping)
        return caf::make_error(ec::shutting_down, "the projection is stopping");
      if (st.state == "refused")
        return caf::make_error(ec::refused, st.last_error);
      auto added = st.own.assign(parts);
      if (added.empty())
        return caf::ok_atom_v;
      st.logs->info("assigned partitions {}", core::format_partition_list(added));
      auto rp = self->make_response_promise<caf::ok_atom>();
      st.assigns.push_back(rp);
      auto still_draining = std::any_of(added.begin(), added.end(),
                                        [&](int32_t p) { return st.draining.count(p) > 0; });
      if (running(st) && !still_draining)
        extend(self, std::move(added));
      else
        regenerate(self);
      return rp;
    },
    [=](atom::revoke, const std::vector<int32_t>& parts) -> caf::result<caf::ok_atom> {
      auto& st = state_of(self);
      if (st.cfg.ownership != ownership_mode::host && st.cfg.ownership != ownership_mode::group)
        return caf::make_error(ec::invalid_config,
                               std::string{"revoke: projection.ownership is "}
                                 + to_string(st.cfg.ownership) + ", not host");
      auto released = st.own.revoke(parts);
      auto& dropped = released.dropped;
      if (dropped.empty() || st.stopping)
        return caf::ok_atom_v;
      std::vector<owned_status> gone;
      for (auto& [p, e] : released.claims)
        gone.push_back(owned_status{p, e, "revoked", -1, -1, false});
      st.logs->info("revoked partitions {}", core::format_partition_list(dropped));
      if (st.member && !gone.empty())
        qsp::mail(self, atom::revoke_v, std::move(gone)).request(st.member, caf::infinite)
          .then([](caf::ok_atom) {}, [](caf::error&) {});
      auto is_dropped = [&](int32_t p) {
        return std::find(dropped.begin(), dropped.end(), p) != dropped.end();
      };
      // Not yet added: never started, nothing to stop.
      st.queued_adds.erase(
        std::remove_if(st.queued_adds.begin(), st.queued_adds.end(), is_dropped),
        st.queued_adds.end());
      auto rp = self->make_response_promise<caf::ok_atom>();
      if (running(st)) {
        if (std::any_of(st.extending.begin(), st.extending.end(), is_dropped))
          st.deferred_revokes.push_back(supervisor_state::deferred_revoke{dropped, rp});
        else
          shrink(self, dropped, rp);
        return rp;
      }
      st.revokes.push_back(rp);
      regenerate(self);
      return rp;
    },
    [=](atom::heartbeat, uint64_t token) {
      if (token == state_of(self).hb_token)
        heartbeat(self);
    },
    [=](atom::verify, const caf::error& err) {
      // The group membership cannot go on (authorization, a fatal error).
      auto& st = state_of(self);
      if (st.stopping || st.state == "refused")
        return;
      fail(self, is_refusal(err) ? err : caf::make_error(ec::refused, describe(err)));
    },
    [=](atom::shutdown) -> caf::result<caf::ok_atom> {
      auto& st = state_of(self);
      auto rp = self->make_response_promise<caf::ok_atom>();
      st.shutdowns.push_back(rp);
      if (!st.stopping)
        begin_shutdown(self);
      return rp;
    });
}

caf::expected<projection_actor>
spawn_projection(caf::actor_system& sys, const projection_settings& cfg,
                 std::shared_ptr<port_factory> ports, std::shared_ptr<const core::decoder> decoder,
                 std::shared_ptr<metrics> stats, projection_options opts) {
  if (auto err = cfg.validate())
    return err;
  if (!ports || !decoder || !stats)
    return caf::make_error(ec::invalid_config,
                           "spawn_projection: ports, decoder and metrics are required");
  auto sup = sys.spawn(supervisor, cfg, std::move(ports), std::move(decoder), std::move(stats),
                       std::move(opts));
  return caf::actor_cast<projection_actor>(sup);
}

} // namespace qsp
