// Minimal leveled logging to stderr. Level comes from BRASS_LOG (error|warn|info|debug),
// read once through core/env.h; default info.
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <string_view>

namespace brass {

enum class LogLevel { Error = 0, Warn = 1, Info = 2, Debug = 3 };

LogLevel log_level();
void set_log_level(LogLevel level);
void log_write(LogLevel level, std::string_view msg);

template <class... Args>
void log(LogLevel level, fmt::format_string<Args...> f, Args&&... args) {
  if (level <= log_level()) log_write(level, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace brass

#define BRASS_LOG_ERROR(...) ::brass::log(::brass::LogLevel::Error, __VA_ARGS__)
#define BRASS_LOG_WARN(...) ::brass::log(::brass::LogLevel::Warn, __VA_ARGS__)
#define BRASS_LOG_INFO(...) ::brass::log(::brass::LogLevel::Info, __VA_ARGS__)
#define BRASS_LOG_DEBUG(...) ::brass::log(::brass::LogLevel::Debug, __VA_ARGS__)
