// Read-bandwidth patterns on this CPU: which way of splitting a streamed read between
// threads gets the most bytes per second (the question behind the CPU backend's thread
// pool handing out contiguous per-thread slices instead of interleaved tasks).
//   cpu_bw_patterns [--threads N] [--mib M]
// A 2 MiB-aligned anonymous buffer (MADV_HUGEPAGE) of M MiB (default 1024) is summed
// with 256- or 512-bit loads: contiguous per-thread parts, per-thread parts with a
// software prefetch ahead, and chunks of C bytes dealt round-robin to the threads
// (what one shared task counter does to a mat-vec). Best of 5 passes each.
#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Sum of p[0, n) (n a multiple of 256) as 64-bit lanes; kWide: 512-bit loads, else
// 256-bit; kPf > 0: prefetch kPf bytes ahead.
template <bool kWide>
__attribute__((target("avx512f,avx512bw"))) uint64_t sum(const uint8_t* p, size_t n, size_t pf) {
  __m512i a = _mm512_setzero_si512(), b = a, c = a, d = a;
  __m256i h = _mm256_setzero_si256();  // the 256-bit loads' accumulator
  for (size_t i = 0; i + 256 <= n; i += 256) {
    if (pf)
      for (int o = 0; o < 256; o += 64) _mm_prefetch(reinterpret_cast<const char*>(p + i + pf + o), _MM_HINT_T0);
    if constexpr (kWide) {
      a = _mm512_add_epi64(a, _mm512_loadu_si512(p + i));
      b = _mm512_add_epi64(b, _mm512_loadu_si512(p + i + 64));
      c = _mm512_add_epi64(c, _mm512_loadu_si512(p + i + 128));
      d = _mm512_add_epi64(d, _mm512_loadu_si512(p + i + 192));
    } else {
      for (int o = 0; o < 256; o += 64) {
        const __m256i x = _mm256_add_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + o)),
                                           _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + o + 32)));
        h = _mm256_add_epi64(h, x);
      }
    }
  }
  alignas(64) uint64_t lanes[8];  // (not _mm512_reduce_add_epi64: GCC 12 warns inside it)
  _mm512_store_si512(lanes, _mm512_add_epi64(_mm512_add_epi64(a, b), _mm512_add_epi64(c, d)));
  alignas(32) uint64_t hl[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(hl), h);
  uint64_t s = hl[0] + hl[1] + hl[2] + hl[3];
  for (uint64_t v : lanes) s += v;
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  int n_threads = 2;
  size_t mib = 1024;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--threads") n_threads = std::max(1, std::atoi(argv[i + 1]));
    else if (k == "--mib") mib = std::max<size_t>(16, std::strtoull(argv[i + 1], nullptr, 10));
  }
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw")) {
    std::fprintf(stderr, "cpu_bw_patterns: needs AVX-512F/BW\n");
    return 1;
  }
  const size_t n = mib << 20, kAlign = 2u << 20;
  void* raw = mmap(nullptr, n + kAlign, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) {
    std::fprintf(stderr, "cpu_bw_patterns: cannot map %zu MiB\n", mib);
    return 1;
  }
  auto* buf = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(raw) + kAlign - 1) & ~(kAlign - 1));
  madvise(buf, n, MADV_HUGEPAGE);
  std::memset(buf, 1, n);
  std::vector<uint64_t> sink(n_threads);

  // Runs body(thread) on n_threads threads (the caller is thread 0); best of 5.
  auto run = [&](const std::string& name, auto body) {
    double best = 1e30;
    for (int rep = 0; rep < 5; ++rep) {
      const double t0 = now_s();
      std::vector<std::thread> th;
      for (int t = 1; t < n_threads; ++t) th.emplace_back(body, t);
      body(0);
      for (auto& x : th) x.join();
      best = std::min(best, now_s() - t0);
    }
    std::printf("%-44s %6.1f GB/s\n", name.c_str(), n / best / 1e9);
  };
  const size_t part = n / n_threads / 256 * 256;
  std::printf("%d threads, %zu MiB buffer, best of 5 (includes thread start, ~0.1 ms)\n", n_threads, mib);
  run("contiguous parts, 256-bit loads", [&](int t) { sink[t] = sum<false>(buf + t * part, part, 0); });
  run("contiguous parts, 512-bit loads", [&](int t) { sink[t] = sum<true>(buf + t * part, part, 0); });
  for (size_t pf : {1024u, 4096u, 16384u})
    run("contiguous parts, 512-bit, prefetch +" + std::to_string(pf),
        [&](int t) { sink[t] = sum<true>(buf + t * part, part, pf); });
  for (size_t ch : {16384u, 65536u, 262144u, 1048576u})
    run("round-robin chunks of " + std::to_string(ch) + " B, 512-bit", [&](int t) {
      uint64_t s = 0;
      for (size_t o = t * ch; o + ch <= n; o += n_threads * ch) s += sum<true>(buf + o, ch, 0);
      sink[t] = s;
    });
  uint64_t total = 0;
  for (uint64_t s : sink) total += s;
  std::printf("(checksum %llu)\n", static_cast<unsigned long long>(total));
  munmap(raw, n + kAlign);
  return 0;
}
