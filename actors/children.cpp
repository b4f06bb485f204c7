#include "actors/children.hpp"

#include <algorithm>

#include "caf/event_based_actor.hpp"
#include "caf/stateful_actor.hpp"

#include "actors/inspection.hpp"
#include "actors/log.hpp"

namespace qsp {

namespace {

uint64_t elapsed_ns(caf::actor_clock::time_point since, caf::actor_clock::time_point now) {
  return static_cast<uint64_t>(
    std::chrono::duration_cast<std::chrono::nanoseconds>(now - since).count());
}

} // namespace

// -- generation ---------------------------------------------------------------

void generation::abort() {
  std::vector<std::function<void()>> hooks;
  {
    std::lock_guard<std::mutex> g{mtx_};
    aborted_ = true;
    hooks = hooks_;
  }
  for (auto& h : hooks)
    h();
}

bool generation::aborted() const {
  std::lock_guard<std::mutex> g{mtx_};
  return aborted_;
}

void generation::add_hook(std::function<void()> hook) {
  {
    std::lock_guard<std::mutex> g{mtx_};
    if (!aborted_) {
      hooks_.push_back(std::move(hook));
      return;
    }
  }
  hook();
}

// -- metadata verifier --------------------------------------------------------

caf::expected<verified_start> verifier_state::run(const projection_settings& cfg,
                                                  generation& gen) {
  // Every handle is made here, on the verifier's own thread in production:
  // rd_kafka_new starts threads and may block.
  auto log = gen.ports->make_dispatch_log();
  if (!log)
    return log.error();
  gen.log = std::move(*log);
  auto made_broker = gen.ports->make_inspector();
  if (!made_broker)
    return made_broker.error();
  std::shared_ptr<broker_inspector> broker = std::move(*made_broker);
  auto made = gen.ports->make_checkpoint_store();
  if (!made)
    return made.error();
  std::shared_ptr<checkpoint_store> store = std::move(*made);
  gen.track(store);
  auto r = inspect_startup(cfg, *broker, *store);
  if (!r)
    return r.error();
  if (!r->ok())
    return refusal(r->problems);
  verified_start vs;
  vs.id = r->observed;
  vs.starts = r->plan.starts();
  vs.checkpoints = r->validated.next_offsets;
  vs.h0 = r->plan.h0();
  for (size_t p = 0; p < r->broker.true_high.size(); ++p)
    vs.true_high[static_cast<int32_t>(p)] = r->broker.true_high[p];
  vs.retention_ms = r->broker.retention_ms;
  // Create the consumer with the explicit starts; it checks [low, high] itself.
  if (auto started = gen.log->start(vs.starts); !started)
    return started.error();
  // Identity must be unchanged between the inspection and the consumer's readiness.
  auto again = broker->identity(cfg.topic);
  if (!again)
    return again.error();
  if (auto err = identity_mismatch(vs.id, *again, "during startup"))
    return err;
  // Meta is created only once everything above is proven, so a refused
  // startup leaves nothing behind.
  if (!r->validated.meta_present) {
    auto created = store->create_meta(vs.id);
    if (!created)
      return created.error();
    vs.meta_created = *created;
  }
  gen.checkpoints = std::move(store);
  gen.broker = std::move(broker); // the identity fence's, from now on
  return vs;
}

verifier_actor::behavior_type
metadata_verifier(verifier_actor::stateful_pointer<verifier_state> self, projection_settings cfg,
                  std::shared_ptr<generation> gen) {
  return {
    [=](atom::verify) -> caf::result<verified_start> {
      auto vs = self->state.run(cfg, *gen);
      if (!vs)
        return vs.error();
      return std::move(*vs);
    },
  };
}

// -- identity fence -----------------------------------------------------------

caf::expected<uint64_t> fence_state::check(const projection_settings& cfg, generation& gen) {
  auto seq = ++checks;
  auto seen = gen.broker->identity(cfg.topic);
  if (!seen)
    return seen.error();
  if (auto err = identity_mismatch(pinned, *seen, "while running"))
    return err;
  return seq;
}

fence_actor::behavior_type identity_fence(fence_actor::stateful_pointer<fence_state> self,
                                          projection_settings cfg, core::identity pinned,
                                          std::shared_ptr<generation> gen,
                                          std::shared_ptr<metrics> stats) {
  self->state.pinned = std::move(pinned);
  // Runs one check and answers every request that arrived before it started.
  auto run = [=] {
    auto& st = self->state;
    st.last_start = self->clock().now();
    auto waiting = std::move(st.waiting);
    st.waiting.clear();
    stats->identity_checks += 1;
    auto r = st.check(cfg, *gen);
    if (!r) {
      if (!is_refusal(r.error())) {
        stats->identity_check_errors += 1;
        QSP_LOG_WARN("identity check of topic {} unanswered: {}", cfg.topic, describe(r.error()));
      }
      for (auto& rp : waiting)
        rp.deliver(r.error());
      self->quit(r.error());
      return;
    }
    for (auto& rp : waiting)
      rp.deliver(*r);
  };
  self->send(self, atom::tick_v);
  return {
    [=](atom::check) -> caf::result<uint64_t> {
      auto& st = self->state;
      auto rp = self->make_response_promise<uint64_t>();
      st.waiting.push_back(rp);
      if (!st.delayed) {
        auto due = st.last_start + cfg.identity_check_min_gap;
        auto now = self->clock().now();
        if (now >= due) {
          run();
        } else {
          st.delayed = true;
          self->delayed_send(self, due - now, atom::poll_v);
        }
      }
      return rp;
    },
    [=](atom::poll) {
      self->state.delayed = false;
      if (!self->state.waiting.empty())
        run();
    },
    [=](atom::tick) {
      run();
      if (!self->getf(caf::abstract_actor::is_terminated_flag))
        self->delayed_send(self, cfg.identity_check_interval, atom::tick_v);
    },
  };
}

// -- session reader -----------------------------------------------------------

reader_actor::behavior_type session_reader(reader_actor::stateful_pointer<reader_state> self,
                                           std::shared_ptr<generation> gen) {
  return {
    [=](atom::sessions, const std::string& user, uint32_t limit) -> caf::result<session_list> {
      auto& st = self->state;
      if (!st.sessions) {
        auto made = gen->ports->make_session_store();
        if (!made)
          return made.error();
        st.sessions = std::move(*made);
        gen->track(st.sessions);
      }
      auto r = st.sessions->sessions(user, limit);
      if (!r) {
        st.sessions.reset(); // a fresh connection for the next read
        return r.error();
      }
      return std::move(*r);
    },
  };
}

// -- readiness aggregator -----------------------------------------------------

bool aggregator_state::ready() const {
  return std::all_of(parts.begin(), parts.end(),
                     [](auto& kv) { return kv.second.next_offset >= kv.second.h0; });
}

int64_t aggregator_state::remaining() const {
  int64_t n = 0;
  for (auto& [p, st] : parts)
    n += std::max<int64_t>(0, st.h0 - st.next_offset);
  return n;
}

bool aggregator_state::advance(const checkpoint_advanced& cp) {
  auto i = parts.find(cp.partition);
  if (i == parts.end() || cp.next_offset < i->second.next_offset)
    return false;
  i->second.next_offset = cp.next_offset;
  return true;
}

aggregator_actor::behavior_type
readiness_aggregator(aggregator_actor::stateful_pointer<aggregator_state> self,
                     projection_settings cfg, verified_start vs, projection_actor supervisor) {
  for (auto& [p, start] : vs.starts)
    self->state.parts[p] = partition_status{p, start, vs.h0[p], start};
  auto announce_if_ready = [=] {
    if (!self->state.announced && self->state.ready()) {
      self->state.announced = true;
      self->send(supervisor, atom::ready_v);
    }
  };
  announce_if_ready();
  self->state.remaining_at_tick = self->state.remaining();
  if (!self->state.announced)
    self->delayed_send(self, cfg.progress_interval, atom::poll_v);
  return {
    [=](atom::progress, const checkpoint_advanced& cp) {
      if (!self->state.advance(cp))
        QSP_LOG_WARN("partition {}: checkpoint {} reported out of order", cp.partition,
                     cp.next_offset);
      announce_if_ready();
    },
    [=](atom::poll) {
      // Catch-up progress: done / H0 per partition, overall %, rate, ETA.
      if (self->state.announced)
        return;
      auto& st = self->state;
      int64_t total = 0, left = st.remaining();
      std::string parts;
      for (auto& [p, ps] : st.parts) {
        total += ps.h0 - ps.start;
        parts += fmt::format(" p{}={}/{}", p, ps.next_offset, ps.h0);
      }
      double secs = std::chrono::duration<double>(cfg.progress_interval).count();
      double rate = static_cast<double>(st.remaining_at_tick - left) / secs;
      double pct = total > 0 ? 100.0 * static_cast<double>(total - left) / static_cast<double>(total) : 100.0;
      std::string eta = rate > 0 ? fmt::format("{:.0f}s", static_cast<double>(left) / rate) : "?";
      QSP_LOG_INFO("catch-up {:.1f}% ({} offsets left, {:.0f} offsets/s, ETA {}):{}", pct, left,
                   rate, eta, parts);
      st.remaining_at_tick = left;
      self->delayed_send(self, cfg.progress_interval, atom::poll_v);
    },
    [=](atom::status) -> std::vector<partition_status> {
      std::vector<partition_status> out;
      for (auto& [p, ps] : self->state.parts)
        out.push_back(ps);
      return out;
    },
  };
}

// -- redis writer -------------------------------------------------------------

const std::vector<session_update>& writer_state::coalesce(const partition_batch& b) {
  // Views into the batch, grouped by (user, conversation) via a sort on
  // precomputed hashes: no allocation once the scratch vectors are warm.
  refs.clear();
  std::hash<std::string_view> h;
  for (auto& d : b.records) {
    std::string_view conv = d.conversation_id;
    auto hc = h(conv);
    for (auto& user : d.recipients)
      refs.push_back(member_ref{h(user), hc, user, conv, d.created_at});
  }
  std::sort(refs.begin(), refs.end(), [](const member_ref& x, const member_ref& y) {
    if (x.user_hash != y.user_hash) return x.user_hash < y.user_hash;
    if (x.user != y.user) return x.user < y.user;
    if (x.conv_hash != y.conv_hash) return x.conv_hash < y.conv_hash;
    if (x.conv != y.conv) return x.conv < y.conv;
    return x.score > y.score;  // the first of a (user, conversation) run is its max
  });
  members.clear();
  members.reserve(refs.size());  // updates point into it: no reallocation below
  updates.clear();
  for (size_t i = 0; i < refs.size();) {
    size_t first = members.size();
    auto user = refs[i].user;
    auto uh = refs[i].user_hash;
    while (i < refs.size() && refs[i].user_hash == uh && refs[i].user == user) {
      auto& r = refs[i];
      if (members.size() == first || members.back().conversation != r.conv)
        members.push_back(session_member{r.conv, r.score});
      ++i;
    }
    updates.push_back(session_update{user, members.data() + first, members.size() - first});
  }
  return updates;
}

caf::expected<bool> writer_state::send(const partition_batch& b,
                                       caf::actor_clock::time_point t0) {
  auto& last = sent[b.partition];
  if (b.end_offset <= (last < 0 ? b.begin_offset : last) && b.records.empty())
    return false; // nothing new: no ZADD, no checkpoint
  if (!sessions) {
    auto s = gen->ports->make_session_store();
    if (!s)
      return s.error();
    sessions = std::move(*s);
    gen->track(sessions);
  }
  auto& ups = coalesce(b);
  if (!ups.empty())
    if (auto ok = sessions->send(ups); !ok)
      return ok.error();
  in_flight f;
  f.partition = b.partition;
  f.end_offset = b.end_offset;
  f.records = b.records.size();
  for (auto& u : ups)
    f.recipient_writes += u.count;
  f.zadds = ups.size();
  f.fence_tag = fence_requests;
  f.t0 = t0;
  pending.push_back(std::move(f));
  last = b.end_offset;
  return true;
}

bool writer_state::busy(int32_t p) const {
  auto of_p = [p](const in_flight& f) { return f.partition == p; };
  return std::any_of(pending.begin(), pending.end(), of_p)
         || std::any_of(fenced.begin(), fenced.end(), of_p);
}

caf::expected<bool> writer_state::confirm_oldest(std::chrono::milliseconds wait) {
  auto& f = pending.front();
  if (f.zadds == 0)
    return true;
  return sessions->confirm(f.zadds, wait);
}

caf::expected<std::vector<checkpoint_advanced>>
writer_state::checkpoint_fenced(uint64_t answered, caf::actor_clock::time_point now) {
  // Batches of a partition are in offset order: its last one is its highest.
  std::map<int32_t, checkpoint_advanced> next;
  size_t covered = 0;
  for (auto& f : fenced) {
    if (f.fence_tag >= answered)
      break;
    auto& cp = next[f.partition];
    cp.partition = f.partition;
    cp.next_offset = f.end_offset;
    cp.records += f.records;
    cp.recipient_writes += f.recipient_writes;
    ++covered;
  }
  std::vector<checkpoint_advanced> out;
  for (auto& [p, cp] : next) {
    // Every reply of every batch up to cp.next_offset was read and none was
    // an error, and the identity was confirmed after they were fetched.
    auto& cur = stored[p];
    if (auto ok = gen->checkpoints->write_checkpoint(id, p, cur, cp.next_offset); !ok)
      return ok.error();
    cur = cp.next_offset;
    stats->records += cp.records;
    stats->recipient_writes += cp.recipient_writes;
    out.push_back(cp);
  }
  for (; covered > 0; --covered) {
    stats->batches += 1;
    stats->observe_batch_latency(elapsed_ns(fenced.front().t0, now));
    fenced.pop_front();
  }
  return out;
}

namespace {

using writer_pointer = writer_actor::stateful_pointer<writer_state>;

// Any failure ends this writer (and so the generation): the pipelined
// connection's state is unknown, and no later checkpoint may be written.
void writer_fail(writer_pointer self, const caf::error& err) {
  auto& st = self->state;
  for (auto& f : st.pending)
    f.rp.deliver(err);
  st.pending.clear();
  st.fenced.clear();
  for (auto& [p, rp] : st.flushes)
    rp.deliver(err);
  st.flushes.clear();
  self->quit(err);
}

// Answers the flush requests of partitions with nothing in flight.
void answer_flushes(writer_pointer self) {
  auto& st = self->state;
  for (auto i = st.flushes.begin(); i != st.flushes.end();) {
    if (st.busy(i->first)) {
      ++i;
      continue;
    }
    i->second.deliver(st.stored[i->first]);
    i = st.flushes.erase(i);
  }
}

// Asks the identity fence for a check that starts after the newest batch in
// `fenced` was fetched, unless a request was already sent after it arrived.
// Requests may overlap: the fence answers them in order, and every request
// waiting when a check starts is answered by that check, so a checkpoint
// waits for at most the next check, not for the one after it.
void request_fence(writer_pointer self, fence_actor fence, aggregator_actor aggregator) {
  auto& st = self->state;
  if (st.fenced.empty() || st.fenced.back().fence_tag < st.fence_requests)
    return;
  auto k = ++st.fence_requests;
  self->request(fence, caf::infinite, atom::check_v)
    .then(
      [=](uint64_t) {
        auto& st = self->state;
        auto cps = st.checkpoint_fenced(k, self->clock().now());
        if (!cps) {
          writer_fail(self, cps.error());
          return;
        }
        for (auto& cp : *cps)
          self->send(aggregator, atom::progress_v, cp);
        answer_flushes(self);
      },
      [=](caf::error& err) { writer_fail(self, err); });
}

} // namespace

writer_actor::behavior_type
redis_writer(writer_actor::stateful_pointer<writer_state> self, projection_settings cfg,
             verified_start vs, std::shared_ptr<generation> gen, aggregator_actor aggregator,
             fence_actor fence, std::shared_ptr<metrics> stats) {
  auto& st = self->state;
  st.gen = std::move(gen);
  st.id = vs.id;
  st.stats = std::move(stats);
  // Partitions without a stored checkpoint start from "absent" (bootstrap).
  for (auto& [p, start] : vs.starts) {
    auto i = vs.checkpoints.find(p);
    st.sent[p] = st.stored[p] = i != vs.checkpoints.end() ? i->second : -1;
  }
  return {
    [=](atom::write, const partition_batch& b) -> caf::result<checkpoint_advanced> {
      auto& st = self->state;
      auto queued = st.send(b, self->clock().now());
      if (!queued) {
        writer_fail(self, queued.error());
        return queued.error();
      }
      if (!*queued) {
        auto last = st.sent[b.partition];
        return checkpoint_advanced{b.partition, last < 0 ? b.begin_offset : last, 0, 0};
      }
      // Replies are read on the confirm loop (atom::poll), between writes:
      // the next batch goes out while Redis still works on this one.
      if (!st.confirming) {
        st.confirming = true;
        self->send(self, atom::poll_v);
      }
      auto rp = self->make_response_promise<checkpoint_advanced>();
      st.pending.back().rp = rp;
      return rp;
    },
    [=](atom::flush, int32_t partition) -> caf::result<int64_t> {
      auto& st = self->state;
      if (!st.busy(partition))
        return st.stored[partition];
      auto rp = self->make_response_promise<int64_t>();
      st.flushes.emplace(partition, rp);
      return rp;
    },
    [=](atom::poll) {
      auto& st = self->state;
      if (st.pending.empty()) {
        st.confirming = false;
        return;
      }
      // Block briefly for replies only when no write is waiting.
      auto wait = self->mailbox().empty() ? st.confirm_wait : std::chrono::milliseconds{0};
      auto polled_at = self->clock().now();
      auto done = st.confirm_oldest(wait);
      if (!done) {
        writer_fail(self, done.error());
        return;
      }
      if (*done) {
        auto f = std::move(st.pending.front());
        st.pending.pop_front();
        // The consumer may send more; the checkpoint waits for the fence.
        f.rp.deliver(checkpoint_advanced{f.partition, f.end_offset, f.records,
                                         f.recipient_writes});
        st.fenced.push_back(std::move(f));
        request_fence(self, fence, aggregator);
      } else if (self->clock().now() - st.pending.front().t0 > cfg.write_timeout) {
        auto& f = st.pending.front();
        writer_fail(self, caf::make_error(
                            ec::redis_unavailable,
                            "no reply from Redis to the " + std::to_string(f.zadds)
                              + " ZADDs of partition " + std::to_string(f.partition)
                              + " up to offset " + std::to_string(f.end_offset) + " within "
                              + std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                 cfg.write_timeout).count())
                              + " ms (redis.command-timeout)"));
        return;
      }
      if (st.pending.empty()) {
        st.confirming = false;
      } else if (auto spent = self->clock().now() - polled_at; !*done && spent < wait) {
        // The store answered "not yet" without waiting (it cannot block, as
        // in the deterministic tests): try again once `wait` has passed.
        self->delayed_send(self, wait - spent, atom::poll_v);
      } else {
        self->send(self, atom::poll_v); // behind the writes that arrived meanwhile
      }
    },
  };
}

