// The public test kit, used as a host uses it: only
// <qsession/projection/testkit.hpp>, linked against qsession::projection_testkit.
// Each fault the kit injects meets the real projection here, and each test
// asserts what the projection claims during the fault, not only after it.
#include <qsession/projection/testkit.hpp>

#include <gtest/gtest.h>

#include "caf/event_based_actor.hpp"

#include <algorithm>
#include <chrono>
#include <string>

#include "front.hpp"

namespace {

using namespace std::chrono_literals;
using qsp::testkit::kit;
using qsp::testkit::kit_options;

bool not_ready(const caf::expected<qsp::session_list>& x) {
  return !x && qsp::code_of(x.error()) == qsp::ec::not_ready;
}

void fill(kit& k, int per_partition) {
  for (int32_t p = 0; p < k.partition_count(); ++p)
    for (int i = 0; i < per_partition; ++i)
      k.produce(p, "conv-" + std::to_string(p) + "-" + std::to_string(i), 1000 + i,
                {"alice", "user-" + std::to_string(i % 4)});
}

// The acceptance story: Redis freezes, the projection says not-ready, Redis
// comes back, the projection is ready and Redis equals the model.
TEST(Kit, RedisFreezeClosesAndReopensReadiness) {
  kit k;
  fill(k, 20);
  k.start();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  ASSERT_TRUE(k.pull("alice", 10));
  k.redis_freeze();
  k.produce(1, "late", 5000, {"alice"});
  // Frozen past the command timeout: the writer gives up and says so.
  ASSERT_TRUE(k.run_until_state("dirty")) << k.explain();
  EXPECT_FALSE(k.ready());
  EXPECT_TRUE(not_ready(k.pull("alice", 10)));
  k.advance(10s); // the fault outlasts every timeout and backoff
  EXPECT_FALSE(k.ready()) << k.explain();
  EXPECT_FALSE(k.score("alice", "late"));
  k.redis_release();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  ASSERT_TRUE(k.run_until_offset(1, k.log_end(1))) << k.explain();
  EXPECT_EQ(k.score("alice", "late"), 5000);
  EXPECT_TRUE(k.model_equals_redis()) << k.explain();
  EXPECT_TRUE(k.check_invariants()) << k.explain();
  auto pulled = k.pull("alice", 1);
  ASSERT_TRUE(pulled);
  ASSERT_EQ(pulled->size(), 1u);
  EXPECT_EQ((*pulled)[0].conversation_id, "late");
}

TEST(Kit, ReadyOnlyAfterEveryPartitionReachedH0) {
  kit k;
  fill(k, 300); // several batches per partition
  k.start();
  ASSERT_TRUE(k.run_until_state("catching-up")) << k.explain();
  EXPECT_TRUE(not_ready(k.pull("alice", 10)));
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  auto st = k.status();
  ASSERT_TRUE(st);
  for (auto& ps : st->partitions) {
    EXPECT_EQ(ps.h0, 300);
    EXPECT_GE(ps.next_offset, ps.h0);
  }
  EXPECT_TRUE(k.model_equals_redis()) << k.explain();
}

TEST(Kit, RedisDownKeepsTheProjectionNotReadyUntilItIsBack) {
  kit k;
  fill(k, 5);
  k.start();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  k.redis_down();
  k.produce(0, "while-down", 9000, {"bob"});
  ASSERT_TRUE(k.run_until_state("dirty")) << k.explain();
  k.advance(10s);
  EXPECT_FALSE(k.ready());
  EXPECT_FALSE(k.score("bob", "while-down"));
  k.redis_up();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  ASSERT_TRUE(k.run_until_offset(0, k.log_end(0))) << k.explain();
  EXPECT_EQ(k.score("bob", "while-down"), 9000);
  EXPECT_TRUE(k.model_equals_redis()) << k.explain();
}

TEST(Kit, AnErrorReplyIsRetriedNeverSkipped) {
  kit k;
  fill(k, 3);
  k.start();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  k.redis_error_reply();
  k.produce(2, "after-error", 7000, {"carol"});
  ASSERT_TRUE(k.run_until_offset(2, k.log_end(2))) << k.explain();
  EXPECT_EQ(k.score("carol", "after-error"), 7000);
  auto st = k.status();
  ASSERT_TRUE(st);
  EXPECT_EQ(st->failures.count("redis_reply"), 1u);
  EXPECT_TRUE(k.model_equals_redis()) << k.explain();
}

TEST(Kit, AFailoverThatLosesWritesIsRepairedFromTheLog) {
  kit k;
  fill(k, 10);
  k.start();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  for (int i = 0; i < 5; ++i)
    k.produce(0, "new-" + std::to_string(i), 8000 + i, {"dave"});
  ASSERT_TRUE(k.run_until_offset(0, k.log_end(0))) << k.explain();
  ASSERT_EQ(k.score("dave", "new-4"), 8004);
  EXPECT_EQ(k.redis_failover(3), 3u);
  // The last ZADDs and the checkpoint above them are gone.
  EXPECT_FALSE(k.score("dave", "new-4"));
  EXPECT_LT(*k.checkpoint(0), k.log_end(0));
  // An idle projection notices at its next write: its guarded checkpoint
  // write finds the older checkpoint, it goes dirty and replays from there.
  k.produce(0, "next", 8100, {"dave"});
  ASSERT_TRUE(k.run_until_offset(0, k.log_end(0))) << k.explain();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  EXPECT_EQ(k.score("dave", "new-4"), 8004);
  EXPECT_TRUE(k.model_equals_redis()) << k.explain();
}

TEST(Kit, BrokerDownOutlastingEveryTimeoutNeverOpensReadiness) {
  kit k;
  fill(k, 5);
  k.broker_down();
  k.start();
  k.advance(30s);
  EXPECT_FALSE(k.ready()) << k.explain();
  for (auto& s : k.statuses())
    EXPECT_NE(s.state, "ready");
  k.broker_up();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  EXPECT_TRUE(k.model_equals_redis()) << k.explain();
}

TEST(Kit, ASlowBrokerDelaysButLosesNothing) {
  kit k;
  k.broker_slow(500ms);
  fill(k, 5);
  k.start();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  k.produce(1, "slow", 6000, {"erin"});
  k.advance(200ms);
  EXPECT_FALSE(k.score("erin", "slow"));
  ASSERT_TRUE(k.run_until_offset(1, k.log_end(1))) << k.explain();
  EXPECT_EQ(k.score("erin", "slow"), 6000);
  EXPECT_TRUE(k.model_equals_redis()) << k.explain();
}

TEST(Kit, TransactionsProjectOnlyWhatCommits) {
  kit k;
  fill(k, 2);
  auto t1 = k.begin_transaction(0);
  k.produce_in(0, t1, "kept", 4000, {"frank"});
  auto t2 = k.begin_transaction(1);
  k.produce_in(1, t2, "dropped", 4001, {"frank"});
  k.start();
  // The open transactions pin the LSO: H0 stops below them.
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  EXPECT_FALSE(k.score("frank", "kept"));
  k.commit(0, t1);
  k.abort(1, t2);
  ASSERT_TRUE(k.run_until_offset(0, k.log_end(0))) << k.explain();
  ASSERT_TRUE(k.run_until_offset(1, k.log_end(1))) << k.explain();
  EXPECT_EQ(k.score("frank", "kept"), 4000);
  EXPECT_FALSE(k.score("frank", "dropped"));
  EXPECT_TRUE(k.model_equals_redis()) << k.explain();
}

// -- a host's own reader layer over the simulated broker (kit_options::reader) --

namespace {

/// A host's reader layer, from the public header alone: passes the simulated
/// reader through, counts what it delivers, and (when `drop_epochs`) loses
/// the leader epochs, as a layer that copies records into its own type
/// without them would.
class counting_layer final : public qsp::dispatch_log {
public:
  struct counts {
    size_t records = 0;
  };

