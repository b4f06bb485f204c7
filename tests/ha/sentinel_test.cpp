// Redis Sentinel: the connection layer and the node against a real Sentinel
// topology each test starts for itself (tests/support/sentinel.hpp: a
// primary, two replicas, three Sentinels on free loopback ports), plus the
// Kafka broker of scripts/services for the dispatch log.
//
// - SentinelRedis.*: resolution through the Sentinels (first that answers, a dead
//   one skipped, an unknown master name), a stale answer naming a replica
//   (ROLE check: no write), a held connection to a primary that became a
//   replica (READONLY, never a write believed).
// - SentinelNode.*: failovers under a running `run` with a live producer: kill -9
//   of the primary, a planned SENTINEL FAILOVER, the old primary frozen and
//   returning while the node holds a connection to it.  Each checks what the
//   node says during the fault (/readyz), samples "no checkpoint ahead of its
//   data" on the current primary during the fault (an atomic MULTI/EXEC
//   snapshot of checkpoints and session sets), and ends with catch-up, audit
//   consistent and Redis equal to the test's model of the whole log.
#include <signal.h>

#include <atomic>
#include <fstream>
#include <mutex>
#include <regex>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "kafka/admin.hpp"
#include "kafka/producer.hpp"
#include "messages/types.hpp"
#include "redis/stores.hpp"
#include "tests/support/appender.hpp"
#include "tests/support/integration.hpp"
#include "tests/support/sentinel.hpp"

using namespace qsp;
using namespace std::chrono_literals;
using test::eventually;
using test::slurp;

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string text_of(const caf::error& e) { return describe(e); }

/// A topology per test.
struct SentinelRedis : ::testing::Test {
  std::string ns = test::unique_name("ha-ns");
  std::string convs = test::unique_name("ha-convs") + ":";
  std::unique_ptr<test::sentinel_set> set;

  virtual std::vector<std::string> server_extra() { return {}; }

  void SetUp() override {
    set = std::make_unique<test::sentinel_set>(2, 3, server_extra());
    ASSERT_TRUE(set->wait_settled()) << "the Sentinel topology did not settle";
  }

  redis::settings cfg() const { return set->settings(ns, convs); }
};

core::identity some_identity(const std::string& topic) {
  core::identity id;
  id.topic = topic;
  id.partition_count = 1;
  id.cluster_id = "cluster-ha";
  id.topic_id = "topic-id-ha";
  return id;
}

} // namespace

TEST(SentinelConfig, BadSentinelSettingsExitTwoNamingTheKey) {
  struct row {
    std::vector<std::string> args;
    std::string expect;
  };
  const std::string s1 = "--redis.sentinels=[\"127.0.0.1:26379\"]", name = "--redis.master-name=m";
  std::vector<row> rows{
    {{s1, name, "--redis.host=10.0.0.1"},
     "redis.sentinels: set either redis.sentinels (with redis.master-name) or redis.host/redis.port, "
     "not both (redis.host is set too)"},
    {{s1, name, "--redis.port=6380"}, "(redis.port is set too)"},
    {{"--redis.sentinels=[\"nocolon\"]", name},
     "redis.sentinels: entries must look like \"host:port\" (port in [1, 65535]), got \"nocolon\""},
    {{"--redis.sentinels=[\"127.0.0.1:26379\",\"h:0\"]", name}, "got \"h:0\""},
    {{s1}, "redis.master-name: required with redis.sentinels"},
    {{name}, "redis.master-name: only with redis.sentinels"},
    {{"--redis.sentinel-username=u"}, "redis.sentinel-username/-password: only with redis.sentinels"},
    {{s1, name, "--redis.sentinel-password-file=/nonexistent/pw"},
     "redis.sentinel-password-file: cannot read /nonexistent/pw"},
  };
  for (auto& r : rows) {
    std::vector<std::string> args{"verify", "--projection.dispatch-topic=t",
                                  "--projection.partition-count=1"};
    args.insert(args.end(), r.args.begin(), r.args.end());
    auto res = test::run_cli(args);
    EXPECT_EQ(res.rc, 2) << r.expect << "\n" << res.err;
    EXPECT_TRUE(contains(res.err, r.expect)) << r.expect << "\n" << res.err;
  }
}

