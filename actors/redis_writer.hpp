// The Redis writer: coalesced, pipelined ZADD GT, every reply verified, then
// the guarded checkpoint write once the identity fence has answered.
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <set>
#include <string_view>
#include <vector>
#include "actors/generation.hpp"
#include "qsession/projection/metrics.hpp"
#include "qsession/projection/settings.hpp"
#include "messages/actors.hpp"
#include "caf/stateful_actor.hpp"
#include "caf/typed_event_based_actor.hpp"
#include "caf/typed_response_promise.hpp"

namespace qsp {

// -- redis writer -------------------------------------------------------------

struct writer_state {
  static inline const char* name = "redis-writer";
  std::shared_ptr<generation> gen;
  std::shared_ptr<session_store> sessions;
  core::identity id;
  /// docs/DESIGN.md §12: the ownership epoch each checkpoint write is fenced with.
  std::map<int32_t, uint64_t> owner_epochs;
  /// The end offset of the last batch sent per partition (-1: no checkpoint
  /// stored yet): batches that add nothing are answered at once.
  std::map<int32_t, int64_t> sent;
  /// The checkpoint stored per partition (-1: absent): the guard of the next
  /// checkpoint write, which only this writer advances.
  std::map<int32_t, int64_t> stored;
  /// A confirm loop (atom::poll to self) is running.
  bool confirming = false;
  /// How long the confirm loop blocks for replies when no write is waiting.
  std::chrono::milliseconds confirm_wait{2};
  /// ... and when none can come either: every consumer has its maximum of
  /// batches unconfirmed, so only these replies move anything.
  std::chrono::milliseconds full_wait{100};
  /// Identity-fence requests sent so far.
  uint64_t fence_requests = 0;
  /// The highest fence request answered so far: a batch whose tag is below
  /// it needs no further check (that check started after it arrived).
  uint64_t fence_answered = 0;
  std::shared_ptr<metrics> stats;
  // Scratch, reused across batches: the coalescing's hash tables and the
  // updates (views into the batch) it hands to the session store.
  // Kept small (24 and 16 bytes): with the tables they are the coalescing's
  // working set, which decides how much of it stays in cache.
  struct user_slot {
    const char* name;
    uint32_t size;
    uint32_t members;  ///< distinct conversations, then the end in `members`
    uint64_t hash;
    std::string_view view() const { return std::string_view{name, size}; }
  };
  struct member_slot {
    uint64_t hash;    ///< of (user, conversation)
    uint32_t user;
    uint32_t record;  ///< the batch's record with the highest score so far
  };
  std::vector<user_slot> users;
  std::vector<member_slot> distinct;
  std::vector<uint64_t> user_table;    ///< open addressing: hash tag | index + 1 into users
  std::vector<uint64_t> member_table;  ///< open addressing: hash tag | index + 1 into distinct
  std::vector<uint64_t> hashes;        ///< per recipient entry: user hash, member hash
  std::vector<session_member> members;
  std::vector<session_update> updates;

  /// A batch from its send to its checkpoint.
  struct in_flight {
    int32_t partition = 0;
    int64_t end_offset = 0;
    int32_t end_epoch = -1;
    uint64_t records = 0;
    uint64_t recipient_writes = 0;
    size_t zadds = 0;
    /// Fence requests sent before this batch arrived: its checkpoint needs
    /// the answer to a later request (a check that started after its fetch).
    uint64_t fence_tag = 0;
    caf::actor_clock::time_point t0;
    caf::typed_response_promise<checkpoint_advanced> rp;
  };
  /// Batches whose ZADDs are sent but not yet confirmed, oldest first.
  std::deque<in_flight> pending;
  /// Batches whose ZADDs are confirmed, waiting for the identity fence.
  std::deque<in_flight> fenced;
  /// flush requests per partition, answered once it has nothing in flight.
  std::multimap<int32_t, caf::typed_response_promise<int64_t>> flushes;
  /// docs/DESIGN.md §12, "Decision — handover": partitions being revoked (no new
  /// batch of theirs is taken), with the requests answered once none of
  /// theirs is in flight; then they are forgotten and unassigned.
  struct revoke_request {
    std::vector<int32_t> partitions;
    caf::typed_response_promise<caf::ok_atom> rp;
  };
  std::set<int32_t> revoking;
  std::vector<revoke_request> revokes;
  /// Adds the partitions of `vs` (their stored checkpoints and owner epochs).
  void add(const verified_start& vs);
  /// True if batches of `p` are taken: an owned partition not being revoked.
  bool takes(int32_t p) const { return sent.count(p) > 0 && revoking.count(p) == 0; }
  /// True if a batch of `p` is pending or waits for the fence.
  bool busy(int32_t p) const;
  /// Coalesces a batch into one update per user (max score per member).
  const std::vector<session_update>& coalesce(const partition_batch& b);
  /// Coalesces and sends the batch's ZADDs without awaiting their replies
  /// and queues it in `pending`; false when the batch carries nothing new.
  /// The caller sets the queued entry's promise.
  caf::expected<bool> send(const partition_batch& b, caf::actor_clock::time_point t0);
  /// Reads the oldest pending batch's ZADD replies (waiting at most `wait`).
  /// False: the replies are not all in yet.  An error means no checkpoint
  /// for it or any later batch.
  caf::expected<bool> confirm_oldest(std::chrono::milliseconds wait);
  /// Writes the checkpoints of every batch in `fenced` whose tag is below
  /// `answered` (one guarded write per partition, to its highest end),
  /// counts them in the metrics and drops them from `fenced`.
  caf::expected<std::vector<checkpoint_advanced>>
  checkpoint_fenced(uint64_t answered, caf::actor_clock::time_point now);
};

writer_actor::behavior_type
redis_writer(writer_actor::stateful_pointer<writer_state> self, projection_settings cfg,
             verified_start vs, std::shared_ptr<generation> gen, aggregator_actor aggregator,
             fence_actor fence, std::shared_ptr<metrics> stats);

} // namespace qsp
