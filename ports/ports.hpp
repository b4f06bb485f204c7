// Narrow ports over the outside world.  The real adapters (kafka/, redis/)
// wrap librdkafka and hiredis; tests/support/ has in-memory fakes with fault
// injection.  Every call returns caf::expected; no exception crosses a port.
// Calls may block for a bounded time (the adapters' timeouts); the actors that
// use them run on their own threads in production (see actors/spawn.hpp).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "caf/expected.hpp"

#include "core/checkpoint.hpp"
#include "core/copies.hpp"
#include "core/start_plan.hpp"
#include "messages/types.hpp"
#include "qsession/projection/reader.hpp"

namespace qsp {

/// What the broker says about the dispatch topic.
struct broker_state {
  std::string cluster_id;
  std::string topic_id;       ///< Kafka's text form (22 chars, URL-safe base64)
  int32_t partition_count = 0;
  int64_t retention_ms = -1;  ///< -1: not reported
  std::string cleanup_policy; ///< the topic's cleanup.policy ("": not reported)
  /// Per partition: low and (read_committed) last stable offset as high.
  std::vector<core::watermarks> marks;
  /// Per partition: the high watermark under read_uncommitted.
  std::vector<int64_t> true_high;
};

/// Reads the broker's view of a topic (librdkafka admin API).
class broker_inspector {
public:
  virtual ~broker_inspector() = default;
  /// Identity, partition count, retention.ms, and watermarks of every partition.
  virtual caf::expected<broker_state> inspect(const std::string& topic) = 0;
  /// Identity only: cluster id, topic id and partition count, asked of the
  /// broker afresh (never a cached answer): the run-time identity fence.
  /// A topic that does not exist (yet) is transient (ec::kafka_unavailable).
  virtual caf::expected<broker_state> identity(const std::string& topic) = 0;
  /// Callable from any thread: a call waiting on the broker returns promptly
  /// with an error (ec::shutting_down), and so does every later call.
  virtual void interrupt() {}
};

/// The projection's durable state in Redis: meta and per-partition checkpoints.
/// Every call goes over one connection (the checkpoint connection).
class checkpoint_store {
public:
  virtual ~checkpoint_store() = default;
  /// "major.minor.patch" of the server.
  virtual caf::expected<std::string> server_version() = 0;
  /// The server's `maxmemory-policy` (e.g. "noeviction").
  virtual caf::expected<std::string> maxmemory_policy() = 0;
  /// Meta and the checkpoints of partitions [0, partition_count), read in one
  /// atomic step (no keyspace scan inside it), plus every other checkpoint key
  /// of the topic (strays: found by a bounded, incremental SCAN outside the
  /// atomic step, so Redis is never blocked for long).
  virtual caf::expected<core::stored_state> read(const std::string& topic,
                                                 int32_t partition_count) = 0;
  /// Creates meta iff neither meta nor the checkpoint of any partition in
  /// [0, id.partition_count) exists (atomically).  Returns true if it created
  /// meta, false if meta already existed.
  virtual caf::expected<bool> create_meta(const core::identity& id) = 0;
  /// Guarded write: succeeds only if meta and the stored checkpoint carry `id`
  /// and the stored next_offset equals `expected` (-1: the key must be absent).
  /// A mismatch is ec::checkpoint_conflict.  In the same atomic step the
  /// partition's leader-epoch sidecar gets {next_offset, leader_epoch}
  /// (-1: unknown).  Fencing (docs/DESIGN.md §12, core::check_owner): the
  /// partition's owner record must name `owner_node` with `owner_epoch`
  /// (owner_epoch 0: a writer outside any cluster, which requires that there
  /// is none).  If it names another node with an equal or newer epoch,
  /// nothing is written and the answer is ec::fenced (make_fenced: the
  /// partition moved); if it is absent or rolled back, ec::checkpoint_conflict
  /// (transient: the next verification re-claims).
  virtual caf::expected<void> write_checkpoint(const core::identity& id,
                                               int32_t partition, int64_t expected,
                                               int64_t next_offset,
                                               int32_t leader_epoch = -1,
                                               uint64_t owner_epoch = 0,
                                               const std::string& owner_node = {}) = 0;
  /// Claims `partition` of `topic` for `node` (docs/DESIGN.md §12, "Decision —
  /// re-claim", core::decide_claim), reading and writing the owner record in
  /// one atomic step.  `mine` is the epoch of this node's claim (0: none
  /// yet).  Answers the epoch this node holds afterwards: `mine` where the
  /// record still names it with that epoch, else a new one larger than any
  /// seen.  ec::fenced (make_fenced) where the record names another node
  /// with an equal or newer epoch than `mine` > 0: the partition moved.
  virtual caf::expected<uint64_t> claim(const std::string& topic, int32_t partition,
                                        const std::string& node, int64_t now_ms,
                                        uint64_t mine = 0) = 0;
  /// Redis Cluster mode (docs/DESIGN.md §15): every primary (its prerequisites
  /// and its copy of `topic`'s positions), the slots no primary serves, and
  /// whether meta marks the copies established.  Other modes: no shards.
  virtual caf::expected<core::redis_cluster_state> cluster_state(const std::string& topic) {
    (void) topic;
    return core::redis_cluster_state{};
  }
  /// Redis Cluster mode, every start whose judgement passed
  /// (core::judge_copies' refresh): writes every primary its copy
  /// (plan.positions), waits until the replicas of plan.must_wait
  /// acknowledged theirs (WAIT), records plan.primaries as known, and
  /// marks meta when plan.mark.  A primary that changed since the judgement
  /// (failover, joined, lowest slot moved), or one of plan.must_wait whose
  /// replicas do not all acknowledge in time: ec::redis_unavailable naming
  /// it (the node retries: the start is judged again).  Other modes: nothing.
  virtual caf::expected<void> refresh_copies(const core::identity& id,
                                             const core::copy_refresh& plan) {
    (void) id;
    (void) plan;
    return {};
  }
  /// Callable from any thread: a call blocked in I/O on this store returns
  /// promptly with an error, and so does every later call.
  virtual void interrupt() {}
};

/// One ZADD: a user's sorted set gets these members with at least these scores.
struct session_member {
  std::string_view conversation;
  int64_t created_at = 0;
};
/// Views into the batch being written: valid for the duration of the call.
struct session_update {
  std::string_view user;
  const session_member* members = nullptr;
  size_t count = 0;
};

/// The session sets `convs:{user}`.
class session_store {
public:
  virtual ~session_store() = default;
  /// Pipelines one `ZADD key GT score member ...` per update and reads every
  /// reply; any error reply or I/O failure fails the whole call.
  virtual caf::expected<void> apply(const std::vector<session_update>& updates) = 0;
  /// Pipelining across batches: writes the ZADDs to Redis without reading
  /// their replies, so that the next batch can be sent while Redis works on
  /// this one.  Default: apply at once.
  virtual caf::expected<void> send(const std::vector<session_update>& updates) {
    return apply(updates);
  }
  /// Reads the replies of the oldest `n` ZADDs sent and not yet confirmed
  /// (same failure rules as apply).  Waits at most `wait` (negative: until
  /// they arrive or the command timeout); false means not all have arrived
  /// yet: the replies read so far are kept, call again with the same `n`.
  virtual caf::expected<bool> confirm(size_t /*n*/, std::chrono::milliseconds /*wait*/) {
    return true;
  }
  /// The user's conversations, newest first.
  virtual caf::expected<session_list> sessions(const std::string& user, size_t limit) = 0;
  /// The idle check (issue 45, rule 6): one cheap read on this store's
  /// connection; an error (a connection Redis reset: a failover, a restart)
  /// ends the generation.  The default reads no user's set (limit 0).
  virtual caf::expected<void> probe() {
    auto r = sessions(std::string{}, 0);
    if (!r)
      return r.error();
    return {};
  }
  /// Redis Cluster mode (docs/DESIGN.md §15, "per-shard copies"): writes, on
  /// every primary, that shard's copy of `positions` (partition ->
  /// {next_offset, leader_epoch}) of the projection `id`.  Called only once
  /// every ZADD below those offsets was confirmed (confirm(), redirections
  /// included).  Other modes: nothing (the default).
  virtual caf::expected<void>
  write_copies(const core::identity& id,
               const std::map<int32_t, std::pair<int64_t, int32_t>>& positions) {
    (void) id;
    (void) positions;
    return {};
  }
  /// Redis Cluster mode: the primaries whose copies the generation's start
  /// judged (node id -> replid and copy tag).  write_copies then refuses
  /// (ec::redis_unavailable) while any current primary is not one of them in
  /// the same history under the same copy tag: a failover to it or a chain
  /// of them, a restart without its data, a primary that joined, a moved
  /// lowest slot.  A copy written there could vouch for writes a failover
  /// lost, or start a key naming only some partitions.  The writer
  /// restarts, and the start judges the copies again.  Other modes: ignored.
  virtual void expect_primaries(const std::map<std::string, core::judged_primary>& judged) {
    (void) judged;
  }
  /// Callable from any thread: a call blocked in I/O on this store returns
  /// promptly with an error, and so does every later call.
  virtual void interrupt() {}
};

/// The namespace's ownership records and published statuses, read and
/// written on a connection of its own (the cluster heartbeat).
class cluster_store {
public:
  virtual ~cluster_store() = default;
  /// Writes each status with a TTL of `ttl` and refreshes the owner record's
  /// heartbeat, where the owner record still names `node` at that epoch;
  /// answers the statuses where it does not (nothing written for them), with
  /// `state` set to what the record says (core::check_owner): "fenced" (the
  /// partition moved) or "lost" (the claim is gone: rolled back, deleted).
  virtual caf::expected<std::vector<owned_status>>
  publish(const std::string& topic, const std::string& node,
          const std::vector<owned_status>& statuses, std::chrono::milliseconds ttl,
          int64_t now_ms) = 0;
  /// Deletes the statuses of `partitions` (partition -> epoch) that are
  /// still this node's: a revoked partition is not ready until its next owner says so.
  virtual caf::expected<void> release(const std::string& topic, const std::string& node,
                                      const std::map<int32_t, uint64_t>& partitions) = 0;
  /// Every partition's owner record and the owner's live status, with the
  /// readiness rule applied (core::cluster_view).
  virtual caf::expected<std::vector<cluster_partition>> view(const std::string& topic,
                                                             int32_t partition_count) = 0;
  virtual void interrupt() {}
};

/// What a consumer-group membership tells the projection (ownership = group).
/// Called on the membership's own thread.
struct group_events {
  /// Partitions added to this member (cooperative: only the new ones).
  std::function<void(const std::vector<int32_t>&)> assigned;
  /// Partitions taken away (`lost`: the session expired first).  Returns
  /// once the node stopped projecting them: the group moves them on only then.
  std::function<void(const std::vector<int32_t>&, bool lost)> revoked;
  /// A membership error that retrying cannot fix (authorization, a fatal
  /// client error): the projection refuses.
  std::function<void(const caf::error&)> failed;
};

/// Membership in the Kafka consumer group `kafka.group-id`: decides which
/// partitions this node owns.  It never fetches a record and never commits.
class group_membership {
public:
  virtual ~group_membership() = default;
  /// Leaves the group (the survivors rebalance at once) and stops; returns
  /// at once, the membership's thread finishes the leave.
  virtual void leave() = 0;
};

/// Builds fresh adapters for each (re)start of the pipeline.
class port_factory {
public:
  virtual ~port_factory() = default;
  virtual caf::expected<std::unique_ptr<broker_inspector>> make_inspector() = 0;
  virtual caf::expected<std::unique_ptr<checkpoint_store>> make_checkpoint_store() = 0;
  virtual caf::expected<std::unique_ptr<session_store>> make_session_store() = 0;
  virtual caf::expected<std::shared_ptr<dispatch_log>> make_dispatch_log() = 0;
  /// Clustered ownership modes only (docs/DESIGN.md §12).
  virtual caf::expected<std::unique_ptr<cluster_store>> make_cluster_store() = 0;
  /// The projection's own reader, to audit a host's reader with
  /// (actors/gap_audit.hpp); empty where make_dispatch_log() is that own
  /// reader already (nothing to audit).
  virtual dispatch_log_factory audit_log_factory() { return {}; }
  /// ownership = group only; ports without a broker answer ec::invalid_config.
  virtual caf::expected<std::unique_ptr<group_membership>> make_group_member(group_events events) {
    (void) events;
    return caf::make_error(ec::invalid_config,
                           "projection.ownership: group is not available with these ports");
  }
};

/// The ports of `inner` with a host's reader (spawn_options::reader) in
/// place of inner's own, which audits the host's gaps.
class host_reader_ports final : public port_factory {
public:
  host_reader_ports(std::shared_ptr<port_factory> inner, dispatch_log_factory reader)
    : inner_(std::move(inner)), reader_(std::move(reader)) {}
  caf::expected<std::unique_ptr<broker_inspector>> make_inspector() override {
    return inner_->make_inspector();
  }
  caf::expected<std::unique_ptr<checkpoint_store>> make_checkpoint_store() override {
    return inner_->make_checkpoint_store();
  }
  caf::expected<std::unique_ptr<session_store>> make_session_store() override {
    return inner_->make_session_store();
  }
  caf::expected<std::shared_ptr<dispatch_log>> make_dispatch_log() override {
    auto made = reader_();
    if (made && !*made)
      return caf::make_error(ec::invalid_config,
                             "spawn_options.reader: the host's reader factory made no reader");
    return made;
  }
  caf::expected<std::unique_ptr<cluster_store>> make_cluster_store() override {
    return inner_->make_cluster_store();
  }
  caf::expected<std::unique_ptr<group_membership>> make_group_member(group_events events) override {
    return inner_->make_group_member(std::move(events));
  }
  dispatch_log_factory audit_log_factory() override {
    return [inner = inner_] { return inner->make_dispatch_log(); };
  }

private:
  std::shared_ptr<port_factory> inner_;
  dispatch_log_factory reader_;
};

} // namespace qsp
