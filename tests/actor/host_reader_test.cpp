// A host's own dispatch-log reader (spawn_options::reader,
// qsession/projection/reader.hpp): a correct one projects as the product's
// own does, transaction gaps audited; a deliberately wrong one is caught,
// never trusted: one that skips an offset, one that reorders, one that
// drops the leader epoch or lowers it (below the stored checkpoint's too), one
// that polls on after being told to stop, one that claims to have passed records it never
// delivered.  Each is refused, the checkpoint never passes the record it
// got wrong, and the gate never opens on its word.
#include "tests/actor/fixture.hpp"

#include <set>

using namespace qsp;
using namespace qsp::test;

namespace {

/// What a wrong reader does wrong.
struct misbehaviour {
  int32_t partition = 0;
  std::set<int64_t> skip;    ///< offsets it does not deliver
  int64_t swap_at = -1;      ///< delivers swap_at + 1 before swap_at
  int64_t no_epoch_from = -1; ///< records from here on carry epoch -1
  bool claim_end = false;    ///< sets `passed` to the log's end after a skip
  int64_t low_epoch_from = -1; ///< records from here on carry epoch 0
  bool low_position_epoch = false; ///< position_epoch answers 0 where it knows one
  bool ignore_stop = false;  ///< poll_each visits on after the visitor says stop
};

/// A host's reader over the world's reader, wrong as told.
class host_partition_reader final : public partition_reader {
public:
  host_partition_reader(std::shared_ptr<partition_reader> inner, int32_t partition,
                        std::shared_ptr<const misbehaviour> bad, std::shared_ptr<fake_world> world)
    : inner_(std::move(inner)), partition_(partition), bad_(std::move(bad)),
      world_(std::move(world)) {}

  caf::expected<void> poll(size_t max, std::vector<log_record>& out, int64_t& passed) override {
    std::vector<log_record> got;
    if (auto ok = inner_->poll(max, got, passed); !ok)
      return ok;
    bool mine = partition_ == bad_->partition;
    bool skipped = false;
    for (auto& r : got) {
      if (mine && bad_->skip.count(r.offset) > 0) {
        skipped = true;
        continue;
      }
      if (mine && bad_->no_epoch_from >= 0 && r.offset >= bad_->no_epoch_from)
        r.leader_epoch = -1;
      if (mine && bad_->low_epoch_from >= 0 && r.offset >= bad_->low_epoch_from)
        r.leader_epoch = 0;
      out.push_back(std::move(r));
    }
    if (mine && bad_->swap_at >= 0)
      for (size_t i = 0; i + 1 < out.size(); ++i)
        if (out[i].offset == bad_->swap_at && out[i + 1].offset == bad_->swap_at + 1)
          std::swap(out[i], out[i + 1]);
    if (mine && skipped && bad_->claim_end)
      passed = world_->lso(partition_);
    return {};
  }

  caf::expected<void> poll_each(size_t max, const std::function<bool(const log_record_view&)>& visit,
                                int64_t& passed) override {
    if (partition_ != bad_->partition || !bad_->ignore_stop)
      return partition_reader::poll_each(max, visit, passed);
    std::vector<log_record> got;
    if (auto ok = poll(max, got, passed); !ok)
      return ok;
    for (auto& r : got)
      visit(log_record_view{r.offset, r.value, r.timestamp_ms, r.leader_epoch}); // "false" ignored
    return {};
  }
  void on_data(std::function<void()> wake) override { inner_->on_data(std::move(wake)); }
  int32_t position_epoch(int64_t offset) override {
    auto e = inner_->position_epoch(offset);
    return partition_ == bad_->partition && bad_->low_position_epoch && e > 0 ? 0 : e;
  }

private:
  std::shared_ptr<partition_reader> inner_;
  int32_t partition_;
  std::shared_ptr<const misbehaviour> bad_;
  std::shared_ptr<fake_world> world_;
};

class host_log final : public dispatch_log {
public:
  host_log(std::shared_ptr<dispatch_log> inner, std::shared_ptr<const misbehaviour> bad,
           std::shared_ptr<fake_world> world)
    : inner_(std::move(inner)), bad_(std::move(bad)), world_(std::move(world)) {}

