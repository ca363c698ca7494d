// Sampler tests. Every filter's kept set is compared with a naive, sort-everything
// implementation written here in double precision; the sampler's draws are checked with a
// chi-square test against the analytically filtered distribution (and the same test must
// reject the unfiltered distribution, so it has power); seeds must reproduce exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "backend/sampling.h"
#include "runtime/sampler.h"

namespace brass::runtime {
namespace {

uint64_t fresh_seed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

std::vector<float> random_logits(std::mt19937_64& rng, int n, float scale) {
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> l(n);
  for (auto& x : l) x = nd(rng);
  return l;
}

// Naive reference: full sort at every step, doubles throughout. Returns token -> prob.
// Sets *ambiguous when the top-p cut lands within 1e-5 of p (float vs double could differ).
std::map<int32_t, double> naive_distribution(const std::vector<float>& logits,
                                             const SamplerParams& sp, bool* ambiguous) {
  *ambiguous = false;
  std::vector<int32_t> idx(logits.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) {
    if (logits[a] != logits[b]) return logits[a] > logits[b];
    return a < b;
  });
  if (sp.top_k > 0 && static_cast<size_t>(sp.top_k) < idx.size()) idx.resize(sp.top_k);
  std::vector<double> z;
  for (int32_t t : idx) z.push_back(static_cast<double>(logits[t]) / sp.temperature);
  const double mx = *std::max_element(z.begin(), z.end());
  double s = 0;
  for (double v : z) s += std::exp(v - mx);
  std::vector<std::pair<int32_t, double>> probs;
  for (size_t i = 0; i < idx.size(); ++i) probs.push_back({idx[i], std::exp(z[i] - mx) / s});
  // idx is already sorted by logit, hence by probability.
  if (sp.top_p < 1.0f) {
    double cum = 0;
    size_t keep = probs.size();
    for (size_t i = 0; i < probs.size(); ++i) {
      cum += probs[i].second;
      if (std::fabs(cum - sp.top_p) < 1e-5) *ambiguous = true;
      if (cum >= sp.top_p) {
        keep = i + 1;
        break;
      }
    }
    probs.resize(keep);
  }
  if (sp.min_p > 0.0f) {
    const double pmax = probs.front().second;
    std::vector<std::pair<int32_t, double>> kept;
    for (auto& pr : probs) {
      if (std::fabs(pr.second - sp.min_p * pmax) < 1e-7) *ambiguous = true;
      if (pr.second >= sp.min_p * pmax) kept.push_back(pr);
    }
    probs = kept;
  }
  double tot = 0;
  for (auto& pr : probs) tot += pr.second;
  std::map<int32_t, double> out;
  for (auto& pr : probs) out[pr.first] = pr.second / tot;
  return out;
}

// Naive penalties: walk the window position by position.
std::vector<float> naive_penalties(std::vector<float> logits, const std::vector<int32_t>& hist,
                                   const SamplerParams& sp) {
  size_t start = 0;
  if (sp.penalty_last_n == 0) return logits;
  if (sp.penalty_last_n > 0 && hist.size() > static_cast<size_t>(sp.penalty_last_n)) {
    start = hist.size() - sp.penalty_last_n;
  }
  std::vector<int32_t> window(hist.begin() + start, hist.end());
  std::set<int32_t> distinct(window.begin(), window.end());
  for (int32_t t : distinct) {
    const auto count = std::count(window.begin(), window.end(), t);
    double l = logits[t];
    if (l > 0) l /= sp.repetition_penalty; else l *= sp.repetition_penalty;
    l -= sp.presence_penalty;
    l -= sp.frequency_penalty * static_cast<double>(count);
    logits[t] = static_cast<float>(l);
  }
  return logits;
}

TEST(Sampler, FilteredSetMatchesNaive) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  int checked = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int n = 50 + static_cast<int>(rng() % 3000);
    auto logits = random_logits(rng, n, 1.0f + static_cast<float>(rng() % 5));
    SamplerParams sp;
    sp.temperature = 0.3f + static_cast<float>(rng() % 1000) / 500.0f;
    sp.top_k = (rng() % 3 == 0) ? 0 : 1 + static_cast<int>(rng() % (n + 20));
    sp.top_p = (rng() % 3 == 0) ? 1.0f : 0.05f + static_cast<float>(rng() % 950) / 1000.0f;
    sp.min_p = (rng() % 3 == 0) ? 0.0f : static_cast<float>(rng() % 500) / 1000.0f;
    bool ambiguous = false;
    const auto want = naive_distribution(logits, sp, &ambiguous);
    if (ambiguous) continue;
    const auto got = sampling::filtered_distribution(logits, sp);
    SCOPED_TRACE(::testing::Message() << "trial " << trial << " n " << n << " k " << sp.top_k
                                      << " p " << sp.top_p << " min_p " << sp.min_p << " T "
                                      << sp.temperature);
    ASSERT_EQ(got.size(), want.size());
    double total = 0;
    for (const auto& c : got) {
      auto it = want.find(c.token);
      ASSERT_NE(it, want.end()) << "token " << c.token << " kept but should be filtered";
      EXPECT_NEAR(c.p, it->second, 2e-5 + 1e-4 * it->second);
      total += c.p;
    }
    EXPECT_NEAR(total, 1.0, 1e-4);
    ++checked;
  }
  EXPECT_GT(checked, 350);
}

