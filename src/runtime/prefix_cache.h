// PrefixCache: the bookkeeping of finished sequences whose KV the engine keeps in the
// model for prefix reuse (the KV itself stays in model::KvCache under the entry's
// seq_id; this class only knows ids, tokens, sizes and recency).
//
// match(): the entry sharing the longest usable token prefix with a new prompt. Usable:
//   - at most prompt.size() - 1 tokens (the last prompt token is always recomputed: its
//     logits give the first generated token);
//   - a cut the KV cache can truncate the entry to. The caller passes that rule as
//     `usable_cut(entry, n)`: the longest cut <= n it can make (model::KvCache::usable_cut:
//     any n while the sliding layers' rings still hold the window before it, else the
//     latest window snapshot at or before n, e.g. the end of the entry's prompt). So an
//     agent loop whose next prompt drops the previous completion (Harmony drops the
//     analysis) still reuses everything up to the end of the previous prompt.
// take() removes the chosen entry (its sequence now belongs to the new request: entries
// are moved, not shared). evict() drops least-recently-used entries beyond the budgets.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <optional>
#include <span>
#include <vector>

namespace brass::runtime {

struct PrefixEntry {
  int32_t seq_id = 0;
  std::vector<int32_t> tokens;  // the tokens whose K/V the sequence holds (its length)
  int64_t bytes = 0;            // KV bytes it holds
};

struct PrefixMatch {
  int32_t seq_id = 0;
  int64_t reuse = 0;   // tokens to keep (truncate the sequence to this length)
  int64_t length = 0;  // the entry's length before truncation
};

class PrefixCache {
 public:
  // The longest cut m <= n (n < the entry's length) the entry can be truncated to; 0: none.
  using UsableCut = std::function<int64_t(const PrefixEntry& e, int64_t n)>;

  // Longest usable prefix > 0 over all entries (ties: most recent), or nothing.
  std::optional<PrefixMatch> match(std::span<const int32_t> prompt, const UsableCut& usable_cut) const;
  // Remove the entry of seq_id and return it (nullopt if absent).
  std::optional<PrefixEntry> take(int32_t seq_id);
  // Insert as most recently used.
  void put(PrefixEntry e);
  // Drop LRU entries until size() <= max_seqs and bytes() <= max_bytes; returns their
  // seq_ids (the caller frees their KV).
  std::vector<int32_t> evict(int64_t max_seqs, int64_t max_bytes);

  int64_t size() const { return static_cast<int64_t>(lru_.size()); }
  int64_t bytes() const { return bytes_; }
  int64_t tokens() const;
  std::vector<int32_t> seq_ids() const;

  // Length of the common prefix of a and b.
  static int64_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b);

 private:
  std::list<PrefixEntry> lru_;  // front: most recently used
  int64_t bytes_ = 0;
};

}  // namespace brass::runtime