TEST_F(SentinelRedis, ResolvesThePrimaryThroughTheSentinelsAndWritesThere) {
  auto c = redis::connection::open(cfg());
  ASSERT_TRUE(c) << text_of(c.error());
  auto primary = set->servers[0]->port;
  EXPECT_TRUE(contains((*c)->where(), "127.0.0.1:" + std::to_string(primary)))
    << (*c)->where();
  EXPECT_TRUE(contains((*c)->where(), "primary of 'qsp-primary'")) << (*c)->where();
  auto key = ns + ":probe";
  ASSERT_EQ(test::redis_cmd(**c, {"SET", key, "written"}), "OK");
  EXPECT_EQ(test::cli(primary, "GET " + key), "written\n");
  // The stores too: the checkpoint store's write lands on the primary.
  auto store = redis::redis_checkpoint_store::open(cfg());
  ASSERT_TRUE(store) << text_of(store.error());
  ASSERT_TRUE((*store)->create_meta(some_identity("t")));
  EXPECT_EQ(test::cli(primary, "HGET " + redis::meta_key(ns) + " dispatch_topic"), "t\n");
}

TEST_F(SentinelRedis, ADeadFirstSentinelIsSkipped) {
  auto c = cfg();
  c.sentinels.insert(c.sentinels.begin(), redis::address{"127.0.0.1", test::free_port()});
  auto conn = redis::connection::open(c);
  ASSERT_TRUE(conn) << text_of(conn.error());
  EXPECT_TRUE(contains((*conn)->where(), std::to_string(set->servers[0]->port)))
    << (*conn)->where();
  // Every Sentinel dead: a transient error naming each one.
  auto dead = cfg();
  dead.sentinels = {redis::address{"127.0.0.1", test::free_port()},
                    redis::address{"127.0.0.1", test::free_port()}};
  auto none = redis::connection::open(dead);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code(), static_cast<uint8_t>(ec::redis_unavailable)) << text_of(none.error());
  for (auto& s : dead.sentinels)
    EXPECT_TRUE(contains(text_of(none.error()), s.to_string())) << text_of(none.error());
}

TEST_F(SentinelRedis, AWrongMasterNameIsAFinalErrorNamingIt) {
  auto c = cfg();
  c.master_name = "no-such-primary";
  auto conn = redis::connection::open(c);
  ASSERT_FALSE(conn);
  auto text = text_of(conn.error());
  EXPECT_EQ(conn.error().code(), static_cast<uint8_t>(ec::invalid_config)) << text;
  EXPECT_TRUE(contains(text, "'no-such-primary' (redis.master-name)")) << text;
  for (auto& s : set->sentinel_list())
    EXPECT_TRUE(contains(text, s + ": does not know a master named 'no-such-primary'")) << text;
  // With a Sentinel that cannot be asked, it might know better: transient.
  c.sentinels.insert(c.sentinels.begin(), redis::address{"127.0.0.1", test::free_port()});
  auto maybe = redis::connection::open(c);
  ASSERT_FALSE(maybe);
  EXPECT_EQ(maybe.error().code(), static_cast<uint8_t>(ec::redis_unavailable))
    << text_of(maybe.error());
  // The node: exit 2 naming the key.
  auto args = test::node_args(test::unique_name("t"), 1, ns, convs);
  args.erase(std::remove_if(args.begin(), args.end(),
                            [](const std::string& a) {
                              return a.rfind("--redis.host=", 0) == 0
                                     || a.rfind("--redis.port=", 0) == 0;
                            }),
             args.end());
  args.insert(args.begin(), "verify");
  args.push_back(set->sentinels_option());
  args.push_back("--redis.master-name=no-such-primary");
  auto r = test::run_cli(args);
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "redis.master-name")) << r.err;
}

