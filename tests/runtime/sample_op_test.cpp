// The backend sample op (CPU reference backend) against the runtime Sampler with
// penalties off: random rows, random temperature / top-k / top-p / min-p, several rows per
// op call with per-row parameters; the op's token equals the Sampler's draw with the same
// seed and draw counter, token for token (the engine relies on this to move a sequence's
// draws between the host and the backend).
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "backend/backend.h"
#include "runtime/sampler.h"

namespace brass::runtime {
namespace {

TEST(SampleOp, CpuBackendEqualsSampler) {
  std::random_device rd;
  const uint64_t seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  auto be = backend::make_cpu_backend(1);
  for (int call = 0; call < 20; ++call) {
    const int64_t n = 1 + static_cast<int64_t>(rng() % 3000);
    const int64_t rows = 1 + static_cast<int64_t>(rng() % 6);
    std::normal_distribution<float> nd(0.0f, 1.0f + static_cast<float>(rng() % 4));
    std::vector<float> x(static_cast<size_t>(rows * n));
    for (auto& v : x) v = nd(rng);
    std::vector<SamplerParams> sps(static_cast<size_t>(rows));
    std::vector<Sampler> samplers;
    std::vector<backend::SampleParams> params;
    for (auto& sp : sps) {
      sp.temperature = rng() % 8 == 0 ? 0.0f : 0.3f + static_cast<float>(rng() % 170) / 100.0f;
      const int64_t ks[] = {0, 1, 40, n - 1, n};
      sp.top_k = static_cast<int32_t>(ks[rng() % 5]);
      const float ps[] = {1.0f, 0.9f, 0.5f, 1e-6f};
      sp.top_p = ps[rng() % 4];
      const float mps[] = {0.0f, 0.05f, 0.5f};
      sp.min_p = mps[rng() % 3];
      sp.seed = rng();
      samplers.emplace_back(sp);
      for (uint64_t skip = rng() % 5; skip > 0; --skip) samplers.back().skip_draw();  // some later counter
      params.push_back(samplers.back().draw_params());
    }
    std::vector<int32_t> out(static_cast<size_t>(rows), -1);
    be->sample({.x = x.data(), .params = params.data(), .out = out.data(), .n_rows = rows, .n = n});
    for (int64_t r = 0; r < rows; ++r) {
      const std::span<const float> row(x.data() + r * n, static_cast<size_t>(n));
      EXPECT_EQ(out[r], samplers[r].sample(row, {}).token)
          << "call " << call << " row " << r << " n " << n << " T " << sps[r].temperature << " k " << sps[r].top_k
          << " p " << sps[r].top_p << " min_p " << sps[r].min_p;
    }
  }
}

}  // namespace
}  // namespace brass::runtime
