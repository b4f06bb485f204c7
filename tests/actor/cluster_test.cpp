// Several nodes, one namespace (docs/DESIGN.md §12): ownership by assign/revoke,
// fenced checkpoint writes, and the namespace-wide readiness gate.  Two
// projections share one fake world where a test needs two nodes.
// (Every test also runs the fixture's invariants.)
#define CAF_SUITE cluster

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

struct fixture : projection_fixture {
  fixture() {
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

  /// A second node on the same world.
  projection_actor spawn_peer(const std::string& node) {
    auto cfg = settings;
    cfg.node_id = node;
    auto opts = deterministic();
    opts.logs = quiet_log();
    auto p = spawn_projection(sys, cfg, ports, decoder, std::make_shared<metrics>(), opts);
    CAF_REQUIRE(p);
    peers.push_back(*p);
    return *p;
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

  ~fixture() override {
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

CAF_TEST_FIXTURE_SCOPE(cluster_tests, fixture)

CAF_TEST(with ownership all nothing of the cluster machinery runs) {
  settings.ownership = ownership_mode::all;
  fill(0, 5);
  start();
  CAF_REQUIRE(drive_to("ready"));
  run_for(1s);
  CAF_CHECK_EQUAL(world->calls.claims, 0u);
  CAF_CHECK_EQUAL(world->calls.publishes, 0u);
  CAF_CHECK(!owner_field(0, "epoch"));
  auto st = status();
  CAF_REQUIRE(st);
  CAF_CHECK(st->ready && st->namespace_ready);
  CAF_CHECK_EQUAL(st->owned.size(), 3u);
  auto r = ask_of<caf::ok_atom>(proj, atom::assign_v, parts{0});
  CAF_REQUIRE(!r);
  CAF_CHECK(has_code(r.error(), ec::invalid_config));
}

CAF_TEST(an assigned partition is claimed verified and projected and the gate waits for every partition) {
  fill(0, 20);
  fill(1, 20);
  fill(2, 20);
  start();
  CAF_REQUIRE(drive_to("ready")); // owns nothing yet: ready locally ...
  CAF_CHECK(!namespace_ready());  // ... but no partition has an owner
  CAF_CHECK(!pull("u1", 5));
  CAF_REQUIRE(assign({0}));
  h0 = {{0, 20}};
  CAF_CHECK_EQUAL(owner_field(0, "node").value_or(""), "node-a");
  CAF_CHECK_EQUAL(owner_field(0, "epoch").value_or(""), "1");
  CAF_REQUIRE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{20}; }));
  CAF_CHECK(!world->checkpoint(1));
  CAF_CHECK(!world->checkpoint(2));
  run_for(200ms);
  CAF_CHECK(has_status(0));
  CAF_CHECK(!namespace_ready());
  auto gate = pull("u1", 5);
  CAF_REQUIRE(!gate);
  CAF_CHECK(has_code(gate.error(), ec::not_ready));
  // Locally ready, so the refusal says what holds the namespace closed.
  CAF_CHECK(contains(describe(gate.error()), "is ready, but its namespace is not: 1: no owner"));
  auto st = status();
  CAF_REQUIRE(st);
  CAF_CHECK_EQUAL(st->state, "ready");
  CAF_REQUIRE_EQUAL(st->cluster.size(), 3u);
  CAF_CHECK(st->cluster[0].ready);
  CAF_CHECK(!st->cluster[1].ready && contains(st->cluster[1].why, "no owner"));
  // A second node takes the rest: both gates open.
  auto b = spawn_peer("node-b");
  CAF_REQUIRE(ask_of<caf::ok_atom>(b, atom::assign_v, parts{1, 2}));
  // The gate opens only once node-b's partitions reached their H0.
  bool early = false;
  CAF_REQUIRE(drive([&] {
    bool open = namespace_ready();
    early |= open && (world->checkpoint(1) != std::optional<int64_t>{20}
                      || world->checkpoint(2) != std::optional<int64_t>{20});
    return open;
  }));
  CAF_CHECK(!early);
  CAF_CHECK(pull("u1", 5));
  auto sb = ask_of<projection_status>(b, atom::status_v);
  CAF_REQUIRE(sb);
  CAF_CHECK(sb->ready);
  CAF_CHECK(sb->owned == parts({1, 2}));
  CAF_CHECK(world->checkpoint(1) == std::optional<int64_t>{20});
  CAF_CHECK(world->checkpoint(2) == std::optional<int64_t>{20});
  // A partition whose owner goes dirty closes every node's gate.
  world->redis_frozen = true;
  CAF_REQUIRE(drive([&] { return !namespace_ready(); }));
  world->redis_frozen = false;
  CAF_REQUIRE(drive([&] { return namespace_ready(); }));
}

CAF_TEST(a revoke during a pending confirm abandons the batch without a checkpoint) {
  fill(0, 10);
  start();
  CAF_REQUIRE(assign({0}));
  h0 = {{0, 10}};
  CAF_REQUIRE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{10}; }));
  // The next batch's ZADDs are sent but their replies never come in.
  world->confirm_not_yet = 1000000;
  auto sends = world->calls.max_unconfirmed;
  fill(0, 10);
  CAF_REQUIRE(drive([&] { return world->calls.confirm > 0 && world->calls.not_yet > 0; }));
  (void) sends;
  auto written = world->calls.write_checkpoint;
  CAF_REQUIRE(revoke({0}));
  // Answered: nothing of partition 0 runs, and its checkpoint stayed.
  CAF_CHECK(world->checkpoint(0) == std::optional<int64_t>{10});
  CAF_CHECK_EQUAL(world->calls.write_checkpoint, written);
  CAF_CHECK(!has_status(0));
  world->confirm_not_yet = 0;
  run_for(2s);
  CAF_CHECK(world->checkpoint(0) == std::optional<int64_t>{10});
  CAF_CHECK_EQUAL(world->calls.write_checkpoint, written);
  auto st = status();
  CAF_REQUIRE(st);
  CAF_CHECK(st->owned.empty());
}

