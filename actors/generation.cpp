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
