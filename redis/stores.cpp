#include "redis/stores.hpp"

#include "redis/cluster.hpp"
#include "redis/cluster_stores.hpp"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <unordered_set>

#include "core/cluster.hpp"
#include "messages/types.hpp"

namespace qsp::redis {

namespace {

// Reads keys atomically (scripts run isolated) without any keyspace scan:
// with ARGV[1] == 'meta', KEYS[1] is the meta key and comes first as
// {meta_type, meta_fields}; then {key, type, fields} for each other key that
// exists (fields empty unless it is a hash).  Used for meta plus the known
// checkpoint keys [0, partition_count) in one step, and for the stray keys a
// SCAN outside the script found.
constexpr const char* read_script = R"lua(
local out = {}
local first = 1
if ARGV[1] == 'meta' then
  out[1] = redis.call('TYPE', KEYS[1]).ok
  if out[1] == 'hash' then out[2] = redis.call('HGETALL', KEYS[1]) else out[2] = {} end
  first = 2
end
for i = first, #KEYS do
  local t = redis.call('TYPE', KEYS[i]).ok
  if t ~= 'none' then
    out[#out + 1] = KEYS[i]
    out[#out + 1] = t
    if t == 'hash' then out[#out + 1] = redis.call('HGETALL', KEYS[i]) else out[#out + 1] = {} end
  end
end
return out
)lua";

// Creates meta (KEYS[1]) iff neither it nor any of the known checkpoint keys
// (KEYS[2..]) exists.  ARGV: meta's fields and values.
constexpr const char* create_meta_script = R"lua(
if redis.call('EXISTS', KEYS[1]) == 1 then return 'exists' end
for i = 2, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then return 'checkpoints' end
end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 'created'
)lua";

/// SCAN's COUNT hint: the work of one SCAN step (Redis is busy for one step,
/// never for the whole keyspace).
constexpr const char* scan_count = "1000";

// docs/DESIGN.md §12, core::check_owner in Lua: what the owner record KEYS-key
// says to the holder of (node, mine): 'ok', 'fenced' (another node with an
// equal or newer epoch: the partition moved; mine 0: any record) or 'lost'
// (absent, or rolled back: transient), and the record's node and epoch.
#define QSP_OWNER_CHECK_LUA \
  "local function owner_check(key, node, mine)\n" \
  "  local o = redis.call('HMGET', key, 'node', 'epoch')\n" \
  "  local e = tonumber(o[2]) or 0\n" \
  "  if mine == 0 then if e > 0 then return 'fenced', o end return 'ok', o end\n" \
  "  if e > 0 and o[1] == node and e == mine then return 'ok', o end\n" \
  "  if e > 0 and o[1] ~= node and e >= mine then return 'fenced', o end\n" \
  "  return 'lost', o\n" \
  "end\n"

// The guarded checkpoint write (docs/DESIGN.md §4): identity fields of meta and of
// the checkpoint must match, and the stored next_offset must equal what this
// writer last wrote (ARGV[1], or '' for "absent").  Answers 'ok' or
// '<key>|<field>|<stored value>' naming the first mismatch.  With the
// checkpoint, the leader-epoch sidecar KEYS[3] gets {next_offset,
// leader_epoch = ARGV[9]}: both or neither.  Fencing (docs/DESIGN.md §12): the
// owner record KEYS[4] must name this node ARGV[11] with its epoch ARGV[10]
// (ARGV[10] 0: there must be none); else the answer is
// 'owner|<fenced or lost>|<stored epoch>|<stored node>'.
constexpr const char* guarded_write_script = QSP_OWNER_CHECK_LUA R"lua(
local verdict, o = owner_check(KEYS[4], ARGV[11], tonumber(ARGV[10]))
if verdict ~= 'ok' then
  return 'owner|' .. verdict .. '|' .. (o[2] or '') .. '|' .. (o[1] or '')
end
local id = {'format_version', ARGV[3], 'dispatch_topic', ARGV[4], 'partition_count', ARGV[5],
            'cluster_id', ARGV[6], 'topic_id', ARGV[7]}
local function shown(v) if v then return v end return '<absent>' end
if redis.call('TYPE', KEYS[1]).ok ~= 'hash' then return 'meta|type|' .. redis.call('TYPE', KEYS[1]).ok end
for i = 1, #id, 2 do
  local v = redis.call('HGET', KEYS[1], id[i])
  if v ~= id[i + 1] then return 'meta|' .. id[i] .. '|' .. shown(v) end
end
local t = redis.call('TYPE', KEYS[2]).ok
if ARGV[1] == '' then
  if t ~= 'none' then return 'checkpoint|next_offset|' .. shown(t == 'hash' and redis.call('HGET', KEYS[2], 'next_offset')) end
else
  if t ~= 'hash' then return 'checkpoint|next_offset|<absent>' end
  for i = 1, #id, 2 do
    local v = redis.call('HGET', KEYS[2], id[i])
    if v ~= id[i + 1] then return 'checkpoint|' .. id[i] .. '|' .. shown(v) end
  end
  local p = redis.call('HGET', KEYS[2], 'partition')
  if p ~= ARGV[8] then return 'checkpoint|partition|' .. shown(p) end
  local cur = redis.call('HGET', KEYS[2], 'next_offset')
  if cur ~= ARGV[1] then return 'checkpoint|next_offset|' .. shown(cur) end
end
redis.call('HSET', KEYS[2], 'format_version', ARGV[3], 'dispatch_topic', ARGV[4],
           'partition_count', ARGV[5], 'cluster_id', ARGV[6], 'topic_id', ARGV[7],
           'partition', ARGV[8], 'next_offset', ARGV[2])
redis.call('HSET', KEYS[3], 'next_offset', ARGV[2], 'leader_epoch', ARGV[9])
return 'ok'
)lua";

std::string str(const redisReply* r) {
  return r->str != nullptr ? std::string{r->str, r->len} : std::string{};
}

core::hash_fields to_fields(const redisReply* r) {
  core::hash_fields out;
  for (size_t i = 0; i + 1 < r->elements; i += 2)
    out.emplace(str(r->element[i]), str(r->element[i + 1]));
  return out;
}

caf::error unexpected_reply(const connection& c, const std::string& what) {
  return caf::make_error(ec::redis_reply, c.where() + ": unexpected reply to " + what);
}

} // namespace

std::string meta_key(const std::string& ns) { return ns + ":meta"; }

std::string checkpoint_prefix(const std::string& ns, const std::string& topic) {
  return ns + ":checkpoint:" + topic + ":";
}

std::string checkpoint_key(const std::string& ns, const std::string& topic, int32_t partition) {
  return checkpoint_prefix(ns, topic) + std::to_string(partition);
}

std::string epoch_key(const std::string& ns, const std::string& topic, int32_t partition) {
  return ns + ":epoch:" + topic + ":" + std::to_string(partition);
}

std::string owner_key(const std::string& ns, const std::string& topic, int32_t partition) {
  return ns + ":owner:" + topic + ":" + std::to_string(partition);
}

std::string status_key(const std::string& ns, const std::string& topic, int32_t partition) {
  return ns + ":status:" + topic + ":" + std::to_string(partition);
}

std::string glob_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\')
      out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

// -- checkpoint store ---------------------------------------------------------

caf::expected<std::unique_ptr<redis_checkpoint_store>>
redis_checkpoint_store::open(const settings& cfg) {
  if (!cfg.cluster_nodes.empty()) {
    // Redis Cluster mode: the namespace's shard (every key of the namespace
    // shares its slot), and the router for the copies on every primary.
    auto router = cluster_router::open(cfg);
    if (!router)
      return router.error();
    auto conn = open_namespace_shard(cfg);
    if (!conn)
      return conn.error();
    return std::unique_ptr<redis_checkpoint_store>{
      new redis_checkpoint_store(std::move(*conn), std::move(*router))};
  }
  auto conn = connection::open(cfg);
  if (!conn)
    return conn.error();
  return std::unique_ptr<redis_checkpoint_store>{new redis_checkpoint_store(std::move(*conn))};
}

namespace {

/// One `field:value` line of an INFO section.
caf::expected<std::string> info_field(connection& c, const std::string& section,
                                      const std::string& field) {
  auto r = c.command({"INFO", section});
  if (!r)
    return r.error();
  auto fields = info_fields(str(r->get()));
  auto i = fields.find(field);
  if (i == fields.end())
    return unexpected_reply(c, "INFO " + section);
  return i->second;
}

} // namespace

caf::expected<std::string> redis_checkpoint_store::server_version() {
  if (!router_) {
    // A Redis Cluster node written as if standalone would answer MOVED for
    // most keys and keep the checkpoints on one shard: the wrong mode.
    auto enabled = info_field(*conn_, "cluster", "cluster_enabled");
    if (enabled && *enabled == "1")
      return caf::make_error(ec::invalid_config,
                             conn_->where()
                               + " is a Redis Cluster node: set redis.cluster-nodes (Redis "
                                 "Cluster mode, with a hash-tag projection.namespace) instead of "
                                 "redis.host/redis.port or redis.sentinels");
  }
  return info_field(*conn_, "server", "redis_version");
}

caf::expected<std::string> redis_checkpoint_store::maxmemory_policy() {
  // INFO, not CONFIG GET: a least-privilege ACL user has +info but no +config.
  return info_field(*conn_, "memory", "maxmemory_policy");
}

namespace {

std::vector<std::string> known_checkpoint_keys(const std::string& ns, const std::string& topic,
                                               int32_t partition_count) {
  std::vector<std::string> out;
  for (int32_t p = 0; p < partition_count; ++p)
    out.push_back(checkpoint_key(ns, topic, p));
  return out;
}

/// Adds the {key, type, fields} triples of `rep` from element `first` on:
/// checkpoint keys (under `prefix`) and, where `epoch_keys` names them, the
/// leader-epoch sidecars (by partition).
void add_checkpoints(core::stored_state& st, const std::string& prefix, const redisReply* rep,
                     size_t first, const std::map<std::string, int32_t>& epoch_keys = {}) {
  for (size_t i = first; i + 2 < rep->elements; i += 3) {
    auto key = str(rep->element[i]);
    if (auto e = epoch_keys.find(key); e != epoch_keys.end()) {
      st.epochs[e->second] = to_fields(rep->element[i + 2]);
      continue;
    }
    if (key.size() < prefix.size() || key.compare(0, prefix.size(), prefix) != 0)
      continue;
    st.checkpoints[key.substr(prefix.size())] = to_fields(rep->element[i + 2]);
  }
}

bool triples(const redisReply* rep, size_t first) {
  return rep->type == REDIS_REPLY_ARRAY && rep->elements >= first
         && (rep->elements - first) % 3 == 0;
}

} // namespace

caf::expected<core::stored_state> redis_checkpoint_store::read(const std::string& topic,
                                                               int32_t partition_count) {
  auto& ns = conn_->config().ns;
  auto prefix = checkpoint_prefix(ns, topic);
  auto known = known_checkpoint_keys(ns, topic, partition_count);
  std::map<std::string, int32_t> epoch_keys;
  for (int32_t p = 0; p < partition_count; ++p)
    epoch_keys.emplace(epoch_key(ns, topic, p), p);
  // 1. Meta, the known checkpoints and their epoch sidecars, atomically.
  std::vector<std::string> argv{"EVAL", read_script,
                                std::to_string(known.size() + epoch_keys.size() + 1), meta_key(ns)};
  argv.insert(argv.end(), known.begin(), known.end());
  for (auto& [k, p] : epoch_keys)
    argv.push_back(k);
  argv.emplace_back("meta");
  auto r = conn_->command(argv);
  if (!r)
    return r.error();
  auto* rep = r->get();
  if (!triples(rep, 2))
    return unexpected_reply(*conn_, "the checkpoint read script");
  core::stored_state st;
  auto meta_type = str(rep->element[0]);
  if (meta_type == "hash")
    st.meta = to_fields(rep->element[1]);
  else if (meta_type != "none")
    st.meta = core::hash_fields{}; // wrong type: every field missing
  add_checkpoints(st, prefix, rep, 2, epoch_keys);
  // 2. Stray checkpoint keys of the topic (a partition >= partition_count, a
  // suffix that is no partition number): an incremental SCAN, one bounded
  // step per round trip, so Redis is never blocked by a big keyspace.  Known
  // keys it meets are skipped: the atomic snapshot above is what counts.
  std::unordered_set<std::string> known_set(known.begin(), known.end());
  auto pattern = glob_escape(prefix) + "*";
  std::string cursor = "0";
  do {
    auto page = conn_->command({"SCAN", cursor, "MATCH", pattern, "COUNT", scan_count});
    if (!page)
      return page.error();
    auto* pr = page->get();
    if (pr->type != REDIS_REPLY_ARRAY || pr->elements != 2
        || pr->element[1]->type != REDIS_REPLY_ARRAY)
      return unexpected_reply(*conn_, "SCAN");
    cursor = str(pr->element[0]);
    std::vector<std::string> strays;
    for (size_t i = 0; i < pr->element[1]->elements; ++i) {
      auto key = str(pr->element[1]->element[i]);
      if (key.compare(0, prefix.size(), prefix) == 0 && !known_set.count(key))
        strays.push_back(std::move(key));
    }
    if (strays.empty())
      continue;
    std::vector<std::string> sargv{"EVAL", read_script, std::to_string(strays.size())};
    sargv.insert(sargv.end(), strays.begin(), strays.end());
    sargv.emplace_back("keys");
    auto sr = conn_->command(sargv);
    if (!sr)
      return sr.error();
    if (!triples(sr->get(), 0))
      return unexpected_reply(*conn_, "the checkpoint read script");
    add_checkpoints(st, prefix, sr->get(), 0);
  } while (cursor != "0");
  return st;
}

caf::expected<bool> redis_checkpoint_store::create_meta(const core::identity& id) {
  auto& ns = conn_->config().ns;
  auto known = known_checkpoint_keys(ns, id.topic, id.partition_count);
  std::vector<std::string> argv{"EVAL", create_meta_script, std::to_string(known.size() + 1),
                                meta_key(ns)};
  argv.insert(argv.end(), known.begin(), known.end());
  for (auto& [k, v] : core::encode_meta(id)) {
    argv.push_back(k);
    argv.push_back(v);
  }
  auto r = conn_->command(argv);
  if (!r)
    return r.error();
  auto res = str(r->get());
  if (res == "created")
    return true;
  if (res == "exists")
    return false;
  return caf::make_error(ec::refused, "meta: field meta: stored \"<absent>\", observed \""
                                        + ns + ":meta\": checkpoints exist but meta is missing");
}

void redis_checkpoint_store::interrupt() {
  conn_->interrupt();
  if (router_)
    router_->interrupt();
}

std::string primaries_key(const std::string& ns, const std::string& topic) {
  return ns + ":primaries:" + topic;
}

caf::expected<core::redis_cluster_state>
redis_checkpoint_store::cluster_state(const std::string& topic) {
  if (!router_)
    return core::redis_cluster_state{};
  auto marked = conn_->command({"HGET", meta_key(conn_->config().ns), core::copies_field});
  if (!marked)
    return marked.error();
  auto known = conn_->command({"HGETALL", primaries_key(conn_->config().ns, topic)});
  if (!known)
    return known.error();
  auto st = read_cluster_state(*router_, topic);
  if (!st)
    return st.error();
  st->copies_marked = str(marked->get()) == "1";
  auto* rep = known->get();
  for (size_t k = 0; rep->type == REDIS_REPLY_ARRAY && k + 1 < rep->elements; k += 2)
    core::read_registry_field({rep->element[k]->str, rep->element[k]->len},
                              {rep->element[k + 1]->str, rep->element[k + 1]->len}, *st);
  if (auto err = find_gone_copies(*router_, topic, *st))
    return err;
  return st;
}

caf::expected<void> redis_checkpoint_store::refresh_copies(const core::identity& id,
                                                           const core::copy_refresh& plan) {
  if (!router_)
    return {};
  if (auto err = refresh_cluster_copies(*router_, id, plan))
    return err;
  // The primaries the copies were written to become known: a later start
  // tells one that joined (unknown, no former history) from one that lost
  // its data (known).  Every history a node was judged in is kept.
  auto& ns = conn_->config().ns;
  auto key = primaries_key(ns, id.topic);
  bool changed = false;
  if (!plan.primaries.empty()) {
    auto cur = conn_->command({"HGETALL", key});
    if (!cur)
      return cur.error();
    std::map<std::string, std::string> had;
    auto* rep = cur->get();
    for (size_t k = 0; rep->type == REDIS_REPLY_ARRAY && k + 1 < rep->elements; k += 2)
      had[std::string{rep->element[k]->str, rep->element[k]->len}] =
        std::string{rep->element[k + 1]->str, rep->element[k + 1]->len};
    std::vector<std::string> argv{"HSET", key};
    for (auto& [field, value] : core::registry_update(had, plan.primaries)) {
      argv.push_back(field);
      argv.push_back(value);
    }
    if (argv.size() > 2) {
      auto r = conn_->command(argv);
      if (!r)
        return r.error();
      changed = true;
    }
  }
  if (plan.mark) {
    auto r = conn_->command({"HSET", meta_key(ns), core::copies_field, "1"});
    if (!r)
      return r.error();
    changed = true;
  }
  // Rule 7: what changed is on the namespace's replicas before the node
  // runs (a failover of that shard would otherwise take the registry or
  // the mark back).  Fewer acknowledgements within the timeout are no
  // error, and a start that changes neither does not wait.
  if (changed)
    return wait_replicas();
  return {};
}

// WAIT after the checkpoint's script: the replicas acknowledge the
// replication offset of this connection's last write, the checkpoint, and
// every write before it in the primary's one replication stream, the ZADDs
// it covers included (they were confirmed before it was sent).  Fewer
// acknowledgements within the timeout are no error: the checkpoint is safe
// without any (RELIABILITY.md, "Redis failover: why nothing is lost"); WAIT
// only bounds how far a promoted replica's checkpoints can lag.
caf::expected<void> redis_checkpoint_store::wait_replicas() {
  auto& cfg = conn_->config();
  if (cfg.wait_replicas <= 0)
    return {};
  auto r = conn_->command({"WAIT", core::to_decimal(cfg.wait_replicas),
                           core::to_decimal(cfg.wait_timeout_ms)});
  if (!r)
    return r.error();
  return {};
}

caf::expected<void> redis_checkpoint_store::write_checkpoint(const core::identity& id,
                                                             int32_t partition, int64_t expected,
                                                             int64_t next_offset,
                                                             int32_t leader_epoch,
                                                             uint64_t owner_epoch,
                                                             const std::string& owner_node) {
  auto& ns = conn_->config().ns;
  auto r = conn_->command({"EVAL", guarded_write_script, "4", meta_key(ns),
                           checkpoint_key(ns, id.topic, partition),
                           epoch_key(ns, id.topic, partition), owner_key(ns, id.topic, partition),
                           expected < 0 ? std::string{} : core::to_decimal(expected),
                           core::to_decimal(next_offset), core::to_decimal(core::format_version),
                           id.topic, core::to_decimal(id.partition_count), id.cluster_id,
                           id.topic_id, core::to_decimal(partition),
                           leader_epoch < 0 ? std::string{"-1"} : core::to_decimal(leader_epoch),
                           std::to_string(owner_epoch), owner_node});
  if (!r)
    return r.error();
  auto res = str(r->get());
  if (res == "ok")
    return wait_replicas();
  if (res.rfind("owner|", 0) == 0) {
    // 'owner|<fenced or lost>|<stored epoch>|<stored node>'
    auto rest = res.substr(6);
    auto b1 = rest.find('|');
    auto verdict = rest.substr(0, b1);
    rest = b1 == std::string::npos ? std::string{} : rest.substr(b1 + 1);
    auto b2 = rest.find('|');
    auto epoch = rest.substr(0, b2);
    auto node = b2 == std::string::npos ? std::string{} : rest.substr(b2 + 1);
    auto stored = epoch.empty() ? std::string{"no owner record"}
                                : "node \"" + node + "\" epoch " + epoch;
    auto text = "partition " + std::to_string(partition) + ": " + owner_key(ns, id.topic, partition)
                + " holds " + stored + ", this writer is node \"" + owner_node + "\" epoch "
                + std::to_string(owner_epoch);
    if (verdict == "fenced")
      return make_fenced(partition, text + ": another node owns the partition now; checkpoint "
                                      + core::to_decimal(next_offset) + " not written");
    return caf::make_error(ec::checkpoint_conflict,
                           text + ": the ownership claim was lost (a Redis failover or restore "
                                  "rolled it back); checkpoint "
                             + core::to_decimal(next_offset)
                             + " not written, the next verification re-claims");
  }
  // '<key>|<field>|<stored>': someone else advanced, rolled back or rewrote it.
  auto a = res.find('|'), b = res.rfind('|');
  std::string field = a != std::string::npos && b > a ? res.substr(a + 1, b - a - 1) : res;
  std::string stored = b != std::string::npos ? res.substr(b + 1) : "";
  std::string mine = field == "next_offset"
                       ? (expected < 0 ? std::string{"<absent>"} : core::to_decimal(expected))
                       : "this writer's identity";
  return caf::make_error(ec::checkpoint_conflict,
                         "partition " + std::to_string(partition) + ": field " + field
                           + " of " + res.substr(0, a) + ": stored \"" + stored
                           + "\", expected \"" + mine
                           + "\": the checkpoint changed behind this writer");
}

// -- session store ------------------------------------------------------------

// -- ownership and the cluster status (docs/DESIGN.md §12) -------------------------

namespace {

// A claim (core::decide_claim): ARGV node, now_ms, this node's epoch (0:
// none).  Keeps an intact claim (refreshes its heartbeat), answers
// {stored epoch, stored node} for a partition that moved, else writes a new
// epoch above every one seen and answers it.
constexpr const char* claim_script = QSP_OWNER_CHECK_LUA R"lua(
local node, now, mine = ARGV[1], ARGV[2], tonumber(ARGV[3])
local verdict, o = owner_check(KEYS[1], node, mine)
local seen = tonumber(o[2]) or 0
if mine > 0 and verdict == 'ok' then
  redis.call('HSET', KEYS[1], 'heartbeat_ms', now)
  return mine
end
if mine > 0 and verdict == 'fenced' then return {seen, o[1] or ''} end
local e = string.format('%d', math.max(seen, mine) + 1)
redis.call('HSET', KEYS[1], 'epoch', e, 'node', node, 'heartbeat_ms', now)
return tonumber(e)
)lua";

// Per partition i, KEYS[2i-1] the owner record and KEYS[2i] the status; ARGV:
// node, ttl_ms, now_ms, then five per partition (epoch, state, h0,
// next_offset, caught_up).  Writes the status (with its TTL) and the owner's
// heartbeat only where the owner record still names this node at this epoch;
// answers {i, 'fenced' or 'lost'} (i 1-based) for each where it does not.
constexpr const char* publish_script = QSP_OWNER_CHECK_LUA R"lua(
local node, ttl, now = ARGV[1], ARGV[2], ARGV[3]
local fenced = {}
for i = 1, #KEYS / 2 do
  local a = 3 + (i - 1) * 5
  local epoch = ARGV[a + 1]
  local verdict = owner_check(KEYS[2 * i - 1], node, tonumber(epoch))
  if verdict ~= 'ok' then
    fenced[#fenced + 1] = {i, verdict}
  else
    redis.call('HSET', KEYS[2 * i - 1], 'heartbeat_ms', now)
    redis.call('HSET', KEYS[2 * i], 'node', node, 'epoch', epoch, 'state', ARGV[a + 2],
               'h0', ARGV[a + 3], 'next_offset', ARGV[a + 4], 'caught_up', ARGV[a + 5],
               'heartbeat_ms', now)
    redis.call('PEXPIRE', KEYS[2 * i], ttl)
  end
end
return fenced
)lua";

// KEYS: statuses; ARGV: node, then one epoch per key.  Deletes those still
// published by this node at that epoch (PEXPIRE 0 deletes at once, and the
// ACL needs no DEL).
constexpr const char* release_script = R"lua(
for i = 1, #KEYS do
  local s = redis.call('HMGET', KEYS[i], 'node', 'epoch')
  if s[1] == ARGV[1] and s[2] == ARGV[i + 1] then redis.call('PEXPIRE', KEYS[i], 0) end
end
return 'ok'
)lua";

