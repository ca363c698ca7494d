// PrefixCache: a linear scan over the entries (a handful: bounded by
// EngineOptions::prefix_cache_seqs), LRU as a list with the most recent at the front.
#include "runtime/prefix_cache.h"

#include <algorithm>

namespace brass::runtime {

int64_t PrefixCache::common_prefix(std::span<const int32_t> a, std::span<const int32_t> b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return static_cast<int64_t>(i);
}

std::optional<PrefixMatch> PrefixCache::match(std::span<const int32_t> prompt,
                                              const UsableCut& usable_cut) const {
  std::optional<PrefixMatch> best;
  if (prompt.size() < 2) return best;
  for (const PrefixEntry& e : lru_) {
    const int64_t len = static_cast<int64_t>(e.tokens.size());
    int64_t n = std::min<int64_t>(common_prefix(prompt, e.tokens), static_cast<int64_t>(prompt.size()) - 1);
    if (n <= 0 || (best && n <= best->reuse)) continue;
    if (n < len) n = std::min(n, usable_cut(e, n));  // min: a rule that answers more is ignored
    if (n <= 0 || (best && n <= best->reuse)) continue;
    best = PrefixMatch{e.seq_id, n, len};
  }
  return best;
}

std::optional<PrefixEntry> PrefixCache::take(int32_t seq_id) {
  for (auto it = lru_.begin(); it != lru_.end(); ++it)
    if (it->seq_id == seq_id) {
      PrefixEntry e = std::move(*it);
      lru_.erase(it);
      bytes_ -= e.bytes;
      return e;
    }
  return std::nullopt;
}

void PrefixCache::put(PrefixEntry e) {
  bytes_ += e.bytes;
  lru_.push_front(std::move(e));
}

std::vector<int32_t> PrefixCache::evict(int64_t max_seqs, int64_t max_bytes) {
  std::vector<int32_t> out;
  while (!lru_.empty() && (size() > max_seqs || bytes_ > max_bytes)) {
    out.push_back(lru_.back().seq_id);
    bytes_ -= lru_.back().bytes;
    lru_.pop_back();
  }
  return out;
}

int64_t PrefixCache::tokens() const {
  int64_t t = 0;
  for (const auto& e : lru_) t += static_cast<int64_t>(e.tokens.size());
  return t;
}

std::vector<int32_t> PrefixCache::seq_ids() const {
  std::vector<int32_t> ids;
  for (const auto& e : lru_) ids.push_back(e.seq_id);
  return ids;
}

}  // namespace brass::runtime
