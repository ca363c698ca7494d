// RankMap and the two BPE merge loops (simple scan for short pieces, heap + linked list
// for long ones). Both implement exactly "merge the lowest-ranked adjacent pair, the
// leftmost on ties", so they give identical parts; tests check them against each other
// and against a naive reference.
#include "tokenizer/bpe.h"

#include <cstring>
#include <queue>

namespace brass::tok {

uint64_t RankMap::hash_bytes(std::string_view s) {
  // 8 bytes at a time, multiply-xorshift mixing (not cryptographic: keys are a fixed
  // vocabulary, lookups are of arbitrary text but a bad distribution only costs time).
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (s.size() * 0xFF51AFD7ED558CCDull);
  const char* p = s.data();
  size_t n = s.size();
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 29;
    p += 8;
    n -= 8;
  }
  if (n > 0) {
    uint64_t w = 0;
    std::memcpy(&w, p, n);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
  }
  h ^= h >> 32;
  h *= 0xFF51AFD7ED558CCDull;
  h ^= h >> 29;
  return h;
}

void RankMap::reserve(size_t n) {
  size_t cap = 16;
  while (cap < n * 2) cap <<= 1;
  if (cap <= slots_.size()) return;
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(cap, Slot{});
  const size_t mask = cap - 1;
  for (const Slot& s : old) {
    if (s.rank == kNoRank) continue;
    size_t i = s.hash & mask;
    while (slots_[i].rank != kNoRank) i = (i + 1) & mask;
    slots_[i] = s;
  }
}

void RankMap::grow() { reserve(slots_.empty() ? 16 : slots_.size()); }

bool RankMap::insert(std::string_view bytes, Rank rank) {
  if ((count_ + 1) * 2 > slots_.size()) grow();
  const uint64_t h = hash_bytes(bytes);
  const size_t mask = slots_.size() - 1;
  size_t i = h & mask;
  while (slots_[i].rank != kNoRank) {
    const Slot& s = slots_[i];
    if (s.hash == h && s.len == bytes.size() &&
        std::memcmp(arena_.data() + s.off, bytes.data(), bytes.size()) == 0)
      return false;
    i = (i + 1) & mask;
  }
  slots_[i] = Slot{h, uint32_t(arena_.size()), uint32_t(bytes.size()), rank};
  arena_.append(bytes);
  ++count_;
  return true;
}

Rank RankMap::find(std::string_view bytes) const {
  if (slots_.empty()) return kNoRank;
  const uint64_t h = hash_bytes(bytes);
  const size_t mask = slots_.size() - 1;
  size_t i = h & mask;
  for (;;) {
    const Slot& s = slots_[i];
    if (s.rank == kNoRank) return kNoRank;
    if (s.hash == h && s.len == bytes.size() &&
        std::memcmp(arena_.data() + s.off, bytes.data(), bytes.size()) == 0)
      return s.rank;
    i = (i + 1) & mask;
  }
}

