// Several nodes, one namespace (docs/DESIGN.md §12): ownership by assign/revoke,
// fenced checkpoint writes, and the namespace-wide readiness gate.  Two
// projections share one fake world where a test needs two nodes.
// (Every test also runs the fixture's invariants.)
#include "tests/actor/fixture.hpp"

#include <sstream>

#include <spdlog/details/null_mutex.h>
#include <spdlog/sinks/base_sink.h>

using namespace qsp;
using namespace qsp::test;

namespace {

using parts = std::vector<int32_t>;

/// A log sink that keeps what it was given in a stream of its own.  (Not
/// spdlog's ostream_sink over a test's local stream: the projection logs
/// until the fixture is destroyed, after the test body's locals are gone.)
class string_sink : public spdlog::sinks::base_sink<spdlog::details::null_mutex> {
public:
  std::string str() const { return out_.str(); }

protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t formatted;
    formatter_->format(msg, formatted);
    out_.write(formatted.data(), static_cast<std::streamsize>(formatted.size()));
  }
  void flush_() override {}

private:
  std::ostringstream out_;
};

struct Cluster : projection_fixture {
  Cluster() {
    settings.ownership = ownership_mode::host;
    settings.node_id = "node-a";
    settings.heartbeat_interval = 50ms;
  }

  /// Asks `target` and steps (moving the clock) until answered.
  template <class T, class... Ts>
  caf::expected<T> ask_of(projection_actor target, Ts... xs) {
    return engine::ask_of<T>(target, std::chrono::hours{1}, xs...);
  }

  caf::expected<caf::ok_atom> assign(parts ps) { return ask_of<caf::ok_atom>(proj, atom::assign_v, ps); }
  caf::expected<caf::ok_atom> revoke(parts ps) { return ask_of<caf::ok_atom>(proj, atom::revoke_v, ps); }

  /// A second node on the same world, into `peer` (call it with
  /// ASSERT_NO_FATAL_FAILURE: a node that cannot be spawned ends the test).
  void spawn_peer(const std::string& node, projection_actor& peer) {
    auto cfg = settings;
    cfg.node_id = node;
    auto opts = deterministic();
    opts.logs = quiet_log();
    auto p = spawn_projection(sys, cfg, ports, decoder, std::make_shared<metrics>(), opts);
    ASSERT_TRUE(p) << describe(p.error());
    peers.push_back(*p);
    peer = *p;
  }

  std::optional<std::string> owner_field(int32_t p, const std::string& field) {
    std::lock_guard<std::recursive_mutex> g{world->mtx};
    auto i = world->hashes.find(world->ns + ":owner:" + world->topic + ":" + std::to_string(p));
    if (i == world->hashes.end() || i->second.count(field) == 0)
      return std::nullopt;
    return i->second.at(field);
  }

  bool has_status(int32_t p) {
    std::lock_guard<std::recursive_mutex> g{world->mtx};
    return world->hashes.count(world->ns + ":status:" + world->topic + ":" + std::to_string(p)) > 0;
  }

  bool namespace_ready() {
    auto st = status();
    return st && st->namespace_ready;
  }

  ~Cluster() override {
    for (auto& p : peers)
      qsp::anon_mail(atom::shutdown_v).send(p);
    rt.run();
  }

  /// Status notifications in state "verifying" from index `since` on.
  size_t verifying_since(size_t since) const {
    size_t n = 0;
    for (size_t i = since; i < seen->size(); ++i)
      n += (*seen)[i].state == "verifying" ? 1 : 0;
    return n;
  }

  std::vector<projection_actor> peers;
};

} // namespace

TEST_F(Cluster, WithOwnershipAllNothingOfTheClusterMachineryRuns) {
  settings.ownership = ownership_mode::all;
  fill(0, 5);
  start();
  ASSERT_TRUE(drive_to("ready"));
  run_for(1s);
  EXPECT_EQ(world->calls.claims, 0u);
  EXPECT_EQ(world->calls.publishes, 0u);
  EXPECT_TRUE(!owner_field(0, "epoch"));
  auto st = status();
  ASSERT_TRUE(st);
  EXPECT_TRUE(st->ready && st->namespace_ready);
  EXPECT_EQ(st->owned.size(), 3u);
  auto r = ask_of<caf::ok_atom>(proj, atom::assign_v, parts{0});
  ASSERT_TRUE(!r);
  EXPECT_TRUE(has_code(r.error(), ec::invalid_config));
}