  caf::expected<void> start(const std::map<int32_t, int64_t>& starts,
                            const std::map<int32_t, int32_t>& epochs) override {
    return inner_->start(starts, epochs);
  }
  std::shared_ptr<partition_reader> reader(int32_t partition) override {
    auto r = inner_->reader(partition);
    if (!r)
      return r;
    return std::make_shared<host_partition_reader>(std::move(r), partition, bad_, world_);
  }
  int64_t log_end(int32_t partition) override { return inner_->log_end(partition); }
  caf::expected<void> add(const std::map<int32_t, int64_t>& starts,
                          const std::map<int32_t, int32_t>& epochs) override {
    return inner_->add(starts, epochs);
  }
  caf::expected<void> remove(const std::vector<int32_t>& partitions) override {
    return inner_->remove(partitions);
  }
  void interrupt() override { inner_->interrupt(); }

private:
  std::shared_ptr<dispatch_log> inner_;
  std::shared_ptr<const misbehaviour> bad_;
  std::shared_ptr<fake_world> world_;
};

struct HostReader : projection_fixture {
  /// Readers the host's factory made (one per generation).
  size_t made = 0;

  void use_host_reader(misbehaviour bad = {}) {
    auto shared = std::make_shared<const misbehaviour>(std::move(bad));
    host_reader = [this, shared]() -> caf::expected<std::shared_ptr<dispatch_log>> {
      ++made;
      auto inner = make_fake_ports(world)->make_dispatch_log();
      if (!inner)
        return inner.error();
      return std::shared_ptr<dispatch_log>{std::make_shared<host_log>(*inner, shared, world)};
    };
  }

  /// Refused naming `what`, never ready, and the partition's checkpoint
  /// stayed at or below `limit` (it never passed the record the reader got
  /// wrong).
  void refused_before(int32_t p, int64_t limit, const std::string& what) {
    ASSERT_TRUE(drive_to("refused")) << last_error();
    EXPECT_TRUE(contains(last_error(), what)) << last_error();
    EXPECT_TRUE(contains(last_error(), "reader contract")) << last_error();
    EXPECT_FALSE(saw("ready"));
    auto cp = world->checkpoint(p);
    EXPECT_TRUE(!cp || *cp <= limit) << "checkpoint " << *cp << " passed offset " << limit;
    auto gate = pull("u1", 10);
    ASSERT_TRUE(!gate);
    EXPECT_TRUE(has_code(gate.error(), ec::not_ready));
    // Refused is final: time changes nothing.
    auto made_before = made;
    run_for(60s, 1s);
    EXPECT_EQ(state(), "refused");
    EXPECT_EQ(made, made_before);
  }
};

} // namespace

// A correct host reader over a log with transactions: everything committed
// is projected, the aborted records are not, and the gaps (markers, the
// aborted records) were audited through the projection's own reader.
TEST_F(HostReader, ACorrectReaderProjectsLikeTheOwnOneWithItsGapsAudited) {
  use_host_reader();
  fill(0, 6);
  auto t = world->begin_txn(0);
  world->append_txn(0, t, core::dispatch{"kept", 7000, {"u1"}});
  world->commit_txn(0, t);
  auto a = world->begin_txn(0);
  world->append_txn(0, a, core::dispatch{"aborted", 7001, {"u1"}});
  world->abort_txn(0, a);
  fill(0, 3);
  fill(1, 5);
  auto polls_before = world->calls.poll;
  start();
  ASSERT_TRUE(drive_to("ready")) << last_error();
  EXPECT_EQ(made, 1u);
  EXPECT_TRUE(world->checkpoint(0) == std::optional<int64_t>{world->lso(0)});
  EXPECT_TRUE(world->score("u1", "kept"));
  EXPECT_FALSE(world->score("u1", "aborted"));
  // Two readers polled the world: the host's and the audit's.
  EXPECT_GT(world->calls.make_dispatch_log, 1u);
  EXPECT_GT(world->calls.poll, polls_before);
  EXPECT_FALSE(saw("refused"));
}

TEST_F(HostReader, OneThatSkipsAnOffsetIsRefusedBeforeTheCheckpointPassesIt) {
  misbehaviour bad;
  bad.partition = 1;
  bad.skip = {4};
  use_host_reader(bad);
  fill(0, 5);
  fill(1, 9);
  start();
  ASSERT_NO_FATAL_FAILURE(refused_before(1, 4, "skipped partition 1 offset 4"));
  EXPECT_FALSE(world->score("u4", "p1-c4"));
}

TEST_F(HostReader, OneThatClaimsToHavePassedRecordsItNeverDeliveredIsRefused) {
  misbehaviour bad;
  bad.partition = 0;
  bad.skip = {6, 7, 8};
  bad.claim_end = true; // "passed" the end of the log
  use_host_reader(bad);
  fill(0, 9);
  start();
  ASSERT_NO_FATAL_FAILURE(refused_before(0, 6, "skipped partition 0 offset 6"));
}

TEST_F(HostReader, OneThatReordersIsRefused) {
  misbehaviour bad;
  bad.partition = 2;
  bad.swap_at = 3;
  use_host_reader(bad);
  fill(2, 8);
  settings.max_batch_records = 100;
  start();
  ASSERT_NO_FATAL_FAILURE(refused_before(2, 3, "offset 3 after offset 4"));
}

