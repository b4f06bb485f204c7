#include "tests/support/fakes.hpp"

#include "core/cluster.hpp"
#include "core/dispatch.hpp"

#include <algorithm>
#include <stdexcept>

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

int64_t fake_world::append_raw(int32_t p, std::string value) {
  lock g{mtx};
  auto& fp = part(p);
  fp.log.push_back(log_entry{fp.end(), std::move(value), entry_kind::data, 0});
  wake(p);
  return fp.log.back().offset;
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
  auto& fp = part(p);
  fp.log.push_back(log_entry{fp.end(), {}, entry_kind::marker, 0});
  wake(p);
  return fp.log.back().offset;
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
  fp.log.push_back(log_entry{fp.end(), core::encode_json(d), entry_kind::data, txn});
  return fp.log.back().offset;
}

int64_t fake_world::commit_txn(int32_t p, int64_t txn) {
  lock g{mtx};
  auto& fp = part(p);
  if (fp.open.erase(txn) == 0)
    throw std::logic_error("fake_world: transaction not open");
  fp.log.push_back(log_entry{fp.end(), {}, entry_kind::marker, txn});
  wake(p);
  return fp.log.back().offset;
}

int64_t fake_world::abort_txn(int32_t p, int64_t txn) {
  lock g{mtx};
  auto& fp = part(p);
  if (fp.open.erase(txn) == 0)
    throw std::logic_error("fake_world: transaction not open");
  for (auto& e : fp.log)
    if (e.txn == txn && e.kind == entry_kind::data)
      e.kind = entry_kind::aborted;
  fp.log.push_back(log_entry{fp.end(), {}, entry_kind::marker, txn});
  wake(p);
  return fp.log.back().offset;
}

void fake_world::truncate(int32_t p, int64_t low) {
  lock g{mtx};
  auto& fp = part(p);
  fp.low = std::min(std::max(fp.low, low), fp.end());
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
  if (w_->version_fault.fire())
    return failure(w_->version_fault, ec::redis_unavailable, "INFO server");
  if (w_->redis_frozen)
    return frozen("INFO server");
  return w_->server_version;
}

caf::expected<std::string> fake_checkpoint_store::maxmemory_policy() {
  lock g{w_->mtx};
  if (w_->redis_frozen)
    return frozen("INFO memory");
  return w_->maxmemory_policy;
}

caf::expected<core::stored_state> fake_checkpoint_store::read(const std::string& topic,
                                                              int32_t) {
  lock g{w_->mtx};
  ++w_->calls.read;
  if (w_->read_fault.fire())
    return failure(w_->read_fault, ec::redis_unavailable, "checkpoint read script");
  if (w_->redis_frozen)
    return frozen("checkpoint read script");
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
  if (w_->create_meta_fault.fire())
    return failure(w_->create_meta_fault, ec::redis_unavailable, "create meta script");
  if (w_->redis_frozen)
    return frozen("create meta script");
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
  if (w_->redis_frozen)
    return frozen("ownership claim script");
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
  if (w_->write_fault.fire())
    return failure(w_->write_fault, ec::redis_unavailable, "guarded checkpoint write");
  if (w_->redis_frozen)
    return frozen("guarded checkpoint write");
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
  auto& h = w_->hashes[cp_key];
  for (auto& [f, v] : ident)
    h[f] = v;
  h["partition"] = core::to_decimal(partition);
  h["next_offset"] = core::to_decimal(next_offset);
  auto& e = w_->hashes[w_->ns + ":epoch:" + id.topic + ":" + std::to_string(partition)];
  e["next_offset"] = core::to_decimal(next_offset);
  e["leader_epoch"] = leader_epoch < 0 ? std::string{"-1"} : core::to_decimal(leader_epoch);
  w_->events.push_back(fake_event{fake_event::kind::checkpoint, partition, next_offset});
  if (w_->on_checkpoint_written)
    w_->on_checkpoint_written(partition, next_offset);
  if (w_->write_lost_reply_fault.fire())
    return failure(w_->write_lost_reply_fault, ec::redis_unavailable,
                   "reply to the guarded checkpoint write lost");
  return caf::unit;
}

// -- session store -----------------------------------------------------------------

