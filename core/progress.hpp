// Readiness math (DESIGN.md §4.4): the projection is ready once every
// partition's checkpoint has reached this start's target H0. Offsets appended
// after startup never move H0.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

namespace qsp::core {

struct partition_progress {
  int32_t partition = 0;
  int64_t h0 = 0;
  int64_t next_offset = 0;
};

class readiness_tracker {
 public:
  // `h0` and `starts` must name the same partitions with 0 <= start <= h0
  // (what plan_start produces for an ok() plan); throws std::invalid_argument
  // otherwise. No partitions at all is ready at once.
  readiness_tracker(const std::map<int32_t, int64_t>& h0,
                    const std::map<int32_t, int64_t>& starts);

  // Records a written checkpoint. Returns false, changing nothing, for an
  // unknown partition or a next_offset below the one already recorded (a
  // checkpoint never goes backwards). Passing H0 is normal: consumption
  // continues after readiness.
  bool on_checkpoint(int32_t partition, int64_t next_offset);

  bool ready() const { return lagging_ == 0; }
  // Offsets still to project before ready (sum over partitions of
  // max(0, h0 - next_offset)), saturating at INT64_MAX.
  int64_t remaining() const;
  // Share of the catch-up work (h0 - start) done, in [0, 1]; 1 when there
  // was nothing to catch up.
  double fraction_done() const;
  std::vector<partition_progress> snapshot() const;

 private:
  struct entry {
    int64_t h0;
    int64_t start;
    int64_t next_offset;
  };
  std::map<int32_t, entry> partitions_;
  size_t lagging_ = 0;  // partitions with next_offset < h0; keeps ready() O(1)
};

}  // namespace qsp::core