  counting_layer(std::shared_ptr<qsp::dispatch_log> inner, std::shared_ptr<counts> n,
                 bool drop_epochs)
    : inner_(std::move(inner)), n_(std::move(n)), drop_epochs_(drop_epochs) {}

  caf::expected<void> start(const std::map<int32_t, int64_t>& starts,
                            const std::map<int32_t, int32_t>& epochs) override {
    return inner_->start(starts, epochs);
  }
  std::shared_ptr<qsp::partition_reader> reader(int32_t partition) override {
    auto r = inner_->reader(partition);
    return r ? std::make_shared<reader_layer>(std::move(r), n_, drop_epochs_) : nullptr;
  }
  caf::expected<void> add(const std::map<int32_t, int64_t>& starts,
                          const std::map<int32_t, int32_t>& epochs) override {
    return inner_->add(starts, epochs);
  }
  caf::expected<void> remove(const std::vector<int32_t>& partitions) override {
    return inner_->remove(partitions);
  }
  int64_t log_end(int32_t partition) override { return inner_->log_end(partition); }
  void interrupt() override { inner_->interrupt(); }

private:
  struct reader_layer final : qsp::partition_reader {
    reader_layer(std::shared_ptr<qsp::partition_reader> r, std::shared_ptr<counts> n, bool drop)
      : r_(std::move(r)), n_(std::move(n)), drop_(drop) {}
    caf::expected<void> poll(size_t max, std::vector<qsp::log_record>& out,
                             int64_t& passed) override {
      auto before = out.size();
      auto ok = r_->poll(max, out, passed);
      n_->records += out.size() - before;
      if (drop_)
        for (auto i = before; i < out.size(); ++i)
          out[i].leader_epoch = -1;
      return ok;
    }
    void on_data(std::function<void()> wake) override { r_->on_data(std::move(wake)); }
    int32_t position_epoch(int64_t offset) override { return r_->position_epoch(offset); }
    std::shared_ptr<qsp::partition_reader> r_;
    std::shared_ptr<counts> n_;
    bool drop_;
  };