TEST_F(SentinelRedis, SentinelCredentialsFromTheAclExampleAndRefusalsNameThem) {
  // The Sentinel user of config/redis-acl.conf (a comment there: it belongs
  // in sentinel.conf), with the placeholder replaced.
  std::ifstream in{QSP_SOURCE_DIR "/config/redis-acl.conf"};
  std::string line, user_line;
  while (std::getline(in, line))
    if (line.rfind("# user qsession-sentinel ", 0) == 0)
      user_line = std::regex_replace(line.substr(2), std::regex{">CHANGE-ME"}, ">s-pw-1");
  ASSERT_FALSE(user_line.empty()) << "config/redis-acl.conf lacks the Sentinel user";
  test::private_sentinel guarded{set->master_name, set->servers[0]->port, 2,
                                 {user_line, "user nobody on >n-pw -@all"}};
  ASSERT_TRUE(eventually([&] {
    return contains(test::cli(guarded.port, "SENTINEL GET-MASTER-ADDR-BY-NAME " + set->master_name),
                    std::to_string(set->servers[0]->port));
  }, 20s));
  auto c = cfg();
  c.sentinels = {redis::address{"127.0.0.1", guarded.port}};
  c.sentinel_username = "qsession-sentinel";
  c.sentinel_password = "s-pw-1";
  auto ok = redis::connection::open(c);
  ASSERT_TRUE(ok) << text_of(ok.error());
  EXPECT_TRUE(contains((*ok)->where(), std::to_string(set->servers[0]->port)));
  // A wrong password: final, naming the user and the keys, never the password.
  c.sentinel_password = "wrong-pw-2";
  auto bad = redis::connection::open(c);
  ASSERT_FALSE(bad);
  auto text = text_of(bad.error());
  EXPECT_EQ(bad.error().code(), static_cast<uint8_t>(ec::invalid_config)) << text;
  EXPECT_TRUE(contains(text, "AUTH failed for user 'qsession-sentinel' (redis.sentinel-username / "
                             "redis.sentinel-password-file)")) << text;
  EXPECT_FALSE(contains(text, "wrong-pw-2")) << text;
  // A user the Sentinel's ACL denies the command: final, naming the ACL.
  c.sentinel_username = "nobody";
  c.sentinel_password = "n-pw";
  auto denied = redis::connection::open(c);
  ASSERT_FALSE(denied);
  EXPECT_EQ(denied.error().code(), static_cast<uint8_t>(ec::invalid_config))
    << text_of(denied.error());
  EXPECT_TRUE(contains(text_of(denied.error()), "the ACL denies SENTINEL")) << text_of(denied.error());
  // On Redis, a user without +role cannot pass the primary check: final.
  ASSERT_EQ(test::cli(set->servers[0]->port, "ACL SETUSER norole on '>r-pw' '~*' +@all -role"), "OK\n");
  auto r = cfg();
  r.username = "norole";
  r.password = "r-pw";
  auto norole = redis::connection::open(r);
  ASSERT_FALSE(norole);
  EXPECT_EQ(norole.error().code(), static_cast<uint8_t>(ec::invalid_config))
    << text_of(norole.error());
  EXPECT_TRUE(contains(text_of(norole.error()), "the ACL denies ROLE")) << text_of(norole.error());
}

namespace {

/// Replicas accept writes here (replica-read-only no): only the ROLE check
/// can keep a write off a replica that a stale Sentinel answer names.
struct SentinelWritableReplicas : SentinelRedis {
  std::vector<std::string> server_extra() override { return {"--replica-read-only", "no"}; }
};

} // namespace

TEST_F(SentinelWritableReplicas, AStaleAnswerNamingAReplicaGetsNoWrite) {
  // A Sentinel that monitors the replica as "stale": it keeps naming it,
  // just like a Sentinel that has not learned of a failover yet.
  auto replica = set->servers[1]->port;
  test::private_sentinel stale{"stale", replica, 1};
  ASSERT_TRUE(eventually([&] {
    return contains(test::cli(stale.port, "SENTINEL GET-MASTER-ADDR-BY-NAME stale"),
                    std::to_string(replica));
  }, 20s));
  auto c = cfg();
  c.sentinels = {redis::address{"127.0.0.1", stale.port}};
  c.master_name = "stale";
  auto store = redis::redis_checkpoint_store::open(c);
  ASSERT_FALSE(store);
  auto text = text_of(store.error());
  EXPECT_EQ(store.error().code(), static_cast<uint8_t>(ec::redis_unavailable)) << text;
  EXPECT_TRUE(contains(text, "127.0.0.1:" + std::to_string(replica))) << text;
  EXPECT_TRUE(contains(text, "ROLE says 'slave', not 'master'")) << text;
  // The node's catch-up against it: gives up (exit 4) naming the ROLE, and
  // nothing of its namespace exists on the (writable) replica.
  auto topic = test::unique_name("ha-stale");
  test::create_topic(topic, 1);
  auto args = test::node_args(topic, 1, ns, convs);
  args.erase(std::remove_if(args.begin(), args.end(),
                            [](const std::string& a) {
                              return a.rfind("--redis.host=", 0) == 0
                                     || a.rfind("--redis.port=", 0) == 0;
                            }),
             args.end());
  args.insert(args.begin(), "catch-up");
  args.push_back("--redis.sentinels=[\"" + stale.address() + "\"]");
  args.push_back("--redis.master-name=stale");
  args.push_back("--projection.catch-up-max-attempts=2");
  auto r = test::run_cli(args);
  EXPECT_EQ(r.rc, 4) << r.err;
  EXPECT_TRUE(contains(r.err, "ROLE says 'slave'")) << r.err;
  EXPECT_EQ(test::cli(replica, "--scan --pattern '" + ns + "*'"), "");
  EXPECT_EQ(test::cli(replica, "EXISTS " + redis::meta_key(ns)), "0\n");
  if (auto admin = kafka::admin::make(test::kafka_client()))
    (*admin)->delete_topic(topic);
}

