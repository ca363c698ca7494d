// The reference token draw (see sampling.h): top-k by nth_element, top-p by a growing
// partial sort (the cut is usually within the first few hundred tokens of 200k), min-p
// and the race over the survivors.
#include "backend/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace brass::backend {

int32_t argmax_row(std::span<const float> x) {
  int64_t best = -1;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i])) continue;
    if (best < 0 || x[i] > x[best]) best = static_cast<int64_t>(i);  // strict '>': lower index wins ties
  }
  return static_cast<int32_t>(best < 0 ? 0 : best);
}

int32_t sample_row(std::span<const float> x, const SampleParams& p, SampleTrace* trace) {
  const int64_t n = static_cast<int64_t>(x.size());
  if (n == 0) return 0;
  if (!(p.temperature > 0.0f)) return argmax_row(x);
  const float inv_t = 1.0f / p.temperature;
  const uint64_t st = sample::stream(p.seed, p.counter);
  const bool top_p = p.top_p < 1.0f;
  const bool min_p = p.min_p > 0.0f;

  // The race over ids (all of them when ids is null); the skip rule (sample_noise.h) is
  // exact, so it is used only without a trace (which wants the runner-up's score).
  auto race = [&](const std::vector<int32_t>* ids) -> int32_t {
    float best = -std::numeric_limits<float>::infinity(), second = best;
    int32_t best_id = -1;
    const int64_t m = ids ? static_cast<int64_t>(ids->size()) : n;
    for (int64_t j = 0; j < m; ++j) {
      const int32_t i = ids ? (*ids)[j] : static_cast<int32_t>(j);
      if (std::isnan(x[i])) continue;
      const float s = sample::scale(x[i], inv_t);
      if (!trace && best_id >= 0 && s + sample::kMaxNoise < best) continue;
      const float sc = sample::score(s, st, i);
      if (best_id < 0 || sc > best || (sc == best && i < best_id)) {
        second = best;
        best = sc;
        best_id = i;
      } else if (sc > second) {
        second = sc;
      }
    }
    if (trace) {
      trace->n_kept = m;
      trace->best_score = best;
      trace->race_gap = static_cast<double>(best) - static_cast<double>(second);
    }
    return best_id < 0 ? 0 : best_id;
  };

  std::vector<int32_t> c;
  c.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    if (!std::isnan(x[i])) c.push_back(static_cast<int32_t>(i));
  if (c.empty()) return 0;
  const bool top_k = p.top_k > 0 && static_cast<size_t>(p.top_k) < c.size();
  if (!top_k && !top_p && !min_p) {
    if (trace) trace->n_kept = static_cast<int64_t>(c.size());
    return race(nullptr);
  }
  auto by = [&](int32_t a, int32_t b) {
    const uint32_t ka = sample::key(x[a]), kb = sample::key(x[b]);
    return ka > kb || (ka == kb && a < b);
  };

  // 1. top-k.
  if (top_k) {
    std::nth_element(c.begin(), c.begin() + p.top_k, c.end(), by);
    c.resize(static_cast<size_t>(p.top_k));
  }
  if (top_p || min_p) {
    const int32_t top = *std::min_element(c.begin(), c.end(), by);
    const float s_max = sample::scale(x[top], inv_t);
    auto w = [&](int32_t i) { return expf(sample::scale(x[i], inv_t) - s_max); };

    // 3. top-p: grow a sorted prefix until its mass reaches the target.
    if (top_p) {
      uint64_t total = 0;
      for (int32_t i : c) total += sample::mass(w(i));
      const double target = sample::top_p_target(p.top_p, total);
      size_t m = std::min<size_t>(c.size(), 256), keep = c.size();
      uint64_t cum = 0;
      size_t done = 0;  // c[0, done) sorted and summed into cum
      while (true) {
        std::partial_sort(c.begin() + static_cast<std::ptrdiff_t>(done), c.begin() + static_cast<std::ptrdiff_t>(m),
                          c.end(), by);
        bool reached = false;
        for (; done < m; ++done) {
          const uint64_t before = cum;
          cum += sample::mass(w(c[done]));
          if (sample::reaches(cum, target)) {
            keep = done + 1;
            if (trace) {
              const double tot = std::max<double>(1.0, static_cast<double>(total));
              trace->top_p_margin = std::min(std::fabs(static_cast<double>(cum) - target),
                                             std::fabs(static_cast<double>(before) - target)) / tot;
            }
            reached = true;
            break;
          }
        }
        if (reached || m == c.size()) break;
        m = std::min(c.size(), m * 8);
      }
      c.resize(keep);
    }
    // 4. min-p.
    if (min_p) {
      std::vector<int32_t> kept;
      for (int32_t i : c) {
        const float wi = w(i);
        if (trace) trace->min_p_margin = std::min(trace->min_p_margin, std::fabs(static_cast<double>(wi) - p.min_p) / p.min_p);
        if (wi >= p.min_p) kept.push_back(i);
      }
      c.swap(kept);
    }
  }
  return race(&c);
}

}  // namespace brass::backend
