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
  void* get(size_t need) {
    if (need > bytes) {
      void* p = nullptr;
      const size_t n = std::max(need, bytes * 2);
      BRASS_CUDA_CHECK(cudaMalloc(&p, n));
      BRASS_CUDA_CHECK(cudaMemset(p, 0, n));
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