namespace {

// Simple loop (tiktoken's algorithm shape): starts[k] is the byte offset of part k,
// pair_rank[k] the rank of parts k and k+1 joined. O(n^2) but n < kHeapThreshold.
void merge_simple(const RankMap& ranks, std::string_view piece, Rank max_rank,
                  std::vector<size_t>& starts) {
  const size_t n = piece.size();
  starts.clear();
  for (size_t i = 0; i <= n; ++i) starts.push_back(i);
  auto rank_of = [&](size_t k) -> Rank {  // pair (k, k+1); needs k + 2 < starts.size()
    if (k + 2 >= starts.size()) return kNoRank;
    const Rank r = ranks.find(piece.substr(starts[k], starts[k + 2] - starts[k]));
    return r < max_rank ? r : kNoRank;
  };
  std::vector<Rank> pair_rank(n + 1, kNoRank);
  for (size_t k = 0; k + 2 < starts.size(); ++k) pair_rank[k] = rank_of(k);
  while (starts.size() > 2) {
    Rank best = kNoRank;
    size_t bk = 0;
    for (size_t k = 0; k + 2 < starts.size(); ++k) {
      if (pair_rank[k] < best) {
        best = pair_rank[k];
        bk = k;
      }
    }
    if (best == kNoRank) break;
    starts.erase(starts.begin() + bk + 1);
    pair_rank.erase(pair_rank.begin() + bk + 1);
    pair_rank[bk] = rank_of(bk);
    if (bk > 0) pair_rank[bk - 1] = rank_of(bk - 1);
  }
}

// Heap variant: parts form a doubly linked list; the heap holds (rank, start, left part,
// versions of both parts). An entry is stale once either part changed; the live entry
// with the smallest (rank, start) is exactly the pair the simple loop would pick.
void merge_heap(const RankMap& ranks, std::string_view piece, Rank max_rank,
                std::vector<size_t>& starts) {
  const size_t n = piece.size();
  struct Part {
    uint32_t start, end;
    int32_t prev, next;
    uint32_t ver;
    bool alive;
  };
  std::vector<Part> parts(n);
  for (size_t i = 0; i < n; ++i)
    parts[i] = Part{uint32_t(i), uint32_t(i + 1), int32_t(i) - 1,
                    i + 1 < n ? int32_t(i + 1) : -1, 0, true};
  struct Cand {
    Rank rank;
    uint32_t start;
    int32_t left, right;
    uint32_t lver, rver;
    bool operator>(const Cand& o) const {
      return rank != o.rank ? rank > o.rank : start > o.start;
    }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int32_t l) {
    if (l < 0) return;
    const int32_t r = parts[l].next;
    if (r < 0) return;
    const Part& a = parts[l];
    const Part& b = parts[r];
    const Rank rk = ranks.find(piece.substr(a.start, b.end - a.start));
    if (rk < max_rank) heap.push(Cand{rk, a.start, l, r, a.ver, b.ver});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(int32_t(i));
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    Part& a = parts[c.left];
    Part& b = parts[c.right];
    if (!a.alive || !b.alive || a.ver != c.lver || b.ver != c.rver || a.next != c.right)
      continue;
    a.end = b.end;
    a.next = b.next;
    a.ver++;
    b.alive = false;
    if (b.next >= 0) parts[b.next].prev = c.left;
    push(a.prev);
    push(c.left);
  }
  starts.clear();
  for (int32_t k = 0; k >= 0; k = parts[k].next) starts.push_back(parts[k].start);
  starts.push_back(n);
}

}  // namespace

void bpe_encode_piece(const RankMap& ranks, std::string_view piece, std::vector<Rank>& out) {
  if (const Rank r = ranks.find(piece); r != kNoRank) {
    out.push_back(r);
    return;
  }
  std::vector<size_t> starts;
  if (piece.size() < kHeapThreshold) merge_simple(ranks, piece, kNoRank, starts);
  else merge_heap(ranks, piece, kNoRank, starts);
  for (size_t k = 0; k + 1 < starts.size(); ++k)
    out.push_back(ranks.find(piece.substr(starts[k], starts[k + 1] - starts[k])));
}

std::vector<size_t> bpe_parts_below(const RankMap& ranks, std::string_view piece,
                                    Rank max_rank) {
  std::vector<size_t> starts;
  if (piece.empty()) return {0};
  if (piece.size() < kHeapThreshold) merge_simple(ranks, piece, max_rank, starts);
  else merge_heap(ranks, piece, max_rank, starts);
  return starts;
}

std::vector<size_t> bpe_parts_for_test(const RankMap& ranks, std::string_view piece, bool heap) {
  std::vector<size_t> starts;
  if (piece.empty()) return {0};
  if (heap) merge_heap(ranks, piece, kNoRank, starts);
  else merge_simple(ranks, piece, kNoRank, starts);
  return starts;
}

}  // namespace brass::tok
