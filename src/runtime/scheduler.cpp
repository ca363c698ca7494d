// plan_step: decode tokens first (they are latency-critical and cost one token each),
// then prompt chunks with what is left of the budget (see scheduler.h).
#include "runtime/scheduler.h"

#include <algorithm>

namespace brass::runtime {

std::vector<SchedChunk> plan_step(std::span<const SchedSeq> seqs, int64_t budget) {
  std::vector<int64_t> take(seqs.size(), 0);
  int64_t left = std::max<int64_t>(budget, 0);
  for (size_t i = 0; i < seqs.size() && left > 0; ++i)
    if (seqs[i].known - seqs[i].computed == 1) {
      take[i] = 1;
      --left;
    }
  for (size_t i = 0; i < seqs.size() && left > 0; ++i) {
    const int64_t rem = seqs[i].known - seqs[i].computed;
    if (rem > 1) {
      take[i] = std::min(rem, left);
      left -= take[i];
    }
  }
  std::vector<SchedChunk> out;
  for (size_t i = 0; i < seqs.size(); ++i)
    if (take[i] > 0) out.push_back({i, take[i], seqs[i].computed + take[i] == seqs[i].known});
  return out;
}

StepPlan plan_step(std::span<const SchedSeq> seqs, int64_t budget, const PoolBudget& pool) {
  StepPlan plan;
  const int64_t bs = std::max<int64_t>(pool.block_size, 1);
  std::vector<int64_t> take(seqs.size(), 0);
  int64_t left = std::max<int64_t>(budget, 0), free = std::max<int64_t>(pool.free_blocks, 0);
  // New blocks a sequence needs to add n tokens.
  auto cost = [&](const SchedSeq& s, int64_t n) { return n <= s.room ? 0 : (n - s.room + bs - 1) / bs; };
  bool work = false;
  for (size_t i = 0; i < seqs.size() && left > 0; ++i) {
    if (seqs[i].known - seqs[i].computed != 1) continue;
    const int64_t c = cost(seqs[i], 1);
    if (c > free) {
      plan.starved = true;
      continue;
    }
    take[i] = 1;
    free -= c;
    plan.blocks += c;
    --left;
  }
  for (size_t i = 0; i < seqs.size() && left > 0; ++i) {
    const int64_t rem = seqs[i].known - seqs[i].computed;
    if (rem <= 1) continue;
    const int64_t n = std::min({rem, left, std::max<int64_t>(seqs[i].room, 0) + free * bs});
    if (n <= 0) continue;
    const int64_t c = cost(seqs[i], n);
    take[i] = n;
    free -= c;
    plan.blocks += c;
    left -= n;
  }
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (seqs[i].known > seqs[i].computed) work = true;
    if (take[i] > 0) plan.chunks.push_back({i, take[i], seqs[i].computed + take[i] == seqs[i].known});
  }
  if (plan.chunks.empty() && work) plan.starved = true;
  return plan;
}

}  // namespace brass::runtime