  std::shared_ptr<qsp::dispatch_log> inner_;
  std::shared_ptr<counts> n_;
  bool drop_epochs_;
};

kit_options with_layer(std::shared_ptr<counting_layer::counts> n, bool drop_epochs) {
  kit_options o;
  o.reader = [n, drop_epochs](std::shared_ptr<qsp::dispatch_log> simulated) {
    return std::make_shared<counting_layer>(std::move(simulated), n, drop_epochs);
  };
  return o;
}

} // namespace

// A host's layer under a slow broker and transactions: what it delivers is
// projected, the aborted transaction is not, the gaps are audited, and the
// projection is ready only once caught up.
TEST(KitReader, AHostLayerUnderASlowBrokerLosesNothing) {
  auto n = std::make_shared<counting_layer::counts>();
  kit k{with_layer(n, false)};
  fill(k, 3);
  auto t = k.begin_transaction(2);
  k.produce_in(2, t, "dropped", 4001, {"frank"});
  k.abort(2, t);
  k.produce(2, "after", 4002, {"frank"});
  k.broker_slow(500ms);
  k.start();
  k.advance(200ms);
  EXPECT_FALSE(k.ready()) << k.explain();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  EXPECT_GE(n->records, 3u * 3u + 1u);
  EXPECT_EQ(k.score("frank", "after"), 4002);
  EXPECT_FALSE(k.score("frank", "dropped"));
  EXPECT_TRUE(k.model_equals_redis()) << k.explain();
}

// A layer that loses the leader epochs is caught, never trusted: refused,
// naming the reader's contract, and never ready.
TEST(KitReader, ALayerThatLosesTheEpochsIsRefused) {
  auto n = std::make_shared<counting_layer::counts>();
  kit k{with_layer(n, true)};
  fill(k, 3);
  k.start();
  ASSERT_TRUE(k.run_until_state("refused")) << k.explain();
  auto st = k.status();
  ASSERT_TRUE(st);
  EXPECT_NE(st->last_error.find("without a leader epoch"), std::string::npos) << st->last_error;
  EXPECT_FALSE(k.ready());
  for (auto& s : k.statuses())
    EXPECT_NE(s.state, "ready");
}

TEST(Kit, ARecreatedTopicIsRefused) {
  kit k;
  fill(k, 5);
  k.start();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  k.recreate_topic();
  k.produce(0, "new-topic", 9999, {"gina"});
  ASSERT_TRUE(k.run_until_state("refused")) << k.explain();
  auto st = k.status();
  ASSERT_TRUE(st);
  EXPECT_NE(st->last_error.find("topic id differs"), std::string::npos) << st->last_error;
  k.advance(10s);
  EXPECT_EQ(k.state(), "refused");
  EXPECT_FALSE(k.score("gina", "new-topic"));
  EXPECT_TRUE(k.check_invariants()) << k.explain();
}

TEST(Kit, AnUncleanTruncationBelowTheCheckpointIsRefused) {
  kit k;
  fill(k, 10);
  k.start();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  k.unclean_truncate(0, 4);
  k.produce(0, "refill", 5555, {"hank"});
  k.restart();
  ASSERT_TRUE(k.run_until_state("refused")) << k.explain();
  EXPECT_FALSE(k.score("hank", "refill"));
  EXPECT_TRUE(k.check_invariants()) << k.explain();
}

TEST(Kit, AddedPartitionsAreRefused) {
  kit k;
  fill(k, 2);
  k.start();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  k.add_partitions(1);
  k.restart();
  ASSERT_TRUE(k.run_until_state("refused")) << k.explain();
  EXPECT_FALSE(k.ready());
}

TEST(Kit, AnEvictedMetaIsRefusedAtTheNextStart) {
  kit k;
  fill(k, 2);
  k.start();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  ASSERT_TRUE(k.redis_evict("session_projection:meta"));
  EXPECT_FALSE(k.redis_evict("session_projection:no-such-key"));
  k.restart();
  ASSERT_TRUE(k.run_until_state("refused")) << k.explain();
}

TEST(Kit, HostOwnershipRevokeThenAssignLosesNothing) {
  kit k;
  k.settings().ownership = qsp::ownership_mode::host;
  k.settings().node_id = "node-a";
  fill(k, 5);
  k.start();
  ASSERT_TRUE(k.assign({0, 1, 2})) << k.explain();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  ASSERT_TRUE(k.revoke({1})) << k.explain();
  k.produce(1, "while-revoked", 3000, {"ivy"});
  k.advance(1s);
  EXPECT_FALSE(k.score("ivy", "while-revoked"));
  ASSERT_TRUE(k.assign({1})) << k.explain();
  ASSERT_TRUE(k.run_until_offset(1, k.log_end(1))) << k.explain();
  EXPECT_EQ(k.score("ivy", "while-revoked"), 3000);
  EXPECT_TRUE(k.model_equals_redis()) << k.explain();
}

TEST(Kit, RedisClusterShardFailoverLosesNothing) {
  kit_options o;
  o.redis_shards = 3;
  kit k{o};
  EXPECT_EQ(k.redis_shard_count(), 3);
  fill(k, 10);
  k.start();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  k.redis_moved();
  k.produce(0, "moved", 7100, {"jack"});
  ASSERT_TRUE(k.run_until_offset(0, k.log_end(0))) << k.explain();
  EXPECT_EQ(k.score("jack", "moved"), 7100);
  k.redis_ask();
  k.produce(2, "asked", 7200, {"jack"});
  ASSERT_TRUE(k.run_until_offset(2, k.log_end(2))) << k.explain();
  EXPECT_EQ(k.score("jack", "asked"), 7200);
  for (int i = 0; i < 6; ++i)
    k.produce(i % 3, "more-" + std::to_string(i), 7300 + i, {"kate", "liam", "mona"});
  ASSERT_TRUE(k.run_until_offset(0, k.log_end(0))) << k.explain();
  ASSERT_TRUE(k.run_until_offset(1, k.log_end(1))) << k.explain();
  ASSERT_TRUE(k.run_until_offset(2, k.log_end(2))) << k.explain();
  EXPECT_GT(k.redis_shard_failover(1, 4), 0u);
  ASSERT_TRUE(k.run_until([&] {
    return k.ready() && k.model_equals_redis();
  })) << k.explain();
  EXPECT_TRUE(k.check_invariants()) << k.explain();
}

TEST(Kit, AHostActorSeesTheSameSystem) {
  kit k;
  fill(k, 3);
  k.start();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  // A host actor in the kit's system asks the projection, as a PULL
  // handler would; it runs when the kit runs.
  auto answer = std::make_shared<std::string>();
  auto proj = k.projection();
  // (CAF 0.17: a function actor gets its state as spawn arguments.)
  k.system().spawn(
    [](caf::event_based_actor* self, std::shared_ptr<std::string> out,
       qsp::projection_actor target) {
      qsp::mail(self, qsp::atom::pull_v, std::string{"alice"}, uint32_t{1}).request(target, caf::infinite)
        .then([out](const qsp::session_list& xs) { *out = xs.empty() ? "empty" : xs[0].conversation_id; },
              [out](const caf::error&) { *out = "error"; });
    },
    answer, proj);
  k.run();
  // Newest first; equal scores by member, descending (ZREVRANGE).
  EXPECT_EQ(*answer, "conv-2-2");
}

TEST(Kit, TheSameActionsReplayTheSameRun) {
  auto once = [] {
    kit k;
    fill(k, 50);
    k.start();
    k.run_until_ready();
    k.redis_freeze();
    k.advance(2s);
    k.redis_release();
    k.run_until_ready();
    return std::make_pair(k.digest(), k.redis_sessions());
  };
  auto a = once(), b = once();
  EXPECT_EQ(a.first, b.first);
  EXPECT_EQ(a.second, b.second);
}

// What a host sees when its test fails: explain() names what was not
// reached and the last events.  (An invariant violation needs a bug in the
// projection: tests/testkit/schedule_test.cpp plants some, and checks that
// the failure names the invariant.)
TEST(Kit, AFailureExplainsItselfWithTheLastEvents) {
  kit k;
  fill(k, 3);
  k.broker_down(); // the projection never gets far
  k.start();
  k.advance(100ms);
  k.produce(0, "x", 1, {"zed"});
  ASSERT_FALSE(k.failed());
  ASSERT_TRUE(k.check_invariants());
  k.broker_up();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  ASSERT_TRUE(k.redis_evict("convs:zed"));
  // Evictions are accounted for: Redis may lack the evicted entries.
  EXPECT_TRUE(k.check_invariants()) << k.explain();
  EXPECT_TRUE(k.model_equals_redis()) << k.explain();
  EXPECT_FALSE(k.run_until_state("no-such-state", 50ms));
  // Not reached is that call's false, not a broken invariant.
  EXPECT_FALSE(k.failed());
  auto why = k.explain();
  EXPECT_NE(why.find("no-such-state"), std::string::npos) << why;
  EXPECT_NE(why.find("last events"), std::string::npos) << why;
  EXPECT_NE(why.find("evict convs:zed"), std::string::npos) << why;
  // The next wait that succeeds leaves nothing to explain.
  ASSERT_TRUE(k.run_until_ready());
  EXPECT_EQ(k.explain(), "");
}

// -- the gate: the kit's readiness is what a pull sees ---------------------------

/// A projection with host ownership, node-a owning every partition, the
/// gate open.
void host_owned(kit& k) {
  k.settings().ownership = qsp::ownership_mode::host;
  k.settings().node_id = "node-a";
  fill(k, 5);
  k.start();
  ASSERT_TRUE(k.assign({0, 1, 2})) << k.explain();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
}

bool served(const caf::expected<qsp::session_list>& x) { return static_cast<bool>(x); }

// Item 1 of issue 33: a revoke that leaves partition 1 without an owner
// closes the gate while this node's state stays ready.  ready() is the
// gate, so waiting for !ready() returns (before: it never did).
TEST(KitGate, ReadyIsTheGateAndClosesWhenARevokeLeavesAPartitionUnowned) {
  kit k;
  host_owned(k);
  ASSERT_TRUE(served(k.pull("alice", 10))) << k.explain();
  ASSERT_TRUE(k.revoke({1})) << k.explain();
  ASSERT_TRUE(k.run_until([&] { return !k.ready(); }, 5s)) << k.explain();
  EXPECT_FALSE(k.statuses().back().ready);
  EXPECT_EQ(k.state(), "ready"); // the node's state: it still runs 0 and 2
  auto st = k.status();
  ASSERT_TRUE(st);
  EXPECT_FALSE(st->ready);
  auto refused = k.pull("alice", 10);
  ASSERT_TRUE(not_ready(refused));
  EXPECT_NE(qsp::describe(refused.error()).find("its namespace is not"), std::string::npos)
    << qsp::describe(refused.error());
  // The journal says that the gate closed, and why.
  auto events = k.events(40);
  auto closed = std::find_if(events.begin(), events.end(), [](const std::string& e) {
    return e.find("gate closed: namespace not ready: 1: ") != std::string::npos;
  });
  EXPECT_NE(closed, events.end()) << k.explain();
  // Assigned again: the gate opens, and pull serves.
  ASSERT_TRUE(k.assign({1})) << k.explain();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  EXPECT_TRUE(served(k.pull("alice", 10)));
}

// Item 2: run_until_state("ready") is the node's state; run_until_ready()
// waits for the gate.  A node owning only some partitions is ready while
// its namespace's gate stays closed, and a pull says not ready.
TEST(KitGate, RunUntilReadyWaitsForTheGateNotForTheState) {
  kit k;
  k.settings().ownership = qsp::ownership_mode::host;
  k.settings().node_id = "node-a";
  fill(k, 5);
  k.start();
  ASSERT_TRUE(k.assign({0, 1})) << k.explain();
  ASSERT_TRUE(k.run_until_state("ready")) << k.explain();
  EXPECT_FALSE(k.ready());
  EXPECT_TRUE(not_ready(k.pull("alice", 10)));
  // Not reached within the limit: that call's false, not a failure.
  EXPECT_FALSE(k.run_until_ready(2s));
  EXPECT_FALSE(k.failed());
  EXPECT_NE(k.explain().find("the gate open"), std::string::npos) << k.explain();
  EXPECT_TRUE(not_ready(k.pull("alice", 10)));
  ASSERT_TRUE(k.assign({2})) << k.explain();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  EXPECT_TRUE(served(k.pull("alice", 10)));
  EXPECT_EQ(k.state(), "ready");
}

// Item 3: when a wait returns, a subscribed host actor has every push the
// kit has seen: asked at once, it answers from the same state.
TEST(KitGate, AHostListenerHasEveryPushWhenAWaitReturns) {
  kit k;
  k.settings().ownership = qsp::ownership_mode::host;
  k.settings().node_id = "node-a";
  fill(k, 50);
  auto log = std::make_shared<test_front::record>();
  caf::actor front;
  k.on_start([&](kit& kk) { front = test_front::spawn(kk, log); });
  k.start();
  ASSERT_TRUE(k.assign({0, 1, 2})) << k.explain();
  auto same_view = [&] {
    // The front's latest push is the kit's latest: its gate agrees.
    auto got = k.request<qsp::session_list>(front, qsp::atom::pull_v, std::string{"alice"},
                                            uint32_t{10});
    return static_cast<bool>(got) == k.ready();
  };
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  size_t kit_pushes = k.statuses().size();
  EXPECT_GE(log->pushes, 3u);
  EXPECT_LE(log->pushes, kit_pushes);
  EXPECT_TRUE(same_view()) << k.explain();
  ASSERT_TRUE(k.revoke({1})) << k.explain();
  ASSERT_TRUE(k.run_until_not_ready()) << k.explain();
  EXPECT_TRUE(same_view()) << k.explain();
  ASSERT_TRUE(k.assign({1})) << k.explain();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  EXPECT_TRUE(same_view()) << k.explain();
  // And the front took exactly the pushes sent to it: none is waiting.
  auto before = log->pushes;
  k.run();
  EXPECT_EQ(log->pushes, before);
}

// Item 4: a revoke's answer does not close the gate.  It closes at this
// node's next cluster heartbeat, at most heartbeat_interval later (250 ms
// by default); until then a pull still serves.  run_until_not_ready()
// waits for it.
TEST(KitGate, ARevokeClosesTheGateAtTheNextHeartbeatNotAtOnce) {
  kit k;
  host_owned(k);
  auto every = k.settings().heartbeat_interval;
  ASSERT_TRUE(k.revoke({1})) << k.explain();
  auto revoked = k.elapsed();
  EXPECT_TRUE(k.ready());
  EXPECT_TRUE(served(k.pull("alice", 10))) << "the gate closed at once: say so in TESTING.md";
  ASSERT_TRUE(k.run_until_not_ready(every + 50ms)) << k.explain();
  auto took = k.elapsed() - revoked;
  EXPECT_GT(took, 0ms);
  EXPECT_LE(took, every + k.settings().idle_poll) << "closed after "
                                                  << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                                                  << " ms";
  EXPECT_TRUE(not_ready(k.pull("alice", 10)));
}

// -- the host's actors -------------------------------------------------------------

// Item 6: one call asks a host actor and runs the kit until it answers.
TEST(KitHost, RequestAsksAHostActorInOneLine) {
  kit k;
  fill(k, 3);
  auto log = std::make_shared<test_front::record>();
  caf::actor front;
  k.on_start([&](kit& kk) { front = test_front::spawn(kk, log); });
  k.start();
  // The front answers not_ready itself until the gate opens.
  auto early = k.request<qsp::session_list>(front, qsp::atom::pull_v, std::string{"alice"},
                                            uint32_t{10});
  EXPECT_TRUE(not_ready(early));
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  auto got = k.request<qsp::session_list>(front, qsp::atom::pull_v, std::string{"alice"},
                                          uint32_t{1});
  ASSERT_TRUE(got) << qsp::describe(got.error());
  ASSERT_EQ(got->size(), 1u);
  EXPECT_EQ((*got)[0].conversation_id, "conv-2-2");
  // An actor that never answers: the request times out on the kit's clock.
  // (It keeps its promises: CAF 1.x answers a dropped one with broken_promise.)
  auto kept = std::make_shared<std::vector<caf::typed_response_promise<qsp::session_list>>>();
  auto silent = k.system().spawn(
    [](caf::event_based_actor* self,
       std::shared_ptr<std::vector<caf::typed_response_promise<qsp::session_list>>> kept)
      -> caf::behavior {
      return {[self, kept](qsp::atom::pull, const std::string&, uint32_t) {
        kept->push_back(self->make_response_promise<qsp::session_list>());
        return kept->back();
      }};
    },
    kept);
  auto t0 = k.elapsed();
  auto none = k.request_within<qsp::session_list>(1s, silent, qsp::atom::pull_v,
                                                  std::string{"alice"}, uint32_t{1});
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error(), caf::sec::request_timeout) << qsp::describe(none.error());
  EXPECT_GE(k.elapsed() - t0, 1s);
  EXPECT_FALSE(k.failed());
  caf::anon_send_exit(silent, caf::exit_reason::user_shutdown);
}

