#include "core/ownership.hpp"

namespace qsp::core {

std::optional<uint64_t> ownership::epoch(int32_t p) const {
  auto i = epochs_.find(p);
  if (i == epochs_.end())
    return std::nullopt;
  return i->second;
}

std::vector<int32_t> ownership::assign(const std::vector<int32_t>& parts) {
  std::vector<int32_t> added;
  for (auto p : parts)
    if (owned_.insert(p).second)
      added.push_back(p);
  return added;
}

ownership::released ownership::revoke(const std::vector<int32_t>& parts) {
  released out;
  for (auto p : parts) {
    if (owned_.erase(p) == 0)
      continue;
    out.dropped.push_back(p);
    if (auto i = epochs_.find(p); i != epochs_.end()) {
      out.claims.emplace(p, i->second);
      epochs_.erase(i);
    }
  }
  return out;
}

void ownership::claimed(int32_t p, uint64_t epoch) {
  if (!owns(p) || epoch == 0)
    return;
  auto& e = epochs_[p];
  if (epoch > e)
    e = epoch;
}

ownership::report ownership::judge_report(int32_t p, uint64_t epoch, bool moved) const {
  auto mine = this->epoch(p);
  if (!mine || *mine != epoch)
    return report::stale;
  return moved ? report::moved : report::lost;
}

bool ownership::moved_away(int32_t p) {
  if (fixed_)
    return true;
  owned_.erase(p);
  epochs_.erase(p);
  return false;
}

} // namespace qsp::core
