#include "core/cluster.hpp"

#include <algorithm>
#include <charconv>

namespace qsp::core {

partition_readiness judge(const owner_record& owner, const status_record& status) {
  partition_readiness r;
  if (!owner.present) {
    r.why = "no owner";
    return r;
  }
  if (!status.present) {
    r.why = "owner " + owner.node + " (epoch " + std::to_string(owner.epoch)
            + ") published no live status";
    return r;
  }
  if (status.node != owner.node || status.epoch != owner.epoch) {
    r.why = "the live status is from " + status.node + " epoch " + std::to_string(status.epoch)
            + ", not the owner " + owner.node + " epoch " + std::to_string(owner.epoch);
    return r;
  }
  r.live = true;
  if (status.state == "dirty" || status.state == "refused" || status.state == "stopped") {
    r.why = "owner " + owner.node + " is " + status.state;
    return r;
  }
  if (!status.caught_up) {
    r.why = "owner " + owner.node + " is " + (status.state.empty() ? "catching-up" : status.state);
    if (status.h0 >= 0)
      r.why += " (" + std::to_string(status.next_offset) + " of H0 " + std::to_string(status.h0)
               + ")";
    return r;
  }
  r.ready = true;
  return r;
}

owner_check check_owner(const owner_record& stored, const std::string& node, uint64_t mine) {
  bool present = stored.present && stored.epoch > 0;
  if (mine == 0)
    return present ? owner_check::fenced : owner_check::ok;
  if (present && stored.node == node && stored.epoch == mine)
    return owner_check::ok;
  if (present && stored.node != node && stored.epoch >= mine)
    return owner_check::fenced;
  return owner_check::lost;
}

claim_decision decide_claim(const owner_record& stored, const std::string& node, uint64_t mine) {
  uint64_t seen = stored.present ? stored.epoch : 0;
  if (mine == 0)
    return {claim_verdict::claim, seen + 1};
  switch (check_owner(stored, node, mine)) {
    case owner_check::ok:
      return {claim_verdict::keep, mine};
    case owner_check::fenced:
      return {claim_verdict::fenced, seen};
    case owner_check::lost:
      break;
  }
  return {claim_verdict::claim, std::max(seen, mine) + 1};
}

namespace {

std::optional<int32_t> number(const std::string& s) {
  int32_t v = 0;
  auto first = s.data(), last = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(first, last, v);
  if (s.empty() || ec != std::errc{} || ptr != last)
    return std::nullopt;
  return v;
}

} // namespace

std::optional<std::vector<int32_t>> parse_partition_list(const std::string& text,
                                                         int32_t partition_count,
                                                         std::string& error) {
  std::vector<int32_t> out;
  size_t pos = 0;
  if (text.empty()) {
    error = "empty; expected partitions like \"0-5,9\"";
    return std::nullopt;
  }
  while (pos <= text.size()) {
    auto comma = text.find(',', pos);
    auto item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    auto dash = item.find('-');
    auto lo = number(dash == std::string::npos ? item : item.substr(0, dash));
    auto hi = dash == std::string::npos ? lo : number(item.substr(dash + 1));
    if (!lo || !hi) {
      error = "\"" + item + "\" is not a partition or a range like 0-5";
      return std::nullopt;
    }
    if (*lo > *hi) {
      error = "range \"" + item + "\" runs backwards";
      return std::nullopt;
    }
    if (*lo < 0 || *hi >= partition_count) {
      error = "\"" + item + "\" is outside [0, " + std::to_string(partition_count - 1)
              + "] (projection.partition-count is " + std::to_string(partition_count) + ")";
      return std::nullopt;
    }
    for (int32_t p = *lo; p <= *hi; ++p)
      out.push_back(p);
    if (comma == std::string::npos)
      break;
    pos = comma + 1;
  }
  std::sort(out.begin(), out.end());
  if (auto d = std::adjacent_find(out.begin(), out.end()); d != out.end()) {
    error = "partition " + std::to_string(*d) + " is listed twice";
    return std::nullopt;
  }
  return out;
}

std::string format_partition_list(const std::vector<int32_t>& partitions) {
  std::string out;
  for (size_t i = 0; i < partitions.size();) {
    size_t j = i;
    while (j + 1 < partitions.size() && partitions[j + 1] == partitions[j] + 1)
      ++j;
    if (!out.empty())
      out += ',';
    out += std::to_string(partitions[i]);
    if (j > i)
      out += '-' + std::to_string(partitions[j]);
    i = j + 1;
  }
  return out;
}

} // namespace qsp::core
