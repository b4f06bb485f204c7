#include "core/dispatch.hpp"

#include <gtest/gtest.h>

#include <random>

namespace qsp::core {
namespace {

using namespace std::string_literals;

std::string record(std::string_view conversation_id = R"("c-9")",
                   std::string_view created_at = "1733140000123",
                   std::string_view recipients = R"(["u1","u2"])") {
  return "{\"conversation_id\":" + std::string(conversation_id) +
         ",\"created_at\":" + std::string(created_at) +
         ",\"recipients\":" + std::string(recipients) + "}";
}

struct accept_row {
  std::string input;
  dispatch expected;
};

TEST(JsonDecoder, AcceptTable) {
  const accept_row rows[] = {
      {R"({"conversation_id": "c-9", "created_at": 1733140000123, "recipients": ["u1","u2"]})",
       {"c-9", 1733140000123, {"u1", "u2"}}},
      {" \t\r\n{ \"recipients\" : [ ] , \"created_at\" : 0 , \"conversation_id\" : \"c\" } \n",
       {"c", 0, {}}},
      {record(R"("c")", "9007199254740992"), {"c", 9007199254740992, {"u1", "u2"}}},
      {record(R"("c")", "-0"), {"c", 0, {"u1", "u2"}}},
      {record(R"("c")", "5", R"(["u1","u1"])"), {"c", 5, {"u1", "u1"}}},
      {R"({"extra":{"a":[1,-2.5e+3,1E-2,0.0,true,false,null,"s\"\u00e9"],"b":{}},)"
       R"("conversation_id":"c","x":[[]],"created_at":1,"recipients":["u"],"conversation":5})",
       {"c", 1, {"u"}}},
      {record(R"("c\u002d9")"), {"c-9", 1733140000123, {"u1", "u2"}}},
      {record(R"("\u00e9\u20ac\ud83d\ude00")"),
       {"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 1733140000123, {"u1", "u2"}}},
      {record("\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf\""),
       {"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf", 1733140000123, {"u1", "u2"}}},
      {record(R"("\"\\\/\b\f\n\r\t")"), {"\"\\/\b\f\n\r\t", 1733140000123, {"u1", "u2"}}},
      {record(R"("\u0000")"), {"\0"s, 1733140000123, {"u1", "u2"}}},
      {record(R"("c")", "1", R"(["u\u00e9", "\ud800\udc00"])"),
       {"c", 1, {"u\xc3\xa9", "\xf0\x90\x80\x80"}}},
      {R"({"conversation\u005fid":"c","created\u005Fat":2,"recipient\u0073":[]})", {"c", 2, {}}},
      {R"({"conversation_id":"c","created_at":2,"recipients":[],"deep":)" +
           std::string(100, '[') + std::string(100, ']') + "}",
       {"c", 2, {}}},
  };
  const json_decoder decoder;
  dispatch_batch batch;  // decode_append: every row after the previous ones
  for (const accept_row& row : rows) {
    dispatch out;
    std::string error;
    EXPECT_TRUE(decoder.decode(row.input, out, error)) << row.input << "\n" << error;
    EXPECT_EQ(out, row.expected) << row.input;
    const size_t before = batch.size();
    EXPECT_TRUE(decoder.decode_append(row.input, batch, error)) << row.input << "\n" << error;
    ASSERT_EQ(batch.size(), before + 1) << row.input;
    EXPECT_EQ(batch.at(before), row.expected) << row.input;
  }
  // Earlier records are untouched by later ones.
  for (size_t i = 0; i < std::size(rows); ++i) EXPECT_EQ(batch.at(i), rows[i].expected);
}

struct reject_row {
  std::string input;
  std::string error;  // the whole message, or its start when ending in "..."
};

