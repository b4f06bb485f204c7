// The Redis checkpoint contract (docs/DESIGN.md §3): how meta and per-partition
// checkpoint hashes are encoded, and the fail-closed validation of what a
// previous run stored against what this run observes.
//
// Pure logic: no Redis, no Kafka, no logging. Callers read the hashes
// (HGETALL) and the broker identity, then hand them to these functions.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace qsp::core {

// The only checkpoint schema this build understands; older and newer refuse.
constexpr int64_t format_version = 1;

// Field names of the meta and checkpoint hashes.
namespace fields {
inline constexpr std::string_view format_version = "format_version";
inline constexpr std::string_view dispatch_topic = "dispatch_topic";
inline constexpr std::string_view partition_count = "partition_count";
inline constexpr std::string_view cluster_id = "cluster_id";
inline constexpr std::string_view topic_id = "topic_id";
inline constexpr std::string_view partition = "partition";
inline constexpr std::string_view next_offset = "next_offset";
// Not a hash field: names the checkpoint key suffix itself when it is not a
// partition number (see problem::partition).
inline constexpr std::string_view key = "key";
// Not a hash field: names the meta hash as a whole (e.g. when it is missing).
inline constexpr std::string_view meta = "meta";
}  // namespace fields

// Placeholder text used in problems for a value that is not there.
inline constexpr std::string_view absent = "<absent>";

// Strict decimal: ASCII digits only, no sign, no spaces, no leading zeros
// (except "0" itself), within int64. Anything else is nullopt.
std::optional<int64_t> parse_decimal(std::string_view text);

// Canonical decimal text; parse_decimal(to_decimal(v)) == v for every v >= 0.
// Negative values get a leading '-' (and are therefore never parseable).
std::string to_decimal(int64_t value);

// What a checkpoint is bound to: the configured topic and partition count and
// the broker's cluster id and topic id (Kafka Uuid text form).
struct identity {
  std::string topic;
  int32_t partition_count = 0;
  std::string cluster_id;
  std::string topic_id;
};
bool operator==(const identity& a, const identity& b);
bool operator!=(const identity& a, const identity& b);

// A Redis hash as returned by HGETALL.
using hash_fields = std::map<std::string, std::string>;

// One reason to refuse. Every refusal names where (partition or meta), which
// field, the stored value and the observed value.
struct problem {
  // The partition concerned; nullopt for meta-level and broker-identity
  // problems, and for a checkpoint key whose suffix is not a partition number
  // (then field == fields::key and stored holds the suffix).
  std::optional<int32_t> partition;
  std::string field;
  std::string stored;
  std::string observed;
  std::string reason;
  /// A prerequisite (Redis or topic configuration), not stored state:
  /// `stored` holds the required value.
  bool prerequisite = false;
  /// What the broker reports about the topic, checked against the
  /// configuration before anything stored is read: `stored` holds what is
  /// expected (the configured value, or a rule such as "<non-zero>").
  bool broker = false;

  // One line: `partition 3: field next_offset: stored "17", observed "12": ...`
  // (`meta: ...` / `checkpoint key: ...` when partition is nullopt;
  // `prerequisite: field F: required "R", observed "O": ...` for one;
  // `broker: field F: expected "E", observed "O": ...` for a broker identity).
  std::string to_string() const;
};
bool operator==(const problem& a, const problem& b);

struct checkpoint {
  int32_t partition = 0;
  int64_t next_offset = 0;
};

// Everything read from Redis for one namespace and topic.
struct stored_state {
  std::optional<hash_fields> meta;  // nullopt: the meta key does not exist
  // Keyed by the suffix after `{namespace}:checkpoint:{topic}:`. Normally a
  // partition number, but a stray key may have any suffix ("07", "x", "-1").
  std::map<std::string, hash_fields> checkpoints;
  // The leader-epoch sidecars `{namespace}:epoch:{topic}:{partition}` of the
  // known partitions (outside the seven-field checkpoint hash, whose format
  // stays version 1), keyed by partition: `next_offset` (the checkpoint the
  // epoch belongs to) and `leader_epoch` (KIP-320: the partition leader epoch
  // of the log position next_offset, -1 unknown).  Written by the same
  // guarded script as the checkpoint.
  std::map<int32_t, hash_fields> epochs;
};

namespace fields {
inline constexpr std::string_view leader_epoch = "leader_epoch";
}  // namespace fields

// The leader epoch stored for each partition's checkpoint, where the sidecar
// belongs to exactly the validated checkpoint (same next_offset) and holds a
// known epoch (>= 0).  A sidecar of another offset (written by a build
// without epochs in between) or with epoch -1 means "unknown": the start is
// then not validated against the broker's epochs.  A sidecar that cannot be
// parsed is a problem (fail closed: it is part of what proves the position).
struct epoch_validation {
  std::map<int32_t, int32_t> leader_epochs;
  std::vector<problem> problems;
};
epoch_validation validate_epochs(const stored_state& stored,
                                 const std::map<int32_t, int64_t>& next_offsets);

// Exactly the fields of docs/DESIGN.md §3.
hash_fields encode_meta(const identity& id);
hash_fields encode_checkpoint(const identity& id, int32_t partition, int64_t next_offset);

struct validation {
  std::vector<problem> problems;
  // Checkpoints that passed every check, by partition. Only meaningful when
  // ok(); then it holds every stored checkpoint.
  std::map<int32_t, int64_t> next_offsets;
  bool meta_present = false;

  bool ok() const { return problems.empty(); }
};

// Fail-closed comparison of the stored state with this run's observation
// (configured topic and partition count, broker cluster id and topic id).
// Every problem is collected, not only the first. Fields beyond the contract
// are ignored so that adding informational fields later is not a breaking
// change; the format version is what guards incompatible changes.
// No meta and no checkpoints is a valid fresh start (meta_present == false).
validation validate_stored(const stored_state& stored, const identity& observed);

// Checks what the broker reports before anything is trusted: a non-empty
// cluster id, a valid non-zero topic id, and the configured partition count.
// In these problems `stored` holds the configured expectation.
std::vector<problem> validate_broker_identity(const identity& configured_topic_and_count,
                                              std::string_view broker_cluster_id,
                                              std::string_view broker_topic_id,
                                              int32_t broker_partition_count);

// Kafka's zero Uuid in text form; never a valid topic id.
inline constexpr std::string_view zero_topic_id = "AAAAAAAAAAAAAAAAAAAAAA";

// Kafka Uuid.toString(): URL-safe base64, no padding, of the 16 big-endian
// bytes msb || lsb. Always 22 characters.
std::string kafka_uuid_text(uint64_t most_significant_bits, uint64_t least_significant_bits);

// 22 URL-safe base64 characters encoding 16 bytes canonically (the unused low
// bits of the last character are zero), and not the zero Uuid.
bool is_valid_topic_id_text(std::string_view text);

}  // namespace qsp::core
