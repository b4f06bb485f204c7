// In-memory fakes of the ports (ports/ports.hpp) with fault injection, for the
// actor tests.  Every fake created by one fake_port_factory shares one
// fake_world (held by shared_ptr), so a test can inspect and modify the
// "outside world" — the Kafka log, the Redis hashes and sorted sets — while
// the projection runs, and arm faults for the next call(s) of a port.
//
// Fidelity notes:
// - The broker keeps one log per partition; entry i has offset i.  Entries
//   below `low` are deleted (retention).  Data records of an open transaction
//   pin the last stable offset (LSO, the read_committed `high`) at the first
//   offset of the oldest open transaction; `true_high` is the end of the log.
// - The checkpoint store implements the guarded write exactly like the Lua
//   script in redis/stores.cpp (meta identity, checkpoint identity and
//   partition, stored next_offset == expected or absent for expected < 0).
// - The session store applies ZADD GT per member; sessions() orders like
//   ZREVRANGE (score descending, then member descending).
// - A partition reader delivers committed data records only (markers and
//   aborted records are skipped), at most `max` per poll, never past the LSO,
//   and reports partition EOF (`passed` = LSO) once per position reached, in a
//   poll that still had room (librdkafka puts the EOF event in the batch).
//   Like librdkafka's partition queues it calls the reader's data callback
//   (on_data) when records or an EOF event become available to it.
// - dispatch_log::start checks [low, high] with the LSO as high, as
//   rd_kafka_query_watermark_offsets does under read_committed.
// - An identity read (inspect, identity) takes time, like the admin
//   requests behind it: it begins, the world may move on
//   (fake_world::during_identity), then it answers with what the broker was
//   when it began.  So a check covers only what was fetched before it began.
// - Redis can be frozen (redis_frozen): pipelined replies never arrive
//   ("not yet" forever) and every blocking call fails as after its timeout.
//   A single ZADD reply can fail (reply_error_fault) on a live connection.
// - Every record carries the leader epoch it was appended in (KIP-320).  An
//   unclean leader election (unclean_truncate) cuts the log and starts a new
//   epoch; readers detect a truncation below their position the way
//   librdkafka does (OffsetForLeaderEpoch: the end offset of the position's
//   epoch lies below the position) and report it as a refusal.
// - The broker can be down (broker_down: admin calls fail, fetches return
//   nothing, as librdkafka retries silently) or slow (broker_delay_ms: a
//   record reaches the consumers that long after its append).
// - Redis can be down (redis_down: every call is refused at once).  With
//   lazy_pipeline, pipelined ZADDs take effect when their replies are read
//   (confirm), and a connection reset (redis_resets) loses the unread ones.
//   Every Redis write is journaled, so that a failover to a replica that
//   missed the last writes (redis_rollback, shard_failover) can undo them.
//
// The fakes never block.  Every port call locks `fake_world::mtx`; a test that
// runs the actors on other threads must lock it too before touching the world.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/checkpoint.hpp"
#include "core/cluster.hpp"
#include "core/dispatch.hpp"
#include "messages/types.hpp"
#include "ports/ports.hpp"

namespace qsp::test {

/// Fails calls on demand: after `skip` more successful calls, the next `count`
/// calls fail (count < 0: every call from then on).
struct fault {
  int64_t skip = 0;
  int64_t count = 0;
  ec code = ec::unspecified; ///< unspecified: the port's natural transient code