TEST_F(SentinelRedis, AHeldConnectionToAPrimaryTurnedReplicaGetsReadonlyAndNoWrite) {
  auto id = some_identity("t");
  auto store = redis::redis_checkpoint_store::open(cfg());
  ASSERT_TRUE(store) << text_of(store.error());
  auto sessions = redis::redis_session_store::open(cfg());
  ASSERT_TRUE(sessions) << text_of(sessions.error());
  ASSERT_TRUE((*store)->create_meta(id));
  ASSERT_TRUE((*store)->write_checkpoint(id, 0, -1, 10));
  // A failover without Sentinel's client kill (an operator's REPLICAOF, or
  // a Sentinel reconfiguring while this connection survives): the Sentinels
  // stop first so that nobody undoes it.
  set->sentinels.clear();
  auto old_primary = set->servers[0]->port, promoted = set->servers[1]->port;
  ASSERT_EQ(test::cli(promoted, "REPLICAOF NO ONE"), "OK\n");
  ASSERT_EQ(test::cli(old_primary, "REPLICAOF 127.0.0.1 " + std::to_string(promoted)), "OK\n");
  ASSERT_TRUE(eventually([&] {
    return contains(test::cli(old_primary, "INFO replication"), "master_link_status:up");
  }, 20s));
  // The held checkpoint connection: READONLY, a transient error that says why.
  auto w = (*store)->write_checkpoint(id, 0, 10, 20);
  ASSERT_FALSE(w);
  EXPECT_EQ(w.error().code(), static_cast<uint8_t>(ec::redis_reply)) << text_of(w.error());
  EXPECT_TRUE(contains(text_of(w.error()), "READONLY")) << text_of(w.error());
  EXPECT_TRUE(contains(text_of(w.error()), "not the primary now")) << text_of(w.error());
  // The held session connection: the ZADD is refused, not confirmed.
  session_member m{"conv-1", 1733140000000};
  std::vector<session_update> ups{session_update{"u1", &m, 1}};
  auto a = (*sessions)->apply(ups);
  ASSERT_FALSE(a);
  EXPECT_TRUE(contains(text_of(a.error()), "READONLY")) << text_of(a.error());
  // Nowhere did the refused writes land: the checkpoint is still 10 on the
  // new primary (and, replicated, on the old one), the set does not exist.
  auto cp = redis::checkpoint_key(ns, "t", 0);
  EXPECT_EQ(test::cli(promoted, "HGET " + cp + " next_offset"), "10\n");
  EXPECT_EQ(test::cli(old_primary, "HGET " + cp + " next_offset"), "10\n");
  EXPECT_EQ(test::cli(promoted, "EXISTS " + convs + "u1"), "0\n");
}

// -- the node under failovers ---------------------------------------------------

namespace {

constexpr int users = 300;

struct SentinelNode : SentinelRedis {
  std::string topic = test::unique_name("ha");
  int partitions = 2;
  std::unique_ptr<kafka::admin> admin;
  std::map<int, std::vector<std::pair<int64_t, core::dispatch>>> log;
  uint64_t next_id = 0;
  std::mutex log_mu;
  uint16_t http_port = 0;