CAF_TEST(an assign while a verification is running restarts it with both partitions) {
  fill(0, 10);
  fill(1, 10);
  start();
  CAF_REQUIRE(drive_to("ready"));
  // The second assign arrives while the verification the first started is
  // running: after it claimed partition 0, before it answered.
  auto r0 = std::make_shared<std::optional<caf::expected<caf::ok_atom>>>();
  auto r1 = std::make_shared<std::optional<caf::expected<caf::ok_atom>>>();
  bool sent = false;
  world->on_inspect = [&] {
    if (sent)
      return;
    sent = true;
    CAF_CHECK_EQUAL(owner_field(0, "epoch").value_or(""), "1");
    // Into the mailbox now, ahead of the verifier's answer.
    qsp::anon_mail(atom::assign_v, parts{1}).send(proj);
  };
  sys.spawn(prober<caf::ok_atom, atom::assign, parts>, r0, proj, atom::assign_v, parts{0});
  CAF_REQUIRE(drive([&] { return *r0 && sent; }));
  CAF_CHECK(**r0);
  (void) r1;
  h0 = {{0, 10}, {1, 10}};
  CAF_REQUIRE(drive([&] {
    return world->checkpoint(0) == std::optional<int64_t>{10}
           && world->checkpoint(1) == std::optional<int64_t>{10};
  }));
  // Each partition was claimed once: the restarted verification reused the
  // claims it had made, it did not fence itself.
  CAF_CHECK_EQUAL(world->calls.claims, 2u);
  CAF_CHECK_EQUAL(owner_field(0, "epoch").value_or(""), "1");
  CAF_CHECK_EQUAL(owner_field(1, "epoch").value_or(""), "1");
}

CAF_TEST(revoke then re-assign the same partition continues from its checkpoint with a new epoch) {
  fill(0, 10);
  start();
  CAF_REQUIRE(assign({0}));
  h0 = {{0, 10}};
  CAF_REQUIRE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{10}; }));
  CAF_REQUIRE(revoke({0}));
  fill(0, 10);
  run_for(500ms);
  CAF_CHECK(world->checkpoint(0) == std::optional<int64_t>{10}); // nobody owns it
  CAF_REQUIRE(assign({0}));
  h0 = {{0, 20}};
  CAF_CHECK_EQUAL(owner_field(0, "epoch").value_or(""), "2");
  CAF_REQUIRE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{20}; }));
  CAF_CHECK(world->score("u1", "p0-c10"));
}

