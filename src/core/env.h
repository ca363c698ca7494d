// Every environment knob brass reads, in one place, so they can be listed and documented.
//   BRASS_LOG      error|warn|info|debug   log level (default info)
//   BRASS_THREADS  N                       CPU worker threads (default: all cores)
#pragma once

#include <optional>
#include <string>

namespace brass::env {

std::optional<std::string> get(const char* name);
std::string log_level();  // BRASS_LOG or "info"
int threads();            // BRASS_THREADS or hardware_concurrency()

}  // namespace brass::env
