#include "actors/redis_writer.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

#include "caf/event_based_actor.hpp"
#include "core/mutants.hpp"

namespace qsp {

namespace {

uint64_t elapsed_ns(caf::actor_clock::time_point since, caf::actor_clock::time_point now) {
  return static_cast<uint64_t>(
    std::chrono::duration_cast<std::chrono::nanoseconds>(now - since).count());
}

} // namespace

// -- redis writer -------------------------------------------------------------

namespace {

uint64_t load_bytes(const char* p, size_t n) {
  uint64_t v = 0;
  std::memcpy(&v, p, n);
  return v;
}

/// The 128-bit product's halves folded (wyhash's "mum"): one multiply that
/// mixes every input bit into the low bits the tables index by.
inline uint64_t mum(uint64_t a, uint64_t b) {
  const __uint128_t r = static_cast<__uint128_t>(a) * b;
  return static_cast<uint64_t>(r) ^ static_cast<uint64_t>(r >> 64);
}

/// 64-bit hash of a short string for the coalescing tables, after wyhash:
/// up to 16 bytes (ids mostly are) in two overlapping loads and two
/// multiplies, longer ones 16 bytes per step.  Inlined: it runs for every
/// recipient and conversation of a batch.
inline __attribute__((always_inline)) uint64_t hash_text(std::string_view s) {
  constexpr uint64_t s0 = 0xa0761d6478bd642fu, s1 = 0xe7037ed1a0b428dbu,
                     s2 = 0x8ebc6af09c88c6e3u;
  const char* p = s.data();
  const size_t n = s.size();
  uint64_t a = 0, b = 0, seed = s0 ^ (n * s2);
  if (n <= 16) {
    if (n >= 8) {
      a = load_bytes(p, 8);
      b = load_bytes(p + n - 8, 8);
    } else if (n >= 4) {
      a = load_bytes(p, 4);
      b = load_bytes(p + n - 4, 4);
    } else if (n > 0) {
      a = (static_cast<uint64_t>(static_cast<unsigned char>(p[0])) << 16)
          | (static_cast<uint64_t>(static_cast<unsigned char>(p[n >> 1])) << 8)
          | static_cast<unsigned char>(p[n - 1]);
    }
  } else {
    size_t i = n;
    for (; i > 16; i -= 16, p += 16)
      seed = mum(load_bytes(p, 8) ^ s1, load_bytes(p + 8, 8) ^ seed);
    a = load_bytes(p + i - 16, 8);
    b = load_bytes(p + i - 8, 8);
  }
  return mum(s1 ^ n, mum(a ^ s1, b ^ seed));
}

/// Empties `table` and sizes it to a power of two at least twice `n`.
void reset_table(std::vector<uint64_t>& table, size_t n) {
  size_t size = 16;
  while (size < 2 * n)
    size *= 2;
  table.assign(size, 0);
}

/// A table slot: the hash's upper half as a tag (most probes that miss are
/// told apart without touching the entry) and the entry's index + 1 (0: empty).
uint64_t make_slot(uint64_t hash, size_t index) {
  return (hash & 0xffffffff00000000u) | static_cast<uint64_t>(index + 1);
}
bool tag_matches(uint64_t slot, uint64_t hash) {
  return (slot ^ hash) < 0x100000000u;
}
size_t slot_index(uint64_t slot) { return static_cast<size_t>(slot & 0xffffffffu) - 1; }

/// a == b, inlined; up to 16 bytes (ids mostly are) in two overlapping
/// loads per side, as hash_text reads them, instead of a loop per byte.
inline __attribute__((always_inline)) bool same_text(std::string_view a, std::string_view b) {
  const size_t n = a.size();
  if (n != b.size())
    return false;
  const char* x = a.data();
  const char* y = b.data();
  if (n >= 8) {
    if (n > 16)
      return std::memcmp(x, y, n) == 0;
    return (load_bytes(x, 8) ^ load_bytes(y, 8)) == 0
           && (load_bytes(x + n - 8, 8) ^ load_bytes(y + n - 8, 8)) == 0;
  }
  if (n >= 4)
    return (load_bytes(x, 4) ^ load_bytes(y, 4)) == 0
           && (load_bytes(x + n - 4, 4) ^ load_bytes(y + n - 4, 4)) == 0;
  for (size_t i = 0; i < n; ++i)
    if (x[i] != y[i])
      return false;
  return true;
}

} // namespace

const std::vector<session_update>& writer_state::coalesce(const partition_batch& b) {
  // One update per user, one member per (user, conversation) with the
  // highest score: two open-addressing hash tables over views into the
  // batch, then the members grouped by user with a counting pass.  Linear in
  // the batch and allocation-free once the scratch vectors are warm.
  auto& batch = b.records;
  const size_t entries = batch.recipients.size();
  users.clear();
  distinct.clear();
  reset_table(user_table, entries);
  reset_table(member_table, entries);
  const size_t user_mask = user_table.size() - 1;
  const size_t member_mask = member_table.size() - 1;
  // Every entry's two hashes first (a sequential pass), so that the table
  // slots of the entry a few places ahead can be prefetched while this one
  // is looked up: the probes are random over tables larger than L1/L2, and
  // waiting for each in turn was most of the coalescing's time.  The member
  // hash combines the user's hash (not its index, unknown until the lookup).
  hashes.resize(2 * entries);
  for (size_t i = 0, e = 0; i < batch.size(); ++i) {
    const uint64_t hc = hash_text(batch.conversation_id(i));
    for (size_t j = 0; j < batch.recipient_count(i); ++j, ++e) {
      const uint64_t hu = hash_text(batch.recipient(i, j));
      hashes[2 * e] = hu;
      hashes[2 * e + 1] = hc ^ (hu * 0x9e3779b97f4a7c15u);
    }
  }
  constexpr size_t ahead = 8;
  for (size_t i = 0, e = 0; i < batch.size(); ++i) {
    const std::string_view conv = batch.conversation_id(i);
    const int64_t score = batch.created_at(i);
    const auto record = static_cast<uint32_t>(i);
    for (size_t j = 0; j < batch.recipient_count(i); ++j, ++e) {
      if (e + ahead < entries) {
        __builtin_prefetch(&user_table[hashes[2 * (e + ahead)] & user_mask]);
        __builtin_prefetch(&member_table[hashes[2 * (e + ahead) + 1] & member_mask]);
      }
      const std::string_view user = batch.recipient(i, j);
      const uint64_t hu = hashes[2 * e];
      size_t slot = hu & user_mask;
      uint32_t u;
      for (;;) {
        const uint64_t at = user_table[slot];
        if (at == 0) {
          u = static_cast<uint32_t>(users.size());
          // Field by field into place: a braced temporary is built on the
          // stack in pieces and copied in one 16-byte load, which waits for
          // those stores (a store-forwarding stall per entry).
          auto& added = users.emplace_back();
          added.name = user.data();
          added.size = static_cast<uint32_t>(user.size());
          added.hash = hu;
          user_table[slot] = make_slot(hu, u);
          break;
        }
        if (tag_matches(at, hu) && same_text(users[slot_index(at)].view(), user)) {
          u = static_cast<uint32_t>(slot_index(at));
          break;
        }
        slot = (slot + 1) & user_mask;
      }
      const uint64_t hm = hashes[2 * e + 1];
      slot = hm & member_mask;
      for (;;) {
        const uint64_t at = member_table[slot];
        if (at == 0) {
          member_table[slot] = make_slot(hm, distinct.size());
          auto& added = distinct.emplace_back();
          added.hash = hm;
          added.user = u;
          added.record = record;
          ++users[u].members;
          break;
        }
        if (tag_matches(at, hm)) {
          auto& known = distinct[slot_index(at)];
          if (known.user == u && known.hash == hm
              && same_text(batch.conversation_id(known.record), conv)) {
            if (score > batch.created_at(known.record))
              known.record = record;
            break;
          }
        }
        slot = (slot + 1) & member_mask;
      }
    }
  }
  // Group by user: each user's members start where the previous user's end.
  size_t start = 0;
  for (auto& u : users)
    start += std::exchange(u.members, start);
  members.resize(distinct.size());
  for (auto& m : distinct) {
    auto& to = members[users[m.user].members++];
    to.conversation = batch.conversation_id(m.record);
    to.created_at = batch.created_at(m.record);
  }
  updates.clear();
  start = 0;
  for (auto& u : users) {
    auto& up = updates.emplace_back();
    up.user = u.view();
    up.members = members.data() + start;
    up.count = u.members - start;
    start = u.members;
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
    // Redis Cluster mode: copies go only to the primaries this generation's
    // start judged (a store made later must not learn a promoted replica).
    sessions->expect_primaries(gen->primaries());
  }
  auto& ups = coalesce(b);
  if (!ups.empty())
    if (auto ok = sessions->send(ups); !ok)
      return ok.error();
  in_flight f;
  f.partition = b.partition;
  f.end_offset = b.end_offset;
  f.end_epoch = b.end_epoch;
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

void writer_state::add(const verified_start& vs) {
  // Partitions without a stored checkpoint start from "absent" (bootstrap).
  // docs/DESIGN.md §15: a start below the stored checkpoint (a shard's copy is
  // behind it) replays from there; the checkpoint is not written until the
  // replay passes it (it never moves backwards).
  for (auto& [p, start] : vs.starts) {
    auto i = vs.checkpoints.find(p);
    stored[p] = i != vs.checkpoints.end() ? i->second : -1;
    sent[p] = stored[p] >= 0 && start < stored[p] ? start : stored[p];
  }
  for (auto& [p, e] : vs.owner_epochs)
    owner_epochs[p] = e;
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
  if (mutant::active() == mutant::id::checkpoint_before_reply)
    return true; // planted bug: confirmed once sent, its replies never read
  return sessions->confirm(f.zadds, wait);
}

caf::expected<std::vector<checkpoint_advanced>>
writer_state::checkpoint_fenced(uint64_t answered, caf::actor_clock::time_point now) {
  // Batches of a partition are in offset order: its last one is its highest.
  std::map<int32_t, checkpoint_advanced> next;
  std::map<int32_t, int32_t> epochs;
  size_t covered = 0;
  for (auto& f : fenced) {
    if (f.fence_tag >= answered)
      break;
    auto& cp = next[f.partition];
    cp.partition = f.partition;
    cp.next_offset = f.end_offset;
    epochs[f.partition] = f.end_epoch;
    cp.records += f.records;
    cp.recipient_writes += f.recipient_writes;
    ++covered;
  }
  std::vector<checkpoint_advanced> out;
  // Redis Cluster mode (docs/DESIGN.md §15): every primary's copy first (they
  // may run ahead of the checkpoint, never behind what it covers).  Every
  // reply below these positions was read.
  if (sessions && !next.empty()) {
    std::map<int32_t, std::pair<int64_t, int32_t>> positions;
    for (auto& [p, cp] : next)
      positions[p] = {cp.next_offset, epochs[p]};
    // The primaries judged so far (a later verification of this generation,
    // partitions added, may have judged more).
    sessions->expect_primaries(gen->primaries());
    if (auto ok = sessions->write_copies(id, positions); !ok)
      return ok.error();
  }
  for (auto& [p, cp] : next) {
    // Every reply of every batch up to cp.next_offset was read and none was
    // an error, and the identity was confirmed after they were fetched.
    auto& cur = stored[p];
    if (cur >= 0 && cp.next_offset <= cur) {
      // Replaying below the stored checkpoint: nothing to write yet.
      stats->records += cp.records;
      stats->recipient_writes += cp.recipient_writes;
      out.push_back(cp);
      continue;
    }
    auto owner = owner_epochs.find(p);
    if (auto ok = gen->checkpoints->write_checkpoint(
          id, p, cur, cp.next_offset, epochs[p],
          owner == owner_epochs.end() ? uint64_t{0} : owner->second, gen->node);
        !ok)
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
  auto& st = state_of(self);
  for (auto& f : st.pending)
    f.rp.deliver(err);
  st.pending.clear();
  st.fenced.clear();
  for (auto& [p, rp] : st.flushes)
    rp.deliver(err);
  st.flushes.clear();
  for (auto& r : st.revokes)
    r.rp.deliver(err);
  st.revokes.clear();
  self->quit(err);
}

// Answers the revoke requests whose partitions have nothing in flight any
// more: they are forgotten here and unassigned from the consumer.
void answer_revokes(writer_pointer self) {
  auto& st = state_of(self);
  for (auto i = st.revokes.begin(); i != st.revokes.end();) {
    auto& ps = i->partitions;
    if (std::any_of(ps.begin(), ps.end(), [&](int32_t p) { return st.busy(p); })) {
      ++i;
      continue;
    }
    for (auto p : ps) {
      st.sent.erase(p);
      st.stored.erase(p);
      st.owner_epochs.erase(p);
      st.revoking.erase(p);
    }
    if (st.gen->log)
      if (auto ok = st.gen->log->remove(ps); !ok) {
        // The consumer is in an unknown state: end the generation.
        auto rp = i->rp;
        st.revokes.erase(i);
        rp.deliver(ok.error());
        writer_fail(self, ok.error());
        return;
      }
    i->rp.deliver(caf::ok_atom_v);
    i = st.revokes.erase(i);
  }
}

// Answers the flush requests of partitions with nothing in flight.
void answer_flushes(writer_pointer self) {
  auto& st = state_of(self);
  for (auto i = st.flushes.begin(); i != st.flushes.end();) {
    if (st.busy(i->first)) {
      ++i;
      continue;
    }
    i->second.deliver(st.stored[i->first]);
    i = st.flushes.erase(i);
  }
}

// Writes the checkpoints the fence's answer to request `k` covers and
// reports them.
void fence_passed(writer_pointer self, aggregator_actor aggregator, uint64_t k) {
  auto& st = state_of(self);
  st.fence_answered = std::max(st.fence_answered, k);
  auto cps = st.checkpoint_fenced(st.fence_answered, self->clock().now());
  if (!cps) {
    writer_fail(self, cps.error());
    return;
  }
  for (auto& cp : *cps)
    qsp::mail(self, atom::progress_v, cp).send(aggregator);
  answer_flushes(self);
  answer_revokes(self);
}

// Makes sure the newest batch in `fenced` gets a check that started after it
// arrived: none is needed if such a check has already answered (the batch
// waited for its replies meanwhile), none is sent if one is still
// outstanding, else one is asked for.  Requests may overlap: the fence
// answers them in order, and every request waiting when a check starts is
// answered by that check, so a checkpoint waits for at most the next check,
// not for the one after it.
void request_fence(writer_pointer self, fence_actor fence, aggregator_actor aggregator) {
  auto& st = state_of(self);
  if (st.fenced.empty())
    return;
  auto tag = st.fenced.back().fence_tag;
  if (tag < st.fence_answered) {
    fence_passed(self, aggregator, st.fence_answered);
    return;
  }
  if (tag < st.fence_requests)
    return; // a request sent after it arrived is still unanswered
  auto k = ++st.fence_requests;
  qsp::mail(self, atom::check_v).request(fence, caf::infinite)
    .then([=](uint64_t) { fence_passed(self, aggregator, k); },
          [=](caf::error& err) { writer_fail(self, err); });
}

} // namespace

writer_actor::behavior_type
redis_writer(writer_actor::stateful_pointer<writer_state> self, projection_settings cfg,
             verified_start vs, std::shared_ptr<generation> gen, aggregator_actor aggregator,
             fence_actor fence, std::shared_ptr<metrics> stats) {
  auto& st = state_of(self);
  st.gen = std::move(gen);
  st.id = vs.id;
  st.stats = std::move(stats);
  st.add(vs);
  return {
    [=](atom::assign, const verified_start& added) { state_of(self).add(added); },
    [=](atom::revoke, const std::vector<int32_t>& parts) -> caf::result<caf::ok_atom> {
      auto& st = state_of(self);
      for (auto p : parts)
        if (st.sent.count(p) > 0)
          st.revoking.insert(p);
      auto rp = self->make_response_promise<caf::ok_atom>();
      st.revokes.push_back(writer_state::revoke_request{parts, rp});
      answer_revokes(self);
      return rp;
    },
    [=](atom::write, const partition_batch& b) -> caf::result<checkpoint_advanced> {
      auto& st = state_of(self);
      // A batch its consumer sent before it was stopped for a revoke: not
      // projected, no checkpoint (the next owner starts from the checkpoint).
      if (!st.takes(b.partition))
        return caf::make_error(ec::shutting_down,
                               "partition " + std::to_string(b.partition)
                                 + " is not (any more) this writer's: batch up to offset "
                                 + std::to_string(b.end_offset) + " dropped");
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
        qsp::mail(self, atom::poll_v).send(self);
      }
      auto rp = self->make_response_promise<checkpoint_advanced>();
      st.pending.back().rp = rp;
      return rp;
    },
    [=](atom::flush, int32_t partition) -> caf::result<int64_t> {
      auto& st = state_of(self);
      if (!st.busy(partition))
        return st.stored[partition];
      auto rp = self->make_response_promise<int64_t>();
      st.flushes.emplace(partition, rp);
      return rp;
    },
    [=](atom::poll) {
      auto& st = state_of(self);
      if (st.pending.empty()) {
        st.confirming = false;
        return;
      }
      // Block briefly for replies only when no write is waiting, and for as
      // long as they take (within full_wait) when no write can come: every
      // consumer waits for a confirmation.  (The store wakes up once the
      // replies can all be in, not per segment.)
      const bool full = st.pending.size() >= st.sent.size() * cfg.max_batches_in_flight;
      auto wait = !self->mailbox().empty() ? std::chrono::milliseconds{0}
                  : full                   ? st.full_wait
                                           : st.confirm_wait;
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
      } else if (self->clock().now() - st.pending.front().t0 > cfg.redis.command_timeout) {
        auto& f = st.pending.front();
        writer_fail(self, caf::make_error(
                            ec::redis_unavailable,
                            "no reply from Redis to the " + std::to_string(f.zadds)
                              + " ZADDs of partition " + std::to_string(f.partition)
                              + " up to offset " + std::to_string(f.end_offset) + " within "
                              + std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                 cfg.redis.command_timeout).count())
                              + " ms (redis.command-timeout)"));
        return;
      }
      if (st.pending.empty()) {
        st.confirming = false;
      } else if (auto spent = self->clock().now() - polled_at;
                 !*done && spent < std::min(wait, st.confirm_wait)) {
        // The store answered "not yet" without waiting (it cannot block, as
        // in the deterministic tests): try again once confirm_wait has passed.
        qsp::mail(self, atom::poll_v).delay(std::min(wait, st.confirm_wait) - spent).send(self);
      } else {
        qsp::mail(self, atom::poll_v).send(self); // behind the writes that arrived meanwhile
      }
    },
  };
}

} // namespace qsp
