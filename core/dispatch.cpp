#include "core/dispatch.hpp"

#include <array>
#include <cstdint>
#include <cstring>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace qsp::core {

namespace {

constexpr int max_depth = 128;

enum class known_field { conversation_id, created_at, recipients, other };

// By length first: most keys of an envelope are told apart without
// looking at their bytes, the rest with one fixed-size compare.
inline __attribute__((always_inline)) known_field classify(std::string_view key) {
  switch (key.size()) {
    case 15:
      if (std::memcmp(key.data(), "conversation_id", 15) == 0) return known_field::conversation_id;
      break;
    case 10:
      if (std::memcmp(key.data(), "created_at", 10) == 0) return known_field::created_at;
      if (std::memcmp(key.data(), "recipients", 10) == 0) return known_field::recipients;
      break;
    default: break;
  }
  return known_field::other;
}

const char* field_name(known_field f) {
  switch (f) {
    case known_field::conversation_id: return "conversation_id";
    case known_field::created_at: return "created_at";
    case known_field::recipients: return "recipients";
    case known_field::other: break;
  }
  return "";
}

// What a JSON value starting with `c` is, for type errors.
const char* type_name(char c) {
  switch (c) {
    case '{': return "an object";
    case '[': return "an array";
    case '"': return "a string";
    case 't':
    case 'f': return "a boolean";
    case 'n': return "null";
    default: return "a number";
  }
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void append_utf8(std::string& out, uint32_t code_point) {
  if (code_point < 0x80) {
    out += static_cast<char>(code_point);
  } else if (code_point < 0x800) {
    out += static_cast<char>(0xc0 | (code_point >> 6));
    out += static_cast<char>(0x80 | (code_point & 0x3f));
  } else if (code_point < 0x10000) {
    out += static_cast<char>(0xe0 | (code_point >> 12));
    out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (code_point & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (code_point >> 18));
    out += static_cast<char>(0x80 | ((code_point >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (code_point & 0x3f));
  }
}

// Length of the well-formed UTF-8 sequence at `p` (Unicode Table 3-7: no
// overlong forms, no surrogates, nothing above U+10FFFF), or 0.
inline __attribute__((always_inline)) size_t utf8_sequence_length(const unsigned char* p,
                                                                 const unsigned char* end) {
  auto in = [](unsigned char c, unsigned char lo, unsigned char hi) { return c >= lo && c <= hi; };
  const size_t available = static_cast<size_t>(end - p);
  const unsigned char c = p[0];
  if (in(c, 0xc2, 0xdf)) return available >= 2 && in(p[1], 0x80, 0xbf) ? 2 : 0;
  if (in(c, 0xe0, 0xef)) {
    const unsigned char lo = c == 0xe0 ? 0xa0 : 0x80;
    const unsigned char hi = c == 0xed ? 0x9f : 0xbf;
    return available >= 3 && in(p[1], lo, hi) && in(p[2], 0x80, 0xbf) ? 3 : 0;
  }
  if (in(c, 0xf0, 0xf4)) {
    const unsigned char lo = c == 0xf0 ? 0x90 : 0x80;
    const unsigned char hi = c == 0xf4 ? 0x8f : 0xbf;
    return available >= 4 && in(p[1], lo, hi) && in(p[2], 0x80, 0xbf) && in(p[3], 0x80, 0xbf)
               ? 4
               : 0;
  }
  return 0;
}

// The first position in [p, end) holding a byte a string scan must look at:
// '"', '\\', a control character (< 0x20) or a non-ASCII byte (>= 0x80).
// Sixteen bytes per step with SSE2 (every x86-64 has it): one signed
// compare flags both < 0x20 and >= 0x80 (negative as signed bytes).  Else,
// and for the last few bytes, eight per step (SWAR): each test flags a byte
// with its high bit, and the lowest flagged byte of any test is exact (a
// borrow only ever carries into bytes above a flagged one).  Never reads
// outside [p, end).
inline __attribute__((always_inline)) const char* scan_plain(const char* p, const char* end) {
#if defined(__SSE2__)
  const __m128i quote = _mm_set1_epi8('"');
  const __m128i backslash = _mm_set1_epi8('\\');
  const __m128i space = _mm_set1_epi8(0x20);
  while (end - p >= 16) {
    const __m128i w = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i hits = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(w, quote), _mm_cmpeq_epi8(w, backslash)),
                                      _mm_cmplt_epi8(w, space));
    const int mask = _mm_movemask_epi8(hits);
    if (mask != 0) return p + __builtin_ctz(static_cast<unsigned>(mask));
    p += 16;
  }
#endif
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  constexpr uint64_t ones = 0x0101010101010101u;
  constexpr uint64_t high = 0x8080808080808080u;
  while (end - p >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    const uint64_t quote8 = w ^ (ones * '"');
    const uint64_t backslash8 = w ^ (ones * '\\');
    const uint64_t flagged = ((quote8 - ones) & ~quote8) | ((backslash8 - ones) & ~backslash8) |
                             ((w - ones * 0x20) & ~w) | w;
    const uint64_t hits = flagged & high;
    if (hits != 0) return p + (__builtin_ctzll(hits) >> 3);
    p += 8;
  }
#endif
  while (p != end) {
    const auto c = static_cast<unsigned char>(*p);
    if (c == '"' || c == '\\' || c < 0x20 || c >= 0x80) break;
    ++p;
  }
  return p;
}

#if defined(__SSE2__)
// Unsigned a >= b per byte (SSE2 has signed compares only).
inline __attribute__((always_inline)) __m128i ge_u8(__m128i a, __m128i b) {
  return _mm_cmpeq_epi8(_mm_max_epu8(a, b), a);
}

// The bytes of `cur` moved up by N places, the top N bytes of `prev` below:
// per position i, the byte i - N of the input.
template <int N>
inline __attribute__((always_inline)) __m128i before(__m128i cur, __m128i prev) {
  return _mm_or_si128(_mm_slli_si128(cur, N), _mm_srli_si128(prev, 16 - N));
}

// Per byte of `cur` (prev: the 16 bytes before it): set where the UTF-8 is
// not well-formed (Unicode Table 3-7) as seen from that byte: a
// continuation byte (80..BF) where none is due or a due one missing, a
// byte that is never valid (C0, C1, F5..FF), or a second byte out of range
// after E0 (overlong), ED (surrogate), F0 (overlong) or F4 (> U+10FFFF).
// A sequence cut off at the end of `cur` shows up in the next block.
inline __attribute__((always_inline)) __m128i utf8_errors(__m128i cur, __m128i prev) {
  const __m128i p1 = before<1>(cur, prev), p2 = before<2>(cur, prev), p3 = before<3>(cur, prev);
  const __m128i due = _mm_or_si128(_mm_or_si128(ge_u8(p1, _mm_set1_epi8(static_cast<char>(0xc0))),
                                                ge_u8(p2, _mm_set1_epi8(static_cast<char>(0xe0)))),
                                   ge_u8(p3, _mm_set1_epi8(static_cast<char>(0xf0))));
  // Continuation bytes are the signed bytes below (char)0xc0.
  const __m128i continuation = _mm_cmplt_epi8(cur, _mm_set1_epi8(static_cast<char>(0xc0)));
  const __m128i never = _mm_or_si128(
    _mm_cmpeq_epi8(_mm_and_si128(cur, _mm_set1_epi8(static_cast<char>(0xfe))), _mm_set1_epi8(static_cast<char>(0xc0))),
    ge_u8(cur, _mm_set1_epi8(static_cast<char>(0xf5))));
  // Where a continuation is due after one of the four, `cur` is one
  // (else `due ^ continuation` flags it), so signed compares order it.
  auto after = [&](int lead) { return _mm_cmpeq_epi8(p1, _mm_set1_epi8(static_cast<char>(lead))); };
  const __m128i below_a0 = _mm_cmplt_epi8(cur, _mm_set1_epi8(static_cast<char>(0xa0)));
  const __m128i below_90 = _mm_cmplt_epi8(cur, _mm_set1_epi8(static_cast<char>(0x90)));
  const __m128i range = _mm_or_si128(
    _mm_or_si128(_mm_and_si128(after(0xe0), below_a0), _mm_andnot_si128(below_a0, after(0xed))),
    _mm_or_si128(_mm_and_si128(after(0xf0), below_90), _mm_andnot_si128(below_90, after(0xf4))));
  return _mm_or_si128(_mm_or_si128(_mm_xor_si128(due, continuation), never), range);
}
#endif

// Back from `p` to the first byte of the sequence it is inside of (or `p`
// if it starts one): at most three continuation bytes, never before `start`.
inline const char* sequence_start(const char* start, const char* p) {
  for (int i = 0; i < 3 && p > start && (static_cast<unsigned char>(p[-1]) & 0xc0) == 0x80; ++i) --p;
  if (p > start && static_cast<unsigned char>(p[-1]) >= 0xc0) --p;
  return p;
}

// From `p` (the first byte of a sequence, in a string), sixteen bytes per
// step: the first position holding '"', '\\' or a control character with
// every byte before it well-formed UTF-8 and no sequence cut off there; or,
// where the steps cannot tell (malformed UTF-8 in a block, fewer than
// sixteen bytes left), the first byte of a sequence at or before the point
// reached, from which the byte-wise path goes on and reports any error at
// the byte it always did.  Each block is checked whole, without a branch
// per sequence: what accented, CJK or emoji text needs.  Out of line: only
// strings with non-ASCII bytes get here.
__attribute__((noinline)) const char* scan_utf8(const char* p, const char* end) {
  const char* const start = p;
#if defined(__SSE2__)
  const __m128i quote = _mm_set1_epi8('"');
  const __m128i backslash = _mm_set1_epi8('\\');
  const __m128i control_max = _mm_set1_epi8(0x1f);
  __m128i prev = _mm_setzero_si128();
  while (end - p >= 16) {
    const __m128i w = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i stops = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(w, quote), _mm_cmpeq_epi8(w, backslash)),
                                       _mm_cmpeq_epi8(_mm_min_epu8(w, control_max), w));
    const unsigned stop = static_cast<unsigned>(_mm_movemask_epi8(stops));
    const unsigned errors = static_cast<unsigned>(_mm_movemask_epi8(utf8_errors(w, prev)));
    // Up to and including the first stop byte (a sequence cut off by it is
    // an error there), else the whole block.
    const unsigned upto = stop != 0 ? (stop ^ (stop - 1)) : 0xffffu;
    if ((errors & upto) != 0) break;
    if (stop != 0) return p + __builtin_ctz(stop);
    prev = w;
    p += 16;
  }
#endif
  return sequence_start(start, p);
}