TEST_F(Cluster, AnAssignedPartitionIsClaimedVerifiedAndProjectedAndTheGateWaitsForEveryPartition) {
  fill(0, 20);
  fill(1, 20);
  fill(2, 20);
  start();
  ASSERT_TRUE(drive_to("ready")); // owns nothing yet: ready locally ...
  EXPECT_TRUE(!namespace_ready());  // ... but no partition has an owner
  EXPECT_TRUE(!pull("u1", 5));
  ASSERT_TRUE(assign({0}));
  h0 = {{0, 20}};
  EXPECT_EQ(owner_field(0, "node").value_or(""), "node-a");
  EXPECT_EQ(owner_field(0, "epoch").value_or(""), "1");
  ASSERT_TRUE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{20}; }));
  EXPECT_TRUE(!world->checkpoint(1));
  EXPECT_TRUE(!world->checkpoint(2));
  run_for(200ms);
  EXPECT_TRUE(has_status(0));
  EXPECT_TRUE(!namespace_ready());
  auto gate = pull("u1", 5);
  ASSERT_TRUE(!gate);
  EXPECT_TRUE(has_code(gate.error(), ec::not_ready));
  // Locally ready, so the refusal says what holds the namespace closed.
  EXPECT_TRUE(contains(describe(gate.error()), "is ready, but its namespace is not: 1: no owner"));
  auto st = status();
  ASSERT_TRUE(st);
  EXPECT_EQ(st->state, "ready");
  ASSERT_EQ(st->cluster.size(), 3u);
  EXPECT_TRUE(st->cluster[0].ready);
  EXPECT_TRUE(!st->cluster[1].ready && contains(st->cluster[1].why, "no owner"));
  // A second node takes the rest: both gates open.
  projection_actor b;
  ASSERT_NO_FATAL_FAILURE(spawn_peer("node-b", b));
  ASSERT_TRUE(ask_of<caf::ok_atom>(b, atom::assign_v, parts{1, 2}));
  // The gate opens only once node-b's partitions reached their H0.
  bool early = false;
  ASSERT_TRUE(drive([&] {
    bool open = namespace_ready();
    early |= open && (world->checkpoint(1) != std::optional<int64_t>{20}
                      || world->checkpoint(2) != std::optional<int64_t>{20});
    return open;
  }));
  EXPECT_TRUE(!early);
  EXPECT_TRUE(pull("u1", 5));
  auto sb = ask_of<projection_status>(b, atom::status_v);
  ASSERT_TRUE(sb);
  EXPECT_TRUE(sb->ready);
  EXPECT_TRUE(sb->owned == parts({1, 2}));
  EXPECT_TRUE(world->checkpoint(1) == std::optional<int64_t>{20});
  EXPECT_TRUE(world->checkpoint(2) == std::optional<int64_t>{20});
  // A partition whose owner goes dirty closes every node's gate.
  world->redis_frozen = true;
  ASSERT_TRUE(drive([&] { return !namespace_ready(); }));
  world->redis_frozen = false;
  ASSERT_TRUE(drive([&] { return namespace_ready(); }));
}

TEST_F(Cluster, ARevokeDuringAPendingConfirmAbandonsTheBatchWithoutACheckpoint) {
  fill(0, 10);
  start();
  ASSERT_TRUE(assign({0}));
  h0 = {{0, 10}};
  ASSERT_TRUE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{10}; }));
  // The next batch's ZADDs are sent but their replies never come in.
  world->confirm_not_yet = 1000000;
  auto sends = world->calls.max_unconfirmed;
  fill(0, 10);
  ASSERT_TRUE(drive([&] { return world->calls.confirm > 0 && world->calls.not_yet > 0; }));
  (void) sends;
  auto written = world->calls.write_checkpoint;
  ASSERT_TRUE(revoke({0}));
  // Answered: nothing of partition 0 runs, and its checkpoint stayed.
  EXPECT_TRUE(world->checkpoint(0) == std::optional<int64_t>{10});
  EXPECT_EQ(world->calls.write_checkpoint, written);
  EXPECT_TRUE(!has_status(0));
  world->confirm_not_yet = 0;
  run_for(2s);
  EXPECT_TRUE(world->checkpoint(0) == std::optional<int64_t>{10});
  EXPECT_EQ(world->calls.write_checkpoint, written);
  auto st = status();
  ASSERT_TRUE(st);
  EXPECT_TRUE(st->owned.empty());
}

