#include "actors/cluster_member.hpp"

#include <chrono>

#include "caf/event_based_actor.hpp"

namespace qsp {

member_actor::behavior_type cluster_member(member_actor::stateful_pointer<member_state> self,
                                           projection_settings cfg, std::string node,
                                           std::shared_ptr<port_factory> ports,
                                           std::shared_ptr<generation> io) {
  // A status outlives three heartbeats: one late heartbeat does not close
  // the gate, a node silent for three does.
  auto ttl = std::chrono::duration_cast<std::chrono::milliseconds>(3 * cfg.heartbeat_interval);
  auto store = [=]() -> caf::expected<cluster_store*> {
    auto& st = state_of(self);
    if (!st.store) {
      auto made = ports->make_cluster_store();
      if (!made)
        return made.error();
      st.store = std::move(*made);
      io->track(st.store);
    }
    return st.store.get();
  };
  return {
    [=](atom::heartbeat, const std::vector<owned_status>& mine) -> cluster_report {
      cluster_report rep;
      auto s = store();
      if (!s) {
        rep.error = describe(s.error());
        return rep;
      }
      auto fenced = (*s)->publish(cfg.topic, node, mine, ttl, io->wall_now());
      if (!fenced) {
        state_of(self).store.reset();
        rep.error = describe(fenced.error());
        return rep;
      }
      rep.fenced = std::move(*fenced);
      auto view = (*s)->view(cfg.topic, cfg.partition_count);
      if (!view) {
        state_of(self).store.reset();
        rep.error = describe(view.error());
        return rep;
      }
      rep.view = std::move(*view);
      return rep;
    },
    [=](atom::revoke, const std::vector<owned_status>& gone) -> caf::ok_atom {
      std::map<int32_t, uint64_t> parts;
      for (auto& g : gone)
        parts[g.partition] = g.epoch;
      if (auto s = store(); s) {
        // Best effort: a status left behind expires with its TTL.
        if (auto ok = (*s)->release(cfg.topic, node, parts); !ok)
          state_of(self).store.reset();
      }
      return caf::ok_atom_v;
    },
  };
}

} // namespace qsp
