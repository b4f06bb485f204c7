#include "actors/generation.hpp"


#include "caf/event_based_actor.hpp"

namespace qsp {

// -- generation ---------------------------------------------------------------

void generation::abort() {
  std::vector<std::function<void()>> hooks;
  {
    std::lock_guard<std::mutex> g{mtx_};
    aborted_ = true;
    hooks = hooks_;
  }
  for (auto& h : hooks)
    h();
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

void generation::add_hook(std::function<void()> hook) {
  {
    std::lock_guard<std::mutex> g{mtx_};
    if (!aborted_) {
      hooks_.push_back(std::move(hook));
      return;
    }
  }
  hook();
}

} // namespace qsp
