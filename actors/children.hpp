// The behaviours of the supervisor's children.  Each is a stateful typed actor
// written as a function; the logic that tests call without an actor system
// lives in state methods or in core/.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/metrics.hpp"
#include "actors/settings.hpp"
#include "core/dispatch.hpp"
#include "caf/stateful_actor.hpp"
#include "caf/typed_event_based_actor.hpp"
#include "caf/typed_response_promise.hpp"

#include "messages/actors.hpp"
#include "ports/ports.hpp"

namespace qsp {

/// What one generation (one run of the startup sequence) hands from the
/// verifier to the writer: the single checkpoint connection and the consumer.
/// Filled by the verifier, used by the writer only after the verifier answered.
/// Also the generation's kill switch: abort() interrupts every blocking Redis
/// call of its actors, from any thread (the supervisor calls it whenever the
/// generation ends, so no detached child stays blocked in I/O).
struct generation {
  std::shared_ptr<port_factory> ports;
  std::shared_ptr<checkpoint_store> checkpoints;
  std::shared_ptr<dispatch_log> log;
  /// The verifier's broker inspector, then the identity fence's.
  std::shared_ptr<broker_inspector> broker;

  /// Interrupts every tracked store now and every store tracked later.
  void abort();
  bool aborted() const;
  /// Registers a store for abort() (interrupted at once if already aborted).
  template <class Store>
  void track(const std::shared_ptr<Store>& store) {
    std::weak_ptr<Store> weak = store;
    add_hook([weak] {
      if (auto s = weak.lock())
        s->interrupt();
    });
  }

private:
  void add_hook(std::function<void()> hook);
  mutable std::mutex mtx_;
  bool aborted_ = false;
  std::vector<std::function<void()>> hooks_;
};

// -- metadata verifier --------------------------------------------------------

struct verifier_state {
  static inline const char* name = "metadata-verifier";
  caf::expected<verified_start> run(const projection_settings& cfg, generation& gen);
};

verifier_actor::behavior_type
metadata_verifier(verifier_actor::stateful_pointer<verifier_state> self, projection_settings cfg,
                  std::shared_ptr<generation> gen);

// -- readiness aggregator -----------------------------------------------------

struct aggregator_state {
  static inline const char* name = "readiness-aggregator";
  std::map<int32_t, partition_status> parts;
  bool announced = false;
  int64_t remaining_at_tick = 0;
  bool ready() const;
  int64_t remaining() const;
  /// Records a checkpoint; returns false if it would move backwards.
  bool advance(const checkpoint_advanced& cp);
};

aggregator_actor::behavior_type
readiness_aggregator(aggregator_actor::stateful_pointer<aggregator_state> self,
                     projection_settings cfg, verified_start vs, projection_actor supervisor);

// -- identity fence -----------------------------------------------------------

struct fence_state {
  static inline const char* name = "identity-fence";
  core::identity pinned;
  uint64_t checks = 0;  ///< sequence number of the last check started
  caf::actor_clock::time_point last_start;
  bool delayed = false; ///< an atom::poll to self is queued
  std::vector<caf::typed_response_promise<uint64_t>> waiting;
  /// One check against the broker: the sequence number on a match, a
  /// refusal naming the field on a change, the error when unanswered.
  caf::expected<uint64_t> check(const projection_settings& cfg, generation& gen);
};

fence_actor::behavior_type identity_fence(fence_actor::stateful_pointer<fence_state> self,
                                          projection_settings cfg, core::identity pinned,
                                          std::shared_ptr<generation> gen,
                                          std::shared_ptr<metrics> stats);

// -- session reader -----------------------------------------------------------

struct reader_state {
  static inline const char* name = "session-reader";
  std::shared_ptr<session_store> sessions;
};

reader_actor::behavior_type session_reader(reader_actor::stateful_pointer<reader_state> self,
                                           std::shared_ptr<generation> gen);

// -- redis writer -------------------------------------------------------------

struct writer_state {
  static inline const char* name = "redis-writer";
  std::shared_ptr<generation> gen;
  std::shared_ptr<session_store> sessions;
  core::identity id;
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
  /// Identity-fence requests sent so far.
  uint64_t fence_requests = 0;
  std::shared_ptr<metrics> stats;
  // Scratch, reused across batches.
  struct member_ref {
    uint64_t user_hash, conv_hash;
    std::string_view user, conv;
    int64_t score;
  };
  std::vector<member_ref> refs;
  std::vector<session_member> members;
  std::vector<session_update> updates;

  /// A batch from its send to its checkpoint.
  struct in_flight {
    int32_t partition = 0;
    int64_t end_offset = 0;
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

// -- partition consumer -------------------------------------------------------

struct consumer_state {
  static inline const char* name = "partition-consumer";
  std::shared_ptr<partition_reader> reader;
  std::shared_ptr<const core::decoder> decoder;
  std::string topic;
  int32_t partition = 0;
  int64_t sent_end = 0;      ///< next offset not yet sent to the writer
  size_t in_flight = 0;      ///< batches sent, not yet confirmed
  bool poll_queued = false;  ///< an atom::poll to self is queued
  bool tick_queued = false;  ///< the idle timer (atom::tick) is running
  caf::error poison;         ///< an undecodable record after the current batch
  bool stopping = false;     ///< stopping at the poison record (flush asked)
  std::vector<log_record> buf;

  /// Reads and decodes what is there.  Returns an empty batch if nothing new.
  caf::expected<partition_batch> next_batch(const projection_settings& cfg);
};

consumer_actor::behavior_type
partition_consumer(consumer_actor::stateful_pointer<consumer_state> self, projection_settings cfg,
                   int32_t partition, int64_t start, std::shared_ptr<partition_reader> reader,
                   std::shared_ptr<const core::decoder> decoder, writer_actor writer);

} // namespace qsp
