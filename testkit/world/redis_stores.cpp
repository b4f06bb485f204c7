#include "testkit/world/redis_stores.hpp"

#include <algorithm>

#include "core/mutants.hpp"
#include "testkit/world/world.hpp"

namespace qsp::test {

using sim::copy_tag_of;
using sim::failure;
using sim::frozen;
using sim::lock;

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

fake_session_store::fake_session_store(std::shared_ptr<fake_world> w)
  : w_(std::move(w)), resets_seen_(w_->redis_resets) {
  lock g{w_->mtx};
  for (auto& sh : w_->cluster.shards)
    replids_.push_back(sh.replid);
  learn_primaries();
}

void fake_session_store::learn_primaries() {
  learned_.clear();
  for (auto& sh : w_->cluster.shards)
    learned_[sh.node_id] = simulated_redis_cluster::read_stamp{sh.replid, sh.current_epoch};
}

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

caf::expected<void> fake_session_store::probe() {
  lock g{w_->mtx};
  if (auto err = connection("ZREVRANGE (idle check)"))
    return err;
  if (w_->redis_frozen)
    return frozen("ZREVRANGE (idle check)");
  return {};
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

// -- the Redis ports' cluster parts -------------------------------------------------

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
  if (w_->registry_in_shard) {
    // As redis_checkpoint_store::cluster_state: HGETALL of the registry key,
    // node id -> "replid replid ...", whatever the namespace's shard holds.
    st.known_primaries.clear();
    st.known_slots.clear();
    st.known_replicas.clear();
    if (auto r = w_->hashes.find(w_->registry_key()); r != w_->hashes.end())
      for (auto& [field, text] : r->second)
        core::read_registry_field(field, text, st);
  }
  // As redis::find_gone_copies: a primary recorded with slots that serves
  // none now; its copy key (the tag of its lowest recorded slot, here that
  // slot's decimal) exists iff a migration or a failover carried it along
  // (copy keys live in their slot: drop_keys_in removes a lost shard's).
  st.gone_copy_found.clear();
  for (auto& [node, slots] : core::gone_primaries(st)) {
    core::shard_report recorded;
    recorded.slots = slots;
    auto tag = copy_tag_of(recorded);
    st.gone_copy_found[node] = !tag.empty() && w_->copy_keys.count({tag, node}) != 0;
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
        || j->second.copy_tag != copy_tag_of(sh))
      return caf::make_error(ec::redis_unavailable,
                             "fake redis cluster: primary " + sh.address + " (node "
                               + sh.node_id.substr(sh.node_id.size() - 4) + ", tag " + copy_tag_of(sh)
                               + ") changed since this start judged the copies ("
                               + (j == plan.primaries.end()
                                    ? std::string{"not judged"}
                                    : "judged with tag " + j->second.copy_tag)
                               + "): judging again");
  }
  {
    simulated_redis::write_scope write{*w_};
    w_->record_copy({}, plan.mark, &plan.positions);
  }
  // WAIT: every replica acknowledged the copies, and with them everything
  // written before (replication is ordered).  As the product does
  // (refresh_cluster_copies) only on the primaries whose copy is their only
  // proof (seeded, or joined): the others' replicas may still miss it.
  // (The simulated replicas are always up.)
  if (w_->waits_as_the_product)
    w_->wait_replicas(plan.must_wait);
  else
    w_->wait_all_replicas();
  bool registry_changed = false;
  if (w_->registry_in_shard) {
    // As redis_checkpoint_store::refresh_copies: one HSET of the registry
    // key in the namespace's shard, after the copies' WAIT, followed by a
    // WAIT of its own when it changed (below).
    simulated_redis::write_scope write{*w_};
    auto key = w_->registry_key();
    w_->note_key(key);
    auto& h = w_->hashes[key];
    std::map<std::string, std::string> had{h.begin(), h.end()};
    auto update = core::registry_update(had, plan.primaries);
    for (auto& [field, value] : update)
      h[field] = value;
    registry_changed = !update.empty();
  } else {
    w_->cluster.known_slots.clear();
    w_->cluster.known_replicas.clear();
    for (auto& [node, j] : plan.primaries) {
      w_->cluster.known_primaries[node].insert(j.replid);
      w_->cluster.known_slots[node] = j.slots;
      w_->cluster.known_replicas[node].insert(j.replicas.begin(), j.replicas.end());
    }
  }
  if (plan.mark) {
    simulated_redis::write_scope write{*w_};
    w_->note_key(w_->meta_key());
    w_->hashes[w_->meta_key()][core::copies_field] = "1";
  }
  // Rule 7 (as the product): a WAIT on the namespace's shard when the
  // registry or the mark changed.
  if (w_->registry_in_shard && (registry_changed || plan.mark)) {
    auto home = w_->shard_of(w_->registry_key());
    if (home >= 0)
      w_->wait_replicas({w_->cluster.shards[static_cast<size_t>(home)].node_id});
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
  // As the product's guarded copy write (issue 45, rule 3): a running node
  // writes a copy only where it still stands with the history the start
  // judged; it never re-creates one (the mutant copies_plain_hset does).
  auto gone = [&]() -> caf::error {
    // (copies_one_failover_back and copies_partial are code from before
    // issue 32, when a running node's plain HSET created copies too.)
    auto m = mutant::active();
    if (m == mutant::id::copies_plain_hset || m == mutant::id::copies_one_failover_back
        || m == mutant::id::copies_partial)
      return caf::none;
    for (auto& sh : w_->cluster.shards) {
      if (sh.slots.empty() || copy_tag_of(sh).empty())
        continue;
      auto e = expected_.find(sh.node_id);
      auto judged = e != expected_.end() ? e->second.replid : sh.replid;
      auto c = w_->copy_keys.find({copy_tag_of(sh), sh.node_id});
      if (c == w_->copy_keys.end() || c->second.replid != judged)
        return caf::make_error(ec::redis_unavailable,
                               "fake redis cluster: primary " + sh.address + " (node "
                                 + sh.node_id.substr(0, 8)
                                 + ") no longer holds its copy in the history this generation's "
                                   "start judged: a running node never re-creates a copy");
    }
    return caf::none;
  };
  if (w_->stamps_as_read && mutant::active() != mutant::id::copies_one_failover_back) {
    // As redis_cluster_session_store::write_copies: the primaries read
    // again only if one it does not know serves slots; the judged ones
    // checked against what was read; the copies stamped with it.
    bool known = true;
    for (auto& sh : w_->cluster.shards)
      known = known && (sh.slots.empty() || learned_.count(sh.node_id) > 0);
    if (!known)
      learn_primaries();
    for (auto& sh : w_->cluster.shards) {
      if (sh.slots.empty() || expected_.empty())
        continue;
      auto e = expected_.find(sh.node_id);
      auto l = learned_.find(sh.node_id);
      if (e == expected_.end() || l == learned_.end() || e->second.replid != l->second.replid
          || (!e->second.copy_tag.empty() && e->second.copy_tag != copy_tag_of(sh)))
        return refuse(sh);
    }
    if (auto err = gone())
      return err;
    // As redis_cluster_session_store::read_epochs: the epochs as they are
    // when the copies are written (the mutant copies_stamped_at_open keeps
    // the ones read when the store opened).
    if (mutant::active() != mutant::id::copies_stamped_at_open)
      for (auto& sh : w_->cluster.shards)
        if (auto l = learned_.find(sh.node_id); l != learned_.end())
          l->second.current_epoch = sh.current_epoch;
    simulated_redis::write_scope write{*w_};
    w_->record_copy(positions, false, nullptr, &learned_);
    return {};
  }
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
          || (!e->second.copy_tag.empty() && e->second.copy_tag != copy_tag_of(sh)))
        return refuse(sh);
    }
  } else {
    for (size_t i = 0; i < w_->cluster.shards.size() && i < replids_.size(); ++i)
      if (w_->cluster.shards[i].replid != replids_[i])
        return refuse(w_->cluster.shards[i]);
  }
  if (auto err = gone())
    return err;
  simulated_redis::write_scope write{*w_};
  w_->record_copy(positions, false);
  return {};
}

} // namespace qsp::test