// Item 7: restart() spawns a new projection with a new handle; on_start
// hooks run with it, so the host binds its front again.  The old front saw
// its projection end.
TEST(KitHost, OnStartRebindsTheHostAfterARestart) {
  kit k;
  fill(k, 3);
  std::vector<qsp::projection_actor> handles;
  std::vector<std::shared_ptr<test_front::record>> logs;
  caf::actor front;
  k.on_start([&](kit& kk) {
    handles.push_back(kk.projection());
    logs.push_back(std::make_shared<test_front::record>());
    front = test_front::spawn(kk, logs.back());
  });
  k.start();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  EXPECT_EQ(k.starts(), 1u);
  ASSERT_TRUE(k.restart()) << k.explain();
  EXPECT_EQ(k.starts(), 2u);
  ASSERT_EQ(handles.size(), 2u);
  EXPECT_NE(handles[0], handles[1]);
  EXPECT_EQ(handles[1], k.projection());
  EXPECT_TRUE(logs[0]->down) << "the old front did not see its projection end";
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  auto got = k.request<qsp::session_list>(front, qsp::atom::pull_v, std::string{"alice"},
                                          uint32_t{10});
  EXPECT_TRUE(got) << qsp::describe(got.error());
  auto events = k.events(200);
  EXPECT_NE(std::find_if(events.begin(), events.end(),
                         [](const std::string& e) {
                           return e.find("projection #2 (a new handle)") != std::string::npos;
                         }),
            events.end());
}

