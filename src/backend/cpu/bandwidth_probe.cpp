// CPU read-bandwidth probe (see bandwidth_probe.h).
#include "backend/cpu/bandwidth_probe.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <new>
#include <thread>
#include <vector>

namespace brass::backend::cpu {
namespace {

// Sum of p[0, n). The baseline SSE2 loop can be compute-bound (~12 GB/s per core), so
// AVX2 is used where the processor has it (run-time dispatch; the rest stays baseline).
#if defined(__x86_64__)
__attribute__((target("avx2"))) uint64_t sum_words_avx2(const uint64_t* p, size_t n) {
  uint64_t s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (size_t i = 0; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) s[j] += p[i + j];
  return s[0] ^ s[1] ^ s[2] ^ s[3] ^ s[4] ^ s[5] ^ s[6] ^ s[7];
}
#endif

uint64_t sum_words(const uint64_t* p, size_t n) {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2")) return sum_words_avx2(p, n);
#endif
  uint64_t s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (size_t i = 0; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) s[j] += p[i + j];
  return s[0] ^ s[1] ^ s[2] ^ s[3] ^ s[4] ^ s[5] ^ s[6] ^ s[7];
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

Result<double> read_bandwidth_gbs(int threads, size_t bytes, int passes) {
  const size_t words = bytes / 8;
  std::unique_ptr<uint64_t[]> buf;
  try {
    buf.reset(new uint64_t[words]);
  } catch (const std::bad_alloc&) {
    return Status::errorf("bandwidth probe: cannot allocate its {} MiB buffer", bytes >> 20);
  }
  const int nt = std::max(threads, 1);
  auto parallel = [&](auto&& fn) {
    std::vector<std::thread> th;
    for (int t = 0; t < nt; ++t)
      th.emplace_back([&, t] { fn(t, t * (words / nt), (t + 1 == nt) ? words : (t + 1) * (words / nt)); });
    for (auto& x : th) x.join();
  };
  // Written by the threads that read it (first touch places the pages near them).
  parallel([&](int, size_t i0, size_t i1) {
    for (size_t i = i0; i < i1; ++i) buf[i] = i * 0x9E3779B97F4A7C15ull;
  });
  std::vector<uint64_t> sink(static_cast<size_t>(nt) * 8);  // one cache line per thread
  double best = 0;
  for (int pass = 0; pass < std::max(passes, 1); ++pass) {
    const double t0 = now_s();
    parallel([&](int t, size_t i0, size_t i1) { sink[static_cast<size_t>(t) * 8] = sum_words(buf.get() + i0, i1 - i0); });
    best = std::max(best, static_cast<double>(words) * 8.0 / (now_s() - t0) / 1e9);
  }
  volatile uint64_t keep = 0;  // the sums must not be optimized away
  for (size_t t = 0; t < sink.size(); t += 8) keep = keep ^ sink[t];
  return best;
}

}  // namespace brass::backend::cpu