// -- partition consumer -------------------------------------------------------

caf::expected<partition_batch> consumer_state::next_batch(const projection_settings& cfg) {
  buf.clear();
  int64_t passed = -1;
  if (auto ok = reader->poll(cfg.max_batch_records, buf, passed); !ok)
    return ok.error();
  partition_batch b;
  b.partition = partition;
  b.begin_offset = sent_end;
  b.end_offset = sent_end;
  for (auto& rec : buf) {
    if (rec.offset < sent_end)
      continue; // already projected (redelivery)
    core::dispatch d;
    std::string why;
    if (!decoder->decode(rec.value, d, why)) {
      // Project what precedes it; stop exactly at the poison record.
      poison = caf::make_error(ec::undecodable, "topic " + topic + " partition "
                                                  + std::to_string(partition) + " offset "
                                                  + std::to_string(rec.offset) + ": " + why);
      return b;
    }
    b.bytes += rec.value.size();
    b.records.push_back(std::move(d));
    b.end_offset = rec.offset + 1;
  }
  // Offsets below the EOF position were delivered or are markers/aborted.
  if (passed > b.end_offset)
    b.end_offset = passed;
  return b;
}

consumer_actor::behavior_type
partition_consumer(consumer_actor::stateful_pointer<consumer_state> self, projection_settings cfg,
                   int32_t partition, int64_t start, std::shared_ptr<partition_reader> reader,
                   std::shared_ptr<const core::decoder> decoder, writer_actor writer) {
  auto& st = self->state;
  st.reader = std::move(reader);
  st.decoder = std::move(decoder);
  st.topic = cfg.topic;
  st.partition = partition;
  st.sent_end = start;
  // Wake-ups: at most one atom::poll and one atom::tick are queued at any
  // time (a queued poll sees the latest state when it runs, so a second one
  // would only duplicate it, and duplicated ticks would multiply), plus the
  // reader's atom::wake when records arrive on an empty queue.
  auto poll_now = [=] {
    auto& st = self->state;
    if (st.poll_queued)
      return;
    st.poll_queued = true;
    self->send(self, atom::poll_v);
  };
  auto tick_later = [=] {
    auto& st = self->state;
    if (st.tick_queued)
      return;
    st.tick_queued = true;
    self->delayed_send(self, cfg.idle_poll, atom::tick_v);
  };
  // Nothing after an undecodable record: stop once what precedes it is
  // confirmed and checkpointed.
  auto stop_at_poison = [=] {
    auto& st = self->state;
    if (st.stopping)
      return;
    st.stopping = true;
    self->request(writer, caf::infinite, atom::flush_v, st.partition)
      .then([=](int64_t) { self->quit(self->state.poison); },
            [=](caf::error& err) { self->quit(std::move(err)); });
  };
  auto poll = [=] {
    auto& st = self->state;
    if (st.poison) {
      if (st.in_flight == 0)
        stop_at_poison();
      return;
    }
    if (st.in_flight >= cfg.max_batches_in_flight)
      return; // a confirmation polls again
    auto b = st.next_batch(cfg);
    if (!b) {
      self->quit(b.error());
      return;
    }
    if (b->records.empty() && b->end_offset <= st.sent_end) {
      if (st.poison && st.in_flight == 0)
        stop_at_poison();
      else if (st.in_flight == 0)
        tick_later();
      return; // else: the next confirmation polls again
    }
    ++st.in_flight;
    st.sent_end = b->end_offset;
    self->request(writer, caf::infinite, atom::write_v, std::move(*b))
      .then(
        [=](const checkpoint_advanced&) {
          --self->state.in_flight;
          poll_now();
        },
        [=](caf::error& err) { self->quit(std::move(err)); });
    // Decode the next batch while the writer writes this one.
    if (st.in_flight < cfg.max_batches_in_flight && !st.poison)
      poll_now();
  };
  caf::weak_actor_ptr weak = self->ctrl();
  st.reader->on_data([weak] {
    if (auto strong = weak.lock())
      caf::anon_send(caf::actor_cast<caf::actor>(strong), atom::wake_v);
  });
  poll_now();
  return {
    [=](atom::poll) {
      self->state.poll_queued = false;
      poll();
    },
    [=](atom::tick) {
      self->state.tick_queued = false;
      poll();
    },
    [=](atom::wake) { poll(); },
  };
}

} // namespace qsp