TEST(JsonDecoder, RejectTable) {
  const std::string bad_utf8 = "field conversation_id: invalid JSON at byte 20: invalid UTF-8";
  const reject_row rows[] = {
      // Not an object / not JSON.
      {"", "invalid JSON at byte 0: expected a JSON object"},
      {"   ", "invalid JSON at byte 3: expected a JSON object"},
      {"[]", "record is not a JSON object"},
      {"null", "record is not a JSON object"},
      {"42", "record is not a JSON object"},
      {R"("c")", "record is not a JSON object"},
      {"{", "invalid JSON at byte 1: expected a field name"},
      {"{\"conversation_id\"", "invalid JSON at byte 18: expected ':' after a field name"},
      {"\xef\xbb\xbf" + record(), "invalid JSON at byte 0: expected a JSON object"},
      {record() + " x", "invalid JSON at byte 78: unexpected bytes after the JSON object"},
      {record() + record(), "invalid JSON at byte 77: unexpected bytes after the JSON object"},
      {"{'conversation_id':'c'}", "invalid JSON at byte 1: expected a field name"},
      {"{/**/}", "invalid JSON at byte 1: expected a field name"},
      {R"({"a":1,})", "invalid JSON at byte 7: expected a field name"},
      {std::string("{\0}", 3), "invalid JSON at byte 1: expected a field name"},
      {record() + std::string(2, '\0'),
       "invalid JSON at byte 77: unexpected bytes after the JSON object"},
      // Missing fields.
      {R"({"created_at":1,"recipients":[]})", "field conversation_id: missing"},
      {R"({"conversation_id":"c","recipients":[]})", "field created_at: missing"},
      {R"({"conversation_id":"c","created_at":1})", "field recipients: missing"},
      {"{}", "field conversation_id: missing"},
      // conversation_id.
      {record(R"("")"), "field conversation_id: must be a non-empty string"},
      {record("5"), "field conversation_id: must be a non-empty string, got a number"},
      {record("null"), "field conversation_id: must be a non-empty string, got null"},
      {record("[\"c\"]"), "field conversation_id: must be a non-empty string, got an array"},
      {record("{}"), "field conversation_id: must be a non-empty string, got an object"},
      {record("x"), "field conversation_id: invalid JSON at byte 19: expected a value"},
      // created_at.
      {record(R"("c")", "1.0"), "field created_at: must be an integer without fraction or exponent"},
      {record(R"("c")", "1e3"), "field created_at: must be an integer without fraction or exponent"},
      {record(R"("c")", "1E3"), "field created_at: must be an integer without fraction or exponent"},
      {record(R"("c")", "-1.5"), "field created_at: must be an integer without fraction or exponent"},
      {record(R"("c")", "true"), "field created_at: must be an integer, got a boolean"},
      {record(R"("c")", "\"1\""), "field created_at: must be an integer, got a string"},
      {record(R"("c")", "null"), "field created_at: must be an integer, got null"},
      {record(R"("c")", "-1"), "field created_at: must not be negative"},
      {record(R"("c")", "9007199254740993"), "field created_at: must not exceed 2^53"},
      {record(R"("c")", "18446744073709551616"), "field created_at: must not exceed 2^53"},
      {record(R"("c")", "99999999999999999999999999"), "field created_at: must not exceed 2^53"},
      {record(R"("c")", "01"), "field created_at: invalid JSON at byte 37: expected ',' or '}' in the record object"},
      {record(R"("c")", "+1"), "field created_at: invalid JSON at byte 36: expected a value"},
      {record(R"("c")", "-"), "field created_at: invalid JSON at byte 37: invalid number"},
      {record(R"("c")", "1."), "field created_at: invalid JSON at byte 38: invalid number..."},
      {record(R"("c")", "1e"), "field created_at: invalid JSON at byte 38: invalid number..."},
      // recipients.
      {record(R"("c")", "1", R"("u1")"), "field recipients: must be an array of strings, got a string"},
      {record(R"("c")", "1", "null"), "field recipients: must be an array of strings, got null"},
      {record(R"("c")", "1", R"([""])"), "field recipients[0]: must be a non-empty string"},
      {record(R"("c")", "1", R"(["u1",2])"),
       "field recipients[1]: must be a non-empty string, got a number"},
      {record(R"("c")", "1", R"(["u1",["u2"]])"),
       "field recipients[1]: must be a non-empty string, got an array"},
      {record(R"("c")", "1", R"(["u1",])"), "field recipients[1]: invalid JSON at byte 57: expected a value"},
      {record(R"("c")", "1", R"(["u1" "u2"])"),
       "field recipients: invalid JSON at byte 57: expected ',' or ']' in recipients"},
      {record(R"("c")", "1", R"(["u1")"), "field recipients: invalid JSON at byte 56: expected ',' or ']' in recipients"},
      // Duplicates.
      {R"({"conversation_id":"a","conversation_id":"b","created_at":1,"recipients":[]})",
       "field conversation_id: duplicate field"},
      {R"({"conversation_id":"a","created_at":1,"recipients":[],"created\u005fat":1})",
       "field created_at: duplicate field"},
      // Invalid UTF-8 and escapes.
      {record("\"\xff\""), bad_utf8},
      {record("\"\xc0\xaf\""), bad_utf8},            // overlong '/'
      {record("\"\xe0\x80\xaf\""), bad_utf8},        // overlong '/'
      {record("\"\xed\xa0\x80\""), bad_utf8},        // UTF-8 encoded surrogate
      {record("\"\xf4\x90\x80\x80\""), bad_utf8},    // above U+10FFFF
      {record("\"\xe2\x82\""), bad_utf8},            // truncated
      {record("\"\x80\""), bad_utf8},                // lone continuation byte
      {record("\"\xf8\x88\x80\x80\x80\""), bad_utf8},  // 5-byte form
      {R"({"x":")" "\xff" R"(",)" + record().substr(1), "invalid JSON at byte 6: invalid UTF-8"},
      {"{\"\xff\":1}", "invalid JSON at byte 2: invalid UTF-8"},
      {record(R"("\ud800")"), "field conversation_id: invalid JSON at byte 26: unpaired high surrogate escape"},
      {record(R"("\ud800\u0041")"),
       "field conversation_id: invalid JSON at byte 32: unpaired high surrogate escape"},
      {record(R"("\udc00")"), "field conversation_id: invalid JSON at byte 26: unpaired low surrogate escape"},
      {record(R"("\x")"), "field conversation_id: invalid JSON at byte 21: invalid escape"},
      {record(R"("\u12G4")"), "field conversation_id: invalid JSON at byte 22: invalid \\u escape"},
      {R"({"conversation_id":"\u12)", "field conversation_id: invalid JSON at byte 22: truncated \\u escape"},
      {record("\"a\nb\""), "field conversation_id: invalid JSON at byte 21: unescaped control character in a string"},
      {R"({"conversation_id":"abc)", "field conversation_id: invalid JSON at byte 23: unterminated string"},
      // Unknown fields must still be valid JSON.
      {R"({"x":tru})", "invalid JSON at byte 5: invalid literal"},
      {R"({"x":[1,]})", "invalid JSON at byte 8: expected a value"},
      {R"({"x":01})", "invalid JSON at byte 6: expected ',' or '}' in the record object"},
      {R"({"x":.5})", "invalid JSON at byte 5: expected a value"},
      {R"({"x":NaN})", "invalid JSON at byte 5: expected a value"},
      {R"({"x":Infinity})", "invalid JSON at byte 5: expected a value"},
      {R"({"x":{"a" 1}})", "invalid JSON at byte 10: expected ':' after a field name"},
      {R"({"x":{"a":1 "b":2}})", "invalid JSON at byte 12: expected ',' or '}'"},
      {R"({"x":{1:2}})", "invalid JSON at byte 6: expected a field name"},
      {R"({"x":)" + std::string(200, '[') + std::string(200, ']') + "}",
       "invalid JSON at byte 133: nesting deeper than 128 levels"},
  };
  const json_decoder decoder;
  dispatch_batch batch;
  batch.push_back(dispatch{"kept", 7, {"u1", "u2"}});
  const dispatch_batch snapshot = batch;
  for (const reject_row& row : rows) {
    dispatch out;
    std::string error;
    EXPECT_FALSE(decoder.decode(row.input, out, error)) << row.input;
    // decode_append rejects alike, with the same message, and leaves the
    // batch as it was (its arena rolled back).
    std::string append_error;
    EXPECT_FALSE(decoder.decode_append(row.input, batch, append_error)) << row.input;
    EXPECT_EQ(append_error, error) << row.input;
    EXPECT_TRUE(batch == snapshot) << row.input;
    EXPECT_EQ(batch.text, snapshot.text) << row.input;
    EXPECT_EQ(batch.recipients.size(), snapshot.recipients.size()) << row.input;
    const std::string_view expected = row.error;
    constexpr std::string_view ellipsis = "...";
    if (expected.size() > 3 && expected.substr(expected.size() - 3) == ellipsis) {
      EXPECT_EQ(error.substr(0, expected.size() - 3), expected.substr(0, expected.size() - 3))
          << row.input;
    } else {
      EXPECT_EQ(error, expected) << row.input;
    }
  }
}