// Item 8: a refusal pushed again (a push may repeat the previous one):
// the front alerts once per refusal, while a listener that counts pushes
// would alert on each.
TEST(KitHost, ARepeatedRefusalIsAlertedOnce) {
  kit k;
  fill(k, 3);
  auto log = std::make_shared<test_front::record>();
  k.on_start([&](kit& kk) { test_front::spawn(kk, log); });
  k.start();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  k.recreate_topic();
  k.produce(0, "new-topic", 9999, {"gina"});
  ASSERT_TRUE(k.run_until_state("refused")) << k.explain();
  ASSERT_EQ(log->alerts.size(), 1u);
  auto pushes = log->pushes;
  auto kit_pushes = k.statuses().size();
  k.repeat_status(3);
  // Delivered when repeat_status returns: three more refused pushes each.
  EXPECT_EQ(log->pushes, pushes + 3);
  ASSERT_EQ(k.statuses().size(), kit_pushes + 3);
  size_t refused_pushes = 0;
  for (auto& s : k.statuses())
    refused_pushes += s.state == "refused" ? 1 : 0;
  EXPECT_GE(refused_pushes, 4u);
  EXPECT_EQ(log->alerts.size(), 1u);
  EXPECT_NE(log->alerts.front().find("topic_id"), std::string::npos) << log->alerts.front();
}

