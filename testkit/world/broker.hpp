// The simulated Kafka broker: the dispatch log's partitions, transactions,
// retention, unclean truncation and the topic's identity, with the faults
// that break them, and its admin port (fake_broker_inspector).  The
// consumer port lives in consumer.hpp.
//
// Fidelity notes:
// - The broker keeps one log per partition; entry i has offset i.  Entries
//   below `low` are deleted (retention).  Data records of an open transaction
//   pin the last stable offset (LSO, the read_committed `high`) at the first
//   offset of the oldest open transaction; `true_high` is the end of the log.
// - An identity read (inspect, identity) takes time, like the admin
//   requests behind it: it begins, the world may move on (during_identity),
//   then it answers with what the broker was when it began.  So a check
//   covers only what was fetched before it began.
// - Every record carries the leader epoch it was appended in (KIP-320).  An
//   unclean leader election (unclean_truncate) cuts the log and starts a new
//   epoch; readers detect a truncation below their position the way
//   librdkafka does (OffsetForLeaderEpoch: the end offset of the position's
//   epoch lies below the position) and report it as a refusal.
// - The broker can be down (broker_down: admin calls fail, fetches return
//   nothing, as librdkafka retries silently) or slow (broker_delay_ms: a
//   record reaches the consumers that long after its append).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/checkpoint.hpp"
#include "core/dispatch.hpp"
#include "testkit/world/common.hpp"

namespace qsp::test {

enum class entry_kind : uint8_t { data, marker, aborted };

std::string to_string(entry_kind k);

struct log_entry {
  int64_t offset = 0;
  std::string value;
  entry_kind kind = entry_kind::data;
  int64_t txn = 0;  ///< transaction id, 0: not transactional
  /// The partition's leader epoch when the entry was appended (readers hand
  /// it out with the record and as the epoch of the position after it).
  int32_t epoch = 0;
  /// world_core::now_ms() at the append (0 without a clock): with
  /// broker_delay_ms, consumers see the entry only that much later.
  int64_t appended_ms = 0;
};

struct fake_partition {
  int64_t low = 0;                 ///< entries below are deleted
  std::vector<log_entry> log;      ///< log[i].offset == i
  std::map<int64_t, int64_t> open; ///< open transaction id -> its first offset
  int32_t leader_epoch = 0;        ///< the epoch appends get (unclean_truncate raises it)

  int64_t end() const { return static_cast<int64_t>(log.size()); }
  /// The last stable offset: the first offset of the oldest open transaction,
  /// or the end of the log.
  int64_t lso() const;
  /// What OffsetForLeaderEpoch answers for `epoch`: the first offset of an
  /// entry of a later epoch, or the end of the log if there is none.
  int64_t end_offset_for_epoch(int32_t epoch) const;
};

/// The broker's room of the world.
struct simulated_broker : virtual world_core {
  explicit simulated_broker(int32_t partition_count);

  std::string topic = "dispatch";
  std::string cluster_id = "fake-cluster-1";
  std::string topic_id;  ///< a valid Kafka Uuid text (see default_topic_id)
  int64_t retention_ms = -1;
  std::string cleanup_policy = "delete";
  std::vector<fake_partition> partitions;
  int64_t last_txn = 0;  ///< the id begin_txn handed out last
  /// What inspect() reports as partition count; -1: partitions.size().
  int32_t reported_partition_count = -1;
  /// Bumped by recreate_topic (readers of an older one fail).
  uint64_t topic_incarnation = 0;

  // -- faults ------------------------------------------------------------------

  fault inspect_fault;   ///< ec::kafka_unavailable
  fault identity_fault;  ///< ec::kafka_unavailable
  /// After this many inspect()/identity() calls (>= 0), the topic is replaced:
  /// topic_id becomes `changed_topic_id` (and cluster_id `changed_cluster_id`
  /// if not empty) for every later call.
  int64_t change_identity_after = -1;
  std::string changed_topic_id;
  std::string changed_cluster_id;

  fault start_fault;  ///< dispatch_log::start, ec::kafka_unavailable
  fault poll_fault;   ///< partition_reader::poll, ec::kafka_read
  int32_t poll_fault_partition = -1;  ///< -1: polls of any partition count
  fault make_inspector_fault;         ///< ec::kafka_unavailable
  fault make_dispatch_log_fault;      ///< ec::kafka_unavailable

