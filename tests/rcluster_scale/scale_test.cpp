// Scaling the Redis Cluster under a projection, and a copy key under a new
// name (issue 32, findings 2 and 3), against the Redis Cluster service set
// (scripts/services start --redis-cluster) and its fault commands: rc-add-
// primary / rc-new-node add node 7, rc-move-slots moves slots to it,
// rc-remove-primary moves them away and removes it.
//
// - Finding 2: two static nodes (partitions 0-1 and 2-3), retention deleted
//   the head of every partition (low watermark > 0), a clean takeover (no
//   write lost), then records for partition 0 only: the copy key under the
//   promoted primary's name holds only what was written since; every node's
//   restart must start without a refusal and skip nothing.
// - Finding 3: a primary added and given slots, with the projection stopped
//   and with it running; a primary removed (its slots moved away,
//   del-node), stopped and running.  Each ends ready (exit 0 for catch-up)
//   with Redis equal to the model.
// - Issue 45, an outside review's sequences with the projection stopped: a
//   promoted replica restarted empty (its only replica cut off, then
//   re-synced from it) must never be vouched for; alternating single-slot
//   moves between two shards, then a graceful failover, must stay ready
//   across restarts.
// - docs/OPERATIONS.md, "Scaling a Redis Cluster out and in": its marked
//   shell blocks (`<!-- tests/rcluster_scale runs this block: NAME -->`) run
//   verbatim under a live load.
//
// Label `rcluster`.  Every test skips unless a Redis Cluster set is found
// (QSP_SERVICES_ENV, else <repo>/.services-rcluster/env); with
// QSP_REQUIRE_RCLUSTER set a missing set fails instead.
#include "tests/rcluster_scale/rc_kit.hpp"

using namespace qsp;
using namespace qsp::rckit;

namespace {

constexpr int partitions = 4;

struct node_result {
  int rc = -1;  ///< -1: still running at the limit (killed)
  std::string log;
};

struct scale : ::testing::Test {
  std::string topic, dir;
  clock_type::time_point t0;
  /// scripts/services commands TearDown runs, last first.
  std::vector<std::string> undo;

  void SetUp() override {
    std::cout.setf(std::ios::unitbuf);
    REQUIRE_RCLUSTER_SET();
    t0 = clock_type::now();
    auto why = ensure_healthy();
    ASSERT_EQ(why, "") << "the Redis Cluster set is not healthy at the start";
    clear_cluster();
    topic = test::unique_name("rcscale");
    dir = "/tmp/" + topic;
    test::sh("mkdir -p " + dir);
    ASSERT_TRUE(create_topic(topic, partitions)) << "topic " << topic << " did not appear";
  }
  void TearDown() override {
    running.reset();  // stopped before the set is checked and cleared
    if (test::redis_cluster_set(nullptr) == nullptr)
      return;
    for (auto i = undo.rbegin(); i != undo.rend(); ++i)
      if (auto r = svc(*i); r.rc != 0)
        ADD_FAILURE() << "undo: scripts/services " << *i << ":\n" << r.out;
    auto why = leave_healthy();
    EXPECT_EQ(why, "") << "the test left the Redis Cluster set unhealthy";
    if (auto admin = kafka::admin::make(kafka_cfg()); admin && !topic.empty())
      (*admin)->delete_topic(topic);
    clear_cluster();
    if (!HasFailure() && !dir.empty())
      test::sh("rm -rf " + dir);
    else if (!dir.empty())
      std::cout << "logs kept in " << dir << "\n";
    std::cout << "test took " << ms_since(t0) << " ms\n";
  }

  std::vector<std::string> args(const std::string& cmd, std::vector<std::string> extra = {}) const {
    return node_args(cmd, topic, partitions, std::move(extra));
  }
  static std::vector<std::string> static_owner(const std::string& id, const std::string& parts) {
    return {"--projection.ownership=static", "--projection.partitions=" + parts,
            "--projection.node-id=" + id};
  }

  node_result run_to_exit(const std::vector<std::string>& a, const std::string& name,
                          std::chrono::milliseconds limit = 120s) const {
    auto log = dir + "/" + name + ".log";
    auto t = clock_type::now();
    node_result r;
    {
      test::node_process p{a, log};
      auto rc = p.wait_for(limit);
      r.rc = rc ? *rc : -1;
    }
    r.log = slurp(log);
    std::cout << "[node " << a[0] << " " << name << "] exit " << r.rc << " in " << ms_since(t)
              << " ms" << refusals(r.log) << "\n";
    return r;
  }
  node_result catch_up(const std::string& name) const { return run_to_exit(args("catch-up"), name); }

  /// A `run` node started by run_caught_up.
  std::unique_ptr<run_node> running;
  /// `n` dispatches to `users`, then a `run` node (`running`), ready with
  /// every checkpoint at their end.
  void run_caught_up(uint64_t n, int users) {
    ASSERT_NO_FATAL_FAILURE(produce(topic, 0, n, users, partitions));
    running = std::make_unique<run_node>("run", dir, args("run"));
    ASSERT_TRUE(running->becomes_ready(60s)) << running->status() << "\n" << running->text();
    ASSERT_TRUE(checkpoints_reach(static_cast<int64_t>(n / partitions), 60s)) << checkpoints_text();
  }

  /// Every partition's checkpoint equals `n` (polled, bounded).
  bool checkpoints_reach(int64_t n, std::chrono::milliseconds limit,
                         const std::function<bool()>& give_up = {}) const {
    return test::eventually(
      [&] {
        if (give_up && give_up())
          return true;
        auto c = checkpoints(topic, partitions);
        return c.size() == static_cast<size_t>(partitions)
               && std::all_of(c.begin(), c.end(), [&](int64_t v) { return v == n; });
      },
      limit)
           && !(give_up && give_up());
  }
  std::string checkpoints_text() const {
    std::string s;
    for (auto v : checkpoints(topic, partitions))
      s += (s.empty() ? "" : ",") + std::to_string(v);
    return "checkpoints [" + s + "]";
  }

  /// The copy key of the shard node `id` is the primary of, under its
  /// current name ("" if it serves no slots).
  std::string copy_key_of(int id) const {
    auto r = router();
    if (!r)
      return {};
    auto hp = nodes()[id];
    for (auto& sh : r->map().shards())
      if (sh.primary.address() == hp)
        return redis::node_copy_key(redis::tag_for_shard(sh), ns, topic, sh.primary.id);
    return {};
  }