TEST(Sampler, EachFilterAloneMatchesNaive) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  auto logits = random_logits(rng, 5000, 3.0f);
  for (int which = 0; which < 3; ++which) {
    SamplerParams sp;
    if (which == 0) sp.top_k = 37;
    if (which == 1) sp.top_p = 0.8f;
    if (which == 2) sp.min_p = 0.02f;
    bool ambiguous = false;
    const auto want = naive_distribution(logits, sp, &ambiguous);
    const auto got = sampling::filtered_distribution(logits, sp);
    std::set<int32_t> got_set;
    for (const auto& c : got) got_set.insert(c.token);
    std::set<int32_t> want_set;
    for (const auto& [t, p] : want) want_set.insert(t);
    if (!ambiguous) {
      EXPECT_EQ(got_set, want_set) << "filter " << which;
    }
    if (which == 0) {
      EXPECT_EQ(got_set.size(), 37u);
    }
    EXPECT_LT(got_set.size(), 5000u) << "filter " << which << " removed nothing";
  }
}

TEST(Sampler, PenaltiesMatchNaive) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 100 + static_cast<int>(rng() % 500);
    auto logits = random_logits(rng, n, 4.0f);
    std::vector<int32_t> hist(rng() % 300);
    for (auto& t : hist) t = static_cast<int32_t>(rng() % 60);  // many repeats
    SamplerParams sp;
    sp.repetition_penalty = 1.0f + static_cast<float>(rng() % 100) / 100.0f;
    sp.presence_penalty = static_cast<float>(rng() % 100) / 50.0f;
    sp.frequency_penalty = static_cast<float>(rng() % 100) / 100.0f;
    sp.penalty_last_n = static_cast<int32_t>(rng() % 4) == 0 ? -1 : static_cast<int32_t>(rng() % 128);
    auto got = logits;
    sampling::apply_penalties(got, hist, sp);
    const auto want = naive_penalties(logits, hist, sp);
    for (int i = 0; i < n; ++i) ASSERT_NEAR(got[i], want[i], 1e-4f) << "token " << i << " trial " << trial;
  }
}

TEST(Sampler, PenaltyHandComputed) {
  // logits: token 0 = 2, token 1 = -2, token 2 = 1; history 0,0,1 ; r = 2, presence .5, freq .25
  std::vector<float> l = {2.0f, -2.0f, 1.0f};
  SamplerParams sp;
  sp.repetition_penalty = 2.0f;
  sp.presence_penalty = 0.5f;
  sp.frequency_penalty = 0.25f;
  sp.penalty_last_n = -1;
  std::vector<int32_t> h = {0, 0, 1};
  sampling::apply_penalties(l, h, sp);
  EXPECT_FLOAT_EQ(l[0], 2.0f / 2 - 0.5f - 0.5f);
  EXPECT_FLOAT_EQ(l[1], -2.0f * 2 - 0.5f - 0.25f);
  EXPECT_FLOAT_EQ(l[2], 1.0f);
  // window of 1: only the last token (1) counts
  std::vector<float> l2 = {2.0f, -2.0f, 1.0f};
  sp.penalty_last_n = 1;
  sampling::apply_penalties(l2, h, sp);
  EXPECT_FLOAT_EQ(l2[0], 2.0f);
  EXPECT_FLOAT_EQ(l2[1], -4.75f);
}

