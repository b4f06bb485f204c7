// The dispatch record (docs/DESIGN.md §6) and its decoders. The decoder is an
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

// Decoded dispatches in one arena: the strings of every record back to back
// in `text`, the records and their recipients as offsets into it.  A batch of
// thousands of records costs a handful of allocations instead of a few per
// record, and is freed as cheaply.  Built by decoder::decode_append (or
// push_back); read through the accessors, whose views live as long as the
// batch is not modified.
struct dispatch_batch {
  struct text_ref {
    uint64_t offset = 0;
    uint64_t size = 0;
  };
  struct record {
    text_ref conversation_id;
    int64_t created_at = 0;
    uint64_t first_recipient = 0;  // index into `recipients`
    uint64_t recipient_count = 0;
  };
  std::string text;
  std::vector<record> records;
  std::vector<text_ref> recipients;

  size_t size() const { return records.size(); }
  bool empty() const { return records.empty(); }
  void clear();
  std::string_view view(text_ref r) const {
    return std::string_view(text.data() + r.offset, static_cast<size_t>(r.size));
  }
  std::string_view conversation_id(size_t i) const { return view(records[i].conversation_id); }
  int64_t created_at(size_t i) const { return records[i].created_at; }
  size_t recipient_count(size_t i) const { return static_cast<size_t>(records[i].recipient_count); }
  std::string_view recipient(size_t i, size_t j) const {
    return view(recipients[static_cast<size_t>(records[i].first_recipient) + j]);
  }
  // Appends `s` to `text`.
  text_ref add_text(std::string_view s);
  // Appends a copy of `d`.
  void push_back(const dispatch& d);
  // A copy of record `i`.
  dispatch at(size_t i) const;
};
bool operator==(const dispatch_batch& a, const dispatch_batch& b);

class decoder {
 public:
  virtual ~decoder();
  // Decodes one record value into `out`, reusing its storage (pass the same
  // object for every record to avoid allocations). Returns false with a
  // human-readable `error` naming the offending field; `out` is then
  // unspecified. Must be safe to call concurrently on one decoder.
  virtual bool decode(std::string_view value, dispatch& out, std::string& error) const = 0;
  // Decodes one record value and appends it to `out`; on failure returns
  // false with `error` as decode() has it and leaves `out` as it was.  The
  // default decodes into a dispatch and copies it; json_decoder writes the
  // projected fields straight into the batch.  Same concurrency as decode().
  virtual bool decode_append(std::string_view value, dispatch_batch& out,
                             std::string& error) const;
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
// strings fit the reused `out` storage decodes without allocating.  Strings
// are scanned eight bytes at a time; the values of unknown fields are
// validated in place, never copied.  decode() and decode_append() run the
// same parser and accept, reject and report exactly alike.
class json_decoder final : public decoder {
 public:
  bool decode(std::string_view value, dispatch& out, std::string& error) const override;
  bool decode_append(std::string_view value, dispatch_batch& out,
                     std::string& error) const override;
};

// Canonical JSON for `d` (the three fields, in the order above). The strings
// must be valid UTF-8 for the result to be valid JSON.
std::string encode_json(const dispatch& d);

}  // namespace qsp::core
