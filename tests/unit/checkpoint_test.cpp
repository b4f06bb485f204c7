#include "core/checkpoint.hpp"

#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <tuple>

namespace qsp::core {
namespace {

// ---------------------------------------------------------------- decimals

struct decimal_row {
  std::string_view text;
  std::optional<int64_t> expected;
};

TEST(ParseDecimal, Table) {
  using namespace std::string_view_literals;
  const decimal_row rows[] = {
      {"0", 0},
      {"1", 1},
      {"42", 42},
      {"1000000", 1000000},
      {"9223372036854775807", INT64_MAX},
      {"", std::nullopt},
      {"-1", std::nullopt},
      {"-0", std::nullopt},
      {"+1", std::nullopt},
      {" 1", std::nullopt},
      {"1 ", std::nullopt},
      {"01", std::nullopt},
      {"00", std::nullopt},
      {"9223372036854775808", std::nullopt},
      {"18446744073709551616", std::nullopt},
      {"99999999999999999999", std::nullopt},
      {"1.0", std::nullopt},
      {"1e3", std::nullopt},
      {"0x1", std::nullopt},
      {"1_000", std::nullopt},
      {"\xd9\xa1", std::nullopt},  // ARABIC-INDIC DIGIT ONE
      {"1\0"sv, std::nullopt},
  };
  for (const auto& row : rows) {
    EXPECT_EQ(parse_decimal(row.text), row.expected) << "input \"" << row.text << '"';
  }
}

TEST(ToDecimal, RoundTripsThroughParseDecimal) {
  for (int64_t v : {int64_t{0}, int64_t{1}, int64_t{9}, int64_t{10}, int64_t{1733140000123},
                    INT64_MAX}) {
    EXPECT_EQ(parse_decimal(to_decimal(v)), v);
  }
  std::mt19937_64 rng(7);
  for (int i = 0; i < 10000; ++i) {
    const auto v = static_cast<int64_t>(rng() >> (1 + rng() % 63));
    ASSERT_EQ(parse_decimal(to_decimal(v)), v) << v;
  }
  EXPECT_EQ(to_decimal(-1), "-1");
  EXPECT_EQ(parse_decimal(to_decimal(-1)), std::nullopt);
}

// ---------------------------------------------------------------- encoding

const identity observed_id{"dispatch", 4, "cluster-A", "ASNFZ4mrze_-3LqYdlQyEA"};

TEST(Encode, MetaHasExactlyTheContractFields) {
  const hash_fields expected{{"format_version", "1"},
                             {"dispatch_topic", "dispatch"},
                             {"partition_count", "4"},
                             {"cluster_id", "cluster-A"},
                             {"topic_id", "ASNFZ4mrze_-3LqYdlQyEA"}};
  EXPECT_EQ(encode_meta(observed_id), expected);
}

TEST(Encode, CheckpointHasExactlyTheContractFields) {
  const hash_fields expected{{"format_version", "1"},
                             {"dispatch_topic", "dispatch"},
                             {"partition_count", "4"},
                             {"cluster_id", "cluster-A"},
                             {"topic_id", "ASNFZ4mrze_-3LqYdlQyEA"},
                             {"partition", "3"},
                             {"next_offset", "17"}};
  EXPECT_EQ(encode_checkpoint(observed_id, 3, 17), expected);
}

TEST(Identity, Equality) {
  identity other = observed_id;
  EXPECT_EQ(other, observed_id);
  other.topic_id = "AAAAAAAAAAAAAAAAAAAAAQ";
  EXPECT_NE(other, observed_id);
}

// -------------------------------------------------------------- validation

stored_state good_state() {
  stored_state s;
  s.meta = encode_meta(observed_id);
  s.checkpoints["0"] = encode_checkpoint(observed_id, 0, 10);
  s.checkpoints["2"] = encode_checkpoint(observed_id, 2, 0);
  s.checkpoints["3"] = encode_checkpoint(observed_id, 3, INT64_MAX);
  return s;
}

// A problem without its free-text reason, for exact comparison.
using located = std::tuple<std::optional<int32_t>, std::string, std::string, std::string>;

std::vector<located> locate(const std::vector<problem>& problems) {
  std::vector<located> out;
  for (const problem& p : problems) out.emplace_back(p.partition, p.field, p.stored, p.observed);
  return out;
}

TEST(ValidateStored, AcceptsWhatEncodeProduces) {
  const validation v = validate_stored(good_state(), observed_id);
  EXPECT_TRUE(v.ok());
  EXPECT_TRUE(v.meta_present);
  EXPECT_EQ(v.next_offsets, (std::map<int32_t, int64_t>{{0, 10}, {2, 0}, {3, INT64_MAX}}));
}

TEST(ValidateStored, NothingStoredIsAFreshStart) {
  const validation v = validate_stored(stored_state{}, observed_id);
  EXPECT_TRUE(v.ok());
  EXPECT_FALSE(v.meta_present);
  EXPECT_TRUE(v.next_offsets.empty());
}

TEST(ValidateStored, MetaWithoutCheckpointsIsValid) {
  stored_state s;
  s.meta = encode_meta(observed_id);
  const validation v = validate_stored(s, observed_id);
  EXPECT_TRUE(v.ok());
  EXPECT_TRUE(v.meta_present);
  EXPECT_TRUE(v.next_offsets.empty());
}

TEST(ValidateStored, UnknownFieldsAreIgnored) {
  stored_state s = good_state();
  (*s.meta)["written_by"] = "qsession-projection 0.1";
  s.checkpoints["0"]["updated_at"] = "whenever";
  EXPECT_TRUE(validate_stored(s, observed_id).ok());
}

// What the observed identity says for each identity field.
std::string observed_text(std::string_view field) {
  if (field == fields::format_version) return "1";
  if (field == fields::dispatch_topic) return observed_id.topic;
  if (field == fields::partition_count) return "4";
  if (field == fields::cluster_id) return observed_id.cluster_id;
  return observed_id.topic_id;
}

const std::string_view identity_fields[] = {fields::format_version, fields::dispatch_topic,
                                            fields::partition_count, fields::cluster_id,
                                            fields::topic_id};

TEST(ValidateStored, EveryMissingMetaFieldRefuses) {
  for (std::string_view field : identity_fields) {
    stored_state s = good_state();
    s.meta->erase(std::string(field));
    const validation v = validate_stored(s, observed_id);
    EXPECT_EQ(locate(v.problems), (std::vector<located>{{std::nullopt, std::string(field),
                                                         "<absent>", observed_text(field)}}))
        << field;
  }
}

TEST(ValidateStored, EveryMissingCheckpointFieldRefuses) {
  for (std::string_view field : identity_fields) {
    stored_state s = good_state();
    s.checkpoints["2"].erase(std::string(field));
    const validation v = validate_stored(s, observed_id);
    EXPECT_EQ(locate(v.problems),
              (std::vector<located>{{2, std::string(field), "<absent>", observed_text(field)}}))
        << field;
    EXPECT_EQ(v.next_offsets.count(2), 0u);
  }
  for (auto [field, observed] : {std::pair{fields::partition, "2"},
                                 std::pair{fields::next_offset, "<decimal integer>"}}) {
    stored_state s = good_state();
    s.checkpoints["2"].erase(std::string(field));
    const validation v = validate_stored(s, observed_id);
    EXPECT_EQ(locate(v.problems), (std::vector<located>{{2, std::string(field), "<absent>",
                                                         observed}}))
        << field;
  }
}

// Issue 42: a damaged checkpoint and a recreated topic are told apart.  Meta
// agreeing with the broker, one checkpoint's topic_id different: the reason
// names a damaged checkpoint, not a recreated topic; meta and every
// checkpoint naming another topic id: a recreated topic.
TEST(ValidateStored, ADamagedCheckpointIsNotARecreatedTopic) {
  stored_state damaged = good_state();
  damaged.checkpoints["2"]["topic_id"] = "Q1b4AAAAAAAAAAAAAAAAAA";
  auto v = validate_stored(damaged, observed_id);
  ASSERT_EQ(v.problems.size(), 1u);
  EXPECT_EQ(v.problems[0].partition, std::optional<int32_t>{2});
  EXPECT_NE(v.problems[0].reason.find("the checkpoint is damaged"), std::string::npos)
      << v.problems[0].reason;
  EXPECT_NE(v.problems[0].reason.find("A damaged checkpoint"), std::string::npos);
  EXPECT_EQ(v.problems[0].reason.find("recreated, or"), std::string::npos) << v.problems[0].reason;

  stored_state recreated = good_state();
  (*recreated.meta)["topic_id"] = "Q1b4AAAAAAAAAAAAAAAAAA";
  for (auto& [suffix, hash] : recreated.checkpoints)
    hash["topic_id"] = "Q1b4AAAAAAAAAAAAAAAAAA";
  v = validate_stored(recreated, observed_id);
  ASSERT_FALSE(v.problems.empty());
  for (auto& p : v.problems)
    EXPECT_NE(p.reason.find("deleted and recreated"), std::string::npos) << p.to_string();
}

// One corruption of the stored state and exactly the problems it must yield.
struct refusal_row {
  const char* name;
  std::function<void(stored_state&)> corrupt;
  std::vector<located> expected;
};

TEST(ValidateStored, RefusalTable) {
  const std::string n = "<decimal integer>";
  const std::vector<refusal_row> rows = {
      {"meta format_version newer", [](stored_state& s) { (*s.meta)["format_version"] = "2"; },
       {{std::nullopt, "format_version", "2", "1"}}},
      {"meta format_version older", [](stored_state& s) { (*s.meta)["format_version"] = "0"; },
       {{std::nullopt, "format_version", "0", "1"}}},
      {"meta format_version not an integer",
       [](stored_state& s) { (*s.meta)["format_version"] = "1.0"; },
       {{std::nullopt, "format_version", "1.0", "1"}}},
      {"meta format_version leading zero",
       [](stored_state& s) { (*s.meta)["format_version"] = "01"; },
       {{std::nullopt, "format_version", "01", "1"}}},
      {"meta format_version empty", [](stored_state& s) { (*s.meta)["format_version"] = ""; },
       {{std::nullopt, "format_version", "", "1"}}},
      {"checkpoint format_version newer",
       [](stored_state& s) { s.checkpoints["0"]["format_version"] = "2"; },
       {{0, "format_version", "2", "1"}}},
      {"topic renamed in meta", [](stored_state& s) { (*s.meta)["dispatch_topic"] = "dispatch-v1"; },
       {{std::nullopt, "dispatch_topic", "dispatch-v1", "dispatch"}}},
      {"topic differs in checkpoint",
       [](stored_state& s) { s.checkpoints["3"]["dispatch_topic"] = "Dispatch"; },
       {{3, "dispatch_topic", "Dispatch", "dispatch"}}},
      {"partition count differs meta vs config",
       [](stored_state& s) { (*s.meta)["partition_count"] = "8"; },
       {{std::nullopt, "partition_count", "8", "4"}}},
      {"partition count unparsable", [](stored_state& s) { (*s.meta)["partition_count"] = "four"; },
       {{std::nullopt, "partition_count", "four", "4"}}},
      {"partition count differs in checkpoint",
       [](stored_state& s) { s.checkpoints["0"]["partition_count"] = "3"; },
       {{0, "partition_count", "3", "4"}}},
      {"cluster switched", [](stored_state& s) { (*s.meta)["cluster_id"] = "cluster-B"; },
       {{std::nullopt, "cluster_id", "cluster-B", "cluster-A"}}},
      {"cluster differs in checkpoint",
       [](stored_state& s) { s.checkpoints["2"]["cluster_id"] = ""; },
       {{2, "cluster_id", "", "cluster-A"}}},
      {"same-name topic recreated",
       [](stored_state& s) {
         for (auto* hash : {&*s.meta, &s.checkpoints["0"], &s.checkpoints["2"], &s.checkpoints["3"]})
           (*hash)["topic_id"] = "AAAAAAAAAAAAAAAAAAAAAQ";
       },
       {{std::nullopt, "topic_id", "AAAAAAAAAAAAAAAAAAAAAQ", "ASNFZ4mrze_-3LqYdlQyEA"},
        {0, "topic_id", "AAAAAAAAAAAAAAAAAAAAAQ", "ASNFZ4mrze_-3LqYdlQyEA"},
        {2, "topic_id", "AAAAAAAAAAAAAAAAAAAAAQ", "ASNFZ4mrze_-3LqYdlQyEA"},
        {3, "topic_id", "AAAAAAAAAAAAAAAAAAAAAQ", "ASNFZ4mrze_-3LqYdlQyEA"}}},
      {"partition field disagrees with key",
       [](stored_state& s) { s.checkpoints["2"]["partition"] = "3"; }, {{2, "partition", "3", "2"}}},
      {"partition field unparsable", [](stored_state& s) { s.checkpoints["2"]["partition"] = "02"; },
       {{2, "partition", "02", "2"}}},
      {"next_offset empty", [](stored_state& s) { s.checkpoints["0"]["next_offset"] = ""; },
       {{0, "next_offset", "", n}}},
      {"next_offset negative", [](stored_state& s) { s.checkpoints["0"]["next_offset"] = "-1"; },
       {{0, "next_offset", "-1", n}}},
      {"next_offset exponent", [](stored_state& s) { s.checkpoints["0"]["next_offset"] = "1e3"; },
       {{0, "next_offset", "1e3", n}}},
      {"next_offset leading zeros", [](stored_state& s) { s.checkpoints["0"]["next_offset"] = "007"; },
       {{0, "next_offset", "007", n}}},
      {"next_offset overflows int64",
       [](stored_state& s) { s.checkpoints["0"]["next_offset"] = "9223372036854775808"; },
       {{0, "next_offset", "9223372036854775808", n}}},
      {"checkpoints but meta missing", [](stored_state& s) { s.meta.reset(); },
       {{std::nullopt, "meta", "<absent>", "3 checkpoint key(s)"}}},
      {"checkpoint for partition == partition_count",
       [](stored_state& s) { s.checkpoints["4"] = encode_checkpoint(observed_id, 4, 5); },
       {{4, "partition", "4", "partition_count=4"}}},
      {"checkpoint for partition > partition_count",
       [](stored_state& s) { s.checkpoints["17"] = encode_checkpoint(observed_id, 17, 5); },
       {{17, "partition", "17", "partition_count=4"}}},
      {"several problems are all reported",
       [](stored_state& s) {
         (*s.meta)["cluster_id"] = "cluster-B";
         (*s.meta)["format_version"] = "3";
         s.checkpoints["0"]["next_offset"] = "x";
         s.checkpoints["2"].erase("partition");
       },
       {{std::nullopt, "format_version", "3", "1"},
        {std::nullopt, "cluster_id", "cluster-B", "cluster-A"},
        {0, "next_offset", "x", n},
        {2, "partition", "<absent>", "2"}}},
  };
  for (const refusal_row& row : rows) {
    stored_state s = good_state();
    row.corrupt(s);
    const validation v = validate_stored(s, observed_id);
    EXPECT_FALSE(v.ok()) << row.name;
    EXPECT_EQ(locate(v.problems), row.expected) << row.name;
    for (const problem& p : v.problems) EXPECT_FALSE(p.reason.empty()) << row.name;
  }
}

TEST(ValidateStored, StraySuffixesRefuse) {
  for (const char* suffix : {"07", "x", "-1", "", " 1", "1 ", "+1", "2147483648", "1e0"}) {
    stored_state s = good_state();
    s.checkpoints[suffix] = encode_checkpoint(observed_id, 1, 5);
    const validation v = validate_stored(s, observed_id);
    EXPECT_EQ(locate(v.problems),
              (std::vector<located>{{std::nullopt, "key", suffix, "<partition number>"}}))
        << '"' << suffix << '"';
    EXPECT_EQ(v.next_offsets.size(), 3u);
  }
}

TEST(ValidateStored, RejectedCheckpointsHaveNoNextOffset) {
  stored_state s = good_state();
  s.checkpoints["2"]["cluster_id"] = "cluster-B";
  const validation v = validate_stored(s, observed_id);
  EXPECT_EQ(v.next_offsets, (std::map<int32_t, int64_t>{{0, 10}, {3, INT64_MAX}}));
}

// ---------------------------------------------------------------- problems

TEST(Problem, ToStringNamesLocationFieldStoredAndObserved) {
  EXPECT_EQ((problem{3, "next_offset", "17", "12", "checkpoint is above the high watermark"})
                .to_string(),
            "partition 3: field next_offset: stored \"17\", observed \"12\": "
            "checkpoint is above the high watermark");
  EXPECT_EQ((problem{std::nullopt, "topic_id", "a", "b", "differs"}).to_string(),
            "meta: field topic_id: stored \"a\", observed \"b\": differs");
  EXPECT_EQ((problem{std::nullopt, "key", "07", "<partition number>", "stray"}).to_string(),
            "checkpoint key: field key: stored \"07\", observed \"<partition number>\": stray");
}

TEST(Problem, ToStringStaysOnOneLine) {
  const std::string line =
      problem{0, "cluster_id", "a\nb\"c\\", std::string("\x01\x7f", 2), "r"}.to_string();
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_EQ(line,
            "partition 0: field cluster_id: stored \"a\\x0ab\\\"c\\\\\", observed \"\\x01\\x7f\": r");
}

TEST(Problem, EveryValidationProblemRendersItsParts) {
  stored_state s = good_state();
  (*s.meta)["topic_id"] = "other";
  s.checkpoints["0"]["next_offset"] = "bad";
  for (const problem& p : validate_stored(s, observed_id).problems) {
    const std::string line = p.to_string();
    EXPECT_NE(line.find("field " + p.field), std::string::npos) << line;
    EXPECT_NE(line.find("stored \"" + p.stored + "\""), std::string::npos) << line;
    EXPECT_NE(line.find("observed \"" + p.observed + "\""), std::string::npos) << line;
  }
}

// ----------------------------------------------------------- broker identity

TEST(ValidateBrokerIdentity, AcceptsAGoodBroker) {
  EXPECT_TRUE(validate_broker_identity(observed_id, "cluster-A", "ASNFZ4mrze_-3LqYdlQyEA", 4).empty());
}

TEST(ValidateBrokerIdentity, RefusalTable) {
  struct row {
    std::string_view cluster_id;
    std::string_view topic_id;
    int32_t partition_count;
    std::vector<located> expected;
  };
  const std::string good_topic = "ASNFZ4mrze_-3LqYdlQyEA";
  const row rows[] = {
      {"", good_topic, 4, {{std::nullopt, "cluster_id", "<non-empty>", ""}}},
      {"c", "", 4, {{std::nullopt, "topic_id", "<non-empty>", ""}}},
      {"c", "AAAAAAAAAAAAAAAAAAAAAA", 4,
       {{std::nullopt, "topic_id", "<non-zero>", "AAAAAAAAAAAAAAAAAAAAAA"}}},
      {"c", "ASNFZ4mrze/+3LqYdlQyEA", 4,
       {{std::nullopt, "topic_id", "<22-character Kafka Uuid text>", "ASNFZ4mrze/+3LqYdlQyEA"}}},
      {"c", "ASNFZ4mrze_-3LqYdlQyEA==", 4,
       {{std::nullopt, "topic_id", "<22-character Kafka Uuid text>", "ASNFZ4mrze_-3LqYdlQyEA=="}}},
      {"c", good_topic, 5, {{std::nullopt, "partition_count", "4", "5"}}},
      {"c", good_topic, 0, {{std::nullopt, "partition_count", "4", "0"}}},
      {"", "", 1,
       {{std::nullopt, "cluster_id", "<non-empty>", ""},
        {std::nullopt, "topic_id", "<non-empty>", ""},
        {std::nullopt, "partition_count", "4", "1"}}},
  };
  for (const row& r : rows) {
    EXPECT_EQ(locate(validate_broker_identity(observed_id, r.cluster_id, r.topic_id,
                                              r.partition_count)),
              r.expected)
        << r.cluster_id << " / " << r.topic_id << " / " << r.partition_count;
  }
}

TEST(ValidateBrokerIdentity, NonPositiveConfiguredCountRefuses) {
  identity configured = observed_id;
  configured.partition_count = 0;
  EXPECT_EQ(locate(validate_broker_identity(configured, "c", "ASNFZ4mrze_-3LqYdlQyEA", 0)),
            (std::vector<located>{{std::nullopt, "partition_count", "0", "0"}}));
}

// A broker identity problem is about what the broker reports, before
// anything stored is read: it must not claim a value is stored (a fresh
// start against a broker without topic ids said `stored "<non-zero>"`).
TEST(ValidateBrokerIdentity, WordingSaysExpectedNotStored) {
  auto problems = validate_broker_identity(observed_id, "c", "AAAAAAAAAAAAAAAAAAAAAA", 5);
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_EQ(problems[0].to_string(),
            "broker: field topic_id: expected \"<non-zero>\", observed \"AAAAAAAAAAAAAAAAAAAAAA\": "
            "broker reported the zero topic id (a KIP-516 topic id is required)");
  EXPECT_EQ(problems[1].to_string(),
            "broker: field partition_count: expected \"4\", observed \"5\": "
            "broker partition count differs from the configured partition count");
  for (auto& p : problems)
    EXPECT_EQ(p.to_string().find("stored"), std::string::npos) << p.to_string();
}

// -------------------------------------------------------------------- uuids

struct uuid_vector {
  uint64_t msb;
  uint64_t lsb;
  std::string_view kafka_text;
};

// Computed from the definition (URL-safe base64 of msb || lsb, big-endian);
// the cfbca728-... vector also appears in third-party UUID/base64 test suites.
const uuid_vector uuid_vectors[] = {
    {0, 1, "AAAAAAAAAAAAAAAAAAAAAQ"},
    {0, 0, "AAAAAAAAAAAAAAAAAAAAAA"},
    {UINT64_MAX, UINT64_MAX, "_____________________w"},
    {0x0123456789abcdefULL, 0xfedcba9876543210ULL, "ASNFZ4mrze_-3LqYdlQyEA"},
    {0xfbefbefbefbefbefULL, 0xbefbefbefbefbefbULL, "---------------------w"},
    {0x8000000000000000ULL, 0, "gAAAAAAAAAAAAAAAAAAAAA"},
    {0xcfbca7284e394613ULL, 0x96bcf920b5c37e16ULL, "z7ynKE45RhOWvPkgtcN-Fg"},
};

TEST(KafkaUuidText, FromBitsMatchesVectors) {
  for (const auto& v : uuid_vectors) {
    EXPECT_EQ(kafka_uuid_text(v.msb, v.lsb), v.kafka_text);
  }
}

// Decodes 22 URL-safe base64 digits back to msb || lsb, bit by bit: an
// independent check of the encoder.
std::pair<uint64_t, uint64_t> decode_uuid_text(std::string_view text) {
  constexpr std::string_view alphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  uint64_t halves[2] = {0, 0};
  int bit = 0;
  for (char c : text) {
    const size_t v = alphabet.find(c);
    for (int k = 5; k >= 0; --k, ++bit) {
      if (bit < 128 && ((v >> k) & 1) != 0) halves[bit / 64] |= uint64_t{1} << (63 - bit % 64);
    }
  }
  return {halves[0], halves[1]};
}

TEST(KafkaUuidText, RandomBitsRoundTrip) {
  std::mt19937_64 rng(11);
  for (int i = 0; i < 2000; ++i) {
    const uint64_t msb = rng();
    const uint64_t lsb = rng();
    const std::string text = kafka_uuid_text(msb, lsb);
    ASSERT_EQ(text.size(), 22u);
    ASSERT_TRUE(is_valid_topic_id_text(text)) << text;
    ASSERT_EQ(decode_uuid_text(text), std::make_pair(msb, lsb)) << text;
  }
}

TEST(IsValidTopicIdText, Table) {
  EXPECT_TRUE(is_valid_topic_id_text("AAAAAAAAAAAAAAAAAAAAAQ"));
  EXPECT_TRUE(is_valid_topic_id_text("ASNFZ4mrze_-3LqYdlQyEA"));
  EXPECT_TRUE(is_valid_topic_id_text("_____________________w"));
  EXPECT_FALSE(is_valid_topic_id_text("AAAAAAAAAAAAAAAAAAAAAA"));    // zero Uuid
  EXPECT_FALSE(is_valid_topic_id_text(""));
  EXPECT_FALSE(is_valid_topic_id_text("AAAAAAAAAAAAAAAAAAAAQ"));     // 21 chars
  EXPECT_FALSE(is_valid_topic_id_text("AAAAAAAAAAAAAAAAAAAAAQA"));   // 23 chars
  EXPECT_FALSE(is_valid_topic_id_text("ASNFZ4mrze/+3LqYdlQyEA"));    // standard alphabet
  EXPECT_FALSE(is_valid_topic_id_text("AAAAAAAAAAAAAAAAAAAAAQ=="));  // padded
  EXPECT_FALSE(is_valid_topic_id_text("AAAAAAAAAAAAAAAAAAAAAB"));    // non-canonical tail
  EXPECT_FALSE(is_valid_topic_id_text("AAAAAAAAAAAAAAAAAAAA.Q"));
}

}  // namespace
}  // namespace qsp::core
