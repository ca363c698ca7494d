// Every environment knob brass reads, in one place, so they can be listed and documented.
//   BRASS_LOG      error|warn|info|debug   log level (default info)
//   BRASS_THREADS  N                       CPU worker threads (default: all cores)
//   BRASS_BUILTIN_MODEL  PATH              GGUF that `brass run` uses without -m (cli/paths.cpp)
//   BRASS_VOCAB    PATH                    o200k_base.tiktoken for synth/convert (cli/paths.cpp)
//   BRASS_CPU_KERNELS ref|avx2|avx512      CPU backend kernel level (default: the best the
//                                          processor supports; ref = the plain-loop reference
//                                          backend; read by backend/cpu/simd_dispatch.cpp)
// Read by the CUDA backend (backend/cuda/cuda_backend.cpp, which cannot use this header's
// helpers from its .cu files): BRASS_CUDA_EXACT=1 (f32 activations, no tensor-core paths),
// BRASS_CUDA_PDL=0 (plain launches), BRASS_CUDA_TC=0 (no tensor-core paths),
// BRASS_CUDA_TC_MOE_MIN N (MoE tensor-core threshold in slots per expert, default 256),
// BRASS_CUDA_MMA_MOE_MIN N (tokens per call from which the MoE uses the grouped int8 MMA
// kernels, default 2), BRASS_CUDA_MMA_DENSE_MAX N (dense matmuls of 2..N tokens on the
// int8 MMA kernel, default 64; 0: off); measurement knobs of the .cu files (on unless "0"):
// BRASS_CUDA_HEAD (one-row output head + pick in one launch, cuda_head.cu), BRASS_CUDA_HEAD_FLAT
// (its contiguous walk; 0: 4 lanes a row), and the others README.md's CUDA section lists.
#pragma once

#include <optional>
#include <string>

namespace brass::env {

std::optional<std::string> get(const char* name);
std::string log_level();  // BRASS_LOG or "info"
int threads();            // BRASS_THREADS or hardware_concurrency()

}  // namespace brass::env
