// Several nodes, one namespace (docs/DESIGN.md §12): the readiness rule applied to
// what Redis holds per partition, and the partition-list syntax of
// projection.partitions.  Pure: the Redis adapter reads, this judges.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace qsp::core {

/// `<ns>:owner:<topic>:<p>`: who owns the partition, since which epoch.
struct owner_record {
  bool present = false;
  std::string node;
  uint64_t epoch = 0;
  int64_t heartbeat_ms = 0;
};

/// `<ns>:status:<topic>:<p>`: what its owner last published (gone after its TTL).
struct status_record {
  bool present = false;
  std::string node;
  uint64_t epoch = 0;
  std::string state;
  int64_t h0 = -1;
  int64_t next_offset = -1;
  bool caught_up = false;
};

/// The verdict on one partition.
struct partition_readiness {
  bool live = false;   ///< a status of the current owner (same node and epoch)
  bool ready = false;  ///< live, caught up to its H0, and not dirty
  std::string why;     ///< what holds it closed ("" when ready)
};

/// A partition is ready iff it has a live owner that reached the H0 it took
/// when it got the partition and is not dirty.
partition_readiness judge(const owner_record& owner, const status_record& status);

/// docs/DESIGN.md §12: what the owner record says to the holder of a claim
/// (`node`, `mine`; `mine` 0: a writer outside any cluster, ownership = all).
///   ok:     it names this node with this epoch (mine 0: there is none);
///   fenced: it names another node with an equal or newer epoch: the
///           partition moved (mine 0: any record, a cluster owns it);
///   lost:   it is absent, names this node with another epoch, or another
///           node with an older epoch: Redis lost the claim (a failover to a
///           lagging replica, a restore).  Transient: dirty, then re-claim.
enum class owner_check { ok, fenced, lost };
owner_check check_owner(const owner_record& stored, const std::string& node, uint64_t mine);

/// docs/DESIGN.md §12, "Decision — re-claim": what a verification does with the
/// owner record of a partition this node owns.
enum class claim_verdict { keep, claim, fenced };
struct claim_decision {
  claim_verdict verdict = claim_verdict::claim;
  /// keep: this node's epoch; claim: the new epoch (larger than any seen);
  /// fenced: the stored epoch.
  uint64_t epoch = 0;
};
/// `mine` 0 (this node holds no claim on it yet: it was just given the
/// partition) always claims, with the stored epoch + 1.  Otherwise: keep an
/// intact claim, re-claim a lost one with max(stored, mine) + 1, and never
/// take a partition that moved.
claim_decision decide_claim(const owner_record& stored, const std::string& node, uint64_t mine);

/// "0-5,9" -> {0,1,2,3,4,5,9}: sorted, distinct, each in [0, partition_count).
/// nullopt and `error` set on anything else ("" or a reversed range too).
std::optional<std::vector<int32_t>> parse_partition_list(const std::string& text,
                                                         int32_t partition_count,
                                                         std::string& error);

/// {0,1,2,3,4,5,9} -> "0-5,9".
std::string format_partition_list(const std::vector<int32_t>& partitions);

} // namespace qsp::core
