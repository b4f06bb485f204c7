#include "actors/metadata_verifier.hpp"

#include "actors/inspection.hpp"

#include <algorithm>
#include <chrono>

#include "caf/event_based_actor.hpp"

namespace qsp {

// -- metadata verifier --------------------------------------------------------

caf::expected<verified_start> verifier_state::run(const projection_settings& cfg,
                                                  generation& gen) {
  // Every handle is made here, on the verifier's own thread in production:
  // rd_kafka_new starts threads and may block.
  auto log = gen.ports->make_dispatch_log();
  if (!log)
    return log.error();
  gen.log = std::move(*log);
  // Ending the generation interrupts their waits for the broker (start()'s
  // range check, every inspection and identity check, the identity fence's
  // too: it takes this inspector over), as it does the Redis calls.
  gen.track(gen.log);
  auto made_broker = gen.ports->make_inspector();
  if (!made_broker)
    return made_broker.error();
  std::shared_ptr<broker_inspector> broker = std::move(*made_broker);
  gen.track(broker);
  auto made = gen.ports->make_checkpoint_store();
  if (!made)
    return made.error();
  std::shared_ptr<checkpoint_store> store = std::move(*made);
  gen.track(store);
  // Owners the node must not override (DESIGN.md §12, docs/CLUSTER.md): an
  // `all` node refuses a namespace any node has claimed (a cluster projects
  // it), before it reads or serves anything; a `static` node refuses a
  // partition whose owner record names another node that is alive (it
  // published a status within its TTL): two static nodes list it, or a
  // group cluster owns the namespace.  A later claim still fences either
  // at its next checkpoint write.
  if (cfg.ownership == ownership_mode::all || cfg.ownership == ownership_mode::static_set) {
    auto made_view = gen.ports->make_cluster_store();
    if (!made_view)
      return made_view.error();
    auto view = (*made_view)->view(cfg.topic, cfg.partition_count);
    if (!view)
      return view.error();
    std::vector<core::problem> owned_elsewhere;
    for (auto& c : *view) {
      bool all = cfg.ownership == ownership_mode::all;
      if (c.owner.empty()
          || (!all && (!c.live || c.owner == gen.node || gen.owned.count(c.partition) == 0)))
        continue;
      core::problem x;
      x.partition = c.partition;
      x.field = "owner";
      x.stored = c.owner + " (epoch " + std::to_string(c.epoch) + (c.live ? ", alive" : "") + ")";
      x.observed = all ? std::string{"projection.ownership = all"}
                       : "projection.ownership = static, node " + gen.node;
      x.reason = all ? "a cluster projects this namespace; this node would write beside it "
                       "(give it the cluster's ownership mode, docs/CLUSTER.md)"
                     : "another node owns the partition and is alive: is it in "
                       "projection.partitions of two nodes, or does a group cluster own this "
                       "namespace? (docs/CLUSTER.md)";
      owned_elsewhere.push_back(std::move(x));
    }
    if (!owned_elsewhere.empty())
      return refusal(owned_elsewhere);
  }
  // DESIGN.md §12: claim before reading, so the checkpoints read below can
  // no longer move under a former owner (its writes are fenced from here on).
  if (!gen.own_all)
    for (auto p : gen.owned) {
      if (gen.claims().count(p) > 0)
        continue;
      auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::system_clock::now().time_since_epoch())
                   .count();
      auto epoch = store->claim(cfg.topic, p, gen.node, now);
      if (!epoch)
        return epoch.error();
      gen.record_claim(p, *epoch);
      if (gen.logs)
        gen.logs->info("partition {}: claimed by {} with epoch {}", p, gen.node, *epoch);
    }
  auto r = inspect_startup(cfg, *broker, *store);
  if (!r)
    return r.error();
  if (!gen.own_all) {
    // Problems of partitions another node owns are that node's to report.
    auto& ps = r->problems;
    ps.erase(std::remove_if(ps.begin(), ps.end(),
                            [&](const core::problem& x) {
                              return x.partition && gen.owned.count(*x.partition) == 0;
                            }),
             ps.end());
  }
  if (!r->ok())
    return refusal(r->problems);
  if (r->maxmemory_policy != "noeviction" && gen.logs)
    gen.logs->warn("redis maxmemory-policy is {}, allowed by redis.allow-eviction: keys may be "
                   "evicted if maxmemory is ever reached",
                   r->maxmemory_policy);
  verified_start vs;
  vs.id = r->observed;
  vs.starts = r->plan.starts();
  vs.checkpoints = r->validated.next_offsets;
  vs.epochs = r->leader_epochs;
  // DESIGN §14: a checkpoint without a known epoch (older data, or a
  // position whose epoch was unknown) is accepted with a warning; the next
  // checkpoint write stores one.
  if (gen.logs)
    for (auto& [p, next] : vs.checkpoints)
      if (vs.epochs.count(p) == 0 && (gen.own_all || gen.owned.count(p) > 0))
        gen.logs->warn("partition {}: no leader epoch stored with checkpoint {}: this start is "
                       "not validated against a truncated log; the next checkpoint stores one",
                       p, next);
  vs.h0 = r->plan.h0();
  for (size_t p = 0; p < r->broker.true_high.size(); ++p)
    vs.true_high[static_cast<int32_t>(p)] = r->broker.true_high[p];
  vs.retention_ms = r->broker.retention_ms;
  if (!gen.own_all) {
    auto keep = [&](auto& m) {
      for (auto i = m.begin(); i != m.end();)
        i = gen.owned.count(i->first) > 0 ? std::next(i) : m.erase(i);
    };
    keep(vs.starts);
    keep(vs.checkpoints);
    keep(vs.epochs);
    keep(vs.h0);
    vs.owner_epochs = gen.claims();
    keep(vs.owner_epochs);
  }
  // Create the consumer with the explicit starts; it checks [low, high] itself.
  if (auto started = gen.log->start(vs.starts, vs.epochs); !started)
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

} // namespace qsp
