#include "core/endpoint.hpp"

namespace qsp::core {

std::optional<host_port> parse_host_port(std::string_view text) {
  auto colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0)
    return std::nullopt;
  auto host = text.substr(0, colon);
  auto port = text.substr(colon + 1);
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']')
      return std::nullopt;
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string_view::npos) {
    return std::nullopt; // a bare IPv6 address needs brackets
  }
  if (port.empty() || port.size() > 5)
    return std::nullopt;
  uint32_t v = 0;
  for (char c : port) {
    if (c < '0' || c > '9')
      return std::nullopt;
    v = v * 10 + static_cast<uint32_t>(c - '0');
  }
  if (v == 0 || v > 65535)
    return std::nullopt;
  return host_port{std::string{host}, static_cast<uint16_t>(v)};
}

} // namespace qsp::core