  /// rc-add-primary, then `count` slots from each pair's primary to it (in
  /// pair order, so that moving them back in that order takes the lowest
  /// first: the same slots).  The undo moves them back and removes it.
  /// Returns the new node's id (-1 after a failure) and the slots moved.
  int scale_out(int count, std::vector<redis::slot_range>& moved) {
    auto added = svc("rc-add-primary");
    EXPECT_EQ(added.rc, 0) << added.out;
    if (added.rc != 0)
      return -1;
    int id = std::stoi(added.last());
    undo.push_back("rc-remove-primary " + std::to_string(id));
    std::vector<std::string> back;
    for (int k = 1; k <= 3; ++k) {
      int src = primary_in(k);
      EXPECT_GT(src, 0);
      auto r = svc("rc-move-slots " + std::to_string(src) + " " + std::to_string(id) + " "
                   + std::to_string(count));
      EXPECT_EQ(r.rc, 0) << r.out;
      if (r.rc != 0)
        break;
      back.push_back("rc-move-slots " + std::to_string(id) + " " + std::to_string(src) + " "
                     + std::to_string(count));
      auto text = r.last();
      std::replace(text.begin(), text.end(), ' ', ',');
      if (auto ranges = redis::parse_ranges(text))
        moved.insert(moved.end(), ranges->begin(), ranges->end());
    }
    for (auto i = back.rbegin(); i != back.rend(); ++i)
      undo.push_back(*i);
    moved = redis::normalise_ranges(moved);
    std::cout << "node " << id << " added, serving " << redis::format_ranges(slots_of(id)) << "\n";
    return id;
  }
  /// Runs the undo commands now (moving slots back, removing the node).
  void undo_now() {
    auto cmds = std::move(undo);
    undo.clear();
    for (auto i = cmds.rbegin(); i != cmds.rend(); ++i)
      ASSERT_SVC(*i);
  }
  /// Users of `m` whose session set lies in `ranges`.
  static size_t users_in(const test::model& m, const std::vector<redis::slot_range>& ranges) {
    size_t n = 0;
    for (auto& [user, e] : m)
      n += redis::contains(ranges, redis::key_slot(convs + user)) ? 1 : 0;
    return n;
  }

  void expect_audit_consistent() {
    auto audit = test::run_cli(args("audit"));
    EXPECT_EQ(audit.rc, 0) << audit.out << audit.err;
    EXPECT_NE((audit.out + audit.err).find("verdict: consistent"), std::string::npos)
      << audit.out << audit.err;
  }
};

/// Samples `run` every 100 ms while `action` runs on this thread: whether
/// it exited (with its code), and readiness transitions.
struct watch {
  std::atomic<bool> stop{false};
  std::atomic<int> not_ready_samples{0}, samples{0};
  std::thread t;
  explicit watch(run_node& n) {
    t = std::thread{[&] {
      auto deadline = clock_type::now() + 10min;
      while (!stop && clock_type::now() < deadline) {
        if (n.exited())
          return;
        ++samples;
        if (test::http_get(n.port, "/readyz", 1s).status != 200)
          ++not_ready_samples;
        std::this_thread::sleep_for(100ms);
      }
    }};
  }
  ~watch() { end(); }
  void end() {
    stop = true;
    if (t.joinable())
      t.join();
  }
};

} // namespace

// Finding 2: a copy key under a new name vouches for only some partitions.
// Two static nodes (0-1, 2-3) project a 4-partition topic whose head
// retention deleted (low watermark 500 on every partition); pair 2's
// replica takes over cleanly (WAIT first: nothing lost); records then go to
// partition 0 only, so node a writes the promoted primary's first copy
// under its new name, naming what it wrote since.  Restarting both nodes
// must start without a refusal (the checkpoints are above the low
// watermark and nothing was lost), and Redis must equal the model (audit
// cannot judge a log whose head is gone).
TEST_F(scale, CleanTakeoverThenOnePartitionsRecordsThenEveryNodeRestarts) {
  constexpr int users = 400;
  constexpr uint64_t n = 4000, more = 400, last = 800;
  constexpr int64_t low = 500;
  ASSERT_NO_FATAL_FAILURE(produce(topic, 0, n, users, partitions));
  auto a = std::make_unique<run_node>("a", dir, args("run", static_owner("scale-a", "0-1")));
  auto b = std::make_unique<run_node>("b", dir, args("run", static_owner("scale-b", "2-3")));
  ASSERT_TRUE(a->becomes_ready(60s)) << a->status() << "\n" << a->text();
  ASSERT_TRUE(b->becomes_ready(60s)) << b->status() << "\n" << b->text();
  ASSERT_TRUE(checkpoints_reach(n / partitions, 60s)) << checkpoints_text();

  // Retention deletes the head of every partition.
  {
    auto admin = kafka::admin::make(kafka_cfg());
    ASSERT_TRUE(admin) << describe(admin.error());
    for (int p = 0; p < partitions; ++p) {
      auto d = (*admin)->delete_records(topic, p, low);
      ASSERT_TRUE(d) << describe(d.error());
    }
    auto st = (*admin)->inspect(topic);
    ASSERT_TRUE(st) << describe(st.error());
  }

  // A clean takeover of pair 2's shard: its replica holds every write.
  const int p = primary_in(2), r = replica_in(2);
  ASSERT_GT(p, 0);
  ASSERT_EQ(node_cmd(p, {"WAIT", "1", "5000"}), "1") << "WAIT on node " << p;
  const auto old_key = copy_key_of(p);
  ASSERT_SVC("rc-takeover " + std::to_string(r));
  ASSERT_EQ(role(r), "master");
  auto m = model_of(0, n, users);
  auto clean = compare(m);
  ASSERT_TRUE(clean.equal()) << "the takeover lost writes: " << clean.text();

  // Records for partition 0 only.
  ASSERT_NO_FATAL_FAILURE(produce(topic, n, n + more, users, partitions, 0));
  m = model_of(n, n + more, users, m);
  ASSERT_TRUE(test::eventually(
    [&] { return a->exited() || checkpoint(topic, 0) == static_cast<int64_t>(n / partitions + more); },
    90s))
    << a->status() << ", " << checkpoints_text() << "\n" << a->text();
  ASSERT_FALSE(a->exited()) << a->status() << "\n" << a->text();
  ASSERT_FALSE(b->exited()) << b->status() << "\n" << b->text();
  // The promoted primary's copy under its own name: written since the
  // takeover (the scenario happened).
  const auto new_key = copy_key_of(r);
  ASSERT_NE(new_key, old_key);
  ASSERT_TRUE(test::eventually([&] { return node_cmd(r, {"EXISTS", new_key}) == "1"; }, 30s))
    << new_key << " was never written";
  std::cout << "copy under the new name " << new_key << ":";
  for (int q = 0; q < partitions; ++q)
    std::cout << " p:" << q << "=" << node_cmd(r, {"HGET", new_key, "p:" + std::to_string(q)});
  std::cout << "\n";
  for (auto& l : dirty_lines(a->text()))
    std::cout << "  a: " << l << "\n";

  // Every node restarts.
  EXPECT_EQ(a->stop(), 0) << a->text();
  EXPECT_EQ(b->stop(), 0) << b->text();
  a = std::make_unique<run_node>("a-again", dir, args("run", static_owner("scale-a", "0-1")));
  b = std::make_unique<run_node>("b-again", dir, args("run", static_owner("scale-b", "2-3")));
  bool a_ready = a->becomes_ready(90s), b_ready = b->becomes_ready(90s);
  std::cout << "after the restart: " << a->status() << "; " << b->status() << "\n";
  for (auto* x : {a.get(), b.get()})
    for (auto& l : lines_with(x->text(), ": start "))
      std::cout << "  " << x->name << ": " << l << "\n";
  EXPECT_TRUE(a_ready) << a->status();
  EXPECT_TRUE(b_ready) << b->status();
  ASSERT_TRUE(a_ready && b_ready) << "a node refused after a clean takeover:\n"
                                  << a->status() << "\n" << b->status();

  // Nothing skipped: more records on every partition, Redis equals the model.
  ASSERT_NO_FATAL_FAILURE(produce(topic, n + more, n + more + last, users, partitions));
  m = model_of(n + more, n + more + last, users, m);
  ASSERT_TRUE(test::eventually(
    [&] {
      auto c = checkpoints(topic, partitions);
      return c.size() == 4 && c[0] == static_cast<int64_t>((n + last) / 4 + more)
             && c[1] == static_cast<int64_t>((n + last) / 4)
             && c[3] == static_cast<int64_t>((n + last) / 4);
    },
    60s))
    << checkpoints_text();
  auto cmp = compare(m);
  EXPECT_TRUE(cmp.equal()) << cmp.text();
  EXPECT_EQ(a->stop(), 0) << a->text();
  EXPECT_EQ(b->stop(), 0) << b->text();
  EXPECT_EQ(refusals(a->text() + b->text()), "");
  // (No `audit` here: with the log's head deleted it cannot prove anything,
  // exit 3 "cannot prove: partition N low=500 > 0, history is gone"; the
  // model, which has every record, is the proof.)
}

