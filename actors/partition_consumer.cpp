#include "actors/partition_consumer.hpp"

#include <algorithm>

#include "caf/event_based_actor.hpp"
#include "core/mutants.hpp"

namespace qsp {

// -- partition consumer -------------------------------------------------------

caf::expected<partition_batch> consumer_state::next_batch(const projection_settings& cfg) {
  int64_t passed = -1;
  partition_batch b;
  b.partition = partition;
  b.begin_offset = sent_end;
  b.end_offset = sent_end;
  // Sized like the previous batch: one allocation per buffer, mostly.
  b.records.text.reserve(arena_hint.text);
  b.records.records.reserve(arena_hint.records);
  b.records.recipients.reserve(arena_hint.recipients);
  std::string why;
  caf::error broken; // the reader broke its contract
  auto contract = [&](std::string what) {
    return caf::make_error(ec::refused, "reader contract: the dispatch-log reader delivered topic "
                                          + topic + " partition " + std::to_string(partition)
                                          + " " + what);
  };
  std::vector<std::pair<int64_t, int64_t>> gaps; // offsets it left out
  auto ok = reader->poll_each(
    cfg.max_batch_records,
    [&](const log_record_view& rec) {
      // Stopped: a reader that polls on after a `false` gets nothing in
      // (the batch must end exactly before a poison record).
      if (poison || broken)
        return false;
      auto at = "offset " + std::to_string(rec.offset);
      if (rec.offset <= last_offset) {
        broken = contract(at + " after offset " + std::to_string(last_offset)
                          + " (offsets must increase)");
        return false;
      }
      if (rec.leader_epoch < 0) {
        broken = contract(at + " without a leader epoch");
        return false;
      }
      if (rec.leader_epoch < last_epoch) {
        broken = contract(at + " with leader epoch " + std::to_string(rec.leader_epoch)
                          + " after leader epoch " + std::to_string(last_epoch)
                          + " (epochs never decrease)");
        return false;
      }
      if (audit && rec.offset > last_offset + 1)
        gaps.emplace_back(last_offset + 1, rec.offset);
      last_offset = rec.offset;
      last_epoch = rec.leader_epoch;
      if (rec.offset < sent_end)
        return true; // already projected (redelivery)
      // Decoded straight from the reader's buffer into the batch's arena.
      if (!decoder->decode_append(rec.value, b.records, why)) {
        // Project what precedes it; stop exactly at the poison record.
        poison = caf::make_error(ec::undecodable, "topic " + topic + " partition "
                                                    + std::to_string(partition) + " offset "
                                                    + std::to_string(rec.offset) + ": " + why);
        return false;
      }
      b.bytes += rec.value.size();
      b.end_offset = rec.offset + 1;
      b.end_epoch = rec.leader_epoch;
      return true;
    },
    passed);
  if (!ok)
    return ok.error();
  if (broken)
    return broken;
  if (!b.records.empty())
    arena_hint = {b.records.text.size(), b.records.records.size(), b.records.recipients.size()};
  if (!poison && audit && passed > last_offset + 1 && passed > b.end_offset)
    gaps.emplace_back(last_offset + 1, passed);
  // A host's reader: what it left out is re-read before anything is sent
  // (the checkpoint must not pass a record it skipped).
  if (audit && !gaps.empty())
    if (auto audited = audit->audit(partition, gaps); !audited)
      return audited.error();
  if (poison)
    return b;
  // Offsets below the EOF position were delivered or are markers/aborted.
  if (passed > b.end_offset) {
    auto epoch = reader->position_epoch(passed);
    if (epoch >= 0 && epoch < last_epoch)
      return contract("position " + std::to_string(passed) + " with leader epoch "
                      + std::to_string(epoch) + " after leader epoch "
                      + std::to_string(last_epoch) + " (epochs never decrease)");
    b.end_offset = passed;
    b.end_epoch = epoch;
  }
  return b;
}

consumer_actor::behavior_type
partition_consumer(consumer_actor::stateful_pointer<consumer_state> self, projection_settings cfg,
                   int32_t partition, int64_t start, int32_t start_epoch,
                   std::shared_ptr<partition_reader> reader,
                   std::shared_ptr<const core::decoder> decoder, writer_actor writer,
                   std::shared_ptr<gap_auditor> audit) {
  auto& st = state_of(self);
  st.reader = std::move(reader);
  st.decoder = std::move(decoder);
  st.topic = cfg.topic;
  st.partition = partition;
  st.sent_end = start;
  st.last_offset = start - 1;
  // The checkpoint's epoch is the epoch below `start`: no record from
  // `start` on may carry a lower one, in this generation or any later.
  st.last_epoch = start_epoch;
  st.audit = std::move(audit);
  if (mutant::active() == mutant::id::skip_after_redelivery && start > 0)
    st.sent_end = start + 1; // planted bug: resumes past the checkpoint
  // Wake-ups: at most one atom::poll and one atom::tick are queued at any
  // time (a queued poll sees the latest state when it runs, so a second one
  // would only duplicate it, and duplicated ticks would multiply), plus the
  // reader's atom::wake when records arrive on an empty queue.
  auto poll_now = [=] {
    auto& st = state_of(self);
    if (st.poll_queued)
      return;
    st.poll_queued = true;
    qsp::mail(self, atom::poll_v).send(self);
  };
  auto tick_later = [=] {
    auto& st = state_of(self);
    if (st.tick_queued)
      return;
    st.tick_queued = true;
    qsp::mail(self, atom::tick_v).delay(cfg.idle_poll).send(self);
  };
  // Nothing after an undecodable record: stop once what precedes it is
  // confirmed and checkpointed.
  auto stop_at_poison = [=] {
    auto& st = state_of(self);
    if (st.stopping)
      return;
    st.stopping = true;
    qsp::mail(self, atom::flush_v, st.partition).request(writer, caf::infinite)
      .then([=](int64_t) { self->quit(state_of(self).poison); },
            [=](caf::error& err) { self->quit(std::move(err)); });
  };
  auto poll = [=] {
    auto& st = state_of(self);
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
    qsp::mail(self, atom::write_v, std::move(*b)).request(writer, caf::infinite)
      .then(
        [=](const checkpoint_advanced&) {
          --state_of(self).in_flight;
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
      qsp::anon_mail(atom::wake_v).send(caf::actor_cast<caf::actor>(strong));
  });
  poll_now();
  return {
    [=](atom::poll) {
      state_of(self).poll_queued = false;
      poll();
    },
    [=](atom::tick) {
      state_of(self).tick_queued = false;
      poll();
    },
    [=](atom::wake) { poll(); },
  };
}

} // namespace qsp
