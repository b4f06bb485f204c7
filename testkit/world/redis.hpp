// A simulated standalone Redis: hashes, strings and the session sorted
// sets, with the faults that break them (down, frozen, failed or lost
// replies, partial pipelines), a rollback to a replica that missed the last
// writes, and maxmemory eviction.  Its ports are in redis_stores.hpp; Redis
// Cluster mode (redis_cluster.hpp) shards this keyspace.
//
// Fidelity notes:
// - Redis can be frozen (redis_frozen): pipelined replies never arrive
//   ("not yet" forever) and every blocking call fails as after its timeout.
//   A single ZADD reply can fail (reply_error_fault) on a live connection.
// - Redis can be down (redis_down: every call is refused at once).  With
//   lazy_pipeline, pipelined ZADDs take effect when their replies are read
//   (confirm), and a connection reset (redis_resets) loses the unread ones.
//   Every Redis write is journaled, so that a failover to a replica that
//   missed the last writes (redis_rollback, shard_failover) can undo them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/checkpoint.hpp"
#include "testkit/world/common.hpp"
#include "testkit/world/redis_cluster.hpp"

namespace qsp::test {

/// What one write replaced in one key, so that a rollback can restore it.
struct redis_undo {
  enum class kind : uint8_t { key, member, copy, import };
  kind what = kind::key;
  std::string key;     ///< key: the key name; member: the user
  std::string member;  ///< member: the conversation
  std::optional<core::hash_fields> hash;  ///< key: the hash it held
  std::optional<std::string> text;        ///< key: the string it held
  std::optional<int64_t> number;          ///< key: its expiry; member: its score
  std::pair<std::string, std::string> copy_key;  ///< copy: (tag, node)
  std::optional<simulated_redis_cluster::fake_copy> copy;  ///< copy: what it held
  std::vector<std::pair<int, int>> slots;        ///< import: the slots moved
};

/// The Redis room of the world.
struct simulated_redis : virtual world_core {
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

  /// Expiry times (now_ms) by key: the status keys' TTLs.
  std::map<std::string, int64_t> expires_at;
  /// The score of `conv` in `user`'s set, if any.
  std::optional<int64_t> score(const std::string& user, const std::string& conv) const;

  fault make_checkpoint_store_fault;  ///< ec::redis_unavailable
  fault make_session_store_fault;     ///< ec::redis_unavailable

  // -- hooks (run under the lock, inside the port call) --------------------------

  /// Before a guarded write (after the fault checks): a test may claim the
  /// partition for another node here, so this very write is fenced.
  std::function<void(int32_t partition, int64_t next_offset)> before_checkpoint_write;
  /// After a successful guarded write.
  std::function<void(int32_t partition, int64_t next_offset)> on_checkpoint_written;
  /// Before an apply (after the fault checks), with a copy of the updates.
  std::function<void(const std::vector<applied_update>&)> on_apply;

private:
  friend class fake_checkpoint_store;
  friend class fake_session_store;
  friend class fake_cluster_store;
  friend class fake_port_factory;
  friend struct simulated_redis_cluster;
  friend struct simulated_ownership;

  fake_world& world();
  /// The checks every Redis call makes first, in this order: refused while
  /// Redis is down, the armed fault `f` (if any), then no answer while
  /// frozen (as after the command timeout) unless `frozen_too` is off (a
  /// connect: the kernel accepts while Redis is stopped).
  caf::error redis_gate(const std::string& what, fault* f = nullptr, bool frozen_too = true);
  /// ec::redis_unavailable for a call made while redis_down (resets the
  /// connections).
  caf::error redis_refused(const std::string& what);

  // The undo journal.  A port call that writes opens a write (nested calls
  // join it); each mutation first notes what it replaces (once per key and
  // write); a write that noted something is journaled when it closes.
  struct redis_write {
    std::vector<redis_undo> undo;
  };
  struct write_scope {
    explicit write_scope(simulated_redis& w);
    ~write_scope();
    write_scope(const write_scope&) = delete;
    write_scope& operator=(const write_scope&) = delete;
    simulated_redis& w;
  };
  void note_key(const std::string& key);
  void note_member(const std::string& user, const std::string& conv);
  void undo(const redis_undo& u);
  /// ZADD GT of every member of `ups` (the first `limit`), journaled.
  void zadd(const std::vector<applied_update>& ups, size_t limit = SIZE_MAX);

  std::deque<redis_write> journal_;
  redis_write open_;
  int write_depth_ = 0;
  std::set<std::string> noted_keys_;
  std::set<std::pair<std::string, std::string>> noted_members_;
  std::set<std::pair<std::string, std::string>> noted_copies_;  ///< simulated_redis_cluster's
  size_t writes_ = 0;
};

} // namespace qsp::test
