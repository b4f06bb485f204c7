// Thin logging macros over one named spdlog logger ("qsp").  Log an error
// once, where it is decided, with topic/partition/offset.
#pragma once

#include <memory>

#include <spdlog/spdlog.h>

namespace qsp {

/// The projection's logger (created on first use, stderr by default).
std::shared_ptr<spdlog::logger> logger();

} // namespace qsp

#define QSP_LOG_DEBUG(...) ::qsp::logger()->debug(__VA_ARGS__)
#define QSP_LOG_INFO(...) ::qsp::logger()->info(__VA_ARGS__)
#define QSP_LOG_WARN(...) ::qsp::logger()->warn(__VA_ARGS__)
#define QSP_LOG_ERROR(...) ::qsp::logger()->error(__VA_ARGS__)