CAF_TEST(a former owner whose partition was claimed by another node is fenced and lets it go) {
  fill(0, 10);
  fill(1, 10);
  start();
  CAF_REQUIRE(assign({0, 1}));
  h0 = {{0, 10}, {1, 10}};
  CAF_REQUIRE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{10}; }));
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
  CAF_REQUIRE(drive([&] { return world->calls.fenced > 0; }));
  CAF_CHECK(world->checkpoint(0) == std::optional<int64_t>{10});
  CAF_REQUIRE(drive([&] {
    auto st = status();
    return st && st->state == "ready" && st->owned == parts{1};
  }));
  // Partition 1 goes on; partition 0 is never advanced by node-a again.
  fill(0, 5);
  fill(1, 5);
  CAF_REQUIRE(drive([&] { return world->checkpoint(1) == std::optional<int64_t>{15}; }));
  run_for(1s);
  CAF_CHECK(world->checkpoint(0) == std::optional<int64_t>{10});
  CAF_CHECK_EQUAL(owner_field(0, "node").value_or(""), "node-b");
  CAF_CHECK_EQUAL(failures_of("fenced"), 1u);
}

CAF_TEST(with static ownership a fenced partition is a refusal naming the overlap) {
  settings.ownership = ownership_mode::static_set;
  settings.partitions = {0};
  fill(0, 10);
  start();
  h0 = {{0, 10}};
  CAF_REQUIRE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{10}; }));
  CAF_CHECK_EQUAL(owner_field(0, "epoch").value_or(""), "1");
  {
    std::lock_guard<std::recursive_mutex> g{world->mtx};
    auto& h = world->hashes[world->ns + ":owner:" + world->topic + ":0"];
    h["epoch"] = "2";
    h["node"] = "node-b";
  }
  fill(0, 5);
  CAF_REQUIRE(drive_to("refused"));
  CAF_CHECK(contains(last_error(), "projection.ownership = static"));
  CAF_CHECK(world->checkpoint(0) == std::optional<int64_t>{10});
}

CAF_TEST(assign outside the partition count is a config error) {
  start();
  CAF_REQUIRE(drive_to("ready"));
  auto r = assign({3});
  CAF_REQUIRE(!r);
  CAF_CHECK(has_code(r.error(), ec::invalid_config));
  CAF_CHECK(contains(describe(r.error()), "partition 3"));
}

CAF_TEST(while the namespace is not ready a node reads it five times per heartbeat) {
  // A handover's gate opens as soon as a view shows the new owner at its H0:
  // a node re-reads a readable but not ready namespace every fifth of
  // projection.heartbeat-interval (50 ms here), and once it is ready, once
  // per interval again.
  fill(0, 5);
  fill(1, 5);
  fill(2, 5);
  start();
  CAF_REQUIRE(drive_to("ready"));
  CAF_REQUIRE(assign({0}));
  CAF_REQUIRE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{5}; }));
  run_for(100ms);
  CAF_REQUIRE(!namespace_ready()); // partitions 1 and 2 have no owner
  auto before = world->calls.publishes;
  run_for(500ms);
  auto closed = world->calls.publishes - before;
  CAF_MESSAGE(closed << " heartbeats in 500 ms with the namespace not ready");
  CAF_CHECK_GREATER_OR_EQUAL(closed, 40u);
  CAF_REQUIRE(assign({1, 2}));
  CAF_REQUIRE(drive([&] { return namespace_ready(); }));
  run_for(100ms);
  before = world->calls.publishes;
  run_for(500ms);
  auto open = world->calls.publishes - before;
  CAF_MESSAGE(open << " heartbeats in 500 ms with the namespace ready");
  CAF_CHECK_LESS_OR_EQUAL(open, 11u);
  CAF_CHECK_GREATER_OR_EQUAL(open, 9u);
}

CAF_TEST(a fenced error carries its partition as a typed field not only in its text) {
  // The supervisor lets the partition of a fenced error go: it must find it
  // whatever the text says (a topic or node name can contain "partition 3").
  auto err = make_fenced(7, "partition 7: field epoch of ns:owner:partition 3:7: stored \"2\"");
  CAF_CHECK_EQUAL(fenced_partition(err), std::optional<int32_t>{7});
  CAF_CHECK_EQUAL(describe(err),
                  "fenced: partition 7: field epoch of ns:owner:partition 3:7: stored \"2\"");
  CAF_CHECK(!fenced_partition(caf::make_error(ec::fenced, "partition 7: no typed field")));
  CAF_CHECK(!fenced_partition(caf::make_error(ec::refused, std::string{"partition 7"}, int32_t{7})));
  CAF_CHECK(!fenced_partition(caf::error{}));
}

