#include "actors/metadata_verifier.hpp"

#include "actors/gap_audit.hpp"

#include "actors/inspection.hpp"
#include "core/mutants.hpp"

#include <algorithm>
#include <set>
#include <utility>

#include "caf/event_based_actor.hpp"

namespace qsp {

// -- metadata verifier --------------------------------------------------------

namespace {

// docs/DESIGN.md §12, "Decision — re-claim": claim before reading, so the
// checkpoints read afterwards can no longer move under a former owner (its
// writes are fenced from then on).  Every verification re-reads each owner
// record (the claim script does, atomically): an intact claim is kept, one
// Redis lost is re-claimed above every epoch seen, and a partition that
// moved to another node answers ec::fenced.
// `known`: this node's claims (none for partitions just given to it).
caf::error claim(const projection_settings& cfg, generation& gen, checkpoint_store& store,
                 const std::set<int32_t>& parts, const std::map<int32_t, uint64_t>& known) {
  for (auto p : parts) {
    auto i = known.find(p);
    uint64_t mine = i == known.end() ? 0 : i->second;
    auto epoch = store.claim(cfg.topic, p, gen.node, gen.wall_now(), mine);
    if (!epoch)
      return epoch.error();
    gen.record_claim(p, *epoch);
    if (gen.logs && *epoch != mine)
      gen.logs->info("partition {}: claimed by {} with epoch {}{}", p, gen.node, *epoch,
                     mine == 0 ? std::string{}
                               : " (the record no longer held this node's epoch "
                                   + std::to_string(mine) + ": rolled back by Redis)");
  }
  return caf::none;
}

// The §4 inspection, judged for `parts`: their problems, and every problem
// that is no partition's (meta, the broker, the server) or of a partition
// outside [0, partition_count) (a stray checkpoint key: docs/DESIGN.md §3 refuses it
// whichever node finds it).  Problems of other partitions in range are
// their owners' to report.
caf::expected<inspection> inspect_for(const projection_settings& cfg, generation& gen,
                                             broker_inspector& broker, checkpoint_store& store,
                                             const std::set<int32_t>& parts) {
  auto r = inspect_startup(cfg, broker, store);
  if (!r)
    return r.error();
  if (!gen.own_all) {
    auto& ps = r->problems;
    ps.erase(std::remove_if(ps.begin(), ps.end(),
                            [&](const core::problem& x) {
                              return x.partition && *x.partition >= 0
                                     && *x.partition < cfg.partition_count
                                     && parts.count(*x.partition) == 0;
                            }),
             ps.end());
  }
  if (!r->ok())
    return refusal(r->problems);
  // Redis Cluster mode: the primaries' histories the copies were judged
  // by; the writer writes copies only to them (session_store::expect_primaries).
  if (!r->cluster.shards.empty()) {
    std::map<std::string, core::judged_primary> judged;
    for (auto& s : r->cluster.shards)
      judged[s.node_id] = core::judged_primary{s.replid, s.copy_tag, s.slots, s.replica_ids};
    if (auto err = gen.judge_primaries(judged))
      return err;
  }
  if (r->maxmemory_policy != "noeviction" && gen.logs)
    gen.logs->warn("redis maxmemory-policy is {}, allowed by redis.allow-eviction: keys may be "
                   "evicted if maxmemory is ever reached",
                   r->maxmemory_policy);
  return r;
}

// The explicit starts, H0s and checkpoints of `parts` from the inspection.
verified_start plan_for(const inspection& r, generation& gen,
                        const std::set<int32_t>& parts) {
  verified_start vs;
  vs.id = r.observed;
  vs.starts = r.plan.starts();
  vs.checkpoints = r.validated.next_offsets;
  vs.epochs = r.leader_epochs;
  vs.h0 = r.plan.h0();
  for (size_t p = 0; p < r.broker.true_high.size(); ++p)
    vs.true_high[static_cast<int32_t>(p)] = r.broker.true_high[p];
  vs.retention_ms = r.broker.retention_ms;
  if (!gen.own_all) {
    auto keep = [&](auto& m) {
      for (auto i = m.begin(); i != m.end();)
        i = parts.count(i->first) > 0 ? std::next(i) : m.erase(i);
    };
    keep(vs.starts);
    keep(vs.checkpoints);
    keep(vs.epochs);
    keep(vs.h0);
    vs.owner_epochs = gen.claims();
    keep(vs.owner_epochs);
  }
  // Redis Cluster mode: a start below the stored checkpoint is a replay a
  // primary's copy chose; the log says which primary and why, so that an
  // operator (and a test) can tell it from a checkpoint that moved back.
  if (gen.logs)
    for (auto& [p, start] : vs.starts)
      if (auto cp = vs.checkpoints.find(p); cp != vs.checkpoints.end() && start < cp->second)
        if (auto c = r.copies.replay_cause.find(p); c != r.copies.replay_cause.end())
          gen.logs->info("partition {}: replays from {}, below its checkpoint {}: {}", p, start,
                         cp->second, c->second);
  // docs/DESIGN.md §14: a checkpoint without a known epoch (older data, or a
  // position whose epoch was unknown) is accepted with a warning; the next
  // checkpoint write stores one.
  if (gen.logs)
    for (auto& [p, next] : vs.checkpoints)
      if (vs.epochs.count(p) == 0)
        gen.logs->warn("partition {}: no leader epoch stored with checkpoint {}: this start is "
                       "not validated against a truncated log; the next checkpoint stores one",
                       p, next);
  return vs;
}

// Identity must be unchanged between the inspection and the consumer's
// readiness; meta is created only once everything above is proven, so a
// refused start leaves nothing behind.
caf::error confirm(const projection_settings& cfg, broker_inspector& broker,
                   checkpoint_store& store, const inspection& r, verified_start& vs) {
  auto again = broker.identity(cfg.topic);
  if (!again)
    return again.error();
  if (auto err = identity_mismatch(vs.id, *again, "during startup"))
    return err;
  if (!r.validated.meta_present) {
    auto created = store.create_meta(vs.id);
    if (!created)
      return created.error();
    vs.meta_created = *created;
  }
  // Redis Cluster mode (docs/DESIGN.md §15): every primary gets a copy naming
  // every checkpointed partition it can vouch for (the checkpoints at the
  // first start and on a primary that joined, which every replica must
  // hold before the copies are trusted), and the primaries become known.
  if (!r.cluster.shards.empty()) {
    if (mutant::active() == mutant::id::copies_partial) {
      // The planted bug: the seed names this node's partitions only, and a
      // later start writes nothing.
      if (r.copies.seed) {
        core::copy_refresh seed = r.copies.refresh;
        for (auto& [node, at] : seed.positions)
          for (auto i = at.begin(); i != at.end();)
            i = vs.checkpoints.count(i->first) != 0 ? std::next(i) : at.erase(i);
        if (auto ok = store.refresh_copies(vs.id, seed); !ok)
          return ok.error();
      }
      return caf::none;
    }
    if (auto ok = store.refresh_copies(vs.id, r.copies.refresh); !ok)
      return ok.error();
  }
  return caf::none;
}

// A broker inspector and a checkpoint store of this verification, both
// interrupted when the generation ends.
caf::expected<std::pair<std::shared_ptr<broker_inspector>, std::shared_ptr<checkpoint_store>>>
open_handles(generation& gen) {
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
  return std::make_pair(std::move(broker), std::move(store));
}

} // namespace

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
  if (auto own = gen.ports->audit_log_factory()) {
    gen.audit = std::make_shared<gap_auditor>(std::move(own), cfg.kafka.timeout);
    gen.track(gen.audit);
  }
  auto made = open_handles(gen);
  if (!made)
    return made.error();
  auto [broker, store] = std::move(*made);
  // Owners the node must not override (docs/DESIGN.md §12, docs/CLUSTER.md): an
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
    auto known = gen.claims();
    std::vector<core::problem> owned_elsewhere;
    for (auto& c : *view) {
      bool all = cfg.ownership == ownership_mode::all;
      // A static node's own earlier claim, rolled back to another node's
      // older record, is re-claimed below, not refused.
      auto mine = known.find(c.partition);
      bool rolled_back = mine != known.end() && c.epoch < mine->second;
      if (c.owner.empty()
          || (!all && (!c.live || c.owner == gen.node || gen.owned.count(c.partition) == 0
                       || rolled_back)))
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
  if (!gen.own_all)
    if (auto err = claim(cfg, gen, *store, gen.owned, gen.claims()))
      return err;
  std::set<int32_t> every;
  for (int32_t p = 0; p < cfg.partition_count; ++p)
    every.insert(p);
  auto& parts = gen.own_all ? every : gen.owned;
  auto r = inspect_for(cfg, gen, *broker, *store, parts);
  if (!r)
    return r.error();
  auto vs = plan_for(*r, gen, parts);
  // Create the consumer with the explicit starts; it checks [low, high] itself.
  if (auto started = gen.log->start(vs.starts, vs.epochs); !started)
    return started.error();
  if (auto err = confirm(cfg, *broker, *store, *r, vs))
    return err;
  gen.checkpoints = std::move(store);
  gen.broker = std::move(broker); // the identity fence's, from now on
  return vs;
}

caf::expected<verified_start> verifier_state::extend(const projection_settings& cfg,
                                                     generation& gen,
                                                     const std::vector<int32_t>& added) {
  if (!gen.log)
    return caf::make_error(ec::unspecified, "extend: the generation has no consumer");
  // An inspector and a store of its own: the generation's are in use by the
  // identity fence and the writer, on other threads.
  auto made = open_handles(gen);
  if (!made)
    return made.error();
  auto [broker, store] = std::move(*made);
  std::set<int32_t> parts(added.begin(), added.end());
  // Just given to this node: a first claim each, whatever an earlier
  // ownership of theirs left in the generation's claims.
  if (auto err = claim(cfg, gen, *store, parts, {}))
    return err;
  auto r = inspect_for(cfg, gen, *broker, *store, parts);
  if (!r)
    return r.error();
  auto vs = plan_for(*r, gen, parts);
  if (auto ok = gen.log->add(vs.starts, vs.epochs); !ok)
    return ok.error();
  if (auto err = confirm(cfg, *broker, *store, *r, vs))
    return err;
  return vs;
}

verifier_actor::behavior_type
metadata_verifier(verifier_actor::stateful_pointer<verifier_state> self, projection_settings cfg,
                  std::shared_ptr<generation> gen) {
  return {
    [=](atom::verify) -> caf::result<verified_start> {
      auto vs = state_of(self).run(cfg, *gen);
      if (!vs)
        return vs.error();
      return std::move(*vs);
    },
    [=](atom::assign, const std::vector<int32_t>& added) -> caf::result<verified_start> {
      auto vs = state_of(self).extend(cfg, *gen, added);
      if (!vs)
        return vs.error();
      return std::move(*vs);
    },
  };
}

} // namespace qsp
