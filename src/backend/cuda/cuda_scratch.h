// Scratch: a device area that only grows. A replaced area stays allocated until the
// owner dies: a captured CUDA graph holds raw pointers, so nothing it may reference is
// ever freed early.
#pragma once

#include <algorithm>
#include <vector>

#include "backend/cuda/cuda_kernels.h"

namespace brass::backend::cuda {

struct Scratch {
  std::vector<void*> all;
  void* cur = nullptr;
  size_t bytes = 0;
  // The stream the owner's work runs on: a new area is zeroed there, in order with that
  // work. (A plain cudaMemset runs on the legacy stream, which a non-blocking stream does
  // not wait for: the zeroing could land after a parameter table was copied into the new
  // area, and a kernel read null pointers. Seen as a cuBLAS "execution failed" at 64
  // streams after an 8192-token prefill, gone under CUDA_LAUNCH_BLOCKING=1.)
  cudaStream_t stream = nullptr;
  void* get(size_t need) {
    if (need > bytes) {
      void* p = nullptr;
      const size_t n = std::max(need, bytes * 2);
      BRASS_CUDA_CHECK(cudaMalloc(&p, n));
      if (stream) {
        BRASS_CUDA_CHECK(cudaMemsetAsync(p, 0, n, stream));
      } else {
        BRASS_CUDA_CHECK(cudaMemset(p, 0, n));
        BRASS_CUDA_CHECK(cudaDeviceSynchronize());
      }
      all.push_back(p);
      cur = p;
      bytes = n;
    }
    return cur;
  }
  template <class T>
  T* as(size_t n) { return static_cast<T*>(get(n * sizeof(T))); }
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() {
    for (void* p : all) cudaFree(p);
  }
};

}  // namespace brass::backend::cuda
