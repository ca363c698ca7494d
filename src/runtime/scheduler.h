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
// With a KV block pool (model::KvCache), the overload taking a PoolBudget also keeps the
// chunks within the free blocks: a decode token that needs a new block the pool does not
// have is left out and the plan marked `starved` (the engine then frees blocks: prefix
// cache entries first, then it preempts the lowest-priority sequence, and plans again);
// prefill chunks shrink to what the free blocks hold (0 tokens: the sequence waits).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace brass::runtime {

struct SchedSeq {
  int64_t known = 0;     // tokens known (prompt + generated)
  int64_t computed = 0;  // tokens in the KV cache (< known for a sequence that needs work)
  int64_t room = 0;      // with a PoolBudget: positions its blocks hold beyond `computed`
};

struct SchedChunk {
  size_t index = 0;      // into the seqs span
  int64_t n_tokens = 0;  // tokens computed[index] .. computed[index] + n_tokens - 1
  bool completes = false;  // reaches `known`: sample a token from its last row
};

// Chunks for one step, at most `budget` tokens in total (budget >= 1); sequences with
// nothing to compute are skipped. Chunks come out in seqs order.
std::vector<SchedChunk> plan_step(std::span<const SchedSeq> seqs, int64_t budget);

struct PoolBudget {
  int64_t free_blocks = 0;  // blocks the pool can still hand out
  int64_t block_size = 1;   // positions per block
};

struct StepPlan {
  std::vector<SchedChunk> chunks;
  int64_t blocks = 0;    // new blocks the chunks take (<= free_blocks)
  // A decoding sequence got no token for lack of blocks, or no sequence could be given
  // any token although some have work: free blocks and plan again.
  bool starved = false;
};

// As above, within the pool's free blocks.
StepPlan plan_step(std::span<const SchedSeq> seqs, int64_t budget, const PoolBudget& pool);

}  // namespace brass::runtime
