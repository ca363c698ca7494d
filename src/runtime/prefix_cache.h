// PrefixCache: the bookkeeping of finished sequences whose KV the engine keeps in the
// model for prefix reuse (the KV itself stays in model::KvCache under the entry's
// seq_id; this class only knows ids, tokens, sizes and recency).
//
// match(): the entry sharing the longest usable token prefix with a new prompt. Usable:
//   - at most prompt.size() - 1 tokens (the last prompt token is always recomputed: its
//     logits give the first generated token);
//   - the KV cache must be able to truncate the entry to that length: full-attention
//     layers always can; sliding-window layers keep a ring of the last ring_capacity
//     positions, so a cut at n needs positions [n - n_swa + 1, n) still in the ring
//     (kv_cache.h). The caller passes that rule as `can_truncate(entry_length, n)`; a
//     shorter cut never helps (it needs older positions), so an entry whose common
//     prefix cannot be cut to is skipped (another entry may still match).
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
  using CanTruncate = std::function<bool(int64_t length, int64_t n)>;

  // Longest usable common prefix > 0 over all entries (ties: most recent), or nothing.
  std::optional<PrefixMatch> match(std::span<const int32_t> prompt, const CanTruncate& can_truncate) const;
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
