// Step planning for continuous batching (the policy, free of threads and models so it
// can be tested alone). Every running sequence knows how many of its tokens are known
// (prompt + sampled) and how many are computed (in the KV cache); it needs
// known - computed more tokens run through the model: 1 while decoding, more while it
// reads its prompt. plan_step fills one forward call's token budget:
//   1. one token for every decoding sequence (remaining == 1), in priority order;
//   2. then chunks of prefilling sequences (remaining > 1), in priority order, each as
//      large as the budget still allows (chunked prefill: a long prompt spreads over
//      several steps while the others keep decoding).
// A sequence's chunk "completes" it when computed + n == known: only then are its logits
// sampled.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace brass::runtime {

struct SchedSeq {
  int64_t known = 0;     // tokens known (prompt + generated)
  int64_t computed = 0;  // tokens in the KV cache (< known for a sequence that needs work)
};

struct SchedChunk {
  size_t index = 0;      // into the seqs span
  int64_t n_tokens = 0;  // tokens computed[index] .. computed[index] + n_tokens - 1
  bool completes = false;  // reaches `known`: sample a token from its last row
};

// Chunks for one step, at most `budget` tokens in total (budget >= 1); sequences with
// nothing to compute are skipped. Chunks come out in seqs order.
std::vector<SchedChunk> plan_step(std::span<const SchedSeq> seqs, int64_t budget);

}  // namespace brass::runtime
