// The partition consumer: polls one partition, decodes, and hands bounded
// batches to the writer.
#pragma once

#include <memory>
#include <string>
#include <vector>
#include "qsession/projection/settings.hpp"
#include "core/dispatch.hpp"
#include "messages/actors.hpp"
#include "actors/gap_audit.hpp"
#include "ports/ports.hpp"
#include "caf/stateful_actor.hpp"
#include "caf/typed_event_based_actor.hpp"

namespace qsp {

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
  /// The reader's contract (qsession/projection/reader.hpp), checked on
  /// every record: the last offset and leader epoch delivered (at first:
  /// start - 1 and the checkpoint's stored epoch, -1 if none).
  int64_t last_offset = -1;
  int32_t last_epoch = -1;
  /// With a host's reader: the audit of the offsets it left out.
  std::shared_ptr<gap_auditor> audit;
  caf::error poison;         ///< an undecodable record after the current batch
  bool stopping = false;     ///< stopping at the poison record (flush asked)
  /// Sizes of the last non-empty batch's arena, to reserve the next one's.
  struct {
    size_t text = 0, records = 0, recipients = 0;
  } arena_hint;

  /// Reads and decodes what is there.  Returns an empty batch if nothing new.
  caf::expected<partition_batch> next_batch(const projection_settings& cfg);
};

consumer_actor::behavior_type
partition_consumer(consumer_actor::stateful_pointer<consumer_state> self, projection_settings cfg,
                   int32_t partition, int64_t start, int32_t start_epoch,
                   std::shared_ptr<partition_reader> reader,
                   std::shared_ptr<const core::decoder> decoder, writer_actor writer,
                   std::shared_ptr<gap_auditor> audit = nullptr);

} // namespace qsp
