#include "core/progress.hpp"

#include <limits>
#include <stdexcept>
#include <string>

#include "core/checkpoint.hpp"

namespace qsp::core {

namespace {

int64_t saturating_add(int64_t a, int64_t b) {  // both non-negative
  constexpr int64_t max = std::numeric_limits<int64_t>::max();
  return a > max - b ? max : a + b;
}

}  // namespace

readiness_tracker::readiness_tracker(const std::map<int32_t, int64_t>& h0,
                                     const std::map<int32_t, int64_t>& starts) {
  if (h0.size() != starts.size()) {
    throw std::invalid_argument("readiness_tracker: h0 and starts name different partitions");
  }
  for (const auto& [partition, target] : h0) {
    auto it = starts.find(partition);
    if (it == starts.end()) {
      throw std::invalid_argument("readiness_tracker: no start for partition " +
                                  to_decimal(partition));
    }
    const int64_t start = it->second;
    if (start < 0 || start > target) {
      throw std::invalid_argument("readiness_tracker: partition " + to_decimal(partition) +
                                  " has start " + to_decimal(start) + " outside [0, h0=" +
                                  to_decimal(target) + "]");
    }
    partitions_.emplace(partition, entry{target, start, start});
    if (start < target) ++lagging_;
  }
}

bool readiness_tracker::on_checkpoint(int32_t partition, int64_t next_offset) {
  auto it = partitions_.find(partition);
  if (it == partitions_.end()) return false;
  entry& e = it->second;
  if (next_offset < e.next_offset) return false;
  if (e.next_offset < e.h0 && next_offset >= e.h0) --lagging_;
  e.next_offset = next_offset;
  return true;
}

int64_t readiness_tracker::remaining() const {
  int64_t total = 0;
  for (const auto& [partition, e] : partitions_) {
    if (e.next_offset < e.h0) total = saturating_add(total, e.h0 - e.next_offset);
  }
  return total;
}

double readiness_tracker::fraction_done() const {
  // long double: sums of int64 differences may exceed int64.
  long double work = 0;
  long double done = 0;
  for (const auto& [partition, e] : partitions_) {
    work += static_cast<long double>(e.h0 - e.start);
    const int64_t reached = e.next_offset < e.h0 ? e.next_offset : e.h0;
    done += static_cast<long double>(reached - e.start);
  }
  if (work == 0) return 1.0;
  return static_cast<double>(done / work);
}

std::vector<partition_progress> readiness_tracker::snapshot() const {
  std::vector<partition_progress> result;
  result.reserve(partitions_.size());
  for (const auto& [partition, e] : partitions_) {
    result.push_back(partition_progress{partition, e.h0, e.next_offset});
  }
  return result;
}

}  // namespace qsp::core
