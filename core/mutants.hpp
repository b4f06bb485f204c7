// Planted bugs ("mutants") behind a test-only switch.  The test kit's
// randomized schedules must prove they catch real bugs: the in-tree mutation
// tests activate one mutant, run a schedule, and expect an invariant to fail.
//
// TEST-ONLY.  Only the in-tree mutation tests call activate(); nothing in
// the configuration, the CLI or a public header reaches it, so a production
// projection always runs with id::none.  Each mutant is planted at exactly
// one point, as `if (mutant::active() == mutant::id::x) { ...the bug... }`,
// and costs a relaxed atomic load per batch (or per check) when inactive.
//
// The mutants:
// - checkpoint_before_reply (actors/redis_writer.cpp): the writer counts a
//   pipelined batch as confirmed once it is sent, without reading its ZADD
//   replies, so its offsets become checkpointable even when a ZADD failed
//   or was never applied.
// - skip_after_redelivery (actors/partition_consumer.cpp): a consumer started
//   at a stored position (a restart of the generation re-reads from the
//   checkpoint what the previous one had already delivered) resumes one past
//   it, an off-by-one on the resume position: the record at the checkpoint,
//   never projected, is skipped and later checkpoints cover it.
// - stale_fence (actors/identity_fence.cpp): the identity fence answers a
//   checkpoint request at once with the last check it answered, however
//   long before the batch's records were fetched that check started.
// - copies_one_failover_back (redis/cluster_stores.cpp and the kit's fake
//   session store): a running node in Redis Cluster mode writes a copy to
//   every primary unless one it judged restarted without data or has a
//   judged replid as its replid2 (issue 32's finding 1: a chain of
//   failovers, or a promoted replica that missed writes, passes).
// - copies_partial (actors/metadata_verifier.cpp): a start writes no copies
//   (the first one seeds only its own partitions), so a new copy key names
//   only the partitions written since (issue 32's finding 2).
// - copies_plain_hset (redis/cluster_stores.cpp and the kit's fake session
//   store): a running node writes its copies with a plain HSET, which
//   re-creates a copy a FLUSHALL (or a restart without data) removed, at
//   positions whose entries that primary lost (issue 45, rule 3).
// - copies_stamped_at_open (redis/cluster_stores.cpp and the kit's fake
//   session store): a running node stamps its copies with the cluster
//   epoch its store read when it opened, not when it writes them (issue
//   45, rule 4): a later start blames a failover on epochs spent before.
// - joined_without_replicas (core/copies.cpp): a start takes every primary
//   it never knew without a former history for one that joined, without
//   looking at the replicas and slots the registry recorded (issue 45, rule
//   1): a promoted replica restarted empty is vouched for at the
//   checkpoints.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace qsp::mutant {

enum class id : uint8_t {
  none = 0,
  checkpoint_before_reply,
  skip_after_redelivery,
  stale_fence,
  copies_one_failover_back,
  copies_partial,
  copies_plain_hset,
  copies_stamped_at_open,
  joined_without_replicas,
};

/// The active mutant (a relaxed atomic load); none in production.
id active() noexcept;

/// Test-only: activates `x` for the whole process (none: back to correct).
void activate(id x) noexcept;

/// "none", "checkpoint_before_reply", "skip_after_redelivery", "stale_fence".
const char* name(id x) noexcept;

/// The mutant called `text` (as name() spells it), if any.
std::optional<id> from_name(std::string_view text) noexcept;

} // namespace qsp::mutant
