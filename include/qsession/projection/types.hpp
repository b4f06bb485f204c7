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
#include <string_view>
#include <type_traits>
#include <vector>

#include "caf/error.hpp"
#include "caf/message.hpp"
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
bool from_string(std::string_view text, ec& x);
bool from_integer(std::underlying_type_t<ec> value, ec& x);
QSP_ENUM_INSPECT(ec)

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
auto inspect(Inspector& f, partition_status& x) {
  return inspect_object(f, x, "qsp.partition_status",
                        QSP_FIELD(x, partition),
                        QSP_FIELD(x, start),
                        QSP_FIELD(x, h0),
                        QSP_FIELD(x, next_offset),
                        QSP_FIELD(x, log_end),
                        QSP_FIELD(x, live_lag),
                        QSP_FIELD(x, progress_age_ms));
}

template <class Inspector>
auto inspect(Inspector& f, cluster_partition& x) {
  return inspect_object(f, x, "qsp.cluster_partition",
                        QSP_FIELD(x, partition),
                        QSP_FIELD(x, owner),
                        QSP_FIELD(x, epoch),
                        QSP_FIELD(x, heartbeat_ms),
                        QSP_FIELD(x, live),
                        QSP_FIELD(x, state),
                        QSP_FIELD(x, h0),
                        QSP_FIELD(x, next_offset),
                        QSP_FIELD(x, caught_up),
                        QSP_FIELD(x, ready),
                        QSP_FIELD(x, why));
}

template <class Inspector>
auto inspect(Inspector& f, projection_status& x) {
  return inspect_object(f, x, "qsp.projection_status",
                        QSP_FIELD(x, topic),
                        QSP_FIELD(x, ns),
                        QSP_FIELD(x, state),
                        QSP_FIELD(x, ready),
                        QSP_FIELD(x, partitions),
                        QSP_FIELD(x, last_error),
                        QSP_FIELD(x, restarts),
                        QSP_FIELD(x, records),
                        QSP_FIELD(x, recipient_writes),
                        QSP_FIELD(x, batches),
                        QSP_FIELD(x, failures),
                        QSP_FIELD(x, true_high),
                        QSP_FIELD(x, ownership),
                        QSP_FIELD(x, node),
                        QSP_FIELD(x, owned),
                        QSP_FIELD(x, namespace_ready),
                        QSP_FIELD(x, cluster));
}

template <class Inspector>
auto inspect(Inspector& f, session_entry& x) {
  return inspect_object(f, x, "qsp.session_entry",
                        QSP_FIELD(x, conversation_id),
                        QSP_FIELD(x, last_active));
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
  CAF_ADD_TYPE_ID(qsp, (qsp::ec))
  CAF_ADD_TYPE_ID(qsp, (std::vector<qsp::partition_status>))
  CAF_ADD_ATOM(qsp, qsp::atom, status, "qsp_status")
  CAF_ADD_ATOM(qsp, qsp::atom, pull, "qsp_pull")
  CAF_ADD_ATOM(qsp, qsp::atom, subscribe, "qsp_sub")
  CAF_ADD_ATOM(qsp, qsp::atom, unsubscribe, "qsp_unsub")
  CAF_ADD_ATOM(qsp, qsp::atom, shutdown, "qsp_stop")
  CAF_ADD_ATOM(qsp, qsp::atom, assign, "qsp_assign")
  CAF_ADD_ATOM(qsp, qsp::atom, revoke, "qsp_revoke")
CAF_END_TYPE_ID_BLOCK(qsp)

namespace qsp {

/// What a subscriber receives: (atom::status, projection_status) on every
/// change of state, and once right after it subscribed.  The sender is the
/// projection; the status names its topic and namespace.
using status_listener = qsp::typed_actor<caf::result<void>(atom::status, projection_status)>;

/// The projection's public handle (qsession/projection/projection.hpp says
/// what each message does).  Declared here for its type ID: a host sends it
/// in its own messages as it is (a front re-bound after a restart), not as
/// a caf::actor.
using projection_actor = qsp::typed_actor<
  caf::result<projection_status>(atom::status),
  caf::result<caf::ok_atom>(atom::assign, std::vector<int32_t>),
  caf::result<caf::ok_atom>(atom::revoke, std::vector<int32_t>),
  caf::result<session_list>(atom::pull, std::string, uint32_t),
  caf::result<void>(atom::subscribe, status_listener),
  caf::result<void>(atom::unsubscribe, status_listener),
  caf::result<caf::ok_atom>(atom::shutdown)>;

} // namespace qsp

// Handles whose interfaces use the atoms above.  (Registered with the other
// blocks by qsp::register_types.)
CAF_BEGIN_TYPE_ID_BLOCK(qsp_handles, caf::id_block::qsp::end)
  CAF_ADD_TYPE_ID(qsp_handles, (qsp::status_listener))
  CAF_ADD_TYPE_ID(qsp_handles, (qsp::projection_actor))
CAF_END_TYPE_ID_BLOCK(qsp_handles)

QSP_ERROR_CODE_ENUM(qsp::ec, "qsp")
