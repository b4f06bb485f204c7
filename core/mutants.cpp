#include "core/mutants.hpp"

#include <atomic>

namespace qsp::mutant {

namespace {

// The one switch (see mutants.hpp): written only by the mutation tests.
std::atomic<id> current{id::none};

constexpr id all[] = {id::none, id::checkpoint_before_reply, id::skip_after_redelivery,
                      id::stale_fence, id::copies_one_failover_back, id::copies_partial,
                      id::copies_plain_hset, id::copies_stamped_at_open,
                      id::joined_without_replicas};

} // namespace

id active() noexcept {
  return current.load(std::memory_order_relaxed);
}

void activate(id x) noexcept {
  current.store(x, std::memory_order_relaxed);
}

const char* name(id x) noexcept {
  switch (x) {
    case id::none:
      return "none";
    case id::checkpoint_before_reply:
      return "checkpoint_before_reply";
    case id::skip_after_redelivery:
      return "skip_after_redelivery";
    case id::stale_fence:
      return "stale_fence";
    case id::copies_one_failover_back:
      return "copies_one_failover_back";
    case id::copies_partial:
      return "copies_partial";
    case id::copies_plain_hset:
      return "copies_plain_hset";
    case id::copies_stamped_at_open:
      return "copies_stamped_at_open";
    case id::joined_without_replicas:
      return "joined_without_replicas";
  }
  return "unknown";
}

std::optional<id> from_name(std::string_view text) noexcept {
  for (auto x : all)
    if (text == name(x))
      return x;
  return std::nullopt;
}

} // namespace qsp::mutant
