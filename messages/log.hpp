// The projection's logging: one projection_log per projection, over the
// spdlog logger a host passes at spawn (or one of the projection's own that
// is never registered with spdlog).  Every line starts with the projection's
// "[topic ns] " tag, so a host running several can tell them apart.  Log an
// error once, where it is decided, with partition and offset.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include <spdlog/spdlog.h>

namespace qsp {

class projection_log {
public:
  /// `logger` null: a new stderr logger named "qsp", not registered.
  projection_log(std::shared_ptr<spdlog::logger> logger, std::string tag);

  /// The tag of a projection: "[<topic> <namespace>] ".
  /// "[topic namespace] ", or "[topic namespace node] " with a node id (the
  /// clustered modes: several nodes of one namespace may share a process).
  static std::string tag_of(const std::string& topic, const std::string& ns,
                            const std::string& node = {});

  template <class... Ts>
  void log(spdlog::level::level_enum lvl, fmt::format_string<Ts...> f, Ts&&... xs) const {
    if (logger_->should_log(lvl))
      logger_->log(lvl, "{}{}", tag_, fmt::format(f, std::forward<Ts>(xs)...));
  }
  template <class... Ts>
  void debug(fmt::format_string<Ts...> f, Ts&&... xs) const {
    log(spdlog::level::debug, f, std::forward<Ts>(xs)...);
  }
  template <class... Ts>
  void info(fmt::format_string<Ts...> f, Ts&&... xs) const {
    log(spdlog::level::info, f, std::forward<Ts>(xs)...);
  }
  template <class... Ts>
  void warn(fmt::format_string<Ts...> f, Ts&&... xs) const {
    log(spdlog::level::warn, f, std::forward<Ts>(xs)...);
  }
  template <class... Ts>
  void error(fmt::format_string<Ts...> f, Ts&&... xs) const {
    log(spdlog::level::err, f, std::forward<Ts>(xs)...);
  }
  /// A line that comes preformatted (librdkafka's log callback).
  void raw(spdlog::level::level_enum lvl, const std::string& line) const {
    if (logger_->should_log(lvl))
      logger_->log(lvl, "{}{}", tag_, line);
  }

  const std::shared_ptr<spdlog::logger>& logger() const { return logger_; }

private:
  std::shared_ptr<spdlog::logger> logger_;
  std::string tag_;
};

using log_ptr = std::shared_ptr<const projection_log>;

/// A log for code that has none (tests, tools): untagged, on stderr.
log_ptr default_log();

} // namespace qsp
