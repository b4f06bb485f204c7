#include "messages/log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace qsp {

projection_log::projection_log(std::shared_ptr<spdlog::logger> logger, std::string tag)
  : logger_(std::move(logger)), tag_(std::move(tag)) {
  if (!logger_)
    logger_ = std::make_shared<spdlog::logger>(
      "qsp", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
}

std::string projection_log::tag_of(const std::string& topic, const std::string& ns,
                                   const std::string& node) {
  return "[" + topic + " " + ns + (node.empty() ? "" : " " + node) + "] ";
}

log_ptr default_log() {
  static auto instance = std::make_shared<const projection_log>(nullptr, "");
  return instance;
}

} // namespace qsp
