// Token sampler: turns one row of logits (n_vocab floats) into the next token.
//
// Pipeline, in this order (the order is part of the contract; tests pin it):
//   1. penalties over the last `penalty_last_n` tokens of the history
//        repetition (llama.cpp / CTRL): logit > 0 ? logit / r : logit * r, once per distinct token
//        presence / frequency (OpenAI): logit -= presence * [count > 0] + frequency * count
//   2. top-k          keep the k largest logits (0 = off)
//   3. temperature    s = logit * (1 / T)  (T <= 0 means greedy: argmax after penalties, no randomness)
//   4. softmax        over the kept candidates
//   5. top-p          keep the smallest prefix (by probability, descending) whose mass >= p
//   6. min-p          keep candidates with p >= min_p * p_max
//   7. draw one token from the renormalized kept set by an exponential race (Gumbel-max):
//        token = argmax over the kept set of s_i - log(E_i), E_i ~ Exp(1) from a
//        counter-based hash of (seed, draw counter, token id) (backend/sample_noise.h)
// Ties between equal logits are broken by the lower token id everywhere, so the kept set
// is a deterministic function of the logits (order: s descending, then lower id).
//
// Steps 2..7 are backend::sample_row (backend/sampling.h): the same function is the
// reference of the backends' sample op, so a draw made on a device (the CUDA kernel) and
// one made here give the same token for the same (seed, counter) and logits, except where
// a float rounding (expf / logf one ulp apart) puts a cumulative mass, a min-p ratio or two
// race scores exactly on a boundary. filtered_distribution below is the same kept set with
// its probabilities (the definition the draw is tested against).
//
// Log-probabilities reported with a sampled token (chosen and top-n) are those of the
// model's own distribution: log_softmax of the raw logits, before penalties and filters
// (what the OpenAI API reports).
//
// Randomness: no generator state but the draw counter: draw number c (c = 0, 1, 2, ... per
// Sampler, one per sample() call with T > 0) uses the noise of (seed, c). A caller that
// draws elsewhere (on the backend, with draw_params()) calls skip_draw() so the next host
// draw continues the same sequence: host and device draws are interchangeable. Integer
// hashing and IEEE float ops only, so the same seed gives the same tokens on every platform.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/sample_noise.h"

namespace brass::runtime {

struct SamplerParams {
  float temperature = 1.0f;         // <= 0: greedy
  int32_t top_k = 0;                // 0: off
  float top_p = 1.0f;               // >= 1: off
  float min_p = 0.0f;               // <= 0: off
  float repetition_penalty = 1.0f;  // 1: off
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int32_t penalty_last_n = 64;      // window for all penalties; -1: whole history, 0: off
  uint64_t seed = 0;
  int32_t n_logprobs = 0;           // how many top alternatives to report (0: none)
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

struct SampleResult {
  int32_t token = 0;
  float logprob = 0.0f;            // log_softmax(raw logits)[token]
  std::vector<TokenLogprob> top;   // n_logprobs best by raw logit, descending
};

// One candidate of the filtered distribution.
struct Candidate {
  int32_t token = 0;
  float logit = 0.0f;  // after penalties (and temperature once applied)
  float p = 0.0f;      // probability once softmax has run
};

// The building blocks, exposed so tests can check each against a naive implementation.
namespace sampling {
// Step 1, in place over the whole logit row.
void apply_penalties(std::span<float> logits, std::span<const int32_t> history,
                     const SamplerParams& params);
// Steps 2..6 on penalized logits: the kept candidates with normalized probabilities,
// sorted by probability descending (ties: lower id first). Requires temperature > 0.
std::vector<Candidate> filtered_distribution(std::span<const float> penalized_logits,
                                             const SamplerParams& params);
// Index of the largest value (lowest index on ties).
int32_t argmax(std::span<const float> logits);
// log_softmax(logits)[token] and the n best (token, logprob) pairs.
void logprobs(std::span<const float> logits, int32_t token, int32_t n_top, float* token_logprob,
              std::vector<TokenLogprob>* top);
}  // namespace sampling

class Sampler {
 public:
  explicit Sampler(const SamplerParams& params);

  // Sample the next token from `logits` (n_vocab values). `history` is every token of
  // the sequence so far (prompt + generated); penalties look at its tail.
  SampleResult sample(std::span<const float> logits, std::span<const int32_t> history);

  const SamplerParams& params() const { return params_; }
  // The number of draws made so far (the next draw's counter).
  uint64_t draw_counter() const { return counter_; }
  // The next draw's parameters for a backend sample op (temperature, filters, seed, counter).
  backend::SampleParams draw_params() const;
  // A draw was made elsewhere with draw_params(): advance the counter.
  void skip_draw() { ++counter_; }

 private:
  SamplerParams params_;
  uint64_t counter_ = 0;
  std::vector<float> work_;  // (n_vocab) penalized logits
};

}  // namespace brass::runtime