  void SetUp() override {
    SentinelRedis::SetUp();
    if (HasFatalFailure())
      return;
    auto a = kafka::admin::make(test::kafka_client());
    ASSERT_TRUE(a);
    admin = std::move(*a);
    test::create_topic(topic, partitions);
  }
  void TearDown() override {
    if (admin)
      admin->delete_topic(topic);
  }

  core::dispatch next_record(int part) {
    std::lock_guard<std::mutex> guard{log_mu};
    auto d = test::make_dispatch(next_id++, users);
    auto off = log[part].empty() ? 0 : log[part].back().first + 1;
    log[part].emplace_back(off, d);
    return d;
  }

  std::map<int, std::vector<std::pair<int64_t, core::dispatch>>> log_snapshot() {
    std::lock_guard<std::mutex> guard{log_mu};
    return log;
  }

  void produce(int per_partition) {
    auto p = kafka::producer::make(test::kafka_client());
    ASSERT_TRUE(p);
    for (int n = 0; n < per_partition; ++n)
      for (int part = 0; part < partitions; ++part)
        ASSERT_TRUE(p->send(topic, part, core::encode_json(next_record(part))));
    ASSERT_TRUE(p->flush());
  }

  /// A steady trickle of records into every partition until stopped.
  test::appender trickle() {
    return test::appender{test::kafka_client(), topic, partitions,
                          [this](int part) { return next_record(part); }};
  }

  /// Takes atomic snapshots (MULTI/EXEC: every checkpoint and every user's
  /// session set) on whatever server the Sentinels name as the primary,
  /// until stopped, and counts entries below a checkpoint that are missing
  /// or stale in the same snapshot.
  class sampler {
  public:
    explicit sampler(SentinelNode& s) : s_(s), thread_([this] { loop(); }) {}
    ~sampler() { stop(); }
    void stop() {
      if (thread_.joinable()) {
        stop_ = true;
        thread_.join();
      }
    }
    std::atomic<int> samples{0};
    size_t checked = 0;
    size_t overshoots = 0;
    std::vector<std::string> examples;

  private:
    void loop() {
      auto cfg = s_.cfg();
      cfg.command_timeout_ms = 1000;
      cfg.connect_timeout_ms = 500;
      while (!stop_) {
        sample(cfg);
        std::this_thread::sleep_for(100ms); // the sampling rate
      }
    }

    void sample(const redis::settings& cfg) {
      auto c = redis::connection::open(cfg);
      if (!c)
        return; // no primary right now: nothing to sample
      auto& conn = **c;
      std::vector<std::string> argv;
      conn.append({"MULTI"});
      for (int p = 0; p < s_.partitions; ++p)
        conn.append({"HGET", redis::checkpoint_key(s_.ns, s_.topic, p), "next_offset"});
      std::vector<std::string> keys;
      for (int u = 0; u < users; ++u)
        keys.push_back(s_.convs + "u" + std::to_string(u));
      for (auto& k : keys)
        conn.append({"ZRANGE", k, "0", "-1", "WITHSCORES"});
      conn.append({"EXEC"});
      for (int i = 0; i < 1 + s_.partitions + users; ++i)
        if (!conn.read_reply())
          return;
      auto exec = conn.read_reply("EXEC");
      if (!exec || (*exec)->type != REDIS_REPLY_ARRAY)
        return; // the connection dropped (a failover): no snapshot
      auto* rep = exec->get();
      if (rep->elements != static_cast<size_t>(s_.partitions + users))
        return;
      std::map<int, int64_t> cps;
      for (int p = 0; p < s_.partitions; ++p) {
        auto* e = rep->element[p];
        cps[p] = e->type == REDIS_REPLY_STRING ? std::stoll(std::string{e->str, e->len}) : 0;
      }
      std::map<std::string, std::map<std::string, int64_t>> sets;
      for (int u = 0; u < users; ++u) {
        auto* z = rep->element[s_.partitions + u];
        auto& out = sets["u" + std::to_string(u)];
        for (size_t j = 0; j + 1 < z->elements; j += 2)
          out[std::string{z->element[j]->str, z->element[j]->len}]
            = std::stoll(std::string{z->element[j + 1]->str, z->element[j + 1]->len});
      }
      auto snapshot = s_.log_snapshot(); // after the checkpoints: it covers them
      test::model m;
      for (auto& [p, cp] : cps) {
        auto& recs = snapshot[p];
        if (cp > static_cast<int64_t>(recs.size())) {
          note("partition " + std::to_string(p) + " checkpoint " + std::to_string(cp)
               + " past the log's end " + std::to_string(recs.size()));
          continue;
        }
        for (auto& [off, d] : recs)
          if (off < cp)
            test::apply(m, d);
      }
      for (auto& [user, cv] : m)
        for (auto& [conv, score] : cv) {
          ++checked;
          auto& got = sets[user];
          auto i = got.find(conv);
          if (i == got.end() || i->second < score)
            note("checkpoint ahead of its data: " + user + " " + conv);
        }
      ++samples;
    }