// Item 5, in the kit: a host invariant is checked with the projection's,
// after every step, and named the same way when it breaks.
TEST(KitHost, AHostInvariantIsCheckedAfterEveryStepAndNamed) {
  kit k;
  fill(k, 3);
  size_t checks = 0;
  k.add_invariant("zed never gets a session", [&](const kit& kk) -> std::string {
    ++checks;
    return kk.score("zed", "forbidden") ? "zed/forbidden is in Redis" : "";
  });
  k.start();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  EXPECT_GT(checks, 20u);
  EXPECT_FALSE(k.failed());
  k.produce(1, "forbidden", 5000, {"zed"});
  // Stops at the step that wrote the entry, before its checkpoint.
  EXPECT_FALSE(k.run_until_offset(1, k.log_end(1)));
  EXPECT_TRUE(k.failed());
  EXPECT_FALSE(k.checkpoint(1) && *k.checkpoint(1) == k.log_end(1));
  auto why = k.explain();
  EXPECT_NE(why.find("[zed never gets a session] zed/forbidden is in Redis"), std::string::npos)
    << why;
  EXPECT_NE(why.find("last events"), std::string::npos) << why;
}

// -- the edges a host team met (the installed package and the docs alone) ------------

size_t count_of(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + 1))
    ++n;
  return n;
}

