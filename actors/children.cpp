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

// -- metadata verifier --------------------------------------------------------

caf::expected<verified_start> verifier_state::run(const projection_settings& cfg,
                                                  generation& gen) {
  auto broker = gen.ports->make_inspector();
  if (!broker)
    return broker.error();
  auto store = gen.ports->make_checkpoint_store();
  if (!store)
    return store.error();
  auto r = inspect_startup(cfg, **broker, **store);
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
  auto again = (*broker)->identity(cfg.topic);
  if (!again)
    return again.error();
  if (again->cluster_id != vs.id.cluster_id)
    return caf::make_error(ec::identity_changed,
                           "meta: field cluster_id: stored \"" + vs.id.cluster_id + "\", observed \""
                             + again->cluster_id + "\": the broker changed during startup");
  if (again->topic_id != vs.id.topic_id)
    return caf::make_error(ec::identity_changed,
                           "meta: field topic_id: stored \"" + vs.id.topic_id + "\", observed \""
                             + again->topic_id + "\": the topic was recreated during startup");
  if (again->partition_count != vs.id.partition_count)
    return caf::make_error(ec::identity_changed,
                           "meta: field partition_count: stored \""
                             + std::to_string(vs.id.partition_count) + "\", observed \""
                             + std::to_string(again->partition_count)
                             + "\": the partition count changed during startup");
  // Meta is created only once everything above is proven, so a refused
  // startup leaves nothing behind.
  if (!r->validated.meta_present) {
    auto created = (*store)->create_meta(vs.id);
    if (!created)
      return created.error();
    vs.meta_created = *created;
  }
  gen.checkpoints = std::move(*store);
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
  }
  auto& ups = coalesce(b);
  if (!ups.empty())
    if (auto ok = sessions->send(ups); !ok)
      return ok.error();
  in_flight f;
  f.partition = b.partition;
  f.expected = last;
  f.end_offset = b.end_offset;
  f.records = b.records.size();
  for (auto& u : ups)
    f.recipient_writes += u.count;
  f.zadds = ups.size();
  f.t0 = t0;
  pending.push_back(std::move(f));
  last = b.end_offset;
  return true;
}

caf::expected<std::optional<checkpoint_advanced>>
writer_state::confirm_oldest(std::chrono::milliseconds wait) {
  auto& f = pending.front();
  if (f.zadds > 0) {
    auto done = sessions->confirm(f.zadds, wait);
    if (!done)
      return done.error();
    if (!*done)
      return std::optional<checkpoint_advanced>{};
  }
  // Every reply of this batch was read and none was an error: now its
  // checkpoint.  Earlier batches of the partition were confirmed before.
  if (auto ok = gen->checkpoints->write_checkpoint(id, f.partition, f.expected, f.end_offset);
      !ok)
    return ok.error();
  return checkpoint_advanced{f.partition, f.end_offset, f.records, f.recipient_writes};
}

writer_actor::behavior_type
redis_writer(writer_actor::stateful_pointer<writer_state> self, verified_start vs,
             std::shared_ptr<generation> gen, aggregator_actor aggregator,
             std::shared_ptr<metrics> stats) {
  auto& st = self->state;
  st.gen = std::move(gen);
  st.id = vs.id;
  st.stats = std::move(stats);
  // Partitions without a stored checkpoint start from "absent" (bootstrap).
  for (auto& [p, start] : vs.starts) {
    auto i = vs.checkpoints.find(p);
    st.sent[p] = i != vs.checkpoints.end() ? i->second : -1;
  }
  // Any failure ends this writer (and so the generation): the pipelined
  // connection's state is unknown, and no later checkpoint may be written.
  auto fail = [=](const caf::error& err) {
    for (auto& f : self->state.pending)
      f.rp.deliver(err);
    self->state.pending.clear();
    self->quit(err);
  };
  // Confirms the oldest in-flight batch (waits at most `wait` for its
  // replies).  True when it was confirmed.
  auto confirm_one = [=](std::chrono::milliseconds wait) -> bool {
    auto& st = self->state;
    auto r = st.confirm_oldest(wait);
    if (!r) {
      fail(r.error());
      return false;
    }
    if (!*r)
      return false;
    auto f = std::move(st.pending.front());
    st.pending.pop_front();
    auto& cp = **r;
    auto& m = *st.stats;
    m.records += cp.records;
    m.recipient_writes += cp.recipient_writes;
    m.batches += 1;
    m.observe_batch_latency(elapsed_ns(f.t0, self->clock().now()));
    self->send(aggregator, atom::progress_v, cp);
    f.rp.deliver(cp);
    return true;
  };
  return {
    [=](atom::write, const partition_batch& b) -> caf::result<checkpoint_advanced> {
      auto& st = self->state;
      auto queued = st.send(b, self->clock().now());
      if (!queued) {
        fail(queued.error());
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
    [=](atom::poll) {
      auto& st = self->state;
      if (st.pending.empty()) {
        st.confirming = false;
        return;
      }
      // Block briefly for replies only when no write is waiting.
      auto wait = self->mailbox().empty() ? st.confirm_wait : std::chrono::milliseconds{0};
      confirm_one(wait);
      if (self->getf(caf::abstract_actor::is_terminated_flag))
        return;
      if (st.pending.empty())
        st.confirming = false;
      else
        self->send(self, atom::poll_v); // behind the writes that arrived meanwhile
    },
    [=](atom::sessions, const std::string& user, uint32_t limit) -> caf::result<session_list> {
      auto& s = self->state;
      // The session connection carries the pipelined replies: confirm every
      // batch in flight first.
      while (!s.pending.empty())
        if (!confirm_one(std::chrono::milliseconds{-1}))
          return caf::make_error(ec::redis_unavailable, "the Redis writer failed");
      if (!s.sessions) {
        auto made = s.gen->ports->make_session_store();
        if (!made)
          return made.error();
        s.sessions = std::move(*made);
      }
      auto r = s.sessions->sessions(user, limit);
      if (!r)
        return r.error();
      return std::move(*r);
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
  auto poll = [=] {
    auto& st = self->state;
    if (st.poison) {
      // Nothing after the undecodable record: stop once what precedes it
      // is confirmed.
      if (st.in_flight == 0)
        self->quit(st.poison);
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
        self->quit(st.poison);
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