    void note(std::string what) {
      ++overshoots;
      if (examples.size() < 10)
        examples.push_back(std::move(what));
    }

    SentinelNode& s_;
    std::atomic<bool> stop_{false};
    std::thread thread_;
  };

  std::vector<std::string> args(const std::string& cmd, std::vector<std::string> extra = {}) {
    auto a = test::node_args(topic, partitions, ns, convs);
    a.erase(std::remove_if(a.begin(), a.end(),
                           [](const std::string& x) {
                             return x.rfind("--redis.host=", 0) == 0
                                    || x.rfind("--redis.port=", 0) == 0;
                           }),
            a.end());
    a.insert(a.begin(), cmd);
    a.push_back(set->sentinels_option());
    a.push_back("--redis.master-name=" + set->master_name);
    a.push_back("--redis.connect-timeout=500ms");
    a.push_back("--redis.command-timeout=1s");
    a.push_back("--projection.max-batch-records=300");
    a.push_back("--projection.catch-up-max-attempts=1000");
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }

  std::vector<std::string> run_args(std::vector<std::string> extra = {}) {
    auto a = args("run", std::move(extra));
    http_port = test::free_port();
    test::set_option(a, "http.listen", "127.0.0.1:" + std::to_string(http_port));
    return a;
  }

  std::unique_ptr<redis::connection> primary() {
    auto c = redis::connection::open(cfg());
    return c ? std::move(*c) : nullptr;
  }

  int64_t checkpoint(redis::connection& c, int p) {
    auto v = test::redis_cmd(c, {"HGET", redis::checkpoint_key(ns, topic, p), "next_offset"});
    return v.empty() || v.rfind("ERR", 0) == 0 ? -1 : std::stoll(v);
  }

  bool caught_up() {
    auto c = primary();
    if (!c)
      return false;
    for (auto& [p, recs] : log_snapshot())
      if (checkpoint(*c, p) != static_cast<int64_t>(recs.size()))
        return false;
    return true;
  }

  /// Waits (bounded) until partition 0's checkpoint on the current primary moves.
  bool checkpoints_advance(std::chrono::milliseconds limit = 60s) {
    int64_t before = -2;
    return eventually(
      [&] {
        auto c = primary();
        if (!c)
          return false;
        auto now = checkpoint(*c, 0);
        if (before == -2)
          before = now;
        return now > before;
      },
      limit);
  }

  nlohmann::json readyz() {
    auto r = test::http_get(http_port, "/readyz", 2s);
    auto j = nlohmann::json::parse(r.body, nullptr, false);
    return j.is_discarded() ? nlohmann::json{} : j;
  }

  uint32_t restarts() {
    auto j = readyz();
    return j.contains("restarts") ? j["restarts"].get<uint32_t>() : 0;
  }

  /// Once the failover is done: waits (bounded) for snapshots of the new
  /// primary (the promoted replica's prefix, then the node's writes on it),
  /// stops the sampler and checks what it found.
  void expect_no_overshoot_sampled(sampler& s) {
    int before = s.samples;
    EXPECT_TRUE(eventually([&] { return s.samples >= before + 3; }, 30s))
      << "no snapshot of the new primary";
    s.stop();
    sampled_checked = s.checked;
    sampled_overshoots = s.overshoots;
    EXPECT_EQ(s.overshoots, 0u) << ::testing::PrintToString(s.examples);
    std::fprintf(stderr, "sampled %d snapshots, %zu entries checked, %zu overshoots\n",
                 s.samples.load(), s.checked, s.overshoots);
  }