double chi_square_critical(int df, double z) {
  // Wilson-Hilferty approximation of the chi-square quantile.
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

TEST(Sampler, ChiSquareAgainstFilteredDistribution) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  const int n = 24;
  std::vector<int32_t> hist = {3, 3, 5};
  SamplerParams sp;
  sp.temperature = 0.8f;
  sp.top_k = 16;
  sp.top_p = 0.93f;
  sp.min_p = 0.03f;
  sp.repetition_penalty = 1.3f;
  sp.presence_penalty = 0.2f;
  sp.seed = rng();
  // A fresh row until the filters keep >= 2 tokens away from a cut (about 1 row in 15
  // keeps a single dominant token: no distribution to test).
  bool ambiguous = false;
  std::vector<float> logits, pen;
  std::map<int32_t, double> want;
  for (int attempt = 0; attempt < 100; ++attempt) {
    logits = random_logits(rng, n, 1.5f);
    pen = naive_penalties(logits, hist, sp);
    want = naive_distribution(pen, sp, &ambiguous);
    if (!ambiguous && want.size() >= 2) break;
  }
  ASSERT_FALSE(ambiguous) << "rerun: cut landed on a boundary";
  ASSERT_GE(want.size(), 2u);

  Sampler s(sp);
  const int draws = 100000;
  std::vector<int> counts(n, 0);
  for (int i = 0; i < draws; ++i) ++counts[s.sample(logits, hist).token];

  double chi = 0;
  for (const auto& [t, p] : want) {
    const double e = p * draws;
    chi += (counts[t] - e) * (counts[t] - e) / e;
  }
  for (int t = 0; t < n; ++t) {
    if (!want.count(t)) {
      EXPECT_EQ(counts[t], 0) << "filtered token " << t << " was drawn";
    }
  }
  const int df = static_cast<int>(want.size()) - 1;
  const double crit = chi_square_critical(df, 3.719);  // p = 1e-4
  EXPECT_LT(chi, crit) << "df " << df;

  // Power: the same statistic against the unfiltered softmax must be far above the bound.
  SamplerParams plain = sp;
  plain.top_k = 0;
  plain.top_p = 1.0f;
  plain.min_p = 0.0f;
  const auto wrong = naive_distribution(pen, plain, &ambiguous);
  double chi_wrong = 0;
  for (const auto& [t, p] : wrong) {
    const double e = p * draws;
    chi_wrong += (counts[t] - e) * (counts[t] - e) / e;
  }
  EXPECT_GT(chi_wrong, chi_square_critical(static_cast<int>(wrong.size()) - 1, 3.719));
}

TEST(Sampler, SameSeedSameTokensDifferentSeedDiffers) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  auto logits = random_logits(rng, 2000, 1.0f);
  SamplerParams sp;
  sp.temperature = 1.0f;
  sp.seed = rng();
  auto run = [&](uint64_t s) {
    SamplerParams p = sp;
    p.seed = s;
    Sampler smp(p);
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) out.push_back(smp.sample(logits, out).token);
    return out;
  };
  EXPECT_EQ(run(sp.seed), run(sp.seed));
  EXPECT_NE(run(sp.seed), run(sp.seed + 1));
}

TEST(Sampler, GreedyIsArgmaxAfterPenalties) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  auto logits = random_logits(rng, 3000, 2.0f);
  SamplerParams sp;
  sp.temperature = 0.0f;
  Sampler s(sp);
  const int32_t best = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  EXPECT_EQ(s.sample(logits, {}).token, best);
  // A huge presence penalty on the best token moves greedy to the runner-up.
  sp.presence_penalty = 1000.0f;
  sp.penalty_last_n = -1;
  Sampler s2(sp);
  std::vector<int32_t> hist = {best};
  auto copy = logits;
  copy[best] = -1e30f;
  const int32_t second = static_cast<int32_t>(std::max_element(copy.begin(), copy.end()) - copy.begin());
  EXPECT_EQ(s2.sample(logits, hist).token, second);
}

