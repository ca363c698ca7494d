// Token sampler: turns one row of logits (n_vocab floats) into the next token.
//
// Pipeline, in this order (the order is part of the contract; tests pin it):
//   1. penalties over the last `penalty_last_n` tokens of the history
//        repetition (llama.cpp / CTRL): logit > 0 ? logit / r : logit * r, once per distinct token
//        presence / frequency (OpenAI): logit -= presence * [count > 0] + frequency * count
//   2. top-k          keep the k largest logits (0 = off)
//   3. temperature    logit / T  (T <= 0 means greedy: argmax after penalties, no randomness)
//   4. softmax        over the kept candidates
//   5. top-p          keep the smallest prefix (by probability, descending) whose mass >= p
//   6. min-p          keep candidates with p >= min_p * p_max
//   7. renormalize and draw one token with the seeded generator
// Ties between equal logits are broken by the lower token id everywhere, so the kept set
// is a deterministic function of the logits.
//
// Log-probabilities reported with a sampled token (chosen and top-n) are those of the
// model's own distribution: log_softmax of the raw logits, before penalties and filters
// (what the OpenAI API reports).
//
// Randomness: std::mt19937_64 seeded with `seed`; uniform doubles are built from the top
// 53 bits by hand (std::uniform_real_distribution is implementation-defined), so the same
// seed gives the same tokens on every platform.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

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
  // A uniform double in [0, 1) from the generator (exposed for tests).
  double next_uniform();

 private:
  SamplerParams params_;
  std::mt19937_64 rng_;
  std::vector<float> work_;  // (n_vocab) penalized logits
};

}  // namespace brass::runtime