  using clock = std::chrono::steady_clock;
  static long ms_since(clock::time_point t0) {
    return static_cast<long>(
      std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - t0).count());
  }

  size_t sampled_checked = 0, sampled_overshoots = 0;

  /// catch-up, audit consistent, and the primary equal to the model of the
  /// whole log; prints the soak-result line of fault `kind` (`node_rc`: the
  /// run node's exit code, 3 a refusal).
  void expect_consistent_after_catch_up(const std::string& kind, int node_rc) {
    auto r = test::run_cli(args("catch-up"));
    ASSERT_EQ(r.rc, 0) << r.err;
    auto audit = test::run_cli(args("audit"));
    EXPECT_EQ(audit.rc, 0) << audit.out << audit.err;
    EXPECT_TRUE(contains(audit.out, "verdict: consistent")) << audit.out;
    test::model m;
    for (auto& [p, recs] : log_snapshot())
      for (auto& [off, d] : recs)
        test::apply(m, d);
    auto c = primary();
    ASSERT_TRUE(c);
    std::vector<std::string> differences;
    size_t lost = 0;
    for (auto& [user, cv] : m) {
      auto got = test::zset(*c, convs + user);
      if (got != cv)
        differences.push_back(user + ": " + std::to_string(got.size()) + " members, expected "
                              + std::to_string(cv.size()));
      for (auto& [conv, score] : cv) {
        auto it = got.find(conv);
        lost += it == got.end() || it->second != score;
      }
    }
    if (differences.size() > 20)
      differences.resize(20);
    EXPECT_TRUE(differences.empty()) << ::testing::PrintToString(differences);
    uint64_t records = 0;
    for (auto& [p, recs] : log_snapshot())
      records += recs.size();
    test::soak_result(kind, 1, records, sampled_checked, lost, sampled_overshoots,
                      (node_rc == 3 ? 1 : 0) + (r.rc == 3 ? 1 : 0));
  }
};

} // namespace

TEST_F(SentinelNode, PrimaryKilledUnderLoadTheNodeFollowsThePromotedReplica) {
  produce(3000);
  auto logf = "/tmp/" + test::unique_name("ha-kill") + ".log";
  test::node_process node{run_args(), logf};
  ASSERT_TRUE(test::readyz_reaches(http_port, 200, 90s)) << slurp(logf);
  auto more = trickle();
  ASSERT_TRUE(checkpoints_advance()) << slurp(logf);
  sampler samples{*this};
  auto old = set->servers[0]->port;
  auto t0 = clock::now();
  set->servers[0]->kill_hard();
  // During the fault: not ready, naming the lost primary.
  test::http_reply last;
  EXPECT_TRUE(test::readyz_reaches(http_port, 503, 30s, &last))
    << "/readyz never answered 503 after the primary was killed: " << last.body << slurp(logf);
  EXPECT_TRUE(contains(last.body, "127.0.0.1:" + std::to_string(old))) << last.body;
  auto not_ready = ms_since(t0);
  auto promoted = set->wait_failover_from(old);
  ASSERT_NE(promoted, 0) << "no failover";
  auto failed_over = ms_since(t0);
  EXPECT_TRUE(test::readyz_reaches(http_port, 200, 120s, &last)) << last.body << slurp(logf);
  std::fprintf(stderr, "kill -9: /readyz 503 after %ld ms, failover done after %ld ms, ready "
               "again after %ld ms\n", not_ready, failed_over, ms_since(t0));
  ASSERT_TRUE(checkpoints_advance()) << "the node does not write to the new primary\n"
                                     << slurp(logf);
  expect_no_overshoot_sampled(samples);
  more.stop();
  EXPECT_TRUE(eventually([&] { return caught_up(); }, 90s)) << slurp(logf);
  EXPECT_TRUE(contains(slurp(logf), "127.0.0.1:" + std::to_string(promoted)))
    << "the node never named the new primary\n" << slurp(logf);
  int rc = node.stop();
  EXPECT_EQ(rc, 0) << slurp(logf);
  expect_consistent_after_catch_up("sentinel-primary-kill", rc);
}

