#include "actors/readiness_aggregator.hpp"

#include <algorithm>

#include "caf/event_based_actor.hpp"

namespace qsp {

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
                     projection_settings cfg, verified_start vs, supervisor_actor supervisor,
                     log_ptr logs) {
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
        logs->warn("partition {}: checkpoint {} reported out of order", cp.partition,
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
      logs->info("catch-up {:.1f}% ({} offsets left, {:.0f} offsets/s, ETA {}):{}", pct, left,
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

} // namespace qsp
