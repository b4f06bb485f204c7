// The Redis Cluster room's copy keys (testkit/world/redis_cluster.hpp): the
// projection's per-primary copies, their rollback, and the verdict a start
// reads from them.
#include "testkit/world/redis_cluster.hpp"

#include "core/dispatch.hpp"
#include "testkit/world/slots.hpp"
#include "testkit/world/world.hpp"

namespace qsp::test {

using namespace sim;

bool simulated_redis_cluster::shard_copy_current(int32_t shard) const {
  lock g{mtx};
  if (shard < 0 || static_cast<size_t>(shard) >= cluster.shards.size())
    return false;
  auto& sh = cluster.shards[static_cast<size_t>(shard)];
  if (sh.slots.empty())
    return true; // it holds nothing
  auto c = copy_keys.find({copy_tag_of(sh), sh.node_id});
  if (c == copy_keys.end() || c->second.replid != sh.replid)
    return false;
  auto imp = imported_at_.find(sh.node_id);
  return imp == imported_at_.end() || c->second.written_at > imp->second;
}

std::string simulated_redis_cluster::copy_verdict(const fake_copy& c, const core::shard_report& sh) {
  // A copy names the history it was written in (redis/cluster_map.hpp).
  if (!c.replid.empty()
      && (c.replid == sh.replid || (c.replid == sh.replid2 && sh.replid2 != std::string(40, '0'))))
    return "valid";
  return "foreign";
}

void simulated_redis_cluster::adopt_fixture_copies() {
  if (fixture_copies_adopted_)
    return;
  fixture_copies_adopted_ = true;
  for (auto& sh : cluster.shards) {
    if (sh.copy != "valid" && sh.copy != "foreign")
      continue;
    fake_copy c;
    c.replid = sh.copy == "valid" ? (sh.copy_replid.empty() ? sh.replid : sh.copy_replid)
                                  : next_replid();
    c.slots = sh.slots;
    c.cluster_epoch = sh.copy_current_epoch;
    c.positions = sh.positions;
    copy_keys[{copy_tag_of(sh), sh.node_id}] = std::move(c);
  }
}

core::shard_report simulated_redis_cluster::judged_shard(size_t i) const {
  auto r = cluster.shards[i];
  r.copy_tag = copy_tag_of(r);
  r.copy = "absent";
  r.copy_replid.clear();
  r.positions.clear();
  r.slots_grew = false;
  r.copy_current_epoch = -1;
  auto take = [&](const fake_copy& c, const std::string& verdict) {
    r.copy = verdict;
    r.copy_replid = c.replid;
    r.copy_current_epoch = c.cluster_epoch;
    r.slots_grew = !covers(parse_slots(c.slots), parse_slots(r.slots));
    r.positions.clear();
    if (verdict == "valid")
      r.positions = c.positions;
  };
  if (auto own = copy_keys.find({r.copy_tag, r.node_id}); own != copy_keys.end())
    take(own->second, copy_verdict(own->second, r));
  if (r.copy == "valid")
    return r;
  // As read_cluster_state's SCAN: on the primary itself a key counts by its
  // history whichever node wrote it; elsewhere only one naming this
  // primary, written in its current history.
  auto mine = parse_slots(r.slots);
  for (auto& [key, c] : copy_keys) {
    auto slot = core::parse_decimal(key.first);
    bool here = slot && in_ranges(mine, static_cast<int>(*slot));
    if (!here && key.second != r.node_id)
      continue;
    auto verdict = here ? copy_verdict(c, r) : (c.replid == r.replid ? "valid" : "foreign");
    if (verdict != "valid") {
      if (r.copy == "absent")
        take(c, verdict);
      continue;
    }
    bool current = c.replid == r.replid;
    bool had_current = r.copy == "valid" && r.copy_replid == r.replid;
    if (r.copy != "valid" || (current && !had_current)) {
      take(c, "valid");
    } else if (had_current && !current) {
      // the current history's copy alone (as read_cluster_state)
    } else {
      for (auto& [p, at] : c.positions)
        if (at.first > r.positions[p].first)
          r.positions[p] = at;
      r.slots_grew = r.slots_grew && !covers(parse_slots(c.slots), mine);
      r.copy_current_epoch = std::max(r.copy_current_epoch, c.cluster_epoch);
    }
  }
  return r;
}

void simulated_redis_cluster::sync_copy_views() {
  if (!fixture_copies_adopted_)
    return;
  for (size_t i = 0; i < cluster.shards.size(); ++i) {
    auto j = judged_shard(i);
    auto& sh = cluster.shards[i];
    sh.copy = j.copy;
    sh.copy_replid = j.copy_replid;
    sh.positions = j.positions;
    sh.copy_tag = j.copy_tag;
  }
}

void simulated_redis_cluster::put_copy(size_t i,
                                       const std::map<int32_t, std::pair<int64_t, int32_t>>& positions,
                                       const read_stamp* stamp) {
  auto& sh = cluster.shards[i];
  auto tag = copy_tag_of(sh);
  if (tag.empty())
    return;
  std::pair<std::string, std::string> key{tag, sh.node_id};
  note_copy(key);
  auto& c = copy_keys[key];
  c.replid = stamp != nullptr ? stamp->replid : sh.replid;
  c.slots = sh.slots;
  c.cluster_epoch = stamp != nullptr ? stamp->current_epoch : sh.current_epoch;
  c.written_at = world().writes_ + 1;
  for (auto& [p, at] : positions)
    c.positions[p] = at;
}

// -- the journal's cluster entries ----------------------------------------------------

void simulated_redis_cluster::note_copy(const std::pair<std::string, std::string>& key) {
  if (world().write_depth_ == 0 || !world().noted_copies_.insert(key).second)
    return;
  redis_undo u;
  u.what = redis_undo::kind::copy;
  u.copy_key = key;
  if (auto i = copy_keys.find(key); i != copy_keys.end())
    u.copy = i->second;
  world().open_.undo.push_back(std::move(u));
}

void simulated_redis_cluster::undo_in_cluster(const redis_undo& u) {
  auto& sessions = world().sessions;
  auto& convs_prefix = world().convs_prefix;
  switch (u.what) {
    case redis_undo::kind::key:
    case redis_undo::kind::member:
      break;
    case redis_undo::kind::copy:
      if (u.copy)
        copy_keys[u.copy_key] = *u.copy;
      else
        copy_keys.erase(u.copy_key);
      break;
    case redis_undo::kind::import: {
      // The replica got the source's DELs but not these RESTOREs: every
      // key of the moved slots is gone from the shard.
      for (auto i = sessions.begin(); i != sessions.end();)
        i = in_ranges(u.slots, redis::key_slot(convs_prefix + i->first)) ? sessions.erase(i)
                                                                         : std::next(i);
      for (auto i = copy_keys.begin(); i != copy_keys.end();) {
        auto slot = core::parse_decimal(i->first.first);
        i = slot && in_ranges(u.slots, static_cast<int>(*slot)) ? copy_keys.erase(i)
                                                                 : std::next(i);
      }
      break;
    }
  }
}

// -- copies ---------------------------------------------------------------------------

void simulated_redis_cluster::record_copy(const std::map<int32_t, std::pair<int64_t, int32_t>>& positions,
                             bool seed, const copy_plan* per_node,
                                           const stamp_map* stamps) {
  copy_writes.emplace_back();
  auto& w = copy_writes.back();
  w.positions = positions;
  w.seed = seed;
  // Every entry below a copy's positions whose session set lives on that
  // copy's shard must be in Redis already.
  auto check = [&](const std::map<int32_t, std::pair<int64_t, int32_t>>& at_of, int32_t shard) {
    for (auto& [p, at] : at_of) {
      if (p < 0 || p >= world().partition_count())
        continue;
      for (auto& e : world().part(p).log) {
        if (e.offset >= at.first || e.offset < world().part(p).low || e.kind != entry_kind::data)
          continue;
        core::dispatch d;
        std::string why;
        if (!core::json_decoder{}.decode(e.value, d, why))
          continue;
        for (auto& u : d.recipients) {
          if (shard >= 0 && shard_of(world().convs_prefix + u) != shard)
            continue;
          auto sc = world().score(u, d.conversation_id);
          if (!sc || *sc < d.created_at)
            w.unapplied.push_back("partition " + std::to_string(p) + " offset "
                                  + std::to_string(e.offset) + " user " + u);
        }
      }
    }
  };
  adopt_fixture_copies();
  if (per_node == nullptr)
    check(positions, -1);
  for (size_t i = 0; i < cluster.shards.size(); ++i) {
    auto& sh = cluster.shards[i];
    if (per_node != nullptr) {
      // A start's copies: each primary its own positions.
      auto at = per_node->find(sh.node_id);
      if (at == per_node->end())
        continue;
      check(at->second, static_cast<int32_t>(i));
      put_copy(i, at->second);
      continue;
    }
    const read_stamp* stamp = nullptr;
    if (stamps != nullptr) {
      auto st = stamps->find(sh.node_id);
      if (st == stamps->end())
        continue; // a primary the store does not know gets no copy
      stamp = &st->second;
    }
    put_copy(i, positions, stamp);
  }
  sync_copy_views();
}

} // namespace qsp::test