CAF_TEST(a node fenced through its status heartbeat lets the partition go and counts the fence) {
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
  CAF_REQUIRE(assign({0, 1}));
  h0 = {{0, 5}, {1, 5}};
  CAF_REQUIRE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{5}; }));
  {
    std::lock_guard<std::recursive_mutex> g{world->mtx};
    auto& h = world->hashes[world->ns + ":owner:" + world->topic + ":0"];
    h["epoch"] = "7";
    h["node"] = "node-b";
  }
  CAF_REQUIRE(drive([&] {
    auto st = status();
    return st && st->owned == parts{1};
  }));
  CAF_CHECK_EQUAL(failures_of("fenced"), 1u);
  CAF_CHECK_EQUAL(world->calls.fenced, 0u); // no checkpoint write was refused
  CAF_CHECK(contains(logged->str(), "partition 0: the owner record names node \"node-b\" with "
                                   "epoch 7 (this node \"node-a\" holds epoch 1)"));
}

CAF_TEST(an all node refuses a namespace a cluster owns before it projects anything) {
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
  CAF_REQUIRE(drive_to("refused"));
  CAF_CHECK(contains(last_error(), "partition 1: field owner: stored \"node-b (epoch 3)\""));
  CAF_CHECK(contains(last_error(), "a cluster projects this namespace"));
  CAF_CHECK_EQUAL(count_state("ready"), 0u);
  CAF_CHECK_EQUAL(world->calls.apply, 0u);
  CAF_CHECK(!world->checkpoint(0));
}

CAF_TEST(a static node refuses a partition another live node owns) {
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
  CAF_REQUIRE(drive_to("refused"));
  CAF_CHECK(contains(last_error(), "partition 0: field owner: stored \"node-b (epoch 2, alive)\""));
  CAF_CHECK(contains(last_error(), "projection.partitions of two nodes"));
  CAF_CHECK_EQUAL(world->calls.claims, 0u);
  CAF_CHECK_EQUAL(owner_field(0, "node").value_or(""), "node-b");
}

CAF_TEST(a static node claims a partition whose former owner is gone) {
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
  CAF_REQUIRE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{5}; }));
  CAF_CHECK_EQUAL(owner_field(0, "node").value_or(""), "node-a");
  CAF_CHECK_EQUAL(owner_field(0, "epoch").value_or(""), "3");
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

CAF_TEST(a static node whose owner record Redis deleted goes dirty and re-claims never refused) {
  settings.ownership = ownership_mode::static_set;
  settings.partitions = {0};
  fill(0, 10);
  start();
  h0 = {{0, 10}};
  CAF_REQUIRE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{10}; }));
  CAF_REQUIRE(drive_to("ready"));
  CAF_CHECK_EQUAL(owner_field(0, "epoch").value_or(""), "1");
  // A failover to a replica that never saw the claim: the record is gone.
  drop_owner(*world, 0);
  fill(0, 10);
  CAF_REQUIRE(drive([&] { return saw("dirty"); }));
  CAF_CHECK(contains(last_error(), "partition 0"));
  CAF_REQUIRE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{20}; }));
  CAF_REQUIRE(drive_to("ready"));
  // Re-claimed above every epoch this node held, never 1 again.
  CAF_CHECK_EQUAL(owner_field(0, "node").value_or(""), "node-a");
  CAF_CHECK_EQUAL(owner_field(0, "epoch").value_or(""), "2");
  CAF_CHECK_EQUAL(count_state("refused"), 0u);
  CAF_CHECK_EQUAL(failures_of("fenced"), 0u);
}

CAF_TEST(a static node whose owner record was rolled back to a former owner re-claims above it) {
  settings.ownership = ownership_mode::static_set;
  settings.partitions = {0};
  fill(0, 10);
  put_owner(*world, 0, "node-b", "3"); // a former owner, gone
  start();
  h0 = {{0, 10}};
  CAF_REQUIRE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{10}; }));
  CAF_CHECK_EQUAL(owner_field(0, "epoch").value_or(""), "4");
  // Restored from a backup taken while node-b still owned it.
  put_owner(*world, 0, "node-b", "3");
  fill(0, 10);
  CAF_REQUIRE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{20}; }));
  CAF_REQUIRE(drive_to("ready"));
  CAF_CHECK(saw("dirty"));
  CAF_CHECK_EQUAL(owner_field(0, "node").value_or(""), "node-a");
  CAF_CHECK_EQUAL(owner_field(0, "epoch").value_or(""), "5");
  CAF_CHECK_EQUAL(count_state("refused"), 0u);
}

