// The Redis adapters against a real redis-server: pipelined ZADD GT, the
// atomic read (plus the incremental stray scan), meta creation, the guarded
// checkpoint write, maxmemory-policy, timeouts and interrupt().
#include <csignal>
#include <future>
#include <thread>

#include <gtest/gtest.h>

#include "messages/types.hpp"
#include "redis/stores.hpp"
#include "tests/support/integration.hpp"

using namespace qsp;

namespace {

// Owns the strings a batch of `session_update` views points into.
struct zadds {
  struct owned {
    std::string user;
    std::vector<std::pair<std::string, int64_t>> members;
  };
  zadds(std::initializer_list<owned> src) : src_(src) {
    for (auto& o : src_) {
      auto& m = members_.emplace_back();
      for (auto& [conv, score] : o.members)
        m.push_back(session_member{conv, score});
    }
    for (size_t i = 0; i < src_.size(); ++i)
      ups_.push_back(session_update{src_[i].user, members_[i].data(), members_[i].size()});
  }
  operator const std::vector<session_update>&() const { return ups_; }

private:
  std::vector<owned> src_;
  std::vector<std::vector<session_member>> members_;
  std::vector<session_update> ups_;
};

core::identity ident(const std::string& topic) {
  return core::identity{topic, 2, "cluster-A", "AAAAAAAAAAAAAAAAAAAAAQ"};
}

} // namespace

TEST(RedisSessionStore, PipelinedZaddGtKeepsTheLargerScore) {
  auto prefix = test::unique_name("convs") + ":";
  auto store = redis::redis_session_store::open(test::redis_settings("ns", prefix));
  ASSERT_TRUE(store) << describe(store.error());
  ASSERT_TRUE((*store)->apply(zadds{{"u1", {{"c1", 100}, {"c2", 50}}}, {"u2", {{"c1", 7}}}}));
  ASSERT_TRUE((*store)->apply(zadds{{"u1", {{"c1", 90}, {"c2", 60}}}}));
  auto c = test::redis_conn();
  EXPECT_EQ(test::zset(*c, prefix + "u1"), (std::map<std::string, int64_t>{{"c1", 100}, {"c2", 60}}));
  EXPECT_EQ(test::zset(*c, prefix + "u2"), (std::map<std::string, int64_t>{{"c1", 7}}));
  auto list = (*store)->sessions("u1", 10);
  ASSERT_TRUE(list);
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].conversation_id, "c1"); // newest first
  EXPECT_EQ((*list)[0].last_active, 100);
}

TEST(RedisSessionStore, AnErrorReplyFailsTheWholeCall) {
  auto prefix = test::unique_name("convs") + ":";
  auto c = test::redis_conn();
  // A string where a sorted set should be: WRONGTYPE for that user only.
  test::redis_cmd(*c, {"SET", prefix + "bad", "x"});
  auto store = redis::redis_session_store::open(test::redis_settings("ns", prefix));
  auto r = (*store)->apply(zadds{{"ok1", {{"c", 1}}}, {"bad", {{"c", 1}}}, {"ok2", {{"c", 1}}}});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), static_cast<uint8_t>(ec::redis_reply));
  // The connection stays usable: every reply was read.
  EXPECT_TRUE((*store)->apply(zadds{{"ok3", {{"c", 2}}}}));
  EXPECT_EQ(test::zset(*c, prefix + "ok3").at("c"), 2);
}

TEST(RedisSessionStore, ScoresOfEveryDigitCountSurviveTheHandFormattedResp) {
  // The scores' decimals are written by hand (digit count from the bit
  // length; up to 8 digits two per step, 9 to 16 as two groups of eight
  // converted at once): every length from 1 to 15 digits at both of its
  // edges, 16 digits up to the largest created_at (2^53, what a score, a
  // double, holds exactly), and scores whose every digit differs (the
  // groups' order and each digit's place), read back from Redis.
  auto prefix = test::unique_name("convs") + ":";
  auto c = test::redis_conn();
  auto store = redis::redis_session_store::open(test::redis_settings("ns", prefix));
  ASSERT_TRUE(store) << describe(store.error());
  std::map<std::string, int64_t> expected;
  int64_t power = 1;
  for (int digits = 1; digits <= 15; ++digits, power *= 10) {
    for (int64_t v : {power, power * 10 - 1, power + 1, power * 10 - 2})
      expected["c" + std::to_string(v)] = v;
  }
  expected["c0"] = 0;
  expected["c10^15"] = power;
  expected["c10^15+1"] = power + 1;
  expected["c2^53-1"] = (int64_t{1} << 53) - 1;
  expected["c2^53"] = int64_t{1} << 53;
  for (int64_t v : {int64_t{123456789}, int64_t{9876543210}, int64_t{1733312345678},
                    int64_t{1023456789012345}, int64_t{8907654321098765}})
    expected["c" + std::to_string(v)] = v;
  std::vector<session_member> members;
  for (auto& [name, score] : expected)
    members.push_back(session_member{name, score});
  ASSERT_TRUE((*store)->apply({session_update{"u", members.data(), members.size()}}));
  EXPECT_EQ(test::zset(*c, prefix + "u"), expected);
}

