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

}  // namespace brass::runtime