// KEYS: owner record, status, per partition; answers their HGETALLs in one
// atomic step.
constexpr const char* view_script = R"lua(
local out = {}
for i = 1, #KEYS do out[i] = redis.call('HGETALL', KEYS[i]) end
return out
)lua";

int64_t to_i64(const core::hash_fields& f, const char* name, int64_t fallback) {
  auto i = f.find(name);
  if (i == f.end())
    return fallback;
  int64_t v = fallback;
  std::from_chars(i->second.data(), i->second.data() + i->second.size(), v);
  return v;
}

std::string field_or(const core::hash_fields& f, const char* name) {
  auto i = f.find(name);
  return i == f.end() ? std::string{} : i->second;
}

} // namespace

caf::expected<uint64_t> redis_checkpoint_store::claim(const std::string& topic, int32_t partition,
                                                      const std::string& node, int64_t now_ms,
                                                      uint64_t mine) {
  auto& ns = conn_->config().ns;
  auto r = conn_->command({"EVAL", claim_script, "1", owner_key(ns, topic, partition), node,
                           std::to_string(now_ms), std::to_string(mine)});
  if (!r)
    return r.error();
  if ((*r)->type == REDIS_REPLY_ARRAY && (*r)->elements == 2
      && (*r)->element[0]->type == REDIS_REPLY_INTEGER)
    return make_fenced(partition, "partition " + std::to_string(partition) + ": "
                                    + owner_key(ns, topic, partition) + " names node \""
                                    + str((*r)->element[1]) + "\" with epoch "
                                    + std::to_string((*r)->element[0]->integer) + " (this node \""
                                    + node + "\" held epoch " + std::to_string(mine)
                                    + "): the partition moved to another node");
  if ((*r)->type != REDIS_REPLY_INTEGER || (*r)->integer <= 0)
    return unexpected_reply(*conn_, "the ownership claim script");
  return static_cast<uint64_t>((*r)->integer);
}