TEST(Sampler, LogprobsAreRawLogSoftmax) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  auto logits = random_logits(rng, 1000, 3.0f);
  SamplerParams sp;
  sp.temperature = 0.5f;
  sp.n_logprobs = 5;
  sp.seed = rng();
  Sampler s(sp);
  const auto r = s.sample(logits, {});
  double mx = *std::max_element(logits.begin(), logits.end());
  double z = 0;
  for (float l : logits) z += std::exp(l - mx);
  const double lz = mx + std::log(z);
  EXPECT_NEAR(r.logprob, logits[r.token] - lz, 1e-4);
  ASSERT_EQ(r.top.size(), 5u);
  std::vector<int32_t> idx(logits.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(r.top[i].token, idx[i]);
    EXPECT_NEAR(r.top[i].logprob, logits[idx[i]] - lz, 1e-4);
  }
}

// The race's noise: V in (0, 1), E = -log(1 - V) ~ Exp(1) (mean 1, P(E > 1) = 1/e), and
// the bits of neighbouring (seed, counter, token) triples look independent (mean of V).
TEST(Sampler, RaceNoiseIsUniformAndExponential) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  double mn = 1, mx = 0, sum_v = 0, sum_e = 0, above1 = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const uint64_t st = backend::sample::stream(seed, static_cast<uint64_t>(i / 100));
    const uint64_t bits = backend::sample::token_bits(st, i % 100);
    const double v = backend::sample::uniform_open(bits);
    ASSERT_GT(v, 0.0);
    ASSERT_LT(v, 1.0);
    const double e = backend::sample::exp1(bits);
    EXPECT_NEAR(e, -std::log1p(-v), 1e-6 * (1 + e));
    mn = std::min(mn, v);
    mx = std::max(mx, v);
    sum_v += v;
    sum_e += e;
    above1 += e > 1.0;
  }
  EXPECT_NEAR(sum_v / n, 0.5, 0.005);
  EXPECT_NEAR(sum_e / n, 1.0, 0.01);
  EXPECT_NEAR(above1 / n, std::exp(-1.0), 0.005);
  EXPECT_LT(mn, 1e-4);
  EXPECT_GT(mx, 1 - 1e-4);
}

// The race draw against filtered_distribution's probabilities (an independent definition:
// sort, softmax, cumulative sum): random small vocabularies and random filter settings,
// draws at counters 0..N-1 of a random seed, chi-square at p = 1e-4 (each case can fail,
// with power: the unfiltered softmax must be rejected when the filters removed anything).
// Every drawn token must be in the kept set.
TEST(Sampler, RaceDrawFollowsFilteredDistribution) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  int cases = 0, powered = 0;
  for (int trial = 0; trial < 60 && cases < 12; ++trial) {
    const int n = 8 + static_cast<int>(rng() % 40);
    auto logits = random_logits(rng, n, 0.5f + static_cast<float>(rng() % 20) / 10.0f);
    SamplerParams sp;
    sp.temperature = 0.3f + static_cast<float>(rng() % 170) / 100.0f;
    sp.top_k = rng() % 3 == 0 ? 0 : 1 + static_cast<int>(rng() % n);
    sp.top_p = rng() % 3 == 0 ? 1.0f : 0.3f + static_cast<float>(rng() % 69) / 100.0f;
    sp.min_p = rng() % 3 == 0 ? 0.0f : static_cast<float>(rng() % 20) / 100.0f;
    sp.seed = rng();
    bool ambiguous = false;
    naive_distribution(logits, sp, &ambiguous);
    if (ambiguous) continue;
    const auto dist = sampling::filtered_distribution(logits, sp);
    if (dist.size() < 2) continue;
    SCOPED_TRACE(::testing::Message() << "trial " << trial << " n " << n << " T " << sp.temperature << " k "
                                      << sp.top_k << " p " << sp.top_p << " min_p " << sp.min_p);
    ++cases;
    std::map<int32_t, double> want;
    for (const auto& c : dist) want[c.token] = c.p;
    const int draws = 60000;
    std::vector<int> counts(n, 0);
    Sampler s(sp);
    for (int i = 0; i < draws; ++i) {
      ASSERT_EQ(s.draw_counter(), static_cast<uint64_t>(i));
      const int32_t t = s.sample(logits, {}).token;
      ASSERT_TRUE(want.count(t)) << "token " << t << " is outside the kept set";
      ++counts[t];
    }
    double chi = 0;
    for (const auto& [t, p] : want) chi += (counts[t] - p * draws) * (counts[t] - p * draws) / (p * draws);
    EXPECT_LT(chi, chi_square_critical(static_cast<int>(want.size()) - 1, 3.719));
    if (static_cast<int>(want.size()) < n) {  // power: the unfiltered softmax must not fit
      SamplerParams plain = sp;
      plain.top_k = 0;
      plain.top_p = 1.0f;
      plain.min_p = 0.0f;
      const auto all = sampling::filtered_distribution(logits, plain);
      double chi_all = 0;
      for (const auto& c : all) {
        const double e = c.p * draws;
        if (e > 5) chi_all += (counts[c.token] - e) * (counts[c.token] - e) / e;
      }
      if (chi_all > chi_square_critical(n - 1, 3.719)) ++powered;
    }
  }
  EXPECT_GE(cases, 8);
  EXPECT_GE(powered, 1);
}

