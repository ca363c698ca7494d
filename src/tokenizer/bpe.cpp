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

uint64_t RankMap::inline_key(std::string_view s) {
  uint64_t w = 0;
  std::memcpy(&w, s.data(), s.size() < 8 ? s.size() : 8);
  return w;
}

bool RankMap::same_key(const Slot& slot, std::string_view s, uint32_t tag_len) const {
  if (slot.tag_len != tag_len) return false;
  if (s.size() <= 8) return slot.key == inline_key(s);
  return std::memcmp(arena_.data() + slot.key, s.data(), s.size()) == 0;
}

static uint32_t make_tag_len(uint64_t h, size_t len) {
  return uint32_t(h >> 48) << 16 | uint32_t(len);
}

void RankMap::reserve(size_t n) {
  // Load factor <= 0.75 keeps linear probing short.
  size_t cap = 16;
  while (cap * 3 < n * 4) cap <<= 1;
  if (cap <= slots_.size()) return;
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(cap, Slot{});
  const size_t mask = cap - 1;
  for (const Slot& s : old) {
    if (s.rank == kNoRank) continue;
    const std::string_view key =
        (s.tag_len & 0xFFFF) <= 8
            ? std::string_view(reinterpret_cast<const char*>(&s.key), s.tag_len & 0xFFFF)
            : std::string_view(arena_).substr(s.key, s.tag_len & 0xFFFF);
    size_t i = hash_bytes(key) & mask;
    while (slots_[i].rank != kNoRank) i = (i + 1) & mask;
    slots_[i] = s;
  }
}

void RankMap::grow() { reserve(slots_.empty() ? 16 : slots_.size()); }

bool RankMap::insert(std::string_view bytes, Rank rank) {
  if (bytes.size() > 0xFFFF) return false;  // no such tokens; keeps len in 16 bits
  if ((count_ + 1) * 4 > slots_.size() * 3) grow();
  const uint64_t h = hash_bytes(bytes);
  const uint32_t tl = make_tag_len(h, bytes.size());
  const size_t mask = slots_.size() - 1;
  size_t i = h & mask;
  while (slots_[i].rank != kNoRank) {
    if (same_key(slots_[i], bytes, tl)) return false;
    i = (i + 1) & mask;
  }
  Slot s;
  s.tag_len = tl;
  s.rank = rank;
  if (bytes.size() <= 8) {
    s.key = inline_key(bytes);
  } else {
    s.key = arena_.size();
    arena_.append(bytes);
  }
  slots_[i] = s;
  ++count_;
  if (bytes.size() > max_len_) max_len_ = bytes.size();
  return true;
}

Rank RankMap::find(std::string_view bytes) const {
  if (slots_.empty() || bytes.size() > max_len_) return kNoRank;
  const uint64_t h = hash_bytes(bytes);
  const uint32_t tl = make_tag_len(h, bytes.size());
  const size_t mask = slots_.size() - 1;
  size_t i = h & mask;
  for (;;) {
    const Slot& s = slots_[i];
    if (s.rank == kNoRank) return kNoRank;
    if (same_key(s, bytes, tl)) return s.rank;
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
