// The projection's public value types, error codes and atoms, with their
// inspect() overloads and the public CAF type-ID block (`qsp`, starting at
// QSP_FIRST_TYPE_ID).  Internal messages live in a second block chained
// after this one (messages/types.hpp).
//
// Atom texts carry the `qsp_` prefix: in CAF 0.17 equal atom text means the
// same atom, so a host's own `status` atom stays distinct.
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
#include <optional>

#include "caf/type_id.hpp"

#include "qsession/projection/caf_compat.hpp"
#include "qsession/projection/config.hpp"

namespace qsp {

// -- errors ------------------------------------------------------------------

/// Error codes (category "qsp").  `is_refusal()` tells which ones are final.
enum class ec : uint8_t {
  unspecified = 1,
  // Refusals: fail closed, never retried.
  refused,            ///< checkpoint/identity/range validation failed
  undecodable,        ///< a record the decoder cannot read
  identity_changed,   ///< broker identity changed (at startup or while running)
  unsupported_redis,  ///< Redis older than 6.2 (no ZADD GT)
  invalid_config,     ///< a setting is missing or malformed, credentials refused
  // Transient: dirty, back off, restart from the checkpoints.
  redis_unavailable,  ///< connect, I/O, timeout
  redis_reply,        ///< an error reply to a data write
  checkpoint_conflict,///< guarded checkpoint write found foreign state
  kafka_unavailable,  ///< broker unreachable, request timed out
  kafka_read,         ///< consumer read error
  not_ready,          ///< PULL_SESSION_LIST while not ready
  shutting_down,      ///< the projection is stopping (or did not stop in time)
  fenced,             ///< another owner claimed the partition (a newer epoch, docs/DESIGN.md §12)
};

std::string to_string(ec x);

/// True for the codes that stop the projection for good (operator must act).
bool is_refusal(ec x);
bool is_refusal(const caf::error& x);

/// The qsp code of an error made with make_error(ec, ...); none for an
/// error of another category (CAF's own, a host's) or no error.
std::optional<ec> code_of(const caf::error& x);

/// "code: text" for an error made with make_error(code, text) (or with
/// more context after the text, like make_fenced's); CAF's own rendering
/// for errors of other categories.
std::string describe(const caf::error& x);

/// ec::fenced for `partition`: `text` is the message, the partition rides
/// along as a typed field (fenced_partition), not only inside the text.
caf::error make_fenced(int32_t partition, std::string text);

/// The partition of an error made by make_fenced; none for any other error.
std::optional<int32_t> fenced_partition(const caf::error& x);

// -- value types -------------------------------------------------------------

/// One partition's progress: checkpoint (`next_offset`) against this start's
/// target H0, and against the live end of the log.
struct partition_status {
  int32_t partition = 0;
  int64_t start = 0;
  int64_t h0 = 0;
  int64_t next_offset = 0;
  /// The end of the partition's log as the consumer last saw it: the high
  /// watermark librdkafka cached from its latest fetch response (never a
  /// request of its own), and at least H0.  Records of a transaction that is
  /// still open count (they are in the log, not yet readable).
  int64_t log_end = 0;
  /// max(0, log_end - next_offset): what the projection has not written yet.
  int64_t live_lag = 0;
  /// Milliseconds since `next_offset` last advanced while there is live lag;
  /// 0 while live_lag is 0 (nothing to do).  Counted from the later of the
  /// last advance and the last time the partition was seen with nothing to do.
  int64_t progress_age_ms = 0;
};

/// A snapshot of one projection, pushed to subscribers on every change of
/// state and answered to `status`.  `topic` and `ns` name the projection, so
/// a host running several can tell their pushes apart.
/// One partition in the namespace-wide view (docs/DESIGN.md §12): its owner
/// record and the owner's published status.
struct cluster_partition {
  int32_t partition = 0;
  std::string owner;       ///< the owner record's node ("" : none)
  uint64_t epoch = 0;      ///< the owner record's epoch
  int64_t heartbeat_ms = 0; ///< the owner's last heartbeat (Unix ms; 0: none)
  bool live = false;       ///< a status of the current owner (same epoch) within its TTL
  std::string state;       ///< that status' state ("" without one)
  int64_t h0 = -1;         ///< the H0 the owner took when it got the partition
  int64_t next_offset = -1;
  bool caught_up = false;  ///< the owner reached that H0
  bool ready = false;      ///< live, caught up and not dirty
  std::string why;         ///< what holds it closed ("" when ready)
};

struct projection_status {
  std::string topic;
  std::string ns;
  std::string state;  ///< starting|verifying|catching-up|ready|dirty|refused|stopped
  bool ready = false;
  std::vector<partition_status> partitions;
  std::string last_error;  ///< the error of the last failure ("" if none yet)
  uint32_t restarts = 0;
  uint64_t records = 0;
  uint64_t recipient_writes = 0;
  uint64_t batches = 0;
  std::map<std::string, uint64_t> failures; ///< by error code name
  std::map<int32_t, int64_t> true_high;
  std::string ownership = "all";  ///< projection.ownership
  std::string node;               ///< projection.node-id (clustered modes)
  std::vector<int32_t> owned;     ///< the partitions this node owns now
  /// Clustered modes: the namespace's readiness from the last heartbeat
  /// (`ready` is this and the local state being "ready"); with `all`,
  /// the same as ready.
  bool namespace_ready = false;
  std::vector<cluster_partition> cluster;  ///< clustered modes: every partition
};

/// One entry of a user's session list.
struct session_entry {
  std::string conversation_id;
  int64_t last_active = 0;
};

using session_list = std::vector<session_entry>;

// -- inspect -------------------------------------------------------------------

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, partition_status& x) {
  return f(caf::meta::type_name("qsp.partition_status"), x.partition, x.start, x.h0,
           x.next_offset, x.log_end, x.live_lag, x.progress_age_ms);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, cluster_partition& x) {
  return f(caf::meta::type_name("qsp.cluster_partition"), x.partition, x.owner, x.epoch, x.heartbeat_ms, x.live,
           x.state, x.h0, x.next_offset, x.caught_up, x.ready, x.why);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, projection_status& x) {
  return f(caf::meta::type_name("qsp.projection_status"), x.topic, x.ns, x.state, x.ready,
           x.partitions, x.last_error, x.restarts, x.records, x.recipient_writes, x.batches,
           x.failures, x.true_high, x.ownership, x.node, x.owned, x.namespace_ready, x.cluster);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, session_entry& x) {
  return f(caf::meta::type_name("qsp.session_entry"), x.conversation_id, x.last_active);
}

} // namespace qsp

