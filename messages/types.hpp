// The projection's internal message types and atoms: the public ones
// (qsession/projection/types.hpp) plus what only its actors exchange, with
// their inspect() overloads and the internal type-ID block, chained right
// after the public one.  A port to a newer CAF rewrites this file, the public
// types header and messages/registration.cpp.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "caf/error.hpp"
#include "caf/message.hpp"
#include "caf/type_id.hpp"

#include "core/checkpoint.hpp"
#include "core/dispatch.hpp"
#include "qsession/projection/types.hpp"

namespace qsp {

// -- internal value types --------------------------------------------------------

/// A contiguous run of records of one partition, handed from a consumer to the
/// writer.  `end_offset` is the next offset not covered: the last record's
/// offset + 1, or a position the consumer provably passed (transaction
/// markers, aborted records) — docs/DESIGN.md §5.
struct partition_batch {
  int32_t partition = 0;
  int64_t begin_offset = 0;
  int64_t end_offset = 0;
  /// The partition leader epoch of the log position end_offset (KIP-320):
  /// stored beside the checkpoint so a later start can prove the log below
  /// it was not truncated.  -1: unknown.
  int32_t end_epoch = -1;
  core::dispatch_batch records;
  uint64_t bytes = 0;
};

/// The writer's confirmation: the checkpoint now stored for `partition`.
struct checkpoint_advanced {
  int32_t partition = 0;
  int64_t next_offset = 0;
  uint64_t records = 0;
  uint64_t recipient_writes = 0;
};

/// What the metadata verifier proved at startup: the explicit start and the
/// target H0 of every partition, and the identity the checkpoints are pinned to.
struct verified_start {
  core::identity id;
  std::map<int32_t, int64_t> starts;
  std::map<int32_t, int64_t> checkpoints; ///< stored next_offset, where one exists
  /// Stored leader epoch of the checkpoint (KIP-320), where known: the
  /// consumer validates its start position against the broker with it.
  std::map<int32_t, int32_t> epochs;
  std::map<int32_t, int64_t> h0;
  std::map<int32_t, int64_t> true_high; ///< read_uncommitted high watermark
  int64_t retention_ms = -1; ///< -1: the broker did not say
  bool meta_created = false;
  /// docs/DESIGN.md §12: the ownership epoch of every partition this generation
  /// owns (clustered modes); its checkpoint writes are fenced with it.
  std::map<int32_t, uint64_t> owner_epochs;
};

/// What an owner publishes per owned partition (docs/DESIGN.md §12).
struct owned_status {
  int32_t partition = 0;
  uint64_t epoch = 0;
  std::string state;       ///< the node's state (catching-up, ready, dirty, ...)
  int64_t h0 = -1;         ///< the H0 taken when it got the partition (-1: not yet)
  int64_t next_offset = -1;
  bool caught_up = false;
};

/// One cluster heartbeat's outcome: the statuses it could not publish, each
/// with the epoch it tried and, as its state, "fenced" (another node owns
/// the partition) or "lost" (the claim is gone from Redis); and the
/// namespace's view (or why there is none).
struct cluster_report {
  std::vector<owned_status> fenced;
  std::vector<cluster_partition> view;
  std::string error;  ///< "" when the view was read
};

// -- inspect -------------------------------------------------------------------

template <class Inspector>
auto inspect(Inspector& f, partition_batch& x) {
  return inspect_object(f, x, "qsp.partition_batch",
                        QSP_FIELD(x, partition),
                        QSP_FIELD(x, begin_offset),
                        QSP_FIELD(x, end_offset),
                        QSP_FIELD(x, end_epoch),
                        QSP_FIELD(x, records),
                        QSP_FIELD(x, bytes));
}

template <class Inspector>
auto inspect(Inspector& f, checkpoint_advanced& x) {
  return inspect_object(f, x, "qsp.checkpoint_advanced",
                        QSP_FIELD(x, partition),
                        QSP_FIELD(x, next_offset),
                        QSP_FIELD(x, records),
                        QSP_FIELD(x, recipient_writes));
}

template <class Inspector>
auto inspect(Inspector& f, verified_start& x) {
  return inspect_object(f, x, "qsp.verified_start",
                        QSP_FIELD(x, id),
                        QSP_FIELD(x, starts),
                        QSP_FIELD(x, checkpoints),
                        QSP_FIELD(x, epochs),
                        QSP_FIELD(x, h0),
                        QSP_FIELD(x, true_high),
                        QSP_FIELD(x, retention_ms),
                        QSP_FIELD(x, meta_created),
                        QSP_FIELD(x, owner_epochs));
}

template <class Inspector>
auto inspect(Inspector& f, owned_status& x) {
  return inspect_object(f, x, "qsp.owned_status",
                        QSP_FIELD(x, partition),
                        QSP_FIELD(x, epoch),
                        QSP_FIELD(x, state),
                        QSP_FIELD(x, h0),
                        QSP_FIELD(x, next_offset),
                        QSP_FIELD(x, caught_up));
}

template <class Inspector>
auto inspect(Inspector& f, cluster_report& x) {
  return inspect_object(f, x, "qsp.cluster_report",
                        QSP_FIELD(x, fenced),
                        QSP_FIELD(x, view),
                        QSP_FIELD(x, error));
}

} // namespace qsp

