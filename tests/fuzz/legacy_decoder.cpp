// The decoder as it was before the decoding work of issue 16 (commit
// acdd0ee, core/dispatch.cpp), kept verbatim but for its namespace, as the
// reference of the differential fuzz target fuzz_decoder_diff: the current
// decoder must accept, reject and report exactly as this one did.
#include "tests/fuzz/legacy_decoder.hpp"

#include <array>
#include <cstdint>

namespace qsp::legacy {

using core::dispatch;
using core::max_created_at;

namespace {

constexpr int max_depth = 128;

enum class known_field { conversation_id, created_at, recipients, other };

known_field classify(std::string_view key) {
  if (key == "conversation_id") return known_field::conversation_id;
  if (key == "created_at") return known_field::created_at;
  if (key == "recipients") return known_field::recipients;
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
size_t utf8_sequence_length(const unsigned char* p, const unsigned char* end) {
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

// An integer literal as far as created_at cares.
struct number {
  bool negative = false;
  bool integral = true;   // no fraction, no exponent
  bool overflow = false;  // magnitude beyond uint64
  uint64_t magnitude = 0;
};

// One decode call. Errors are formatted only on failure; the success path
// does not allocate beyond growing `out`.
class parser {
 public:
  parser(std::string_view text, std::string& error)
      : begin_(text.data()), p_(text.data()), end_(text.data() + text.size()), error_(error) {}

  bool parse_record(dispatch& out) {
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
        if (!parse_string(key)) return false;
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
        if (!parse_field(field, out)) return false;
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
  bool parse_field(known_field field, dispatch& out) {
    switch (field) {
      case known_field::conversation_id: return parse_conversation_id(out.conversation_id);
      case known_field::created_at: return parse_created_at(out.created_at);
      case known_field::recipients: return parse_recipients(out.recipients);
      case known_field::other: break;
    }
    return skip_value(1);
  }

  bool parse_conversation_id(std::string& out) {
    if (p_ == end_ || *p_ != '"') return type_error("a non-empty string");
    std::string_view value;
    if (!parse_string(value)) return false;
    if (value.empty()) return schema_error("must be a non-empty string");
    out.assign(value);
    return true;
  }

  bool parse_created_at(int64_t& out) {
    if (p_ == end_ || !(*p_ == '-' || (*p_ >= '0' && *p_ <= '9'))) return type_error("an integer");
    number n;
    if (!parse_number(n)) return false;
    if (!n.integral) return schema_error("must be an integer without fraction or exponent");
    if (n.negative && n.magnitude != 0) return schema_error("must not be negative");
    if (n.overflow || n.magnitude > static_cast<uint64_t>(max_created_at)) {
      return schema_error("must not exceed 2^53");
    }
    out = static_cast<int64_t>(n.magnitude);
    return true;
  }

  bool parse_recipients(std::vector<std::string>& out) {
    if (p_ == end_ || *p_ != '[') return type_error("an array of strings");
    ++p_;
    size_t count = 0;
    skip_whitespace();
    if (p_ != end_ && *p_ == ']') {
      ++p_;
      out.clear();
      return true;
    }
    for (;;) {
      index_ = count;
      if (p_ == end_ || *p_ != '"') return type_error("a non-empty string");
      std::string_view value;
      if (!parse_string(value)) return false;
      if (value.empty()) return schema_error("must be a non-empty string");
      // Reuse the strings of the previous record: no allocation when they fit.
      if (count < out.size()) {
        out[count].assign(value);
      } else {
        out.emplace_back(value);
      }
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
    out.resize(count);
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
        return parse_string(ignored);
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
        if (!parse_string(ignored)) return false;
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

  // Parses the string whose opening quote is at p_. `value` is a slice of the
  // input when the string has no escapes, else a view of scratch_.
  bool parse_string(std::string_view& value) {
    ++p_;
    const char* const start = p_;
    // Fast path: plain ASCII without escapes.
    while (p_ != end_) {
      const auto c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        value = std::string_view(start, static_cast<size_t>(p_ - start));
        ++p_;
        return true;
      }
      if (c == '\\' || c < 0x20 || c >= 0x80) break;
      ++p_;
    }
    scratch_.assign(start, p_);
    while (p_ != end_) {
      const auto c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        ++p_;
        value = scratch_;
        return true;
      }
      if (c == '\\') {
        if (!parse_escape()) return false;
      } else if (c < 0x20) {
        return syntax_error("unescaped control character in a string");
      } else if (c < 0x80) {
        scratch_ += static_cast<char>(c);
        ++p_;
      } else {
        const auto* u = reinterpret_cast<const unsigned char*>(p_);
        const size_t length = utf8_sequence_length(u, reinterpret_cast<const unsigned char*>(end_));
        if (length == 0) return syntax_error("invalid UTF-8");
        scratch_.append(p_, length);
        p_ += length;
      }
    }
    return syntax_error("unterminated string");
  }

  bool parse_escape() {
    ++p_;  // the backslash
    if (p_ == end_) return syntax_error("unterminated string");
    const char c = *p_++;
    switch (c) {
      case '"': scratch_ += '"'; return true;
      case '\\': scratch_ += '\\'; return true;
      case '/': scratch_ += '/'; return true;
      case 'b': scratch_ += '\b'; return true;
      case 'f': scratch_ += '\f'; return true;
      case 'n': scratch_ += '\n'; return true;
      case 'r': scratch_ += '\r'; return true;
      case 't': scratch_ += '\t'; return true;
      case 'u': break;
      default: --p_; return syntax_error("invalid escape");
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
    append_utf8(scratch_, unit);
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
  std::string scratch_;  // decoded text of strings with escapes or non-ASCII
  known_field field_ = known_field::other;
  size_t index_ = no_index;  // position in recipients while parsing it
};

}  // namespace

bool decode(std::string_view value, dispatch& out, std::string& error) {
  return parser(value, error).parse_record(out);
}

}  // namespace qsp::legacy