TEST(JsonDecoder, MissingFieldIsNamedForEachField) {
  for (const char* field : {"conversation_id", "created_at", "recipients"}) {
    std::string input = record();
    const size_t at = input.find(std::string("\"") + field + "\"");
    input.replace(at + 1, 1, "_");  // rename the key into an unknown field
    dispatch out;
    std::string error;
    EXPECT_FALSE(json_decoder().decode(input, out, error));
    EXPECT_EQ(error, std::string("field ") + field + ": missing");
  }
}

TEST(JsonDecoder, ReusesTheOutputAcrossRecords) {
  const json_decoder decoder;
  dispatch out;
  std::string error;
  ASSERT_TRUE(decoder.decode(record(R"("first-conversation")", "1", R"(["a","b","c"])"), out, error));
  EXPECT_EQ(out, (dispatch{"first-conversation", 1, {"a", "b", "c"}}));
  ASSERT_TRUE(decoder.decode(record(R"("c2")", "2", R"(["z"])"), out, error));
  EXPECT_EQ(out, (dispatch{"c2", 2, {"z"}}));
  ASSERT_TRUE(decoder.decode(record(R"("c3")", "3", "[]"), out, error));
  EXPECT_EQ(out, (dispatch{"c3", 3, {}}));
}

TEST(JsonDecoder, EveryScanPositionOfEverySpecialByte) {
  // The string scan takes 16 and 8 bytes at a time and then single bytes:
  // a byte that ends or interrupts a plain run must be found at every
  // offset and every distance from the end, in projected and skipped strings.
  const json_decoder decoder;
  std::string error;
  for (size_t before = 0; before < 40; ++before) {
    for (size_t after = 0; after < 20; ++after) {
      const std::string a(before, 'a'), b(after, 'b');
      struct variant {
        std::string raw, decoded;
      };
      const variant ok[] = {{a + b, a + b},
                            {a + "\\\"" + b, a + "\"" + b},
                            {a + "\\u00e9" + b, a + "\xc3\xa9" + b},
                            {a + "\xc3\xa9" + b, a + "\xc3\xa9" + b},
                            {a + "\xf0\x9f\x98\x80" + b, a + "\xf0\x9f\x98\x80" + b},
                            {a + "\x7f" + b, a + "\x7f" + b}};
      for (const variant& v : ok) {
        if (v.decoded.empty()) continue;
        const std::string input = "{\"x\":\"" + v.raw + "\"," + record("\"" + v.raw + "\"").substr(1);
        dispatch out;
        ASSERT_TRUE(decoder.decode(input, out, error)) << input << "\n" << error;
        EXPECT_EQ(out.conversation_id, v.decoded) << input;
        dispatch_batch batch;
        ASSERT_TRUE(decoder.decode_append(input, batch, error)) << input << "\n" << error;
        EXPECT_EQ(batch.conversation_id(0), v.decoded) << input;
      }
      for (const char* bad : {"\x01", "\n", "\x1f", "\xff", "\xc3", "\x80"}) {
        // In a skipped value and in the projected one: found at its byte.
        const std::string skipped = "{\"x\":\"" + a + bad + b + "\"}";
        dispatch out;
        ASSERT_FALSE(decoder.decode(skipped, out, error)) << skipped;
        EXPECT_NE(error.find("at byte " + std::to_string(6 + before) + ":"), std::string::npos)
            << skipped << "\n" << error;
        const std::string projected = record("\"" + a + bad + b + "\"");
        ASSERT_FALSE(decoder.decode(projected, out, error)) << projected;
        EXPECT_NE(error.find("at byte " + std::to_string(20 + before) + ":"), std::string::npos)
            << projected << "\n" << error;
      }
    }
  }
}