caf::expected<std::unique_ptr<redis_cluster_store>>
redis_cluster_store::open(const settings& cfg) {
  auto conn = cfg.cluster_nodes.empty() ? connection::open(cfg) : open_namespace_shard(cfg);
  if (!conn)
    return conn.error();
  return std::unique_ptr<redis_cluster_store>{new redis_cluster_store(std::move(*conn))};
}

void redis_cluster_store::interrupt() { conn_->interrupt(); }

caf::expected<std::vector<owned_status>>
redis_cluster_store::publish(const std::string& topic, const std::string& node,
                             const std::vector<owned_status>& statuses,
                             std::chrono::milliseconds ttl, int64_t now_ms) {
  std::vector<owned_status> fenced;
  if (statuses.empty())
    return fenced;
  auto& ns = conn_->config().ns;
  std::vector<std::string> argv{"EVAL", publish_script, std::to_string(2 * statuses.size())};
  for (auto& s : statuses) {
    argv.push_back(owner_key(ns, topic, s.partition));
    argv.push_back(status_key(ns, topic, s.partition));
  }
  argv.push_back(node);
  argv.push_back(std::to_string(std::max<int64_t>(1, ttl.count())));
  argv.push_back(std::to_string(now_ms));
  for (auto& s : statuses) {
    argv.push_back(std::to_string(s.epoch));
    argv.push_back(s.state);
    argv.push_back(std::to_string(s.h0));
    argv.push_back(std::to_string(s.next_offset));
    argv.push_back(s.caught_up ? "1" : "0");
  }
  auto r = conn_->command(argv);
  if (!r)
    return r.error();
  auto* rep = r->get();
  if (rep->type != REDIS_REPLY_ARRAY)
    return unexpected_reply(*conn_, "the cluster status script");
  for (size_t i = 0; i < rep->elements; ++i) {
    auto* e = rep->element[i];
    if (e->type != REDIS_REPLY_ARRAY || e->elements != 2
        || e->element[0]->type != REDIS_REPLY_INTEGER || e->element[0]->integer < 1
        || static_cast<size_t>(e->element[0]->integer) > statuses.size())
      return unexpected_reply(*conn_, "the cluster status script");
    auto f = statuses[static_cast<size_t>(e->element[0]->integer - 1)];
    f.state = str(e->element[1]) == "fenced" ? "fenced" : "lost";
    fenced.push_back(std::move(f));
  }
  return fenced;
}

