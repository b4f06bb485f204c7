// Redis Cluster mode, the pure part: key slots (CRC16 and hash tags), slot
// ranges, the slot map read from CLUSTER SLOTS, the copy keys and the copy
// record one shard holds (docs/DESIGN.md §15).  No I/O: the caller sends the
// commands and hands the replies here.  No exceptions: errors are
// caf::expected / std::optional.
//
// Copies.  Replication is asynchronous, so a shard failover can lose writes
// the node saw acknowledged, and a checkpoint kept on another shard would
// outlive them.  Each shard therefore holds its own copy of the positions,
// written there after that shard's replies to every ZADD below them were
// read: the copy travels in the shard's replication stream behind the data
// it vouches for.  A copy names the history it was written in (the
// primary's replid), and judge_copy() decides whether the shard still has
// that history:
// - valid:   the copy's replid is the primary's replid, or its replid2 (a
//   replica promoted by a failover keeps its former primary's history under
//   replid2, so a copy replicated to it is still its own, and so is every
//   write before it);
// - foreign: any other replid (a copy key that migrated from another shard,
//   or a history this shard no longer descends from): it proves nothing here;
// - absent:  no copy.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <hiredis/hiredis.h>

#include "caf/expected.hpp"

namespace qsp::redis {

// -- slots -----------------------------------------------------------------------

inline constexpr uint16_t slot_count = 16384;

/// CRC16-CCITT (XMODEM: polynomial 0x1021, initial 0), as Redis Cluster uses.
uint16_t crc16(std::string_view data) noexcept;

/// The slot of `key`: CRC16 of its hash tag (the text between the first '{'
/// and the first '}' after it, if non-empty), else of the whole key, mod 16384.
uint16_t key_slot(std::string_view key) noexcept;

/// True iff `ns` is exactly "{X}", X non-empty and free of '{' and '}': all
/// of the namespace's keys then share X's slot (Redis Cluster mode).
bool is_hash_tag_namespace(std::string_view ns) noexcept;

// -- slot ranges -----------------------------------------------------------------

/// Slots first..last, both included.
struct slot_range {
  uint16_t first = 0;
  uint16_t last = 0;
};
bool operator==(const slot_range& a, const slot_range& b);
bool operator!=(const slot_range& a, const slot_range& b);

/// {0-5460, 10923-16383} -> "0-5460,10923-16383"; a single slot as "7".
/// Ranges are written as given (normalise_ranges() first for the canonical form).
std::string format_ranges(const std::vector<slot_range>& ranges);

/// The inverse, strict: ranges "a-b" (a <= b) or slots "a", comma-separated,
/// in ascending order, not overlapping (adjacent is allowed), within
/// 0..16383, decimals without sign or leading zeros.  "" is no slots.
std::optional<std::vector<slot_range>> parse_ranges(std::string_view text);

/// Sorted, overlapping and adjacent ranges merged; a range with first > last
/// is dropped.
std::vector<slot_range> normalise_ranges(std::vector<slot_range> ranges);

/// True iff every slot of `inner` is in `outer` (either in any order).
bool covers(const std::vector<slot_range>& outer, const std::vector<slot_range>& inner);

/// True iff `slot` is in one of `ranges`.
bool contains(const std::vector<slot_range>& ranges, uint16_t slot);

/// How many slots `ranges` name (overlaps counted once).
size_t slot_total(const std::vector<slot_range>& ranges);

// -- the slot map ----------------------------------------------------------------

struct cluster_node {
  std::string id;  ///< the 40-character node id
  std::string host;
  uint16_t port = 0;
  std::string address() const { return host + ":" + std::to_string(port); }
};

/// A primary, its replicas and the slots it serves.
struct shard {
  cluster_node primary;
  std::vector<cluster_node> replicas;
  std::vector<slot_range> slots;  ///< normalised in a slot_map
};

/// Which shard serves which slot.
class slot_map {
public:
  /// No shards: every slot uncovered.
  slot_map();

  /// Checks and indexes `shards`: every primary id non-empty and distinct,
  /// every range within 0..16383 with first <= last, no slot in two shards.
  /// Each shard's slots are normalised, and the shards ordered by their
  /// lowest slot (shards without slots last, by id).  ec::redis_reply
  /// naming the problem otherwise.
  static caf::expected<slot_map> from_shards(std::vector<shard> shards);

  /// Index into shards() of the shard serving `slot`; -1 if none does.
  int shard_of(uint16_t slot) const noexcept;
  const std::vector<shard>& shards() const noexcept { return shards_; }
  /// Every slot is served.
  bool full_coverage() const;
  /// The slots no shard serves, normalised.
  std::vector<slot_range> uncovered() const;
  /// Index of the shard whose primary has this id; -1 if none.
  int shard_by_node(std::string_view node_id) const noexcept;
  /// Index of the shard whose primary is at host:port (a MOVED target); -1 if none.
  int shard_by_address(std::string_view host, uint16_t port) const noexcept;

private:
  friend caf::expected<slot_map> parse_cluster_slots(const redisReply*, std::string_view);
  /// from_shards(), with errors starting with `what`.
  static caf::expected<slot_map> build(std::vector<shard> shards, std::string_view what);