CAF_TEST(a host node whose owner record Redis deleted keeps its partition and re-claims it) {
  fill(0, 10);
  fill(1, 10);
  start();
  CAF_REQUIRE(assign({0, 1}));
  h0 = {{0, 10}, {1, 10}};
  CAF_REQUIRE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{10}; }));
  drop_owner(*world, 0);
  // The checkpoint write (or the heartbeat, whichever comes first) finds the
  // claim gone: transient, never a partition given up.
  fill(0, 5);
  CAF_REQUIRE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{15}; }));
  auto st = status();
  CAF_REQUIRE(st);
  CAF_CHECK(st->owned == parts({0, 1}));
  CAF_CHECK_EQUAL(owner_field(0, "node").value_or(""), "node-a");
  CAF_CHECK_EQUAL(owner_field(0, "epoch").value_or(""), "2");
  CAF_CHECK_EQUAL(failures_of("fenced"), 0u);
  CAF_CHECK_EQUAL(count_state("refused"), 0u);
}

CAF_TEST(a checkpoint write under a claim of this node with another epoch is not written) {
  settings.ownership = ownership_mode::static_set;
  settings.partitions = {0};
  fill(0, 10);
  start();
  h0 = {{0, 10}};
  CAF_REQUIRE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{10}; }));
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
  CAF_REQUIRE(drive([&] { return world->calls.lost > 0; }));
  CAF_CHECK(world->checkpoint(0) == std::optional<int64_t>{10});
  CAF_REQUIRE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{15}; }));
  CAF_CHECK(saw("dirty"));
  CAF_CHECK_EQUAL(count_state("refused"), 0u);
}

CAF_TEST(a refusal during a regeneration is not undone by the next generation) {
  fill(0, 5);
  fill(1, 5);
  start();
  // Not running yet (verifying): the assign regenerates.  The final error
  // comes before the scheduler runs the children's down messages.
  qsp::anon_mail(atom::assign_v, parts{1}).send(proj);
  qsp::anon_mail(atom::verify_v, caf::make_error(ec::invalid_config, "test: the group membership failed")).send(caf::actor_cast<supervisor_actor>(proj));
  CAF_REQUIRE(drive_to("refused"));
  run_for(2s);
  CAF_CHECK_EQUAL(state(), "refused");
  CAF_CHECK(!saw("catching-up") || seen->back().state == "refused");
  CAF_CHECK(contains(last_error(), "the group membership failed"));
  CAF_CHECK(!world->checkpoint(1));
}

CAF_TEST(a refusal during an incremental assign is not undone by its verification) {
  fill(0, 5);
  fill(1, 5);
  start();
  CAF_REQUIRE(assign({0}));
  h0 = {{0, 5}};
  CAF_REQUIRE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{5}; }));
  CAF_REQUIRE(drive_to("ready"));
  qsp::anon_mail(atom::assign_v, parts{1}).send(proj);
  qsp::anon_mail(atom::verify_v, caf::make_error(ec::invalid_config, "test: the group membership failed")).send(caf::actor_cast<supervisor_actor>(proj));
  CAF_REQUIRE(drive_to("refused"));
  run_for(2s);
  CAF_CHECK_EQUAL(state(), "refused");
  CAF_CHECK(!world->checkpoint(1));
}

CAF_TEST(a heartbeat about an older claim does not fence the partition re-acquired meanwhile) {
  fill(0, 10);
  start();
  CAF_REQUIRE(assign({0}));
  h0 = {{0, 10}};
  CAF_REQUIRE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{10}; }));
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
  CAF_REQUIRE(drive([&] { return raced; }));
  fill(0, 10);
  CAF_REQUIRE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{20}; }));
  auto st = status();
  CAF_REQUIRE(st);
  CAF_CHECK(st->owned == parts{0});
  CAF_CHECK_EQUAL(failures_of("fenced"), 0u);
  CAF_CHECK_EQUAL(count_state("refused"), 0u);
}