caf::expected<void> redis_cluster_store::release(const std::string& topic,
                                                 const std::string& node,
                                                 const std::map<int32_t, uint64_t>& partitions) {
  if (partitions.empty())
    return {};
  auto& ns = conn_->config().ns;
  std::vector<std::string> argv{"EVAL", release_script, std::to_string(partitions.size())};
  for (auto& [p, e] : partitions)
    argv.push_back(status_key(ns, topic, p));
  argv.push_back(node);
  for (auto& [p, e] : partitions)
    argv.push_back(std::to_string(e));
  auto r = conn_->command(argv);
  if (!r)
    return r.error();
  return {};
}

caf::expected<std::vector<cluster_partition>>
redis_cluster_store::view(const std::string& topic, int32_t partition_count) {
  auto& ns = conn_->config().ns;
  std::vector<std::string> argv{"EVAL", view_script, std::to_string(2 * partition_count)};
  for (int32_t p = 0; p < partition_count; ++p) {
    argv.push_back(owner_key(ns, topic, p));
    argv.push_back(status_key(ns, topic, p));
  }
  auto r = conn_->command(argv);
  if (!r)
    return r.error();
  auto* rep = r->get();
  if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 * static_cast<size_t>(partition_count))
    return unexpected_reply(*conn_, "the cluster view script");
  std::vector<cluster_partition> out;
  for (int32_t p = 0; p < partition_count; ++p) {
    auto of = to_fields(rep->element[2 * p]);
    auto sf = to_fields(rep->element[2 * p + 1]);
    core::owner_record o;
    o.present = !of.empty();
    o.node = field_or(of, "node");
    o.epoch = static_cast<uint64_t>(to_i64(of, "epoch", 0));
    o.heartbeat_ms = to_i64(of, "heartbeat_ms", 0);
    core::status_record s;
    s.present = !sf.empty();
    s.node = field_or(sf, "node");
    s.epoch = static_cast<uint64_t>(to_i64(sf, "epoch", 0));
    s.state = field_or(sf, "state");
    s.h0 = to_i64(sf, "h0", -1);
    s.next_offset = to_i64(sf, "next_offset", -1);
    s.caught_up = field_or(sf, "caught_up") == "1";
    auto verdict = core::judge(o, s);
    cluster_partition cp;
    cp.partition = p;
    cp.owner = o.node;
    cp.epoch = o.epoch;
    cp.heartbeat_ms = o.heartbeat_ms;
    cp.live = verdict.live;
    cp.state = s.present ? s.state : std::string{};
    cp.h0 = s.h0;
    cp.next_offset = s.next_offset;
    cp.caught_up = s.caught_up;
    cp.ready = verdict.ready;
    cp.why = verdict.why;
    out.push_back(std::move(cp));
  }
  return out;
}