// start() and restart() return as the other calls do: the hooks' actors
// have started, the projection took their subscriptions and each has its
// first push.  Nothing else ran: the clock stands, the projection has not
// begun verifying.
TEST(KitHost, StartAndRestartDeliverTheFirstPushToTheHooksActors) {
  kit k;
  fill(k, 3);
  std::vector<std::shared_ptr<test_front::record>> logs;
  std::vector<caf::actor> fronts;
  k.on_start([&](kit& kk) {
    logs.push_back(std::make_shared<test_front::record>());
    fronts.push_back(test_front::spawn(kk, logs.back()));
  });
  auto t0 = k.elapsed();
  auto writes = k.redis_writes();
  k.start();
  ASSERT_EQ(logs.size(), 1u);
  EXPECT_EQ(logs[0]->pushes, 1u) << "start() returned before the hook's front had its first push";
  ASSERT_EQ(k.statuses().size(), 1u);
  EXPECT_EQ(k.state(), k.statuses().front().state);
  EXPECT_FALSE(k.ready());
  EXPECT_EQ(k.elapsed(), t0);
  EXPECT_EQ(k.redis_writes(), writes);
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  auto pushes = k.statuses().size();
  ASSERT_TRUE(k.restart()) << k.explain();
  ASSERT_EQ(logs.size(), 2u);
  EXPECT_TRUE(logs[0]->down);
  EXPECT_EQ(logs[1]->pushes, 1u) << "restart() returned before the new front had its first push";
  // The kit's own view is the new projection's: not the old one's "stopped".
  ASSERT_GT(k.statuses().size(), pushes);
  EXPECT_NE(k.state(), "stopped");
  EXPECT_FALSE(k.ready());
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  EXPECT_GE(logs[1]->pushes, 2u);
}

// settings() answers the configured values before start(), not zeros the
// engine would fill in only when it spawns the projection.
TEST(Kit, SettingsAnswerTheConfiguredValuesBeforeStart) {
  kit_options o;
  o.partitions = 5;
  o.topic = "orders";
  o.ns = "tenant_b";
  kit k{o};
  EXPECT_EQ(k.settings().partition_count, 5);
  EXPECT_EQ(k.settings().topic, "orders");
  EXPECT_EQ(k.settings().ns, "tenant_b");
  // Partitions added before the first start: the settings follow the topic.
  k.add_partitions(1);
  EXPECT_EQ(k.settings().partition_count, 6);
  k.produce(5, "conv-new", 1000, {"alice"});
  k.start();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  EXPECT_EQ(k.score("alice", "conv-new"), 1000);
  EXPECT_EQ(k.settings().partition_count, 6);
  // After it they are what the node was configured with (AddedPartitionsAreRefused).
  k.add_partitions(1);
  EXPECT_EQ(k.settings().partition_count, 6);
}

// A count the test set itself is kept.
TEST(Kit, ASettingTheTestMadeIsKept) {
  kit k;
  k.settings().partition_count = 2;
  k.add_partitions(1);
  EXPECT_EQ(k.settings().partition_count, 2);
}