TEST_F(Cluster, AnAssignWhileAVerificationIsRunningRestartsItWithBothPartitions) {
  fill(0, 10);
  fill(1, 10);
  start();
  ASSERT_TRUE(drive_to("ready"));
  // The second assign arrives while the verification the first started is
  // running: after it claimed partition 0, before it answered.
  auto r0 = std::make_shared<std::optional<caf::expected<caf::ok_atom>>>();
  auto r1 = std::make_shared<std::optional<caf::expected<caf::ok_atom>>>();
  bool sent = false;
  world->on_inspect = [&] {
    if (sent)
      return;
    sent = true;
    EXPECT_EQ(owner_field(0, "epoch").value_or(""), "1");
    // Into the mailbox now, ahead of the verifier's answer.
    qsp::anon_mail(atom::assign_v, parts{1}).send(proj);
  };
  sys.spawn(prober<caf::ok_atom, atom::assign, parts>, r0, proj, atom::assign_v, parts{0});
  ASSERT_TRUE(drive([&] { return *r0 && sent; }));
  EXPECT_TRUE(**r0);
  (void) r1;
  h0 = {{0, 10}, {1, 10}};
  ASSERT_TRUE(drive([&] {
    return world->checkpoint(0) == std::optional<int64_t>{10}
           && world->checkpoint(1) == std::optional<int64_t>{10};
  }));
  // Each partition was claimed once: the restarted verification reused the
  // claims it had made, it did not fence itself.
  EXPECT_EQ(world->calls.claims, 2u);
  EXPECT_EQ(owner_field(0, "epoch").value_or(""), "1");
  EXPECT_EQ(owner_field(1, "epoch").value_or(""), "1");
}

TEST_F(Cluster, RevokeThenReAssignTheSamePartitionContinuesFromItsCheckpointWithANewEpoch) {
  fill(0, 10);
  start();
  ASSERT_TRUE(assign({0}));
  h0 = {{0, 10}};
  ASSERT_TRUE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{10}; }));
  ASSERT_TRUE(revoke({0}));
  fill(0, 10);
  run_for(500ms);
  EXPECT_TRUE(world->checkpoint(0) == std::optional<int64_t>{10}); // nobody owns it
  ASSERT_TRUE(assign({0}));
  h0 = {{0, 20}};
  EXPECT_EQ(owner_field(0, "epoch").value_or(""), "2");
  ASSERT_TRUE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{20}; }));
  EXPECT_TRUE(world->score("u1", "p0-c10"));
}

TEST_F(Cluster, AFormerOwnerWhosePartitionWasClaimedByAnotherNodeIsFencedAndLetsItGo) {
  fill(0, 10);
  fill(1, 10);
  start();
  ASSERT_TRUE(assign({0, 1}));
  h0 = {{0, 10}, {1, 10}};
  ASSERT_TRUE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{10}; }));
  // While this node is "paused", node-b claims partition 0 (epoch 2): the
  // next checkpoint write of node-a must be refused in the same atomic step.
  bool claimed = false;
  world->before_checkpoint_write = [&](int32_t p, int64_t) {
    if (p != 0 || claimed)
      return;
    claimed = true;
    auto& h = world->hashes[world->ns + ":owner:" + world->topic + ":0"];
    h["epoch"] = "2";
    h["node"] = "node-b";
  };
  fill(0, 10);
  ASSERT_TRUE(drive([&] { return world->calls.fenced > 0; }));
  EXPECT_TRUE(world->checkpoint(0) == std::optional<int64_t>{10});
  ASSERT_TRUE(drive([&] {
    auto st = status();
    return st && st->state == "ready" && st->owned == parts{1};
  }));
  // Partition 1 goes on; partition 0 is never advanced by node-a again.
  fill(0, 5);
  fill(1, 5);
  ASSERT_TRUE(drive([&] { return world->checkpoint(1) == std::optional<int64_t>{15}; }));
  run_for(1s);
  EXPECT_TRUE(world->checkpoint(0) == std::optional<int64_t>{10});
  EXPECT_EQ(owner_field(0, "node").value_or(""), "node-b");
  EXPECT_EQ(failures_of("fenced"), 1u);
}

TEST_F(Cluster, WithStaticOwnershipAFencedPartitionIsARefusalNamingTheOverlap) {
  settings.ownership = ownership_mode::static_set;
  settings.partitions = {0};
  fill(0, 10);
  start();
  h0 = {{0, 10}};
  ASSERT_TRUE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{10}; }));
  EXPECT_EQ(owner_field(0, "epoch").value_or(""), "1");
  {
    std::lock_guard<std::recursive_mutex> g{world->mtx};
    auto& h = world->hashes[world->ns + ":owner:" + world->topic + ":0"];
    h["epoch"] = "2";
    h["node"] = "node-b";
  }
  fill(0, 5);
  ASSERT_TRUE(drive_to("refused"));
  EXPECT_TRUE(contains(last_error(), "projection.ownership = static"));
  EXPECT_TRUE(world->checkpoint(0) == std::optional<int64_t>{10});
}

TEST_F(Cluster, AssignOutsideThePartitionCountIsAConfigError) {
  start();
  ASSERT_TRUE(drive_to("ready"));
  auto r = assign({3});
  ASSERT_TRUE(!r);
  EXPECT_TRUE(has_code(r.error(), ec::invalid_config));
  EXPECT_TRUE(contains(describe(r.error()), "partition 3"));
}

