// "host:port" as configuration spells it (redis.sentinels).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace qsp::core {

struct host_port {
  std::string host;
  uint16_t port = 0;
};

/// "host:port" or "[v6-address]:port", port in [1, 65535]; nullopt otherwise.
std::optional<host_port> parse_host_port(std::string_view text);

} // namespace qsp::core