// -- the public type-ID block ---------------------------------------------------

CAF_BEGIN_TYPE_ID_BLOCK(qsp, QSP_FIRST_TYPE_ID)
  CAF_ADD_TYPE_ID(qsp, (qsp::partition_status))
  CAF_ADD_TYPE_ID(qsp, (qsp::projection_status))
  CAF_ADD_TYPE_ID(qsp, (qsp::session_entry))
  CAF_ADD_TYPE_ID(qsp, (qsp::session_list))
  CAF_ADD_TYPE_ID(qsp, (qsp::cluster_partition))
  CAF_ADD_TYPE_ID(qsp, (std::vector<qsp::cluster_partition>))
  CAF_ADD_TYPE_ID(qsp, (std::vector<int32_t>))
  CAF_ADD_ATOM(qsp, qsp::atom, status, "qsp_status")
  CAF_ADD_ATOM(qsp, qsp::atom, pull, "qsp_pull")
  CAF_ADD_ATOM(qsp, qsp::atom, subscribe, "qsp_sub")
  CAF_ADD_ATOM(qsp, qsp::atom, unsubscribe, "qsp_unsub")
  CAF_ADD_ATOM(qsp, qsp::atom, shutdown, "qsp_stop")
  CAF_ADD_ATOM(qsp, qsp::atom, assign, "qsp_assign")
  CAF_ADD_ATOM(qsp, qsp::atom, revoke, "qsp_revoke")
CAF_END_TYPE_ID_BLOCK(qsp)

QSP_ERROR_CODE_ENUM(qsp::ec, "qsp")
