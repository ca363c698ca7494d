// Every environment knob brass reads, in one place, so they can be listed and documented.
//   BRASS_LOG      error|warn|info|debug   log level (default info)
//   BRASS_THREADS  N                       CPU worker threads (default: all cores)
//   BRASS_BUILTIN_MODEL  PATH              GGUF that `brass run` uses without -m (cli/paths.cpp)
//   BRASS_VOCAB    PATH                    o200k_base.tiktoken for synth/convert (cli/paths.cpp)
//   BRASS_CPU_KERNELS ref|avx2|avx512      CPU backend kernel level (default: the best the
//                                          processor supports; ref = the plain-loop reference
//                                          backend; read by backend/cpu/simd_dispatch.cpp)
#pragma once

#include <optional>
#include <string>

namespace brass::env {

std::optional<std::string> get(const char* name);
std::string log_level();  // BRASS_LOG or "info"
int threads();            // BRASS_THREADS or hardware_concurrency()

}  // namespace brass::env
