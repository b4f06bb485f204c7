#include "core/checkpoint.hpp"

#include <array>
#include <charconv>
#include <limits>

namespace qsp::core {

namespace {

constexpr std::string_view url_safe_alphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

// Placeholder for an observed value that is a shape rather than a value.
constexpr std::string_view expect_decimal = "<decimal integer>";

// Index of c in the URL-safe alphabet, or -1.
int url_safe_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '-') return 62;
  if (c == '_') return 63;
  return -1;
}

// 22 base64 digits carry 132 bits; 16 bytes use 128, so the last digit's low
// four bits must be zero for the text to be the canonical encoding.
bool is_canonical_uuid_text(std::string_view text) {
  constexpr size_t uuid_text_size = 22;
  if (text.size() != uuid_text_size) return false;
  for (char c : text) {
    if (url_safe_value(c) < 0) return false;
  }
  return (url_safe_value(text.back()) & 0x0f) == 0;
}

// Renders a stored value on one line: quotes, backslashes and control bytes
// are escaped so a corrupted value cannot break the one-line-per-problem rule.
void append_quoted(std::string& out, std::string_view value) {
  static constexpr char hex[] = "0123456789abcdef";
  out += '"';
  for (unsigned char c : value) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 0x0f];
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
}

const std::string* find_field(const hash_fields& hash, std::string_view name) {
  auto it = hash.find(std::string(name));
  return it == hash.end() ? nullptr : &it->second;
}

// Collects problems for one hash (meta or a checkpoint) at one location.
class field_checker {
 public:
  field_checker(const hash_fields& hash, std::optional<int32_t> partition,
                std::vector<problem>& out)
      : hash_(hash), partition_(partition), out_(out) {}

  void report(std::string_view field, std::string stored, std::string observed,
              std::string reason) {
    out_.push_back(problem{partition_, std::string(field), std::move(stored), std::move(observed),
                           std::move(reason)});
  }

  // The field's value, or nullptr after reporting it missing.
  const std::string* require(std::string_view field, std::string_view observed) {
    const std::string* value = find_field(hash_, field);
    if (value == nullptr) {
      report(field, std::string(absent), std::string(observed), "field is missing");
    }
    return value;
  }

  // The field as a strict decimal, or nullopt after reporting why not.
  std::optional<int64_t> require_decimal(std::string_view field, std::string_view observed) {
    const std::string* value = require(field, observed);
    if (value == nullptr) return std::nullopt;
    std::optional<int64_t> parsed = parse_decimal(*value);
    if (!parsed) {
      report(field, *value, std::string(observed), "not a canonical decimal integer");
    }
    return parsed;
  }

  void require_equal(std::string_view field, const std::string& observed, const char* reason) {
    const std::string* value = require(field, observed);
    if (value != nullptr && *value != observed) report(field, *value, observed, reason);
  }

  // The five fields shared by meta and every checkpoint.
  void check_identity(const identity& observed) {
    const std::string version_text = to_decimal(format_version);
    if (auto version = require_decimal(fields::format_version, version_text)) {
      if (*version > format_version) {
        report(fields::format_version, to_decimal(*version), version_text,
               "format version is newer than this build supports");
      } else if (*version < format_version) {
        report(fields::format_version, to_decimal(*version), version_text,
               "format version is older than this build supports");
      }
    }
    require_equal(fields::dispatch_topic, observed.topic,
                  "stored for a different topic (renamed or reconfigured)");
    const std::string count_text = to_decimal(observed.partition_count);
    if (auto count = require_decimal(fields::partition_count, count_text)) {
      if (*count != observed.partition_count) {
        report(fields::partition_count, to_decimal(*count), count_text,
               "partition count changed");
      }
    }
    require_equal(fields::cluster_id, observed.cluster_id,
                  "stored for a different Kafka cluster");
    require_equal(fields::topic_id, observed.topic_id,
                  "topic id differs: the topic was deleted and recreated, or is another topic");
  }

 private:
  const hash_fields& hash_;
  std::optional<int32_t> partition_;
  std::vector<problem>& out_;
};

// The partition a checkpoint key suffix names, if it is a canonical number.
std::optional<int32_t> partition_from_suffix(std::string_view suffix) {
  std::optional<int64_t> value = parse_decimal(suffix);
  if (!value || *value > std::numeric_limits<int32_t>::max()) return std::nullopt;
  return static_cast<int32_t>(*value);
}