TEST(JsonDecoder, NonAsciiTextAtEveryBlockPosition) {
  // Once a string holds a non-ASCII byte, the scan checks UTF-8 sixteen
  // bytes at a time and hands malformed blocks back to the byte-wise path:
  // every well-formed sequence must pass at every offset (across block
  // edges too), and every malformed one, or a special byte, must be
  // reported at its first byte, as the byte-wise path always did, after
  // text of one-, two-, three- and four-byte sequences.
  const json_decoder decoder;
  std::string error;
  const std::string prefixes[] = {"\xc3\xa9", "\xe4\xb8\xad\xe6\x96\x87", "\xf0\x9f\x91\x8d", "a\xc3\xa9"};
  const char* const good[] = {"\xc3\xa9",         "\xdf\xbf",         "\xe4\xb8\xad",
                              "\xe0\xa0\x80",     "\xed\x9f\xbf",     "\xee\x80\x80",
                              "\xf0\x90\x80\x80", "\xf0\x9f\x98\x80", "\xf4\x8f\xbf\xbf"};
  const char* const bad[] = {"\xff",         "\xc0\xaf",         "\xc1\xbf",     "\xe0\x80\xaf",
                             "\xe0\x9f\xbf", "\xed\xa0\x80",     "\xed\xbf\xbf", "\xf0\x80\x80\x80",
                             "\xf0\x8f\xbf\xbf", "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xe2\x82",
                             "\x80",         "\xbf",             "\xc3",         "\xf0\x9f\x98",
                             "\xf8\x88\x80\x80\x80", "\x01", "\n"};
  for (const std::string& prefix : prefixes) {
    for (size_t before = 0; before < 40; ++before) {
      // Filler of the prefix's kind, cut to `before` bytes at a sequence edge.
      std::string head = prefix;
      while (head.size() < prefix.size() + before) head += head.size() % 2 ? "\xc3\xa9" : "x";
      for (size_t after : {size_t{0}, size_t{1}, size_t{15}, size_t{17}, size_t{40}}) {
        const std::string tail = std::string(after, 'b');
        for (const char* g : good) {
          const std::string text = head + g + tail + "\xe4\xb8\xad";
          const std::string input = "{\"x\":\"" + text + "\"," + record("\"" + text + "\"").substr(1);
          dispatch out;
          ASSERT_TRUE(decoder.decode(input, out, error)) << input << "\n" << error;
          EXPECT_EQ(out.conversation_id, text) << input;
          dispatch_batch batch;
          ASSERT_TRUE(decoder.decode_append(input, batch, error)) << input << "\n" << error;
          EXPECT_EQ(batch.conversation_id(0), text) << input;
        }
        for (const char* b : bad) {
          const std::string text = head + b + tail;
          const std::string what = static_cast<unsigned char>(b[0]) < 0x20
                                       ? "unescaped control character in a string"
                                       : "invalid UTF-8";
          const std::string skipped = "{\"x\":\"" + text + "\"}";
          dispatch out;
          ASSERT_FALSE(decoder.decode(skipped, out, error)) << skipped;
          EXPECT_EQ(error, "invalid JSON at byte " + std::to_string(6 + head.size()) + ": " + what)
              << skipped;
          const std::string projected = record("\"" + text + "\"");
          ASSERT_FALSE(decoder.decode(projected, out, error)) << projected;
          EXPECT_EQ(error, "field conversation_id: invalid JSON at byte "
                               + std::to_string(20 + head.size()) + ": " + what)
              << projected;
        }
      }
    }
  }
}

