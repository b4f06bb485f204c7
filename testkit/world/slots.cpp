#include "testkit/world/slots.hpp"

#include <algorithm>

#include "core/checkpoint.hpp"
#include "testkit/world/redis_cluster.hpp"

namespace qsp::test::sim {

slot_ranges parse_slots(std::string_view slots) {
  slot_ranges out;
  while (!slots.empty()) {
    auto comma = slots.find(',');
    auto item = slots.substr(0, comma);
    slots = comma == std::string_view::npos ? std::string_view{} : slots.substr(comma + 1);
    auto dash = item.find('-');
    auto first = core::parse_decimal(item.substr(0, dash));
    auto last = dash == std::string_view::npos ? first : core::parse_decimal(item.substr(dash + 1));
    if (first && last)
      out.emplace_back(static_cast<int>(*first), static_cast<int>(*last));
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string format_slots(slot_ranges r) {
  std::sort(r.begin(), r.end());
  // Adjacent ranges are one.
  slot_ranges merged;
  for (auto& x : r)
    if (!merged.empty() && merged.back().second + 1 >= x.first)
      merged.back().second = std::max(merged.back().second, x.second);
    else
      merged.push_back(x);
  std::string out;
  for (auto& [a, b] : merged)
    out += (out.empty() ? "" : ",") + (a == b ? std::to_string(a)
                                              : std::to_string(a) + "-" + std::to_string(b));
  return out;
}

bool in_ranges(const slot_ranges& r, int slot) {
  return std::any_of(r.begin(), r.end(),
                     [&](const std::pair<int, int>& x) { return x.first <= slot && slot <= x.second; });
}

bool serves(std::string_view slots, uint16_t slot) {
  return in_ranges(parse_slots(slots), slot);
}

bool covers(const slot_ranges& then, const slot_ranges& now) {
  for (auto& [a, b] : now)
    for (int x = a; x <= b; ++x)
      if (!in_ranges(then, x))
        return false;
  return true;
}

std::string copy_tag_of(const core::shard_report& sh) {
  auto r = parse_slots(sh.slots);
  return r.empty() ? std::string{} : std::to_string(r.front().first);
}

} // namespace qsp::test::sim
