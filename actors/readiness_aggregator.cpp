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

void aggregator_state::add(const verified_start& vs, time_point now) {
  for (auto& [p, start] : vs.starts) {
    auto h0 = vs.h0.find(p);
    parts[p] = partition_status{p, start, h0 == vs.h0.end() ? start : h0->second, start};
    // The start counts as progress: the age of a partition that never moves
    // grows from here.
    live[p] = liveness{now, now};
  }
}

bool aggregator_state::advance(const checkpoint_advanced& cp, time_point now) {
  auto i = parts.find(cp.partition);
  if (i == parts.end() || cp.next_offset < i->second.next_offset)
    return false;
  if (cp.next_offset > i->second.next_offset)
    live[cp.partition].advanced = now;
  i->second.next_offset = cp.next_offset;
  return true;
}

void aggregator_state::fill_live(partition_status& ps, int64_t cached_end, time_point now) {
  // H0 was the last stable offset at this start: the log end is never below it.
  ps.log_end = std::max(ps.h0, cached_end);
  ps.live_lag = std::max<int64_t>(0, ps.log_end - ps.next_offset);
  auto& lv = live[ps.partition];
  if (ps.live_lag == 0) {
    lv.idle_seen = now;
    ps.progress_age_ms = 0;
    return;
  }
  auto since = std::max(lv.advanced, lv.idle_seen);
  ps.progress_age_ms = std::max<int64_t>(
    0, std::chrono::duration_cast<std::chrono::milliseconds>(now - since).count());
}

aggregator_actor::behavior_type
readiness_aggregator(aggregator_actor::stateful_pointer<aggregator_state> self,
                     projection_settings cfg, verified_start vs, supervisor_actor supervisor,
                     log_ptr logs, std::shared_ptr<dispatch_log> log) {
  state_of(self).log = std::move(log);
  state_of(self).add(vs, self->clock().now());
  auto announce_if_ready = [=] {
    if (!state_of(self).announced && state_of(self).ready()) {
      state_of(self).announced = true;
      qsp::mail(self, atom::ready_v).send(supervisor);
    }
  };
  announce_if_ready();
  state_of(self).remaining_at_tick = state_of(self).remaining();
  if (!state_of(self).announced) {
    state_of(self).polling = true;
    qsp::mail(self, atom::poll_v).delay(cfg.progress_interval).send(self);
  }
  return {
    [=](atom::assign, const verified_start& added) {
      auto& st = state_of(self);
      st.add(added, self->clock().now());
      // The supervisor is catching up again (for the added partitions only)
      // and waits for `ready` once more: at once if they start at their H0.
      st.announced = false;
      announce_if_ready();
      if (!st.announced) {
        st.remaining_at_tick = st.remaining();
        if (!st.polling) {
          st.polling = true;
          qsp::mail(self, atom::poll_v).delay(cfg.progress_interval).send(self);
        }
      }
    },
    [=](atom::revoke, const std::vector<int32_t>& gone) {
      auto& st = state_of(self);
      for (auto p : gone) {
        st.parts.erase(p);
        st.live.erase(p);
      }
      announce_if_ready();
    },
    [=](atom::progress, const checkpoint_advanced& cp) {
      if (!state_of(self).advance(cp, self->clock().now()))
        logs->warn("partition {}: checkpoint {} reported out of order", cp.partition,
                     cp.next_offset);
      announce_if_ready();
    },
    [=](atom::poll) {
      // Catch-up progress: done / H0 per partition, overall %, rate, ETA.
      if (state_of(self).announced) {
        state_of(self).polling = false;
        return;
      }
      auto& st = state_of(self);
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
      qsp::mail(self, atom::poll_v).delay(cfg.progress_interval).send(self);
    },
    [=](atom::status) -> std::vector<partition_status> {
      auto& st = state_of(self);
      auto now = self->clock().now();
      std::vector<partition_status> out;
      for (auto& [p, ps] : st.parts) {
        out.push_back(ps);
        st.fill_live(out.back(), st.log ? st.log->log_end(p) : -1, now);
      }
      return out;
    },
  };
}

} // namespace qsp
