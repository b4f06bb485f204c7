// Redis Cluster's slots as the simulated cluster keeps them
// (testkit/world/redis_cluster.hpp): ranges "a-b,c,...", parsed and
// formatted, and a key's slot (CRC16, hash tags).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/cluster.hpp"

namespace qsp::redis {

// Declared in redis/cluster_map.hpp, which includes hiredis's headers: the
// test kit is built without them.  Defined in the library (redis/cluster_map.cpp).
uint16_t key_slot(std::string_view key) noexcept;

} // namespace qsp::redis

namespace qsp::test::sim {

constexpr int64_t slot_count = 16384;

using slot_ranges = std::vector<std::pair<int, int>>;

slot_ranges parse_slots(std::string_view slots);
/// Sorted, adjacent ranges merged.
std::string format_slots(slot_ranges r);
bool in_ranges(const slot_ranges& r, int slot);
/// Whether `slots` (a shard_report's "a-b,c,...") names `slot`.
bool serves(std::string_view slots, uint16_t slot);
/// Whether every slot of `now` is in `then`.
bool covers(const slot_ranges& then, const slot_ranges& now);

} // namespace qsp::test::sim
