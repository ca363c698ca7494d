// The reference token draw: one logits row + SampleParams -> one token id. The runtime's
// Sampler (after penalties), the host-memory backends' sample op and the CUDA kernel's
// parity tests all use this one function; the CUDA kernel (cuda_sample.cu) computes the
// same kept set with thresholds instead of sorts.
//
// Definition (temperature T > 0; s_i = logit_i * (1/T) rounded once, sample::scale; the
// order is "logit descending, then lower id", i.e. sample::key descending then id):
//   1. top-k   (0 < k < n): the k first tokens in that order.
//   2. w_i = expf(s_i - s_max) over the top-k survivors (s_max: the best one's s).
//   3. top-p   (p < 1): the smallest prefix (same order) whose fixed-point mass
//              sum sample::mass(w_i) reaches p of the survivors' total (sample::reaches).
//   4. min-p   (min_p > 0): keep w_i >= min_p (i.e. p_i >= min_p * p_max).
//   5. the race: argmax over the kept tokens of s_i - log(E_i) (sample_noise.h), ties: lower id.
// T <= 0 or NaN: argmax of the raw row (ties: lower id). NaN logits are never kept
// (a row of only NaNs gives 0). This kept set is runtime::sampling::filtered_distribution's
// except where a float rounding puts a cumulative mass or a ratio exactly at a threshold.
#pragma once

#include <cstdint>
#include <span>

#include "backend/sample_noise.h"

namespace brass::backend {

// How close the draw came to a decision boundary (for parity tests: a device computing
// expf / logf one ulp apart may only differ from this reference when one of these is tiny).
struct SampleTrace {
  int64_t n_kept = 0;
  // Top-p: |cum - p * total| / total at the last token kept and the one before the cut
  // (1 when top-p is off).
  double top_p_margin = 1.0;
  // Min-p: min over the top-p survivors of |w_i - min_p| / min_p (1 when off).
  double min_p_margin = 1.0;
  // Race: best score minus the runner-up's (infinity with one kept token).
  double race_gap = 0.0;
  float best_score = 0.0f;
};

// Sample one token from x (n values). trace (optional) gets the margins above.
int32_t sample_row(std::span<const float> x, const SampleParams& p, SampleTrace* trace = nullptr);

// argmax (ties: the lower index; NaNs never win unless every value is NaN: 0).
int32_t argmax_row(std::span<const float> x);

}  // namespace brass::backend