// Finding 3 (a): a new primary (node 7) joins and is given 300 slots (100
// of each pair's) while the projection is stopped.  The next start must not
// refuse (the new primary never failed over; it holds exactly the keys
// that migrated into it), and Redis equals the model; a second start too.
TEST_F(scale, ScaleOutWithTheProjectionStopped) {
  constexpr int users = 2000;
  constexpr uint64_t n = 8000, n2 = 12000, n3 = 14000;
  ASSERT_NO_FATAL_FAILURE(produce(topic, 0, n, users, partitions));
  auto first = catch_up("catch-up-1");
  ASSERT_EQ(first.rc, 0) << first.log;

  std::vector<redis::slot_range> moved;
  int id = scale_out(100, moved);
  ASSERT_GT(id, 0);
  ASSERT_EQ(redis::slot_total(slots_of(id)), 300u);
  auto m = model_of(0, n, users);
  ASSERT_GT(users_in(m, moved), 0u) << "no user in the moved slots: the test proves nothing";
  auto before = compare(m);
  ASSERT_TRUE(before.equal()) << "the migration lost keys: " << before.text();

  ASSERT_NO_FATAL_FAILURE(produce(topic, n, n2, users, partitions));
  m = model_of(n, n2, users, m);
  auto second = catch_up("after-scale-out");
  EXPECT_EQ(second.rc, 0) << "the first start after a scale-out:" << refusals(second.log) << "\n"
                          << second.log;
  ASSERT_EQ(second.rc, 0);
  EXPECT_EQ(refusals(second.log), "");
  auto cmp = compare(m);
  EXPECT_TRUE(cmp.equal()) << cmp.text();
  // The new primary now holds a copy of its own.
  EXPECT_EQ(node_cmd(id, {"EXISTS", copy_key_of(id)}), "1") << copy_key_of(id);

  ASSERT_NO_FATAL_FAILURE(produce(topic, n2, n3, users, partitions));
  m = model_of(n2, n3, users, m);
  auto third = catch_up("again");
  EXPECT_EQ(third.rc, 0) << refusals(third.log) << "\n" << third.log;
  cmp = compare(m);
  EXPECT_TRUE(cmp.equal()) << cmp.text();
  expect_audit_consistent();
}

// Finding 3 (a), no copy key moving: node 7 gets the 3 busiest slots of
// each pair's primary, never a primary's lowest (which holds its copy key)
// nor the namespace's; so the new primary holds no copy key at all.  The
// next start must not refuse, and Redis equals the model.
TEST_F(scale, ScaleOutOfBusySlotsWithTheProjectionStopped) {
  constexpr int users = 2000;
  constexpr uint64_t n = 8000, n2 = 12000;
  ASSERT_NO_FATAL_FAILURE(produce(topic, 0, n, users, partitions));
  auto first = catch_up("catch-up-1");
  ASSERT_EQ(first.rc, 0) << first.log;
  auto m = model_of(0, n, users);

  auto added = svc("rc-add-primary");
  ASSERT_EQ(added.rc, 0) << added.out;
  const int id = std::stoi(added.last());
  undo.push_back("rc-remove-primary " + std::to_string(id));
  std::map<uint16_t, size_t> entries_in;
  for (auto& [user, c] : m)
    entries_in[redis::key_slot(convs + user)] += c.size();
  std::vector<redis::slot_range> moved;
  for (int k = 1; k <= 3; ++k) {
    const int src = primary_in(k);
    ASSERT_GT(src, 0);
    const auto src_slots = slots_of(src);
    ASSERT_FALSE(src_slots.empty());
    std::vector<std::pair<size_t, uint16_t>> busiest;
    for (auto& [slot, e] : entries_in)
      if (redis::contains(src_slots, slot) && slot != ns_slot && slot != src_slots.front().first)
        busiest.emplace_back(e, slot);
    std::sort(busiest.rbegin(), busiest.rend());
    ASSERT_GE(busiest.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      auto slot = std::to_string(busiest[i].second);
      ASSERT_SVC("rc-move-slot " + slot + " " + std::to_string(id));
      undo.push_back("rc-move-slot " + slot + " " + std::to_string(src));
      moved.push_back({busiest[i].second, busiest[i].second});
    }
  }
  moved = redis::normalise_ranges(moved);
  std::cout << "node " << id << " serves " << redis::format_ranges(slots_of(id)) << " ("
            << users_in(m, moved) << " users)\n";
  ASSERT_EQ(redis::slot_total(slots_of(id)), 9u);
  // No copy key came with them: each lies in its primary's lowest slot.
  for (int k = 1; k <= 3; ++k) {
    auto key = copy_key_of(primary_in(k));
    ASSERT_FALSE(redis::contains(moved, redis::key_slot(key))) << key;
    EXPECT_EQ(node_cmd(primary_in(k), {"EXISTS", key}), "1") << key;
  }
  auto before = compare(m);
  ASSERT_TRUE(before.equal()) << "the migration lost keys: " << before.text();

  ASSERT_NO_FATAL_FAILURE(produce(topic, n, n2, users, partitions));
  m = model_of(n, n2, users, m);
  auto second = catch_up("after-scale-out");
  EXPECT_EQ(second.rc, 0) << "the first start after a scale-out:" << refusals(second.log);
  EXPECT_EQ(refusals(second.log), "");
  auto cmp = compare(m);
  EXPECT_TRUE(cmp.equal()) << cmp.text();
  if (second.rc == 0)
    expect_audit_consistent();
}

