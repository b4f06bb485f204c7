#include "redis/cluster_map.hpp"
#include "redis/cluster.hpp"

#include <memory>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include <algorithm>

#include "qsession/projection/types.hpp"

namespace qsp::redis {
namespace {

// -- helpers ---------------------------------------------------------------------

struct free_reply {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using reply = std::unique_ptr<redisReply, free_reply>;

/// One reply parsed by hiredis' own reader from RESP text.
reply read_resp(const std::string& resp) {
  std::unique_ptr<redisReader, void (*)(redisReader*)> r{redisReaderCreate(), redisReaderFree};
  EXPECT_EQ(redisReaderFeed(r.get(), resp.data(), resp.size()), REDIS_OK);
  void* out = nullptr;
  EXPECT_EQ(redisReaderGetReply(r.get(), &out), REDIS_OK) << r->errstr;
  EXPECT_NE(out, nullptr) << "incomplete RESP: " << resp;
  return reply{static_cast<redisReply*>(out)};
}

std::string arr(size_t n) { return "*" + std::to_string(n) + "\r\n"; }
std::string bulk(std::string_view s) {
  return "$" + std::to_string(s.size()) + "\r\n" + std::string{s} + "\r\n";
}
std::string num(long long i) { return ":" + std::to_string(i) + "\r\n"; }
const std::string nil = "$-1\r\n";

/// [host, port, id]
std::string node(std::string_view host, int port, std::string_view id) {
  return arr(3) + bulk(host) + num(port) + bulk(id);
}

/// [start, end, nodes...]
std::string entry(int start, int end, const std::vector<std::string>& nodes) {
  std::string out = arr(2 + nodes.size()) + num(start) + num(end);
  for (auto& n : nodes)
    out += n;
  return out;
}

std::string slots_reply(const std::vector<std::string>& entries) {
  std::string out = arr(entries.size());
  for (auto& e : entries)
    out += e;
  return out;
}

std::string message(const caf::error& e) { return describe(e); }

bool has_code(const caf::error& e, ec code) {
  return code_of(e) == code;
}

const std::string id_a(40, 'a'), id_b(40, 'b'), id_c(40, 'c');
const std::string id_d(40, 'd'), id_e(40, 'e'), id_f(40, 'f');

/// The usual three-primary cluster, each with one replica.
std::string three_shards() {
  return slots_reply({
    entry(0, 5460, {node("10.0.0.1", 7000, id_a), node("10.0.0.4", 7003, id_d)}),
    entry(5461, 10922, {node("10.0.0.2", 7001, id_b), node("10.0.0.5", 7004, id_e)}),
    entry(10923, 16383, {node("10.0.0.3", 7002, id_c), node("10.0.0.6", 7005, id_f)}),
  });
}

// -- slots -----------------------------------------------------------------------

TEST(ClusterMapSlots, Crc16IsXmodem) {
  EXPECT_EQ(crc16("123456789"), 0x31C3);
  EXPECT_EQ(crc16(""), 0);
}

TEST(ClusterMapSlots, KnownSlots) {
  EXPECT_EQ(key_slot("foo"), 12182);
  EXPECT_EQ(key_slot("bar"), 5061);
  EXPECT_EQ(key_slot("hello"), 866);
  EXPECT_EQ(key_slot("123456789"), 0x31C3 % 16384);
}

TEST(ClusterMapSlots, HashTagsAsTheSpecSays) {
  EXPECT_EQ(key_slot("{user1000}.following"), key_slot("{user1000}.followers"));
  EXPECT_EQ(key_slot("{user1000}.following"), key_slot("user1000"));
  EXPECT_EQ(key_slot("foo{}{bar}"), crc16("foo{}{bar}") % 16384);  // empty tag: whole key
  EXPECT_EQ(key_slot("foo{{bar}}zap"), key_slot("{bar"));           // tag "{bar"
  EXPECT_EQ(key_slot("foo{{bar}}zap"), crc16("{bar") % 16384);
  EXPECT_EQ(key_slot("foo{bar}{zap}"), key_slot("bar"));            // first tag only
  EXPECT_EQ(key_slot("foo{bar"), crc16("foo{bar") % 16384);         // unclosed: whole key
  EXPECT_EQ(key_slot("foo}bar{"), crc16("foo}bar{") % 16384);
  EXPECT_EQ(key_slot("{session_projection}:meta"),
            key_slot("{session_projection}:checkpoint:t:3"));
}

TEST(ClusterMapSlots, HashTagNamespace) {
  EXPECT_TRUE(is_hash_tag_namespace("{session_projection}"));
  EXPECT_TRUE(is_hash_tag_namespace("{x}"));
  for (auto ns : {"session_projection", "{}", "{", "}", "", "{a}b", "a{b}", "{a{b}", "{a}b}",
                  "{{a}}", " {a}"})
    EXPECT_FALSE(is_hash_tag_namespace(ns)) << ns;
}

// -- slot ranges -----------------------------------------------------------------

TEST(ClusterMapRanges, FormatAndParse) {
  std::vector<slot_range> r{{0, 5460}, {7, 7}, {10923, 16383}};
  EXPECT_EQ(format_ranges(r), "0-5460,7,10923-16383");
  EXPECT_EQ(format_ranges({}), "");
  auto p = parse_ranges("0-5460,10923-16383");
  ASSERT_TRUE(p);
  EXPECT_EQ(*p, (std::vector<slot_range>{{0, 5460}, {10923, 16383}}));
  p = parse_ranges("7");
  ASSERT_TRUE(p);
  EXPECT_EQ(*p, (std::vector<slot_range>{{7, 7}}));
  p = parse_ranges("");
  ASSERT_TRUE(p);
  EXPECT_TRUE(p->empty());
  p = parse_ranges("0-4,5,6-16383");  // adjacent, not overlapping
  ASSERT_TRUE(p);
  EXPECT_EQ(p->size(), 3u);
  EXPECT_EQ(format_ranges(*p), "0-4,5,6-16383");
}

TEST(ClusterMapRanges, ParseIsStrict) {
  for (auto t : {"5-1", "16384", "0-16384", "3,2", "0-5,5", "0-5,3-9", ",", "1,", ",1", "1,,2",
                 "a", "-1", "1-", "-", "01", "+1", " 1", "1 ", "1-2-3", "0-5460 "})
    EXPECT_FALSE(parse_ranges(t)) << t;
}

TEST(ClusterMapRanges, Normalise) {
  EXPECT_EQ(normalise_ranges({{10, 20}, {0, 3}, {4, 4}, {15, 30}, {40, 41}, {9, 2}}),
            (std::vector<slot_range>{{0, 4}, {10, 30}, {40, 41}}));
  EXPECT_EQ(normalise_ranges({{0, 16383}, {5, 7}}), (std::vector<slot_range>{{0, 16383}}));
  EXPECT_TRUE(normalise_ranges({}).empty());
  EXPECT_EQ(normalise_ranges({{65535, 65535}, {0, 65535}}),  // no wrap at the top
            (std::vector<slot_range>{{0, 65535}}));
  EXPECT_EQ(slot_total({{0, 9}, {5, 14}, {100, 100}}), 16u);
  EXPECT_TRUE(contains({{0, 9}, {20, 20}}, 20));
  EXPECT_FALSE(contains({{0, 9}, {20, 20}}, 10));
}

TEST(ClusterMapRanges, Covers) {
  std::vector<slot_range> outer{{0, 100}, {200, 300}};
  EXPECT_TRUE(covers(outer, {}));
  EXPECT_TRUE(covers(outer, {{0, 100}}));
  EXPECT_TRUE(covers(outer, {{250, 260}, {5, 5}}));
  EXPECT_FALSE(covers(outer, {{50, 201}}));
  EXPECT_FALSE(covers(outer, {{101, 101}}));
  EXPECT_FALSE(covers(outer, {{300, 301}}));
  EXPECT_FALSE(covers({}, {{0, 0}}));
  EXPECT_TRUE(covers({{0, 4}, {5, 9}}, {{3, 6}}));  // adjacent outer ranges join
  EXPECT_TRUE(covers({{0, 16383}}, {{0, 5460}, {10923, 16383}}));
}

// -- the slot map ----------------------------------------------------------------

TEST(ClusterMapSlotMap, EmptyCoversNothing) {
  slot_map m;
  EXPECT_EQ(m.shard_of(0), -1);
  EXPECT_FALSE(m.full_coverage());
  EXPECT_EQ(m.uncovered(), (std::vector<slot_range>{{0, 16383}}));
}

TEST(ClusterMapSlotMap, FromShardsOrdersAndIndexes) {
  std::vector<shard> s{
    {{id_b, "h", 2}, {}, {{8000, 16383}}},
    {{id_c, "h", 3}, {}, {}},
    {{id_a, "h", 1}, {}, {{100, 7999}, {0, 99}}},
  };
  auto m = slot_map::from_shards(s);
  ASSERT_TRUE(m) << message(m.error());
  ASSERT_EQ(m->shards().size(), 3u);
  EXPECT_EQ(m->shards()[0].primary.id, id_a);
  EXPECT_EQ(m->shards()[0].slots, (std::vector<slot_range>{{0, 7999}}));  // normalised
  EXPECT_EQ(m->shards()[1].primary.id, id_b);
  EXPECT_EQ(m->shards()[2].primary.id, id_c);  // no slots: last
  EXPECT_EQ(m->shard_of(0), 0);
  EXPECT_EQ(m->shard_of(7999), 0);
  EXPECT_EQ(m->shard_of(8000), 1);
  EXPECT_EQ(m->shard_of(16383), 1);
  EXPECT_TRUE(m->full_coverage());
  EXPECT_TRUE(m->uncovered().empty());
  EXPECT_EQ(m->shard_by_node(id_b), 1);
  EXPECT_EQ(m->shard_by_node(id_c), 2);
  EXPECT_EQ(m->shard_by_node(id_d), -1);
  EXPECT_EQ(m->shard_by_address("h", 1), 0);
  EXPECT_EQ(m->shard_by_address("h", 9), -1);
}

TEST(ClusterMapSlotMap, Uncovered) {
  auto m = slot_map::from_shards({{{id_a, "h", 1}, {}, {{1, 5000}, {6000, 16382}}}});
  ASSERT_TRUE(m);
  EXPECT_FALSE(m->full_coverage());
  EXPECT_EQ(m->uncovered(), (std::vector<slot_range>{{0, 0}, {5001, 5999}, {16383, 16383}}));
  EXPECT_EQ(m->shard_of(0), -1);
  EXPECT_EQ(m->shard_of(5500), -1);
}

TEST(ClusterMapSlotMap, RefusesWhatIsNotAMap) {
  auto overlap = slot_map::from_shards({{{id_a, "h", 1}, {}, {{0, 100}}},
                                        {{id_b, "h", 2}, {}, {{100, 200}}}});
  ASSERT_FALSE(overlap);
  EXPECT_TRUE(has_code(overlap.error(), ec::redis_reply));
  EXPECT_NE(message(overlap.error()).find("slot 100 is served by both"), std::string::npos)
    << message(overlap.error());
  auto twice = slot_map::from_shards({{{id_a, "h", 1}, {}, {{0, 1}}},
                                      {{id_a, "h", 2}, {}, {{5, 6}}}});
  ASSERT_FALSE(twice);
  EXPECT_NE(message(twice.error()).find("primary of two shards"), std::string::npos);
  auto no_id = slot_map::from_shards({{{"", "h", 1}, {}, {{0, 1}}}});
  ASSERT_FALSE(no_id);
  EXPECT_NE(message(no_id.error()).find("no node id"), std::string::npos);
  auto outside = slot_map::from_shards({{{id_a, "h", 1}, {}, {{0, 16384}}}});
  ASSERT_FALSE(outside);
  auto backwards = slot_map::from_shards({{{id_a, "h", 1}, {}, {{9, 1}}}});
  ASSERT_FALSE(backwards);
}

// -- CLUSTER SLOTS ---------------------------------------------------------------

TEST(ClusterMapParse, ThreeShards) {
  auto r = read_resp(three_shards());
  auto m = parse_cluster_slots(r.get(), "seed");
  ASSERT_TRUE(m) << message(m.error());
  ASSERT_EQ(m->shards().size(), 3u);
  auto& s0 = m->shards()[0];
  EXPECT_EQ(s0.primary.id, id_a);
  EXPECT_EQ(s0.primary.host, "10.0.0.1");
  EXPECT_EQ(s0.primary.port, 7000);
  ASSERT_EQ(s0.replicas.size(), 1u);
  EXPECT_EQ(s0.replicas[0].id, id_d);
  EXPECT_EQ(s0.replicas[0].address(), "10.0.0.4:7003");
  EXPECT_EQ(format_ranges(s0.slots), "0-5460");
  EXPECT_EQ(m->shard_of(key_slot("foo")), 2);  // 12182
  EXPECT_EQ(m->shard_of(key_slot("bar")), 0);  // 5061
  EXPECT_TRUE(m->full_coverage());
}

TEST(ClusterMapParse, MergesAPrimarysRanges) {
  // Slots 0-99 and 200-16383 on a, 100-199 on b (after a resharding); a's
  // replica listed in both entries, a second replica only in one.
  auto r = read_resp(slots_reply({
    entry(0, 99, {node("h1", 7000, id_a), node("h4", 7003, id_d)}),
    entry(100, 199, {node("h2", 7001, id_b)}),
    entry(200, 16383, {node("h1", 7000, id_a), node("h4", 7003, id_d), node("h5", 7004, id_e)}),
  }));
  auto m = parse_cluster_slots(r.get(), "seed");
  ASSERT_TRUE(m) << message(m.error());
  ASSERT_EQ(m->shards().size(), 2u);
  auto& a = m->shards()[m->shard_by_node(id_a)];
  EXPECT_EQ(format_ranges(a.slots), "0-99,200-16383");
  ASSERT_EQ(a.replicas.size(), 2u);
  EXPECT_EQ(a.replicas[0].id, id_d);
  EXPECT_EQ(a.replicas[1].id, id_e);
  EXPECT_EQ(m->shard_of(150), m->shard_by_node(id_b));
  EXPECT_EQ(tag_for_shard(a), copy_tag_for_slot(0));
  EXPECT_EQ(tag_for_shard(m->shards()[m->shard_by_node(id_b)]), copy_tag_for_slot(100));
}

TEST(ClusterMapParse, EmptyOrNilHostIsTheFallback) {
  auto r = read_resp(slots_reply({
    entry(0, 8191, {node("", 7000, id_a), arr(3) + nil + num(7003) + bulk(id_d)}),
    entry(8192, 16383, {arr(3) + "_\r\n" + num(7001) + bulk(id_b)}),  // RESP3 null
  }));
  auto m = parse_cluster_slots(r.get(), "127.0.0.1");
  ASSERT_TRUE(m) << message(m.error());
  EXPECT_EQ(m->shards()[0].primary.address(), "127.0.0.1:7000");
  EXPECT_EQ(m->shards()[0].replicas[0].address(), "127.0.0.1:7003");
  EXPECT_EQ(m->shards()[1].primary.address(), "127.0.0.1:7001");
}

TEST(ClusterMapParse, IgnoresNetworkingMetadata) {
  // Redis 7: a fourth element per node, a map (RESP3) or a flat array (RESP2).
  auto meta3 = "%1\r\n" + bulk("hostname") + bulk("node-a.example");
  auto meta2 = arr(2) + bulk("hostname") + bulk("node-b.example");
  auto r = read_resp(slots_reply({
    entry(0, 8191, {arr(4) + bulk("h1") + num(7000) + bulk(id_a) + meta3}),
    entry(8192, 16383, {arr(4) + bulk("h2") + num(7001) + bulk(id_b) + meta2}),
  }));
  auto m = parse_cluster_slots(r.get(), "seed");
  ASSERT_TRUE(m) << message(m.error());
  EXPECT_EQ(m->shards()[0].primary.host, "h1");
  EXPECT_EQ(m->shards()[1].primary.host, "h2");
}

TEST(ClusterMapParse, EmptyReplyIsAnEmptyMap) {
  auto r = read_resp(arr(0));
  auto m = parse_cluster_slots(r.get(), "seed");
  ASSERT_TRUE(m) << message(m.error());
  EXPECT_TRUE(m->shards().empty());
  EXPECT_FALSE(m->full_coverage());
}

TEST(ClusterMapParse, RefusesOtherShapes) {
  struct row {
    std::string resp;
    std::string says;
  };
  const row rows[] = {
    {"-ERR This instance has cluster support disabled\r\n", "cluster support disabled"},
    {"+OK\r\n", "the reply: is a status, expected an array"},
    {arr(1) + num(3), "entry 0: is an integer, expected an array"},
    {slots_reply({arr(2) + num(0) + num(5)}), "entry 0: 2 elements"},
    {slots_reply({arr(3) + bulk("0") + num(5) + node("h", 1, id_a)}),
     "entry 0: start slot: is a string, expected an integer"},
    {slots_reply({entry(0, 16384, {node("h", 1, id_a)})}), "end slot: 16384 is not within"},
    {slots_reply({entry(-1, 5, {node("h", 1, id_a)})}), "start slot: -1 is not within"},
    {slots_reply({entry(9, 5, {node("h", 1, id_a)})}), "9-5 runs backwards"},
    {slots_reply({entry(0, 5, {bulk("h")})}), "entry 0: primary: is a string, expected an array"},
    {slots_reply({entry(0, 5, {arr(2) + bulk("h") + num(1)})}), "primary: 2 elements"},
    {slots_reply({entry(0, 5, {node("h", 0, id_a)})}), "port 0 is not within"},
    {slots_reply({entry(0, 5, {node("h", 65536, id_a)})}), "port 65536 is not within"},
    {slots_reply({entry(0, 5, {arr(3) + bulk("h") + bulk("7000") + bulk(id_a)})}),
     "primary: port: is a string, expected an integer"},
    {slots_reply({entry(0, 5, {arr(3) + num(1) + num(7000) + bulk(id_a)})}),
     "primary: host: is an integer"},
    {slots_reply({entry(0, 5, {node("h", 1, "")})}), "empty node id"},
    {slots_reply({entry(0, 5, {arr(3) + bulk("h") + num(1) + nil})}), "node id: is nil"},
    {slots_reply({entry(0, 5, {node("?", 7000, id_a)})}), "host is \"?\""},
    {slots_reply({entry(0, 5, {node("h", 1, id_a), node("h", 2, "")})}),
     "entry 0: replica 0: empty node id"},
    {slots_reply({entry(0, 10, {node("h", 1, id_a)}), entry(10, 20, {node("h", 2, id_b)})}),
     "CLUSTER SLOTS: slot 10 is served by both"},
    {slots_reply({entry(0, 10, {node("h", 1, id_a)}), entry(11, 20, {node("h", 2, id_a)})}),
     "entry 1: node " + id_a + " is at h:2 here and at h:1 before"},
    {slots_reply({entry(0, 10, {node("h", 1, id_a), node("h", 2, id_b)}),
                  entry(11, 20, {node("h", 2, id_b)})}),
     "listed both as a primary and as a replica"},
  };
  for (auto& r : rows) {
    auto rep = read_resp(r.resp);
    auto m = parse_cluster_slots(rep.get(), "seed");
    ASSERT_FALSE(m) << r.says;
    EXPECT_TRUE(has_code(m.error(), ec::redis_reply)) << r.says;
    EXPECT_NE(message(m.error()).find(r.says), std::string::npos)
      << "want \"" << r.says << "\" in: " << message(m.error());
    EXPECT_EQ(message(m.error()).find("redis_reply: CLUSTER SLOTS"), 0u) << message(m.error());
  }
  EXPECT_FALSE(parse_cluster_slots(nullptr, "seed"));
}

// -- copy keys -------------------------------------------------------------------

TEST(ClusterMapCopyTags, EverySlotHasTheSmallestTag) {
  uint32_t max_n = 0;
  std::set<std::string> tags;
  for (uint32_t s = 0; s < slot_count; ++s) {
    auto tag = copy_tag_for_slot(static_cast<uint16_t>(s));
    ASSERT_EQ(tag.rfind("qsp-copy-", 0), 0u) << tag;
    ASSERT_EQ(key_slot(tag), s) << tag;
    max_n = std::max<uint32_t>(max_n, std::stoul(tag.substr(9)));
    tags.insert(tag);
  }
  EXPECT_EQ(tags.size(), size_t{slot_count});
  EXPECT_EQ(max_n, copy_tag_max_n);  // the bound the header states
  // Smallest: no smaller N lands in the slot (checked for a few slots).
  for (uint16_t s : {0, 1, 8191, 16383}) {
    auto n = std::stoul(copy_tag_for_slot(s).substr(9));
    for (unsigned long k = 0; k < n; ++k)
      ASSERT_NE(key_slot("qsp-copy-" + std::to_string(k)), s) << k;
  }
}

TEST(ClusterMapCopyTags, FirstUseFromManyThreads) {
  std::vector<std::thread> ts;
  std::vector<std::string> got(4);
  for (size_t i = 0; i < got.size(); ++i)
    ts.emplace_back([&got, i] { got[i] = copy_tag_for_slot(16383); });
  for (auto& t : ts)
    t.join();
  for (auto& g : got)
    EXPECT_EQ(g, got[0]);
}

TEST(ClusterMapCopyTags, CopyKeysLandInTheirSlot) {
  EXPECT_EQ(copy_key("qsp-copy-7", "{session_projection}", "dispatch"),
            "{qsp-copy-7}:{session_projection}:copies:dispatch");
  for (uint16_t s : {0, 1, 866, 5061, 5460, 5461, 10922, 10923, 12182, 16382, 16383})
    EXPECT_EQ(key_slot(copy_key(copy_tag_for_slot(s), "{session_projection}", "t")), s) << s;
  for (uint32_t s = 0; s < slot_count; s += 97)
    EXPECT_EQ(key_slot(copy_key(copy_tag_for_slot(static_cast<uint16_t>(s)), "{ns}", "topic")), s);
}

TEST(ClusterMapCopyTags, TagForShard) {
  EXPECT_EQ(tag_for_shard(shard{{id_a, "h", 1}, {}, {{900, 1000}, {12, 20}}}),
            copy_tag_for_slot(12));
  EXPECT_EQ(tag_for_shard(shard{{id_a, "h", 1}, {}, {}}), "");
}

// -- the copy record -------------------------------------------------------------

const std::string replid_a = "8f1a1f1b6f4f4e0c9a0b6c3d2e1f00112233aabb";
const std::string replid_b = "0123456789abcdef0123456789abcdef01234567";

shard_copy sample_copy() {
  shard_copy c;
  c.shard_node = id_a;
  c.shard_replid = replid_a;
  c.slots = {{0, 5460}, {10000, 10000}};
  c.identity = {{"format_version", "1"},
                {"dispatch_topic", "dispatch"},
                {"partition_count", "3"},
                {"cluster_id", "q1Sh-9_ISia_zwGINzRvyQ"},
                {"topic_id", "XzDehNZ2RAG0P1Mut_Ux8w"}};
  c.positions = {{0, {120, 4}}, {2, {0, -1}}, {11, {9000000000LL, 0}}};
  return c;
}

TEST(ClusterMapCopy, EncodesTheFields) {
  auto f = encode_copy_fields(sample_copy());
  std::vector<std::pair<std::string, std::string>> want{
    {"shard_node", id_a},
    {"shard_replid", replid_a},
    {"slots", "0-5460,10000"},
    {"cluster_id", "q1Sh-9_ISia_zwGINzRvyQ"},
    {"dispatch_topic", "dispatch"},
    {"format_version", "1"},
    {"partition_count", "3"},
    {"topic_id", "XzDehNZ2RAG0P1Mut_Ux8w"},
    {"p:0", "120:4"},
    {"p:2", "0:-1"},
    {"p:11", "9000000000:0"},
  };
  EXPECT_EQ(f, want);
}

TEST(ClusterMapCopy, RoundTrips) {
  auto c = sample_copy();
  auto d = decode_copy(encode_copy_fields(c));
  ASSERT_TRUE(d) << message(d.error());
  EXPECT_EQ(*d, c);
  shard_copy bare{id_b, replid_b, {}, {}, {}};  // no slots, no positions
  auto e = decode_copy(encode_copy_fields(bare));
  ASSERT_TRUE(e) << message(e.error());
  EXPECT_EQ(*e, bare);
  // The epochs (issue 32): written when known, read back; a copy of an
  // older build has none (-1).
  c.cluster_epoch = 17;
  c.config_epoch = 9;
  auto fields = encode_copy_fields(c);
  EXPECT_NE(std::find(fields.begin(), fields.end(),
                      std::pair<std::string, std::string>{"cluster_epoch", "17"}),
            fields.end());
  auto g = decode_copy(fields);
  ASSERT_TRUE(g) << message(g.error());
  EXPECT_EQ(g->cluster_epoch, 17);
  EXPECT_EQ(g->config_epoch, 9);
  EXPECT_EQ(e->cluster_epoch, -1);
  fields.emplace_back("config_epoch", "x");
  fields.erase(std::find(fields.begin(), fields.end(),
                         std::pair<std::string, std::string>{"config_epoch", "9"}));
  auto bad = decode_copy(fields);
  ASSERT_FALSE(bad);
  EXPECT_NE(message(bad.error()).find("config_epoch"), std::string::npos);
}

TEST(ClusterMapCopy, DecodeIsStrict) {
  auto base = encode_copy_fields(sample_copy());
  auto with = [&](std::string k, std::string v) {
    auto f = base;
    auto it = std::find_if(f.begin(), f.end(), [&](auto& p) { return p.first == k; });
    if (it != f.end())
      it->second = v;
    else
      f.emplace_back(k, v);
    return f;
  };
  auto without = [&](std::string k) {
    auto f = base;
    f.erase(std::remove_if(f.begin(), f.end(), [&](auto& p) { return p.first == k; }), f.end());
    return f;
  };
  struct row {
    std::vector<std::pair<std::string, std::string>> fields;
    std::string says;
  };
  const row rows[] = {
    {with("p:0", "120"), "field p:0: stored \"120\""},
    {with("p:0", "120:"), "field p:0: stored \"120:\""},
    {with("p:0", ":4"), "field p:0"},
    {with("p:0", "-5:4"), "field p:0"},
    {with("p:0", "12a:4"), "field p:0"},
    {with("p:0", "120:-2"), "field p:0"},
    {with("p:0", "120:2147483648"), "field p:0"},
    {with("p:0", "120:4:5"), "field p:0"},
    {with("p:0", "0120:4"), "field p:0"},
    {with("p:x", "1:1"), "field p:x: stored \"1:1\": the field does not name a partition"},
    {with("p:-1", "1:1"), "field p:-1"},
    {with("p:", "1:1"), "field p:"},
    {with("p:2147483648", "1:1"), "field p:2147483648"},
    {with("shard_replid", "xyz"), "field shard_replid: stored \"xyz\""},
    {with("shard_replid", std::string(40, 'A')), "field shard_replid"},
    {with("shard_node", ""), "field shard_node: stored \"\": empty"},
    {with("slots", "5-1"), "field slots: stored \"5-1\""},
    {without("shard_node"), "field shard_node: stored \"<absent>\": missing"},
    {without("shard_replid"), "field shard_replid: stored \"<absent>\": missing"},
    {without("slots"), "field slots: stored \"<absent>\": missing"},
  };
  for (auto& r : rows) {
    auto d = decode_copy(r.fields);
    ASSERT_FALSE(d) << r.says;
    EXPECT_TRUE(has_code(d.error(), ec::refused));
    EXPECT_NE(message(d.error()).find(r.says), std::string::npos)
      << "want \"" << r.says << "\" in: " << message(d.error());
  }
  auto twice = base;
  twice.emplace_back("p:2", "0:-1");
  auto d = decode_copy(twice);
  ASSERT_FALSE(d);
  EXPECT_NE(message(d.error()).find("field p:2: stored \"0:-1\": the field appears twice"),
            std::string::npos)
    << message(d.error());
}

TEST(ClusterMapCopy, Judge) {
  auto c = sample_copy();  // written under replid_a
  const std::string zero{zero_replid};
  EXPECT_EQ(judge_copy(std::nullopt, replid_a, zero), copy_verdict::absent);
  EXPECT_EQ(judge_copy(c, replid_a, zero), copy_verdict::valid);
  // A replica promoted after a failover: a new replid, the old one as replid2.
  EXPECT_EQ(judge_copy(c, replid_b, replid_a), copy_verdict::valid);
  // Another history (a migrated copy key, or one this shard does not descend from).
  EXPECT_EQ(judge_copy(c, replid_b, zero), copy_verdict::foreign);
  // replid2 zero never matches, not even a copy claiming the zero id.
  auto z = c;
  z.shard_replid = zero;
  EXPECT_EQ(judge_copy(z, replid_b, zero), copy_verdict::foreign);
  EXPECT_EQ(judge_copy(z, zero, zero), copy_verdict::foreign);
  auto empty = c;
  empty.shard_replid.clear();
  EXPECT_EQ(judge_copy(empty, "", zero), copy_verdict::foreign);
  EXPECT_EQ(to_string(copy_verdict::foreign), "foreign");
}

} // namespace
} // namespace qsp::redis

TEST(ClusterMap, InfoFieldsReadsFieldValueLines) {
  auto f = qsp::redis::info_fields("# Replication\r\nrole:master\r\nmaster_replid:abc\r\n\r\n"
                                   "# Memory\nmaxmemory_policy:noeviction");
  EXPECT_EQ(f["role"], "master");
  EXPECT_EQ(f["master_replid"], "abc");
  EXPECT_EQ(f["maxmemory_policy"], "noeviction");
  EXPECT_EQ(f.count("# Replication"), 0u);
  EXPECT_EQ(f.size(), 3u);
}
