// The CPU memory-read bandwidth probe: the floor that decode speed is measured against
// (`brass bench`, bench/cpu_*). Each thread streams its own contiguous part of a buffer
// (the pattern that reaches this kind of machine's bandwidth: bench/cpu_bw_patterns),
// best of several passes.
#pragma once

#include <cstddef>

#include "core/status.h"

namespace brass::backend::cpu {

// GB/s read by `threads` threads over a `bytes` buffer (best of `passes`). Fails only
// when the buffer cannot be allocated.
Result<double> read_bandwidth_gbs(int threads, size_t bytes = size_t{1} << 30, int passes = 5);

}  // namespace brass::backend::cpu