  /// The broker is unreachable: inspect, identity and dispatch_log start/add
  /// fail (ec::kafka_unavailable); polls return no records and no EOF
  /// (librdkafka retries silently); the factories still succeed.
  bool broker_down = false;
  /// A slow broker: a record reaches the consumers (their polls, the LSO
  /// they can reach, log_end) only once now_ms() >= its append time + this;
  /// inspect() still reports it at once.  No effect without a clock (now_ms).
  int64_t broker_delay_ms = 0;
  /// Arms inspect_fault, identity_fault and poll_fault for the next `n`
  /// calls each (n < 0: every call).
  void broker_errors(int64_t n);
  /// An unclean leader election on `p`: entries at offsets >= `to` vanish
  /// (and the open transactions that began there), the leader epoch goes up
  /// by one, later appends refill from `to` in the new epoch.  A reader that
  /// had read past `to` (or was started with a stored epoch that the new log
  /// ends below its start) reports a refusal on its next poll; one that had
  /// not is unaffected, as with Kafka.
  void unclean_truncate(int32_t p, int64_t to);
  /// The topic is deleted and created again with as many partitions: a new
  /// topic id (default_topic_id with a new n), every partition empty (low 0,
  /// epoch 0).  Readers of an assignment made before fail every poll
  /// (ec::kafka_read: unknown topic id).
  void recreate_topic();
  /// `n` more (empty) partitions: inspect and identity report the new count.
  void add_partitions(int32_t n);
  /// The end of what consumers of `p` can see (broker_delay_ms).
  int64_t visible_end(int32_t p) const;

  // -- hooks (run under the lock, inside the port call) --------------------------

  /// After inspect() computed its answer.
  std::function<void()> on_inspect;
  /// While an identity read (inspect or identity) is under way: after its
  /// identity_start event, before its end event and its answer, which still
  /// describes the broker as it was when the read began (the earliest state
  /// a real read may report).  A test appends records, replaces the topic or
  /// runs other actors' jobs here (in the deterministic scheduler: the
  /// consumers fetch while the check runs).  Not called for a read that
  /// starts inside it; a copy runs, so it may reset itself.
  std::function<void()> during_identity;
  /// Identity reads begun so far (the number their events carry).
  int64_t identity_reads = 0;

  // -- log helpers ---------------------------------------------------------------

  /// A valid, non-zero Kafka topic id text; `n` varies it.
  static std::string default_topic_id(uint64_t n = 1);

  int32_t partition_count() const { return static_cast<int32_t>(partitions.size()); }
  fake_partition& part(int32_t p);
  const fake_partition& part(int32_t p) const;

  /// Appends a JSON dispatch (core::encode_json); returns its offset.
  int64_t append(int32_t p, const core::dispatch& d);
  int64_t append(int32_t p, std::string conversation, int64_t created_at,
                 std::vector<std::string> recipients);
  /// Appends a raw record value (e.g. a poison record); returns its offset.
  int64_t append_raw(int32_t p, std::string value);
  /// Appends a transaction control record; returns its offset.
  int64_t append_marker(int32_t p);
  /// Opens a transaction on `p` (pins the LSO at the next offset); returns its id.
  int64_t begin_txn(int32_t p);
  int64_t append_txn(int32_t p, int64_t txn, const core::dispatch& d);
  /// Ends the transaction with a commit / abort marker; returns the marker's offset.
  /// Aborting turns the transaction's data records into aborted records.
  int64_t commit_txn(int32_t p, int64_t txn);
  int64_t abort_txn(int32_t p, int64_t txn);
  /// Retention: deletes every entry below `low`.
  void truncate(int32_t p, int64_t low);

  core::watermarks marks(int32_t p) const;  ///< {low, LSO}
  int64_t lso(int32_t p) const { return part(p).lso(); }
  int64_t end(int32_t p) const { return part(p).end(); }
  std::map<int32_t, int64_t> lsos() const;
  core::identity identity() const;  ///< the broker's current identity

  /// Readers whose data callback fires on appends (see fake_partition_reader).
  std::vector<std::weak_ptr<class fake_partition_reader>> readers;
  /// Fires the data callback of every live reader of `p` (under the lock).
  void wake(int32_t p);

private:
  friend class fake_broker_inspector;

  /// Appends one entry to `p` in its current epoch, stamped with now_ms().
  log_entry& push_entry(int32_t p, std::string value, entry_kind kind, int64_t txn);
  void maybe_change_identity();
  /// One identity read over time: identity_start, `read` (the answer as of
  /// now), during_identity, then the end event; returns the answer.
  template <class Read>
  caf::expected<broker_state> timed_identity_read(Read read);
  bool in_during_identity_ = false;
};

/// The admin port (describe cluster, describe topic, watermarks).
class fake_broker_inspector final : public broker_inspector {
public:
  explicit fake_broker_inspector(std::shared_ptr<fake_world> w) : w_(std::move(w)) {}
  caf::expected<broker_state> inspect(const std::string& topic) override;
  caf::expected<broker_state> identity(const std::string& topic) override;

private:
  std::shared_ptr<fake_world> w_;
};

} // namespace qsp::test
