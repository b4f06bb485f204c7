#include "actors/identity_fence.hpp"

#include "actors/inspection.hpp"

#include "caf/event_based_actor.hpp"
#include "core/mutants.hpp"

namespace qsp {

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
  state_of(self).pinned = std::move(pinned);
  // Runs one check and answers every request that arrived before it started.
  auto run = [=] {
    auto& st = state_of(self);
    st.last_start = self->clock().now();
    auto waiting = std::move(st.waiting);
    st.waiting.clear();
    stats->identity_checks += 1;
    auto r = st.check(cfg, *gen);
    if (!r) {
      if (!is_refusal(r.error())) {
        stats->identity_check_errors += 1;
        gen->logs->warn("identity check unanswered: {}", describe(r.error()));
      }
      for (auto& rp : waiting)
        rp.deliver(r.error());
      self->quit(r.error());
      return;
    }
    for (auto& rp : waiting)
      rp.deliver(*r);
  };
  qsp::mail(self, atom::tick_v).send(self);
  return {
    [=](atom::check) -> caf::result<uint64_t> {
      auto& st = state_of(self);
      if (mutant::active() == mutant::id::stale_fence && st.checks > 0)
        return st.checks; // planted bug: the last check, started before the fetch
      auto rp = self->make_response_promise<uint64_t>();
      st.waiting.push_back(rp);
      if (!st.delayed) {
        auto due = st.last_start + cfg.identity_check_min_gap;
        auto now = self->clock().now();
        if (now >= due) {
          run();
        } else {
          st.delayed = true;
          qsp::mail(self, atom::poll_v).delay(due - now).send(self);
        }
      }
      return rp;
    },
    [=](atom::poll) {
      state_of(self).delayed = false;
      if (!state_of(self).waiting.empty())
        run();
    },
    [=](atom::tick) {
      run();
      if (!self->getf(caf::abstract_actor::is_terminated_flag))
        qsp::mail(self, atom::tick_v).delay(cfg.identity_check_interval).send(self);
    },
  };
}

} // namespace qsp