caf::expected<std::unique_ptr<redis_session_store>>
redis_session_store::open(const settings& cfg) {
  // The primary the checkpoint store found: never a second one (Sentinel).
  auto conn = connection::open(cfg, connection::resolve::pinned);
  if (!conn)
    return conn.error();
  return std::unique_ptr<redis_session_store>{new redis_session_store(std::move(*conn))};
}

caf::expected<void> redis_session_store::apply(const std::vector<session_update>& updates) {
  if (auto ok = send(updates); !ok)
    return ok;
  auto done = confirm(updates.size(), std::chrono::milliseconds{-1});
  if (!done)
    return done.error();
  return {};
}

namespace {

/// `n` bytes (sizeof(Word) <= n <= 2 * sizeof(Word)) as two overlapping
/// word loads and stores.
template <class Word>
char* put_overlapping(char* p, const char* q, size_t n) {
  Word head, tail;
  std::memcpy(&head, q, sizeof(Word));
  std::memcpy(&tail, q + n - sizeof(Word), sizeof(Word));
  std::memcpy(p, &head, sizeof(Word));
  std::memcpy(p + n - sizeof(Word), &tail, sizeof(Word));
  return p + n;
}

char* put_text(char* p, std::string_view s) {
  // Short pieces (keys, conversation ids) inline, without a call: 4 to 16
  // bytes as two overlapping loads and stores, fewer byte by byte.
  const size_t n = s.size();
  const char* q = s.data();
  if (n >= 8 && n <= 16)
    return put_overlapping<uint64_t>(p, q, n);
  if (n >= 4 && n < 8)
    return put_overlapping<uint32_t>(p, q, n);
  if (n < 4) {
    for (size_t i = 0; i < n; ++i)
      p[i] = q[i];
    return p + n;
  }
  std::memcpy(p, q, n);
  return p + n;
}

/// "00", "01", ..., "99": decimals written two digits per step.
constexpr char digit_pairs[] = "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
                               "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
                               "8081828384858687888990919293949596979899";

/// The number of decimal digits of `v` (1 for 0): from its bit length and
/// one compare, not a division per digit.
int decimal_digits(uint64_t v) {
  static constexpr uint64_t pow10[20] = {1u,
                                         10u,
                                         100u,
                                         1000u,
                                         10000u,
                                         100000u,
                                         1000000u,
                                         10000000u,
                                         100000000u,
                                         1000000000u,
                                         10000000000u,
                                         100000000000u,
                                         1000000000000u,
                                         10000000000000u,
                                         100000000000000u,
                                         1000000000000000u,
                                         10000000000000000u,
                                         100000000000000000u,
                                         1000000000000000000u,
                                         10000000000000000000u};
  // v | 1 has as many digits as v (no power of ten is odd but 1) and is
  // never 0; t is log10 of 2^bits rounded down, the digit count or one less.
  const uint64_t w = v | 1;
  const int t = ((64 - __builtin_clzll(w)) * 1233) >> 12;
  return t + (w >= pow10[t] ? 1 : 0);
}

/// `v` in decimal, exactly `digits` (= decimal_digits(v)) characters.
char* put_digits(char* p, uint64_t v, int digits) {
  char* const end = p + digits;
  char* q = end;
  while (v >= 100) {
    const auto i = static_cast<size_t>(v % 100) * 2;
    v /= 100;
    q -= 2;
    std::memcpy(q, digit_pairs + i, 2);
  }
  if (v >= 10) {
    std::memcpy(q - 2, digit_pairs + v * 2, 2);
  } else {
    q[-1] = static_cast<char>('0' + v);
  }
  return end;
}

char* put_decimal(char* p, uint64_t v) { return put_digits(p, v, decimal_digits(v)); }

/// `v` < 10^8 as exactly eight ASCII digits (leading zeros), in one 64-bit
/// word in memory order: the four halvings of the digit pairs run side by
/// side in the word's lanes (SWAR) instead of one division after another.
inline uint64_t eight_digits(uint32_t v) {
  // Lanes of 32 bits: the upper and the lower four digits.
  const uint64_t fours = (v / 10000) | (static_cast<uint64_t>(v % 10000) << 32);
  // Lanes of 16 bits: pairs (x / 100 exactly as (x * 10486) >> 20 for x < 10^4).
  const uint64_t hundreds = ((fours * 10486) >> 20) & 0x0000007f0000007fu;
  const uint64_t pairs = hundreds | ((fours - 100 * hundreds) << 16);
  // Lanes of 8 bits: digits (x / 10 exactly as (x * 103) >> 10 for x < 100).
  const uint64_t tens = ((pairs * 103) >> 10) & 0x000f000f000f000fu;
  const uint64_t digits = tens | ((pairs - 10 * tens) << 8);
  return digits + 0x3030303030303030u;
}

/// `v` in decimal, exactly `digits` (= decimal_digits(v)) characters; a
/// score (a time in ms: 13 digits) as two groups of eight digits, each
/// converted at once.
inline char* put_score_digits(char* p, uint64_t v, int digits) {
  if (digits <= 8 || digits > 16)
    return put_digits(p, v, digits);
  const uint64_t high = eight_digits(static_cast<uint32_t>(v / 100000000u));
  const uint64_t low = eight_digits(static_cast<uint32_t>(v % 100000000u));
  // The high group without its (16 - digits) leading zeros (the first
  // characters are the word's low bytes), then the low group over the
  // rest of that 8-byte store.
  const uint64_t lead = high >> (8 * (16 - digits));
  std::memcpy(p, &lead, 8);
  std::memcpy(p + (digits - 8), &low, 8);
  return p + digits;
}

/// A bulk string holding `a` followed by `b`.
char* put_bulk(char* p, std::string_view a, std::string_view b = {}) {
  *p++ = '$';
  p = put_decimal(p, a.size() + b.size());
  *p++ = '\r';
  *p++ = '\n';
  p = put_text(p, a);
  p = put_text(p, b);
  *p++ = '\r';
  *p++ = '\n';
  return p;
}

/// A bulk string holding the decimal `v` (a score: 0 <= v <= 2^53, so
/// at most 16 digits), written in place.
char* put_bulk_decimal(char* p, int64_t v) {
  if (v < 0)
    return put_bulk(p, std::string_view{p + 32, static_cast<size_t>(
                                                  std::to_chars(p + 32, p + 56, v).ptr - (p + 32))});
  const int digits = decimal_digits(static_cast<uint64_t>(v));
  *p++ = '$';
  p = put_decimal(p, static_cast<uint64_t>(digits));
  *p++ = '\r';
  *p++ = '\n';
  p = put_score_digits(p, static_cast<uint64_t>(v), digits);
  *p++ = '\r';
  *p++ = '\n';
  return p;
}

/// Room for everything but the strings' own bytes: "*N\r\n" and the bulk
/// headers and CRLFs (a decimal is at most 20 digits).
constexpr size_t command_overhead = 1 + 20 + 2 + 10 + 1 + 20 + 2 + 2 + 8;
constexpr size_t member_overhead = 2 * (1 + 20 + 2 + 2) + 20;

} // namespace