TEST_F(HostReader, OneThatDropsTheLeaderEpochIsRefused) {
  misbehaviour bad;
  bad.partition = 0;
  bad.no_epoch_from = 2;
  use_host_reader(bad);
  fill(0, 6);
  start();
  ASSERT_NO_FATAL_FAILURE(refused_before(0, 2, "offset 2 without a leader epoch"));
}

// The same wrong reader, after readiness: the live tail is checked as
// the catch-up was, and the gate closes.
TEST_F(HostReader, ASkipAfterReadinessIsRefusedThere) {
  misbehaviour bad;
  bad.partition = 0;
  bad.skip = {7};
  use_host_reader(bad);
  fill(0, 5);
  start();
  ASSERT_TRUE(drive_to("ready")) << last_error();
  fill(0, 4); // offsets 5..8; 7 is skipped
  ASSERT_TRUE(drive_to("refused")) << last_error();
  EXPECT_TRUE(contains(last_error(), "skipped partition 0 offset 7")) << last_error();
  auto cp = world->checkpoint(0);
  ASSERT_TRUE(cp);
  EXPECT_LE(*cp, 7);
  auto gate = pull("u1", 10);
  ASSERT_TRUE(!gate);
  EXPECT_TRUE(has_code(gate.error(), ec::not_ready));
}

// A reader that polls on after the projection said stop (at an undecodable
// record): what it hands over after that record is not taken, and the
// partition stops exactly before the record, as with a reader that stops.
TEST_F(HostReader, OneThatIgnoresTheStopAtAnUndecodableRecordStillStopsBeforeIt) {
  misbehaviour bad;
  bad.partition = 1;
  bad.ignore_stop = true;
  use_host_reader(bad);
  fill(1, 7);
  auto poison = world->append_raw(1, "{\"conversation_id\":\"x\",\"created_at\":-5}");
  fill(1, 5);
  ASSERT_EQ(poison, 7);
  settings.max_batch_records = 100; // the poison record and what follows in one poll
  start();
  ASSERT_TRUE(drive_to("refused")) << last_error();
  EXPECT_TRUE(contains(last_error(), "partition 1 offset 7")) << last_error();
  EXPECT_EQ(failures_of("undecodable"), 1u);
  EXPECT_TRUE(world->checkpoint(1) == std::optional<int64_t>{7});
  for (int64_t off = 8; off < 13; ++off)
    EXPECT_FALSE(world->score("u" + std::to_string(off % 5), "p1-c" + std::to_string(off)));
  EXPECT_FALSE(saw("ready"));
}

// Epochs never decrease across generations either: after a restart the
// first record is held to the epoch stored with the checkpoint it resumes
// from, not only to the records of the same consumer.
TEST_F(HostReader, OneThatDeliversAnEpochBelowTheStoredCheckpointsAfterARestartIsRefused) {
  misbehaviour bad;
  bad.partition = 0;
  bad.low_epoch_from = 8; // offsets 8.. claim epoch 0; the log has them in epoch 3
  use_host_reader(bad);
  fill(0, 5);
  world->partitions[0].leader_epoch = 3; // a clean leader change
  fill(0, 3);
  start();
  ASSERT_TRUE(drive_to("ready")) << last_error();
  ASSERT_TRUE(world->checkpoint(0) == std::optional<int64_t>{8});
  world->poll_fault.arm(1); // a read error: dirty, a new generation from 8
  ASSERT_TRUE(drive_to("dirty")) << last_error();
  fill(0, 2);
  ASSERT_TRUE(drive_to("refused")) << last_error();
  EXPECT_EQ(made, 2u);
  EXPECT_TRUE(contains(last_error(), "offset 8 with leader epoch 0 after leader epoch 3"))
    << last_error();
  EXPECT_TRUE(world->checkpoint(0) == std::optional<int64_t>{8});
  auto gate = pull("u1", 10);
  ASSERT_TRUE(!gate);
  EXPECT_TRUE(has_code(gate.error(), ec::not_ready));
}

// The epoch a reader gives for a position it passed (past transaction
// markers) is held to the same rule as a record's.
TEST_F(HostReader, OneThatGivesAPassedPositionALowerEpochIsRefused) {
  misbehaviour bad;
  bad.partition = 0;
  bad.low_position_epoch = true;
  use_host_reader(bad);
  world->partitions[0].leader_epoch = 2;
  fill(0, 3);
  auto t = world->begin_txn(0);
  world->append_txn(0, t, core::dispatch{"kept", 7000, {"u1"}});
  world->commit_txn(0, t); // the commit marker: `passed` ends past it
  start();
  ASSERT_NO_FATAL_FAILURE(
    refused_before(0, 4, "position 5 with leader epoch 0 after leader epoch 2"));
}