TEST_F(Cluster, WhileTheNamespaceIsNotReadyANodeReadsItFiveTimesPerHeartbeat) {
  // A handover's gate opens as soon as a view shows the new owner at its H0:
  // a node re-reads a readable but not ready namespace every fifth of
  // projection.heartbeat-interval (50 ms here), and once it is ready, once
  // per interval again.
  fill(0, 5);
  fill(1, 5);
  fill(2, 5);
  start();
  ASSERT_TRUE(drive_to("ready"));
  ASSERT_TRUE(assign({0}));
  ASSERT_TRUE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{5}; }));
  run_for(100ms);
  ASSERT_TRUE(!namespace_ready()); // partitions 1 and 2 have no owner
  auto before = world->calls.publishes;
  run_for(500ms);
  auto closed = world->calls.publishes - before;
  EXPECT_GE(closed, 40u) << "heartbeats in 500 ms with the namespace not ready";
  ASSERT_TRUE(assign({1, 2}));
  ASSERT_TRUE(drive([&] { return namespace_ready(); }));
  run_for(100ms);
  before = world->calls.publishes;
  run_for(500ms);
  auto open = world->calls.publishes - before;
  EXPECT_LE(open, 11u) << "heartbeats in 500 ms with the namespace ready";
  EXPECT_GE(open, 9u) << "heartbeats in 500 ms with the namespace ready";
}

TEST_F(Cluster, AFencedErrorCarriesItsPartitionAsATypedFieldNotOnlyInItsText) {
  // The supervisor lets the partition of a fenced error go: it must find it
  // whatever the text says (a topic or node name can contain "partition 3").
  auto err = make_fenced(7, "partition 7: field epoch of ns:owner:partition 3:7: stored \"2\"");
  EXPECT_EQ(fenced_partition(err), std::optional<int32_t>{7});
  EXPECT_EQ(describe(err),
                  "fenced: partition 7: field epoch of ns:owner:partition 3:7: stored \"2\"");
  EXPECT_TRUE(!fenced_partition(caf::make_error(ec::fenced, "partition 7: no typed field")));
  EXPECT_TRUE(!fenced_partition(caf::make_error(ec::refused, std::string{"partition 7"}, int32_t{7})));
  EXPECT_TRUE(!fenced_partition(caf::error{}));
}

TEST_F(Cluster, ANodeFencedThroughItsStatusHeartbeatLetsThePartitionGoAndCountsTheFence) {
  // No checkpoint write is needed to notice a newer owner: the status
  // publish is refused for that partition, the fence is counted like a
  // fenced write (qsp_failures_total{kind="fenced"}), and the warning names
  // the new owner and its epoch.
  fill(0, 5);
  fill(1, 5);
  auto logged = std::make_shared<string_sink>();
  auto logger = std::make_shared<spdlog::logger>("cluster-test", logged);
  auto opts = deterministic();
  opts.logs = std::make_shared<const projection_log>(logger, "[test] ");
  start(opts);
  ASSERT_TRUE(assign({0, 1}));
  h0 = {{0, 5}, {1, 5}};
  ASSERT_TRUE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{5}; }));
  {
    std::lock_guard<std::recursive_mutex> g{world->mtx};
    auto& h = world->hashes[world->ns + ":owner:" + world->topic + ":0"];
    h["epoch"] = "7";
    h["node"] = "node-b";
  }
  ASSERT_TRUE(drive([&] {
    auto st = status();
    return st && st->owned == parts{1};
  }));
  EXPECT_EQ(failures_of("fenced"), 1u);
  EXPECT_EQ(world->calls.fenced, 0u); // no checkpoint write was refused
  EXPECT_TRUE(contains(logged->str(), "partition 0: the owner record names node \"node-b\" with "
                                   "epoch 7 (this node \"node-a\" holds epoch 1)"));
}

TEST_F(Cluster, AnAllNodeRefusesANamespaceAClusterOwnsBeforeItProjectsAnything) {
  settings.ownership = ownership_mode::all;
  fill(0, 5);
  fill(1, 5);
  {
    std::lock_guard<std::recursive_mutex> g{world->mtx};
    auto& h = world->hashes[world->ns + ":owner:" + world->topic + ":1"];
    h["epoch"] = "3";
    h["node"] = "node-b";
  }
  start();
  ASSERT_TRUE(drive_to("refused"));
  EXPECT_TRUE(contains(last_error(), "partition 1: field owner: stored \"node-b (epoch 3)\""));
  EXPECT_TRUE(contains(last_error(), "a cluster projects this namespace"));
  EXPECT_EQ(count_state("ready"), 0u);
  EXPECT_EQ(world->calls.apply, 0u);
  EXPECT_TRUE(!world->checkpoint(0));
}

