// YaRN / RoPE frequency tables (conventions documented in rope.h). Computed in double
// and rounded once to f32: the table is built once per model load.
#include "model/rope.h"

#include <algorithm>
#include <cmath>

namespace brass::model {

RopeFreqs compute_rope_freqs(const RopeParams& p) {
  RopeFreqs r;
  const int half = p.head_dim / 2;
  r.inv_freq.resize(half);
  const double two_pi = 2.0 * M_PI;
  const bool yarn = p.factor > 1.0;
  if (yarn) {
    const double d_half = half;
    double low = d_half * std::log(p.n_ctx_orig / (p.beta_fast * two_pi)) / std::log(p.freq_base);
    double high = d_half * std::log(p.n_ctx_orig / (p.beta_slow * two_pi)) / std::log(p.freq_base);
    if (p.yarn_rounded) {
      low = std::max(0.0, std::floor(low));
      high = std::min(static_cast<double>(p.head_dim - 1), std::ceil(high));
    }
    r.low = low;
    r.high = high;
    const double span = p.yarn_rounded ? std::max(0.001, high - low) : (high - low);
    for (int j = 0; j < half; ++j) {
      const double freq = std::pow(p.freq_base, 2.0 * j / p.head_dim);
      const double extrap = 1.0 / freq, interp = 1.0 / (p.factor * freq);
      const double mask = 1.0 - std::clamp((j - low) / span, 0.0, 1.0);  // 1: keep extrapolation
      r.inv_freq[j] = static_cast<float>(interp * (1.0 - mask) + extrap * mask);
    }
    r.mscale = static_cast<float>((0.1 * std::log(p.factor) + 1.0) * p.attn_factor);
  } else {
    for (int j = 0; j < half; ++j) {
      r.inv_freq[j] = static_cast<float>(1.0 / std::pow(p.freq_base, 2.0 * j / p.head_dim));
    }
    r.mscale = static_cast<float>(p.attn_factor);
  }
  return r;
}

}  // namespace brass::model