  /// Fail `n` calls (n < 0: all) after `after` more successful ones.
  void arm(int64_t n = 1, int64_t after = 0) {
    count = n;
    skip = after;
  }
  void disarm() {
    count = 0;
    skip = 0;
  }
  bool armed() const { return count != 0; }
  /// Consumes one call; true if this call must fail.
  bool fire();
};

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
  /// fake_world::now_ms() at the append (0 without a clock): with
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

/// Call counters of every port operation (also failed calls).
struct call_counts {
  uint64_t make_inspector = 0;
  uint64_t make_checkpoint_store = 0;
  uint64_t make_session_store = 0;
  uint64_t make_dispatch_log = 0;
  uint64_t inspect = 0;
  uint64_t identity = 0;
  uint64_t server_version = 0;
  uint64_t read = 0;
  uint64_t create_meta = 0;
  uint64_t write_checkpoint = 0;
  uint64_t checkpoint_conflicts = 0;
  uint64_t fenced = 0;        ///< checkpoint writes refused: another node owns the partition
  uint64_t lost = 0;          ///< checkpoint writes refused: the owner record was rolled back
  uint64_t claims = 0;
  uint64_t adds = 0;     ///< dispatch_log::add (incremental assignments)
  uint64_t removes = 0;  ///< dispatch_log::remove
  uint64_t publishes = 0;
  uint64_t apply = 0;
  uint64_t zadd_members = 0;  ///< members sent in successful (or partial) ZADDs
  uint64_t confirm = 0;       ///< confirm() calls (pipelined replies read)
  uint64_t max_unconfirmed = 0; ///< most sends (batches) unconfirmed at once
  uint64_t sessions = 0;
  uint64_t start = 0;
  uint64_t reader = 0;
  uint64_t poll = 0;
  uint64_t wakes = 0;         ///< data callbacks fired
  uint64_t not_yet = 0;       ///< confirm() calls answered "not yet"
  uint64_t asks = 0;          ///< sends redirected by an ASK (ask_fault)
};

/// An owning copy of one `session_update` (whose views die with the call).
struct applied_update {
  std::string user;
  std::vector<std::pair<std::string, int64_t>> members; ///< conversation, created_at
};

std::vector<applied_update> copy_updates(const std::vector<session_update>& ups);

/// What happened in the outside world, in order: records fetched by a
/// reader (offset = its position after the poll), a consumer (re)assigned,
/// a checkpoint written, and every identity read (inspect or identity) as
/// two events, for it takes time: `identity_start` when it begins, then
/// `identity` (answered) or `identity_failed` (an error) when it ends; both
/// carry the read's number in `offset`.  Between the two the world may move
/// on (fake_world::during_identity).
struct fake_event {
  enum class kind : uint8_t {
    fetched,
    identity,
    assigned,
    checkpoint,
    identity_start,
    identity_failed,
  };
  kind what = kind::fetched;
  int32_t partition = -1;
  int64_t offset = 0;
};

/// The state all fakes share.
struct fake_world {
  explicit fake_world(int32_t partition_count = 1);

  mutable std::recursive_mutex mtx;
  call_counts calls;

  // -- broker (broker_inspector, dispatch_log) ---------------------------------

  std::string topic = "dispatch";
  std::string cluster_id = "fake-cluster-1";
  std::string topic_id;  ///< a valid Kafka Uuid text (see default_topic_id)
  int64_t retention_ms = -1;
  std::string cleanup_policy = "delete";
  std::vector<fake_partition> partitions;
  int64_t last_txn = 0;  ///< the id begin_txn handed out last
  /// What inspect() reports as partition count; -1: partitions.size().
  int32_t reported_partition_count = -1;

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
  /// Bumped by recreate_topic (readers of an older one fail).
  uint64_t topic_incarnation = 0;
  /// The end of what consumers of `p` can see (broker_delay_ms).
  int64_t visible_end(int32_t p) const;

  // -- Redis (checkpoint_store, session_store) ---------------------------------

  std::string ns = "session_projection";
  std::string server_version = "7.2.4";
  std::string maxmemory_policy = "noeviction";
  /// Frozen (SIGSTOP): pipelined replies stay "not yet"; every blocking
  /// call fails with ec::redis_unavailable, as after its command timeout.
  bool redis_frozen = false;
  /// confirm() answers "not yet" this many more times (then the replies are in).
  int64_t confirm_not_yet = 0;
  /// Hash keys by full key name (`{ns}:meta`, `{ns}:checkpoint:{topic}:{p}`).
  std::map<std::string, core::hash_fields> hashes;
  /// String keys (a wrong type where a hash is expected).
  std::map<std::string, std::string> strings;

