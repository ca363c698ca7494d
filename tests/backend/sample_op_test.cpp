// The CPU backend's sample op (backend::sample_row per row) against a naive reference
// written here: the kept set by sorting everything in double precision (top-k, softmax,
// top-p cumulative sum, min-p ratio), then the race score s_i - log(E_i) over it with the
// shared noise (sample_noise.h is the definition of the noise; the kept set and the argmax
// are recomputed independently). Cases whose top-p / min-p decision lies within 1e-6 of the
// threshold are skipped (float vs double). Plus ties: duplicated logits at the top-k and
// top-p cuts keep the lower ids only; temperature 0 is argmax with ties to the lower id.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <vector>

#include "backend/backend.h"
#include "backend/sampling.h"
#include "test_rng.h"

namespace brass::backend {
namespace {

using testing::Rng;

// Kept ids by the naive definition; *ambiguous when a threshold decision is within 1e-6.
std::vector<int32_t> naive_kept(const std::vector<float>& x, const SampleParams& p, bool* ambiguous) {
  *ambiguous = false;
  std::vector<int32_t> idx(x.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return x[a] > x[b]; });
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < idx.size()) idx.resize(p.top_k);
  const double mx = static_cast<double>(x[idx[0]]) / p.temperature;
  std::vector<double> w;
  double z = 0;
  for (int32_t i : idx) {
    w.push_back(std::exp(static_cast<double>(x[i]) / p.temperature - mx));
    z += w.back();
  }
  size_t keep = idx.size();
  if (p.top_p < 1.0f) {
    double cum = 0;
    for (size_t j = 0; j < idx.size(); ++j) {
      cum += w[j] / z;
      if (std::fabs(cum - p.top_p) < 1e-6) *ambiguous = true;
      if (cum >= p.top_p) {
        keep = j + 1;
        break;
      }
    }
  }
  std::vector<int32_t> out;
  for (size_t j = 0; j < keep; ++j) {
    if (p.min_p > 0.0f) {
      if (std::fabs(w[j] - p.min_p) < 1e-6 * p.min_p + 1e-12) *ambiguous = true;
      if (w[j] < p.min_p) continue;
    }
    out.push_back(idx[j]);
  }
  return out;
}

int32_t naive_race(const std::vector<float>& x, const std::vector<int32_t>& kept, const SampleParams& p) {
  const uint64_t st = sample::stream(p.seed, p.counter);
  const float inv_t = 1.0f / p.temperature;
  int32_t best = -1;
  float bs = 0;
  for (int32_t i : kept) {
    const float sc = x[i] * inv_t - std::log(sample::exp1(sample::token_bits(st, i)));
    if (best < 0 || sc > bs || (sc == bs && i < best)) {
      best = i;
      bs = sc;
    }
  }
  return best;
}

TEST(SampleOp, CpuOpMatchesNaiveKeptSetAndRace) {
  Rng rng;
  SEED_TRACE(rng);
  auto be = make_cpu_backend(1);
  int checked = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int n = rng.integer(1, 2500);
    auto x = rng.vec(static_cast<size_t>(n), -4.0f * rng.uni(0.2f, 2.0f), 4.0f * rng.uni(0.2f, 2.0f));
    SampleParams p;
    p.temperature = rng.uni(0.3f, 2.0f);
    const int ks[] = {0, 1, 40, n - 1, n};
    p.top_k = ks[rng.integer(0, 4)];
    const float ps[] = {1.0f, 0.9f, 0.5f, 1e-6f};
    p.top_p = ps[rng.integer(0, 3)];
    const float mps[] = {0.0f, 0.05f, 0.5f};
    p.min_p = mps[rng.integer(0, 2)];
    p.seed = (static_cast<uint64_t>(rng.gen()) << 32) | rng.gen();
    p.counter = static_cast<uint64_t>(rng.integer(0, 1000000));
    bool ambiguous = false;
    const auto kept = naive_kept(x, p, &ambiguous);
    if (ambiguous) continue;
    int32_t got = -1;
    be->sample({.x = x.data(), .params = &p, .out = &got, .n_rows = 1, .n = n});
    const int32_t want = naive_race(x, kept, p);
    ASSERT_EQ(got, want) << "trial " << trial << " n " << n << " T " << p.temperature << " k " << p.top_k << " p "
                         << p.top_p << " min_p " << p.min_p << " kept " << kept.size();
    ++checked;
  }
  EXPECT_GT(checked, 250);
}

TEST(SampleOp, TiesKeepLowerIds) {
  Rng rng;
  SEED_TRACE(rng);
  auto be = make_cpu_backend(1);
  const int n = 1000;
  auto x = rng.vec(n, -8.0f, -4.0f);
  // Five tokens share the top logit; top-k 3 must keep the three lowest ids of them.
  std::vector<int> tied;
  while (tied.size() < 5) {
    const int i = rng.integer(0, n - 1);
    if (std::find(tied.begin(), tied.end(), i) == tied.end()) tied.push_back(i);
  }
  for (int i : tied) x[i] = 5.0f;
  std::sort(tied.begin(), tied.end());
  SampleParams p;
  p.temperature = 1.0f;
  p.top_k = 3;
  p.seed = rng.gen();
  std::set<int32_t> seen;
  for (uint64_t c = 0; c < 400; ++c) {
    p.counter = c;
    int32_t t = -1;
    be->sample({.x = x.data(), .params = &p, .out = &t, .n_rows = 1, .n = n});
    seen.insert(t);
  }
  EXPECT_EQ(seen, (std::set<int32_t>{tied[0], tied[1], tied[2]}));
  // top-p: the five tied tokens hold almost all the mass; p = 0.3 needs two of them
  // (0.2 each): the two lowest ids.
  p.top_k = 0;
  p.top_p = 0.3f;
  seen.clear();
  for (uint64_t c = 0; c < 400; ++c) {
    p.counter = c;
    int32_t t = -1;
    be->sample({.x = x.data(), .params = &p, .out = &t, .n_rows = 1, .n = n});
    seen.insert(t);
  }
  EXPECT_EQ(seen, (std::set<int32_t>{tied[0], tied[1]}));
  // Greedy: the lowest tied id.
  p.temperature = 0.0f;
  int32_t t = -1;
  be->sample({.x = x.data(), .params = &p, .out = &t, .n_rows = 1, .n = n});
  EXPECT_EQ(t, tied[0]);
}

}  // namespace
}  // namespace brass::backend
