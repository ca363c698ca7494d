// BPE against a naive reference written differently (std::map keyed by byte strings, a
// fresh scan of every adjacent pair each round, list splicing), on pieces from the random
// corpus and on long adversarial pieces; and the heap variant against the simple loop.
#include <gtest/gtest.h>

#include <list>
#include <map>

#include "corpus_gen.h"
#include "test_util.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer_impl.h"

namespace brass::tok {
namespace {

using testing::escape;

// Reference: parts as a std::list of strings; each round finds the lowest-ranked
// adjacent concatenation (first in list order on ties) and splices it.
std::vector<Rank> naive_bpe(const BpeTokenizer& t, std::string_view piece) {
  if (Rank r = t.rank_of(piece); r != kNoRank) return {r};
  std::list<std::string> parts;
  for (char c : piece) parts.emplace_back(1, c);
  for (;;) {
    auto best = parts.end();
    Rank best_rank = kNoRank;
    for (auto it = parts.begin(); std::next(it) != parts.end(); ++it) {
      const Rank r = t.rank_of(*it + *std::next(it));
      if (r < best_rank) best_rank = r, best = it;
    }
    if (best == parts.end()) break;
    *best += *std::next(best);
    parts.erase(std::next(best));
  }
  std::vector<Rank> out;
  for (const auto& p : parts) out.push_back(t.rank_of(p));
  return out;
}

const BpeTokenizer& impl() { return static_cast<const BpeTokenizer&>(testing::o200k()); }

TEST(Bpe, MatchesNaiveReferenceOnCorpusPieces) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  testing::CorpusGen gen(seed);
  const std::string text = utf8_lossy(gen.document(200000, true));
  size_t i = 0, n_pieces = 0;
  while (i < text.size()) {
    const size_t e = o200k_piece_end(text, i);
    const std::string_view piece = std::string_view(text).substr(i, e - i);
    std::vector<Rank> got;
    bpe_encode_piece(impl().ranks(), piece, got);
    ASSERT_EQ(got, naive_bpe(impl(), piece)) << "piece '" << escape(piece) << "'";
    i = e;
    ++n_pieces;
  }
  EXPECT_GT(n_pieces, 10000u);
}

TEST(Bpe, HeapAndSimpleLoopAgreeOnLongPieces) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::vector<std::string> pieces;
  // Repetitive pieces are where tie-breaking (leftmost first) matters most.
  pieces.push_back(std::string(1000, 'a'));
  pieces.push_back(std::string(777, '0'));
  std::string emoji;
  for (int k = 0; k < 300; ++k) emoji += "\xF0\x9F\x98\x80";
  pieces.push_back(emoji);
  std::string word;
  for (int k = 0; k < 200; ++k) word += "abra";
  pieces.push_back(word);
  for (int k = 0; k < 30; ++k) {  // random lowercase words glued, random bytes
    std::string s;
    const size_t n = 128 + rng() % 2000;
    for (size_t j = 0; j < n; ++j) s.push_back(k % 2 ? char('a' + rng() % 26) : char(rng() % 256));
    pieces.push_back(s);
  }
  for (const std::string& p : pieces) {
    const auto heap = bpe_parts_for_test(impl().ranks(), p, true);
    const auto simple = bpe_parts_for_test(impl().ranks(), p, false);
    ASSERT_EQ(heap, simple) << "piece '" << escape(p) << "'";
    if (p.size() <= 1200) {
      std::vector<Rank> got;
      for (size_t k = 0; k + 1 < heap.size(); ++k)
        got.push_back(impl().rank_of(std::string_view(p).substr(heap[k], heap[k + 1] - heap[k])));
      // naive_bpe takes the whole-piece shortcut first; these pieces are never tokens.
      ASSERT_EQ(got, naive_bpe(impl(), p)) << "piece '" << escape(p) << "'";
    }
  }
}

TEST(RankMap, InsertFindAndDuplicates) {
  RankMap m;
  std::mt19937_64 rng(testing::fresh_seed());
  std::map<std::string, Rank> ref;
  for (Rank r = 0; r < 20000; ++r) {
    std::string k;
    const size_t n = 1 + rng() % 20;
    for (size_t j = 0; j < n; ++j) k.push_back(char(rng() % 256));
    const bool fresh = ref.emplace(k, r).second;
    EXPECT_EQ(m.insert(k, r), fresh);
  }
  for (const auto& [k, r] : ref) ASSERT_EQ(m.find(k), r);
  EXPECT_EQ(m.find(std::string(21, 'x')), kNoRank);
  EXPECT_EQ(m.size(), ref.size());
}

}  // namespace
}  // namespace brass::tok
