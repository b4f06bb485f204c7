// The behaviours of the supervisor's children.  Each is a stateful typed actor
// written as a function; the logic that tests call without an actor system
// lives in state methods or in core/.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/metrics.hpp"
#include "actors/settings.hpp"
#include "core/dispatch.hpp"
#include "caf/stateful_actor.hpp"
#include "caf/typed_event_based_actor.hpp"

#include "messages/actors.hpp"
#include "ports/ports.hpp"

namespace qsp {

/// What one generation (one run of the startup sequence) hands from the
/// verifier to the writer: the single checkpoint connection and the consumer.
/// Filled by the verifier, used by the writer only after the verifier answered.
struct generation {
  std::shared_ptr<port_factory> ports;
  std::unique_ptr<checkpoint_store> checkpoints;
  std::shared_ptr<dispatch_log> log;
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

// -- redis writer -------------------------------------------------------------

struct writer_state {
  static inline const char* name = "redis-writer";
  std::shared_ptr<generation> gen;
  std::unique_ptr<session_store> sessions;
  core::identity id;
  /// The next_offset this writer last stored per partition (-1: absent).
  std::map<int32_t, int64_t> written;
  std::shared_ptr<metrics> stats;
  // Scratch, reused across batches.
  std::unordered_map<std::string, std::unordered_map<std::string, int64_t>> by_user;
  std::vector<session_update> updates;

  /// Coalesces a batch into one update per user (max score per member).
  const std::vector<session_update>& coalesce(const partition_batch& b);
  /// ZADDs, then the guarded checkpoint write; an error means no checkpoint.
  caf::expected<checkpoint_advanced> write(const partition_batch& b);
};

writer_actor::behavior_type
redis_writer(writer_actor::stateful_pointer<writer_state> self, verified_start vs,
             std::shared_ptr<generation> gen, aggregator_actor aggregator,
             std::shared_ptr<metrics> stats);

// -- partition consumer -------------------------------------------------------

struct consumer_state {
  static inline const char* name = "partition-consumer";
  std::shared_ptr<partition_reader> reader;
  std::shared_ptr<const core::decoder> decoder;
  std::string topic;
  int32_t partition = 0;
  int64_t next = 0;          ///< next offset not yet confirmed by the writer
  bool in_flight = false;
  caf::error poison;         ///< an undecodable record after the current batch
  std::vector<log_record> buf;

  /// Reads and decodes what is there.  Returns an empty batch if nothing new.
  caf::expected<partition_batch> next_batch(const projection_settings& cfg);
};

consumer_actor::behavior_type
partition_consumer(consumer_actor::stateful_pointer<consumer_state> self, projection_settings cfg,
                   int32_t partition, int64_t start, std::shared_ptr<partition_reader> reader,
                   std::shared_ptr<const core::decoder> decoder, writer_actor writer);

} // namespace qsp
