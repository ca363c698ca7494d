// Sampler implementation: penalties, then the draw of backend::sample_row (top-k,
// temperature, top-p, min-p, exponential race); filtered_distribution spells the kept set
// out with probabilities. See sampler.h for the exact definitions and their order.
#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "backend/sampling.h"
#include "core/status.h"

namespace brass::runtime {

namespace sampling {
namespace {

// Strict weak order "better first": larger value, then lower token id.
struct ByLogitDesc {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.logit > b.logit || (a.logit == b.logit && a.token < b.token);
  }
};
struct ByProbDesc {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.p > b.p || (a.p == b.p && a.token < b.token);
  }
};

}  // namespace

void apply_penalties(std::span<float> logits, std::span<const int32_t> history,
                     const SamplerParams& params) {
  const bool any = params.repetition_penalty != 1.0f || params.presence_penalty != 0.0f ||
                   params.frequency_penalty != 0.0f;
  if (!any || params.penalty_last_n == 0 || history.empty()) return;
  size_t window = history.size();
  if (params.penalty_last_n > 0) window = std::min(window, static_cast<size_t>(params.penalty_last_n));
  std::unordered_map<int32_t, int32_t> counts;
  for (size_t i = history.size() - window; i < history.size(); ++i) ++counts[history[i]];
  const int64_t n = static_cast<int64_t>(logits.size());
  for (const auto& [tok, count] : counts) {
    if (tok < 0 || tok >= n) continue;  // ids outside the row (e.g. a bigger vocab) carry no logit
    float& l = logits[tok];
    if (params.repetition_penalty != 1.0f) {
      l = l > 0.0f ? l / params.repetition_penalty : l * params.repetition_penalty;
    }
    l -= static_cast<float>(count) * params.frequency_penalty +
         (count > 0 ? params.presence_penalty : 0.0f);
  }
}

int32_t argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

std::vector<Candidate> filtered_distribution(std::span<const float> penalized_logits,
                                             const SamplerParams& params) {
  const int64_t n = static_cast<int64_t>(penalized_logits.size());
  std::vector<Candidate> c(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) c[i] = Candidate{static_cast<int32_t>(i), penalized_logits[i], 0.0f};
  if (n == 0) return c;

  // 2. top-k: nth_element puts the k best (by logit, then id) first in O(n).
  if (params.top_k > 0 && params.top_k < n) {
    std::nth_element(c.begin(), c.begin() + params.top_k, c.end(), ByLogitDesc{});
    c.resize(static_cast<size_t>(params.top_k));
  }

  // 3. temperature, 4. softmax (max-subtracted; the sum in double so 200k small terms
  // do not lose mass to rounding).
  const float inv_t = 1.0f / params.temperature;
  float max_l = -std::numeric_limits<float>::infinity();
  for (auto& x : c) {
    x.logit *= inv_t;
    max_l = std::max(max_l, x.logit);
  }
  double sum = 0.0;
  for (auto& x : c) {
    x.p = std::exp(x.logit - max_l);
    sum += x.p;
  }
  for (auto& x : c) x.p = static_cast<float>(x.p / sum);

  // 5. top-p: sort only as far as needed. Partially sort a growing prefix until its mass
  // reaches p (most distributions reach it within a few hundred tokens of 200k).
  if (params.top_p < 1.0f) {
    size_t m = std::min<size_t>(c.size(), 256);
    while (true) {
      std::partial_sort(c.begin(), c.begin() + m, c.end(), ByProbDesc{});
      double cum = 0.0;
      size_t keep = 0;
      bool reached = false;
      for (size_t i = 0; i < m; ++i) {
        cum += c[i].p;
        keep = i + 1;
        if (cum >= params.top_p) {
          reached = true;
          break;
        }
      }
      if (reached || m == c.size()) {
        c.resize(keep);
        break;
      }
      m = std::min(c.size(), m * 8);
    }
  }

  // 6. min-p relative to the most probable remaining candidate.
  if (params.min_p > 0.0f) {
    float p_max = 0.0f;
    for (const auto& x : c) p_max = std::max(p_max, x.p);
    const float threshold = params.min_p * p_max;
    c.erase(std::remove_if(c.begin(), c.end(), [&](const Candidate& x) { return x.p < threshold; }),
            c.end());
  }

  // 7. renormalize.
  double kept = 0.0;
  for (const auto& x : c) kept += x.p;
  for (auto& x : c) x.p = static_cast<float>(x.p / kept);
  return c;
}

void logprobs(std::span<const float> logits, int32_t token, int32_t n_top, float* token_logprob,
              std::vector<TokenLogprob>* top) {
  float max_l = -std::numeric_limits<float>::infinity();
  for (float l : logits) max_l = std::max(max_l, l);
  double sum = 0.0;
  for (float l : logits) sum += std::exp(static_cast<double>(l - max_l));
  const double log_z = static_cast<double>(max_l) + std::log(sum);
  if (token_logprob) *token_logprob = static_cast<float>(logits[token] - log_z);
  if (top && n_top > 0) {
    const size_t k = std::min<size_t>(static_cast<size_t>(n_top), logits.size());
    std::vector<Candidate> c(logits.size());
    for (size_t i = 0; i < logits.size(); ++i) c[i] = Candidate{static_cast<int32_t>(i), logits[i], 0.0f};
    std::partial_sort(c.begin(), c.begin() + k, c.end(), ByLogitDesc{});
    top->clear();
    for (size_t i = 0; i < k; ++i) {
      top->push_back(TokenLogprob{c[i].token, static_cast<float>(c[i].logit - log_z)});
    }
  }
}

}  // namespace sampling

Sampler::Sampler(const SamplerParams& params) : params_(params) {}

backend::SampleParams Sampler::draw_params() const {
  backend::SampleParams p;
  p.temperature = params_.temperature;
  p.top_k = params_.top_k;
  p.top_p = params_.top_p;
  p.min_p = params_.min_p;
  p.seed = params_.seed;
  p.counter = counter_;
  return p;
}

SampleResult Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
  SampleResult r;
  BRASS_CHECK(!logits.empty());
  work_.assign(logits.begin(), logits.end());
  sampling::apply_penalties(work_, history, params_);

  if (params_.temperature <= 0.0f) {
    r.token = sampling::argmax(work_);
  } else {
    r.token = backend::sample_row(work_, draw_params());
    ++counter_;
  }
  sampling::logprobs(logits, r.token, params_.n_logprobs, &r.logprob,
                     params_.n_logprobs > 0 ? &r.top : nullptr);
  return r;
}

}  // namespace brass::runtime