TEST(DispatchBatch, HoldsManyRecordsInOneArena) {
  std::mt19937_64 rng(5);
  const json_decoder decoder;
  dispatch_batch batch;
  std::vector<dispatch> expected;
  std::string error;
  for (int i = 0; i < 3000; ++i) {
    dispatch d{"c-" + std::to_string(rng() % 1000000), static_cast<int64_t>(rng() % 100000), {}};
    for (size_t r = rng() % 6; r > 0; --r) d.recipients.push_back("u" + std::to_string(rng() % 100));
    if (i % 3 == 0) {
      batch.push_back(d);
    } else {
      ASSERT_TRUE(decoder.decode_append(encode_json(d), batch, error)) << error;
    }
    if (i % 11 == 0) {  // a rejected record in between changes nothing
      ASSERT_FALSE(decoder.decode_append(R"({"conversation_id":"x","created_at":1,"recipients":[1]})",
                                         batch, error));
    }
    expected.push_back(d);
  }
  ASSERT_EQ(batch.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) ASSERT_EQ(batch.at(i), expected[i]) << i;
  batch.clear();
  EXPECT_TRUE(batch.empty());
  EXPECT_TRUE(batch.text.empty());
}

TEST(EncodeJson, CanonicalOutput) {
  EXPECT_EQ(encode_json(dispatch{"c-9", 1733140000123, {"u1", "u2"}}),
            R"({"conversation_id":"c-9","created_at":1733140000123,"recipients":["u1","u2"]})");
  EXPECT_EQ(encode_json(dispatch{"a\"\\\n\x01\x7f\xc3\xa9", 0, {}}),
            "{\"conversation_id\":\"a\\\"\\\\\\n\\u0001\x7f\xc3\xa9\",\"created_at\":0,"
            "\"recipients\":[]}");
}

