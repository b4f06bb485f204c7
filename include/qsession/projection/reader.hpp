// The dispatch-log reader port (docs/EMBEDDING.md §8): the one capability a
// host's own dispatch consumer lends the projection, and no more than the
// design note's reuse boundary allows: "given per-partition starts, verify
// the retention range, then deliver committed records in order".  No
// checkpoint semantics cross it; cluster id, topic id and partition count
// stay with the projection's own metadata verifier (admin API).
//
// The product's own librdkafka reader implements it and is the default.  A
// host passes its own through spawn_options::reader (a factory: one reader
// per generation, i.e. per (re)start of the pipeline).
//
// What the projection relies on, and how it checks it (docs/EMBEDDING.md §8
// has the table):
// - range: start() and add() refuse a start outside [low, high].  Rests on
//   the reader (test it against a real broker); the projection computes the
//   starts itself from its checkpoints and the watermarks it reads, and a
//   refusal is final.
// - order: offsets strictly increase per partition.  Checked on every record:
//   an offset at or below the previous one refuses the projection.
// - no skipped offset: every offset between two delivered records (or below
//   `passed`) is a transaction marker or an aborted record.  Checked: the
//   projection re-reads each such gap through its own read_committed reader
//   before the checkpoint passes it; a record found there refuses.
// - leader epochs: every record carries its batch's leader epoch (>= 0),
//   never decreasing.  Checked on every record.
// - truncation (KIP-320): start() and add() validate a start that comes with
//   a stored epoch against the broker (OffsetForLeaderEpoch, e.g. librdkafka's
//   rd_kafka_seek_partitions with rd_kafka_topic_partition_set_leader_epoch)
//   and report a truncated log as ec::refused.  Rests on the reader alone:
//   nothing in the delivered records tells a rewritten log from the original.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "caf/error.hpp"
#include "caf/expected.hpp"

#include "qsession/projection/types.hpp"