TEST(RedisSessionStore, PipelinedSendsAreConfirmedOldestFirstWithTheirOwnErrors) {
  auto prefix = test::unique_name("convs") + ":";
  auto c = test::redis_conn();
  test::redis_cmd(*c, {"SET", prefix + "bad", "x"});
  auto store = redis::redis_session_store::open(test::redis_settings("ns", prefix));
  ASSERT_TRUE(store) << describe(store.error());
  // Three batches out before any reply is read; the second holds an error.
  // Binary-safe members: RESP is formatted by hand, so check odd bytes and
  // the extreme scores survive.
  std::string odd{"c\r\n\0\xe4\xbd\xa0 x", 9};
  ASSERT_TRUE((*store)->send(zadds{{"u1", {{"c1", 1}, {odd, 4102444800123}}}}));
  ASSERT_TRUE((*store)->send(zadds{{"u2", {{"c1", -5}}}, {"bad", {{"c", 1}}}}));
  ASSERT_TRUE((*store)->send(zadds{{"u3", {{"c1", 3}}}}));
  using namespace std::chrono_literals;
  auto first = (*store)->confirm(1, -1ms);
  ASSERT_TRUE(first) << describe(first.error());
  EXPECT_TRUE(*first);
  auto second = (*store)->confirm(2, 1000ms);
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code(), static_cast<uint8_t>(ec::redis_reply));
  auto third = (*store)->confirm(1, 1000ms);
  ASSERT_TRUE(third) << describe(third.error());
  EXPECT_TRUE(*third);
  EXPECT_EQ(test::zset(*c, prefix + "u1"), (std::map<std::string, int64_t>{{"c1", 1}, {odd, 4102444800123}}));
  EXPECT_EQ(test::zset(*c, prefix + "u2").at("c1"), -5);
  EXPECT_EQ(test::zset(*c, prefix + "u3").at("c1"), 3);
  // Nothing outstanding: a zero wait reports "not yet" instead of blocking.
  ASSERT_TRUE((*store)->send(zadds{{"u4", {{"c1", 4}}}}));
  auto got = (*store)->confirm(1, 0ms);
  ASSERT_TRUE(got);
  if (!*got) // the reply had not arrived yet: it does within the wait
    got = (*store)->confirm(1, 5000ms);
  ASSERT_TRUE(got && *got);
  EXPECT_TRUE((*store)->apply(zadds{{"u5", {{"c", 5}}}})); // still in step
  EXPECT_EQ(test::zset(*c, prefix + "u5").at("c"), 5);
}

TEST(RedisSessionStore, ThousandsOfPipelinedRepliesAcrossManyReadsKeepTheConnectionInStep) {
  // The confirm fast path reads integer replies in 64-KiB chunks and counts
  // them without reply objects; an error reply deep inside a batch goes to
  // hiredis, and so does whatever follows it.  Afterwards the connection
  // serves blocking commands as before: a wake-up threshold left on the
  // socket would hold each of them until the command timeout, an hour here,
  // far past the test's own timeout.
  auto prefix = test::unique_name("convs") + ":";
  auto c = test::redis_conn();
  test::redis_cmd(*c, {"SET", prefix + "bad", "x"});
  auto cfg = test::redis_settings("ns", prefix);
  cfg.command_timeout_ms = 3600 * 1000;
  auto store = redis::redis_session_store::open(cfg);
  ASSERT_TRUE(store) << describe(store.error());
  struct batch {
    std::vector<std::string> users;
    std::vector<session_member> member;
    std::vector<session_update> ups;
  };
  std::vector<batch> batches(3);
  const size_t n = 20000; // 80 KB of ":1\r\n" per batch
  for (size_t k = 0; k < batches.size(); ++k) {
    auto& b = batches[k];
    for (size_t i = 0; i < n; ++i)
      b.users.push_back(k == 1 && i == n / 2 ? std::string{"bad"}
                                               : "u" + std::to_string(k) + "-" + std::to_string(i));
    b.member.push_back(session_member{"c", static_cast<int64_t>(k + 1)});
    for (auto& u : b.users)
      b.ups.push_back(session_update{u, b.member.data(), 1});
    ASSERT_TRUE((*store)->send(b.ups));
  }
  using namespace std::chrono_literals;
  auto first = (*store)->confirm(n, 0ms); // mostly "not yet": the replies are still coming
  ASSERT_TRUE(first) << describe(first.error());
  if (!*first)
    first = (*store)->confirm(n, 10000ms);
  ASSERT_TRUE(first && *first);
  auto second = (*store)->confirm(n, 10000ms);
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code(), static_cast<uint8_t>(ec::redis_reply));
  EXPECT_NE(describe(second.error()).find("WRONGTYPE"), std::string::npos) << describe(second.error());
  auto third = (*store)->confirm(n, 10000ms);
  ASSERT_TRUE(third) << describe(third.error());
  EXPECT_TRUE(*third);
  // Twice more through the fast path after hiredis had the input.
  for (int round = 0; round < 2; ++round) {
    ASSERT_TRUE((*store)->send(batches[0].ups));
    auto again = (*store)->confirm(n, 10000ms);
    ASSERT_TRUE(again && *again) << (again ? "not all replies" : describe(again.error()));
  }
  auto list = (*store)->sessions("u2-7", 10);
  ASSERT_TRUE(list) << describe(list.error());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].last_active, 3);
  auto last = (*store)->apply(zadds{{"last", {{"c", 9}}}});
  EXPECT_TRUE(last) << describe(last.error());
  EXPECT_EQ(test::zset(*c, prefix + "last").at("c"), 9);
  EXPECT_EQ(test::zset(*c, prefix + "u1-" + std::to_string(n - 1)).at("c"), 2);
}

