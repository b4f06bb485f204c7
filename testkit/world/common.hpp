// What every room of the simulated world shares (testkit/world/world.hpp):
// the fault knob, the call counters, the event log, the clock and the lock.
//
// The world is one object (fake_world) built from one room per simulated
// service, each with the faults it injects beside it, as FoundationDB's
// simulator keeps a small class per simulated machine:
//   broker.hpp         the dispatch log: partitions, transactions, retention,
//                      truncation, the broker's identity (and its admin port);
//   consumer.hpp       the dispatch log's consumer port (assignment, readers);
//   redis.hpp          a standalone Redis: keys, rollback, eviction, freezing;
//   redis_stores.hpp   the checkpoint and session store ports over it;
//   redis_cluster.hpp  Redis Cluster: shards, replicas, failover, slots,
//                      migration, copies;
//   ownership.hpp      the ownership store: owner records, statuses, and its
//                      port (the cluster store).
// A room reaches the others through world() (the whole world), for the
// services are not independent: a copy write is a Redis write, a checkpoint
// key names the topic.
//
// The fakes never block.  Every port call locks `world_core::mtx`; a test
// that runs the actors on other threads must lock it too before touching the
// world.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "messages/types.hpp"
#include "ports/ports.hpp"

namespace qsp::test {

struct fake_world;

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
/// on (simulated_broker::during_identity).
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

/// The state every room shares (a virtual base of each: one per world).
struct world_core {
  mutable std::recursive_mutex mtx;
  call_counts calls;
  /// Every fake_event, in order (the fixture checks the identity fence on it).
  std::vector<fake_event> events;
  /// The clock of status TTLs and broker delays (ms; the fixture's test
  /// clock); none: statuses never expire, records are never late.
  std::function<int64_t()> now_ms;
};

namespace sim {

using lock = std::lock_guard<std::recursive_mutex>;

/// The error of an armed fault `f` (its code, else `fallback`).
caf::error failure(const fault& f, ec fallback, const std::string& what);

/// A blocking Redis call against a frozen server: its command timeout.
caf::error frozen(const std::string& what);

} // namespace sim

} // namespace qsp::test
