#include "actors/log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace qsp {

std::shared_ptr<spdlog::logger> logger() {
  static auto instance = [] {
    if (auto existing = spdlog::get("qsp"))
      return existing;
    return spdlog::stderr_color_mt("qsp");
  }();
  return instance;
}

} // namespace qsp