TEST(RedisSessionStore, WritingToAKilledServerIsAnErrorNotSigpipe) {
  // hiredis writes without MSG_NOSIGNAL; SIGPIPE's default action would end
  // this test process (and the node: exit 141) instead of failing the call.
  ASSERT_EQ(signal(SIGPIPE, SIG_DFL), SIG_DFL);
  test::private_redis r{"sigpipe", {}};
  ASSERT_TRUE(r.wait_ready());
  auto cfg = test::redis_settings("ns", "convs:");
  cfg.port = r.port;
  auto store = redis::redis_session_store::open(cfg);
  ASSERT_TRUE(store) << describe(store.error());
  ASSERT_TRUE((*store)->apply(zadds{{"u", {{"c", 1}}}}));
  r.kill_hard();
  // Pipelined sends without reading: the first write is still accepted by
  // the kernel, the peer's reset makes a later one fail with EPIPE.
  bool failed = false;
  for (int i = 0; i < 1000 && !failed; ++i) {
    auto sent = (*store)->send(zadds{{"u", {{"c", i}}}});
    if (!sent) {
      failed = true;
      EXPECT_EQ(sent.error().code(), static_cast<uint8_t>(ec::redis_unavailable));
    }
  }
  EXPECT_TRUE(failed);
}

TEST(RedisCheckpointStore, GuardedWriteRejectsASecondWriterAndForeignEdits) {
  auto ns = test::unique_name("ns");
  auto topic = test::unique_name("t");
  auto id = ident(topic);
  auto a = redis::redis_checkpoint_store::open(test::redis_settings(ns, "convs:"));
  auto b = redis::redis_checkpoint_store::open(test::redis_settings(ns, "convs:"));
  ASSERT_TRUE(a && b);
  ASSERT_EQ((*a)->create_meta(id), true);
  ASSERT_EQ((*b)->create_meta(id), false); // meta exists: not rewritten

  // Bootstrap write (absent -> 10), then a second writer that also believes
  // the key is absent must fail.
  ASSERT_TRUE((*a)->write_checkpoint(id, 0, -1, 10));
  auto second = (*b)->write_checkpoint(id, 0, -1, 20);
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code(), static_cast<uint8_t>(ec::checkpoint_conflict));
  EXPECT_NE(describe(second.error()).find("next_offset"), std::string::npos);

  // A checkpoint edited behind the writer's back (e.g. restored snapshot).
  auto c = test::redis_conn();
  test::redis_cmd(*c, {"HSET", redis::checkpoint_key(ns, topic, 0), "next_offset", "5"});
  auto stale = (*a)->write_checkpoint(id, 0, 10, 30);
  ASSERT_FALSE(stale);
  EXPECT_EQ(stale.error().code(), static_cast<uint8_t>(ec::checkpoint_conflict));
  EXPECT_EQ(test::redis_cmd(*c, {"HGET", redis::checkpoint_key(ns, topic, 0), "next_offset"}), "5");

  // A writer with a different identity (recreated topic) cannot write at all.
  auto other = id;
  other.topic_id = "AAAAAAAAAAAAAAAAAAAAAg";
  auto foreign = (*a)->write_checkpoint(other, 1, -1, 1);
  ASSERT_FALSE(foreign);
  EXPECT_NE(describe(foreign.error()).find("topic_id"), std::string::npos);

  // The right expectation succeeds and the read sees it.
  ASSERT_TRUE((*a)->write_checkpoint(id, 0, 5, 6));
  auto st = (*a)->read(topic, id.partition_count);
  ASSERT_TRUE(st);
  ASSERT_TRUE(st->meta.has_value());
  ASSERT_EQ(st->checkpoints.size(), 1u);
  EXPECT_EQ(st->checkpoints.at("0"), core::encode_checkpoint(id, 0, 6));
}

TEST(RedisCheckpointStore, ReadFindsStrayKeysOutsideThePartitionRange) {
  auto ns = test::unique_name("ns");
  auto topic = test::unique_name("t");
  auto id = ident(topic); // 2 partitions
  auto c = test::redis_conn();
  auto key = redis::checkpoint_prefix(ns, topic);
  // A known checkpoint, a partition beyond the count, a non-numeric suffix,
  // a non-canonical number, and a key of another topic sharing the prefix
  // up to the separator (must not show up).
  test::redis_cmd(*c, {"HSET", key + "1", "next_offset", "3"});
  test::redis_cmd(*c, {"HSET", key + "7", "next_offset", "1"});
  test::redis_cmd(*c, {"SET", key + "x", "not a hash"});
  test::redis_cmd(*c, {"HSET", key + "01", "next_offset", "2"});
  test::redis_cmd(*c, {"HSET", redis::checkpoint_prefix(ns, topic + "x") + "0", "next_offset", "9"});
  auto s = redis::redis_checkpoint_store::open(test::redis_settings(ns, "convs:"));
  ASSERT_TRUE(s) << describe(s.error());
  auto st = (*s)->read(topic, id.partition_count);
  ASSERT_TRUE(st) << describe(st.error());
  EXPECT_FALSE(st->meta.has_value());
  EXPECT_EQ(st->checkpoints.size(), 4u);
  ASSERT_TRUE(st->checkpoints.count("1"));
  EXPECT_EQ(st->checkpoints.at("1").at("next_offset"), "3");
  ASSERT_TRUE(st->checkpoints.count("7"));
  EXPECT_EQ(st->checkpoints.at("7").at("next_offset"), "1");
  ASSERT_TRUE(st->checkpoints.count("x"));
  EXPECT_TRUE(st->checkpoints.at("x").empty()); // wrong type: every field missing
  EXPECT_TRUE(st->checkpoints.count("01"));
  // The validation refuses every stray.
  auto v = core::validate_stored(*st, id);
  EXPECT_FALSE(v.problems.empty());
  // With a larger count, "7" is a known key, read in the atomic step.
  auto wide = (*s)->read(topic, 8);
  ASSERT_TRUE(wide) << describe(wide.error());
  EXPECT_EQ(wide->checkpoints.size(), 4u);
  EXPECT_TRUE(wide->checkpoints.count("7"));
}

