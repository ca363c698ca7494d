// CPU backend kernel bench: decode mat-vec (and prefill mat-mat) at gpt-oss-20b shapes
// through the Backend ops, per SIMD level, against a measured read-bandwidth floor.
//   cpu_kernels_bench [--threads N] [--levels ref,avx2,avx512] [--prefill N] [--reps N]
// The floor: N threads summing disjoint halves of a 2 GB buffer (best of 5 passes).
// Weights are synthetic (random bytes with sane scales) and rotated over copies totalling
// >= 512 MB so every call streams from DRAM, as in a real decode step.
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/bandwidth_probe.h"
#include "backend/cpu/simd_backend.h"
#include "core/dtype.h"

using namespace brass;
using namespace brass::backend;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Process CPU seconds: on a machine shared with other jobs, wall time of a long op
// includes preemption; CPU time / threads is what it would take with the cores to itself
// (memory stalls count as CPU time; the pool's idle waits do not).
double cpu_s() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

double read_bandwidth_gbs(int threads) {
  auto bw = backend::cpu::read_bandwidth_gbs(threads);
  return bw.is_ok() ? bw.value() : 0.0;
}

// Random-byte weights of `type` with in-range scales, `copies` copies of `rows` rows.
std::vector<uint8_t> make_weights(DType type, int64_t n_in, int64_t rows, int copies) {
  const int64_t rb = row_bytes(type, n_in);
  std::vector<uint8_t> w(static_cast<size_t>(rb * rows) * copies);
  std::mt19937_64 g(42);
  for (size_t i = 0; i + 8 <= w.size(); i += 8) {
    const uint64_t v = g();
    std::memcpy(&w[i], &v, 8);
  }
  const int64_t bb = traits(type).block_bytes, nblk = static_cast<int64_t>(w.size()) / bb;
  for (int64_t b = 0; b < nblk; ++b) {
    uint8_t* p = &w[b * bb];
    if (type == DType::Q8_0) {
      const uint16_t d = 0x2000 + (b & 0xff);  // ~2^-7 f16
      std::memcpy(p, &d, 2);
    } else if (type == DType::MXFP4) {
      p[0] = static_cast<uint8_t>(120 + (b % 8));
    }
  }
  return w;
}