// Finding 3 (b): the same scale-out while `run` projects a live load.  The
// node never exits; it ends ready, the checkpoints reach the end of the
// load, Redis equals the model; a restart afterwards does not refuse.
TEST_F(scale, ScaleOutWithTheProjectionRunning) {
  constexpr int users = 2000;
  constexpr uint64_t n = 4000, n2 = 16000;
  ASSERT_NO_FATAL_FAILURE(run_caught_up(n, users));
  auto& node = *running;
  background_producer load{topic, n, n2, users, partitions, 1000};

  std::vector<redis::slot_range> moved;
  int id = -1;
  {
    watch w{node};
    id = scale_out(100, moved);
    w.end();
    std::cout << "during the scale-out: " << w.not_ready_samples << " of " << w.samples
              << " samples not ready; " << node.status() << "\n";
  }
  ASSERT_GT(id, 0);
  ASSERT_FALSE(node.exited()) << "the node exited during the scale-out: " << node.status() << "\n"
                              << node.text();
  ASSERT_TRUE(load.wait(60s)) << load.error();
  auto m = model_of(0, n2, users);
  ASSERT_GT(users_in(m, moved), 0u) << "no user in the moved slots: the test proves nothing";
  bool reached = checkpoints_reach(n2 / partitions, 90s, [&] { return node.exited().has_value(); });
  for (auto& l : dirty_lines(node.text()))
    std::cout << "  " << l << "\n";
  ASSERT_FALSE(node.exited()) << "the node exited after the scale-out: " << node.status();
  ASSERT_TRUE(reached) << checkpoints_text() << "; /readyz "
                       << test::http_get(node.port, "/readyz").body;
  EXPECT_TRUE(node.becomes_ready(30s)) << node.status();
  auto cmp = compare(m);
  EXPECT_TRUE(cmp.equal()) << cmp.text();
  EXPECT_EQ(node.stop(), 0) << node.text();
  EXPECT_EQ(refusals(node.text()), "");

  auto again = catch_up("after-scale-out");
  EXPECT_EQ(again.rc, 0) << refusals(again.log) << "\n" << again.log;
  cmp = compare(m);
  EXPECT_TRUE(cmp.equal()) << cmp.text();
}

namespace {

/// Node 7 added with 100 slots of each pair BEFORE the namespace's first
/// start (which seeds every primary's copy, node 7's included), then
/// `before` dispatches projected by catch-up.
void seeded_with_four_primaries(scale& t, int users, uint64_t before, int& id,
                                std::vector<redis::slot_range>& moved) {
  id = t.scale_out(100, moved);
  ASSERT_GT(id, 0);
  ASSERT_NO_FATAL_FAILURE(produce(t.topic, 0, before, users, partitions));
  auto first = t.catch_up("catch-up-four-primaries");
  ASSERT_EQ(first.rc, 0) << first.log;
  ASSERT_EQ(node_cmd(id, {"EXISTS", t.copy_key_of(id)}), "1")
    << "the first start wrote node " << id << " no copy";
}

} // namespace

// Scale-in with the projection stopped: node 7 (seeded like every primary)
// gives its slots back to the three pairs and is removed (del-node).  The
// next start does not refuse (its copy key, in its lowest slot, moved to a
// primary that never failed over), and Redis equals the model.
TEST_F(scale, ScaleInWithTheProjectionStopped) {
  constexpr int users = 2000;
  constexpr uint64_t n = 8000, n2 = 12000;
  int id = -1;
  std::vector<redis::slot_range> moved;
  ASSERT_NO_FATAL_FAILURE(seeded_with_four_primaries(*this, users, n, id, moved));
  auto m = model_of(0, n, users);
  ASSERT_GT(users_in(m, moved), 0u);

  ASSERT_NO_FATAL_FAILURE(undo_now());  // slots back, node 7 removed
  ASSERT_EQ(nodes().count(id), 0u) << "node " << id << " is still in the env";
  auto before = compare(m);
  ASSERT_TRUE(before.equal()) << "the scale-in lost keys: " << before.text();

  ASSERT_NO_FATAL_FAILURE(produce(topic, n, n2, users, partitions));
  m = model_of(n, n2, users, m);
  auto after = catch_up("after-scale-in");
  EXPECT_EQ(after.rc, 0) << refusals(after.log) << "\n" << after.log;
  auto cmp = compare(m);
  EXPECT_TRUE(cmp.equal()) << cmp.text();
  expect_audit_consistent();
}

// Scale-in while `run` projects a live load: node 7's slots move back and
// it is removed; the node never exits, ends ready, nothing is lost; a
// restart afterwards does not refuse.
TEST_F(scale, ScaleInWithTheProjectionRunning) {
  constexpr int users = 2000;
  constexpr uint64_t n = 4000, n2 = 16000;
  int id = -1;
  std::vector<redis::slot_range> moved;
  ASSERT_NO_FATAL_FAILURE(seeded_with_four_primaries(*this, users, n, id, moved));
  run_node node{"run", dir, args("run")};
  ASSERT_TRUE(node.becomes_ready(60s)) << node.status() << "\n" << node.text();
  background_producer load{topic, n, n2, users, partitions, 1000};
  ASSERT_TRUE(test::eventually(
    [&] {
      auto c = checkpoints(topic, partitions);
      return !c.empty() && c[0] >= static_cast<int64_t>(n / partitions + 500);
    },
    30s))
    << checkpoints_text();
  {
    watch w{node};
    ASSERT_NO_FATAL_FAILURE(undo_now());
    w.end();
    std::cout << "during the scale-in: " << w.not_ready_samples << " of " << w.samples
              << " samples not ready; " << node.status() << "\n";
  }
  ASSERT_FALSE(node.exited()) << "the node exited during the scale-in: " << node.status() << "\n"
                              << node.text();
  ASSERT_TRUE(load.wait(60s)) << load.error();
  auto m = model_of(0, n2, users);
  bool reached = checkpoints_reach(n2 / partitions, 90s, [&] { return node.exited().has_value(); });
  for (auto& l : dirty_lines(node.text()))
    std::cout << "  " << l << "\n";
  ASSERT_FALSE(node.exited()) << node.status();
  ASSERT_TRUE(reached) << checkpoints_text();
  EXPECT_TRUE(node.becomes_ready(30s)) << node.status();
  auto cmp = compare(m);
  EXPECT_TRUE(cmp.equal()) << cmp.text();
  EXPECT_EQ(node.stop(), 0) << node.text();
  EXPECT_EQ(refusals(node.text()), "");
  auto again = catch_up("after-scale-in");
  EXPECT_EQ(again.rc, 0) << refusals(again.log) << "\n" << again.log;
}

