#include "testkit/world/redis_cluster.hpp"

#include <algorithm>
#include <cstdio>
#include <string_view>

#include "testkit/world/slots.hpp"
#include "testkit/world/world.hpp"

namespace qsp::test {

using namespace sim;

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
    s.replica_ids = {next_replica_id()};
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

void simulated_redis_cluster::wait_replicas(const std::set<std::string>& nodes) {
  lock g{mtx};
  std::set<int32_t> shards;
  for (size_t i = 0; i < cluster.shards.size(); ++i)
    if (nodes.count(cluster.shards[i].node_id) > 0)
      shards.insert(static_cast<int32_t>(i));
  auto& journal = world().journal_;
  for (auto i = journal.begin(); i != journal.end();) {
    auto& undo_list = i->undo;
    undo_list.erase(std::remove_if(undo_list.begin(), undo_list.end(),
                                   [&](const redis_undo& u) { return shards.count(shard_of(u)) > 0; }),
                    undo_list.end());
    i = undo_list.empty() ? journal.erase(i) : std::next(i);
  }
}

std::string simulated_redis_cluster::next_node_id() {
  char id[48];
  ++nodes_made_;
  std::snprintf(id, sizeof id, "%040llx", static_cast<unsigned long long>(nodes_made_));
  return id;
}

std::string simulated_redis_cluster::next_replica_id() {
  // Apart from the primaries' ids (next_node_id), so that a replica made
  // changes none of theirs.
  char id[48];
  ++replicas_made_;
  std::snprintf(id, sizeof id, "%08x%032llx", 0xa11ce000u, static_cast<unsigned long long>(replicas_made_));
  return id;
}

size_t simulated_redis_cluster::lose_writes(int32_t shard, size_t n) {
  auto& journal = world().journal_;
  size_t affected = 0;
  for (size_t i = journal.size(); i-- > 0 && affected < n;) {
    auto& undo_list = journal[i].undo;
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
      journal.erase(journal.begin() + static_cast<std::ptrdiff_t>(i));
  }
  return affected;
}

int64_t simulated_redis_cluster::top_epoch() const {
  int64_t top = 0;
  for (auto& o : cluster.shards)
    top = std::max({top, o.current_epoch, o.config_epoch});
  return top;
}

void simulated_redis_cluster::take_new_epoch(size_t i) {
  auto top = top_epoch();
  for (auto& o : cluster.shards)
    o.current_epoch = top + 1;
  cluster.shards[i].config_epoch = top + 1;
}

size_t simulated_redis_cluster::shard_failover(int32_t shard, size_t n, bool reset) {
  lock g{mtx};
  adopt_fixture_copies();
  auto* found = shard_at(shard, false);
  if (found == nullptr)
    return 0;
  auto affected = lose_writes(shard, n);
  auto& sh = *found;
  // The replica takes over: its own node id (the one the registry may have
  // recorded as its replica) and address.  Its new replica gets a new id
  // (a chain of failovers meets a new node each time, as with several
  // replicas; the old primary's data lives on in it).
  auto fresh = next_node_id();
  sh.node_id = sh.replica_ids.empty() ? fresh : sh.replica_ids.front();
  sh.replica_ids = {next_replica_id()};
  sh.address = "127.0.0.1:" + std::to_string(7000 + nodes_made_);
  sh.replid2 = sh.replid;
  sh.replid = next_replid();
  // The promoted replica takes a new configuration epoch, the cluster's
  // largest.
  take_new_epoch(static_cast<size_t>(shard));
  if (reset)
    ++world().redis_resets;
  sync_copy_views();
  return affected;
}

size_t simulated_redis_cluster::shard_restart_from_disk(int32_t shard, size_t n, bool rdb) {
  lock g{mtx};
  adopt_fixture_copies();
  auto* found = shard_at(shard, false);
  if (found == nullptr)
    return 0;
  // What the primary's file did not hold is gone; its replicas resync from
  // it and lose it too.
  auto affected = lose_writes(shard, n);
  auto& sh = *found;
  auto old = sh.replid;
  sh.replid = next_replid();
  sh.replid2 = rdb ? old : std::string(40, '0');
  ++world().redis_resets;
  sync_copy_views();
  return affected;
}

core::shard_report* simulated_redis_cluster::shard_at(int32_t shard, bool not_home) {
  if (shard < 0 || static_cast<size_t>(shard) >= cluster.shards.size())
    return nullptr;
  auto& sh = cluster.shards[static_cast<size_t>(shard)];
  if (not_home && serves(sh.slots, redis::key_slot(world().meta_key())))
    return nullptr;
  return &sh;
}

void simulated_redis_cluster::drop_keys_in(const std::vector<std::pair<int, int>>& slots) {
  auto& w = world();
  for (auto i = w.sessions.begin(); i != w.sessions.end();)
    i = in_ranges(slots, redis::key_slot(w.convs_prefix + i->first)) ? w.sessions.erase(i)
                                                                     : std::next(i);
  for (auto i = copy_keys.begin(); i != copy_keys.end();) {
    auto slot = core::parse_decimal(i->first.first);
    i = slot && in_ranges(slots, static_cast<int>(*slot)) ? copy_keys.erase(i) : std::next(i);
  }
}

bool simulated_redis_cluster::shard_flushall(int32_t shard) {
  lock g{mtx};
  adopt_fixture_copies();
  auto* found = shard_at(shard, true);
  if (found == nullptr)
    return false;
  auto& sh = *found;
  auto mine = parse_slots(sh.slots);
  auto& w = world();
  // One write of the shard's stream, each key noted for a rollback.
  simulated_redis::write_scope scope{w};
  std::vector<std::string> users;
  for (auto& [user, set] : w.sessions)
    if (in_ranges(mine, redis::key_slot(w.convs_prefix + user)))
      users.push_back(user);
  for (auto& user : users) {
    for (auto& [conv, score] : w.sessions[user])
      w.note_member(user, conv);
    w.sessions.erase(user);
  }
  std::vector<std::string> keys;
  for (auto& [k, h] : w.hashes)
    if (in_ranges(mine, redis::key_slot(k)))
      keys.push_back(k);
  for (auto& [k, v] : w.strings)
    if (in_ranges(mine, redis::key_slot(k)))
      keys.push_back(k);
  for (auto& k : keys) {
    w.note_key(k);
    w.hashes.erase(k);
    w.strings.erase(k);
    w.expires_at.erase(k);
  }
  std::vector<std::pair<std::string, std::string>> copies;
  for (auto& [key, c] : copy_keys)
    if (auto slot = core::parse_decimal(key.first);
        slot && in_ranges(mine, static_cast<int>(*slot)))
      copies.push_back(key);
  for (auto& key : copies) {
    note_copy(key);
    copy_keys.erase(key);
  }
  sync_copy_views();
  return true;
}

void simulated_redis_cluster::spend_epoch() {
  lock g{mtx};
  auto top = top_epoch();
  for (auto& o : cluster.shards)
    o.current_epoch = top + 1;
}

void simulated_redis_cluster::epoch_collision(int32_t a, int32_t b) {
  lock g{mtx};
  auto n = static_cast<int32_t>(cluster.shards.size());
  if (a < 0 || b < 0 || a >= n || b >= n || a == b)
    return;
  auto& x = cluster.shards[static_cast<size_t>(a)];
  auto& y = cluster.shards[static_cast<size_t>(b)];
  y.config_epoch = x.config_epoch;
  // clusterHandleConfigEpochCollision: the node with the smaller id takes
  // a new epoch.
  take_new_epoch(static_cast<size_t>(x.node_id < y.node_id ? a : b));
}

bool simulated_redis_cluster::shard_lost_and_covered(int32_t shard, int32_t to, bool bump) {
  lock g{mtx};
  adopt_fixture_copies();
  auto n = static_cast<int32_t>(cluster.shards.size());
  if (shard < 0 || to < 0 || shard >= n || to >= n || shard == to)
    return false;
  auto& dead = cluster.shards[static_cast<size_t>(shard)];
  if (serves(dead.slots, redis::key_slot(world().meta_key())))
    return false;
  auto lost = parse_slots(dead.slots);
  auto& w = world();
  // Its writes leave every stream: no later rollback brings them back.
  for (auto i = w.journal_.begin(); i != w.journal_.end();) {
    auto& undo_list = i->undo;
    undo_list.erase(std::remove_if(undo_list.begin(), undo_list.end(),
                                   [&](const redis_undo& u) { return shard_of(u) == shard; }),
                    undo_list.end());
    i = undo_list.empty() ? w.journal_.erase(i) : std::next(i);
  }
  // Gone with both nodes: every key of its slots (not a write: nothing of
  // it is in any stream that survives).
  drop_keys_in(lost);
  auto& dst = cluster.shards[static_cast<size_t>(to)];
  auto merged = parse_slots(dst.slots);
  merged.insert(merged.end(), lost.begin(), lost.end());
  dst.slots = format_slots(merged);
  if (bump) {
    // CLUSTER BUMPEPOCH: a new epoch unless it holds the unique largest.
    auto top = top_epoch();
    auto holders = std::count_if(cluster.shards.begin(), cluster.shards.end(),
                                 [&](const core::shard_report& o) { return o.config_epoch == top; });
    if (dst.config_epoch != top || holders > 1)
      take_new_epoch(static_cast<size_t>(to));
  }
  cluster.shards.erase(cluster.shards.begin() + shard);
  ++w.redis_resets;
  sync_copy_views();
  return true;
}

int32_t simulated_redis_cluster::add_primary() {
  lock g{mtx};
  adopt_fixture_copies();
  core::shard_report s;
  s.node_id = next_node_id();
  s.address = "127.0.0.1:" + std::to_string(7000 + nodes_made_);
  s.replicas = 1;
  s.replica_ids = {next_replica_id()};
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

int32_t simulated_redis_cluster::move_slots(int32_t from, int32_t to, int32_t count,
                                            bool lowest_first) {
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
  auto take = [&](int x) {
    if (x != home) {
      moved.emplace_back(x, x);
      ++taken;
    }
  };
  if (lowest_first) {
    for (auto r = have.begin(); r != have.end() && taken < count; ++r)
      for (int x = r->first; x <= r->second && taken < count; ++x)
        take(x);
  } else {
    for (auto r = have.rbegin(); r != have.rend() && taken < count; ++r)
      for (int x = r->second; x >= r->first && taken < count; --x)
        take(x);
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
  auto* found = shard_at(shard, true);
  if (found == nullptr)
    return false;
  auto& sh = *found;
  drop_keys_in(parse_slots(sh.slots));
  sh.replid = next_replid();
  sh.replid2 = std::string(40, '0');
  ++world().redis_resets;
  sync_copy_views();
  return true;
}

} // namespace qsp::test