  fault version_fault;      ///< ec::redis_unavailable
  fault read_fault;         ///< ec::redis_unavailable
  fault create_meta_fault;  ///< ec::redis_unavailable
  fault write_fault;        ///< ec::redis_unavailable, nothing written
  /// The write is applied, then the reply is lost (ec::redis_unavailable).
  fault write_lost_reply_fault;

  /// Sorted sets by user: conversation -> score.
  std::map<std::string, std::map<std::string, int64_t>> sessions;
  fault apply_fault;  ///< the whole apply fails before writing (redis_unavailable)
  /// apply writes the first `partial_apply_writes` updates, then fails.
  fault partial_apply_fault;
  size_t partial_apply_writes = 1;
  /// Reading the replies of pipelined ZADDs fails (connection lost after
  /// Redis executed them): the data is written, the call reports failure.
  fault confirm_fault;
  /// One ZADD of the next send fails with an error reply (not applied), on a
  /// connection that stays up: its confirm reports ec::redis_reply.
  fault reply_error_fault;
  fault sessions_fault;  ///< session_store::sessions

  /// Redis is unreachable: every call of every store (and the factories of
  /// the Redis stores) fails at once with ec::redis_unavailable; the
  /// connections reset (redis_resets), so unread pipelined ZADDs are lost.
  bool redis_down = false;
  /// Off (the default): send() applies its ZADDs at once.  On: they take
  /// effect when confirm() reads their replies, in send order (a reply read
  /// means Redis executed the command); a connection reset loses the ones
  /// not read yet.
  bool lazy_pipeline = false;
  /// Connection resets so far: redis_down observed by a call, redis_rollback,
  /// shard_failover.  A session store that sees it changed since its last
  /// call drops its unread sends and fails the call ("connection reset").
  uint64_t redis_resets = 0;
  /// The prefix of the session sets' key names (keys(), evict(), shard_of).
  std::string convs_prefix = "convs:";
  /// Writes so far (never decreased by a rollback): one per port call that
  /// wrote (a checkpoint write, a claim, a publish, a release, create_meta,
  /// a copy write) and one per send whose ZADDs took effect.  The test
  /// helpers (put_meta, ...) and direct edits of the maps do not count.
  size_t redis_writes() const;
  /// A failover to a replica that missed the last `n` writes: undoes them,
  /// newest first (the journal keeps the last 100000), and resets the
  /// connections.  Returns how many it undid.
  size_t redis_rollback(size_t n);
  /// Deletes `key` as a maxmemory eviction would (not journaled: not part of
  /// the replicated history): a hash, a string, or a session set
  /// (convs_prefix + user).  Returns whether it existed.
  bool evict(const std::string& key);
  /// Every key name (hashes, strings, session sets), sorted.
  std::vector<std::string> keys() const;

  // -- Redis Cluster mode (docs/DESIGN.md §15) ----------------------------------------