namespace qsp::core {

template <class Inspector>
auto inspect(Inspector& f, dispatch& x) {
  return inspect_object(f, x, "qsp.dispatch",
                        QSP_FIELD(x, conversation_id),
                        QSP_FIELD(x, created_at),
                        QSP_FIELD(x, recipients));
}

template <class Inspector>
auto inspect(Inspector& f, dispatch_batch::text_ref& x) {
  return inspect_object(f, x, "qsp.text_ref",
                        QSP_FIELD(x, offset),
                        QSP_FIELD(x, size));
}

template <class Inspector>
auto inspect(Inspector& f, dispatch_batch::record& x) {
  return inspect_object(f, x, "qsp.dispatch_ref",
                        QSP_FIELD(x, conversation_id),
                        QSP_FIELD(x, created_at),
                        QSP_FIELD(x, first_recipient),
                        QSP_FIELD(x, recipient_count));
}

template <class Inspector>
auto inspect(Inspector& f, dispatch_batch& x) {
  return inspect_object(f, x, "qsp.dispatch_batch",
                        QSP_FIELD(x, text),
                        QSP_FIELD(x, records),
                        QSP_FIELD(x, recipients));
}

template <class Inspector>
auto inspect(Inspector& f, identity& x) {
  return inspect_object(f, x, "qsp.identity",
                        QSP_FIELD(x, topic),
                        QSP_FIELD(x, partition_count),
                        QSP_FIELD(x, cluster_id),
                        QSP_FIELD(x, topic_id));
}

} // namespace qsp::core

// -- the internal type-ID block -------------------------------------------------

CAF_BEGIN_TYPE_ID_BLOCK(qsp_internal, caf::id_block::qsp_handles::end)
  CAF_ADD_TYPE_ID(qsp_internal, (qsp::partition_batch))
  CAF_ADD_TYPE_ID(qsp_internal, (qsp::checkpoint_advanced))
  CAF_ADD_TYPE_ID(qsp_internal, (qsp::verified_start))
  CAF_ADD_TYPE_ID(qsp_internal, (qsp::core::dispatch))
  CAF_ADD_TYPE_ID(qsp_internal, (qsp::core::identity))
  CAF_ADD_TYPE_ID(qsp_internal, (qsp::owned_status))
  CAF_ADD_TYPE_ID(qsp_internal, (std::vector<qsp::owned_status>))
  CAF_ADD_TYPE_ID(qsp_internal, (qsp::cluster_report))
  CAF_ADD_ATOM(qsp_internal, qsp::atom, verify, "qsp_verify")
  CAF_ADD_ATOM(qsp_internal, qsp::atom, write, "qsp_write")
  CAF_ADD_ATOM(qsp_internal, qsp::atom, sessions, "qsp_sessns")
  CAF_ADD_ATOM(qsp_internal, qsp::atom, poll, "qsp_poll")
  CAF_ADD_ATOM(qsp_internal, qsp::atom, progress, "qsp_prog")
  CAF_ADD_ATOM(qsp_internal, qsp::atom, ready, "qsp_ready")
  CAF_ADD_ATOM(qsp_internal, qsp::atom, restart, "qsp_restrt")
  CAF_ADD_ATOM(qsp_internal, qsp::atom, tick, "qsp_tick")
  CAF_ADD_ATOM(qsp_internal, qsp::atom, wake, "qsp_wake")
  CAF_ADD_ATOM(qsp_internal, qsp::atom, check, "qsp_check")
  CAF_ADD_ATOM(qsp_internal, qsp::atom, flush, "qsp_flush")
  CAF_ADD_ATOM(qsp_internal, qsp::atom, heartbeat, "qsp_hbeat")
  CAF_ADD_ATOM(qsp_internal, qsp::atom, repeat, "qsp_repeat")
CAF_END_TYPE_ID_BLOCK(qsp_internal)
