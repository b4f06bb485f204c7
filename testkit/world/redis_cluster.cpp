#include "testkit/world/redis_cluster.hpp"

#include <algorithm>
#include <cstdio>
#include <string_view>

#include "core/mutants.hpp"
#include "testkit/world/world.hpp"

namespace qsp::redis {

// Declared in redis/cluster_map.hpp, which includes hiredis's headers: the
// test kit is built without them.  Defined in the library (redis/cluster_map.cpp).
uint16_t key_slot(std::string_view key) noexcept;

} // namespace qsp::redis

namespace qsp::test {

using sim::copy_tag_of;
using sim::lock;

namespace {

constexpr int64_t slot_count = 16384;

using slot_ranges = std::vector<std::pair<int, int>>;

slot_ranges parse_slots(std::string_view slots) {
  slot_ranges out;
  while (!slots.empty()) {
    auto comma = slots.find(',');
    auto item = slots.substr(0, comma);
    slots = comma == std::string_view::npos ? std::string_view{} : slots.substr(comma + 1);
    auto dash = item.find('-');
    auto first = core::parse_decimal(item.substr(0, dash));
    auto last = dash == std::string_view::npos ? first : core::parse_decimal(item.substr(dash + 1));
    if (first && last)
      out.emplace_back(static_cast<int>(*first), static_cast<int>(*last));
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string format_slots(slot_ranges r) {
  std::sort(r.begin(), r.end());
  // Adjacent ranges are one.
  slot_ranges merged;
  for (auto& x : r)
    if (!merged.empty() && merged.back().second + 1 >= x.first)
      merged.back().second = std::max(merged.back().second, x.second);
    else
      merged.push_back(x);
  std::string out;
  for (auto& [a, b] : merged)
    out += (out.empty() ? "" : ",") + (a == b ? std::to_string(a)
                                              : std::to_string(a) + "-" + std::to_string(b));
  return out;
}

bool in_ranges(const slot_ranges& r, int slot) {
  return std::any_of(r.begin(), r.end(),
                     [&](const std::pair<int, int>& x) { return x.first <= slot && slot <= x.second; });
}

/// Whether `slots` (a shard_report's "a-b,c,...") names `slot`.
bool serves(std::string_view slots, uint16_t slot) {
  return in_ranges(parse_slots(slots), slot);
}

/// Whether every slot of `now` is in `then`.
bool covers(const slot_ranges& then, const slot_ranges& now) {
  for (auto& [a, b] : now)
    for (int x = a; x <= b; ++x)
      if (!in_ranges(then, x))
        return false;
  return true;
}

} // namespace

std::string sim::copy_tag_of(const core::shard_report& sh) {
  auto r = parse_slots(sh.slots);
  return r.empty() ? std::string{} : std::to_string(r.front().first);
}

fake_world& simulated_redis_cluster::world() { return static_cast<fake_world&>(*this); }

const fake_world& simulated_redis_cluster::world() const {
  return static_cast<const fake_world&>(*this);
}

std::string simulated_redis_cluster::next_replid() {
  // 40 hex digits, distinct per call (and per world: seeded by its address).
  uint64_t x = ++replids_ * 0x9e3779b97f4a7c15ULL;
  char buf[48];
  std::snprintf(buf, sizeof buf, "%016llx%016llx%08llx",
                static_cast<unsigned long long>(x),
                static_cast<unsigned long long>(x ^ 0xc2b2ae3d27d4eb4fULL),
                static_cast<unsigned long long>(replids_ & 0xffffffffULL));
  return buf;
}

void simulated_redis_cluster::make_redis_cluster(int32_t shards) {
  lock g{mtx};
  cluster = core::redis_cluster_state{};
  if (shards <= 0)
    return;
  auto n = static_cast<int64_t>(shards);
  for (int64_t i = 0; i < n; ++i) {
    core::shard_report s;
    char id[48];
    std::snprintf(id, sizeof id, "%040llx", static_cast<unsigned long long>(i + 1));
    s.node_id = id;
    nodes_made_ = static_cast<uint64_t>(i + 1);
    s.address = "127.0.0.1:" + std::to_string(7000 + i);
    auto first = i * slot_count / n, last = (i + 1) * slot_count / n - 1;
    s.slots = std::to_string(first) + "-" + std::to_string(last);
    s.replicas = 1;
    s.version = world().server_version;
    s.maxmemory_policy = world().maxmemory_policy;
    s.cluster_state = "ok";
    s.replid = next_replid();
    s.replid2 = std::string(40, '0');
    s.copy = "absent";
    s.config_epoch = i + 1;
    s.current_epoch = n;
    s.copy_tag = std::to_string(first);
    cluster.shards.push_back(std::move(s));
  }
}

int32_t simulated_redis_cluster::shard_of(const std::string& key) const {
  lock g{mtx};
  auto slot = redis::key_slot(key);
  for (size_t i = 0; i < cluster.shards.size(); ++i)
    if (serves(cluster.shards[i].slots, slot))
      return static_cast<int32_t>(i);
  return -1;
}

int32_t simulated_redis_cluster::shard_of(const redis_undo& u) const {
  switch (u.what) {
    case redis_undo::kind::key:
      return shard_of(u.key);
    case redis_undo::kind::member:
      return shard_of(world().convs_prefix + u.key);
    case redis_undo::kind::copy: {
      auto slot = core::parse_decimal(u.copy_key.first);
      if (!slot)
        return -1;
      for (size_t i = 0; i < cluster.shards.size(); ++i)
        if (serves(cluster.shards[i].slots, static_cast<uint16_t>(*slot)))
          return static_cast<int32_t>(i);
      return -1;
    }
    case redis_undo::kind::import:
      for (size_t i = 0; !u.slots.empty() && i < cluster.shards.size(); ++i)
        if (serves(cluster.shards[i].slots, static_cast<uint16_t>(u.slots.front().first)))
          return static_cast<int32_t>(i);
      return -1;
  }
  return -1;
}

void simulated_redis_cluster::wait_all_replicas() {
  lock g{mtx};
  world().journal_.clear();
}

std::string simulated_redis_cluster::next_node_id() {
  char id[48];
  ++nodes_made_;
  std::snprintf(id, sizeof id, "%040llx", static_cast<unsigned long long>(nodes_made_));
  return id;
}

size_t simulated_redis_cluster::shard_failover(int32_t shard, size_t n, bool reset) {
  lock g{mtx};
  adopt_fixture_copies();
  if (shard < 0 || static_cast<size_t>(shard) >= cluster.shards.size())
    return 0;
  size_t affected = 0;
  for (size_t i = world().journal_.size(); i-- > 0 && affected < n;) {
    auto& undo_list = world().journal_[i].undo;
    bool touched = false;
    for (size_t j = undo_list.size(); j-- > 0;)
      if (shard_of(undo_list[j]) == shard) {
        world().undo(undo_list[j]);
        undo_list.erase(undo_list.begin() + static_cast<std::ptrdiff_t>(j));
        touched = true;
      }
    if (!touched)
      continue;
    ++affected;
    if (undo_list.empty())
      world().journal_.erase(world().journal_.begin() + static_cast<std::ptrdiff_t>(i));
  }
  auto& sh = cluster.shards[static_cast<size_t>(shard)];
  // The replica takes over: its own node id and address.
  sh.node_id = next_node_id();
  sh.address = "127.0.0.1:" + std::to_string(7000 + nodes_made_);
  sh.replid2 = sh.replid;
  sh.replid = next_replid();
  // The promoted replica takes a new configuration epoch, the cluster's
  // largest.
  int64_t top = 0;
  for (auto& o : cluster.shards)
    top = std::max({top, o.current_epoch, o.config_epoch});
  for (auto& o : cluster.shards)
    o.current_epoch = top + 1;
  sh.config_epoch = top + 1;
  if (reset)
    ++world().redis_resets;
  sync_copy_views();
  return affected;
}

int32_t simulated_redis_cluster::add_primary() {
  lock g{mtx};
  adopt_fixture_copies();
  core::shard_report s;
  s.node_id = next_node_id();
  s.address = "127.0.0.1:" + std::to_string(7000 + nodes_made_);
  s.replicas = 1;
  s.version = world().server_version;
  s.maxmemory_policy = world().maxmemory_policy;
  s.cluster_state = "ok";
  s.replid = next_replid();
  s.replid2 = std::string(40, '0');
  s.copy = "absent";
  s.config_epoch = 0;
  s.current_epoch = cluster.shards.empty() ? 0 : cluster.shards.front().current_epoch;
  cluster.shards.push_back(std::move(s));
  return static_cast<int32_t>(cluster.shards.size() - 1);
}

int32_t simulated_redis_cluster::move_slots(int32_t from, int32_t to, int32_t count) {
  lock g{mtx};
  adopt_fixture_copies();
  auto n = static_cast<int32_t>(cluster.shards.size());
  if (from < 0 || to < 0 || from >= n || to >= n || from == to || count <= 0)
    return 0;
  auto& src = cluster.shards[static_cast<size_t>(from)];
  auto& dst = cluster.shards[static_cast<size_t>(to)];
  auto home = static_cast<int>(redis::key_slot(world().meta_key()));
  auto have = parse_slots(src.slots);
  slot_ranges moved;
  int32_t taken = 0;
  for (auto r = have.rbegin(); r != have.rend() && taken < count; ++r)
    for (int x = r->second; x >= r->first && taken < count; --x)
      if (x != home) {
        moved.emplace_back(x, x);
        ++taken;
      }
  if (taken == 0)
    return 0;
  slot_ranges left;
  for (auto& [a, b] : have)
    for (int x = a; x <= b; ++x)
      if (!in_ranges(moved, x))
        left.emplace_back(x, x);
  src.slots = format_slots(left);
  auto merged = parse_slots(dst.slots);
  merged.insert(merged.end(), moved.begin(), moved.end());
  dst.slots = format_slots(merged);
  {
    // The RESTOREs, one write of the importing shard's stream.
    simulated_redis::write_scope w{world()};
    redis_undo u;
    u.what = redis_undo::kind::import;
    u.slots = parse_slots(format_slots(moved));
    world().open_.undo.push_back(std::move(u));
  }
  imported_at_[dst.node_id] = world().writes_;
  // Finishing an import bumps the importer's epoch unless it is the
  // largest already.
  int64_t top = 0;
  for (auto& o : cluster.shards)
    top = std::max({top, o.current_epoch, o.config_epoch});
  if (dst.config_epoch != top || std::count_if(cluster.shards.begin(), cluster.shards.end(),
                                               [&](const core::shard_report& o) {
                                                 return o.config_epoch == top;
                                               }) > 1) {
    for (auto& o : cluster.shards)
      o.current_epoch = top + 1;
    dst.config_epoch = top + 1;
  }
  sync_copy_views();
  return taken;
}

bool simulated_redis_cluster::remove_primary(int32_t shard) {
  lock g{mtx};
  auto n = static_cast<int32_t>(cluster.shards.size());
  if (shard < 0 || shard >= n || n < 2)
    return false;
  auto to = (shard + 1) % n;
  auto home = redis::key_slot(world().meta_key());
  if (serves(cluster.shards[static_cast<size_t>(shard)].slots, home))
    return false;
  auto all = static_cast<int32_t>(slot_count);
  move_slots(shard, to, all);
  if (!cluster.shards[static_cast<size_t>(shard)].slots.empty())
    return false;
  cluster.shards.erase(cluster.shards.begin() + shard);
  sync_copy_views();
  return true;
}

bool simulated_redis_cluster::shard_restart_empty(int32_t shard) {
  lock g{mtx};
  adopt_fixture_copies();
  if (shard < 0 || static_cast<size_t>(shard) >= cluster.shards.size())
    return false;
  auto& sh = cluster.shards[static_cast<size_t>(shard)];
  if (serves(sh.slots, redis::key_slot(world().meta_key())))
    return false;
  auto mine = parse_slots(sh.slots);
  auto& sessions = world().sessions;
  auto& convs_prefix = world().convs_prefix;
  for (auto i = sessions.begin(); i != sessions.end();)
    i = in_ranges(mine, redis::key_slot(convs_prefix + i->first)) ? sessions.erase(i)
                                                                  : std::next(i);
  for (auto i = copy_keys.begin(); i != copy_keys.end();) {
    auto slot = core::parse_decimal(i->first.first);
    i = slot && in_ranges(mine, static_cast<int>(*slot)) ? copy_keys.erase(i) : std::next(i);
  }
  sh.replid = next_replid();
  sh.replid2 = std::string(40, '0');
  ++world().redis_resets;
  sync_copy_views();
  return true;
}

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

void simulated_redis_cluster::put_copy(size_t i, const std::map<int32_t, std::pair<int64_t, int32_t>>& positions) {
  auto& sh = cluster.shards[i];
  auto tag = copy_tag_of(sh);
  if (tag.empty())
    return;
  std::pair<std::string, std::string> key{tag, sh.node_id};
  note_copy(key);
  auto& c = copy_keys[key];
  c.replid = sh.replid;
  c.slots = sh.slots;
  c.cluster_epoch = sh.current_epoch;
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
                             bool seed, const copy_plan* per_node) {
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
    put_copy(i, positions);
  }
  sync_copy_views();
}

} // namespace qsp::test