  /// Non-empty shards: the stores are in Redis Cluster mode.  cluster_state()
  /// answers this (copies_marked from meta's core::copies_field); every
  /// copy write sets the positions of every shard whose copy is "valid".
  core::redis_cluster_state cluster;
  /// A MOVED in the middle of a batch: the next send's ZADDs are not applied
  /// at once (the slot moved); its confirm answers "not yet" `moved_not_yet`
  /// times, then the resent commands are applied and their replies read.
  fault moved_fault;
  int64_t moved_not_yet = 2;
  /// Each write_copies / seed_copies call: the positions, and every entry
  /// of the copied partitions below its position whose ZADD was not yet
  /// applied when the copy was written (must stay empty: a copy is written
  /// only after every reply below it was read).
  struct copy_write {
    std::map<int32_t, std::pair<int64_t, int32_t>> positions;
    std::vector<std::string> unapplied;
    bool seed = false;
  };
  std::vector<copy_write> copy_writes;
  /// An ASK in the middle of a batch: like moved_fault, but its confirm
  /// answers "not yet" once (ASKING, then the resend).  Counted in calls.asks.
  fault ask_fault;
  /// Fills `cluster` with `shards` primaries (node ids, addresses, the slots
  /// split evenly, a replid each, one replica, this world's version and
  /// policy, cluster_state ok, no copy).  The namespace is left alone: a
  /// node in Redis Cluster mode wants a hash-tag one ("{...}").
  void make_redis_cluster(int32_t shards);
  /// The index into cluster.shards of the primary serving `key`'s slot
  /// (CRC16, hash tags); -1: none (or not Redis Cluster mode).
  int32_t shard_of(const std::string& key) const;
  /// The primary of `shard` fails over to a replica that missed its last
  /// `n` writes (0: a graceful failover): undoes, newest first, the last `n`
  /// writes that touched its keys (only the parts on its keys; a copy key
  /// write reverts that key; a slot import loses the imported keys).  The
  /// replica becomes the primary with its own node id and address (the old
  /// primary lives on as its replica), replid2 the old replid, replid a new
  /// one (a copy written before stays valid in its history), and a new
  /// configuration epoch, the cluster's largest.  `reset`: the projection's
  /// connections reset (it had commands in flight there); otherwise it
  /// notices only at its next write there (MOVED).  Returns the number of
  /// writes affected.
  size_t shard_failover(int32_t shard, size_t n, bool reset = true);
  /// One copy key (redis/cluster_map.hpp's copy hash), named by its copy
  /// tag (here the decimal of the lowest slot of the primary that wrote it,
  /// which is also the key's slot) and the node id it vouches for.
  struct fake_copy {
    std::string replid;  ///< the history it was written in
    std::string slots;   ///< the primary's slots then
    int64_t cluster_epoch = -1;
    std::map<int32_t, std::pair<int64_t, int32_t>> positions;
    size_t written_at = 0;  ///< redis_writes() when last written
  };
  /// (tag, node id) -> the copy key.  The shard that holds a key is the one
  /// serving its slot.  (Fixtures may instead set a shard's copy,
  /// copy_replid and positions before the first copy operation: they are
  /// then taken as that primary's own key.)
  std::map<std::pair<std::string, std::string>, fake_copy> copy_keys;
  /// A new primary joins: its own node id, no slots, no former history
  /// (replid2 zero), one replica.  Returns its index.
  int32_t add_primary();
  /// Moves the `count` highest slots of `from` (not the namespace's slot)
  /// to `to`, their keys with them (MIGRATE; journaled as one write of
  /// `to`: a later failover of `to` that loses it loses those keys, as a
  /// replica that got the source's DELs but not the RESTOREs).  `to` takes
  /// a new configuration epoch unless it has the largest.  Returns the
  /// number of slots moved.
  int32_t move_slots(int32_t from, int32_t to, int32_t count);
  /// Moves every slot of `shard` to another primary (the next one), then
  /// removes it from the cluster.  False if it is the last one.
  bool remove_primary(int32_t shard);
  /// The primary of `shard` restarts without its data (same node id, a new
  /// replid, no former history): every key in its slots is gone.  False if
  /// it serves the namespace's slot (meta and the checkpoints would go).
  bool shard_restart_empty(int32_t shard);
  /// Whether the primary of `shard` holds its own copy key, written in its
  /// current history after its last slot import: a failover of it then
  /// loses only what that copy lets a start replay.
  bool shard_copy_current(int32_t shard) const;
  /// The shard at `i` as a start reads it (its copy judged as
  /// redis/cluster_stores.cpp does: its own key by its history, else any
  /// key on it by its history, or one elsewhere naming it in its current
  /// history).
  core::shard_report judged_shard(size_t i) const;
  /// WAIT for every replica of every shard (seed_copies does): what was
  /// written so far can no longer be lost by a failover (the journal is
  /// emptied).
  void wait_all_replicas();

  // -- factory -----------------------------------------------------------------