TEST(RedisCheckpointStore, ReadScansIncrementallyPastManyUnrelatedKeys) {
  // More keys than one SCAN step covers: the stray must still be found.
  auto ns = test::unique_name("ns");
  auto topic = test::unique_name("t");
  auto c = test::redis_conn();
  auto filler = test::unique_name("filler") + ":";
  std::vector<std::string> mset{"MSET"};
  for (int i = 0; i < 5000; ++i) {
    mset.push_back(filler + std::to_string(i));
    mset.push_back("v");
  }
  ASSERT_EQ(test::redis_cmd(*c, mset), "OK");
  test::redis_cmd(*c, {"HSET", redis::checkpoint_prefix(ns, topic) + "5", "next_offset", "1"});
  auto s = redis::redis_checkpoint_store::open(test::redis_settings(ns, "convs:"));
  auto st = (*s)->read(topic, 2);
  std::vector<std::string> del{"DEL"};
  for (int i = 0; i < 5000; ++i)
    del.push_back(filler + std::to_string(i));
  test::redis_cmd(*c, del);
  ASSERT_TRUE(st) << describe(st.error());
  EXPECT_EQ(st->checkpoints.size(), 1u);
  EXPECT_TRUE(st->checkpoints.count("5"));
}

TEST(RedisCheckpointStore, ReadOfMetaOfTheWrongTypeHasEveryFieldMissing) {
  auto ns = test::unique_name("ns");
  auto topic = test::unique_name("t");
  auto c = test::redis_conn();
  test::redis_cmd(*c, {"SET", redis::meta_key(ns), "not a hash"});
  auto s = redis::redis_checkpoint_store::open(test::redis_settings(ns, "convs:"));
  auto st = (*s)->read(topic, 2);
  ASSERT_TRUE(st) << describe(st.error());
  ASSERT_TRUE(st->meta.has_value());
  EXPECT_TRUE(st->meta->empty());
  EXPECT_TRUE(st->checkpoints.empty());
}

TEST(RedisCheckpointStore, CreateMetaRefusesWhenAKnownCheckpointExists) {
  auto ns = test::unique_name("ns");
  auto topic = test::unique_name("t");
  auto id = ident(topic); // 2 partitions
  auto c = test::redis_conn();
  test::redis_cmd(*c, {"HSET", redis::checkpoint_key(ns, topic, 1), "next_offset", "1"});
  auto s = redis::redis_checkpoint_store::open(test::redis_settings(ns, "convs:"));
  auto created = (*s)->create_meta(id);
  ASSERT_FALSE(created);
  EXPECT_TRUE(is_refusal(created.error())) << describe(created.error());
  EXPECT_EQ(test::redis_cmd(*c, {"EXISTS", redis::meta_key(ns)}), "0");
}

TEST(RedisCheckpointStore, CreateMetaLooksOnlyAtTheKnownPartitions) {
  // Strays (partition >= count, odd suffixes) are the read's business: the
  // validation refuses them before meta is ever created.
  auto ns = test::unique_name("ns");
  auto topic = test::unique_name("t");
  auto c = test::redis_conn();
  auto key = redis::checkpoint_prefix(ns, topic);
  test::redis_cmd(*c, {"HSET", key + "7", "next_offset", "1"});
  test::redis_cmd(*c, {"SET", key + "x", "not a hash"});
  auto s = redis::redis_checkpoint_store::open(test::redis_settings(ns, "convs:"));
  auto created = (*s)->create_meta(ident(topic));
  ASSERT_TRUE(created) << describe(created.error());
  EXPECT_TRUE(*created);
  auto again = (*s)->create_meta(ident(topic));
  ASSERT_TRUE(again) << describe(again.error());
  EXPECT_FALSE(*again);
}

TEST(RedisCheckpointStore, MaxmemoryPolicyIsTheServers) {
  // A private server: changing the policy of the shared one could disturb
  // tests running in parallel.
  test::private_redis r{"policy", {}};
  ASSERT_TRUE(r.wait_ready());
  auto cfg = test::redis_settings("ns", "convs:");
  cfg.port = r.port;
  auto s = redis::redis_checkpoint_store::open(cfg);
  ASSERT_TRUE(s) << describe(s.error());
  auto before = (*s)->maxmemory_policy();
  ASSERT_TRUE(before) << describe(before.error());
  EXPECT_EQ(*before, "noeviction");
  auto c = redis::connection::open(cfg);
  ASSERT_TRUE(c);
  ASSERT_EQ(test::redis_cmd(**c, {"CONFIG", "SET", "maxmemory-policy", "allkeys-lru"}), "OK");
  auto after = (*s)->maxmemory_policy();
  ASSERT_TRUE(after) << describe(after.error());
  EXPECT_EQ(*after, "allkeys-lru");
  test::redis_cmd(**c, {"CONFIG", "SET", "maxmemory-policy", *before});
}