void validate_checkpoint(const std::string& suffix, const hash_fields& hash,
                         const identity& observed, validation& result) {
  std::optional<int32_t> partition = partition_from_suffix(suffix);
  if (!partition) {
    result.problems.push_back(problem{std::nullopt, std::string(fields::key), suffix,
                                      "<partition number>",
                                      "checkpoint key suffix is not a canonical partition number"});
    return;
  }
  const size_t problems_before = result.problems.size();
  field_checker check(hash, partition, result.problems);
  if (*partition >= observed.partition_count) {
    check.report(fields::partition, suffix, "partition_count=" + to_decimal(observed.partition_count),
                 "checkpoint key names a partition the topic does not have");
  }
  check.check_identity(observed);
  if (auto stored_partition = check.require_decimal(fields::partition, suffix)) {
    if (*stored_partition != *partition) {
      check.report(fields::partition, to_decimal(*stored_partition), suffix,
                   "partition field disagrees with the checkpoint key");
    }
  }
  std::optional<int64_t> next_offset = check.require_decimal(fields::next_offset, expect_decimal);
  if (next_offset && result.problems.size() == problems_before) {
    result.next_offsets[*partition] = *next_offset;
  }
}

}  // namespace

std::optional<int64_t> parse_decimal(std::string_view text) {
  constexpr size_t max_digits = 19;  // int64 max is 9223372036854775807
  if (text.empty() || text.size() > max_digits) return std::nullopt;
  if (text[0] == '0' && text.size() > 1) return std::nullopt;
  uint64_t value = 0;  // 19 digits cannot overflow uint64
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + static_cast<uint64_t>(c - '0');
  }
  if (value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
  return static_cast<int64_t>(value);
}

std::string to_decimal(int64_t value) {
  std::array<char, 24> buffer{};
  auto result = std::to_chars(buffer.data(), buffer.data() + buffer.size(), value);
  return std::string(buffer.data(), result.ptr);
}

bool operator==(const identity& a, const identity& b) {
  return a.topic == b.topic && a.partition_count == b.partition_count &&
         a.cluster_id == b.cluster_id && a.topic_id == b.topic_id;
}

bool operator!=(const identity& a, const identity& b) { return !(a == b); }

bool operator==(const problem& a, const problem& b) {
  return a.partition == b.partition && a.field == b.field && a.stored == b.stored &&
         a.observed == b.observed && a.reason == b.reason && a.prerequisite == b.prerequisite &&
         a.broker == b.broker;
}

std::string problem::to_string() const {
  std::string out;
  if (prerequisite) {
    out = "prerequisite";
  } else if (broker) {
    out = "broker";
  } else if (partition) {
    out = "partition " + to_decimal(*partition);
  } else if (field == fields::key) {
    out = "checkpoint key";
  } else {
    out = "meta";
  }
  out += ": field " + field + (prerequisite ? ": required " : broker ? ": expected " : ": stored ");
  append_quoted(out, stored);
  out += ", observed ";
  append_quoted(out, observed);
  out += ": " + reason;
  return out;
}

hash_fields encode_meta(const identity& id) {
  return hash_fields{
      {std::string(fields::format_version), to_decimal(format_version)},
      {std::string(fields::dispatch_topic), id.topic},
      {std::string(fields::partition_count), to_decimal(id.partition_count)},
      {std::string(fields::cluster_id), id.cluster_id},
      {std::string(fields::topic_id), id.topic_id},
  };
}

hash_fields encode_checkpoint(const identity& id, int32_t partition, int64_t next_offset) {
  hash_fields hash = encode_meta(id);
  hash.emplace(fields::partition, to_decimal(partition));
  hash.emplace(fields::next_offset, to_decimal(next_offset));
  return hash;
}

validation validate_stored(const stored_state& stored, const identity& observed) {
  validation result;
  result.meta_present = stored.meta.has_value();
  if (stored.meta) {
    field_checker(*stored.meta, std::nullopt, result.problems).check_identity(observed);
  } else if (!stored.checkpoints.empty()) {
    result.problems.push_back(problem{std::nullopt, std::string(fields::meta), std::string(absent),
                                      to_decimal(static_cast<int64_t>(stored.checkpoints.size())) +
                                          " checkpoint key(s)",
                                      "checkpoints exist but the meta hash is missing"});
  }
  // Meta agrees with the broker (and with the configuration): a checkpoint
  // whose identity alone differs is not a recreated topic or another
  // cluster (meta would say so too) but a damaged checkpoint, or one
  // another writer put there (issue 42: the refusal named a recreated
  // topic, and the runbook sent the operator to a rebuild).
  const bool meta_agrees = stored.meta.has_value() && result.problems.empty();
  for (const auto& [suffix, hash] : stored.checkpoints) {
    const size_t before = result.problems.size();
    validate_checkpoint(suffix, hash, observed, result);
    if (!meta_agrees)
      continue;
    for (size_t i = before; i < result.problems.size(); ++i) {
      auto& p = result.problems[i];
      const bool identity_field =
          p.field == fields::format_version || p.field == fields::dispatch_topic ||
          p.field == fields::partition_count || p.field == fields::cluster_id ||
          p.field == fields::topic_id;
      if (p.partition && identity_field)
        p.reason = "this checkpoint alone differs: meta and the broker agree on " + p.field +
                   " (the topic was not recreated); the checkpoint is damaged or another writer "
                   "wrote it (OPERATIONS.md, \"A damaged checkpoint\")";
    }
  }
  return result;
}