  fault make_inspector_fault;         ///< ec::kafka_unavailable
  fault make_checkpoint_store_fault;  ///< ec::redis_unavailable
  fault make_session_store_fault;     ///< ec::redis_unavailable
  fault make_dispatch_log_fault;      ///< ec::kafka_unavailable

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
  /// Before a guarded write (after the fault checks): a test may claim the
  /// partition for another node here, so this very write is fenced.
  std::function<void(int32_t partition, int64_t next_offset)> before_checkpoint_write;
  /// At the start of a cluster store's publish, with the statuses it is about
  /// to publish (a test may change owner records here: what the node's
  /// claims meanwhile became).
  std::function<void(const std::vector<owned_status>&)> before_publish;
  /// After a successful guarded write.
  std::function<void(int32_t partition, int64_t next_offset)> on_checkpoint_written;
  /// Before an apply (after the fault checks), with a copy of the updates.
  std::function<void(const std::vector<applied_update>&)> on_apply;

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

  // -- Redis helpers -------------------------------------------------------------

  core::identity identity() const;  ///< the broker's current identity
  std::string meta_key() const;
  std::string checkpoint_prefix() const;
  std::string checkpoint_key(int32_t p) const;
  bool has_meta() const;
  /// Stored next_offset of `p` (nullopt: key or field absent or not decimal).
  std::optional<int64_t> checkpoint(int32_t p) const;
  std::map<int32_t, int64_t> checkpoints() const;
  /// Writes meta / a whole checkpoint hash as a run with identity `id` would.
  void put_meta(const core::identity& id);
  void put_checkpoint(const core::identity& id, int32_t p, int64_t next_offset);
  /// Edits only the next_offset field (another writer, an operator).
  void set_next_offset(int32_t p, int64_t next_offset);
  /// The score of `conv` in `user`'s set, if any.
  std::optional<int64_t> score(const std::string& user, const std::string& conv) const;

  /// Every fake_event, in order (the fixture checks the identity fence on it).
  std::vector<fake_event> events;

  /// The clock of status TTLs (ms; the fixture's test clock); none: statuses
  /// never expire.  Expiry times by status key.
  std::function<int64_t()> now_ms;
  std::map<std::string, int64_t> expires_at;
  /// Drops the statuses whose TTL ran out (called by the cluster store).
  void expire_statuses();
  /// The owner record of `p` of `topic` as core::owner_record (absent:
  /// present false), and its key (default: this world's topic).
  core::owner_record owner(const std::string& topic, int32_t p) const;
  std::string owner_key(const std::string& topic, int32_t p) const;
  std::string owner_key(int32_t p) const;

  /// Readers whose data callback fires on appends (see fake_partition_reader).
  std::vector<std::weak_ptr<class fake_partition_reader>> readers;
  /// Fires the data callback of every live reader of `p` (under the lock).
  void wake(int32_t p);
  /// Records a copy write (see copy_writes) and, in Redis Cluster mode,
  /// sets the positions of every valid copy.
  /// `per_node`: a start's copies (node id -> positions), each primary its
  /// own, written in its current history.
  using copy_plan = std::map<std::string, std::map<int32_t, std::pair<int64_t, int32_t>>>;
  void record_copy(const std::map<int32_t, std::pair<int64_t, int32_t>>& positions, bool seed,
                   const copy_plan* per_node = nullptr);

private:
  friend class fake_checkpoint_store;
  friend class fake_session_store;
  friend class fake_cluster_store;
  friend class fake_dispatch_log;
  friend class fake_partition_reader;
  friend class fake_port_factory;

  /// Appends one entry to `p` in its current epoch, stamped with now_ms().
  log_entry& push_entry(int32_t p, std::string value, entry_kind kind, int64_t txn);
  /// ec::redis_unavailable for a call made while redis_down (resets the
  /// connections).
  /// The checks every Redis call makes first, in this order: refused while
  /// Redis is down, the armed fault `f` (if any), then no answer while
  /// frozen (as after the command timeout) unless `frozen_too` is off (a
  /// connect: the kernel accepts while Redis is stopped).
  caf::error redis_gate(const std::string& what, fault* f = nullptr, bool frozen_too = true);
  caf::error redis_refused(const std::string& what);