/// A host's front that is re-bound to a projection sent to it typed.
caf::behavior rebinder(caf::event_based_actor* self, std::shared_ptr<qsp::projection_actor> bound) {
  return {
    [self, bound](const qsp::projection_actor& proj) -> caf::result<std::string> {
      *bound = proj;
      auto rp = self->make_response_promise<std::string>();
      qsp::mail(self, qsp::atom::status_v)
        .request(proj, caf::infinite)
        .then([rp](const qsp::projection_status& st) mutable { rp.deliver(st.topic); },
              [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
      return rp;
    },
  };
}

// The projection's handle has a public type ID: a host sends it typed (a
// front re-bound after a restart), not as a caf::actor.
TEST(KitHost, TheProjectionHandleIsSentTyped) {
  static_assert(caf::type_id<qsp::projection_actor>::value >= caf::id_block::qsp_handles::begin
                  && caf::type_id<qsp::projection_actor>::value < caf::id_block::qsp_handles::end,
                "qsp::projection_actor has a type ID in the public block qsp_handles");
  kit k;
  fill(k, 2);
  auto bound = std::make_shared<qsp::projection_actor>();
  auto front = k.system().spawn(rebinder, bound);
  k.start();
  auto got = k.request<std::string>(front, k.projection());
  ASSERT_TRUE(got) << qsp::describe(got.error()) << k.explain();
  EXPECT_EQ(*got, "dispatch");
  EXPECT_EQ(*bound, k.projection());
  ASSERT_TRUE(k.restart()) << k.explain();
  got = k.request<std::string>(front, k.projection());
  ASSERT_TRUE(got) << qsp::describe(got.error()) << k.explain();
  EXPECT_EQ(*bound, k.projection());
  EXPECT_FALSE(k.failed()) << k.explain();
}

// A failure shows its last events once (they were printed twice: once with
// the invariant's report and again after the state).
TEST(Kit, AFailureShowsItsLastEventsOnce) {
  kit k;
  fill(k, 3);
  k.add_invariant("zed never gets a session", [](const kit& kk) -> std::string {
    return kk.score("zed", "forbidden") ? "zed/forbidden is in Redis" : "";
  });
  k.start();
  ASSERT_TRUE(k.run_until_ready()) << k.explain();
  k.produce(1, "forbidden", 5000, {"zed"});
  EXPECT_FALSE(k.run_until_offset(1, k.log_end(1)));
  ASSERT_TRUE(k.failed());
  auto why = k.explain();
  EXPECT_EQ(count_of(why, "last events:"), 1u) << why;
  EXPECT_EQ(count_of(why, "[zed never gets a session] zed/forbidden is in Redis"), 1u) << why;
  auto produced = "produce partition 1 offset " + std::to_string(k.log_end(1) - 1);
  EXPECT_EQ(count_of(why, produced), 1u) << why;
  EXPECT_EQ(count_of(why, "state: "), 1u) << why;
}

/// The projection's log (kit_options::log) while it starts, is ready and
/// stops, as captured from stderr.
std::string captured_log(kit_options o, bool host_owned) {
  o.log = true;
  testing::internal::CaptureStderr();
  {
    kit k{o};
    if (host_owned) {
      k.settings().ownership = qsp::ownership_mode::host;
      k.settings().node_id = "node-a";
    }
    fill(k, 2);
    k.start();
    if (host_owned)
      k.assign({0, 1, 2});
    k.run_until_ready();
    k.stop();
  }
  return testing::internal::GetCapturedStderr();
}

// The kit's log lines carry the tag the node's do: "[<topic> <namespace>] "
// ("[<topic> <namespace> <node_id>] " in the clustered modes), not "[test] ".
TEST(Kit, LogLinesCarryTheTopicAndNamespaceTag) {
  kit_options o;
  o.topic = "orders";
  o.ns = "tenant_b";
  auto out = captured_log(o, false);
  EXPECT_GT(count_of(out, "[orders tenant_b] "), 3u) << out;
  EXPECT_EQ(count_of(out, "[test] "), 0u) << out;
  // Every line the projection logged is tagged.
  size_t lines = 0;
  for (size_t at = 0, next; at < out.size(); at = next + 1) {
    next = out.find('\n', at);
    if (next == std::string::npos)
      next = out.size();
    auto line = out.substr(at, next - at);
    if (line.empty())
      continue;
    ++lines;
    EXPECT_NE(line.find("[orders tenant_b] "), std::string::npos) << line;
  }
  EXPECT_GT(lines, 3u);
  auto clustered = captured_log(o, true);
  EXPECT_GT(count_of(clustered, "[orders tenant_b node-a] "), 3u) << clustered;
  EXPECT_EQ(count_of(clustered, "[test] "), 0u) << clustered;
}

/// A host actor that never quits by itself; `ended` turns true when it
/// terminates.
caf::behavior long_lived(caf::event_based_actor* self, std::shared_ptr<bool> ended) {
  self->attach_functor([ended](const caf::error&) { *ended = true; });
  return {[](const std::string& x) { return x; }};
}

// A host actor still alive when the kit goes is ended with it: a handle
// kept past the kit (a caf::actor in a closure of schedule_options) is
// harmless.  (Before, releasing it crashed with a bare segmentation fault:
// the actor's cleanup reached its destroyed system.)
TEST(KitHost, AHostActorHandleThatOutlivesTheKitIsHarmless) {
  auto ended = std::make_shared<bool>(false);
  caf::actor kept;
  {
    kit k;
    kept = k.system().spawn(long_lived, ended);
    auto echoed = k.request<std::string>(kept, std::string{"hi"});
    ASSERT_TRUE(echoed) << qsp::describe(echoed.error());
    EXPECT_FALSE(*ended);
  }
  EXPECT_TRUE(*ended) << "the kit left its actor running past its actor system";
  kept = nullptr; // the last handle, after the system is gone
}

} // namespace
