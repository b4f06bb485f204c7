#include "testkit/world/redis.hpp"

#include <algorithm>

#include "testkit/world/world.hpp"

namespace qsp::test {

using sim::failure;
using sim::frozen;
using sim::lock;

std::optional<int64_t> simulated_redis::score(const std::string& user, const std::string& conv) const {
  lock g{mtx};
  auto u = sessions.find(user);
  if (u == sessions.end())
    return std::nullopt;
  auto c = u->second.find(conv);
  if (c == u->second.end())
    return std::nullopt;
  return c->second;
}

// -- faults, the undo journal ------------------------------------------------------

caf::error simulated_redis::redis_gate(const std::string& what, fault* f, bool frozen_too) {
  if (redis_down)
    return redis_refused(what);
  if (f != nullptr && f->fire())
    return failure(*f, ec::redis_unavailable, what);
  if (frozen_too && redis_frozen)
    return frozen(what);
  return caf::none;
}

caf::error simulated_redis::redis_refused(const std::string& what) {
  ++redis_resets;
  return caf::make_error(ec::redis_unavailable, "fake redis: connection refused: " + what);
}

simulated_redis::write_scope::write_scope(simulated_redis& world) : w(world) {
  if (w.write_depth_++ == 0) {
    w.open_ = redis_write{};
    w.noted_keys_.clear();
    w.noted_members_.clear();
    w.noted_copies_.clear();
  }
}

simulated_redis::write_scope::~write_scope() {
  if (--w.write_depth_ > 0 || w.open_.undo.empty())
    return;
  w.journal_.push_back(std::move(w.open_));
  w.open_ = redis_write{};
  ++w.writes_;
  while (w.journal_.size() > 100000)
    w.journal_.pop_front();
}

void simulated_redis::note_key(const std::string& key) {
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

void simulated_redis::note_member(const std::string& user, const std::string& conv) {
  if (write_depth_ == 0 || !noted_members_.insert({user, conv}).second)
    return;
  redis_undo u;
  u.what = redis_undo::kind::member;
  u.key = user;
  u.member = conv;
  u.number = score(user, conv);
  open_.undo.push_back(std::move(u));
}

void simulated_redis::undo(const redis_undo& u) {
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
    case redis_undo::kind::import:
      world().undo_in_cluster(u);
      break;
  }
}

void simulated_redis::zadd(const std::vector<applied_update>& ups, size_t limit) {
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

size_t simulated_redis::redis_writes() const {
  lock g{mtx};
  return writes_;
}

size_t simulated_redis::redis_rollback(size_t n) {
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

bool simulated_redis::evict(const std::string& key) {
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

std::vector<std::string> simulated_redis::keys() const {
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

fake_world& simulated_redis::world() { return static_cast<fake_world&>(*this); }

} // namespace qsp::test
