// Several nodes, one namespace (DESIGN.md §12): the readiness rule applied to
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

/// "0-5,9" -> {0,1,2,3,4,5,9}: sorted, distinct, each in [0, partition_count).
/// nullopt and `error` set on anything else ("" or a reversed range too).
std::optional<std::vector<int32_t>> parse_partition_list(const std::string& text,
                                                         int32_t partition_count,
                                                         std::string& error);

/// {0,1,2,3,4,5,9} -> "0-5,9".
std::string format_partition_list(const std::vector<int32_t>& partitions);

} // namespace qsp::core