size_t zadd_bound(std::string_view prefix, const session_update& u) {
  size_t bound = command_overhead + prefix.size() + u.user.size();
  for (size_t i = 0; i < u.count; ++i)
    bound += member_overhead + u.members[i].conversation.size();
  return bound;
}

char* put_zadd(char* p, std::string_view prefix, const session_update& u) {
  *p++ = '*';
  p = put_decimal(p, 3 + 2 * u.count);
  std::memcpy(p, "\r\n$4\r\nZADD\r\n", 12);
  p += 12;
  p = put_bulk(p, prefix, u.user);
  std::memcpy(p, "$2\r\nGT\r\n", 8);
  p += 8;
  for (size_t i = 0; i < u.count; ++i) {
    p = put_bulk_decimal(p, u.members[i].created_at);
    p = put_bulk(p, u.members[i].conversation);
  }
  return p;
}

caf::expected<void> redis_session_store::send(const std::vector<session_update>& updates) {
  // RESP written directly (hiredis' argv formatting is printf-based), into a
  // buffer sized for the worst case first, so every write below is a plain
  // store: no capacity check per piece.
  const auto& prefix = conn_->config().convs_prefix;
  size_t bound = 0;
  for (auto& u : updates)
    bound += zadd_bound(prefix, u);
  if (bound > buf_capacity_) {
    buf_capacity_ = std::max(bound, 2 * buf_capacity_);
    buf_.reset(new char[buf_capacity_]);
  }
  char* const begin = buf_.get();
  char* p = begin;
  for (auto& u : updates)
    p = put_zadd(p, prefix, u);
  if (auto err = conn_->write_formatted(std::string_view{begin, static_cast<size_t>(p - begin)}))
    return err;
  return {};
}

