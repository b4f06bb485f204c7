#include "actors/generation.hpp"

#include <algorithm>
#include <chrono>

#include "caf/event_based_actor.hpp"

namespace qsp {

// -- generation ---------------------------------------------------------------

int64_t generation::wall_now() const {
  if (wall_ms)
    return wall_ms();
  // The default wall clock (no projection_options::wall_clock).
  return std::chrono::duration_cast<std::chrono::milliseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

caf::error generation::judge_primaries(const std::map<std::string, core::judged_primary>& judged) {
  std::lock_guard<std::mutex> g{mtx_};
  if (primaries_.empty()) {
    primaries_ = judged;
    return caf::none;
  }
  // An extend (partitions added to the running generation) judges the
  // same primaries in the same histories, or the generation restarts: the
  // judged set never changes while running (issue 45, rule 5).  A primary
  // judged for the added partitions alone (one that took over unnoticed,
  // or joined) would otherwise let the writer write it copies at current
  // positions, vouching for what a failover lost of the running ones; only
  // a start judges every partition against every primary.
  for (auto& [node, was] : primaries_) {
    auto i = judged.find(node);
    if (i == judged.end())
      return caf::make_error(ec::redis_unavailable,
                             "redis cluster: primary " + node
                               + " serves no slots any more since this generation judged the "
                                 "primaries (a failover, or it left): restarting from the copies");
    if (!(i->second == was))
      return caf::make_error(ec::redis_unavailable,
                             "redis cluster: primary " + node
                               + " changed during this generation (a restart without its data, "
                                 "or its lowest slot moved): restarting from the copies");
  }
  for (auto& [node, j] : judged)
    if (primaries_.count(node) == 0)
      return caf::make_error(ec::redis_unavailable,
                             "redis cluster: primary " + node
                               + " serves slots since this generation judged the primaries (it "
                                 "took over, or joined): restarting from the copies");
  return caf::none;
}

std::map<std::string, core::judged_primary> generation::primaries() const {
  std::lock_guard<std::mutex> g{mtx_};
  return primaries_;
}

void generation::abort() {
  std::vector<hook> hooks;
  {
    std::lock_guard<std::mutex> g{mtx_};
    aborted_ = true;
    hooks = hooks_;
  }
  // Outside the lock: an interrupt may take a store's own lock.
  for (auto& h : hooks)
    h.interrupt();
}

void generation::set_claims(std::map<int32_t, uint64_t> epochs) {
  std::lock_guard<std::mutex> g{mtx_};
  claims_ = std::move(epochs);
}

void generation::record_claim(int32_t partition, uint64_t epoch) {
  std::lock_guard<std::mutex> g{mtx_};
  claims_[partition] = epoch;
}

std::map<int32_t, uint64_t> generation::claims() const {
  std::lock_guard<std::mutex> g{mtx_};
  return claims_;
}

bool generation::aborted() const {
  std::lock_guard<std::mutex> g{mtx_};
  return aborted_;
}

size_t generation::hooks() const {
  std::lock_guard<std::mutex> g{mtx_};
  return hooks_.size();
}

void generation::add_hook(std::weak_ptr<const void> target, std::function<void()> interrupt) {
  {
    std::lock_guard<std::mutex> g{mtx_};
    if (!aborted_) {
      // Dead stores need no interrupt: drop their entries here, so the
      // list never outgrows the stores alive at the last track().
      hooks_.erase(std::remove_if(hooks_.begin(), hooks_.end(),
                                  [](const hook& h) { return h.target.expired(); }),
                   hooks_.end());
      hooks_.push_back(hook{std::move(target), std::move(interrupt)});
      return;
    }
  }
  interrupt();
}

} // namespace qsp