CAF_TEST(a stray checkpoint key beyond the partition count is refused by a static node) {
  settings.ownership = ownership_mode::static_set;
  settings.partitions = {0};
  fill(0, 5);
  world->put_meta(world->identity());
  world->put_checkpoint(world->identity(), 5, 0); // partition 5 of a 3-partition topic
  start();
  CAF_REQUIRE(drive_to("refused"));
  CAF_CHECK(contains(last_error(), "partition 5"));
  CAF_CHECK(!world->checkpoint(0));
}

CAF_TEST(a stray checkpoint key beyond the partition count is refused by a host node) {
  fill(0, 5);
  world->put_meta(world->identity());
  world->put_checkpoint(world->identity(), 5, 0);
  start();
  (void) assign({0});
  CAF_REQUIRE(drive_to("refused"));
  CAF_CHECK(contains(last_error(), "partition 5"));
  CAF_CHECK(!world->checkpoint(0));
}

CAF_TEST(a status expires after its TTL when its owner stops heartbeating) {
  fill(0, 5);
  fill(1, 5);
  fill(2, 5);
  start();
  CAF_REQUIRE(assign({0, 2}));
  auto b = spawn_peer("node-b");
  CAF_REQUIRE(ask_of<caf::ok_atom>(b, atom::assign_v, parts{1}));
  CAF_REQUIRE(drive([&] { return namespace_ready(); }));
  // node-b dies without a word (no release of its status).
  caf::anon_send_exit(b, caf::exit_reason::kill);
  CAF_REQUIRE(drive([&] { return !namespace_ready(); }));
  auto st = status();
  CAF_REQUIRE(st);
  CAF_REQUIRE_EQUAL(st->cluster.size(), 3u);
  CAF_CHECK(contains(st->cluster[1].why, "published no live status"));
  CAF_CHECK(!has_status(1));
}

// -- issue 25: handovers that close only what moves -----------------------------

CAF_TEST(an assign adds a partition while the partitions kept stay ready throughout) {
  fill(0, 10);
  fill(1, 10);
  fill(2, 10);
  start();
  CAF_REQUIRE(assign({0, 1}));
  auto b = spawn_peer("node-b");
  CAF_REQUIRE(ask_of<caf::ok_atom>(b, atom::assign_v, parts{2}));
  CAF_REQUIRE(drive([&] { return namespace_ready(); }));
  auto starts = world->calls.start;
  auto since = seen->size();
  // node-b leaves partition 2 to node-a (a revoke, then an assign).
  CAF_REQUIRE(ask_of<caf::ok_atom>(b, atom::revoke_v, parts{2}));
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
  CAF_REQUIRE(drive([&] {
    kept_ready();
    return *r && namespace_ready() && world->checkpoint(2) == std::optional<int64_t>{15};
  }));
  CAF_CHECK(**r);
  CAF_CHECK(!kept_closed);
  // No new generation: one incremental add, no second start.
  CAF_CHECK_EQUAL(world->calls.start, starts);
  CAF_CHECK_EQUAL(world->calls.adds, 1u); // {2}, into the running generation
  CAF_CHECK(verifying_since(since) == 0u);
  auto st = status();
  CAF_REQUIRE(st);
  CAF_CHECK(st->owned == parts({0, 1, 2}));
  // The partitions kept went on all along.
  fill(0, 5);
  CAF_REQUIRE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{15}; }));
}

CAF_TEST(a revoke stops only the partitions that move and waits for their batches) {
  fill(0, 10);
  fill(1, 10);
  start();
  CAF_REQUIRE(assign({0, 1}));
  h0 = {{0, 10}, {1, 10}};
  CAF_REQUIRE(drive([&] { return world->checkpoint(1) == std::optional<int64_t>{10}; }));
  CAF_REQUIRE(drive_to("ready"));
  auto starts = world->calls.start;
  auto since = seen->size();
  CAF_REQUIRE(revoke({1}));
  // Acknowledged only with nothing of partition 1 in flight; unassigned.
  CAF_CHECK_EQUAL(world->calls.removes, 1u);
  auto cp1 = world->checkpoint(1);
  fill(0, 5);
  fill(1, 5);
  CAF_REQUIRE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{15}; }));
  run_for(500ms);
  CAF_CHECK(world->checkpoint(1) == cp1);
  CAF_CHECK_EQUAL(world->calls.start, starts);
  CAF_CHECK_EQUAL(state(), "ready");
  // This node never left ready: no status since the revoke said otherwise.
  size_t not_ready = 0;
  for (size_t i = since; i < seen->size(); ++i)
    not_ready += (*seen)[i].state != "ready" ? 1 : 0;
  CAF_CHECK_EQUAL(not_ready, 0u);
}

