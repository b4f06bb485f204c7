// The Redis adapters against a real redis-server: pipelined ZADD GT, the
// atomic read, meta creation and the guarded checkpoint write.
#include <csignal>

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
  auto st = (*a)->read(topic);
  ASSERT_TRUE(st);
  ASSERT_TRUE(st->meta.has_value());
  ASSERT_EQ(st->checkpoints.size(), 1u);
  EXPECT_EQ(st->checkpoints.at("0"), core::encode_checkpoint(id, 0, 6));
}

TEST(RedisCheckpointStore, ReadFindsStrayKeysAndCreateMetaRefusesOrphans) {
  auto ns = test::unique_name("ns");
  auto topic = test::unique_name("t");
  auto c = test::redis_conn();
  auto key = redis::checkpoint_prefix(ns, topic);
  test::redis_cmd(*c, {"HSET", key + "7", "next_offset", "1"});
  test::redis_cmd(*c, {"SET", key + "x", "not a hash"});
  auto s = redis::redis_checkpoint_store::open(test::redis_settings(ns, "convs:"));
  auto st = (*s)->read(topic);
  ASSERT_TRUE(st);
  EXPECT_FALSE(st->meta.has_value());
  EXPECT_EQ(st->checkpoints.size(), 2u);
  EXPECT_TRUE(st->checkpoints.count("7"));
  EXPECT_TRUE(st->checkpoints.count("x"));
  auto created = (*s)->create_meta(ident(topic));
  ASSERT_FALSE(created);
  EXPECT_TRUE(is_refusal(created.error()));
}

TEST(RedisCheckpointStore, WrongPasswordIsAClearErrorWithoutThePassword) {
  auto cfg = test::redis_settings("ns", "convs:");
  cfg.username = "nobody";
  cfg.password = "s3cret-Pa55";
  auto s = redis::redis_checkpoint_store::open(cfg);
  ASSERT_FALSE(s);
  auto text = describe(s.error());
  EXPECT_NE(text.find("AUTH failed for user 'nobody'"), std::string::npos) << text;
  EXPECT_EQ(text.find("s3cret-Pa55"), std::string::npos) << text;
}