TEST_F(SentinelNode, PlannedFailoverUnderLoadRestartsOnTheNewPrimary) {
  produce(3000);
  auto logf = "/tmp/" + test::unique_name("ha-planned") + ".log";
  test::node_process node{run_args(), logf};
  ASSERT_TRUE(test::readyz_reaches(http_port, 200, 90s)) << slurp(logf);
  auto more = trickle();
  ASSERT_TRUE(checkpoints_advance()) << slurp(logf);
  sampler samples{*this};
  auto before = restarts();
  auto old = set->servers[0]->port;
  auto t0 = clock::now();
  ASSERT_TRUE(set->failover());
  // The demotion drops the node's connections (or a write meets READONLY):
  // it goes dirty and restarts; /readyz's status counts it.
  EXPECT_TRUE(eventually([&] { return restarts() > before; }, 30s))
    << "the node did not restart after the failover\n" << slurp(logf);
  auto dirty = ms_since(t0);
  auto promoted = set->wait_failover_from(old);
  ASSERT_NE(promoted, 0) << "no failover";
  auto failed_over = ms_since(t0);
  EXPECT_TRUE(test::readyz_reaches(http_port, 200, 120s)) << slurp(logf);
  std::fprintf(stderr, "SENTINEL FAILOVER: node restarted after %ld ms, failover done after %ld "
               "ms, ready again after %ld ms\n", dirty, failed_over, ms_since(t0));
  ASSERT_TRUE(checkpoints_advance()) << "the node does not write to the new primary\n"
                                     << slurp(logf);
  expect_no_overshoot_sampled(samples);
  more.stop();
  EXPECT_TRUE(eventually([&] { return caught_up(); }, 90s)) << slurp(logf);
  int rc = node.stop();
  EXPECT_EQ(rc, 0) << slurp(logf);
  expect_consistent_after_catch_up("sentinel-failover", rc);
}

TEST_F(SentinelNode, OldPrimaryReturnsWhileTheNodeHoldsAConnectionToIt) {
  produce(3000);
  auto logf = "/tmp/" + test::unique_name("ha-return") + ".log";
  // A command timeout longer than the failover: the node keeps its
  // connections to the frozen primary through it.
  test::node_process node{run_args({"--redis.command-timeout=30s"}), logf};
  ASSERT_TRUE(test::readyz_reaches(http_port, 200, 90s)) << slurp(logf);
  auto more = trickle();
  ASSERT_TRUE(checkpoints_advance()) << slurp(logf);
  sampler samples{*this};
  auto before = restarts();
  auto old = set->servers[0]->port;
  uint16_t promoted = 0;
  {
    test::pause_guard frozen{set->servers[0]->pid};
    ASSERT_TRUE(frozen.paused());
    promoted = set->wait_failover_from(old);
    ASSERT_NE(promoted, 0) << "no failover while the primary was frozen";
    EXPECT_EQ(restarts(), before) << "the node restarted before the old primary returned\n"
                                  << slurp(logf);
  } // SIGCONT: it answers the node's queued writes as a primary, until the
    // Sentinels make it a replica of the new one.
  EXPECT_TRUE(eventually([&] {
    return contains(test::cli(old, "INFO replication"), "master_port:" + std::to_string(promoted));
  }, 30s)) << "the old primary did not become a replica";
  // The node must not go on believing in the old primary: a dropped
  // connection or READONLY makes it dirty, and it restarts on the new one.
  EXPECT_TRUE(eventually([&] { return restarts() > before; }, 40s))
    << "the node did not restart after the old primary became a replica\n" << slurp(logf);
  std::fprintf(stderr, "old primary returned: the node went dirty with: %s\n",
               readyz().value("last_error", std::string{"?"}).c_str());
  EXPECT_TRUE(test::readyz_reaches(http_port, 200, 120s)) << slurp(logf);
  ASSERT_TRUE(checkpoints_advance()) << "the node does not write to the new primary\n"
                                     << slurp(logf);
  expect_no_overshoot_sampled(samples);
  more.stop();
  EXPECT_TRUE(eventually([&] { return caught_up(); }, 90s)) << slurp(logf);
  int rc = node.stop();
  EXPECT_EQ(rc, 0) << slurp(logf);
  expect_consistent_after_catch_up("sentinel-old-primary-returns", rc);
}