// Where the parser puts the three projected fields.  A sink sees each field
// at most once per record (a duplicated field is rejected before its value).
//   conversation_id(v); created_at(v); recipient(index, v) for each element,
//   then recipients_end(count) (also for an empty array).
// Views passed to it are valid only during the call.

// Into a reused dispatch: no allocation once its strings are large enough.
struct dispatch_sink {
  dispatch& out;
  void conversation_id(std::string_view v) { out.conversation_id.assign(v); }
  void created_at(int64_t v) { out.created_at = v; }
  void recipient(size_t index, std::string_view v) {
    // Reuse the strings of the previous record: no allocation when they fit.
    if (index < out.recipients.size()) {
      out.recipients[index].assign(v);
    } else {
      out.recipients.emplace_back(v);
    }
  }
  void recipients_end(size_t count) { out.recipients.resize(count); }
};

// Appended to a batch's arena; the caller rolls the arena back on failure.
struct batch_sink {
  dispatch_batch& out;
  dispatch_batch::record rec;
  void conversation_id(std::string_view v) { rec.conversation_id = out.add_text(v); }
  void created_at(int64_t v) { rec.created_at = v; }
  void recipient(size_t index, std::string_view v) {
    if (index == 0) rec.first_recipient = out.recipients.size();
    // Field by field into place (a returned text_ref copied in would be
    // stored to the stack in pieces and reloaded whole: a stall).
    auto& r = out.recipients.emplace_back();
    r.offset = out.text.size();
    r.size = v.size();
    out.text.append(v);
  }
  void recipients_end(size_t count) {
    if (count == 0) rec.first_recipient = out.recipients.size();
    rec.recipient_count = count;
  }
};