  // The undo journal.  A port call that writes opens a write (nested calls
  // join it); each mutation first notes what it replaces (once per key and
  // write); a write that noted something is journaled when it closes.
  struct redis_undo {
    enum class kind : uint8_t { key, member, copy, import };
    kind what = kind::key;
    std::string key;     ///< key: the key name; member: the user
    std::string member;  ///< member: the conversation
    std::optional<core::hash_fields> hash;  ///< key: the hash it held
    std::optional<std::string> text;        ///< key: the string it held
    std::optional<int64_t> number;          ///< key: its expiry; member: its score
    std::pair<std::string, std::string> copy_key;  ///< copy: (tag, node)
    std::optional<fake_copy> copy;                 ///< copy: what it held
    std::vector<std::pair<int, int>> slots;        ///< import: the slots moved
  };
  struct redis_write {
    std::vector<redis_undo> undo;
  };
  struct write_scope {
    explicit write_scope(fake_world& w);
    ~write_scope();
    write_scope(const write_scope&) = delete;
    write_scope& operator=(const write_scope&) = delete;
    fake_world& w;
  };
  void note_key(const std::string& key);
  void note_member(const std::string& user, const std::string& conv);
  void note_copy(const std::pair<std::string, std::string>& key);
  /// Takes fixture-set shard copies as copy keys (once).
  void adopt_fixture_copies();
  /// Writes (tag, node) of shard `i` in its current history.
  void put_copy(size_t i, const std::map<int32_t, std::pair<int64_t, int32_t>>& positions);
  /// Mirrors judged_shard() into cluster.shards' copy fields (for tests).
  void sync_copy_views();
  /// A new node id / address for a node that joins or is promoted.
  std::string next_node_id();
  bool fixture_copies_adopted_ = false;
  uint64_t nodes_made_ = 0;
  /// node id -> redis_writes() at its last slot import.
  std::map<std::string, size_t> imported_at_;
  void undo(const redis_undo& u);
  int32_t shard_of(const redis_undo& u) const;
  /// ZADD GT of every member of `ups` (the first `limit`), journaled.
  void zadd(const std::vector<applied_update>& ups, size_t limit = SIZE_MAX);
  /// A copy's verdict on a primary with `replid` and `replid2`: valid in
  /// its history, else foreign.
  static std::string copy_verdict(const fake_copy& c, const core::shard_report& sh);
  std::string next_replid();

  std::deque<redis_write> journal_;
  redis_write open_;
  int write_depth_ = 0;
  std::set<std::string> noted_keys_;
  std::set<std::pair<std::string, std::string>> noted_members_;
  std::set<std::pair<std::string, std::string>> noted_copies_;
  size_t writes_ = 0;
  uint64_t replids_ = 0;

