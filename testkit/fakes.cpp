#include "testkit/fakes.hpp"

#include "core/cluster.hpp"
#include "core/dispatch.hpp"
#include "core/mutants.hpp"

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string_view>

namespace qsp::redis {

// Declared in redis/cluster_map.hpp, which includes hiredis's headers: the
// test kit is built without them.  Defined in the library (redis/cluster_map.cpp).
uint16_t key_slot(std::string_view key) noexcept;

} // namespace qsp::redis

namespace qsp::test {

namespace {

using lock = std::lock_guard<std::recursive_mutex>;

caf::error frozen(const std::string& what) {
  return caf::make_error(ec::redis_unavailable, "fake redis: " + what + ": timed out");
}

caf::error failure(const fault& f, ec fallback, const std::string& what) {
  auto code = f.code == ec::unspecified ? fallback : f.code;
  return caf::make_error(code, "fake: injected failure: " + what);
}


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

/// The copy tag of a shard: the decimal of its lowest slot ("" none).
std::string tag_of(const core::shard_report& sh) {
  auto r = parse_slots(sh.slots);
  return r.empty() ? std::string{} : std::to_string(r.front().first);
}

} // namespace

bool fault::fire() {
  if (count == 0)
    return false;
  if (skip > 0) {
    --skip;
    return false;
  }
  if (count > 0)
    --count;
  return true;
}

std::string to_string(entry_kind k) {
  switch (k) {
    case entry_kind::data: return "data";
    case entry_kind::marker: return "marker";
    case entry_kind::aborted: return "aborted";
  }
  return "?";
}

int64_t fake_partition::lso() const {
  int64_t result = end();
  for (auto& [txn, first] : open)
    result = std::min(result, first);
  return result;
}

int64_t fake_partition::end_offset_for_epoch(int32_t epoch) const {
  // Epochs never decrease along the log (appends take the current one).
  auto i = std::partition_point(log.begin(), log.end(),
                                [epoch](const log_entry& e) { return e.epoch <= epoch; });
  return static_cast<int64_t>(i - log.begin());
}

// -- fake_world: log ---------------------------------------------------------------

fake_world::fake_world(int32_t partition_count)
  : topic_id(default_topic_id()), partitions(static_cast<size_t>(partition_count)) {}

std::string fake_world::default_topic_id(uint64_t n) {
  return core::kafka_uuid_text(0x0123456789abcdefULL ^ n, 0xfedcba9876543210ULL + n);
}

fake_partition& fake_world::part(int32_t p) {
  if (p < 0 || p >= partition_count())
    throw std::out_of_range("fake_world: no partition " + std::to_string(p));
  return partitions[static_cast<size_t>(p)];
}

const fake_partition& fake_world::part(int32_t p) const {
  return const_cast<fake_world*>(this)->part(p);
}

log_entry& fake_world::push_entry(int32_t p, std::string value, entry_kind kind, int64_t txn) {
  auto& fp = part(p);
  fp.log.push_back(log_entry{fp.end(), std::move(value), kind, txn, fp.leader_epoch,
                             now_ms ? now_ms() : 0});
  return fp.log.back();
}

int64_t fake_world::append_raw(int32_t p, std::string value) {
  lock g{mtx};
  auto off = push_entry(p, std::move(value), entry_kind::data, 0).offset;
  wake(p);
  return off;
}

void fake_world::wake(int32_t p) {
  lock g{mtx};
  for (auto& weak : readers)
    if (auto r = weak.lock(); r && r->partition() == p)
      r->fire();
}

int64_t fake_world::append(int32_t p, const core::dispatch& d) {
  return append_raw(p, core::encode_json(d));
}

int64_t fake_world::append(int32_t p, std::string conversation, int64_t created_at,
                           std::vector<std::string> recipients) {
  return append(p, core::dispatch{std::move(conversation), created_at, std::move(recipients)});
}

int64_t fake_world::append_marker(int32_t p) {
  lock g{mtx};
  auto off = push_entry(p, {}, entry_kind::marker, 0).offset;
  wake(p);
  return off;
}

int64_t fake_world::begin_txn(int32_t p) {
  lock g{mtx};
  auto& fp = part(p);
  auto id = ++last_txn;
  fp.open.emplace(id, fp.end());
  return id;
}

int64_t fake_world::append_txn(int32_t p, int64_t txn, const core::dispatch& d) {
  lock g{mtx};
  auto& fp = part(p);
  if (fp.open.count(txn) == 0)
    throw std::logic_error("fake_world: transaction not open");
  return push_entry(p, core::encode_json(d), entry_kind::data, txn).offset;
}

int64_t fake_world::commit_txn(int32_t p, int64_t txn) {
  lock g{mtx};
  auto& fp = part(p);
  if (fp.open.erase(txn) == 0)
    throw std::logic_error("fake_world: transaction not open");
  auto off = push_entry(p, {}, entry_kind::marker, txn).offset;
  wake(p);
  return off;
}

int64_t fake_world::abort_txn(int32_t p, int64_t txn) {
  lock g{mtx};
  auto& fp = part(p);
  if (fp.open.erase(txn) == 0)
    throw std::logic_error("fake_world: transaction not open");
  for (auto& e : fp.log)
    if (e.txn == txn && e.kind == entry_kind::data)
      e.kind = entry_kind::aborted;
  auto off = push_entry(p, {}, entry_kind::marker, txn).offset;
  wake(p);
  return off;
}

void fake_world::truncate(int32_t p, int64_t low) {
  lock g{mtx};
  auto& fp = part(p);
  fp.low = std::min(std::max(fp.low, low), fp.end());
}

void fake_world::unclean_truncate(int32_t p, int64_t to) {
  lock g{mtx};
  auto& fp = part(p);
  to = std::min(std::max<int64_t>(to, 0), fp.end());
  fp.log.resize(static_cast<size_t>(to));
  fp.low = std::min(fp.low, to);
  for (auto i = fp.open.begin(); i != fp.open.end();)
    i = i->second >= to ? fp.open.erase(i) : std::next(i);
  ++fp.leader_epoch;
  // librdkafka learns of the new leader and wakes the fetcher's queue.
  wake(p);
}

void fake_world::recreate_topic() {
  lock g{mtx};
  auto n = static_cast<uint64_t>(partitions.size());
  ++topic_incarnation;
  // A new id: default_topic_id(1) is the first topic's; skip any in use.
  for (uint64_t k = topic_incarnation + 1;; ++k)
    if (auto id = default_topic_id(k); id != topic_id) {
      topic_id = id;
      break;
    }
  partitions.assign(static_cast<size_t>(n), fake_partition{});
  for (int32_t p = 0; p < partition_count(); ++p)
    wake(p);
}

void fake_world::add_partitions(int32_t n) {
  lock g{mtx};
  if (n > 0)
    partitions.resize(partitions.size() + static_cast<size_t>(n));
}

void fake_world::broker_errors(int64_t n) {
  lock g{mtx};
  inspect_fault.arm(n);
  identity_fault.arm(n);
  poll_fault.arm(n);
}

int64_t fake_world::visible_end(int32_t p) const {
  lock g{mtx};
  auto& fp = part(p);
  if (broker_delay_ms <= 0 || !now_ms)
    return fp.end();
  auto now = now_ms();
  // Appends come in time order: the visible ones are a prefix.
  auto i = std::partition_point(fp.log.begin(), fp.log.end(), [&](const log_entry& e) {
    return e.appended_ms + broker_delay_ms <= now;
  });
  return static_cast<int64_t>(i - fp.log.begin());
}

core::watermarks fake_world::marks(int32_t p) const {
  lock g{mtx};
  auto& fp = part(p);
  return core::watermarks{fp.low, fp.lso()};
}

std::map<int32_t, int64_t> fake_world::lsos() const {
  lock g{mtx};
  std::map<int32_t, int64_t> out;
  for (int32_t p = 0; p < partition_count(); ++p)
    out[p] = lso(p);
  return out;
}

// -- fake_world: Redis -------------------------------------------------------------

core::identity fake_world::identity() const {
  lock g{mtx};
  return core::identity{topic, partition_count(), cluster_id, topic_id};
}

std::string fake_world::meta_key() const { return ns + ":meta"; }

std::string fake_world::checkpoint_prefix() const { return ns + ":checkpoint:" + topic + ":"; }

std::string fake_world::checkpoint_key(int32_t p) const {
  return checkpoint_prefix() + std::to_string(p);
}

bool fake_world::has_meta() const {
  lock g{mtx};
  return hashes.count(meta_key()) > 0;
}

std::optional<int64_t> fake_world::checkpoint(int32_t p) const {
  lock g{mtx};
  auto i = hashes.find(checkpoint_key(p));
  if (i == hashes.end())
    return std::nullopt;
  auto f = i->second.find(std::string{core::fields::next_offset});
  if (f == i->second.end())
    return std::nullopt;
  return core::parse_decimal(f->second);
}

std::map<int32_t, int64_t> fake_world::checkpoints() const {
  lock g{mtx};
  std::map<int32_t, int64_t> out;
  for (int32_t p = 0; p < partition_count(); ++p)
    if (auto cp = checkpoint(p))
      out[p] = *cp;
  return out;
}

void fake_world::put_meta(const core::identity& id) {
  lock g{mtx};
  hashes[meta_key()] = core::encode_meta(id);
}

void fake_world::put_checkpoint(const core::identity& id, int32_t p, int64_t next_offset) {
  lock g{mtx};
  hashes[checkpoint_key(p)] = core::encode_checkpoint(id, p, next_offset);
}

void fake_world::set_next_offset(int32_t p, int64_t next_offset) {
  lock g{mtx};
  hashes[checkpoint_key(p)][std::string{core::fields::next_offset}] = core::to_decimal(next_offset);
}

std::optional<int64_t> fake_world::score(const std::string& user, const std::string& conv) const {
  lock g{mtx};
  auto u = sessions.find(user);
  if (u == sessions.end())
    return std::nullopt;
  auto c = u->second.find(conv);
  if (c == u->second.end())
    return std::nullopt;
  return c->second;
}

// -- fake_world: Redis faults, the undo journal -------------------------------------

caf::error fake_world::redis_gate(const std::string& what, fault* f, bool frozen_too) {
  if (redis_down)
    return redis_refused(what);
  if (f != nullptr && f->fire())
    return failure(*f, ec::redis_unavailable, what);
  if (frozen_too && redis_frozen)
    return frozen(what);
  return caf::none;
}

caf::error fake_world::redis_refused(const std::string& what) {
  ++redis_resets;
  return caf::make_error(ec::redis_unavailable, "fake redis: connection refused: " + what);
}

fake_world::write_scope::write_scope(fake_world& world) : w(world) {
  if (w.write_depth_++ == 0) {
    w.open_ = redis_write{};
    w.noted_keys_.clear();
    w.noted_members_.clear();
    w.noted_copies_.clear();
  }
}

fake_world::write_scope::~write_scope() {
  if (--w.write_depth_ > 0 || w.open_.undo.empty())
    return;
  w.journal_.push_back(std::move(w.open_));
  w.open_ = redis_write{};
  ++w.writes_;
  while (w.journal_.size() > 100000)
    w.journal_.pop_front();
}

void fake_world::note_key(const std::string& key) {
  if (write_depth_ == 0 || !noted_keys_.insert(key).second)
    return;
  redis_undo u;
  u.what = redis_undo::kind::key;
  u.key = key;
  if (auto i = hashes.find(key); i != hashes.end())
    u.hash = i->second;
  if (auto i = strings.find(key); i != strings.end())
    u.text = i->second;
  if (auto i = expires_at.find(key); i != expires_at.end())
    u.number = i->second;
  open_.undo.push_back(std::move(u));
}

void fake_world::note_member(const std::string& user, const std::string& conv) {
  if (write_depth_ == 0 || !noted_members_.insert({user, conv}).second)
    return;
  redis_undo u;
  u.what = redis_undo::kind::member;
  u.key = user;
  u.member = conv;
  u.number = score(user, conv);
  open_.undo.push_back(std::move(u));
}

void fake_world::note_copy(const std::pair<std::string, std::string>& key) {
  if (write_depth_ == 0 || !noted_copies_.insert(key).second)
    return;
  redis_undo u;
  u.what = redis_undo::kind::copy;
  u.copy_key = key;
  if (auto i = copy_keys.find(key); i != copy_keys.end())
    u.copy = i->second;
  open_.undo.push_back(std::move(u));
}

void fake_world::undo(const redis_undo& u) {
  switch (u.what) {
    case redis_undo::kind::key:
      if (u.hash)
        hashes[u.key] = *u.hash;
      else
        hashes.erase(u.key);
      if (u.text)
        strings[u.key] = *u.text;
      else
        strings.erase(u.key);
      if (u.number)
        expires_at[u.key] = *u.number;
      else
        expires_at.erase(u.key);
      break;
    case redis_undo::kind::member:
      if (u.number) {
        sessions[u.key][u.member] = *u.number;
      } else if (auto i = sessions.find(u.key); i != sessions.end()) {
        i->second.erase(u.member);
        if (i->second.empty())
          sessions.erase(i); // an empty sorted set does not exist
      }
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

void fake_world::zadd(const std::vector<applied_update>& ups, size_t limit) {
  write_scope w{*this};
  limit = std::min(limit, ups.size());
  for (size_t i = 0; i < limit; ++i)
    for (auto& [conv, sc] : ups[i].members) {
      note_member(ups[i].user, conv);
      auto& set = sessions[ups[i].user];
      auto [it, fresh] = set.emplace(conv, sc);
      if (!fresh && sc > it->second) // GT: only ever raise a score
        it->second = sc;
    }
}

size_t fake_world::redis_writes() const {
  lock g{mtx};
  return writes_;
}

size_t fake_world::redis_rollback(size_t n) {
  lock g{mtx};
  size_t undone = 0;
  for (; undone < n && !journal_.empty(); ++undone) {
    auto& w = journal_.back();
    for (auto u = w.undo.rbegin(); u != w.undo.rend(); ++u)
      undo(*u);
    journal_.pop_back();
  }
  ++redis_resets;
  return undone;
}

bool fake_world::evict(const std::string& key) {
  lock g{mtx};
  bool existed = hashes.erase(key) > 0;
  existed = strings.erase(key) > 0 || existed;
  expires_at.erase(key);
  if (key.compare(0, convs_prefix.size(), convs_prefix) == 0) {
    auto user = key.substr(convs_prefix.size());
    if (auto i = sessions.find(user); i != sessions.end()) {
      existed = existed || !i->second.empty();
      sessions.erase(i);
    }
  }
  return existed;
}

std::vector<std::string> fake_world::keys() const {
  lock g{mtx};
  std::set<std::string> out;
  for (auto& [k, h] : hashes)
    out.insert(k);
  for (auto& [k, v] : strings)
    out.insert(k);
  for (auto& [user, set] : sessions)
    if (!set.empty())
      out.insert(convs_prefix + user);
  return {out.begin(), out.end()};
}

// -- fake_world: Redis Cluster mode ------------------------------------------------

std::string fake_world::next_replid() {
  // 40 hex digits, distinct per call (and per world: seeded by its address).
  uint64_t x = ++replids_ * 0x9e3779b97f4a7c15ULL;
  char buf[48];
  std::snprintf(buf, sizeof buf, "%016llx%016llx%08llx",
                static_cast<unsigned long long>(x),
                static_cast<unsigned long long>(x ^ 0xc2b2ae3d27d4eb4fULL),
                static_cast<unsigned long long>(replids_ & 0xffffffffULL));
  return buf;
}

void fake_world::make_redis_cluster(int32_t shards) {
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
    s.version = server_version;
    s.maxmemory_policy = maxmemory_policy;
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

int32_t fake_world::shard_of(const std::string& key) const {
  lock g{mtx};
  auto slot = redis::key_slot(key);
  for (size_t i = 0; i < cluster.shards.size(); ++i)
    if (serves(cluster.shards[i].slots, slot))
      return static_cast<int32_t>(i);
  return -1;
}

int32_t fake_world::shard_of(const redis_undo& u) const {
  switch (u.what) {
    case redis_undo::kind::key:
      return shard_of(u.key);
    case redis_undo::kind::member:
      return shard_of(convs_prefix + u.key);
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

void fake_world::wait_all_replicas() {
  lock g{mtx};
  journal_.clear();
}

std::string fake_world::next_node_id() {
  char id[48];
  ++nodes_made_;
  std::snprintf(id, sizeof id, "%040llx", static_cast<unsigned long long>(nodes_made_));
  return id;
}

size_t fake_world::shard_failover(int32_t shard, size_t n, bool reset) {
  lock g{mtx};
  adopt_fixture_copies();
  if (shard < 0 || static_cast<size_t>(shard) >= cluster.shards.size())
    return 0;
  size_t affected = 0;
  for (size_t i = journal_.size(); i-- > 0 && affected < n;) {
    auto& undo_list = journal_[i].undo;
    bool touched = false;
    for (size_t j = undo_list.size(); j-- > 0;)
      if (shard_of(undo_list[j]) == shard) {
        undo(undo_list[j]);
        undo_list.erase(undo_list.begin() + static_cast<std::ptrdiff_t>(j));
        touched = true;
      }
    if (!touched)
      continue;
    ++affected;
    if (undo_list.empty())
      journal_.erase(journal_.begin() + static_cast<std::ptrdiff_t>(i));
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
    ++redis_resets;
  sync_copy_views();
  return affected;
}

int32_t fake_world::add_primary() {
  lock g{mtx};
  adopt_fixture_copies();
  core::shard_report s;
  s.node_id = next_node_id();
  s.address = "127.0.0.1:" + std::to_string(7000 + nodes_made_);
  s.replicas = 1;
  s.version = server_version;
  s.maxmemory_policy = maxmemory_policy;
  s.cluster_state = "ok";
  s.replid = next_replid();
  s.replid2 = std::string(40, '0');
  s.copy = "absent";
  s.config_epoch = 0;
  s.current_epoch = cluster.shards.empty() ? 0 : cluster.shards.front().current_epoch;
  cluster.shards.push_back(std::move(s));
  return static_cast<int32_t>(cluster.shards.size() - 1);
}

int32_t fake_world::move_slots(int32_t from, int32_t to, int32_t count) {
  lock g{mtx};
  adopt_fixture_copies();
  auto n = static_cast<int32_t>(cluster.shards.size());
  if (from < 0 || to < 0 || from >= n || to >= n || from == to || count <= 0)
    return 0;
  auto& src = cluster.shards[static_cast<size_t>(from)];
  auto& dst = cluster.shards[static_cast<size_t>(to)];
  auto home = static_cast<int>(redis::key_slot(meta_key()));
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
    write_scope w{*this};
    redis_undo u;
    u.what = redis_undo::kind::import;
    u.slots = parse_slots(format_slots(moved));
    open_.undo.push_back(std::move(u));
  }
  imported_at_[dst.node_id] = writes_;
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

bool fake_world::remove_primary(int32_t shard) {
  lock g{mtx};
  auto n = static_cast<int32_t>(cluster.shards.size());
  if (shard < 0 || shard >= n || n < 2)
    return false;
  auto to = (shard + 1) % n;
  auto home = redis::key_slot(meta_key());
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

bool fake_world::shard_restart_empty(int32_t shard) {
  lock g{mtx};
  adopt_fixture_copies();
  if (shard < 0 || static_cast<size_t>(shard) >= cluster.shards.size())
    return false;
  auto& sh = cluster.shards[static_cast<size_t>(shard)];
  if (serves(sh.slots, redis::key_slot(meta_key())))
    return false;
  auto mine = parse_slots(sh.slots);
  for (auto i = sessions.begin(); i != sessions.end();)
    i = in_ranges(mine, redis::key_slot(convs_prefix + i->first)) ? sessions.erase(i)
                                                                  : std::next(i);
  for (auto i = copy_keys.begin(); i != copy_keys.end();) {
    auto slot = core::parse_decimal(i->first.first);
    i = slot && in_ranges(mine, static_cast<int>(*slot)) ? copy_keys.erase(i) : std::next(i);
  }
  sh.replid = next_replid();
  sh.replid2 = std::string(40, '0');
  ++redis_resets;
  sync_copy_views();
  return true;
}

bool fake_world::shard_copy_current(int32_t shard) const {
  lock g{mtx};
  if (shard < 0 || static_cast<size_t>(shard) >= cluster.shards.size())
    return false;
  auto& sh = cluster.shards[static_cast<size_t>(shard)];
  if (sh.slots.empty())
    return true; // it holds nothing
  auto c = copy_keys.find({tag_of(sh), sh.node_id});
  if (c == copy_keys.end() || c->second.replid != sh.replid)
    return false;
  auto imp = imported_at_.find(sh.node_id);
  return imp == imported_at_.end() || c->second.written_at > imp->second;
}

std::string fake_world::copy_verdict(const fake_copy& c, const core::shard_report& sh) {
  // A copy names the history it was written in (redis/cluster_map.hpp).
  if (!c.replid.empty()
      && (c.replid == sh.replid || (c.replid == sh.replid2 && sh.replid2 != std::string(40, '0'))))
    return "valid";
  return "foreign";
}

void fake_world::adopt_fixture_copies() {
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
    copy_keys[{tag_of(sh), sh.node_id}] = std::move(c);
  }
}

core::shard_report fake_world::judged_shard(size_t i) const {
  auto r = cluster.shards[i];
  r.copy_tag = tag_of(r);
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

void fake_world::sync_copy_views() {
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

void fake_world::put_copy(size_t i, const std::map<int32_t, std::pair<int64_t, int32_t>>& positions) {
  auto& sh = cluster.shards[i];
  auto tag = tag_of(sh);
  if (tag.empty())
    return;
  std::pair<std::string, std::string> key{tag, sh.node_id};
  note_copy(key);
  auto& c = copy_keys[key];
  c.replid = sh.replid;
  c.slots = sh.slots;
  c.cluster_epoch = sh.current_epoch;
  c.written_at = writes_ + 1;
  for (auto& [p, at] : positions)
    c.positions[p] = at;
}

void fake_world::maybe_change_identity() {
  if (change_identity_after < 0)
    return;
  if (change_identity_after == 0) {
    if (!changed_topic_id.empty())
      topic_id = changed_topic_id;
    if (!changed_cluster_id.empty())
      cluster_id = changed_cluster_id;
    change_identity_after = -1;
    return;
  }
  --change_identity_after;
}

// -- broker inspector --------------------------------------------------------------

template <class Read>
caf::expected<broker_state> fake_world::timed_identity_read(Read read) {
  lock g{mtx};
  auto n = ++identity_reads;
  events.push_back(fake_event{fake_event::kind::identity_start, -1, n});
  caf::expected<broker_state> answer = read();
  // The read is under way: the world may move on before the answer arrives.
  if (during_identity && !in_during_identity_) {
    auto hook = during_identity;
    in_during_identity_ = true;
    hook();
    in_during_identity_ = false;
  }
  events.push_back(
    fake_event{answer ? fake_event::kind::identity : fake_event::kind::identity_failed, -1, n});
  return answer;
}

caf::expected<broker_state> fake_broker_inspector::inspect(const std::string& topic) {
  lock g{w_->mtx};
  ++w_->calls.inspect;
  w_->maybe_change_identity();
  auto answer = w_->timed_identity_read([&]() -> caf::expected<broker_state> {
    if (w_->broker_down)
      return caf::make_error(ec::kafka_unavailable, "fake: broker down: describe topic " + topic);
    if (w_->inspect_fault.fire())
      return failure(w_->inspect_fault, ec::kafka_unavailable, "describe topic " + topic);
    if (topic != w_->topic) // like kafka/admin.cpp: maybe still propagating, transient
      return caf::make_error(ec::kafka_unavailable,
                             "topic " + topic + " does not exist on the broker");
    broker_state st;
    st.cluster_id = w_->cluster_id;
    st.topic_id = w_->topic_id;
    st.partition_count =
      w_->reported_partition_count >= 0 ? w_->reported_partition_count : w_->partition_count();
    st.retention_ms = w_->retention_ms;
    st.cleanup_policy = w_->cleanup_policy;
    for (int32_t p = 0; p < w_->partition_count(); ++p) {
      st.marks.push_back(w_->marks(p));
      st.true_high.push_back(w_->end(p));
    }
    return st;
  });
  if (answer && w_->on_inspect)
    w_->on_inspect();
  return answer;
}

caf::expected<broker_state> fake_broker_inspector::identity(const std::string& topic) {
  lock g{w_->mtx};
  ++w_->calls.identity;
  w_->maybe_change_identity();
  return w_->timed_identity_read([&]() -> caf::expected<broker_state> {
    if (w_->broker_down)
      return caf::make_error(ec::kafka_unavailable, "fake: broker down: describe cluster");
    if (w_->identity_fault.fire())
      return failure(w_->identity_fault, ec::kafka_unavailable, "describe cluster");
    if (topic != w_->topic) // like kafka/admin.cpp: maybe still propagating, transient
      return caf::make_error(ec::kafka_unavailable,
                             "topic " + topic + " does not exist on the broker");
    broker_state st;
    st.cluster_id = w_->cluster_id;
    st.topic_id = w_->topic_id;
    st.partition_count =
      w_->reported_partition_count >= 0 ? w_->reported_partition_count : w_->partition_count();
    return st;
  });
}

// -- checkpoint store --------------------------------------------------------------

caf::expected<std::string> fake_checkpoint_store::server_version() {
  lock g{w_->mtx};
  ++w_->calls.server_version;
  if (auto err = w_->redis_gate("INFO server", &w_->version_fault))
    return err;
  return w_->server_version;
}

caf::expected<std::string> fake_checkpoint_store::maxmemory_policy() {
  lock g{w_->mtx};
  if (auto err = w_->redis_gate("INFO memory"))
    return err;
  return w_->maxmemory_policy;
}

caf::expected<core::stored_state> fake_checkpoint_store::read(const std::string& topic,
                                                              int32_t) {
  lock g{w_->mtx};
  ++w_->calls.read;
  if (auto err = w_->redis_gate("checkpoint read script", &w_->read_fault))
    return err;
  core::stored_state st;
  auto meta = w_->meta_key();
  if (auto i = w_->hashes.find(meta); i != w_->hashes.end())
    st.meta = i->second;
  else if (w_->strings.count(meta) > 0)
    st.meta = core::hash_fields{}; // wrong type: every field missing
  auto prefix = w_->ns + ":checkpoint:" + topic + ":";
  auto matches = [&](const std::string& k) { return k.compare(0, prefix.size(), prefix) == 0; };
  for (auto& [k, h] : w_->hashes)
    if (matches(k))
      st.checkpoints[k.substr(prefix.size())] = h;
  for (auto& [k, s] : w_->strings)
    if (matches(k))
      st.checkpoints[k.substr(prefix.size())] = core::hash_fields{};
  for (int32_t p = 0; p < w_->partition_count(); ++p)
    if (auto i = w_->hashes.find(w_->ns + ":epoch:" + topic + ":" + std::to_string(p));
        i != w_->hashes.end())
      st.epochs[p] = i->second;
  return st;
}

caf::expected<bool> fake_checkpoint_store::create_meta(const core::identity& id) {
  lock g{w_->mtx};
  ++w_->calls.create_meta;
  if (auto err = w_->redis_gate("create meta script", &w_->create_meta_fault))
    return err;
  auto meta = w_->meta_key();
  if (w_->hashes.count(meta) > 0 || w_->strings.count(meta) > 0)
    return false;
  auto prefix = w_->ns + ":checkpoint:" + id.topic + ":";
  auto matches = [&](const std::string& k) { return k.compare(0, prefix.size(), prefix) == 0; };
  bool any = std::any_of(w_->hashes.begin(), w_->hashes.end(),
                         [&](auto& kv) { return matches(kv.first); })
             || std::any_of(w_->strings.begin(), w_->strings.end(),
                            [&](auto& kv) { return matches(kv.first); });
  if (any)
    return caf::make_error(ec::refused, "meta: field meta: stored \"<absent>\", observed \""
                                          + meta + "\": checkpoints exist but meta is missing");
  fake_world::write_scope write{*w_};
  w_->note_key(meta);
  w_->hashes[meta] = core::encode_meta(id);
  return true;
}

std::string fake_world::owner_key(int32_t p) const { return owner_key(topic, p); }

std::string fake_world::owner_key(const std::string& t, int32_t p) const {
  return ns + ":owner:" + t + ":" + std::to_string(p);
}

core::owner_record fake_world::owner(const std::string& t, int32_t p) const {
  lock g{mtx};
  core::owner_record o;
  auto i = hashes.find(owner_key(t, p));
  if (i == hashes.end())
    return o;
  o.present = true;
  if (auto n = i->second.find("node"); n != i->second.end())
    o.node = n->second;
  if (auto e = i->second.find("epoch"); e != i->second.end())
    o.epoch = std::stoull(e->second);
  if (auto h = i->second.find("heartbeat_ms"); h != i->second.end())
    o.heartbeat_ms = std::stoll(h->second);
  return o;
}

void fake_world::expire_statuses() {
  if (!now_ms)
    return;
  auto now = now_ms();
  for (auto i = expires_at.begin(); i != expires_at.end();) {
    if (i->second <= now) {
      hashes.erase(i->first);
      i = expires_at.erase(i);
    } else {
      ++i;
    }
  }
}

caf::expected<uint64_t> fake_checkpoint_store::claim(const std::string& topic, int32_t partition,
                                                     const std::string& node, int64_t now_ms,
                                                     uint64_t mine) {
  lock g{w_->mtx};
  ++w_->calls.claims;
  if (auto err = w_->redis_gate("ownership claim script"))
    return err;
  // The claim script of redis/stores.cpp: core::decide_claim, atomically.
  auto key = w_->owner_key(topic, partition);
  auto stored = w_->owner(topic, partition);
  auto d = core::decide_claim(stored, node, mine);
  if (d.verdict == core::claim_verdict::fenced)
    return make_fenced(partition, "partition " + std::to_string(partition) + ": " + key
                                    + " names node \"" + stored.node + "\" with epoch "
                                    + std::to_string(stored.epoch) + " (this node \"" + node
                                    + "\" held epoch " + std::to_string(mine)
                                    + "): the partition moved to another node");
  fake_world::write_scope write{*w_};
  w_->note_key(key);
  auto& h = w_->hashes[key];
  if (d.verdict == core::claim_verdict::claim) {
    h["epoch"] = std::to_string(d.epoch);
    h["node"] = node;
  }
  h["heartbeat_ms"] = std::to_string(now_ms);
  return d.epoch;
}

caf::expected<void> fake_checkpoint_store::write_checkpoint(const core::identity& id,
                                                            int32_t partition, int64_t expected,
                                                            int64_t next_offset,
                                                            int32_t leader_epoch,
                                                            uint64_t owner_epoch,
                                                            const std::string& owner_node) {
  lock g{w_->mtx};
  ++w_->calls.write_checkpoint;
  if (auto err = w_->redis_gate("guarded checkpoint write", &w_->write_fault))
    return err;
  if (w_->before_checkpoint_write)
    w_->before_checkpoint_write(partition, next_offset);
  // The fence of the Lua script (core::check_owner): the owner record names
  // this writer's node and epoch (none for epoch 0).
  {
    auto o = w_->owner(id.topic, partition);
    auto text = "partition " + std::to_string(partition) + ": the owner record holds "
                + (o.present ? "node \"" + o.node + "\" epoch " + std::to_string(o.epoch)
                             : std::string{"nothing"})
                + ", this writer is node \"" + owner_node + "\" epoch "
                + std::to_string(owner_epoch);
    switch (core::check_owner(o, owner_node, owner_epoch)) {
      case core::owner_check::ok:
        break;
      case core::owner_check::fenced:
        ++w_->calls.fenced;
        return make_fenced(partition, text + ": another node owns the partition now");
      case core::owner_check::lost:
        ++w_->calls.lost;
        return caf::make_error(ec::checkpoint_conflict,
                               text + ": the ownership claim was lost (rolled back)");
    }
  }
  // The Lua script of redis/stores.cpp, step by step.
  auto meta_key = w_->meta_key();
  auto cp_key = w_->ns + ":checkpoint:" + id.topic + ":" + std::to_string(partition);
  auto type_of = [&](const std::string& k) -> std::string {
    if (w_->hashes.count(k) > 0)
      return "hash";
    if (w_->strings.count(k) > 0)
      return "string";
    return "none";
  };
  auto hget = [&](const std::string& k, const std::string& f) -> std::optional<std::string> {
    auto i = w_->hashes.find(k);
    if (i == w_->hashes.end())
      return std::nullopt;
    auto j = i->second.find(f);
    if (j == i->second.end())
      return std::nullopt;
    return j->second;
  };
  auto shown = [](const std::optional<std::string>& v) {
    return v ? *v : std::string{core::absent};
  };
  const std::vector<std::pair<std::string, std::string>> ident{
    {std::string{core::fields::format_version}, core::to_decimal(core::format_version)},
    {std::string{core::fields::dispatch_topic}, id.topic},
    {std::string{core::fields::partition_count}, core::to_decimal(id.partition_count)},
    {std::string{core::fields::cluster_id}, id.cluster_id},
    {std::string{core::fields::topic_id}, id.topic_id},
  };
  std::string res = "ok";
  [&] {
    if (auto t = type_of(meta_key); t != "hash") {
      res = "meta|type|" + t;
      return;
    }
    for (auto& [f, v] : ident)
      if (auto s = hget(meta_key, f); s != v) {
        res = "meta|" + f + "|" + shown(s);
        return;
      }
    auto t = type_of(cp_key);
    if (expected < 0) {
      if (t != "none")
        res = "checkpoint|next_offset|"
              + shown(t == "hash" ? hget(cp_key, "next_offset") : std::nullopt);
      return;
    }
    if (t != "hash") {
      res = "checkpoint|next_offset|<absent>";
      return;
    }
    for (auto& [f, v] : ident)
      if (auto s = hget(cp_key, f); s != v) {
        res = "checkpoint|" + f + "|" + shown(s);
        return;
      }
    if (auto s = hget(cp_key, "partition"); s != core::to_decimal(partition)) {
      res = "checkpoint|partition|" + shown(s);
      return;
    }
    if (auto s = hget(cp_key, "next_offset"); s != core::to_decimal(expected)) {
      res = "checkpoint|next_offset|" + shown(s);
      return;
    }
  }();
  if (res != "ok") {
    ++w_->calls.checkpoint_conflicts;
    auto a = res.find('|'), b = res.rfind('|');
    std::string field = a != std::string::npos && b > a ? res.substr(a + 1, b - a - 1) : res;
    std::string stored = b != std::string::npos ? res.substr(b + 1) : "";
    std::string mine = field == "next_offset"
                         ? (expected < 0 ? std::string{"<absent>"} : core::to_decimal(expected))
                         : "this writer's identity";
    return caf::make_error(ec::checkpoint_conflict,
                           "partition " + std::to_string(partition) + ": field " + field + " of "
                             + res.substr(0, a) + ": stored \"" + stored + "\", expected \""
                             + mine + "\": the checkpoint changed behind this writer");
  }
  // HSET: sets these fields, keeps any others.
  {
    fake_world::write_scope write{*w_};
    auto epoch_key = w_->ns + ":epoch:" + id.topic + ":" + std::to_string(partition);
    w_->note_key(cp_key);
    w_->note_key(epoch_key);
    auto& h = w_->hashes[cp_key];
    for (auto& [f, v] : ident)
      h[f] = v;
    h["partition"] = core::to_decimal(partition);
    h["next_offset"] = core::to_decimal(next_offset);
    auto& e = w_->hashes[epoch_key];
    e["next_offset"] = core::to_decimal(next_offset);
    e["leader_epoch"] = leader_epoch < 0 ? std::string{"-1"} : core::to_decimal(leader_epoch);
  }
  w_->events.push_back(fake_event{fake_event::kind::checkpoint, partition, next_offset});
  if (w_->on_checkpoint_written)
    w_->on_checkpoint_written(partition, next_offset);
  if (w_->write_lost_reply_fault.fire())
    return failure(w_->write_lost_reply_fault, ec::redis_unavailable,
                   "reply to the guarded checkpoint write lost");
  return {};
}

// -- session store -----------------------------------------------------------------

caf::error fake_session_store::connection(const std::string& what) {
  if (w_->redis_down) {
    unconfirmed_.clear(); // the replies of the sends not read yet are lost
    auto err = w_->redis_refused(what);
    resets_seen_ = w_->redis_resets;
    return err;
  }
  if (resets_seen_ != w_->redis_resets) {
    // A failover or an outage since the last call: the connection was
    // reset, the commands whose replies were not read are lost.
    unconfirmed_.clear();
    resets_seen_ = w_->redis_resets;
    return caf::make_error(ec::redis_unavailable, "fake redis: connection reset: " + what);
  }
  return caf::none;
}

caf::expected<void> fake_session_store::apply(const std::vector<session_update>& updates) {
  lock g{w_->mtx};
  ++w_->calls.apply;
  if (auto err = connection("ZADD pipeline"))
    return err;
  if (w_->apply_fault.fire())
    return failure(w_->apply_fault, ec::redis_unavailable, "ZADD pipeline");
  size_t limit = updates.size();
  caf::error err;
  if (w_->partial_apply_fault.fire()) {
    limit = std::min(limit, w_->partial_apply_writes);
    err = failure(w_->partial_apply_fault, ec::redis_unavailable,
                  "connection lost after " + std::to_string(limit) + " ZADD replies");
  }
  auto ups = copy_updates(updates);
  if (w_->on_apply)
    w_->on_apply(ups);
  for (size_t i = 0; i < limit; ++i)
    w_->calls.zadd_members += updates[i].count;
  w_->zadd(ups, limit);
  if (err)
    return err;
  return {};
}

caf::expected<void> fake_session_store::enqueue(const std::vector<session_update>& updates,
                                                std::vector<applied_update>& held) {
  // What apply() does, except that the ZADDs wait for their replies.
  ++w_->calls.apply;
  if (w_->apply_fault.fire())
    return failure(w_->apply_fault, ec::redis_unavailable, "ZADD pipeline");
  auto ups = copy_updates(updates);
  if (w_->on_apply)
    w_->on_apply(ups);
  if (w_->partial_apply_fault.fire()) {
    // The connection broke after Redis executed the sends before this one
    // (but for those still waiting for a redirection's resend) and the
    // first updates of this one: those take effect, the rest not.
    auto limit = std::min(ups.size(), w_->partial_apply_writes);
    for (auto& u : unconfirmed_)
      if (u.not_yet == 0)
        w_->zadd(u.held);
    unconfirmed_.clear();
    for (size_t i = 0; i < limit; ++i)
      w_->calls.zadd_members += ups[i].members.size();
    w_->zadd(ups, limit);
    return failure(w_->partial_apply_fault, ec::redis_unavailable,
                   "connection lost after " + std::to_string(limit) + " ZADD replies");
  }
  for (auto& u : ups)
    w_->calls.zadd_members += u.members.size();
  held = std::move(ups);
  return {};
}

// Pipelined like Redis: the commands take effect when sent (lazy_pipeline:
// when their replies are read), their replies are read (and may be lost)
// later, oldest first.
caf::expected<void> fake_session_store::send(const std::vector<session_update>& updates) {
  lock g{w_->mtx};
  if (auto err = connection("ZADD pipeline")) {
    ++w_->calls.apply;
    return err;
  }
  unconfirmed u{updates.size(), false, {}, 0};
  if (!updates.empty() && w_->moved_fault.fire()) {
    // The slot moved: nothing is applied until the resend (at confirm).
    u.held = copy_updates(updates);
    u.not_yet = w_->moved_not_yet;
  } else if (!updates.empty() && w_->ask_fault.fire()) {
    // The slot is migrating: ASKING, then the resend, one round trip later.
    ++w_->calls.asks;
    u.held = copy_updates(updates);
    u.not_yet = 1;
  } else if (!updates.empty() && w_->reply_error_fault.fire()) {
    // The first ZADD gets an error reply (e.g. WRONGTYPE, OOM) and does
    // nothing; the rest apply, and the connection stays up.
    u.error_reply = true;
    std::vector<session_update> rest(updates.begin() + 1, updates.end());
    if (auto ok = w_->lazy_pipeline ? enqueue(rest, u.held) : apply(rest); !ok)
      return ok;
  } else if (auto ok = w_->lazy_pipeline ? enqueue(updates, u.held) : apply(updates); !ok) {
    return ok;
  }
  unconfirmed_.push_back(u);
  w_->calls.max_unconfirmed = std::max<uint64_t>(w_->calls.max_unconfirmed, unconfirmed_.size());
  return {};
}

caf::expected<bool> fake_session_store::confirm(size_t n, std::chrono::milliseconds wait) {
  lock g{w_->mtx};
  ++w_->calls.confirm;
  if (auto err = connection("reading pipelined ZADD replies"))
    return err;
  // Replies come in send order: the writer must confirm whole sends, oldest first.
  if (unconfirmed_.empty() || unconfirmed_.front().zadds != n)
    return caf::make_error(ec::unspecified,
                           "confirm(" + std::to_string(n) + ") does not match the oldest send ("
                             + (unconfirmed_.empty() ? std::string{"none"}
                                                     : std::to_string(unconfirmed_.front().zadds))
                             + " ZADDs)");
  if (w_->redis_frozen || w_->confirm_not_yet > 0) {
    if (w_->confirm_not_yet > 0)
      --w_->confirm_not_yet;
    if (wait.count() < 0 && w_->redis_frozen) // a blocking read times out
      return frozen("reading pipelined ZADD replies");
    ++w_->calls.not_yet;
    return false;
  }
  if (unconfirmed_.front().not_yet > 0) {
    // Waiting for the replies of the commands resent after the MOVED.
    --unconfirmed_.front().not_yet;
    ++w_->calls.not_yet;
    return false;
  }
  auto u = std::move(unconfirmed_.front());
  unconfirmed_.pop_front();
  w_->zadd(u.held); // one write: the send's ZADDs, executed
  if (w_->confirm_fault.fire())
    return failure(w_->confirm_fault, ec::redis_unavailable, "reading pipelined ZADD replies");
  if (u.error_reply)
    return caf::make_error(ec::redis_reply, "fake redis: ZADD: error reply");
  return true;
}

std::vector<applied_update> copy_updates(const std::vector<session_update>& ups) {
  std::vector<applied_update> out;
  for (auto& u : ups) {
    applied_update a{std::string{u.user}, {}};
    for (size_t j = 0; j < u.count; ++j)
      a.members.emplace_back(std::string{u.members[j].conversation}, u.members[j].created_at);
    out.push_back(std::move(a));
  }
  return out;
}

caf::expected<session_list> fake_session_store::sessions(const std::string& user, size_t limit) {
  lock g{w_->mtx};
  ++w_->calls.sessions;
  if (auto err = connection("ZREVRANGE"))
    return err;
  if (w_->sessions_fault.fire())
    return failure(w_->sessions_fault, ec::redis_unavailable, "ZREVRANGE");
  if (w_->redis_frozen)
    return frozen("ZREVRANGE");
  session_list out;
  auto u = w_->sessions.find(user);
  if (u == w_->sessions.end() || limit == 0)
    return out;
  for (auto& [conv, score] : u->second)
    out.push_back(session_entry{conv, score});
  // ZREVRANGE: score descending, equal scores by member descending.
  std::sort(out.begin(), out.end(), [](const session_entry& a, const session_entry& b) {
    if (a.last_active != b.last_active)
      return a.last_active > b.last_active;
    return a.conversation_id > b.conversation_id;
  });
  if (out.size() > limit)
    out.resize(limit);
  return out;
}

// -- dispatch log ------------------------------------------------------------------

fake_partition_reader::fake_partition_reader(std::shared_ptr<fake_world> w, int32_t partition,
                                             int64_t start, int32_t start_epoch,
                                             int64_t incarnation)
  : w_(std::move(w)), partition_(partition), pos_(start), epoch_(start_epoch) {
  incarnation_ = incarnation >= 0 ? static_cast<uint64_t>(incarnation) : w_->topic_incarnation;
}

caf::expected<void> fake_partition_reader::poll(size_t max, std::vector<log_record>& out,
                                                int64_t& passed) {
  lock g{w_->mtx};
  ++w_->calls.poll;
  auto where = "topic " + w_->topic + " partition " + std::to_string(partition_);
  if ((w_->poll_fault_partition < 0 || w_->poll_fault_partition == partition_)
      && w_->poll_fault.fire())
    return failure(w_->poll_fault, ec::kafka_read, where);
  if (incarnation_ != w_->topic_incarnation)
    return caf::make_error(ec::kafka_read, "fake: " + where
                                             + ": the topic was recreated (unknown topic id)");
  if (w_->broker_down)
    return {}; // librdkafka retries in the background: nothing arrives
  auto& fp = w_->part(partition_);
  // KIP-320, as librdkafka validates a position after a leader change: the
  // log's end offset for the position's epoch lies below the position.
  {
    std::string why;
    if (pos_ > fp.end()) {
      why = "position " + std::to_string(pos_) + " is past the log end "
            + std::to_string(fp.end()) + " of leader epoch " + std::to_string(fp.leader_epoch);
    } else if (epoch_ >= 0 && pos_ > 0) {
      if (auto end = fp.end_offset_for_epoch(epoch_); end < pos_)
        why = "offset " + std::to_string(pos_) + " of leader epoch " + std::to_string(epoch_)
              + " lies past that epoch's end offset " + std::to_string(end)
              + " in the log of leader epoch " + std::to_string(fp.leader_epoch);
    }
    if (!why.empty())
      return caf::make_error(
        ec::refused, "partition " + std::to_string(partition_)
                       + ": field leader_epoch: the log was truncated below the position (fake: "
                       + where + ": " + why
                       + ", unclean leader election): records already projected are gone and "
                         "their offsets may be reused; rebuild under a new namespace "
                         "(OPERATIONS.md, \"A truncated log\")");
  }
  if (pos_ < fp.low)
    return caf::make_error(ec::kafka_read, "fake: topic " + w_->topic + " partition "
                                             + std::to_string(partition_) + " offset "
                                             + std::to_string(pos_)
                                             + ": offset out of range (deleted by retention)");
  auto stable = std::min(fp.lso(), w_->visible_end(partition_));
  size_t delivered = 0;
  while (pos_ < stable && delivered < max) {
    auto& e = fp.log[static_cast<size_t>(pos_)];
    if (e.kind == entry_kind::data) {
      out.push_back(log_record{e.offset, e.value, 1700000000000 + e.offset, e.epoch});
      ++delivered;
    }
    epoch_ = e.epoch;
    ++pos_;
  }
  // Partition EOF: once per position reached, if the batch had room for it.
  if (pos_ >= stable && delivered < max && eof_reported_ != pos_) {
    eof_reported_ = pos_;
    if (pos_ > passed)
      passed = pos_;
  }
  w_->events.push_back(fake_event{fake_event::kind::fetched, partition_, pos_});
  return {};
}

int32_t fake_partition_reader::position_epoch(int64_t offset) {
  lock g{w_->mtx};
  auto& fp = w_->part(partition_);
  if (offset != pos_ || pos_ <= 0 || pos_ > fp.end())
    return -1;
  return fp.log[static_cast<size_t>(pos_ - 1)].epoch;
}

void fake_partition_reader::on_data(std::function<void()> wake) {
  lock g{w_->mtx};
  wake_ = std::move(wake);
}

void fake_partition_reader::fire() {
  if (wake_) {
    ++w_->calls.wakes;
    wake_();
  }
}

caf::error fake_dispatch_log::check_start(int32_t p, int64_t start) const {
  if (p < 0 || p >= w_->partition_count())
    return caf::make_error(ec::kafka_unavailable,
                           "fake: topic " + w_->topic + " has no partition " + std::to_string(p));
  // Like rd_kafka_query_watermark_offsets under read_committed: the LSO as high.
  auto low = w_->part(p).low, high = w_->part(p).lso();
  if (start < low || start > high)
    return caf::make_error(ec::refused, "partition " + std::to_string(p)
                                          + ": field start: stored \"" + std::to_string(start)
                                          + "\", observed \"low=" + std::to_string(low)
                                          + ",high=" + std::to_string(high)
                                          + "\": start outside the retained range");
  return caf::none;
}

caf::expected<void> fake_dispatch_log::start(const std::map<int32_t, int64_t>& starts,
                                             const std::map<int32_t, int32_t>& epochs) {
  lock g{w_->mtx};
  ++w_->calls.start;
  return assign(starts, epochs, true);
}

caf::expected<void> fake_dispatch_log::add(const std::map<int32_t, int64_t>& starts,
                                           const std::map<int32_t, int32_t>& epochs) {
  lock g{w_->mtx};
  ++w_->calls.adds;
  return assign(starts, epochs, false);
}

caf::expected<void> fake_dispatch_log::assign(const std::map<int32_t, int64_t>& starts,
                                              const std::map<int32_t, int32_t>& epochs,
                                              bool replace) {
  if (w_->broker_down)
    return caf::make_error(ec::kafka_unavailable, "fake: broker down: query watermarks");
  if (w_->start_fault.fire())
    return failure(w_->start_fault, ec::kafka_unavailable, "query watermarks");
  for (auto& [p, start] : starts) {
    if (!replace && starts_.count(p) > 0)
      // As the real consumer answers: a caller's bug, not a broker's state.
      return caf::make_error(ec::invalid_config, "fake: partition " + std::to_string(p)
                                                   + " is already assigned");
    if (auto err = check_start(p, start))
      return err;
  }
  if (replace) {
    starts_.clear();
    epochs_.clear();
    incarnations_.clear();
    readers_.clear();
  }
  for (auto& [p, start] : starts) {
    starts_[p] = start;
    readers_.erase(p);
    epochs_.erase(p);
    incarnations_[p] = w_->topic_incarnation;
    if (auto e = epochs.find(p); e != epochs.end())
      epochs_[p] = e->second;
    // Per partition: several nodes may share the world, and another node's
    // start says nothing about this node's partitions.
    w_->events.push_back(fake_event{fake_event::kind::assigned, p, start});
  }
  return {};
}

caf::expected<void> fake_dispatch_log::remove(const std::vector<int32_t>& partitions) {
  lock g{w_->mtx};
  ++w_->calls.removes;
  for (auto p : partitions) {
    starts_.erase(p);
    epochs_.erase(p);
    incarnations_.erase(p);
    readers_.erase(p);
    last_end_.erase(p);
  }
  return {};
}

std::shared_ptr<partition_reader> fake_dispatch_log::reader(int32_t partition) {
  lock g{w_->mtx};
  ++w_->calls.reader;
  auto s = starts_.find(partition);
  if (s == starts_.end())
    return nullptr;
  auto& r = readers_[partition];
  if (!r) {
    auto e = epochs_.find(partition);
    auto inc = incarnations_.find(partition);
    r = std::make_shared<fake_partition_reader>(
      w_, partition, s->second, e == epochs_.end() ? -1 : e->second,
      inc == incarnations_.end() ? -1 : static_cast<int64_t>(inc->second));
    w_->readers.push_back(r);
  }
  return r;
}

int64_t fake_dispatch_log::log_end(int32_t partition) {
  lock g{w_->mtx};
  if (starts_.count(partition) == 0)
    return -1;
  if (partition >= w_->partition_count())
    return -1;
  // What the fetcher last learnt: nothing new while the broker is down.
  if (w_->broker_down) {
    auto i = last_end_.find(partition);
    return i == last_end_.end() ? -1 : i->second;
  }
  return last_end_[partition] = w_->visible_end(partition);
}

// -- factory -----------------------------------------------------------------------

caf::expected<std::unique_ptr<broker_inspector>> fake_port_factory::make_inspector() {
  lock g{w_->mtx};
  ++w_->calls.make_inspector;
  if (w_->make_inspector_fault.fire())
    return failure(w_->make_inspector_fault, ec::kafka_unavailable, "admin client");
  return std::unique_ptr<broker_inspector>{new fake_broker_inspector(w_)};
}

caf::expected<std::unique_ptr<checkpoint_store>> fake_port_factory::make_checkpoint_store() {
  lock g{w_->mtx};
  ++w_->calls.make_checkpoint_store;
  if (auto err = w_->redis_gate("connect", &w_->make_checkpoint_store_fault, false))
    return err;
  return std::unique_ptr<checkpoint_store>{new fake_checkpoint_store(w_)};
}

caf::expected<std::unique_ptr<session_store>> fake_port_factory::make_session_store() {
  lock g{w_->mtx};
  ++w_->calls.make_session_store;
  if (auto err = w_->redis_gate("connect", &w_->make_session_store_fault, false))
    return err;
  return std::unique_ptr<session_store>{new fake_session_store(w_)};
}

caf::expected<std::shared_ptr<dispatch_log>> fake_port_factory::make_dispatch_log() {
  lock g{w_->mtx};
  ++w_->calls.make_dispatch_log;
  if (w_->make_dispatch_log_fault.fire())
    return failure(w_->make_dispatch_log_fault, ec::kafka_unavailable, "consumer");
  return std::shared_ptr<dispatch_log>{std::make_shared<fake_dispatch_log>(w_)};
}

caf::expected<std::unique_ptr<cluster_store>> fake_port_factory::make_cluster_store() {
  lock g{w_->mtx};
  if (auto err = w_->redis_gate("connect", nullptr, false))
    return err;
  return std::unique_ptr<cluster_store>{std::make_unique<fake_cluster_store>(w_)};
}

caf::expected<std::vector<owned_status>>
fake_cluster_store::publish(const std::string& topic, const std::string& node,
                            const std::vector<owned_status>& statuses,
                            std::chrono::milliseconds ttl, int64_t now_ms) {
  lock g{w_->mtx};
  ++w_->calls.publishes;
  if (auto err = w_->redis_gate("namespace status publish script"))
    return err;
  if (w_->before_publish)
    w_->before_publish(statuses);
  w_->expire_statuses();
  fake_world::write_scope write{*w_};
  std::vector<owned_status> fenced;
  for (auto& s : statuses) {
    auto suffix = topic + ":" + std::to_string(s.partition);
    if (auto c = core::check_owner(w_->owner(topic, s.partition), node, s.epoch); c != core::owner_check::ok) {
      auto f = s;
      f.state = c == core::owner_check::fenced ? "fenced" : "lost";
      fenced.push_back(std::move(f));
      continue;
    }
    w_->note_key(w_->ns + ":owner:" + suffix);
    w_->note_key(w_->ns + ":status:" + suffix);
    auto& o = w_->hashes[w_->ns + ":owner:" + suffix];
    o["heartbeat_ms"] = std::to_string(now_ms);
    if (w_->now_ms)
      w_->expires_at[w_->ns + ":status:" + suffix] = w_->now_ms() + ttl.count();
    w_->hashes[w_->ns + ":status:" + suffix] = core::hash_fields{
      {"node", node},
      {"epoch", std::to_string(s.epoch)},
      {"state", s.state},
      {"h0", std::to_string(s.h0)},
      {"next_offset", std::to_string(s.next_offset)},
      {"caught_up", s.caught_up ? "1" : "0"},
      {"heartbeat_ms", std::to_string(now_ms)}};
  }
  return fenced;
}

caf::expected<void> fake_cluster_store::release(const std::string& topic, const std::string& node,
                                                const std::map<int32_t, uint64_t>& partitions) {
  lock g{w_->mtx};
  if (auto err = w_->redis_gate("namespace status release script"))
    return err;
  w_->expire_statuses();
  fake_world::write_scope write{*w_};
  for (auto& [p, e] : partitions) {
    auto key = w_->ns + ":status:" + topic + ":" + std::to_string(p);
    auto i = w_->hashes.find(key);
    if (i != w_->hashes.end() && i->second["node"] == node
        && i->second["epoch"] == std::to_string(e)) {
      w_->note_key(key);
      w_->hashes.erase(key);
    }
  }
  return {};
}

caf::expected<std::vector<cluster_partition>>
fake_cluster_store::view(const std::string& topic, int32_t partition_count) {
  lock g{w_->mtx};
  if (auto err = w_->redis_gate("namespace ownership view script"))
    return err;
  w_->expire_statuses();
  std::vector<cluster_partition> out;
  auto num = [](const core::hash_fields& h, const char* f, int64_t d) {
    auto i = h.find(f);
    return i == h.end() ? d : std::stoll(i->second);
  };
  for (int32_t p = 0; p < partition_count; ++p) {
    auto suffix = topic + ":" + std::to_string(p);
    auto o = w_->owner(topic, p);
    core::status_record st;
    if (auto i = w_->hashes.find(w_->ns + ":status:" + suffix); i != w_->hashes.end()) {
      st.present = true;
      st.node = i->second["node"];
      st.epoch = static_cast<uint64_t>(num(i->second, "epoch", 0));
      st.state = i->second["state"];
      st.h0 = num(i->second, "h0", -1);
      st.next_offset = num(i->second, "next_offset", -1);
      st.caught_up = i->second["caught_up"] == "1";
    }
    auto v = core::judge(o, st);
    out.push_back(cluster_partition{p, o.node, o.epoch, o.heartbeat_ms, v.live, st.state, st.h0, st.next_offset,
                                    st.caught_up, v.ready, v.why});
  }
  return out;
}

std::shared_ptr<fake_world> make_world(int32_t partition_count) {
  return std::make_shared<fake_world>(partition_count);
}

std::shared_ptr<fake_port_factory> make_fake_ports(std::shared_ptr<fake_world> w) {
  return std::make_shared<fake_port_factory>(std::move(w));
}

} // namespace qsp::test

namespace qsp::test {

void fake_world::record_copy(const std::map<int32_t, std::pair<int64_t, int32_t>>& positions,
                             bool seed, const copy_plan* per_node) {
  copy_writes.emplace_back();
  auto& w = copy_writes.back();
  w.positions = positions;
  w.seed = seed;
  // Every entry below a copy's positions whose session set lives on that
  // copy's shard must be in Redis already.
  auto check = [&](const std::map<int32_t, std::pair<int64_t, int32_t>>& at_of, int32_t shard) {
    for (auto& [p, at] : at_of) {
      if (p < 0 || p >= partition_count())
        continue;
      for (auto& e : part(p).log) {
        if (e.offset >= at.first || e.offset < part(p).low || e.kind != entry_kind::data)
          continue;
        core::dispatch d;
        std::string why;
        if (!core::json_decoder{}.decode(e.value, d, why))
          continue;
        for (auto& u : d.recipients) {
          if (shard >= 0 && shard_of(convs_prefix + u) != shard)
            continue;
          auto sc = score(u, d.conversation_id);
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

caf::expected<core::redis_cluster_state> fake_checkpoint_store::cluster_state(const std::string&) {
  lock g{w_->mtx};
  if (auto err = w_->redis_gate("CLUSTER SLOTS"))
    return err;
  w_->adopt_fixture_copies();
  auto st = w_->cluster;
  // A primary without slots is in no slot map (CLUSTER SLOTS/SHARDS list
  // only primaries serving slots), as the real router sees it.
  st.shards.clear();
  for (size_t i = 0; i < w_->cluster.shards.size(); ++i)
    if (!w_->cluster.shards[i].slots.empty())
      st.shards.push_back(w_->judged_shard(i));
  if (!st.shards.empty()) {
    auto m = w_->hashes.find(w_->meta_key());
    st.copies_marked = m != w_->hashes.end() && m->second.count(core::copies_field) != 0;
  }
  return st;
}

caf::expected<void> fake_checkpoint_store::refresh_copies(const core::identity&,
                                                          const core::copy_refresh& plan) {
  lock g{w_->mtx};
  if (auto err = w_->redis_gate("writing the copies"))
    return err;
  if (w_->cluster.shards.empty())
    return {};
  // As refresh_cluster_copies: only the cluster the start judged.
  for (auto& sh : w_->cluster.shards) {
    if (sh.slots.empty())
      continue;
    auto j = plan.primaries.find(sh.node_id);
    if (j == plan.primaries.end() || j->second.replid != sh.replid
        || j->second.copy_tag != tag_of(sh))
      return caf::make_error(ec::redis_unavailable,
                             "fake redis cluster: primary " + sh.address + " (node "
                               + sh.node_id.substr(sh.node_id.size() - 4) + ", tag " + tag_of(sh)
                               + ") changed since this start judged the copies ("
                               + (j == plan.primaries.end()
                                    ? std::string{"not judged"}
                                    : "judged with tag " + j->second.copy_tag)
                               + "): judging again");
  }
  {
    fake_world::write_scope write{*w_};
    w_->record_copy({}, plan.mark, &plan.positions);
  }
  // WAIT: every replica of every shard acknowledged the copies, and with
  // them everything written before (replication is ordered): no failover
  // can lose any of it any more.  (The simulated replicas are always up.)
  w_->wait_all_replicas();
  for (auto& [node, j] : plan.primaries)
    w_->cluster.known_primaries[node].insert(j.replid);
  if (plan.mark) {
    fake_world::write_scope write{*w_};
    w_->note_key(w_->meta_key());
    w_->hashes[w_->meta_key()][core::copies_field] = "1";
  }
  return {};
}

caf::expected<void> fake_session_store::write_copies(
  const core::identity&, const std::map<int32_t, std::pair<int64_t, int32_t>>& positions) {
  lock g{w_->mtx};
  if (auto err = connection("writing the copies"))
    return err;
  if (w_->cluster.shards.empty())
    return {};
  // As redis_cluster_session_store: every primary must be one the start
  // judged, in the same history, under the same copy tag.
  w_->adopt_fixture_copies();
  auto refuse = [&](const core::shard_report& sh) {
    return caf::make_error(ec::redis_unavailable,
                           "fake redis cluster: primary " + sh.address + " (node "
                             + sh.node_id.substr(0, 8)
                             + ") is not one this generation's start judged in its history "
                               "under its copy tag: no copy is written to it");
  };
  if (!expected_.empty() && mutant::active() == mutant::id::copies_one_failover_back) {
    // The planted bug: the check before issue 32.
    for (auto& sh : w_->cluster.shards)
      for (auto& [node, judged] : expected_)
        if ((sh.node_id == node && sh.replid != judged.replid)
            || (sh.node_id != node && sh.replid2 == judged.replid))
          return refuse(sh);
  } else if (!expected_.empty()) {
    for (auto& sh : w_->cluster.shards) {
      if (sh.slots.empty())
        continue;
      auto e = expected_.find(sh.node_id);
      if (e == expected_.end() || e->second.replid != sh.replid
          || (!e->second.copy_tag.empty() && e->second.copy_tag != tag_of(sh)))
        return refuse(sh);
    }
  } else {
    for (size_t i = 0; i < w_->cluster.shards.size() && i < replids_.size(); ++i)
      if (w_->cluster.shards[i].replid != replids_[i])
        return refuse(w_->cluster.shards[i]);
  }
  fake_world::write_scope write{*w_};
  w_->record_copy(positions, false);
  return {};
}

} // namespace qsp::test