TEST_F(Cluster, AStaticNodeRefusesAPartitionAnotherLiveNodeOwns) {
  settings.ownership = ownership_mode::static_set;
  settings.partitions = {0};
  fill(0, 5);
  auto foreign = [&](bool alive) {
    std::lock_guard<std::recursive_mutex> g{world->mtx};
    auto suffix = world->topic + ":0";
    auto& h = world->hashes[world->ns + ":owner:" + suffix];
    h["epoch"] = "2";
    h["node"] = "node-b";
    if (alive)
      world->hashes[world->ns + ":status:" + suffix] = core::hash_fields{
        {"node", "node-b"}, {"epoch", "2"}, {"state", "ready"}, {"h0", "5"},
        {"next_offset", "5"}, {"caught_up", "1"}, {"heartbeat_ms", "1"}};
    else
      world->hashes.erase(world->ns + ":status:" + suffix);
  };
  foreign(true);
  start();
  ASSERT_TRUE(drive_to("refused"));
  EXPECT_TRUE(contains(last_error(), "partition 0: field owner: stored \"node-b (epoch 2, alive)\""));
  EXPECT_TRUE(contains(last_error(), "projection.partitions of two nodes"));
  EXPECT_EQ(world->calls.claims, 0u);
  EXPECT_EQ(owner_field(0, "node").value_or(""), "node-b");
}

TEST_F(Cluster, AStaticNodeClaimsAPartitionWhoseFormerOwnerIsGone) {
  settings.ownership = ownership_mode::static_set;
  settings.partitions = {0};
  fill(0, 5);
  {
    std::lock_guard<std::recursive_mutex> g{world->mtx};
    auto& h = world->hashes[world->ns + ":owner:" + world->topic + ":0"];
    h["epoch"] = "2";
    h["node"] = "node-b"; // no live status: node-b stopped or died
  }
  start();
  h0 = {{0, 5}};
  ASSERT_TRUE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{5}; }));
  EXPECT_EQ(owner_field(0, "node").value_or(""), "node-a");
  EXPECT_EQ(owner_field(0, "epoch").value_or(""), "3");
}

// -- issue 25: ownership that survives Redis rollbacks -------------------------

namespace {

void put_owner(fake_world& w, int32_t p, const std::string& node, const std::string& epoch) {
  std::lock_guard<std::recursive_mutex> g{w.mtx};
  auto& h = w.hashes[w.owner_key(p)];
  h["node"] = node;
  h["epoch"] = epoch;
}

void drop_owner(fake_world& w, int32_t p) {
  std::lock_guard<std::recursive_mutex> g{w.mtx};
  w.hashes.erase(w.owner_key(p));
}

} // namespace

TEST_F(Cluster, AStaticNodeWhoseOwnerRecordRedisDeletedGoesDirtyAndReClaimsNeverRefused) {
  settings.ownership = ownership_mode::static_set;
  settings.partitions = {0};
  fill(0, 10);
  start();
  h0 = {{0, 10}};
  ASSERT_TRUE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{10}; }));
  ASSERT_TRUE(drive_to("ready"));
  EXPECT_EQ(owner_field(0, "epoch").value_or(""), "1");
  // A failover to a replica that never saw the claim: the record is gone.
  drop_owner(*world, 0);
  fill(0, 10);
  ASSERT_TRUE(drive([&] { return saw("dirty"); }));
  EXPECT_TRUE(contains(last_error(), "partition 0"));
  ASSERT_TRUE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{20}; }));
  ASSERT_TRUE(drive_to("ready"));
  // Re-claimed above every epoch this node held, never 1 again.
  EXPECT_EQ(owner_field(0, "node").value_or(""), "node-a");
  EXPECT_EQ(owner_field(0, "epoch").value_or(""), "2");
  EXPECT_EQ(count_state("refused"), 0u);
  EXPECT_EQ(failures_of("fenced"), 0u);
}

TEST_F(Cluster, AStaticNodeWhoseOwnerRecordWasRolledBackToAFormerOwnerReClaimsAboveIt) {
  settings.ownership = ownership_mode::static_set;
  settings.partitions = {0};
  fill(0, 10);
  put_owner(*world, 0, "node-b", "3"); // a former owner, gone
  start();
  h0 = {{0, 10}};
  ASSERT_TRUE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{10}; }));
  EXPECT_EQ(owner_field(0, "epoch").value_or(""), "4");
  // Restored from a backup taken while node-b still owned it.
  put_owner(*world, 0, "node-b", "3");
  fill(0, 10);
  ASSERT_TRUE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{20}; }));
  ASSERT_TRUE(drive_to("ready"));
  EXPECT_TRUE(saw("dirty"));
  EXPECT_EQ(owner_field(0, "node").value_or(""), "node-a");
  EXPECT_EQ(owner_field(0, "epoch").value_or(""), "5");
  EXPECT_EQ(count_state("refused"), 0u);
}

