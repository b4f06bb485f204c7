// All value types, atoms and error codes the actors exchange, with their
// inspect() overloads and the project's one CAF type-ID block.  A port to a
// newer CAF rewrites this file and messages/registration.cpp.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "caf/atom.hpp"
#include "caf/error.hpp"
#include "caf/make_message.hpp"
#include "caf/message.hpp"
#include "caf/meta/type_name.hpp"
#include "caf/type_id.hpp"

#include "core/checkpoint.hpp"
#include "core/dispatch.hpp"

namespace qsp {

// -- errors ------------------------------------------------------------------

/// Error codes.  `refusal()` tells the supervisor which ones are final.
enum class ec : uint8_t {
  unspecified = 1,
  // Refusals: fail closed, never retried.
  refused,            ///< checkpoint/identity/range validation failed
  undecodable,        ///< a record the decoder cannot read
  identity_changed,   ///< broker identity changed during startup
  unsupported_redis,  ///< Redis older than 6.2 (no ZADD GT)
  invalid_config,     ///< a setting is missing or malformed (exit 2)
  // Transient: dirty, back off, restart from the checkpoints.
  redis_unavailable,  ///< connect, I/O, timeout
  redis_reply,        ///< an error reply to a data write
  checkpoint_conflict,///< guarded checkpoint write found foreign state
  kafka_unavailable,  ///< broker unreachable, request timed out
  kafka_read,         ///< consumer read error
  not_ready,          ///< PULL_SESSION_LIST while not ready
  shutting_down,
};

std::string to_string(ec x);

/// True for the codes that stop the projection for good (operator must act).
bool is_refusal(ec x);
bool is_refusal(const caf::error& x);

/// The human-readable text carried by an error made with make_error(code, text).
std::string describe(const caf::error& x);

// -- value types -------------------------------------------------------------

/// A contiguous run of records of one partition, handed from a consumer to the
/// writer.  `end_offset` is the next offset not covered: the last record's
/// offset + 1, or a position the consumer provably passed (transaction
/// markers, aborted records) — DESIGN.md §5.
struct partition_batch {
  int32_t partition = 0;
  int64_t begin_offset = 0;
  int64_t end_offset = 0;
  std::vector<core::dispatch> records;
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
  std::map<int32_t, int64_t> h0;
  std::map<int32_t, int64_t> true_high; ///< read_uncommitted high watermark
  int64_t retention_ms = -1; ///< -1: the broker did not say
  bool meta_created = false;
};

/// One partition's progress as the readiness aggregator sees it.
struct partition_status {
  int32_t partition = 0;
  int64_t start = 0;
  int64_t h0 = 0;
  int64_t next_offset = 0;
};

/// A snapshot of the projection for /readyz, /metrics and embedding hosts.
struct projection_status {
  std::string state;  ///< starting|verifying|catching-up|ready|dirty|refused|stopped
  bool ready = false;
  std::vector<partition_status> partitions;
  std::string last_error;
  uint32_t restarts = 0;
  uint64_t records = 0;
  uint64_t recipient_writes = 0;
  uint64_t batches = 0;
  std::map<std::string, uint64_t> failures; ///< by error code name
  std::map<int32_t, int64_t> true_high;
};

/// One entry of a user's session list.
struct session_entry {
  std::string conversation_id;
  int64_t last_active = 0;
};

using session_list = std::vector<session_entry>;

// -- inspect -------------------------------------------------------------------

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, partition_batch& x) {
  return f(caf::meta::type_name("partition_batch"), x.partition, x.begin_offset,
           x.end_offset, x.records, x.bytes);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, checkpoint_advanced& x) {
  return f(caf::meta::type_name("checkpoint_advanced"), x.partition, x.next_offset,
           x.records, x.recipient_writes);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, verified_start& x) {
  return f(caf::meta::type_name("verified_start"), x.id, x.starts, x.checkpoints, x.h0, x.true_high,
           x.retention_ms, x.meta_created);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, partition_status& x) {
  return f(caf::meta::type_name("partition_status"), x.partition, x.start, x.h0,
           x.next_offset);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, projection_status& x) {
  return f(caf::meta::type_name("projection_status"), x.state, x.ready, x.partitions,
           x.last_error, x.restarts, x.records, x.recipient_writes, x.batches,
           x.failures, x.true_high);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, session_entry& x) {
  return f(caf::meta::type_name("session_entry"), x.conversation_id, x.last_active);
}

} // namespace qsp

namespace qsp::core {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, dispatch& x) {
  return f(caf::meta::type_name("dispatch"), x.conversation_id, x.created_at,
           x.recipients);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, identity& x) {
  return f(caf::meta::type_name("identity"), x.topic, x.partition_count, x.cluster_id,
           x.topic_id);
}

} // namespace qsp::core

// -- type IDs and atoms ----------------------------------------------------------

CAF_BEGIN_TYPE_ID_BLOCK(qsp, caf::first_custom_type_id)
  CAF_ADD_TYPE_ID(qsp, (qsp::partition_batch))
  CAF_ADD_TYPE_ID(qsp, (qsp::checkpoint_advanced))
  CAF_ADD_TYPE_ID(qsp, (qsp::verified_start))
  CAF_ADD_TYPE_ID(qsp, (qsp::partition_status))
  CAF_ADD_TYPE_ID(qsp, (qsp::projection_status))
  CAF_ADD_TYPE_ID(qsp, (qsp::session_entry))
  CAF_ADD_TYPE_ID(qsp, (qsp::session_list))
  CAF_ADD_TYPE_ID(qsp, (qsp::core::dispatch))
  CAF_ADD_TYPE_ID(qsp, (qsp::core::identity))
  CAF_ADD_ATOM(qsp, qsp::atom, verify, "verify")
  CAF_ADD_ATOM(qsp, qsp::atom, recheck, "recheck")
  CAF_ADD_ATOM(qsp, qsp::atom, write, "write")
  CAF_ADD_ATOM(qsp, qsp::atom, sessions, "sessions")
  CAF_ADD_ATOM(qsp, qsp::atom, poll, "poll")
  CAF_ADD_ATOM(qsp, qsp::atom, progress, "progress")
  CAF_ADD_ATOM(qsp, qsp::atom, ready, "ready")
  CAF_ADD_ATOM(qsp, qsp::atom, status, "status")
  CAF_ADD_ATOM(qsp, qsp::atom, subscribe, "subscribe")
  CAF_ADD_ATOM(qsp, qsp::atom, restart, "restart")
  CAF_ADD_ATOM(qsp, qsp::atom, pull, "pull")
  CAF_ADD_ATOM(qsp, qsp::atom, shutdown, "shutdown")
  CAF_ADD_ATOM(qsp, qsp::atom, tick, "tick")
  CAF_ADD_ATOM(qsp, qsp::atom, wake, "wake")
  CAF_ADD_ATOM(qsp, qsp::atom, check, "check")
  CAF_ADD_ATOM(qsp, qsp::atom, flush, "flush")
CAF_END_TYPE_ID_BLOCK(qsp)

CAF_ERROR_CODE_ENUM(qsp::ec, "qsp")