caf::expected<void> fake_session_store::apply(const std::vector<session_update>& updates) {
  lock g{w_->mtx};
  ++w_->calls.apply;
  if (w_->apply_fault.fire())
    return failure(w_->apply_fault, ec::redis_unavailable, "ZADD pipeline");
  size_t limit = updates.size();
  caf::error err;
  if (w_->partial_apply_fault.fire()) {
    limit = std::min(limit, w_->partial_apply_writes);
    err = failure(w_->partial_apply_fault, ec::redis_unavailable,
                  "connection lost after " + std::to_string(limit) + " ZADD replies");
  }
  if (w_->on_apply)
    w_->on_apply(copy_updates(updates));
  for (size_t i = 0; i < limit; ++i) {
    auto& set = w_->sessions[std::string{updates[i].user}];
    for (size_t j = 0; j < updates[i].count; ++j) {
      std::string conv{updates[i].members[j].conversation};
      auto score = updates[i].members[j].created_at;
      ++w_->calls.zadd_members;
      auto [it, fresh] = set.emplace(conv, score);
      if (!fresh && score > it->second) // GT: only ever raise a score
        it->second = score;
    }
  }
  if (err)
    return err;
  return caf::unit;
}

// Pipelined like Redis: the commands take effect when sent, their replies
// are read (and may be lost) later, oldest first.
caf::expected<void> fake_session_store::send(const std::vector<session_update>& updates) {
  lock g{w_->mtx};
  unconfirmed u{updates.size(), false, {}, 0};
  if (!updates.empty() && w_->moved_fault.fire()) {
    // The slot moved: nothing is applied until the resend (at confirm).
    u.held = copy_updates(updates);
    u.not_yet = w_->moved_not_yet;
  } else if (!updates.empty() && w_->reply_error_fault.fire()) {
    // The first ZADD gets an error reply (e.g. WRONGTYPE, OOM) and does
    // nothing; the rest apply, and the connection stays up.
    u.error_reply = true;
    std::vector<session_update> rest(updates.begin() + 1, updates.end());
    if (auto ok = apply(rest); !ok)
      return ok;
  } else if (auto ok = apply(updates); !ok) {
    return ok;
  }
  unconfirmed_.push_back(u);
  w_->calls.max_unconfirmed = std::max<uint64_t>(w_->calls.max_unconfirmed, unconfirmed_.size());
  return caf::unit;
}

caf::expected<bool> fake_session_store::confirm(size_t n, std::chrono::milliseconds wait) {
  lock g{w_->mtx};
  ++w_->calls.confirm;
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
  auto u = unconfirmed_.front();
  unconfirmed_.pop_front();
  for (auto& h : u.held)
    for (auto& [conv, score] : h.members) {
      auto& cur = w_->sessions[h.user][conv];
      cur = std::max(cur, score);
    }
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

caf::expected<void> fake_partition_reader::poll(size_t max, std::vector<log_record>& out,
                                                int64_t& passed) {
  lock g{w_->mtx};
  ++w_->calls.poll;
  if ((w_->poll_fault_partition < 0 || w_->poll_fault_partition == partition_)
      && w_->poll_fault.fire())
    return failure(w_->poll_fault, ec::kafka_read,
                   "topic " + w_->topic + " partition " + std::to_string(partition_));
  auto& fp = w_->part(partition_);
  if (pos_ < fp.low)
    return caf::make_error(ec::kafka_read, "fake: topic " + w_->topic + " partition "
                                             + std::to_string(partition_) + " offset "
                                             + std::to_string(pos_)
                                             + ": offset out of range (deleted by retention)");
  auto stable = fp.lso();
  size_t delivered = 0;
  while (pos_ < stable && delivered < max) {
    auto& e = fp.log[static_cast<size_t>(pos_)];
    if (e.kind == entry_kind::data) {
      out.push_back(log_record{e.offset, e.value, 1700000000000 + e.offset, fp.leader_epoch});
      ++delivered;
    }
    ++pos_;
  }
  // Partition EOF: once per position reached, if the batch had room for it.
  if (pos_ >= stable && delivered < max && eof_reported_ != pos_) {
    eof_reported_ = pos_;
    if (pos_ > passed)
      passed = pos_;
  }
  w_->events.push_back(fake_event{fake_event::kind::fetched, partition_, pos_});
  return caf::unit;
}

int32_t fake_partition_reader::position_epoch(int64_t offset) {
  lock g{w_->mtx};
  return offset == pos_ ? w_->part(partition_).leader_epoch : -1;
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
    readers_.clear();
  }
  for (auto& [p, start] : starts) {
    starts_[p] = start;
    readers_.erase(p);
    if (auto e = epochs.find(p); e != epochs.end())
      epochs_[p] = e->second;
    // Per partition: several nodes may share the world, and another node's
    // start says nothing about this node's partitions.
    w_->events.push_back(fake_event{fake_event::kind::assigned, p, start});
  }
  return caf::unit;
}

caf::expected<void> fake_dispatch_log::remove(const std::vector<int32_t>& partitions) {
  lock g{w_->mtx};
  ++w_->calls.removes;
  for (auto p : partitions) {
    starts_.erase(p);
    epochs_.erase(p);
    readers_.erase(p);
  }
  return caf::unit;
}