// An integer literal as far as created_at cares.
struct number {
  bool negative = false;
  bool integral = true;   // no fraction, no exponent
  bool overflow = false;  // magnitude beyond uint64
  uint64_t magnitude = 0;
};

// One decode call. Errors are formatted only on failure; the success path
// does not allocate beyond growing the sink's storage.
template <class Sink>
class parser {
 public:
  parser(std::string_view text, std::string& error, Sink& out)
      : begin_(text.data()), p_(text.data()), end_(text.data() + text.size()), error_(error),
        out_(out) {}

  bool parse_record() {
    std::array<bool, 3> seen{};
    skip_whitespace();
    if (p_ == end_ || *p_ != '{') {
      if (p_ != end_ && is_value_start(*p_)) return schema_error("record is not a JSON object");
      return syntax_error("expected a JSON object");
    }
    ++p_;
    skip_whitespace();
    if (p_ != end_ && *p_ == '}') {
      ++p_;
    } else {
      for (;;) {
        if (p_ == end_ || *p_ != '"') return syntax_error("expected a field name");
        std::string_view key;
        if (!parse_string<true>(key)) return false;
        const known_field field = classify(key);
        skip_whitespace();
        if (p_ == end_ || *p_ != ':') return syntax_error("expected ':' after a field name");
        ++p_;
        skip_whitespace();
        if (field != known_field::other) {
          auto& was_seen = seen[static_cast<size_t>(field)];
          field_ = field;
          if (was_seen) return schema_error("duplicate field");
          was_seen = true;
        }
        if (!parse_field(field)) return false;
        skip_whitespace();
        // A bad delimiter right after a value is reported against its field.
        if (p_ == end_ || (*p_ != ',' && *p_ != '}')) {
          return syntax_error("expected ',' or '}' in the record object");
        }
        field_ = known_field::other;
        if (*p_++ == '}') break;
        skip_whitespace();
      }
    }
    skip_whitespace();
    if (p_ != end_) return syntax_error("unexpected bytes after the JSON object");
    for (known_field f : {known_field::conversation_id, known_field::created_at,
                          known_field::recipients}) {
      if (!seen[static_cast<size_t>(f)]) {
        field_ = f;
        return schema_error("missing");
      }
    }
    return true;
  }