CAF_TEST(a refusal of an added partition refuses the node) {
  fill(0, 5);
  fill(1, 5);
  start();
  CAF_REQUIRE(assign({0}));
  h0 = {{0, 5}};
  CAF_REQUIRE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{5}; }));
  CAF_REQUIRE(drive_to("ready"));
  {
    std::lock_guard<std::recursive_mutex> g{world->mtx};
    world->hashes[world->checkpoint_key(1)] = core::hash_fields{{"next_offset", "garbage"}};
  }
  auto r = assign({1});
  CAF_CHECK(!r);
  CAF_REQUIRE(drive_to("refused"));
  CAF_CHECK(contains(last_error(), "partition 1"));
}

CAF_TEST(a partition given back while its revoke still drains is not added twice) {
  fill(0, 10);
  fill(1, 10);
  start();
  CAF_REQUIRE(assign({0, 1}));
  h0 = {{0, 10}, {1, 10}};
  CAF_REQUIRE(drive([&] { return world->checkpoint(1) == std::optional<int64_t>{10}; }));
  CAF_REQUIRE(drive_to("ready"));
  fill(1, 5);
  // A host that does not wait for the revoke's answer before it assigns
  // the partition again: the consumer still holds it while the writer drains.
  qsp::anon_mail(atom::revoke_v, parts{1}).send(proj);
  qsp::anon_mail(atom::assign_v, parts{1}).send(proj);
  h0.clear();
  CAF_REQUIRE(drive([&] { return world->checkpoint(1) == std::optional<int64_t>{15}; }));
  CAF_REQUIRE(drive_to("ready"));
  auto st = status();
  CAF_REQUIRE(st);
  CAF_CHECK(st->owned == parts({0, 1}));
  CAF_CHECK_EQUAL(count_state("refused"), 0u);
}

CAF_TEST(a partition added at its H0 opens the gate again at once) {
  fill(0, 10);
  start();
  CAF_REQUIRE(assign({0}));
  h0 = {{0, 10}};
  CAF_REQUIRE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{10}; }));
  CAF_REQUIRE(drive_to("ready"));
  auto since = seen->size();
  // Partition 1 is empty: its start is its H0, nothing to catch up.
  CAF_REQUIRE(assign({1}));
  CAF_REQUIRE(drive([&] { return seen->size() > since && state() == "ready"; }));
  auto st = status();
  CAF_REQUIRE(st);
  CAF_CHECK(st->owned == parts({0, 1}));
  CAF_CHECK_EQUAL(world->calls.adds, 1u);
}

CAF_TEST(a revoke of a partition whose addition is being verified waits for it and restarts nothing) {
  fill(0, 10);
  fill(1, 10);
  start();
  CAF_REQUIRE(assign({0}));
  h0 = {{0, 10}};
  CAF_REQUIRE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{10}; }));
  CAF_REQUIRE(drive_to("ready"));
  auto starts = world->calls.start;
  auto since = seen->size();
  // The group takes partition 1 back while its addition is verified (a
  // rolling restart's member rejoining at once).
  qsp::anon_mail(atom::assign_v, parts{1}).send(proj);
  auto r = revoke({1});
  CAF_CHECK(r);
  CAF_REQUIRE(drive_to("ready"));
  run_for(500ms);
  auto st = status();
  CAF_REQUIRE(st);
  CAF_CHECK(st->owned == parts{0});
  CAF_CHECK_EQUAL(world->calls.start, starts);
  CAF_CHECK_EQUAL(world->calls.removes, 1u);
  CAF_CHECK(verifying_since(since) == 0u);
  // Partition 0 went on throughout.
  fill(0, 5);
  CAF_REQUIRE(drive([&] { return world->checkpoint(0) == std::optional<int64_t>{15}; }));
}

CAF_TEST_FIXTURE_SCOPE_END()