  void maybe_change_identity();
  /// One identity read over time: identity_start, `read` (the answer as of
  /// now), during_identity, then the end event; returns the answer.
  template <class Read>
  caf::expected<broker_state> timed_identity_read(Read read);
  bool in_during_identity_ = false;
  friend class fake_broker_inspector;
};

// -- the fakes -------------------------------------------------------------------

class fake_broker_inspector final : public broker_inspector {
public:
  explicit fake_broker_inspector(std::shared_ptr<fake_world> w) : w_(std::move(w)) {}
  caf::expected<broker_state> inspect(const std::string& topic) override;
  caf::expected<broker_state> identity(const std::string& topic) override;

private:
  std::shared_ptr<fake_world> w_;
};

class fake_checkpoint_store final : public checkpoint_store {
public:
  explicit fake_checkpoint_store(std::shared_ptr<fake_world> w) : w_(std::move(w)) {}
  caf::expected<std::string> server_version() override;
  caf::expected<std::string> maxmemory_policy() override;
  caf::expected<core::stored_state> read(const std::string& topic,
                                         int32_t partition_count) override;
  caf::expected<bool> create_meta(const core::identity& id) override;
  caf::expected<void> write_checkpoint(const core::identity& id, int32_t partition,
                                       int64_t expected, int64_t next_offset,
                                       int32_t leader_epoch = -1,
                                       uint64_t owner_epoch = 0,
                                       const std::string& owner_node = {}) override;
  caf::expected<uint64_t> claim(const std::string& topic, int32_t partition,
                                const std::string& node, int64_t now_ms,
                                uint64_t mine = 0) override;
  caf::expected<core::redis_cluster_state> cluster_state(const std::string& topic) override;
  caf::expected<void> refresh_copies(const core::identity& id,
                                     const core::copy_refresh& plan) override;

private:
  std::shared_ptr<fake_world> w_;
};

class fake_session_store final : public session_store {
public:
  explicit fake_session_store(std::shared_ptr<fake_world> w)
    : w_(std::move(w)), resets_seen_(w_->redis_resets) {
    std::lock_guard<std::recursive_mutex> g{w_->mtx};
    for (auto& sh : w_->cluster.shards)
      replids_.push_back(sh.replid);
  }
  caf::expected<void> apply(const std::vector<session_update>& updates) override;
  caf::expected<void> send(const std::vector<session_update>& updates) override;
  caf::expected<bool> confirm(size_t n, std::chrono::milliseconds wait) override;
  caf::expected<session_list> sessions(const std::string& user, size_t limit) override;
  caf::expected<void>
  write_copies(const core::identity& id,
               const std::map<int32_t, std::pair<int64_t, int32_t>>& positions) override;
  void expect_primaries(const std::map<std::string, core::judged_primary>& judged) override {
    expected_ = judged;
  }

private:
  std::map<std::string, core::judged_primary> expected_;
  /// The primaries' histories when this store was made (it learns the
  /// primaries then, as the real Redis Cluster store does): a copy is
  /// written only to the primaries it learned (redis/cluster_stores.cpp,
  /// failed_over_since).
  std::vector<std::string> replids_;