struct Shape {
  const char* name;
  DType type;
  int64_t n_in, n_out;
  bool moe;  // 4 of 32 experts: gate+up (n_in -> n_out) and down (n_out -> n_in)
};

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, reps = 20;
  int64_t prefill = 0;
  bool hot = false;  // --hot 1: one copy of the weights (cache-resident when small: compute rate)
  std::string levels = "ref,avx2,avx512";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--threads") threads = std::atoi(argv[i + 1]);
    else if (a == "--levels") levels = argv[i + 1];
    else if (a == "--prefill") prefill = std::atoll(argv[i + 1]);
    else if (a == "--reps") reps = std::atoi(argv[i + 1]);
    else if (a == "--hot") hot = std::atoi(argv[i + 1]) != 0;
  }
  const double floor_gbs = read_bandwidth_gbs(threads);
  fmt::print("read bandwidth floor: {:.1f} GB/s ({} threads, 2 GB buffer, best of 5)\n", floor_gbs, threads);

  const Shape shapes[] = {
      {"attn_q   2880->4096 q8_0", DType::Q8_0, 2880, 4096, false},
      {"attn_k/v 2880->512  q8_0", DType::Q8_0, 2880, 512, false},
      {"attn_o   4096->2880 q8_0", DType::Q8_0, 4096, 2880, false},
      {"moe 4/32 2880x2880 mxfp4 ", DType::MXFP4, 2880, 2880, true},
      {"one expt 2880->2880 mxfp4", DType::MXFP4, 2880, 2880, false},
      {"output 2880->201088 q8_0", DType::Q8_0, 2880, 201088, false},
  };
  const int64_t n_tok = prefill > 0 ? prefill : 1;
  for (const Shape& s : shapes) {
    const int64_t n_exp = s.moe ? 32 : 1;
    const int64_t mat_bytes = row_bytes(s.type, s.n_in) * s.n_out;
    const int64_t total = mat_bytes * n_exp;
    const int copies = static_cast<int>(std::max<int64_t>(1, (int64_t{512} << 20) / total + 1));
    const int copies_used = hot ? 1 : copies;
    if (s.moe && prefill > 0) continue;  // MoE prefill: see the end-to-end driver
    if (prefill > 0 && s.n_out > 10000) continue;
    std::vector<uint8_t> w = make_weights(s.type, s.n_in, s.n_out * n_exp, copies);
    std::vector<uint8_t> w2 = s.moe ? make_weights(s.type, s.n_out, s.n_in * n_exp, copies) : std::vector<uint8_t>();
    std::vector<float> x(n_tok * std::max(s.n_in, s.n_out)), y(n_tok * std::max(s.n_in, s.n_out));
    std::mt19937 g(1);
    for (auto& v : x) v = std::uniform_real_distribution<float>(-1, 1)(g);
    int64_t touched = s.moe ? 3 * 4 * mat_bytes : mat_bytes;
    double flop = 2.0 * s.n_in * s.n_out * n_tok * (s.moe ? 12 : 1);
    for (size_t p = 0; p <= levels.size();) {
      size_t q = levels.find(',', p);
      if (q == std::string::npos) q = levels.size();
      const std::string lv = levels.substr(p, q - p);
      p = q + 1;
      cpu::KernelLevel level = lv == "avx512" ? cpu::KernelLevel::Avx512
                               : lv == "avx2" ? cpu::KernelLevel::Avx2
                                              : cpu::KernelLevel::Ref;
      if (!cpu::kernel_level_supported(level)) continue;
      auto be = cpu::make_cpu_backend_level(threads, level);
      const int r = (level == cpu::KernelLevel::Ref || prefill > 0) ? std::max(2, reps / 8) : reps;
      double best = 1e30, best_cpu = 1e30;
      std::vector<int32_t> ids(n_tok * 4);
      std::vector<float> wts(n_tok * 4, 0.25f);
      for (int it = 0; it < r; ++it) {
        const int c = it % copies_used;
        const double t0 = now_s(), c0 = cpu_s();
        if (s.moe) {
          for (int64_t t = 0; t < n_tok; ++t)
            for (int j = 0; j < 4; ++j) ids[t * 4 + j] = static_cast<int32_t>((it * 4 + j * 7) % 32);
          WeightView gv, dv;
          gv.type = dv.type = s.type;
          gv.data = w.data() + c * total;
          gv.ne[0] = s.n_in, gv.ne[1] = s.n_out, gv.ne[2] = 32;
          dv.data = w2.data() + c * total;
          dv.ne[0] = s.n_out, dv.ne[1] = s.n_in, dv.ne[2] = 32;
          WeightView uv = gv;
          uv.data = w.data() + ((c + 1) % copies_used) * total;
          be->moe({.x = x.data(), .ids = ids.data(), .weights = wts.data(), .gate = gv, .up = uv, .down = dv,
                   .out = y.data(), .n_tok = n_tok, .k = 4});
        } else {
          WeightView v;
          v.type = s.type;
          v.data = w.data() + c * total;
          v.ne[0] = s.n_in, v.ne[1] = s.n_out;
          be->matmul({.w = v, .x = x.data(), .y = y.data(), .n_tok = n_tok});
        }
        best = std::min(best, now_s() - t0);
        best_cpu = std::min(best_cpu, (cpu_s() - c0) / threads);
      }
      const double gbs = touched / best / 1e9;
      fmt::print("{} [{:6}] n_tok {:3}: wall {:8.3f} ms {:6.1f} GB/s {:5.1f}% of floor {:7.1f} GFLOP/s | cpu/thr {:8.3f} ms {:6.1f} GB/s {:7.1f} GFLOP/s\n",
                 s.name, lv, n_tok, best * 1e3, gbs, 100 * gbs / floor_gbs, flop / best / 1e9, best_cpu * 1e3,
                 touched / best_cpu / 1e9, flop / best_cpu / 1e9);
    }
  }
  return 0;
}