namespace {

/// Runs the documented block `name` with bash after a prelude that sets
/// the procedure's variables for this set and the helpers block.
test::cli_result doc_block(const std::string& dir, const std::string& name,
                           const std::string& vars) {
  auto body = test::doc_block("OPERATIONS.md", "tests/rcluster_scale", name);
  EXPECT_FALSE(body.empty()) << "docs/OPERATIONS.md has no block \"" << name << "\"";
  auto helpers = test::doc_block("OPERATIONS.md", "tests/rcluster_scale", "helpers");
  EXPECT_FALSE(helpers.empty()) << "docs/OPERATIONS.md has no block \"helpers\"";
  std::ostringstream script;
  script << "set -eo pipefail\ncd '" << dir << "'\n"
         << "RC_NODE=" << nodes().at(1) << "\n"
         << "RC_AUTH=(--user default --pass '" << S().secret("REDIS_ADMIN_PASSWORD_FILE")
         << "' --no-auth-warning)\n"
         << vars << helpers << "\n" << body;
  auto path = dir + "/block-" + name + ".sh";
  std::ofstream{path} << script.str();
  auto t = clock_type::now();
  auto r = test::run_program("/usr/bin/timeout", {"300", "/bin/bash", path});
  std::cout << "-- block " << name << " (rc " << r.rc << ", " << ms_since(t) << " ms):\n";
  for (auto& l : split(r.out + r.err, '\n'))
    if (l.find("Moving slot") == std::string::npos)
      std::cout << l << "\n";
  return r;
}

} // namespace

// docs/OPERATIONS.md, "Scaling a Redis Cluster out and in", its blocks run
// verbatim while `run` projects a live load: a new node (rc-new-node: a
// redis-server like the others, not yet in the cluster) joins (add-primary),
// takes COUNT = 100 slots of every primary (move-slots), and leaves again
// (remove-primary: its slots to one primary, del-node).  The node never
// exits, ends ready after each step with Redis equal to the model, and a
// restart afterwards does not refuse.
TEST_F(scale, ScaleOutAndInByTheDocumentedProcedure) {
  constexpr int users = 2000;
  constexpr uint64_t n = 4000, n2 = 10000, n3 = 14000;
  ASSERT_NO_FATAL_FAILURE(produce(topic, 0, n, users, partitions));
  run_node node{"run", dir, args("run")};
  ASSERT_TRUE(node.becomes_ready(60s)) << node.status() << "\n" << node.text();
  ASSERT_TRUE(checkpoints_reach(n / partitions, 60s)) << checkpoints_text();

  auto made = svc("rc-new-node");
  ASSERT_EQ(made.rc, 0) << made.out;
  const auto words = split(made.last(), ' ');
  ASSERT_EQ(words.size(), 2u) << made.last();
  const int id = std::stoi(words[0]);
  const auto id_s = std::to_string(id);
  undo.push_back("rc-remove-primary " + id_s);
  const auto new_id = node_ids().at(id);

  {
    background_producer load{topic, n, n2, users, partitions, 1000};
    watch w{node};
    auto add = doc_block(dir, "add-primary", "NEW=" + words[1] + "\n");
    ASSERT_EQ(add.rc, 0) << add.out << add.err;
    ASSERT_EQ(role(id), "master");
    auto move = doc_block(dir, "move-slots", "NEW_ID=" + new_id + "\nCOUNT=100\n");
    ASSERT_EQ(move.rc, 0) << move.out << move.err;
    w.end();
    std::cout << "during the scale-out: " << w.not_ready_samples << " of " << w.samples
              << " samples not ready; " << node.status() << "\n";
    ASSERT_EQ(redis::slot_total(slots_of(id)), 300u) << redis::format_ranges(slots_of(id));
    ASSERT_FALSE(node.exited()) << node.status() << "\n" << node.text();
    ASSERT_TRUE(load.wait(60s)) << load.error();
  }
  auto m = model_of(0, n2, users);
  ASSERT_GT(users_in(m, slots_of(id)), 0u);
  bool reached = checkpoints_reach(n2 / partitions, 90s, [&] { return node.exited().has_value(); });
  ASSERT_FALSE(node.exited()) << "after the scale-out: " << node.status();
  ASSERT_TRUE(reached) << checkpoints_text();
  EXPECT_TRUE(node.becomes_ready(30s)) << node.status();
  auto cmp = compare(m);
  EXPECT_TRUE(cmp.equal()) << cmp.text();

  {
    background_producer load{topic, n2, n3, users, partitions, 1000};
    watch w{node};
    auto remove = doc_block(dir, "remove-primary",
                            "OLD_ID=" + new_id + "\nTO_ID=" + node_ids().at(primary_in(1)) + "\n");
    ASSERT_EQ(remove.rc, 0) << remove.out << remove.err;
    w.end();
    std::cout << "during the scale-in: " << w.not_ready_samples << " of " << w.samples
              << " samples not ready; " << node.status() << "\n";
    ASSERT_FALSE(node.exited()) << node.status() << "\n" << node.text();
    ASSERT_TRUE(load.wait(60s)) << load.error();
  }
  // The procedure forgot the node; the service set stops it and forgets it too.
  ASSERT_SVC("rc-remove-primary " + id_s);
  undo.clear();
  m = model_of(n2, n3, users, m);
  reached = checkpoints_reach(n3 / partitions, 90s, [&] { return node.exited().has_value(); });
  for (auto& l : dirty_lines(node.text()))
    std::cout << "  " << l << "\n";
  ASSERT_FALSE(node.exited()) << "after the scale-in: " << node.status();
  ASSERT_TRUE(reached) << checkpoints_text();
  cmp = compare(m);
  EXPECT_TRUE(cmp.equal()) << cmp.text();
  EXPECT_EQ(node.stop(), 0) << node.text();
  EXPECT_EQ(refusals(node.text()), "");
  auto again = catch_up("after-procedure");
  EXPECT_EQ(again.rc, 0) << refusals(again.log) << "\n" << again.log;
  expect_audit_consistent();
}