epoch_validation validate_epochs(const stored_state& stored,
                                 const std::map<int32_t, int64_t>& next_offsets) {
  epoch_validation out;
  for (const auto& entry : stored.epochs) {
    // Not a structured binding: clang 14 (the fuzz build) cannot capture one.
    const int32_t partition = entry.first;
    const hash_fields& hash = entry.second;
    auto field = [&](std::string_view name) -> std::string {
      auto i = hash.find(std::string(name));
      return i == hash.end() ? std::string(absent) : i->second;
    };
    auto bad = [&](std::string_view name, std::string reason) {
      out.problems.push_back(problem{partition, std::string(name), field(name),
                                     "<" + std::string(name) + " of the epoch sidecar>",
                                     std::move(reason)});
    };
    auto offset = parse_decimal(field(fields::next_offset));
    if (!offset) {
      bad(fields::next_offset, "the leader-epoch sidecar is corrupt");
      continue;
    }
    auto epoch_text = field(fields::leader_epoch);
    std::optional<int64_t> epoch = epoch_text == "-1" ? std::optional<int64_t>{-1}
                                                      : parse_decimal(epoch_text);
    if (!epoch || *epoch > std::numeric_limits<int32_t>::max()) {
      bad(fields::leader_epoch, "the leader-epoch sidecar is corrupt");
      continue;
    }
    auto cp = next_offsets.find(partition);
    if (cp != next_offsets.end() && cp->second == *offset && *epoch >= 0)
      out.leader_epochs[partition] = static_cast<int32_t>(*epoch);
  }
  return out;
}

std::vector<problem> validate_broker_identity(const identity& configured_topic_and_count,
                                              std::string_view broker_cluster_id,
                                              std::string_view broker_topic_id,
                                              int32_t broker_partition_count) {
  std::vector<problem> problems;
  auto report = [&problems](std::string_view field, std::string expected, std::string_view seen,
                            std::string reason) {
    problem p{std::nullopt, std::string(field), std::move(expected), std::string(seen),
              std::move(reason)};
    p.broker = true;
    problems.push_back(std::move(p));
  };
  if (broker_cluster_id.empty()) {
    report(fields::cluster_id, "<non-empty>", broker_cluster_id, "broker reported no cluster id");
  }
  if (broker_topic_id.empty()) {
    report(fields::topic_id, "<non-empty>", broker_topic_id,
           "broker reported no topic id (a KIP-516 topic id is required)");
  } else if (broker_topic_id == zero_topic_id) {
    report(fields::topic_id, "<non-zero>", broker_topic_id,
           "broker reported the zero topic id (a KIP-516 topic id is required)");
  } else if (!is_canonical_uuid_text(broker_topic_id)) {
    report(fields::topic_id, "<22-character Kafka Uuid text>", broker_topic_id,
           "broker topic id is not in Kafka Uuid text form");
  }
  const int32_t configured_count = configured_topic_and_count.partition_count;
  if (broker_partition_count != configured_count) {
    report(fields::partition_count, to_decimal(configured_count),
           to_decimal(broker_partition_count),
           "broker partition count differs from the configured partition count");
  } else if (configured_count <= 0) {
    report(fields::partition_count, to_decimal(configured_count),
           to_decimal(broker_partition_count), "partition count must be positive");
  }
  return problems;
}

std::string kafka_uuid_text(uint64_t most_significant_bits, uint64_t least_significant_bits) {
  std::array<uint8_t, 16> bytes{};
  for (int i = 0; i < 8; ++i) {
    bytes[i] = static_cast<uint8_t>(most_significant_bits >> (56 - 8 * i));
    bytes[8 + i] = static_cast<uint8_t>(least_significant_bits >> (56 - 8 * i));
  }
  std::string out;
  out.reserve(22);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t group = (uint32_t{bytes[i]} << 16) | (uint32_t{bytes[i + 1]} << 8) | bytes[i + 2];
    out += url_safe_alphabet[(group >> 18) & 0x3f];
    out += url_safe_alphabet[(group >> 12) & 0x3f];
    out += url_safe_alphabet[(group >> 6) & 0x3f];
    out += url_safe_alphabet[group & 0x3f];
  }
  // 16 = 5 * 3 + 1: the last byte becomes two digits, no padding.
  out += url_safe_alphabet[bytes[i] >> 2];
  out += url_safe_alphabet[(bytes[i] & 0x03) << 4];
  return out;
}

bool is_valid_topic_id_text(std::string_view text) {
  return is_canonical_uuid_text(text) && text != zero_topic_id;
}

}  // namespace qsp::core
