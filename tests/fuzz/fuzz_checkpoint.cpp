// Fuzzes validate_stored against a fixed observed identity, with an oracle
// that restates the contract: the stored state is accepted exactly when meta
// and every checkpoint carry the fields encode_meta / encode_checkpoint would
// write for this identity (extra fields allowed), under canonical keys.
//
// Input format (line based, '\n'):
//   section 0        the meta hash, or no meta if its only line is "!absent"
//   "---"            separates sections
//   section 1..n     one checkpoint each: the first line is the key suffix,
//                    every further line "field=value" (split at the first '=';
//                    a line without '=' is a field with an empty value)
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "core/checkpoint.hpp"

namespace {

namespace core = qsp::core;

void check(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "invariant violated: %s\n", what);
    std::abort();
  }
}

const core::identity observed{"dispatch", 4, "cluster-A", "ASNFZ4mrze_-3LqYdlQyEA"};

std::vector<std::string_view> split(std::string_view text, std::string_view separator) {
  std::vector<std::string_view> parts;
  for (;;) {
    const size_t at = text.find(separator);
    parts.push_back(text.substr(0, at));
    if (at == std::string_view::npos) return parts;
    text.remove_prefix(at + separator.size());
  }
}

core::hash_fields parse_hash(const std::vector<std::string_view>& lines, size_t first) {
  core::hash_fields hash;
  for (size_t i = first; i < lines.size(); ++i) {
    const size_t eq = lines[i].find('=');
    const std::string_view name = lines[i].substr(0, eq);
    const std::string_view value =
        eq == std::string_view::npos ? std::string_view() : lines[i].substr(eq + 1);
    hash[std::string(name)] = std::string(value);
  }
  return hash;
}

core::stored_state parse_state(std::string_view input) {
  core::stored_state state;
  const std::vector<std::string_view> sections = split(input, "\n---\n");
  const std::vector<std::string_view> meta_lines = split(sections[0], "\n");
  if (!(meta_lines.size() == 1 && meta_lines[0] == "!absent")) {
    state.meta = parse_hash(meta_lines, 0);
  }
  for (size_t s = 1; s < sections.size(); ++s) {
    const std::vector<std::string_view> lines = split(sections[s], "\n");
    state.checkpoints[std::string(lines[0])] = parse_hash(lines, 1);
  }
  return state;
}

bool contains_all(const core::hash_fields& stored, const core::hash_fields& required) {
  for (const auto& [name, value] : required) {
    auto it = stored.find(name);
    if (it == stored.end() || it->second != value) return false;
  }
  return true;
}

// The contract restated independently of validate_stored's structure.
bool oracle_accepts(const core::stored_state& state) {
  if (!state.meta) return state.checkpoints.empty();
  if (!contains_all(*state.meta, core::encode_meta(observed))) return false;
  for (const auto& [suffix, hash] : state.checkpoints) {
    const auto partition = core::parse_decimal(suffix);
    if (!partition || *partition >= observed.partition_count) return false;
    auto next = hash.find("next_offset");
    if (next == hash.end()) return false;
    const auto offset = core::parse_decimal(next->second);
    if (!offset) return false;
    const auto p = static_cast<int32_t>(*partition);
    if (!contains_all(hash, core::encode_checkpoint(observed, p, *offset))) return false;
  }
  return true;
}

void check_decimal_round_trip(std::string_view text) {
  if (const auto value = core::parse_decimal(text)) {
    check(*value >= 0, "parse_decimal yields a non-negative value");
    check(core::to_decimal(*value) == text, "parse_decimal accepts only canonical text");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const core::stored_state state = parse_state(input);

  for (std::string_view line : split(input, "\n")) {
    check_decimal_round_trip(line);
    const size_t eq = line.find('=');
    if (eq != std::string_view::npos) check_decimal_round_trip(line.substr(eq + 1));
  }

  const core::validation v = core::validate_stored(state, observed);
  check(v.ok() == oracle_accepts(state), "validate_stored agrees with the contract oracle");
  check(v.meta_present == state.meta.has_value(), "meta_present reflects the input");
  for (const core::problem& p : v.problems) {
    check(!p.field.empty() && !p.reason.empty(), "a problem names a field and a reason");
    check(p.to_string().find('\n') == std::string::npos, "a problem renders on one line");
  }
  if (!v.ok()) return 0;

  check(v.next_offsets.size() == state.checkpoints.size(), "every checkpoint is accepted");
  for (const auto& [partition, next_offset] : v.next_offsets) {
    check(partition >= 0 && partition < observed.partition_count, "partition in range");
    auto it = state.checkpoints.find(core::to_decimal(partition));
    check(it != state.checkpoints.end(), "accepted partition has a canonical key");
    const core::hash_fields& hash = it->second;
    check(hash.at("next_offset") == core::to_decimal(next_offset),
          "accepted next_offset round-trips through to_decimal");
    check(contains_all(hash, core::encode_checkpoint(observed, partition, next_offset)),
          "accepted checkpoint carries exactly the encoded fields");
  }
  return 0;
}