TEST_F(Cluster, AHostNodeWhoseOwnerRecordRedisDeletedKeepsItsPartitionAndReClaimsIt) {
  fill(0, 10);
  fill(1, 10);
  start();
  ASSERT_TRUE(assign({0, 1}));
  h0 = {{0, 10}, {1, 10}};
  ASSERT_TRUE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{10}; }));
  drop_owner(*world, 0);
  // The checkpoint write (or the heartbeat, whichever comes first) finds the
  // claim gone: transient, never a partition given up.
  fill(0, 5);
  ASSERT_TRUE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{15}; }));
  auto st = status();
  ASSERT_TRUE(st);
  EXPECT_TRUE(st->owned == parts({0, 1}));
  EXPECT_EQ(owner_field(0, "node").value_or(""), "node-a");
  EXPECT_EQ(owner_field(0, "epoch").value_or(""), "2");
  EXPECT_EQ(failures_of("fenced"), 0u);
  EXPECT_EQ(count_state("refused"), 0u);
}

TEST_F(Cluster, ACheckpointWriteUnderAClaimOfThisNodeWithAnotherEpochIsNotWritten) {
  settings.ownership = ownership_mode::static_set;
  settings.partitions = {0};
  fill(0, 10);
  start();
  h0 = {{0, 10}};
  ASSERT_TRUE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{10}; }));
  // Before the fix, only a *newer* stored epoch was refused: an older one
  // (a rollback) let the write through under a claim Redis no longer held.
  bool rolled = false;
  world->before_checkpoint_write = [&](int32_t p, int64_t) {
    if (p != 0 || rolled)
      return;
    rolled = true;
    auto& h = world->hashes[world->owner_key(0)];
    h["epoch"] = "0";
  };
  fill(0, 5);
  ASSERT_TRUE(drive([&] { return world->calls.lost > 0; }));
  EXPECT_TRUE(world->checkpoint(0) == std::optional<int64_t>{10});
  ASSERT_TRUE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{15}; }));
  EXPECT_TRUE(saw("dirty"));
  EXPECT_EQ(count_state("refused"), 0u);
}

TEST_F(Cluster, ARefusalDuringARegenerationIsNotUndoneByTheNextGeneration) {
  fill(0, 5);
  fill(1, 5);
  start();
  // Not running yet (verifying): the assign regenerates.  The final error
  // comes before the scheduler runs the children's down messages.
  qsp::anon_mail(atom::assign_v, parts{1}).send(proj);
  qsp::anon_mail(atom::verify_v, caf::make_error(ec::invalid_config, "test: the group membership failed")).send(caf::actor_cast<supervisor_actor>(proj));
  ASSERT_TRUE(drive_to("refused"));
  run_for(2s);
  EXPECT_EQ(state(), "refused");
  EXPECT_TRUE(!saw("catching-up") || seen->back().state == "refused");
  EXPECT_TRUE(contains(last_error(), "the group membership failed"));
  EXPECT_TRUE(!world->checkpoint(1));
}

TEST_F(Cluster, ARefusalDuringAnIncrementalAssignIsNotUndoneByItsVerification) {
  fill(0, 5);
  fill(1, 5);
  start();
  ASSERT_TRUE(assign({0}));
  h0 = {{0, 5}};
  ASSERT_TRUE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{5}; }));
  ASSERT_TRUE(drive_to("ready"));
  qsp::anon_mail(atom::assign_v, parts{1}).send(proj);
  qsp::anon_mail(atom::verify_v, caf::make_error(ec::invalid_config, "test: the group membership failed")).send(caf::actor_cast<supervisor_actor>(proj));
  ASSERT_TRUE(drive_to("refused"));
  run_for(2s);
  EXPECT_EQ(state(), "refused");
  EXPECT_TRUE(!world->checkpoint(1));
}

TEST_F(Cluster, AHeartbeatAboutAnOlderClaimDoesNotFenceThePartitionReAcquiredMeanwhile) {
  fill(0, 10);
  start();
  ASSERT_TRUE(assign({0}));
  h0 = {{0, 10}};
  ASSERT_TRUE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{10}; }));
  // While a heartbeat publishes epoch 1, the host revokes and re-assigns
  // partition 0 and this node re-claims it (epoch 2): the heartbeat's answer
  // about epoch 1 arrives after the revoke and the new assign.
  bool raced = false;
  world->before_publish = [&](const std::vector<owned_status>& statuses) {
    if (raced || statuses.empty() || statuses[0].epoch != 1)
      return;
    raced = true;
    qsp::anon_mail(atom::revoke_v, parts{0}).send(proj);
    qsp::anon_mail(atom::assign_v, parts{0}).send(proj);
    put_owner(*world, 0, "node-a", "2");
  };
  h0.clear(); // the gate's invariant needs the H0 of the re-assignment, unknown here
  ASSERT_TRUE(drive([&] { return raced; }));
  fill(0, 10);
  ASSERT_TRUE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{20}; }));
  auto st = status();
  ASSERT_TRUE(st);
  EXPECT_TRUE(st->owned == parts{0});
  EXPECT_EQ(failures_of("fenced"), 0u);
  EXPECT_EQ(count_state("refused"), 0u);
}

