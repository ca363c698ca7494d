// Byte-level BPE with tiktoken semantics: a piece starts as single bytes; repeatedly the
// adjacent pair whose concatenated bytes have the lowest rank is merged (ties: the
// leftmost), until no adjacent concatenation is a token. A piece that is itself a token
// becomes that token directly (tiktoken's shortcut, kept for identical output).
//
// RankMap is an open-addressing hash table from byte strings (stored in one arena) to
// ranks. Short pieces use the simple O(n^2) scan (n < kHeapThreshold, cache-friendly);
// long ones use a min-heap of candidate pairs over a linked list of parts, O(n log n),
// so 100 KB pieces (one repeated emoji, text without spaces) stay fast.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace brass::tok {

using Rank = uint32_t;
inline constexpr Rank kNoRank = UINT32_MAX;

class RankMap {
 public:
  // Returns false when `bytes` is already present (the rank is not replaced).
  bool insert(std::string_view bytes, Rank rank);
  Rank find(std::string_view bytes) const;
  size_t size() const { return count_; }
  size_t max_len() const { return max_len_; }
  void reserve(size_t n);

 private:
  // 16 bytes: keys of <= 8 bytes live inline (zero-padded), longer ones in the arena, so
  // the common short lookup touches one cache line.
  struct Slot {
    uint64_t key = 0;     // inline bytes, or arena offset when len > 8
    uint32_t tag_len = 0;  // (hash >> 48) << 16 | len
    Rank rank = kNoRank;   // kNoRank: empty slot
  };
  static uint64_t hash_bytes(std::string_view s);
  static uint64_t inline_key(std::string_view s);
  bool same_key(const Slot& slot, std::string_view s, uint32_t tag_len) const;
  void grow();

  std::string arena_;
  std::vector<Slot> slots_;
  size_t count_ = 0;
  size_t max_len_ = 0;
};

inline constexpr size_t kHeapThreshold = 64;

// Appends the ranks of `piece` (non-empty) to `out`. Every single byte of `piece` must
// have a rank (checked when the vocabulary is loaded).
void bpe_encode_piece(const RankMap& ranks, std::string_view piece, std::vector<Rank>& out);

// The parts BPE leaves when only merges of rank < max_rank are allowed and without the
// whole-piece shortcut; part boundaries are byte offsets (size = parts + 1). Used to
// derive the GGUF merge list: a token of rank r has a merge iff this yields 2 parts.
std::vector<size_t> bpe_parts_below(const RankMap& ranks, std::string_view piece, Rank max_rank);

// Part boundaries of a full BPE run with one algorithm forced (tests and bench compare
// the heap and the simple loop on the same inputs).
std::vector<size_t> bpe_parts_for_test(const RankMap& ranks, std::string_view piece, bool heap);

}  // namespace brass::tok
