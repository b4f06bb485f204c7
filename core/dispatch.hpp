// The dispatch record (DESIGN.md §6) and its decoders. The decoder is an
// interface so an embedding cluster can plug in its canonical format.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace qsp::core {

// Largest created_at accepted: 2^53, the largest integer every JSON
// implementation (IEEE double) carries exactly.
inline constexpr int64_t max_created_at = int64_t{1} << 53;

struct dispatch {
  std::string conversation_id;
  int64_t created_at = 0;  // milliseconds since the epoch
  std::vector<std::string> recipients;  // may be empty: nothing to write
};
bool operator==(const dispatch& a, const dispatch& b);
bool operator!=(const dispatch& a, const dispatch& b);

class decoder {
 public:
  virtual ~decoder();
  // Decodes one record value into `out`, reusing its storage (pass the same
  // object for every record to avoid allocations). Returns false with a
  // human-readable `error` naming the offending field; `out` is then
  // unspecified. Must be safe to call concurrently on one decoder.
  virtual bool decode(std::string_view value, dispatch& out, std::string& error) const = 0;
};

// The default format: a UTF-8 JSON object (RFC 8259), e.g.
//   {"conversation_id":"c-9","created_at":1733140000123,"recipients":["u1","u2"]}
// - conversation_id: non-empty string;
// - created_at: integer, no fraction or exponent, 0 <= value <= 2^53
//   ("-0" is the integer 0);
// - recipients: array of non-empty strings, possibly empty.
// Unknown fields are ignored (but must be valid JSON). Rejected: invalid JSON,
// invalid UTF-8 or unpaired surrogate escapes anywhere, a non-object, a
// missing or mistyped field, a duplicated known field (which value would win
// is parser-dependent, so it is ambiguous), a byte order mark, trailing
// bytes, and nesting deeper than 128 levels.
// A strict single-pass parser without a DOM: a plain-ASCII record whose
// strings fit the reused `out` storage decodes without allocating.
class json_decoder final : public decoder {
 public:
  bool decode(std::string_view value, dispatch& out, std::string& error) const override;
};

// Canonical JSON for `d` (the three fields, in the order above). The strings
// must be valid UTF-8 for the result to be valid JSON.
std::string encode_json(const dispatch& d);

}  // namespace qsp::core
