#include "messages/types.hpp"

#include "caf/message.hpp"

namespace qsp {

std::string to_string(ec x) {
  switch (x) {
    case ec::unspecified: return "unspecified";
    case ec::refused: return "refused";
    case ec::undecodable: return "undecodable";
    case ec::identity_changed: return "identity_changed";
    case ec::unsupported_redis: return "unsupported_redis";
    case ec::redis_unavailable: return "redis_unavailable";
    case ec::redis_reply: return "redis_reply";
    case ec::checkpoint_conflict: return "checkpoint_conflict";
    case ec::kafka_unavailable: return "kafka_unavailable";
    case ec::kafka_read: return "kafka_read";
    case ec::not_ready: return "not_ready";
    case ec::shutting_down: return "shutting_down";
    case ec::invalid_config: return "invalid_config";
    case ec::fenced: return "fenced";
  }
  return "unknown";
}

bool from_string(std::string_view text, ec& x) {
  for (auto i = static_cast<int>(ec::unspecified); i <= static_cast<int>(ec::fenced); ++i) {
    if (to_string(static_cast<ec>(i)) == text) {
      x = static_cast<ec>(i);
      return true;
    }
  }
  return false;
}

bool from_integer(std::underlying_type_t<ec> value, ec& x) {
  if (value < static_cast<uint8_t>(ec::unspecified) || value > static_cast<uint8_t>(ec::fenced))
    return false;
  x = static_cast<ec>(value);
  return true;
}

bool is_refusal(ec x) {
  switch (x) {
    case ec::refused:
    case ec::undecodable:
    case ec::identity_changed:
    case ec::unsupported_redis:
    case ec::invalid_config:
      return true;
    default:
      return false;
  }
}

std::optional<ec> code_of(const caf::error& x) {
  if (!in_category<ec>(x))
    return std::nullopt;
  return static_cast<ec>(x.code());
}

bool is_refusal(const caf::error& x) {
  auto code = code_of(x);
  return code && is_refusal(*code);
}

std::string describe(const caf::error& x) {
  if (!x)
    return "no error";
  std::string code;
  if (auto c = code_of(x))
    code = to_string(*c);
  else
    code = caf::to_string(x);
  auto& ctx = x.context();
  if (ctx.size() >= 1 && ctx.match_element<std::string>(0))
    return code + ": " + ctx.get_as<std::string>(0);
  return code;
}

caf::error make_fenced(int32_t partition, std::string text) {
  return caf::make_error(ec::fenced, std::move(text), partition);
}

std::optional<int32_t> fenced_partition(const caf::error& x) {
  if (code_of(x) != ec::fenced)
    return std::nullopt;
  auto& ctx = x.context();
  if (ctx.size() != 2 || !ctx.match_element<int32_t>(1))
    return std::nullopt;
  return ctx.get_as<int32_t>(1);
}

} // namespace qsp