  std::vector<shard> shards_;
  std::vector<int16_t> owner_;  ///< per slot: index into shards_, -1 none
};

/// The slot map from a CLUSTER SLOTS reply (RESP2 or RESP3): an array of
/// [start, end, primary, replica...], each node [host, port, id, ...].  A
/// primary with several ranges appears in several entries: they are merged
/// into one shard, keyed by node id (replicas united by id).  A nil or empty
/// host means the address the command was sent to: `fallback_host`.  A host
/// "?" (cluster-preferred-endpoint-type hostname without a hostname) is an
/// error.  Any reply of another shape, an error reply among them, is
/// ec::redis_reply saying what was found where; so is what from_shards()
/// refuses.
caf::expected<slot_map> parse_cluster_slots(const redisReply* reply,
                                            std::string_view fallback_host);

// -- copy keys -------------------------------------------------------------------

/// The smallest-N "qsp-copy-N" whose slot is `slot` (mod 16384).  The
/// table of all 16384 is built on first use, thread-safe (a function-local
/// static: N = 0..copy_tag_max_n, a few milliseconds).
std::string copy_tag_for_slot(uint16_t slot);

/// The largest N copy_tag_for_slot() uses (checked by the unit tests).
inline constexpr uint32_t copy_tag_max_n = 151793;

/// "{" + tag + "}:" + ns + ":copies:" + topic: in `tag`'s slot (its hash tag
/// comes first, whatever braces `ns` holds).
std::string copy_key(std::string_view tag, std::string_view ns, std::string_view topic);

/// The key of one primary's copy: copy_key(...) + ":" + node_id.  The node
/// id keeps the copies of different primaries apart when a resharding
/// moves a copy key (with its slot) to another primary, whose own tag may
/// then be the same: each copy keeps naming the primary it vouches for.
std::string node_copy_key(std::string_view tag, std::string_view ns, std::string_view topic,
                          std::string_view node_id);

/// The copy tag of the shard's lowest slot; "" for a shard without slots.
std::string tag_for_shard(const shard& s);

// -- the copy record -------------------------------------------------------------

/// What one shard's copy hash holds.
struct shard_copy {
  std::string shard_node;   ///< the primary's node id when written
  std::string shard_replid; ///< the primary's replid when written (40 hex digits)
  std::vector<slot_range> slots;  ///< the shard's slots when written
  /// The docs/DESIGN.md §3 identity fields (format_version, dispatch_topic, ...).
  std::map<std::string, std::string> identity;
  /// partition -> {next_offset, leader_epoch (-1 unknown)}.
  std::map<int32_t, std::pair<int64_t, int32_t>> positions;
  /// CLUSTER INFO cluster_current_epoch and cluster_my_epoch of the primary
  /// when written (-1: not recorded, a copy of an older build).  A start
  /// that finds the copy valid only through a failover compares them with
  /// the promoted primary's epoch (core/copies.hpp).
  int64_t cluster_epoch = -1;
  int64_t config_epoch = -1;
};
bool operator==(const shard_copy& a, const shard_copy& b);

/// Hash fields: "shard_node", "shard_replid", "slots" (format_ranges),
/// "cluster_epoch" and "config_epoch" (when recorded), the identity fields
/// verbatim, then "p:<partition>" = "<next_offset>:<leader_epoch>"
/// per partition.  Identity names must be none of the others and not start
/// with "p:"; partitions and next offsets must be >= 0, epochs >= -1
/// (decode_copy() refuses what breaks this).
std::vector<std::pair<std::string, std::string>> encode_copy_fields(const shard_copy& copy);

/// The inverse, strict (HGETALL's pairs): shard_node, shard_replid (40 hex
/// digits) and slots (parse_ranges) required; "p:<partition>" holds
/// "<next_offset>:<leader_epoch>" in canonical decimals (epoch -1 or >= 0);
/// every other field is identity.  A field twice, missing or malformed is
/// ec::refused naming the field and its value.
caf::expected<shard_copy> decode_copy(const std::vector<std::pair<std::string, std::string>>& fields);

/// The replid Redis reports as master_replid2 when there is no former history.
inline constexpr std::string_view zero_replid = "0000000000000000000000000000000000000000";

enum class copy_verdict { valid, foreign, absent };
std::string to_string(copy_verdict v);

/// See the top of this file: valid iff the copy's replid is `primary_replid`,
/// or `primary_replid2` unless that is zero_replid; foreign otherwise (also
/// for an empty replid); absent for nullopt.
copy_verdict judge_copy(const std::optional<shard_copy>& copy, std::string_view primary_replid,
                        std::string_view primary_replid2);

} // namespace qsp::redis
