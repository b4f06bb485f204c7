// Fuzzes json_decoder: it must never crash, what it accepts must satisfy the
// record contract and survive encode_json, and it must agree with nlohmann's
// DOM parser (an independent strict RFC 8259 parser) on every input, except
// where the decoder is documented to be stricter.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/dispatch.hpp"

namespace {

namespace core = qsp::core;
using nlohmann::json;

void check(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "invariant violated: %s\n", what);
    std::abort();
  }
}

// What nlohmann makes of the input.
struct reference {
  bool parsed = false;        // valid JSON (as nlohmann sees it)
  bool range_limited = false;  // valid JSON but a float nlohmann cannot hold
  bool duplicate_known_field = false;
  json value;
};

reference parse_reference(std::string_view input) {
  reference ref;
  // nlohmann stops at a raw NUL byte as if the input ended there. A raw NUL
  // is never valid JSON (not whitespace, and unescaped in strings), so such
  // inputs are invalid as a whole.
  if (input.find('\0') != std::string_view::npos) return ref;
  int counts[3] = {0, 0, 0};
  auto count_keys = [&counts](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (key == "conversation_id") ++counts[0];
      if (key == "created_at") ++counts[1];
      if (key == "recipients") ++counts[2];
    }
    return true;
  };
  try {
    ref.value = json::parse(input.begin(), input.end(), count_keys);
    ref.parsed = true;
  } catch (const json::out_of_range&) {
    ref.range_limited = true;  // e.g. 1e400: valid JSON, not representable
  } catch (const json::parse_error&) {
  }
  ref.duplicate_known_field = counts[0] > 1 || counts[1] > 1 || counts[2] > 1;
  return ref;
}

// The record contract evaluated on nlohmann's DOM.
bool reference_accepts(const json& v) {
  if (!v.is_object()) return false;
  auto id = v.find("conversation_id");
  auto at = v.find("created_at");
  auto to = v.find("recipients");
  if (id == v.end() || at == v.end() || to == v.end()) return false;
  if (!id->is_string() || id->get_ref<const std::string&>().empty()) return false;
  if (!at->is_number_integer()) return false;
  if (at->is_number_unsigned()) {
    if (at->get<uint64_t>() > static_cast<uint64_t>(core::max_created_at)) return false;
  } else if (at->get<int64_t>() < 0 || at->get<int64_t>() > core::max_created_at) {
    return false;
  }
  if (!to->is_array()) return false;
  for (const json& r : *to) {
    if (!r.is_string() || r.get_ref<const std::string&>().empty()) return false;
  }
  return true;
}

bool starts_with_bom(std::string_view input) {
  return input.substr(0, 3) == "\xef\xbb\xbf";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const core::json_decoder decoder;
  core::dispatch out;
  std::string error;
  const bool accepted = decoder.decode(input, out, error);
  const reference ref = parse_reference(input);

  if (!accepted) {
    check(!error.empty(), "a rejection explains itself");
    const bool documented_stricter = ref.duplicate_known_field || starts_with_bom(input) ||
                                     error.find("nesting deeper") != std::string::npos;
    check(!(ref.parsed && reference_accepts(ref.value)) || documented_stricter,
          "no valid record is rejected");
    return 0;
  }

  check(!out.conversation_id.empty(), "conversation_id is non-empty");
  check(out.created_at >= 0 && out.created_at <= core::max_created_at, "created_at in range");
  for (const std::string& r : out.recipients) check(!r.empty(), "recipients are non-empty");

  check(ref.parsed || ref.range_limited, "accepted input is valid JSON");
  check(!ref.duplicate_known_field, "accepted input has no duplicated known field");
  if (ref.parsed) {
    check(reference_accepts(ref.value), "accepted input satisfies the contract");
    check(ref.value["conversation_id"].get<std::string>() == out.conversation_id,
          "conversation_id agrees with the reference");
    check(ref.value["created_at"].get<int64_t>() == out.created_at,
          "created_at agrees with the reference");
    check(ref.value["recipients"].get<std::vector<std::string>>() == out.recipients,
          "recipients agree with the reference");
  }

  const std::string encoded = core::encode_json(out);
  core::dispatch again;
  check(decoder.decode(encoded, again, error), "encode_json output decodes");
  check(again == out, "encode_json round-trips");
  check(core::encode_json(again) == encoded, "encode_json is canonical");
  return 0;
}