namespace qsp {

/// One committed record of a partition.
struct log_record {
  int64_t offset = 0;
  std::string value;
  int64_t timestamp_ms = -1;
  /// The partition leader epoch of the record's batch (KIP-320).  A reader
  /// must report it; -1 (unknown) refuses the projection.
  int32_t leader_epoch = -1;
};

/// One record as poll_each() hands it over: `value` is valid during the call only.
struct log_record_view {
  int64_t offset = 0;
  std::string_view value;
  int64_t timestamp_ms = -1;
  int32_t leader_epoch = -1;  ///< as log_record::leader_epoch
};

/// Reads one assigned partition from its explicit start, never blocking.
/// Used by one thread at a time (the partition's consumer).
class partition_reader {
public:
  virtual ~partition_reader() = default;
  /// Appends up to `max` committed records to `out`, in offset order, never
  /// waiting.  Sets `passed` to a position the reader has provably passed
  /// (partition EOF under read_committed: every offset below was delivered
  /// or is a marker or an aborted record), or leaves it untouched.
  /// Errors: see dispatch_log.
  virtual caf::expected<void> poll(size_t max, std::vector<log_record>& out,
                                   int64_t& passed) = 0;
  /// What poll() reads, handed to `visit` one record at a time, in offset
  /// order, without copying the value.  `visit` returns false to stop: the
  /// rest of this poll's records are dropped (the projection stops there for
  /// good: after an undecodable record).  An error means the same as poll()'s;
  /// records visited before it were read.  Default: poll() into a vector.
  virtual caf::expected<void> poll_each(size_t max,
                                        const std::function<bool(const log_record_view&)>& visit,
                                        int64_t& passed) {
    std::vector<log_record> buf;
    if (auto ok = poll(max, buf, passed); !ok)
      return ok;
    for (auto& r : buf)
      if (!visit(log_record_view{r.offset, r.value, r.timestamp_ms, r.leader_epoch}))
        break;
    return {};
  }
  /// Asks for `wake` to be called (from any thread, so it must only post a
  /// message) when records or events arrive while nothing is queued; the
  /// reader stops calling it before it is destroyed.  Default: never (the
  /// projection's idle timer, processing.idle-poll-ms, finds new records).
  virtual void on_data(std::function<void()> /*wake*/) {}
  /// The leader epoch of the reader's position if that position is exactly
  /// `offset` (the epoch of the last record or transaction marker consumed
  /// below it), else -1 (unknown: the checkpoint then stores no epoch for a
  /// position reached through `passed`).
  virtual int32_t position_epoch(int64_t /*offset*/) { return -1; }
};

/// A dispatch-log consumer: static assignment with explicit starts, committed
/// records only (isolation.level=read_committed), never a group subscription,
/// never a commit, auto.offset.reset=error.
///
/// Errors are caf::error of category qsp::ec, with a text that names the
/// partition and what was observed:
/// - ec::refused (fatal: the projection refuses and stays refused): a start
///   outside [low, high] (the text gives the observed range), a log truncated
///   below a start's stored epoch, a lost position;
/// - ec::invalid_config (fatal): authentication, authorization, a bad setting;
/// - ec::kafka_unavailable or ec::kafka_read (transient: the projection goes
///   dirty and restarts from its checkpoints with a fresh reader): no broker
///   reachable, a topic that does not exist (yet), a leader moving.  A call
///   waits for the broker at most a bound of the reader's own (the product's
///   reader: kafka.timeout-ms, 10 s by default), in slices interrupt() ends;
/// - ec::shutting_down: after interrupt().
class dispatch_log {
public:
  virtual ~dispatch_log() = default;
  /// The assignment becomes exactly `starts` (what was assigned before, by
  /// an earlier start() or add(), is replaced; the projection calls it once
  /// per reader, but a reader used elsewhere may be started again), after checking each start lies
  /// in the broker's [low, high] (high: the last stable offset).
  /// Refuses (ec::refused) otherwise.  Where `epochs` holds the stored leader
  /// epoch of a start, the position is validated against the broker's log
  /// (KIP-320): a log truncated below it is ec::refused, from start() or
  /// from the partition's first poll.
  virtual caf::expected<void> start(const std::map<int32_t, int64_t>& starts,
                                    const std::map<int32_t, int32_t>& epochs = {}) = 0;
  /// A reader for one assigned partition; null for any other.
  virtual std::shared_ptr<partition_reader> reader(int32_t partition) = 0;
  /// The end of an assigned partition's log (its high watermark) as the
  /// consumer last learnt it from the broker, without asking the broker;
  /// -1 while unknown.  Callable from any thread, never blocks.
  virtual int64_t log_end(int32_t /*partition*/) { return -1; }
  /// Adds partitions to a started consumer (incremental assign), with the
  /// same checks and epoch validation as start(); the partitions already
  /// assigned keep fetching from where they are.  A partition already
  /// assigned is an error (ec::invalid_config), and nothing is added then.
  virtual caf::expected<void> add(const std::map<int32_t, int64_t>& starts,
                                  const std::map<int32_t, int32_t>& epochs = {}) {
    (void) starts;
    (void) epochs;
    return caf::make_error(ec::invalid_config, "this dispatch log cannot add partitions");
  }
  /// Stops fetching `partitions` (incremental unassign); the others keep
  /// fetching.  Their readers are no longer polled.  Not assigned: ignored.
  virtual caf::expected<void> remove(const std::vector<int32_t>& partitions) {
    (void) partitions;
    return caf::make_error(ec::invalid_config, "this dispatch log cannot remove partitions");
  }
  /// Callable from any thread: a call waiting on the broker (start, add)
  /// returns promptly with ec::shutting_down, and so does every later one.
  virtual void interrupt() {}
};

/// Makes the reader of one generation (spawn_options::reader).  Called on
/// the projection's verifier thread, once per (re)start of the pipeline;
/// the previous generation's reader is interrupted and released first.
using dispatch_log_factory = std::function<caf::expected<std::shared_ptr<dispatch_log>>()>;

} // namespace qsp