caf::expected<bool> redis_session_store::confirm(size_t n, std::chrono::milliseconds wait) {
  // Read every reply, even after an error one, so that the connection stays
  // in step; report the first failure once all `n` are read.
  using clock = std::chrono::steady_clock;
  auto deadline = clock::now() + wait;
  auto gone = [this](caf::error err) {
    // The connection is gone: the remaining replies never come.
    replies_read_ = 0;
    first_failure_ = caf::error{};
    return err;
  };
  while (replies_read_ < n) {
    int timeout = -1;
    if (wait.count() >= 0) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now());
      timeout = static_cast<int>(std::max<int64_t>(0, left.count()));
      // Integer replies (the normal case) without a reply object each.
      auto got = conn_->take_integer_replies(n - replies_read_, timeout);
      if (!got)
        return gone(got.error());
      replies_read_ += got->taken;
      if (got->taken > 0)
        continue;
      if (!got->other) {
        if (timeout == 0 || clock::now() >= deadline)
          return false;
        continue;
      }
      // Anything else (an error reply, ...): one reply the general way.
    }
    auto r = conn_->poll_reply(timeout, "ZADD");
    if (!r) {
      if (r.error().code() == static_cast<uint8_t>(ec::redis_unavailable))
        return gone(r.error());
      if (!first_failure_)
        first_failure_ = r.error();
      ++replies_read_;
      continue;
    }
    if (*r == nullptr) {
      if (timeout == 0 || clock::now() >= deadline)
        return false;
      continue;
    }
    if ((*r)->type != REDIS_REPLY_INTEGER && !first_failure_)
      first_failure_ = unexpected_reply(*conn_, "ZADD GT");
    ++replies_read_;
  }
  replies_read_ = 0;
  if (first_failure_)
    return std::exchange(first_failure_, caf::error{});
  return true;
}

void redis_session_store::interrupt() { conn_->interrupt(); }

caf::expected<session_list> redis_session_store::sessions(const std::string& user, size_t limit) {
  auto r = conn_->command({"ZREVRANGE", conn_->config().convs_prefix + user, "0",
                           std::to_string(limit == 0 ? 0 : limit - 1), "WITHSCORES"});
  if (!r)
    return r.error();
  session_list out;
  if (limit == 0)
    return out;
  auto* rep = r->get();
  for (size_t i = 0; i + 1 < rep->elements; i += 2) {
    auto score = core::parse_decimal(str(rep->element[i + 1]));
    out.push_back(session_entry{str(rep->element[i]), score ? *score : -1});
  }
  return out;
}

} // namespace qsp::redis