  /// redis_down, or a connection reset since this store's last call: drops
  /// the unread sends and answers the error; none if the connection is up.
  caf::error connection(const std::string& what);
  /// Lazy pipeline: what a send puts on the wire (counters, faults, hook)
  /// into `held`; a partial failure applies what Redis executed.
  caf::expected<void> enqueue(const std::vector<session_update>& updates,
                              std::vector<applied_update>& held);
  std::shared_ptr<fake_world> w_;
  uint64_t resets_seen_ = 0;
  struct unconfirmed {
    size_t zadds = 0;
    bool error_reply = false;  ///< one of its replies is an error
    /// moved_fault: not applied yet (the resend applies them), and how many
    /// more confirms answer "not yet".
    std::vector<applied_update> held;
    int64_t not_yet = 0;
  };
  std::deque<unconfirmed> unconfirmed_; ///< sends not confirmed yet, oldest first
};

class fake_partition_reader final : public partition_reader {
public:
  /// `start_epoch`: the stored leader epoch of `start` (-1: none), validated
  /// on the first poll; `incarnation`: the topic's (fake_world::topic_incarnation)
  /// when the partition was assigned (-1: now).
  fake_partition_reader(std::shared_ptr<fake_world> w, int32_t partition, int64_t start,
                        int32_t start_epoch = -1, int64_t incarnation = -1);
  caf::expected<void> poll(size_t max, std::vector<log_record>& out, int64_t& passed) override;
  void on_data(std::function<void()> wake) override;
  int32_t position_epoch(int64_t offset) override;
  int64_t position() const { return pos_; }
  int32_t partition() const { return partition_; }
  /// Calls the data callback, if any (the world's lock is held).
  void fire();

private:
  std::function<void()> wake_;
  std::shared_ptr<fake_world> w_;
  int32_t partition_;
  int64_t pos_;
  int64_t eof_reported_ = -1;
  /// The leader epoch of the position: of the last entry read below it, or
  /// the stored epoch it was started with; -1 unknown (not validated).
  int32_t epoch_ = -1;
  uint64_t incarnation_ = 0;
};

class fake_dispatch_log final : public dispatch_log {
public:
  explicit fake_dispatch_log(std::shared_ptr<fake_world> w) : w_(std::move(w)) {}
  caf::expected<void> start(const std::map<int32_t, int64_t>& starts,
                            const std::map<int32_t, int32_t>& epochs = {}) override;
  /// Incremental assignment: the same checks per partition as start().
  caf::expected<void> add(const std::map<int32_t, int64_t>& starts,
                          const std::map<int32_t, int32_t>& epochs = {}) override;
  caf::expected<void> remove(const std::vector<int32_t>& partitions) override;
  /// nullptr before start() or for a partition start() did not assign.
  std::shared_ptr<partition_reader> reader(int32_t partition) override;
  /// The high watermark (end of the log, open transactions included) of an
  /// assigned partition, always current: librdkafka's fetcher keeps its
  /// cached value fresh in the background, whatever the application polls.
  int64_t log_end(int32_t partition) override;
  const std::map<int32_t, int64_t>& starts() const { return starts_; }
  /// The stored leader epochs the last start() was given to validate.
  const std::map<int32_t, int32_t>& epochs() const { return epochs_; }

private:
  /// The [low, high] check of a start (the caller holds the lock).
  caf::error check_start(int32_t p, int64_t start) const;
  /// start() (replace: the assignment becomes `starts`) and add() (the
  /// partitions join it), under the caller's lock.
  caf::expected<void> assign(const std::map<int32_t, int64_t>& starts,
                             const std::map<int32_t, int32_t>& epochs, bool replace);
  std::shared_ptr<fake_world> w_;
  std::map<int32_t, int64_t> starts_;
  std::map<int32_t, int32_t> epochs_;
  std::map<int32_t, uint64_t> incarnations_;  ///< the topic's when assigned
  std::map<int32_t, std::shared_ptr<fake_partition_reader>> readers_;
  std::map<int32_t, int64_t> last_end_;  ///< log_end as last learnt (broker down)
};

/// The cluster store over the world's hashes.  A status expires `ttl` after
/// its publish on the world's clock (fake_world::now_ms; without one, it
/// lives until released or overwritten).
class fake_cluster_store final : public cluster_store {
public:
  explicit fake_cluster_store(std::shared_ptr<fake_world> w) : w_(std::move(w)) {}
  caf::expected<std::vector<owned_status>> publish(const std::string& topic, const std::string& node,
                                              const std::vector<owned_status>& statuses,
                                              std::chrono::milliseconds ttl,
                                              int64_t now_ms) override;
  caf::expected<void> release(const std::string& topic, const std::string& node,
                              const std::map<int32_t, uint64_t>& partitions) override;
  caf::expected<std::vector<cluster_partition>> view(const std::string& topic,
                                                     int32_t partition_count) override;

private:
  std::shared_ptr<fake_world> w_;
};

class fake_port_factory final : public port_factory {
public:
  explicit fake_port_factory(std::shared_ptr<fake_world> w) : w_(std::move(w)) {}
  caf::expected<std::unique_ptr<broker_inspector>> make_inspector() override;
  caf::expected<std::unique_ptr<checkpoint_store>> make_checkpoint_store() override;
  caf::expected<std::unique_ptr<session_store>> make_session_store() override;
  caf::expected<std::shared_ptr<dispatch_log>> make_dispatch_log() override;
  caf::expected<std::unique_ptr<cluster_store>> make_cluster_store() override;
  const std::shared_ptr<fake_world>& world() const { return w_; }

private:
  std::shared_ptr<fake_world> w_;
};

/// A world with `partition_count` empty partitions and a factory over it.
std::shared_ptr<fake_world> make_world(int32_t partition_count);
std::shared_ptr<fake_port_factory> make_fake_ports(std::shared_ptr<fake_world> w);

} // namespace qsp::test