 private:
  bool parse_field(known_field field) {
    switch (field) {
      case known_field::conversation_id: return parse_conversation_id();
      case known_field::created_at: return parse_created_at();
      case known_field::recipients: return parse_recipients();
      case known_field::other: break;
    }
    // Unknown scalars (most unknown fields) right here, as skip_value
    // would check them; containers go through its recursion.
    if (p_ != end_) {
      const char c = *p_;
      if (c == '"') {
        std::string_view ignored;
        return parse_string<false>(ignored);
      }
      if (c == '-' || (c >= '0' && c <= '9')) {
        number ignored;
        return parse_number(ignored);
      }
    }
    return skip_value(1);
  }

  bool parse_conversation_id() {
    if (p_ == end_ || *p_ != '"') return type_error("a non-empty string");
    std::string_view value;
    if (!parse_string<true>(value)) return false;
    if (value.empty()) return schema_error("must be a non-empty string");
    out_.conversation_id(value);
    return true;
  }

  bool parse_created_at() {
    if (p_ == end_ || !(*p_ == '-' || (*p_ >= '0' && *p_ <= '9'))) return type_error("an integer");
    number n;
    if (!parse_number(n)) return false;
    if (!n.integral) return schema_error("must be an integer without fraction or exponent");
    if (n.negative && n.magnitude != 0) return schema_error("must not be negative");
    if (n.overflow || n.magnitude > static_cast<uint64_t>(max_created_at)) {
      return schema_error("must not exceed 2^53");
    }
    out_.created_at(static_cast<int64_t>(n.magnitude));
    return true;
  }

  bool parse_recipients() {
    if (p_ == end_ || *p_ != '[') return type_error("an array of strings");
    ++p_;
    size_t count = 0;
    skip_whitespace();
    if (p_ != end_ && *p_ == ']') {
      ++p_;
      out_.recipients_end(0);
      return true;
    }
    for (;;) {
      index_ = count;
      if (p_ == end_ || *p_ != '"') return type_error("a non-empty string");
      std::string_view value;
      if (!parse_string<true>(value)) return false;
      if (value.empty()) return schema_error("must be a non-empty string");
      out_.recipient(count, value);
      ++count;
      skip_whitespace();
      if (p_ != end_ && *p_ == ',') {
        ++p_;
        skip_whitespace();
        continue;
      }
      if (p_ != end_ && *p_ == ']') {
        ++p_;
        break;
      }
      index_ = no_index;
      return syntax_error("expected ',' or ']' in recipients");
    }
    index_ = no_index;
    out_.recipients_end(count);
    return true;
  }

