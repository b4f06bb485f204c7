// Per-partition explicit start offsets (docs/DESIGN.md §4.2): decided only from
// validated checkpoints and the broker's watermarks. There is no default,
// earliest or latest fallback; anything unproven is a refusal.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/checkpoint.hpp"

namespace qsp::core {

// Broker watermarks of one partition. Under read_committed, `high` is the
// last stable offset, which is the right catch-up target H0.
struct watermarks {
  int64_t low = 0;
  int64_t high = 0;
};

enum class verdict {
  resume,     // checkpoint in [low, high): continue from it
  bootstrap,  // no checkpoint and low == 0: project the whole history
  caught_up,  // checkpoint == high: nothing to catch up
  refuse,     // no provable start: the node must not start
};

const char* to_string(verdict v);

struct partition_plan {
  int32_t partition = 0;
  int64_t low = 0;
  int64_t high = 0;
  std::optional<int64_t> checkpoint;
  std::optional<int64_t> start;  // nullopt exactly when v == verdict::refuse
  verdict v = verdict::refuse;
  std::string reason;
};

struct start_plan {
  std::vector<partition_plan> partitions;  // one per partition, in order
  std::vector<problem> problems;           // one per refusal

  bool ok() const { return problems.empty(); }
  // Start offset of every partition that is not refused.
  std::map<int32_t, int64_t> starts() const;
  // This start's catch-up target: the high watermark of every partition.
  std::map<int32_t, int64_t> h0() const;
};

// `checkpoints` are the validated next_offsets (validation::next_offsets);
// `marks[p]` are partition p's watermarks. A checkpoint for a partition that
// has no watermarks is a refusal too.
start_plan plan_start(const std::map<int32_t, int64_t>& checkpoints,
                      const std::vector<watermarks>& marks);

}  // namespace qsp::core