TEST_F(Cluster, AStrayCheckpointKeyBeyondThePartitionCountIsRefusedByAStaticNode) {
  settings.ownership = ownership_mode::static_set;
  settings.partitions = {0};
  fill(0, 5);
  world->put_meta(world->identity());
  world->put_checkpoint(world->identity(), 5, 0); // partition 5 of a 3-partition topic
  start();
  ASSERT_TRUE(drive_to("refused"));
  EXPECT_TRUE(contains(last_error(), "partition 5"));
  EXPECT_TRUE(!world->checkpoint(0));
}

TEST_F(Cluster, AStrayCheckpointKeyBeyondThePartitionCountIsRefusedByAHostNode) {
  fill(0, 5);
  world->put_meta(world->identity());
  world->put_checkpoint(world->identity(), 5, 0);
  start();
  (void) assign({0});
  ASSERT_TRUE(drive_to("refused"));
  EXPECT_TRUE(contains(last_error(), "partition 5"));
  EXPECT_TRUE(!world->checkpoint(0));
}

TEST_F(Cluster, AStatusExpiresAfterItsTTLWhenItsOwnerStopsHeartbeating) {
  fill(0, 5);
  fill(1, 5);
  fill(2, 5);
  start();
  ASSERT_TRUE(assign({0, 2}));
  projection_actor b;
  ASSERT_NO_FATAL_FAILURE(spawn_peer("node-b", b));
  ASSERT_TRUE(ask_of<caf::ok_atom>(b, atom::assign_v, parts{1}));
  ASSERT_TRUE(drive([&] { return namespace_ready(); }));
  // node-b dies without a word (no release of its status).
  caf::anon_send_exit(b, caf::exit_reason::kill);
  ASSERT_TRUE(drive([&] { return !namespace_ready(); }));
  auto st = status();
  ASSERT_TRUE(st);
  ASSERT_EQ(st->cluster.size(), 3u);
  EXPECT_TRUE(contains(st->cluster[1].why, "published no live status"));
  EXPECT_TRUE(!has_status(1));
}

// -- issue 25: handovers that close only what moves -----------------------------

TEST_F(Cluster, AnAssignAddsAPartitionWhileThePartitionsKeptStayReadyThroughout) {
  fill(0, 10);
  fill(1, 10);
  fill(2, 10);
  start();
  ASSERT_TRUE(assign({0, 1}));
  projection_actor b;
  ASSERT_NO_FATAL_FAILURE(spawn_peer("node-b", b));
  ASSERT_TRUE(ask_of<caf::ok_atom>(b, atom::assign_v, parts{2}));
  ASSERT_TRUE(drive([&] { return namespace_ready(); }));
  auto starts = world->calls.start;
  auto since = seen->size();
  // node-b leaves partition 2 to node-a (a revoke, then an assign).
  ASSERT_TRUE(ask_of<caf::ok_atom>(b, atom::revoke_v, parts{2}));
  bool kept_closed = false;
  auto kept_ready = [&] {
    auto st = status();
    if (!st || st->cluster.size() != 3)
      return;
    kept_closed |= !st->cluster[0].ready || !st->cluster[1].ready;
  };
  auto r = std::make_shared<std::optional<caf::expected<caf::ok_atom>>>();
  sys.spawn(prober<caf::ok_atom, atom::assign, parts>, r, proj, atom::assign_v, parts{2});
  fill(2, 5);
  ASSERT_TRUE(drive([&] {
    kept_ready();
    return *r && namespace_ready() && world->checkpoint(2) == std::optional<int64_t>{15};
  }));
  EXPECT_TRUE(**r);
  EXPECT_TRUE(!kept_closed);
  // No new generation: one incremental add, no second start.
  EXPECT_EQ(world->calls.start, starts);
  EXPECT_EQ(world->calls.adds, 1u); // {2}, into the running generation
  EXPECT_TRUE(verifying_since(since) == 0u);
  auto st = status();
  ASSERT_TRUE(st);
  EXPECT_TRUE(st->owned == parts({0, 1, 2}));
  // The partitions kept went on all along.
  fill(0, 5);
  ASSERT_TRUE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{15}; }));
}