  // Validates any JSON value; unknown fields are checked, not kept.
  bool skip_value(int depth) {
    if (depth > max_depth) return syntax_error("nesting deeper than 128 levels");
    if (p_ == end_) return syntax_error("expected a value");
    switch (*p_) {
      case '{': return skip_container(depth, '}');
      case '[': return skip_container(depth, ']');
      case '"': {
        std::string_view ignored;
        return parse_string<false>(ignored);
      }
      case 't': return skip_literal("true");
      case 'f': return skip_literal("false");
      case 'n': return skip_literal("null");
      default: {
        if (*p_ != '-' && (*p_ < '0' || *p_ > '9')) return syntax_error("expected a value");
        number ignored;
        return parse_number(ignored);
      }
    }
  }

  bool skip_container(int depth, char close) {
    const bool is_object = close == '}';
    ++p_;
    skip_whitespace();
    if (p_ != end_ && *p_ == close) {
      ++p_;
      return true;
    }
    for (;;) {
      if (is_object) {
        if (p_ == end_ || *p_ != '"') return syntax_error("expected a field name");
        std::string_view ignored;
        if (!parse_string<false>(ignored)) return false;
        skip_whitespace();
        if (p_ == end_ || *p_ != ':') return syntax_error("expected ':' after a field name");
        ++p_;
        skip_whitespace();
      }
      if (!skip_value(depth + 1)) return false;
      skip_whitespace();
      if (p_ != end_ && *p_ == ',') {
        ++p_;
        skip_whitespace();
        continue;
      }
      if (p_ != end_ && *p_ == close) {
        ++p_;
        return true;
      }
      return syntax_error(is_object ? "expected ',' or '}'" : "expected ',' or ']'");
    }
  }

  bool skip_literal(std::string_view literal) {
    if (static_cast<size_t>(end_ - p_) < literal.size() ||
        std::string_view(p_, literal.size()) != literal) {
      return syntax_error("invalid literal");
    }
    p_ += literal.size();
    return true;
  }

  // RFC 8259: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
  bool parse_number(number& n) {
    auto is_digit = [this] { return p_ != end_ && *p_ >= '0' && *p_ <= '9'; };
    if (p_ != end_ && *p_ == '-') {
      n.negative = true;
      ++p_;
    }
    if (!is_digit()) return syntax_error("invalid number");
    if (*p_ == '0') {
      ++p_;
    } else {
      // 19 digits always fit in uint64; only longer numbers need the check.
      const char* const first = p_;
      while (is_digit() && p_ - first < 19) {
        n.magnitude = n.magnitude * 10 + static_cast<uint64_t>(*p_ - '0');
        ++p_;
      }
      while (is_digit()) {
        const auto digit = static_cast<uint64_t>(*p_ - '0');
        if (n.magnitude > (UINT64_MAX - digit) / 10) n.overflow = true;
        n.magnitude = n.magnitude * 10 + digit;
        ++p_;
      }
    }
    if (p_ != end_ && *p_ == '.') {
      n.integral = false;
      ++p_;
      if (!is_digit()) return syntax_error("invalid number: no digits after '.'");
      while (is_digit()) ++p_;
    }
    if (p_ != end_ && (*p_ == 'e' || *p_ == 'E')) {
      n.integral = false;
      ++p_;
      if (p_ != end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      if (!is_digit()) return syntax_error("invalid number: no digits in the exponent");
      while (is_digit()) ++p_;
    }
    return true;
  }

  // Parses the string whose opening quote is at p_.  Keep: `value` is a
  // slice of the input when the string has no escapes, else a view of
  // scratch_ (valid until the next string).  !Keep: the string is validated
  // exactly alike (same errors at the same bytes), nothing is copied, and
  // `value` is left alone.  The common case (plain ASCII up to the closing
  // quote) is inlined into the caller; the rest is parse_string_rest.
  template <bool Keep>
  inline __attribute__((always_inline)) bool parse_string(std::string_view& value) {
    const char* const start = p_ + 1;
    const char* const q = scan_plain(start, end_);
    if (q != end_ && *q == '"') {
      if (Keep) value = std::string_view(start, static_cast<size_t>(q - start));
      p_ = q + 1;
      return true;
    }
    p_ = q;
    return parse_string_rest<Keep>(value, start);
  }

  // The string from `start` on, p_ at its first byte that is not plain
  // ASCII (or at the end of the input).
  template <bool Keep>
  __attribute__((noinline)) bool parse_string_rest(std::string_view& value, const char* start) {
    if (Keep) scratch_.assign(start, p_);
    while (p_ != end_) {
      const auto c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        ++p_;
        if (Keep) value = scratch_;
        return true;
      }
      if (c == '\\') {
        if (!parse_escape<Keep>()) return false;
      } else if (c < 0x20) {
        return syntax_error("unescaped control character in a string");
      } else if (c < 0x80) {
        const char* const run = p_;
        p_ = scan_plain(p_ + 1, end_);
        if (Keep) scratch_.append(run, p_);
      } else {
        // Whole blocks at a time while they are well-formed.
        const char* const run = p_;
        p_ = scan_utf8(p_, end_);
        if (p_ != run) {
          if (Keep) scratch_.append(run, p_);
          continue;
        }
        const auto* u = reinterpret_cast<const unsigned char*>(p_);
        const size_t length = utf8_sequence_length(u, reinterpret_cast<const unsigned char*>(end_));
        if (length == 0) return syntax_error("invalid UTF-8");
        if (Keep) scratch_.append(p_, length);
        p_ += length;
      }
    }
    return syntax_error("unterminated string");
  }

