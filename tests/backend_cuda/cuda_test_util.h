// Helpers for the CUDA parity tests: skip without a device, the CPU reference backend
// (BRASS_CPU_KERNELS=ref: plain loops, the oracle), random inputs from a fresh seed,
// device <-> host copies and tolerant comparisons (the CUDA kernels reduce in another
// order, so results agree to f32 rounding, not bit for bit).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "core/half.h"
#include "../backend/test_rng.h"

namespace brass::backend::testing {

#define BRASS_REQUIRE_CUDA()                                        \
  do {                                                              \
    std::string why_;                                               \
    if (!::brass::backend::cuda_available(&why_)) GTEST_SKIP() << why_; \
  } while (0)

inline std::unique_ptr<Backend> reference_backend() {
  ::setenv("BRASS_CPU_KERNELS", "ref", 1);
  return make_cpu_backend(2);
}


// A device buffer with typed host round trips.
struct Dev {
  std::unique_ptr<Buffer> buf;
  Backend* be = nullptr;
  template <class T>
  static Dev from(Backend& b, const std::vector<T>& host) {
    Dev d;
    d.be = &b;
    auto r = b.alloc(host.size() * sizeof(T) + 16);
    EXPECT_TRUE(r.is_ok());
    d.buf = std::move(r).value();
    if (!host.empty()) b.upload(d.buf->data(), host.data(), host.size() * sizeof(T));
    return d;
  }
  template <class T>
  static Dev poisoned(Backend& b, size_t n) {  // NaN-filled (floats) so unwritten outputs show
    std::vector<T> h(n);
    for (auto& x : h) x = static_cast<T>(std::nan(""));
    if constexpr (std::is_integral_v<T>) for (auto& x : h) x = static_cast<T>(-7777);
    return from(b, h);
  }
  template <class T>
  T* as() { return buf->as<T>(); }
  template <class T>
  std::vector<T> get(size_t n) {
    std::vector<T> h(n);
    be->synchronize();
    be->download(h.data(), buf->data(), n * sizeof(T));
    return h;
  }
};

// max |a - b| <= atol + rtol * max|b| (+ slack[i] per element where given), NaN fails;
// reports the first few bad indices.
inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, double rtol, double atol,
                         const std::string& what, const std::vector<float>& slack = {}) {
  ASSERT_EQ(got.size(), want.size()) << what;
  ASSERT_TRUE(slack.empty() || slack.size() == want.size()) << what;
  double mx = 0;
  for (float w : want) mx = std::max(mx, static_cast<double>(std::fabs(w)));
  const double tol = atol + rtol * mx;
  int bad = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(d <= tol + (slack.empty() ? 0.0 : slack[i]))) {
      if (bad++ < 3) ADD_FAILURE() << what << " [" << i << "]: cuda " << got[i] << " vs reference " << want[i];
    }
    if (d > worst || std::isnan(d)) worst = d;
  }
  if (bad) ADD_FAILURE() << what << ": " << bad << " of " << got.size() << " off (tol " << tol << ", worst " << worst << ")";
}

// Row `slot` of a K / V cache held as bytes (n elements a row: f16 when esz == 2, else
// f32), as floats.
inline std::vector<float> kv_row(const std::vector<uint8_t>& cache, int64_t slot, int64_t n, int64_t esz) {
  std::vector<float> v(n);
  for (int64_t e = 0; e < n; ++e) {
    const uint8_t* p = cache.data() + (slot * n + e) * esz;
    if (esz == 2) {
      uint16_t h;
      std::memcpy(&h, p, 2);
      v[e] = f16_to_f32(h);
    } else {
      std::memcpy(&v[e], p, 4);
    }
  }
  return v;
}

// Every byte of a K / V cache but row `slot` (rows of `row` bytes) as in `before`.
inline ::testing::AssertionResult kv_rest_untouched(const std::vector<uint8_t>& got, const std::vector<uint8_t>& before,
                                                    int64_t slot, int64_t row) {
  if (got.size() != before.size()) return ::testing::AssertionFailure() << "cache sizes differ";
  if (std::memcmp(got.data(), before.data(), slot * row) != 0)
    return ::testing::AssertionFailure() << "rows before the token's were written";
  const int64_t end = (slot + 1) * row;
  if (std::memcmp(got.data() + end, before.data() + end, got.size() - end) != 0)
    return ::testing::AssertionFailure() << "rows after the token's were written";
  return ::testing::AssertionSuccess();
}

}  // namespace brass::backend::testing