// Issue 45, rule 3 (the review's second reproduced sequence): FLUSHALL of
// one primary (not the namespace's) under a running node, then more
// records.  Before the guarded copy write, the running node's next plain
// HSET re-created that primary's copy at current positions and a restart
// was ready with the flushed entries missing (1,573 in the review).  Now
// the copy write finds the copy gone: the node leaves ready, and its start
// refuses naming that primary (nothing in the log can prove what it lost
// without its copy); so does a later catch-up.  Never ready with entries
// missing after the fault was met.
TEST_F(scale, FlushallOfAPrimaryUnderARunningNodeIsNeverVouchedFor) {
  constexpr int users = 2000;
  constexpr uint64_t n = 4000, n2 = 6000;
  ASSERT_NO_FATAL_FAILURE(run_caught_up(n, users));
  auto& node = *running;
  int flushed = -1;
  for (int k = 1; k <= 3 && flushed < 0; ++k)
    if (owner_of(ns_slot) != primary_in(k))
      flushed = primary_in(k);
  ASSERT_GT(flushed, 0);
  auto m = model_of(0, n2, users);
  ASSERT_EQ(node_cmd(flushed, {"FLUSHALL"}), "OK");
  ASSERT_NO_FATAL_FAILURE(produce(topic, n, n2, users, partitions));
  // The next copy write meets the flushed primary: the node refuses (exit
  // 3) rather than re-creating its copy.
  ASSERT_TRUE(test::eventually([&] { return node.exited().has_value(); }, 90s))
    << "the node kept running after the flush: " << checkpoints_text() << "\n"
    << node.text();
  auto text = node.text();
  EXPECT_EQ(node.exited(), 3) << text;
  auto who = "primary " + nodes()[flushed];
  EXPECT_NE(refusals(text).find(who), std::string::npos) << refusals(text);
  EXPECT_NE(refusals(text).find("holds no copy"), std::string::npos) << refusals(text);
  EXPECT_FALSE(lines_with(text, "no longer holds its copy").empty())
    << "the running node's copy write did not name the gone copy:\n" << text;
  auto again = catch_up("after-flushall");
  EXPECT_EQ(again.rc, 3) << again.log;
  if (again.rc == 0) {
    auto cmp = compare(m);
    EXPECT_TRUE(cmp.equal()) << "ready after the flush: " << cmp.text();
  }
}

namespace {

/// Every node's role and configuration epoch, and the cluster's current
/// epoch (as node 1, or the first that answers, sees it), on one line.
std::string epochs_text() {
  std::ostringstream o;
  std::string current;
  for (auto& [id, hp] : nodes()) {
    auto ci = node_cmd(id, {"CLUSTER", "INFO"});
    if (ci.rfind("ERR:", 0) == 0) {
      o << " " << id << ":down";
      continue;
    }
    if (current.empty())
      current = field(ci, "cluster_current_epoch");
    o << " " << id << ":" << (role(id) == "master" ? "P" : "r") << field(ci, "cluster_my_epoch");
  }
  return "epochs: current " + current + ";" + o.str();
}

/// What a `run` node claims once it settled: ready, or exited with a code.
struct claim {
  bool ready = false;
  std::optional<int> exited;
  std::string text() const {
    return ready ? "ready" : exited ? "exit " + std::to_string(*exited) : "neither ready nor exited";
  }
};

/// Waits (at most `limit`) until `node` is ready or exits; what it claims.
claim settle(run_node& node, std::chrono::milliseconds limit) {
  auto t = clock_type::now();
  test::eventually([&] { return node.exited().has_value() || node.ready(); }, limit);
  claim c;
  c.exited = node.exited();
  c.ready = !c.exited && node.ready();
  std::cout << "[node run " << node.name << "] " << c.text() << " after " << ms_since(t) << " ms"
            << refusals(node.text()) << "\n";
  return c;
}

/// An outside review's sequence (issue 45) on pair `k` (node k a primary,
/// node k+3 its only replica): node k+3 promoted gracefully (rc-failover),
/// its only replica, node k, then cut off so that it can neither take over
/// nor sync (rc-cut-replica: SIGSTOP and its link killed), node k+3 killed
/// and restarted at once (rc-kill, rc-start: back before anything could
/// replace it, an EMPTY primary of its slots: no persistence), then node k
/// resumed (rc-resume: it re-syncs the empty data set).  The shard's primary
/// now holds nothing under a new replid with a zero replid2, and its node
/// id was never a primary while a node of the namespace ran (the failover
/// happened with the projection stopped).  Then `run` starts: it must
/// either refuse (exit 3, naming the primary or its slots and the cause) or
/// be ready with nothing missing, never ready with entries missing.
/// TearDown's leave_healthy fails pair k back to node k.
void promoted_replica_restarted_empty(scale& t, int k) {
  constexpr int users = 2000;
  constexpr uint64_t n = 8000;
  const int old_primary = k, promoted = k + 3;
  const auto k_s = std::to_string(old_primary), p_s = std::to_string(promoted);
  ASSERT_NO_FATAL_FAILURE(t.run_caught_up(n, users));
  ASSERT_EQ(t.running->stop(), 0) << t.running->text();
  t.running.reset();
  const auto m = model_of(0, n, users);
  ASSERT_EQ(primary_in(k), old_primary);
  ASSERT_EQ(replica_in(k), promoted);
  const auto shard = slots_of(old_primary);
  ASSERT_FALSE(shard.empty());
  const auto shard_text = redis::format_ranges(shard);
  ASSERT_GT(scale::users_in(m, shard), 0u);
  std::cout << "pair " << k << " (slots " << shard_text << "; the namespace's slot "
            << (redis::contains(shard, ns_slot) ? "among them" : "elsewhere")
            << "); before: " << epochs_text() << "\n";

  ASSERT_SVC("rc-failover " + p_s);     // node k+3 the primary, node k its replica
  ASSERT_SVC("rc-cut-replica " + k_s);  // node k SIGSTOPped, its link cut on node k+3
  ASSERT_SVC("rc-kill " + p_s);
  ASSERT_SVC("rc-start " + p_s);        // back at once: an EMPTY primary of its slots
  ASSERT_SVC("rc-resume " + k_s);       // node k re-syncs the empty data set
  auto healthy = wait_cluster_ok(60s);
  ASSERT_EQ(healthy, "") << "the set did not settle after rc-resume " << k_s;
  std::cout << "after: " << epochs_text() << "\n";

  // The state the review described.
  auto info = node_cmd(promoted, {"INFO", "replication"});
  ASSERT_EQ(field(info, "role"), "master") << info;
  EXPECT_EQ(field(info, "master_replid2"), std::string(40, '0')) << info;
  EXPECT_EQ(node_cmd(promoted, {"DBSIZE"}), "0");
  EXPECT_EQ(redis::format_ranges(slots_of(promoted)), shard_text);
  EXPECT_TRUE(test::eventually(
    [&] {
      auto r = node_cmd(old_primary, {"INFO", "replication"});
      return field(r, "role") == "slave" && field(r, "master_link_status") == "up"
             && field(r, "master_replid") == field(info, "master_replid")
             && node_cmd(old_primary, {"DBSIZE"}) == "0";
    },
    30s))
    << "node " << k_s << " did not re-sync the empty node " << p_s << ": "
    << node_cmd(old_primary, {"INFO", "replication"});
  auto lost = compare(m);
  std::cout << "Redis before the start: " << lost.text() << "\n";
  ASSERT_GT(lost.behind, 0u) << "the empty restart lost nothing: the test proves nothing";

  // The start: what it claims is judged as it claims it.
  run_node node{"after-empty-restart", t.dir, t.args("run")};
  auto c = settle(node, 90s);
  ASSERT_TRUE(c.ready || c.exited) << "the node neither became ready nor refused in 90 s; /readyz "
                                   << test::http_get(node.port, "/readyz").body << "\n"
                                   << node.text();
  for (auto& l : lines_with(node.text(), ": start "))
    std::cout << "  " << l << "\n";
  if (c.exited) {
    auto text = node.text();
    auto why = refusals(text);
    EXPECT_EQ(*c.exited, 3) << "not a refusal:\n" << text;
    EXPECT_TRUE(why.find("primary " + nodes().at(promoted)) != std::string::npos
                || why.find(shard_text) != std::string::npos)
      << "the refusal names neither node " << p_s << " (" << nodes().at(promoted)
      << ") nor its slots " << shard_text << ":" << why;
    EXPECT_NE(why.find("copy"), std::string::npos) << "the refusal names no cause:" << why;
    return;
  }
  // Ready: the start target is reached, so Redis must hold every entry now.
  auto at_ready = compare(m);
  EXPECT_TRUE(at_ready.equal()) << "ready with entries missing: " << at_ready.text();
  if (!at_ready.equal()) {
    // Still missing once every checkpoint stands at the end of the log?
    bool reached = t.checkpoints_reach(static_cast<int64_t>(n / partitions), 30s);
    std::cout << (reached ? "checkpoints at the end of the log" : t.checkpoints_text())
              << "; then " << compare(m).text() << "\n";
  }
  EXPECT_EQ(node.stop(), 0) << node.text();
}

} // namespace