  template <bool Keep>
  bool parse_escape() {
    ++p_;  // the backslash
    if (p_ == end_) return syntax_error("unterminated string");
    const char c = *p_++;
    char plain = 0;
    switch (c) {
      case '"': plain = '"'; break;
      case '\\': plain = '\\'; break;
      case '/': plain = '/'; break;
      case 'b': plain = '\b'; break;
      case 'f': plain = '\f'; break;
      case 'n': plain = '\n'; break;
      case 'r': plain = '\r'; break;
      case 't': plain = '\t'; break;
      case 'u': break;
      default: --p_; return syntax_error("invalid escape");
    }
    if (c != 'u') {
      if (Keep) scratch_ += plain;
      return true;
    }
    uint32_t unit = 0;
    if (!parse_hex4(unit)) return false;
    if (unit >= 0xdc00 && unit <= 0xdfff) return syntax_error("unpaired low surrogate escape");
    if (unit >= 0xd800 && unit <= 0xdbff) {
      uint32_t low = 0;
      if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u') {
        return syntax_error("unpaired high surrogate escape");
      }
      p_ += 2;
      if (!parse_hex4(low)) return false;
      if (low < 0xdc00 || low > 0xdfff) return syntax_error("unpaired high surrogate escape");
      unit = 0x10000 + ((unit - 0xd800) << 10) + (low - 0xdc00);
    }
    if (Keep) append_utf8(scratch_, unit);
    return true;
  }

  bool parse_hex4(uint32_t& unit) {
    if (end_ - p_ < 4) return syntax_error("truncated \\u escape");
    for (int i = 0; i < 4; ++i) {
      const int digit = hex_value(p_[i]);
      if (digit < 0) return syntax_error("invalid \\u escape");
      unit = (unit << 4) | static_cast<uint32_t>(digit);
    }
    p_ += 4;
    return true;
  }

  void skip_whitespace() {
    // Mostly there is none: one compare for the usual case.
    if (p_ != end_ && static_cast<unsigned char>(*p_) > ' ') return;
    while (p_ != end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\n' || *p_ == '\r')) ++p_;
  }

  static bool is_value_start(char c) {
    return c == '[' || c == '"' || c == 't' || c == 'f' || c == 'n' || c == '-' ||
           (c >= '0' && c <= '9');
  }

  // "field recipients[2]: " while inside a known field, else "".
  std::string field_prefix() const {
    if (field_ == known_field::other) return {};
    std::string prefix = "field ";
    prefix += field_name(field_);
    if (index_ != no_index) prefix += "[" + std::to_string(index_) + "]";
    return prefix + ": ";
  }

  bool schema_error(const char* message) {
    error_ = field_prefix() + message;
    return false;
  }

  bool type_error(const char* expected) {
    if (p_ == end_ || !(*p_ == '{' || is_value_start(*p_))) return syntax_error("expected a value");
    error_ = field_prefix() + "must be " + expected + ", got " + type_name(*p_);
    return false;
  }

  bool syntax_error(const char* message) {
    error_ = field_prefix() + "invalid JSON at byte " + std::to_string(p_ - begin_) + ": " + message;
    return false;
  }

  static constexpr size_t no_index = SIZE_MAX;

  const char* begin_;
  const char* p_;
  const char* end_;
  std::string& error_;
  Sink& out_;
  std::string scratch_;  // decoded text of strings with escapes or non-ASCII
  known_field field_ = known_field::other;
  size_t index_ = no_index;  // position in recipients while parsing it
};

