#include "redis/cluster_map.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <limits>
#include <memory>

#include "core/checkpoint.hpp"
#include "qsession/projection/types.hpp"

namespace qsp::redis {

// -- slots -----------------------------------------------------------------------

namespace {

constexpr std::array<uint16_t, 256> make_crc16_table() {
  std::array<uint16_t, 256> t{};
  for (unsigned i = 0; i < 256; ++i) {
    uint16_t crc = static_cast<uint16_t>(i << 8);
    for (int b = 0; b < 8; ++b)
      crc = static_cast<uint16_t>((crc & 0x8000) ? (crc << 1) ^ 0x1021 : crc << 1);
    t[i] = crc;
  }
  return t;
}

constexpr auto crc16_table = make_crc16_table();

constexpr uint16_t max_slot = slot_count - 1;

} // namespace

uint16_t crc16(std::string_view data) noexcept {
  uint16_t crc = 0;
  for (unsigned char c : data)
    crc = static_cast<uint16_t>((crc << 8) ^ crc16_table[((crc >> 8) ^ c) & 0xff]);
  return crc;
}

uint16_t key_slot(std::string_view key) noexcept {
  if (auto open = key.find('{'); open != std::string_view::npos) {
    auto close = key.find('}', open + 1);
    if (close != std::string_view::npos && close != open + 1)
      key = key.substr(open + 1, close - open - 1);
  }
  return crc16(key) & max_slot;
}

bool is_hash_tag_namespace(std::string_view ns) noexcept {
  if (ns.size() < 3 || ns.front() != '{' || ns.back() != '}')
    return false;
  auto inner = ns.substr(1, ns.size() - 2);
  return inner.find_first_of("{}") == std::string_view::npos;
}

// -- slot ranges -----------------------------------------------------------------

bool operator==(const slot_range& a, const slot_range& b) {
  return a.first == b.first && a.last == b.last;
}
bool operator!=(const slot_range& a, const slot_range& b) { return !(a == b); }

std::string format_ranges(const std::vector<slot_range>& ranges) {
  std::string out;
  for (auto& r : ranges) {
    if (!out.empty())
      out += ',';
    out += std::to_string(r.first);
    if (r.last != r.first)
      out += '-' + std::to_string(r.last);
  }
  return out;
}

namespace {

/// A slot number: canonical decimal within 0..16383.
std::optional<uint16_t> parse_slot(std::string_view s) {
  auto v = core::parse_decimal(s);
  if (!v || *v > max_slot)
    return std::nullopt;
  return static_cast<uint16_t>(*v);
}

} // namespace

std::optional<std::vector<slot_range>> parse_ranges(std::string_view text) {
  std::vector<slot_range> out;
  if (text.empty())
    return out;
  size_t pos = 0;
  while (true) {
    auto comma = text.find(',', pos);
    auto item = text.substr(pos, comma == std::string_view::npos ? std::string_view::npos
                                                                 : comma - pos);
    auto dash = item.find('-');
    auto lo = parse_slot(dash == std::string_view::npos ? item : item.substr(0, dash));
    auto hi = dash == std::string_view::npos ? lo : parse_slot(item.substr(dash + 1));
    if (!lo || !hi || *lo > *hi)
      return std::nullopt;
    if (!out.empty() && *lo <= out.back().last)
      return std::nullopt;  // out of order or overlapping
    out.push_back({*lo, *hi});
    if (comma == std::string_view::npos)
      break;
    pos = comma + 1;
  }
  return out;
}

std::vector<slot_range> normalise_ranges(std::vector<slot_range> ranges) {
  ranges.erase(std::remove_if(ranges.begin(), ranges.end(),
                              [](const slot_range& r) { return r.first > r.last; }),
               ranges.end());
  std::sort(ranges.begin(), ranges.end(), [](const slot_range& a, const slot_range& b) {
    return a.first < b.first || (a.first == b.first && a.last < b.last);
  });
  std::vector<slot_range> out;
  for (auto& r : ranges) {
    // uint32_t: last + 1 must not wrap at 65535.
    if (!out.empty() && uint32_t{r.first} <= uint32_t{out.back().last} + 1)
      out.back().last = std::max(out.back().last, r.last);
    else
      out.push_back(r);
  }
  return out;
}

bool covers(const std::vector<slot_range>& outer, const std::vector<slot_range>& inner) {
  auto o = normalise_ranges(outer);
  size_t i = 0;
  for (auto& r : normalise_ranges(inner)) {
    while (i < o.size() && o[i].last < r.first)
      ++i;
    // o is merged, so r must lie within a single range of it.
    if (i == o.size() || o[i].first > r.first || o[i].last < r.last)
      return false;
  }
  return true;
}

bool contains(const std::vector<slot_range>& ranges, uint16_t slot) {
  return std::any_of(ranges.begin(), ranges.end(),
                     [slot](const slot_range& r) { return r.first <= slot && slot <= r.last; });
}

size_t slot_total(const std::vector<slot_range>& ranges) {
  size_t n = 0;
  for (auto& r : normalise_ranges(ranges))
    n += size_t{r.last} - r.first + 1;
  return n;
}

// -- the slot map ----------------------------------------------------------------

slot_map::slot_map() : owner_(slot_count, -1) {}

caf::expected<slot_map> slot_map::from_shards(std::vector<shard> shards) {
  return build(std::move(shards), "cluster slot map");
}

caf::expected<slot_map> slot_map::build(std::vector<shard> shards, std::string_view what) {
  auto fail = [what](const std::string& text) {
    return caf::make_error(ec::redis_reply, std::string{what} + ": " + text);
  };
  if (shards.size() > slot_count)
    return fail(std::to_string(shards.size()) + " shards, more than there are slots");
  for (size_t i = 0; i < shards.size(); ++i) {
    auto& s = shards[i];
    if (s.primary.id.empty())
      return fail("the primary at " + s.primary.address() + " has no node id");
    for (size_t j = 0; j < i; ++j)
      if (shards[j].primary.id == s.primary.id)
        return fail("node " + s.primary.id + " is the primary of two shards");
    for (auto& r : s.slots)
      if (r.first > r.last || r.last > max_slot)
        return fail("node " + s.primary.id + ": slot range " + std::to_string(r.first) + "-"
                    + std::to_string(r.last) + " is not within 0-16383 or runs backwards");
    s.slots = normalise_ranges(std::move(s.slots));
  }
  std::sort(shards.begin(), shards.end(), [](const shard& a, const shard& b) {
    if (a.slots.empty() || b.slots.empty())
      return a.slots.empty() == b.slots.empty() ? a.primary.id < b.primary.id
                                                : !a.slots.empty();
    return a.slots.front().first < b.slots.front().first;
  });
  slot_map m;
  for (size_t i = 0; i < shards.size(); ++i)
    for (auto& r : shards[i].slots)
      for (uint32_t slot = r.first; slot <= r.last; ++slot) {
        if (auto other = m.owner_[slot]; other >= 0)
          return fail("slot " + std::to_string(slot) + " is served by both "
                      + shards[other].primary.id + " and " + shards[i].primary.id);
        m.owner_[slot] = static_cast<int16_t>(i);
      }
  m.shards_ = std::move(shards);
  return m;
}

int slot_map::shard_of(uint16_t slot) const noexcept {
  return slot < owner_.size() ? owner_[slot] : -1;
}

bool slot_map::full_coverage() const {
  return std::none_of(owner_.begin(), owner_.end(), [](int16_t o) { return o < 0; });
}

std::vector<slot_range> slot_map::uncovered() const {
  std::vector<slot_range> out;
  for (uint32_t slot = 0; slot < owner_.size(); ++slot)
    if (owner_[slot] < 0)
      out.push_back({static_cast<uint16_t>(slot), static_cast<uint16_t>(slot)});
  return normalise_ranges(std::move(out));
}

int slot_map::shard_by_node(std::string_view node_id) const noexcept {
  for (size_t i = 0; i < shards_.size(); ++i)
    if (shards_[i].primary.id == node_id)
      return static_cast<int>(i);
  return -1;
}

int slot_map::shard_by_address(std::string_view host, uint16_t port) const noexcept {
  for (size_t i = 0; i < shards_.size(); ++i)
    if (shards_[i].primary.host == host && shards_[i].primary.port == port)
      return static_cast<int>(i);
  return -1;
}

namespace {

const char* type_name(int type) {
  switch (type) {
    case REDIS_REPLY_STRING: return "a string";
    case REDIS_REPLY_ARRAY: return "an array";
    case REDIS_REPLY_INTEGER: return "an integer";
    case REDIS_REPLY_NIL: return "nil";
    case REDIS_REPLY_STATUS: return "a status";
    case REDIS_REPLY_ERROR: return "an error";
    case REDIS_REPLY_DOUBLE: return "a double";
    case REDIS_REPLY_BOOL: return "a boolean";
    case REDIS_REPLY_MAP: return "a map";
    case REDIS_REPLY_SET: return "a set";
    case REDIS_REPLY_ATTR: return "an attribute";
    case REDIS_REPLY_PUSH: return "a push";
    case REDIS_REPLY_BIGNUM: return "a big number";
    case REDIS_REPLY_VERB: return "a verbatim string";
  }
  return "of an unknown type";
}

caf::error slots_error(const std::string& where, const std::string& what) {
  return caf::make_error(ec::redis_reply, "CLUSTER SLOTS: " + where + ": " + what);
}

caf::error wrong_type(const std::string& where, const redisReply* r, const char* expected) {
  return slots_error(where, std::string{"is "} + (r ? type_name(r->type) : "missing")
                              + ", expected " + expected);
}

/// One node of an entry: [host, port, id, ...] (later elements ignored).
caf::expected<cluster_node> parse_node(const redisReply* r, const std::string& where,
                                       std::string_view fallback_host) {
  if (!r || r->type != REDIS_REPLY_ARRAY)
    return wrong_type(where, r, "an array [host, port, id, ...]");
  if (r->elements < 3)
    return slots_error(where, std::to_string(r->elements)
                                + " elements, expected at least 3 (host, port, id)");
  cluster_node n;
  auto host = r->element[0];
  if (host->type == REDIS_REPLY_NIL)
    n.host = std::string{fallback_host};
  else if (host->type == REDIS_REPLY_STRING)
    n.host = host->len == 0 ? std::string{fallback_host} : std::string{host->str, host->len};
  else
    return wrong_type(where + ": host", host, "a string");
  if (n.host == "?")
    return slots_error(where, "host is \"?\" (no hostname announced while "
                              "cluster-preferred-endpoint-type is hostname)");
  auto port = r->element[1];
  if (port->type != REDIS_REPLY_INTEGER)
    return wrong_type(where + ": port", port, "an integer");
  if (port->integer < 1 || port->integer > 65535)
    return slots_error(where, "port " + std::to_string(port->integer) + " is not within 1-65535");
  n.port = static_cast<uint16_t>(port->integer);
  auto id = r->element[2];
  if (id->type != REDIS_REPLY_STRING)
    return wrong_type(where + ": node id", id, "a string");
  if (id->len == 0)
    return slots_error(where, "empty node id");
  n.id.assign(id->str, id->len);
  return n;
}

} // namespace

caf::expected<slot_map> parse_cluster_slots(const redisReply* reply,
                                            std::string_view fallback_host) {
  if (!reply)
    return caf::make_error(ec::redis_reply, "CLUSTER SLOTS: no reply");
  if (reply->type == REDIS_REPLY_ERROR)
    return caf::make_error(ec::redis_reply,
                           "CLUSTER SLOTS: " + std::string{reply->str, reply->len});
  if (reply->type != REDIS_REPLY_ARRAY)
    return wrong_type("the reply", reply, "an array");
  std::vector<shard> shards;
  std::map<std::string, size_t, std::less<>> by_id;
  for (size_t i = 0; i < reply->elements; ++i) {
    auto where = "entry " + std::to_string(i);
    auto e = reply->element[i];
    if (e->type != REDIS_REPLY_ARRAY)
      return wrong_type(where, e, "an array [start, end, primary, replica...]");
    if (e->elements < 3)
      return slots_error(where, std::to_string(e->elements)
                                  + " elements, expected at least 3 (start, end, primary)");
    uint16_t bounds[2];
    for (int b = 0; b < 2; ++b) {
      auto x = e->element[b];
      auto what = where + (b == 0 ? ": start slot" : ": end slot");
      if (x->type != REDIS_REPLY_INTEGER)
        return wrong_type(what, x, "an integer");
      if (x->integer < 0 || x->integer > max_slot)
        return slots_error(what, std::to_string(x->integer) + " is not within 0-16383");
      bounds[b] = static_cast<uint16_t>(x->integer);
    }
    if (bounds[0] > bounds[1])
      return slots_error(where, "slot range " + std::to_string(bounds[0]) + "-"
                                  + std::to_string(bounds[1]) + " runs backwards");
    auto primary = parse_node(e->element[2], where + ": primary", fallback_host);
    if (!primary)
      return std::move(primary.error());
    std::vector<cluster_node> replicas;
    for (size_t k = 3; k < e->elements; ++k) {
      auto rep = parse_node(e->element[k], where + ": replica " + std::to_string(k - 3),
                            fallback_host);
      if (!rep)
        return std::move(rep.error());
      replicas.push_back(std::move(*rep));
    }
    auto [it, added] = by_id.emplace(primary->id, shards.size());
    if (added)
      shards.push_back(shard{std::move(*primary), {}, {}});
    auto& s = shards[it->second];
    if (!added && (s.primary.host != primary->host || s.primary.port != primary->port))
      return slots_error(where, "node " + primary->id + " is at " + primary->address()
                                  + " here and at " + s.primary.address() + " before");
    s.slots.push_back({bounds[0], bounds[1]});
    for (auto& rep : replicas) {
      auto known = std::find_if(s.replicas.begin(), s.replicas.end(),
                                [&](const cluster_node& n) { return n.id == rep.id; });
      if (known == s.replicas.end())
        s.replicas.push_back(std::move(rep));
    }
  }
  for (auto& s : shards)
    for (auto& rep : s.replicas)
      if (auto p = by_id.find(rep.id); p != by_id.end())
        return slots_error("node " + rep.id, "listed both as a primary and as a replica of "
                                               + s.primary.id);
  return slot_map::build(std::move(shards), "CLUSTER SLOTS");
}

// -- copy keys -------------------------------------------------------------------

namespace {

constexpr std::string_view copy_tag_prefix = "qsp-copy-";

/// Per slot: the smallest N whose "qsp-copy-N" hashes to it.
const std::array<uint32_t, slot_count>& copy_tag_table() {
  static const auto table = [] {
    auto t = std::make_unique<std::array<uint32_t, slot_count>>();
    t->fill(std::numeric_limits<uint32_t>::max());
    size_t filled = 0;
    std::string tag{copy_tag_prefix};
    for (uint32_t n = 0; filled < slot_count; ++n) {
      tag.resize(copy_tag_prefix.size());
      tag += std::to_string(n);
      auto& at = (*t)[crc16(tag) & max_slot];
      if (at == std::numeric_limits<uint32_t>::max()) {
        at = n;
        ++filled;
      }
    }
    return t;
  }();
  return *table;
}

} // namespace

std::string copy_tag_for_slot(uint16_t slot) {
  return std::string{copy_tag_prefix} + std::to_string(copy_tag_table()[slot & max_slot]);
}

std::string copy_key(std::string_view tag, std::string_view ns, std::string_view topic) {
  std::string out;
  out.reserve(tag.size() + ns.size() + topic.size() + 12);
  out += '{';
  out += tag;
  out += "}:";
  out += ns;
  out += ":copies:";
  out += topic;
  return out;
}

std::string node_copy_key(std::string_view tag, std::string_view ns, std::string_view topic,
                          std::string_view node_id) {
  auto key = copy_key(tag, ns, topic);
  key.push_back(':');
  key.append(node_id.data(), node_id.size());
  return key;
}

std::string tag_for_shard(const shard& s) {
  if (s.slots.empty())
    return {};
  auto lowest = std::min_element(s.slots.begin(), s.slots.end(),
                                 [](const slot_range& a, const slot_range& b) {
                                   return a.first < b.first;
                                 });
  return copy_tag_for_slot(lowest->first);
}

// -- the copy record -------------------------------------------------------------

namespace {

constexpr std::string_view f_shard_node = "shard_node";
constexpr std::string_view f_shard_replid = "shard_replid";
constexpr std::string_view f_slots = "slots";
constexpr std::string_view f_position = "p:";
constexpr std::string_view f_cluster_epoch = "cluster_epoch";
constexpr std::string_view f_config_epoch = "config_epoch";

caf::error copy_error(std::string_view field, std::string_view value, std::string_view what) {
  return caf::make_error(ec::refused, "copy: field " + std::string{field} + ": stored \""
                                        + std::string{value} + "\": " + std::string{what});
}

bool is_replid(std::string_view s) {
  return s.size() == 40 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

} // namespace

bool operator==(const shard_copy& a, const shard_copy& b) {
  return a.shard_node == b.shard_node && a.shard_replid == b.shard_replid && a.slots == b.slots
         && a.identity == b.identity && a.positions == b.positions
         && a.cluster_epoch == b.cluster_epoch && a.config_epoch == b.config_epoch;
}

std::vector<std::pair<std::string, std::string>> encode_copy_fields(const shard_copy& copy) {
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(3 + copy.identity.size() + copy.positions.size());
  out.emplace_back(f_shard_node, copy.shard_node);
  out.emplace_back(f_shard_replid, copy.shard_replid);
  out.emplace_back(f_slots, format_ranges(copy.slots));
  if (copy.cluster_epoch >= 0)
    out.emplace_back(f_cluster_epoch, std::to_string(copy.cluster_epoch));
  if (copy.config_epoch >= 0)
    out.emplace_back(f_config_epoch, std::to_string(copy.config_epoch));
  for (auto& [k, v] : copy.identity)
    out.emplace_back(k, v);
  for (auto& [p, pos] : copy.positions)
    out.emplace_back(std::string{f_position} + std::to_string(p),
                     std::to_string(pos.first) + ":" + std::to_string(pos.second));
  return out;
}

caf::expected<shard_copy> decode_copy(
  const std::vector<std::pair<std::string, std::string>>& fields) {
  shard_copy c;
  bool node = false, replid = false, slots = false;
  std::map<std::string_view, int> seen;
  for (auto& [k, v] : fields) {
    if (++seen[k] > 1)
      return copy_error(k, v, "the field appears twice");
    if (k == f_shard_node) {
      if (v.empty())
        return copy_error(k, v, "empty");
      c.shard_node = v;
      node = true;
    } else if (k == f_shard_replid) {
      if (!is_replid(v))
        return copy_error(k, v, "not a replication id (40 lowercase hex digits)");
      c.shard_replid = v;
      replid = true;
    } else if (k == f_slots) {
      auto r = parse_ranges(v);
      if (!r)
        return copy_error(k, v, "not slot ranges like \"0-5460,10923\"");
      c.slots = std::move(*r);
      slots = true;
    } else if (k == f_cluster_epoch || k == f_config_epoch) {
      auto e = core::parse_decimal(v);
      if (!e)
        return copy_error(k, v, "not an epoch (a decimal)");
      (k == f_cluster_epoch ? c.cluster_epoch : c.config_epoch) = *e;
    } else if (std::string_view{k}.substr(0, f_position.size()) == f_position) {
      auto p = core::parse_decimal(std::string_view{k}.substr(f_position.size()));
      if (!p || *p > std::numeric_limits<int32_t>::max())
        return copy_error(k, v, "the field does not name a partition");
      auto colon = v.find(':');
      auto text = std::string_view{v};
      auto next = core::parse_decimal(text.substr(0, colon));
      std::optional<int64_t> epoch;
      if (colon != std::string::npos) {
        auto e = text.substr(colon + 1);
        epoch = e == "-1" ? std::optional<int64_t>{-1} : core::parse_decimal(e);
      }
      if (!next || !epoch || *epoch > std::numeric_limits<int32_t>::max())
        return copy_error(k, v, "not \"<next_offset>:<leader_epoch>\"");
      c.positions[static_cast<int32_t>(*p)] = {*next, static_cast<int32_t>(*epoch)};
    } else {
      c.identity[k] = v;
    }
  }
  if (!node)
    return copy_error(f_shard_node, core::absent, "missing");
  if (!replid)
    return copy_error(f_shard_replid, core::absent, "missing");
  if (!slots)
    return copy_error(f_slots, core::absent, "missing");
  return c;
}

std::string to_string(copy_verdict v) {
  switch (v) {
    case copy_verdict::valid: return "valid";
    case copy_verdict::foreign: return "foreign";
    case copy_verdict::absent: return "absent";
  }
  return "unknown";
}

copy_verdict judge_copy(const std::optional<shard_copy>& copy, std::string_view primary_replid,
                        std::string_view primary_replid2) {
  if (!copy)
    return copy_verdict::absent;
  auto& mine = copy->shard_replid;
  if (mine.empty() || mine == zero_replid)
    return copy_verdict::foreign;
  if (mine == primary_replid)
    return copy_verdict::valid;
  if (primary_replid2 != zero_replid && mine == primary_replid2)
    return copy_verdict::valid;
  return copy_verdict::foreign;
}

} // namespace qsp::redis