TEST(RedisCheckpointStore, WrongPasswordIsAClearErrorWithoutThePassword) {
  auto cfg = test::redis_settings("ns", "convs:");
  cfg.username = "nobody";
  cfg.password = "s3cret-Pa55";
  auto s = redis::redis_checkpoint_store::open(cfg);
  ASSERT_FALSE(s);
  // Refused credentials are a final configuration error, not an outage.
  EXPECT_EQ(s.error().code(), static_cast<uint8_t>(ec::invalid_config));
  auto text = describe(s.error());
  EXPECT_NE(text.find("AUTH failed for user 'nobody'"), std::string::npos) << text;
  EXPECT_EQ(text.find("s3cret-Pa55"), std::string::npos) << text;
  // AUTH of the default user on a server that has no password set.
  cfg.username.clear();
  auto d = redis::redis_checkpoint_store::open(cfg);
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().code(), static_cast<uint8_t>(ec::invalid_config)) << describe(d.error());
  EXPECT_NE(describe(d.error()).find("AUTH failed for user 'default'"), std::string::npos);
  EXPECT_EQ(describe(d.error()).find("s3cret-Pa55"), std::string::npos);
}

TEST(RedisConnection, ABlockedReadTimesOutAfterTheCommandTimeout) {
  auto cfg = test::redis_settings("ns", "convs:");
  cfg.command_timeout_ms = 500;
  test::expect_blocked_read_times_out(cfg);
}