// The review's sequence on pair 2 (rc-failover 5; rc-cut-replica 2;
// rc-kill 5; rc-start 5; rc-resume 2): a shard that does not serve the
// namespace's slot, so meta, the checkpoints and the namespace's record of
// its primaries survive, and the empty primary (node 5) is one that record
// never saw as a primary (the review: "ready with 2,373 entries missing").
TEST_F(scale, APromotedReplicaRestartedEmptyIsNeverVouchedFor) {
  promoted_replica_restarted_empty(*this, 2);
}

// The same on pair 1 as the review wrote it (rc-failover 4; rc-cut-replica
// 1; rc-kill 4; rc-start 4; rc-resume 1).  Pair 1's shard serves the
// namespace's slot (3923), so meta, the checkpoints and the record of the
// primaries are lost with it (the copies on the other two primaries stay):
// the node finds a new namespace and projects the log from offset 0, which
// is ready with nothing missing while the log's head is there.
TEST_F(scale, APromotedReplicaRestartedEmptyWithTheNamespaceIsNeverVouchedFor) {
  promoted_replica_restarted_empty(*this, 1);
}

namespace {

/// Issue 45, rule 1 (a lost shard whose slots are covered again): with the
/// projection caught up and stopped, pair 2's shard lost whole (rc-kill of
/// its replica, node 5, then of its primary, node 2: nothing replaces
/// them), then its slots covered again by the running primaries
/// (rc-cover-lost: `redis-cli --cluster fix
/// --cluster-fix-with-unreachable-masters`, ADDSLOTS).  Those primaries'
/// own copies are intact, so a start that trusts them is ready with node
/// 2's share missing.  It must either refuse (exit 3, naming node 2 or its
/// slots) or be ready with nothing missing.  The undo brings nodes 2 and 5
/// back (empty, without slots: their epochs are older) and gives node 2
/// slots again.
void lost_shard_covered_again(scale& t) {
  constexpr int users = 2000;
  constexpr uint64_t n = 8000;
  ASSERT_NO_FATAL_FAILURE(t.run_caught_up(n, users));
  ASSERT_EQ(t.running->stop(), 0) << t.running->text();
  t.running.reset();
  const auto m = model_of(0, n, users);
  ASSERT_EQ(primary_in(2), 2);
  ASSERT_EQ(replica_in(2), 5);
  const auto shard = slots_of(2);
  ASSERT_FALSE(redis::contains(shard, ns_slot)) << "pair 2 serves the namespace's slot";
  ASSERT_GT(scale::users_in(m, shard), 0u);
  const auto shard_text = redis::format_ranges(shard);
  const auto node2 = nodes().at(2);
  // Undone last first: nodes 2 and 5 back, the views made to agree (a node
  // back with its old nodes.conf may leave one stale), node 2 given slots
  // (from each coverer no more than it had of its own).
  const auto half = static_cast<long>(redis::slot_total(shard) / 2);
  const auto from1 = std::min(half, static_cast<long>(redis::slot_total(slots_of(1))) - 100);
  const auto from3 = std::min(half, static_cast<long>(redis::slot_total(slots_of(3))) - 100);
  for (auto undo : {"rc-move-slots 3 2 " + std::to_string(from3),
                    "rc-move-slots 1 2 " + std::to_string(from1), std::string{"rc-fix 1"},
                    std::string{"rc-start 5"}, std::string{"rc-start 2"}})
    t.undo.push_back(undo);
  ASSERT_SVC("rc-kill 5");
  ASSERT_SVC("rc-kill 2");
  auto covered = svc("rc-cover-lost 1");
  ASSERT_EQ(covered.rc, 0) << covered.out;
  std::cout << "node 2's slots " << shard_text << " covered again: " << covered.last() << "\n";
  auto lost = compare(m);
  std::cout << "Redis before the start: " << lost.text() << "\n";
  ASSERT_GT(lost.behind, 0u) << "the lost shard lost nothing: the test proves nothing";

  run_node node{"after-cover", t.dir, t.args("run")};
  auto c = settle(node, 90s);
  ASSERT_TRUE(c.ready || c.exited) << "the node neither became ready nor refused in 90 s; /readyz "
                                   << test::http_get(node.port, "/readyz").body << "\n"
                                   << node.text();
  for (auto& l : lines_with(node.text(), ": start "))
    std::cout << "  " << l << "\n";
  if (c.exited) {
    auto why = refusals(node.text());
    EXPECT_EQ(*c.exited, 3) << "not a refusal:\n" << node.text();
    EXPECT_TRUE(why.find(node2) != std::string::npos || why.find(node_ids().at(2).substr(0, 8)) != std::string::npos
                || why.find(shard_text) != std::string::npos)
      << "the refusal names neither node 2 nor its slots " << shard_text << ":" << why;
    return;
  }
  auto at_ready = compare(m);
  EXPECT_TRUE(at_ready.equal()) << "ready with entries missing: " << at_ready.text();
  EXPECT_EQ(node.stop(), 0) << node.text();
}

/// An outside review's sequence (issue 45): with the projection caught up
/// and stopped, one slot of pair 2's shard (the busiest, neither the
/// namespace's nor its primary's lowest, which holds its copy key) moved to
/// pair 3's shard and back, twice (rc-move-slot: finishing an import bumps
/// the importing primary's configuration epoch unless it holds the highest
/// already, so the four moves bump pair 3's, pair 2's, pair 3's and pair
/// 2's in turn: pair 2's ends with the last new epoch, pair 3's with the
/// one before, and the earlier ones are held by no primary any more; the
/// test prints every node's epoch after each step), then a graceful
/// failover (rc-failover:
/// the replica takes over only once it holds every write) of pair
/// `failed`'s shard.  Nothing was lost, so `run` must be ready with nothing
/// missing, and so must the next start and the one after it.  TearDown's
/// leave_healthy fails the pair back.
void alternating_moves_then_graceful_failover(scale& t, int failed) {
  constexpr int users = 2000;
  constexpr uint64_t n = 8000;
  constexpr int round_trips = 2;
  ASSERT_NO_FATAL_FAILURE(t.run_caught_up(n, users));
  ASSERT_EQ(t.running->stop(), 0) << t.running->text();
  t.running.reset();
  const auto m = model_of(0, n, users);
  const int home = primary_in(2), away = primary_in(3);
  ASSERT_EQ(home, 2);
  ASSERT_EQ(away, 3);
  const auto home_slots = slots_of(home);
  ASSERT_FALSE(home_slots.empty());
  std::map<uint16_t, size_t> entries_in;
  for (auto& [user, sessions] : m)
    entries_in[redis::key_slot(convs + user)] += sessions.size();
  uint16_t slot = 0;
  size_t most = 0;
  for (auto& [s, e] : entries_in)
    if (redis::contains(home_slots, s) && s != ns_slot && s != home_slots.front().first && e > most) {
      slot = s;
      most = e;
    }
  ASSERT_GT(most, 0u) << "no busy slot on node " << home;
  const auto slot_s = std::to_string(slot);
  std::cout << "slot " << slot << " (" << most << " entries) moves between node " << home
            << " and node " << away << "; before: " << epochs_text() << "\n";

  t.undo.push_back("rc-move-slot " + slot_s + " " + std::to_string(home));
  for (int i = 0; i < round_trips; ++i) {
    ASSERT_SVC("rc-move-slot " + slot_s + " " + std::to_string(away));
    ASSERT_EQ(owner_of(slot), away);
    std::cout << "slot " << slot << " on node " << away << ": " << epochs_text() << "\n";
    ASSERT_SVC("rc-move-slot " + slot_s + " " + std::to_string(home));
    ASSERT_EQ(owner_of(slot), home);
    std::cout << "slot " << slot << " back on node " << home << ": " << epochs_text() << "\n";
  }
  t.undo.pop_back();  // the slot is home again
  auto moved = compare(m);
  ASSERT_TRUE(moved.equal()) << "the moves lost keys: " << moved.text();

  const int primary = primary_in(failed), replica = replica_in(failed);
  ASSERT_EQ(primary, failed);
  ASSERT_EQ(node_cmd(primary, {"WAIT", "1", "5000"}), "1") << "WAIT on node " << primary;
  ASSERT_SVC("rc-failover " + std::to_string(replica));
  ASSERT_EQ(role(replica), "master");
  auto healthy = wait_cluster_ok(30s);
  ASSERT_EQ(healthy, "") << "the set did not settle after the failover";
  std::cout << "after the failover of pair " << failed << ": " << epochs_text() << "\n";
  auto failed_over = compare(m);
  ASSERT_TRUE(failed_over.equal()) << "the graceful failover lost writes: " << failed_over.text();

  for (int start = 1; start <= 3; ++start) {
    run_node node{"start-" + std::to_string(start), t.dir, t.args("run")};
    auto c = settle(node, 90s);
    EXPECT_TRUE(c.ready) << "start " << start << " after the failover: " << c.text() << ":"
                         << refusals(node.text()) << "\n"
                         << (c.exited ? "" : test::http_get(node.port, "/readyz").body);
    if (!c.ready)
      return;
    auto cmp = compare(m);
    EXPECT_TRUE(cmp.equal()) << "start " << start << ", ready: " << cmp.text();
    EXPECT_EQ(node.stop(), 0) << node.text();
    std::cout << "after start " << start << ": " << epochs_text() << "\n";
  }
}

} // namespace