void append_json_string(std::string& out, std::string_view s) {
  static constexpr char hex[] = "0123456789abcdef";
  out += '"';
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 0x0f];
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

}  // namespace

bool operator==(const dispatch& a, const dispatch& b) {
  return a.conversation_id == b.conversation_id && a.created_at == b.created_at &&
         a.recipients == b.recipients;
}

bool operator!=(const dispatch& a, const dispatch& b) { return !(a == b); }

void dispatch_batch::clear() {
  text.clear();
  records.clear();
  recipients.clear();
}

dispatch_batch::text_ref dispatch_batch::add_text(std::string_view s) {
  text_ref r{text.size(), s.size()};
  text.append(s);
  return r;
}

void dispatch_batch::push_back(const dispatch& d) {
  record r;
  r.conversation_id = add_text(d.conversation_id);
  r.created_at = d.created_at;
  r.first_recipient = recipients.size();
  r.recipient_count = d.recipients.size();
  for (const std::string& u : d.recipients) recipients.push_back(add_text(u));
  records.push_back(r);
}

dispatch dispatch_batch::at(size_t i) const {
  dispatch d;
  d.conversation_id = std::string(conversation_id(i));
  d.created_at = created_at(i);
  for (size_t j = 0; j < recipient_count(i); ++j) d.recipients.emplace_back(recipient(i, j));
  return d;
}

bool operator==(const dispatch_batch& a, const dispatch_batch& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a.conversation_id(i) != b.conversation_id(i) || a.created_at(i) != b.created_at(i) ||
        a.recipient_count(i) != b.recipient_count(i)) {
      return false;
    }
    for (size_t j = 0; j < a.recipient_count(i); ++j) {
      if (a.recipient(i, j) != b.recipient(i, j)) return false;
    }
  }
  return true;
}

decoder::~decoder() = default;

bool decoder::decode_append(std::string_view value, dispatch_batch& out,
                            std::string& error) const {
  dispatch d;
  if (!decode(value, d, error)) return false;
  out.push_back(d);
  return true;
}

bool json_decoder::decode(std::string_view value, dispatch& out, std::string& error) const {
  dispatch_sink sink{out};
  return parser<dispatch_sink>(value, error, sink).parse_record();
}

bool json_decoder::decode_append(std::string_view value, dispatch_batch& out,
                                 std::string& error) const {
  const size_t text = out.text.size();
  const size_t recipients = out.recipients.size();
  batch_sink sink{out, {}};
  if (!parser<batch_sink>(value, error, sink).parse_record()) {
    out.text.resize(text);
    out.recipients.resize(recipients);
    return false;
  }
  out.records.push_back(sink.rec);
  return true;
}

std::string encode_json(const dispatch& d) {
  std::string out;
  out.reserve(64 + d.conversation_id.size() + 8 * d.recipients.size());
  out += "{\"conversation_id\":";
  append_json_string(out, d.conversation_id);
  out += ",\"created_at\":";
  out += std::to_string(d.created_at);
  out += ",\"recipients\":[";
  for (size_t i = 0; i < d.recipients.size(); ++i) {
    if (i != 0) out += ',';
    append_json_string(out, d.recipients[i]);
  }
  out += "]}";
  return out;
}

}  // namespace qsp::core