TEST(RedisConnection, InterruptEndsABlockedCallAndEveryLaterOne) {
  auto cfg = test::redis_settings("ns", "convs:");
  cfg.command_timeout_ms = 10000;
  auto c = redis::connection::open(cfg);
  ASSERT_TRUE(c) << describe(c.error());
  auto* conn = c->get();
  auto t0 = std::chrono::steady_clock::now();
  auto blocked = std::async(std::launch::async, [conn] {
    return conn->command({"BLPOP", test::unique_name("never"), "0"});
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  conn->interrupt();
  ASSERT_EQ(blocked.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  auto took = std::chrono::steady_clock::now() - t0;
  auto r = blocked.get();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), static_cast<uint8_t>(ec::redis_unavailable));
  EXPECT_NE(describe(r.error()).find("interrupted"), std::string::npos) << describe(r.error());
  EXPECT_LT(took, std::chrono::seconds(2));
  auto later = conn->command({"PING"});
  ASSERT_FALSE(later);
  EXPECT_NE(describe(later.error()).find("interrupted"), std::string::npos);
  conn->interrupt(); // idempotent
}

TEST(RedisCheckpointStore, InterruptEndsACallBlockedOnAPausedServer) {
  // CLIENT PAUSE on a private server: every command of the store blocks.
  test::private_redis srv{"paused", {}};
  ASSERT_TRUE(srv.wait_ready());
  auto cfg = test::redis_settings(test::unique_name("ns"), "convs:");
  cfg.port = srv.port;
  cfg.command_timeout_ms = 10000;
  auto store = redis::redis_checkpoint_store::open(cfg);
  ASSERT_TRUE(store) << describe(store.error());
  auto sessions = redis::redis_session_store::open(cfg);
  ASSERT_TRUE(sessions) << describe(sessions.error());
  auto admin = redis::connection::open(cfg);
  ASSERT_TRUE(admin);
  ASSERT_EQ(test::redis_cmd(**admin, {"CLIENT", "PAUSE", "8000", "ALL"}), "OK");
  auto* s = store->get();
  auto* ss = sessions->get();
  auto t0 = std::chrono::steady_clock::now();
  auto read = std::async(std::launch::async, [s] { return s->read("t", 2); });
  auto list = std::async(std::launch::async, [ss] { return ss->sessions("u", 10); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(read.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  s->interrupt();
  ss->interrupt();
  ASSERT_EQ(read.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  ASSERT_EQ(list.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  auto took = std::chrono::steady_clock::now() - t0;
  auto r = read.get();
  auto l = list.get();
  // No UNPAUSE: under PAUSE ALL it would itself wait out the pause; the
  // private server is stopped by PID at the end.
  ASSERT_FALSE(r);
  ASSERT_FALSE(l);
  EXPECT_LT(took, std::chrono::seconds(2));
  EXPECT_EQ(r.error().code(), static_cast<uint8_t>(ec::redis_unavailable));
  EXPECT_EQ(l.error().code(), static_cast<uint8_t>(ec::redis_unavailable));
  EXPECT_NE(describe(r.error()).find("interrupted"), std::string::npos) << describe(r.error());
  // Every later call fails fast.
  auto t1 = std::chrono::steady_clock::now();
  auto v = s->server_version();
  ASSERT_FALSE(v);
  EXPECT_NE(describe(v.error()).find("interrupted"), std::string::npos);
  auto sent = ss->send(zadds{{"u", {{"c", 1}}}});
  ASSERT_FALSE(sent);
  EXPECT_EQ(sent.error().code(), static_cast<uint8_t>(ec::redis_unavailable));
  EXPECT_LT(std::chrono::steady_clock::now() - t1, std::chrono::milliseconds(500));
}

TEST(RedisSessionStore, InterruptEndsABlockingConfirm) {
  test::private_redis srv{"paused-confirm", {}};
  ASSERT_TRUE(srv.wait_ready());
  auto cfg = test::redis_settings("ns", test::unique_name("convs") + ":");
  cfg.port = srv.port;
  auto sessions = redis::redis_session_store::open(cfg);
  ASSERT_TRUE(sessions) << describe(sessions.error());
  auto admin = redis::connection::open(cfg);
  ASSERT_TRUE(admin);
  ASSERT_EQ(test::redis_cmd(**admin, {"CLIENT", "PAUSE", "8000", "ALL"}), "OK");
  auto* ss = sessions->get();
  ASSERT_TRUE(ss->send(zadds{{"u", {{"c", 1}}}}));
  auto t0 = std::chrono::steady_clock::now();
  auto done = std::async(std::launch::async,
                         [ss] { return ss->confirm(1, std::chrono::milliseconds{-1}); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ss->interrupt();
  ASSERT_EQ(done.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  auto took = std::chrono::steady_clock::now() - t0;
  auto r = done.get();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), static_cast<uint8_t>(ec::redis_unavailable));
  EXPECT_LT(took, std::chrono::seconds(2));
}

TEST(RedisConnection, NopermIsAConfigurationErrorNamingTheCommand) {
  // A user the ACL denies BLPOP, and keys outside its pattern.
  auto user = test::unique_name("limited");
  auto c = test::redis_conn();
  ASSERT_EQ(test::redis_cmd(*c, {"ACL", "SETUSER", user, "on", ">pw-limited", "~allowed:*",
                                 "+get", "+auth", "+hello", "+ping"}),
            "OK");
  auto cfg = test::redis_settings("ns", "convs:");
  cfg.username = user;
  cfg.password = "pw-limited";
  auto conn = redis::connection::open(cfg);
  ASSERT_TRUE(conn) << describe(conn.error());
  auto denied = (*conn)->command({"BLPOP", "allowed:x", "1"});
  auto key = (*conn)->command({"GET", "other:x"});
  test::redis_cmd(*c, {"ACL", "DELUSER", user});
  ASSERT_FALSE(denied);
  EXPECT_EQ(denied.error().code(), static_cast<uint8_t>(ec::invalid_config));
  EXPECT_NE(describe(denied.error()).find("BLPOP"), std::string::npos) << describe(denied.error());
  ASSERT_FALSE(key);
  EXPECT_EQ(key.error().code(), static_cast<uint8_t>(ec::invalid_config));
  EXPECT_NE(describe(key.error()).find("GET"), std::string::npos) << describe(key.error());
}

// The leader-epoch sidecar travels with the checkpoint in the same guarded
// script: written with it, untouched by a refused write, read back in the
// same atomic snapshot; the seven-field checkpoint hash stays as it is.
TEST(RedisCheckpointStore, LeaderEpochSidecarIsWrittenWithTheCheckpointOnly) {
  auto ns = test::unique_name("ns");
  auto topic = test::unique_name("t");
  auto id = ident(topic);
  auto a = redis::redis_checkpoint_store::open(test::redis_settings(ns, "convs:"));
  ASSERT_TRUE(a);
  ASSERT_EQ((*a)->create_meta(id), true);
  ASSERT_TRUE((*a)->write_checkpoint(id, 0, -1, 10, 3));
  auto c = test::redis_conn();
  auto side = redis::epoch_key(ns, topic, 0);
  EXPECT_EQ(test::redis_cmd(*c, {"HGET", side, "next_offset"}), "10");
  EXPECT_EQ(test::redis_cmd(*c, {"HGET", side, "leader_epoch"}), "3");
  // A refused write (stale expectation) changes neither key.
  auto stale = (*a)->write_checkpoint(id, 0, 7, 20, 4);
  ASSERT_FALSE(stale);
  EXPECT_EQ(test::redis_cmd(*c, {"HGET", side, "next_offset"}), "10");
  EXPECT_EQ(test::redis_cmd(*c, {"HGET", side, "leader_epoch"}), "3");
  // Unknown epoch: stored as -1 with its offset.
  ASSERT_TRUE((*a)->write_checkpoint(id, 0, 10, 12));
  EXPECT_EQ(test::redis_cmd(*c, {"HGET", side, "leader_epoch"}), "-1");
  ASSERT_TRUE((*a)->write_checkpoint(id, 0, 12, 15, 5));
  auto st = (*a)->read(topic, id.partition_count);
  ASSERT_TRUE(st) << describe(st.error());
  EXPECT_EQ(st->checkpoints.at("0"), core::encode_checkpoint(id, 0, 15));
  ASSERT_EQ(st->epochs.size(), 1u);
  EXPECT_EQ(st->epochs.at(0), (core::hash_fields{{"next_offset", "15"}, {"leader_epoch", "5"}}));
  auto v = core::validate_epochs(*st, {{0, 15}});
  EXPECT_TRUE(v.problems.empty());
  EXPECT_EQ(v.leader_epochs, (std::map<int32_t, int32_t>{{0, 5}}));
  // A sidecar of another offset is "unknown", a corrupt one a problem.
  EXPECT_TRUE(core::validate_epochs(*st, {{0, 16}}).leader_epochs.empty());
  test::redis_cmd(*c, {"HSET", side, "leader_epoch", "x"});
  st = (*a)->read(topic, id.partition_count);
  ASSERT_TRUE(st);
  auto bad = core::validate_epochs(*st, {{0, 15}});
  ASSERT_EQ(bad.problems.size(), 1u);
  EXPECT_EQ(bad.problems[0].field, "leader_epoch");
}

// docs/DESIGN.md §12 against a real Redis: claims grow the epoch, the guarded
// write refuses an older epoch in the same atomic step (the checkpoint hash
// keeps its seven fields), statuses are fenced, expire and are released.
TEST(RedisOwnership, ClaimsFenceOlderEpochsAndStatusesExpire) {
  auto ns = test::unique_name("ns");
  auto topic = test::unique_name("t");
  auto id = ident(topic);
  auto a = redis::redis_checkpoint_store::open(test::redis_settings(ns, "convs:"));
  auto b = redis::redis_checkpoint_store::open(test::redis_settings(ns, "convs:"));
  ASSERT_TRUE(a && b);
  ASSERT_EQ((*a)->create_meta(id), true);
  // No owner record: an unfenced writer (ownership all, epoch 0) writes.
  ASSERT_TRUE((*a)->write_checkpoint(id, 0, -1, 10));
  auto ea = (*a)->claim(topic, 0, "node-a", 1000);
  ASSERT_TRUE(ea);
  EXPECT_EQ(*ea, 1u);
  // From now on the unfenced writer is refused.
  auto unfenced = (*a)->write_checkpoint(id, 0, 10, 11);
  ASSERT_FALSE(unfenced);
  EXPECT_EQ(unfenced.error().code(), static_cast<uint8_t>(ec::fenced));
  ASSERT_TRUE((*a)->write_checkpoint(id, 0, 10, 20, -1, *ea, "node-a"));
  // node-b takes over: node-a's next write is fenced and changes nothing.
  auto eb = (*b)->claim(topic, 0, "node-b", 2000);
  ASSERT_TRUE(eb);
  EXPECT_EQ(*eb, 2u);
  auto stale = (*a)->write_checkpoint(id, 0, 20, 30, 5, *ea, "node-a");
  ASSERT_FALSE(stale);
  EXPECT_EQ(stale.error().code(), static_cast<uint8_t>(ec::fenced));
  EXPECT_EQ(fenced_partition(stale.error()), std::optional<int32_t>{0});
  auto text = describe(stale.error());
  EXPECT_NE(text.find("partition 0"), std::string::npos) << text;
  EXPECT_NE(text.find("node-b"), std::string::npos) << text;
  auto c = test::redis_conn();
  EXPECT_EQ(test::redis_cmd(*c, {"HGET", redis::checkpoint_key(ns, topic, 0), "next_offset"}), "20");
  EXPECT_EQ(test::redis_cmd(*c, {"HLEN", redis::checkpoint_key(ns, topic, 0)}), "7");
  EXPECT_EQ(test::redis_cmd(*c, {"HGET", redis::owner_key(ns, topic, 0), "node"}), "node-b");
  ASSERT_TRUE((*b)->write_checkpoint(id, 0, 20, 30, 5, *eb, "node-b"));

  auto ca = redis::redis_cluster_store::open(test::redis_settings(ns, "convs:"));
  auto cb = redis::redis_cluster_store::open(test::redis_settings(ns, "convs:"));
  ASSERT_TRUE(ca && cb);
  // node-a may no longer publish partition 0; node-b may.
  auto fenced = (*ca)->publish(topic, "node-a", {owned_status{0, *ea, "ready", 20, 20, true}},
                               std::chrono::milliseconds(60000), 3000);
  ASSERT_TRUE(fenced);
  ASSERT_EQ(fenced->size(), 1u);
  EXPECT_EQ((*fenced)[0].partition, 0);
  EXPECT_EQ((*fenced)[0].epoch, *ea);
  EXPECT_EQ((*fenced)[0].state, "fenced");
  EXPECT_EQ(test::redis_cmd(*c, {"EXISTS", redis::status_key(ns, topic, 0)}), "0");
  auto ok = (*cb)->publish(topic, "node-b", {owned_status{0, *eb, "catching-up", 40, 30, false}},
                           std::chrono::milliseconds(60000), 3000);
  ASSERT_TRUE(ok);
  EXPECT_TRUE(ok->empty());
  auto v = (*ca)->view(topic, id.partition_count);
  ASSERT_TRUE(v);
  ASSERT_EQ(v->size(), static_cast<size_t>(id.partition_count));
  EXPECT_EQ((*v)[0].owner, "node-b");
  EXPECT_EQ((*v)[0].epoch, 2u);
  EXPECT_EQ((*v)[0].heartbeat_ms, 3000);
  EXPECT_TRUE((*v)[0].live);
  EXPECT_FALSE((*v)[0].ready);
  EXPECT_NE((*v)[0].why.find("30 of H0 40"), std::string::npos) << (*v)[0].why;
  EXPECT_FALSE((*v)[1].ready);
  EXPECT_EQ((*v)[1].why, "no owner");
  // Caught up: ready.  Released: gone at once (node-a cannot release it).
  ASSERT_TRUE((*cb)->publish(topic, "node-b", {owned_status{0, *eb, "ready", 40, 40, true}},
                             std::chrono::milliseconds(60000), 4000));
  v = (*ca)->view(topic, id.partition_count);
  ASSERT_TRUE(v);
  EXPECT_TRUE((*v)[0].ready);
  ASSERT_TRUE((*ca)->release(topic, "node-a", {{0, *ea}}));
  EXPECT_EQ(test::redis_cmd(*c, {"EXISTS", redis::status_key(ns, topic, 0)}), "1");
  ASSERT_TRUE((*cb)->release(topic, "node-b", {{0, *eb}}));
  EXPECT_EQ(test::redis_cmd(*c, {"EXISTS", redis::status_key(ns, topic, 0)}), "0");
  // A status lives only as long as its TTL.
  ASSERT_TRUE((*cb)->publish(topic, "node-b", {owned_status{0, *eb, "ready", 40, 40, true}},
                             std::chrono::milliseconds(60000), 5000));
  auto ttl = std::stoll(test::redis_cmd(*c, {"PTTL", redis::status_key(ns, topic, 0)}));
  EXPECT_GT(ttl, 0);
  EXPECT_LE(ttl, 60000);
}

// docs/DESIGN.md §12, "Decision — re-claim", in the Lua scripts: a claim Redis
// lost (deleted, rolled back to an older record) is re-claimed above every
// epoch seen and is never a fence; a guarded write or a publish under it is
// refused as lost (checkpoint_conflict, transient), not as fenced; a
// partition that moved is never re-claimed.
TEST(RedisOwnership, ALostClaimIsReClaimedAndAMovedOneIsNot) {
  auto ns = test::unique_name("ns");
  auto topic = test::unique_name("t");
  auto id = ident(topic);
  auto a = redis::redis_checkpoint_store::open(test::redis_settings(ns, "convs:"));
  ASSERT_TRUE(a);
  ASSERT_EQ((*a)->create_meta(id), true);
  auto c = test::redis_conn();
  auto owner = redis::owner_key(ns, topic, 0);
  auto ea = (*a)->claim(topic, 0, "node-a", 1000, 0);
  ASSERT_TRUE(ea);
  EXPECT_EQ(*ea, 1u);
  // An intact claim is kept, not bumped.
  auto kept = (*a)->claim(topic, 0, "node-a", 1100, *ea);
  ASSERT_TRUE(kept);
  EXPECT_EQ(*kept, 1u);
  ASSERT_TRUE((*a)->write_checkpoint(id, 0, -1, 10, -1, 1, "node-a"));
  // Deleted (a failover to a replica that never saw the claim).
  test::redis_cmd(*c, {"DEL", owner});
  auto lost = (*a)->write_checkpoint(id, 0, 10, 20, -1, 1, "node-a");
  ASSERT_FALSE(lost);
  EXPECT_EQ(lost.error().code(), static_cast<uint8_t>(ec::checkpoint_conflict));
  EXPECT_NE(describe(lost.error()).find("no owner record"), std::string::npos)
    << describe(lost.error());
  auto cs = redis::redis_cluster_store::open(test::redis_settings(ns, "convs:"));
  ASSERT_TRUE(cs);
  auto pub = (*cs)->publish(topic, "node-a", {owned_status{0, 1, "ready", 10, 10, true}},
                            std::chrono::milliseconds(60000), 1200);
  ASSERT_TRUE(pub);
  ASSERT_EQ(pub->size(), 1u);
  EXPECT_EQ((*pub)[0].state, "lost");
  auto again = (*a)->claim(topic, 0, "node-a", 1300, 1);
  ASSERT_TRUE(again);
  EXPECT_EQ(*again, 2u); // above this node's 1, not a fresh 1
  EXPECT_EQ(test::redis_cmd(*c, {"HGET", redis::checkpoint_key(ns, topic, 0), "next_offset"}), "10");
  ASSERT_TRUE((*a)->write_checkpoint(id, 0, 10, 20, -1, 2, "node-a"));
  // Rolled back to a former owner's older record: re-claimed above both.
  test::redis_cmd(*c, {"HSET", owner, "node", "node-z", "epoch", "1"});
  auto rolled = (*a)->write_checkpoint(id, 0, 20, 30, -1, 2, "node-a");
  ASSERT_FALSE(rolled);
  EXPECT_EQ(rolled.error().code(), static_cast<uint8_t>(ec::checkpoint_conflict));
  auto third = (*a)->claim(topic, 0, "node-a", 1400, 2);
  ASSERT_TRUE(third);
  EXPECT_EQ(*third, 3u);
  // Moved: another node with an equal or newer epoch.  Never re-claimed.
  test::redis_cmd(*c, {"HSET", owner, "node", "node-b", "epoch", "3"});
  auto moved = (*a)->claim(topic, 0, "node-a", 1500, 3);
  ASSERT_FALSE(moved);
  EXPECT_EQ(moved.error().code(), static_cast<uint8_t>(ec::fenced));
  EXPECT_EQ(fenced_partition(moved.error()), std::optional<int32_t>{0});
  EXPECT_NE(describe(moved.error()).find("node-b"), std::string::npos) << describe(moved.error());
  EXPECT_EQ(test::redis_cmd(*c, {"HGET", owner, "node"}), "node-b");
  auto fenced = (*a)->write_checkpoint(id, 0, 20, 30, -1, 3, "node-a");
  ASSERT_FALSE(fenced);
  EXPECT_EQ(fenced.error().code(), static_cast<uint8_t>(ec::fenced));
  EXPECT_EQ(test::redis_cmd(*c, {"HGET", redis::checkpoint_key(ns, topic, 0), "next_offset"}), "20");
}