TEST(EncodeJson, RandomDispatchesRoundTrip) {
  // Alphabet with escapes, controls and multi-byte characters.
  const std::vector<std::string> pieces = {"a", "Z", "0", "\"", "\\", "/", "\n", "\t", "\x01",
                                           std::string(1, '\0'), "\x7f", "\xc3\xa9",
                                           "\xe2\x82\xac", "\xf0\x9f\x98\x80", " "};
  std::mt19937_64 rng(3);
  auto random_string = [&] {
    std::string s;
    const size_t n = 1 + rng() % 12;
    for (size_t i = 0; i < n; ++i) s += pieces[rng() % pieces.size()];
    return s;
  };
  const json_decoder decoder;
  dispatch decoded;
  std::string error;
  for (int i = 0; i < 2000; ++i) {
    dispatch d{random_string(), static_cast<int64_t>(rng() % (max_created_at + 1)), {}};
    if (i % 7 == 0) d.created_at = max_created_at;
    const size_t recipients = rng() % 5;
    for (size_t r = 0; r < recipients; ++r) d.recipients.push_back(random_string());
    const std::string json = encode_json(d);
    ASSERT_TRUE(decoder.decode(json, decoded, error)) << json << "\n" << error;
    ASSERT_EQ(decoded, d) << json;
  }
}

}  // namespace
}  // namespace qsp::core