// Issue 45's false refusal after a graceful failover (rule 2, a failover
// that lost nothing costs nothing; rule 4, epoch facts): both refuse today
// with `copy epoch ... held by none` on the first start, so they carry the
// label `findings` only (CMakeLists.txt), outside the test command, until
// those rules land.
class scale_findings : public scale {};

// The review's sequence as written: the failover of pair 2's shard, the
// slot's home, which gave the slot away each time (and imported it back:
// the cause docs/RELIABILITY.md names for a `copy epoch` refusal, "a slot
// that left the old primary and came back", which a graceful failover
// cannot have lost).  The review: the second restart exited 3 with `copy
// epoch: stored "epochs 13..16 held by other primaries", observed "epoch 13
// held by none"`.
TEST_F(scale_findings, AGracefulFailoverAfterAlternatingSingleSlotMovesStaysReadyAcrossRestarts) {
  alternating_moves_then_graceful_failover(*this, 2);
}

// The same moves between pairs 2 and 3, then the graceful failover of pair
// 1's shard, which no slot left or entered: no migration into its former
// primary and no failover elsewhere, yet the epochs of the first two
// imports are held by no current primary.
TEST_F(scale_findings, AGracefulFailoverOfAShardNoSlotMovedThroughStaysReadyAcrossRestarts) {
  alternating_moves_then_graceful_failover(*this, 1);
}

// Issue 45, rule 1: a lost shard whose slots were covered again
// (lost_shard_covered_again).  Before the rule: "ready with entries
// missing: 2000 users / 14093 entries compared: 4604 behind"; now every
// partition starts at 0 (the gone primary's copy key is in no shard).
TEST_F(scale, ALostShardCoveredAgainIsNeverVouchedFor) {
  lost_shard_covered_again(*this);
}