// Larger rows: every draw (many counters) lands in filtered_distribution's kept set, and
// one draw equals backend::sample_row with the Sampler's draw parameters; the same seed
// and counter give the same token, another counter mostly another one.
TEST(Sampler, DrawsStayInKeptSetAndReplayByCounter) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  int checked = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const int n = 500 + static_cast<int>(rng() % 4000);
    auto logits = random_logits(rng, n, 1.0f + static_cast<float>(rng() % 4));
    SamplerParams sp;
    sp.temperature = 0.3f + static_cast<float>(rng() % 170) / 100.0f;
    sp.top_k = rng() % 3 == 0 ? 0 : 1 + static_cast<int>(rng() % 200);
    sp.top_p = rng() % 3 == 0 ? 1.0f : 0.5f + static_cast<float>(rng() % 50) / 100.0f;
    sp.min_p = rng() % 3 == 0 ? 0.0f : static_cast<float>(rng() % 10) / 100.0f;
    sp.seed = rng();
    bool ambiguous = false;
    naive_distribution(logits, sp, &ambiguous);
    if (ambiguous) continue;
    ++checked;
    std::set<int32_t> kept;
    float p_max = 0;
    for (const auto& c : sampling::filtered_distribution(logits, sp)) {
      kept.insert(c.token);
      p_max = std::max(p_max, c.p);
    }
    Sampler s(sp);
    std::set<int32_t> seen;
    for (int i = 0; i < 300; ++i) {
      const backend::SampleParams dp = s.draw_params();
      ASSERT_EQ(dp.counter, static_cast<uint64_t>(i));
      const int32_t t = s.sample(logits, {}).token;
      ASSERT_TRUE(kept.count(t)) << "trial " << trial << " draw " << i << " token " << t;
      ASSERT_EQ(backend::sample_row(logits, dp), t);
      seen.insert(t);
    }
    // (P(300 draws of one token) <= 0.95^300 = 2e-7 when no token holds 95%.)
    if (p_max < 0.95f) EXPECT_GE(seen.size(), 2u) << "300 draws, one token: counters do not change the noise";
  }
  EXPECT_GE(checked, 30);
}

// Draws made elsewhere (a backend, through draw_params + skip_draw) interleave with host
// draws: the token sequence equals one Sampler's all-host sequence.
TEST(Sampler, HostAndDeviceDrawsInterleave) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  SamplerParams sp;
  sp.temperature = 1.0f;
  sp.top_p = 0.95f;
  sp.seed = rng();
  Sampler host(sp), mixed(sp);
  for (int i = 0; i < 200; ++i) {
    auto logits = random_logits(rng, 300, 1.0f);
    const int32_t want = host.sample(logits, {}).token;
    int32_t got;
    if (rng() % 2) {
      got = backend::sample_row(logits, mixed.draw_params());
      mixed.skip_draw();
    } else {
      got = mixed.sample(logits, {}).token;
    }
    ASSERT_EQ(got, want) << "draw " << i;
  }
  EXPECT_EQ(mixed.draw_counter(), 200u);
}

// Greedy draws consume no counter.
TEST(Sampler, GreedyConsumesNoDraw) {
  SamplerParams sp;
  sp.temperature = 0.0f;
  Sampler s(sp);
  std::vector<float> l = {0.5f, 2.0f, -1.0f};
  EXPECT_EQ(s.sample(l, {}).token, 1);
  EXPECT_EQ(s.draw_counter(), 0u);
}

}  // namespace
}  // namespace brass::runtime