TEST_F(Cluster, ARevokeStopsOnlyThePartitionsThatMoveAndWaitsForTheirBatches) {
  fill(0, 10);
  fill(1, 10);
  start();
  ASSERT_TRUE(assign({0, 1}));
  h0 = {{0, 10}, {1, 10}};
  ASSERT_TRUE(drive([&] { return world->checkpoint(1) == std::optional<int64_t>{10}; }));
  ASSERT_TRUE(drive_to("ready"));
  auto starts = world->calls.start;
  auto since = seen->size();
  ASSERT_TRUE(revoke({1}));
  // Acknowledged only with nothing of partition 1 in flight; unassigned.
  EXPECT_EQ(world->calls.removes, 1u);
  auto cp1 = world->checkpoint(1);
  fill(0, 5);
  fill(1, 5);
  ASSERT_TRUE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{15}; }));
  run_for(500ms);
  EXPECT_TRUE(world->checkpoint(1) == cp1);
  EXPECT_EQ(world->calls.start, starts);
  EXPECT_EQ(state(), "ready");
  // This node never left ready: no status since the revoke said otherwise.
  size_t not_ready = 0;
  for (size_t i = since; i < seen->size(); ++i)
    not_ready += (*seen)[i].state != "ready" ? 1 : 0;
  EXPECT_EQ(not_ready, 0u);
}

TEST_F(Cluster, ARefusalOfAnAddedPartitionRefusesTheNode) {
  fill(0, 5);
  fill(1, 5);
  start();
  ASSERT_TRUE(assign({0}));
  h0 = {{0, 5}};
  ASSERT_TRUE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{5}; }));
  ASSERT_TRUE(drive_to("ready"));
  {
    std::lock_guard<std::recursive_mutex> g{world->mtx};
    world->hashes[world->checkpoint_key(1)] = core::hash_fields{{"next_offset", "garbage"}};
  }
  auto r = assign({1});
  EXPECT_TRUE(!r);
  ASSERT_TRUE(drive_to("refused"));
  EXPECT_TRUE(contains(last_error(), "partition 1"));
}

TEST_F(Cluster, APartitionGivenBackWhileItsRevokeStillDrainsIsNotAddedTwice) {
  fill(0, 10);
  fill(1, 10);
  start();
  ASSERT_TRUE(assign({0, 1}));
  h0 = {{0, 10}, {1, 10}};
  ASSERT_TRUE(drive([&] { return world->checkpoint(1) == std::optional<int64_t>{10}; }));
  ASSERT_TRUE(drive_to("ready"));
  fill(1, 5);
  // A host that does not wait for the revoke's answer before it assigns
  // the partition again: the consumer still holds it while the writer drains.
  qsp::anon_mail(atom::revoke_v, parts{1}).send(proj);
  qsp::anon_mail(atom::assign_v, parts{1}).send(proj);
  h0.clear();
  ASSERT_TRUE(drive([&] { return world->checkpoint(1) == std::optional<int64_t>{15}; }));
  ASSERT_TRUE(drive_to("ready"));
  auto st = status();
  ASSERT_TRUE(st);
  EXPECT_TRUE(st->owned == parts({0, 1}));
  EXPECT_EQ(count_state("refused"), 0u);
}

TEST_F(Cluster, APartitionAddedAtItsH0OpensTheGateAgainAtOnce) {
  fill(0, 10);
  start();
  ASSERT_TRUE(assign({0}));
  h0 = {{0, 10}};
  ASSERT_TRUE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{10}; }));
  ASSERT_TRUE(drive_to("ready"));
  auto since = seen->size();
  // Partition 1 is empty: its start is its H0, nothing to catch up.
  ASSERT_TRUE(assign({1}));
  ASSERT_TRUE(drive([&] { return seen->size() > since && state() == "ready"; }));
  auto st = status();
  ASSERT_TRUE(st);
  EXPECT_TRUE(st->owned == parts({0, 1}));
  EXPECT_EQ(world->calls.adds, 1u);
}

TEST_F(Cluster, ARevokeOfAPartitionWhoseAdditionIsBeingVerifiedWaitsForItAndRestartsNothing) {
  fill(0, 10);
  fill(1, 10);
  start();
  ASSERT_TRUE(assign({0}));
  h0 = {{0, 10}};
  ASSERT_TRUE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{10}; }));
  ASSERT_TRUE(drive_to("ready"));
  auto starts = world->calls.start;
  auto since = seen->size();
  // The group takes partition 1 back while its addition is verified (a
  // rolling restart's member rejoining at once).
  qsp::anon_mail(atom::assign_v, parts{1}).send(proj);
  auto r = revoke({1});
  EXPECT_TRUE(r);
  ASSERT_TRUE(drive_to("ready"));
  run_for(500ms);
  auto st = status();
  ASSERT_TRUE(st);
  EXPECT_TRUE(st->owned == parts{0});
  EXPECT_EQ(world->calls.start, starts);
  EXPECT_EQ(world->calls.removes, 1u);
  EXPECT_TRUE(verifying_since(since) == 0u);
  // Partition 0 went on throughout.
  fill(0, 5);
  ASSERT_TRUE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{15}; }));
}