std::shared_ptr<partition_reader> fake_dispatch_log::reader(int32_t partition) {
  lock g{w_->mtx};
  ++w_->calls.reader;
  auto s = starts_.find(partition);
  if (s == starts_.end())
    return nullptr;
  auto& r = readers_[partition];
  if (!r) {
    r = std::make_shared<fake_partition_reader>(w_, partition, s->second);
    w_->readers.push_back(r);
  }
  return r;
}

int64_t fake_dispatch_log::log_end(int32_t partition) {
  lock g{w_->mtx};
  if (starts_.count(partition) == 0)
    return -1;
  return w_->end(partition);
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
  if (w_->make_checkpoint_store_fault.fire())
    return failure(w_->make_checkpoint_store_fault, ec::redis_unavailable, "connect");
  return std::unique_ptr<checkpoint_store>{new fake_checkpoint_store(w_)};
}

caf::expected<std::unique_ptr<session_store>> fake_port_factory::make_session_store() {
  lock g{w_->mtx};
  ++w_->calls.make_session_store;
  if (w_->make_session_store_fault.fire())
    return failure(w_->make_session_store_fault, ec::redis_unavailable, "connect");
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
  return std::unique_ptr<cluster_store>{std::make_unique<fake_cluster_store>(w_)};
}

caf::expected<std::vector<owned_status>>
fake_cluster_store::publish(const std::string& topic, const std::string& node,
                            const std::vector<owned_status>& statuses,
                            std::chrono::milliseconds ttl, int64_t now_ms) {
  lock g{w_->mtx};
  ++w_->calls.publishes;
  if (w_->redis_frozen)
    return frozen("cluster status script");
  if (w_->before_publish)
    w_->before_publish(statuses);
  w_->expire_statuses();
  std::vector<owned_status> fenced;
  for (auto& s : statuses) {
    auto suffix = topic + ":" + std::to_string(s.partition);
    if (auto c = core::check_owner(w_->owner(topic, s.partition), node, s.epoch); c != core::owner_check::ok) {
      auto f = s;
      f.state = c == core::owner_check::fenced ? "fenced" : "lost";
      fenced.push_back(std::move(f));
      continue;
    }
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
  if (w_->redis_frozen)
    return frozen("cluster release script");
  w_->expire_statuses();
  for (auto& [p, e] : partitions) {
    auto key = w_->ns + ":status:" + topic + ":" + std::to_string(p);
    auto i = w_->hashes.find(key);
    if (i != w_->hashes.end() && i->second["node"] == node
        && i->second["epoch"] == std::to_string(e))
      w_->hashes.erase(i);
  }
  return caf::unit;
}

caf::expected<std::vector<cluster_partition>>
fake_cluster_store::view(const std::string& topic, int32_t partition_count) {
  lock g{w_->mtx};
  if (w_->redis_frozen)
    return frozen("cluster view script");
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
                             bool seed) {
  copy_write w;
  w.positions = positions;
  w.seed = seed;
  for (auto& [p, at] : positions) {
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
        auto sc = score(u, d.conversation_id);
        if (!sc || *sc < d.created_at)
          w.unapplied.push_back("partition " + std::to_string(p) + " offset "
                                + std::to_string(e.offset) + " user " + u);
      }
    }
  }
  copy_writes.push_back(std::move(w));
  for (auto& sh : cluster.shards)
    if (sh.copy == "valid" || seed) {
      sh.copy = "valid";
      for (auto& [p, at] : positions)
        sh.positions[p] = at;
    }
}

caf::expected<core::redis_cluster_state> fake_checkpoint_store::cluster_state(const std::string&) {
  lock g{w_->mtx};
  auto st = w_->cluster;
  if (!st.shards.empty()) {
    auto m = w_->hashes.find(w_->meta_key());
    st.copies_marked = m != w_->hashes.end() && m->second.count(core::copies_field) != 0;
  }
  return st;
}

caf::expected<void> fake_checkpoint_store::seed_copies(
  const core::identity&, const std::map<int32_t, std::pair<int64_t, int32_t>>& positions) {
  lock g{w_->mtx};
  if (w_->cluster.shards.empty())
    return caf::unit;
  w_->record_copy(positions, true);
  w_->hashes[w_->meta_key()][core::copies_field] = "1";
  return caf::unit;
}

caf::expected<void> fake_session_store::write_copies(
  const core::identity&, const std::map<int32_t, std::pair<int64_t, int32_t>>& positions) {
  lock g{w_->mtx};
  if (w_->cluster.shards.empty())
    return caf::unit;
  w_->record_copy(positions, false);
  return caf::unit;
}

} // namespace qsp::test
