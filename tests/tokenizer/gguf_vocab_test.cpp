// GGUF vocabulary: write_gguf -> gguf::Writer file -> gguf::Reader -> from_gguf must give
// the same tokenizer (every token's bytes, specials, encodings of a random corpus). The
// stored form is checked against hand-derived llama.cpp conventions (GPT-2
// byte-to-unicode: ' ' -> U+0120 'Ġ', '\n' -> U+010A 'Ċ'), and the merges against a
// naive BPE written here.
#include <gtest/gtest.h>
#include <unistd.h>

#include <list>

#include "corpus_gen.h"
#include "gguf/reader.h"
#include "gguf/writer.h"
#include "test_util.h"
#include "tokenizer/tokenizer_impl.h"

namespace brass::tok {
std::string gguf_token_text_for_test(std::string_view bytes);
namespace {

const BpeTokenizer& impl() { return static_cast<const BpeTokenizer&>(testing::o200k()); }

// The vocabulary written once per test process; the file is removed at exit, after the
// reader (members go in reverse order) has unmapped it.
struct Written {
  testing::TempFile file{"vocab.gguf"};
  std::unique_ptr<gguf::Reader> reader;
};

const Written& written() {
  static Written w;
  static const bool done = [] {
    gguf::Writer writer;
    impl().write_gguf(writer);
    const Status st = writer.write(w.file.path());
    if (!st.is_ok()) std::fprintf(stderr, "write: %s\n", st.message().c_str());
    auto r = gguf::Reader::open(w.file.path());
    if (r.is_ok()) w.reader = std::move(r).value();
    else std::fprintf(stderr, "open: %s\n", r.status().message().c_str());
    return true;
  }();
  (void)done;
  return w;
}

TEST(GgufVocab, ByteToUnicodeForm) {
  EXPECT_EQ(gguf_token_text_for_test(" the"), "\xC4\xA0the");    // Ġthe
  EXPECT_EQ(gguf_token_text_for_test("\n"), "\xC4\x8A");          // Ċ
  EXPECT_EQ(gguf_token_text_for_test(std::string(1, '\0')), "\xC4\x80");  // Ā
  EXPECT_EQ(gguf_token_text_for_test("\xAD"), "\xC5\x83");        // soft hyphen byte -> U+0143
  EXPECT_EQ(gguf_token_text_for_test("\xFF"), "\xC3\xBF");        // ÿ maps to itself
  EXPECT_EQ(gguf_token_text_for_test("~!"), "~!");
}

TEST(GgufVocab, MetadataAsLlamaCppWritesIt) {
  const Written& w = written();
  ASSERT_TRUE(w.reader);
  const gguf::Reader& r = *w.reader;
  EXPECT_EQ(r.get_string("tokenizer.ggml.model").value(), "gpt2");
  EXPECT_EQ(r.get_string("tokenizer.ggml.pre").value(), "gpt-4o");
  const auto tokens = r.get_string_array("tokenizer.ggml.tokens").value();
  const auto types = r.get_int_array("tokenizer.ggml.token_type").value();
  ASSERT_EQ(tokens.size(), 201088u);
  ASSERT_EQ(types.size(), 201088u);
  EXPECT_EQ(tokens[200006], "<|start|>");
  EXPECT_EQ(types[200006], 3);
  EXPECT_EQ(tokens[200018], "<|endofprompt|>");
  EXPECT_EQ(types[1000], 1);
  const Token space = testing::o200k().encode(" ")[0];
  EXPECT_EQ(tokens[size_t(space)], "\xC4\xA0");
  EXPECT_EQ(r.get_uint("tokenizer.ggml.bos_token_id").value(), 199998u);
  EXPECT_EQ(r.get_uint("tokenizer.ggml.eos_token_id").value(), 200002u);
  EXPECT_EQ(r.get_uint("tokenizer.ggml.padding_token_id").value(), 199999u);
}

// Naive BPE restricted to ranks < limit, on a std::list of byte strings.
size_t naive_parts_below(const BpeTokenizer& t, const std::string& b, Rank limit, std::string* left) {
  std::list<std::string> parts;
  for (char c : b) parts.emplace_back(1, c);
  for (;;) {
    auto best = parts.end();
    Rank best_rank = kNoRank;
    for (auto it = parts.begin(); std::next(it) != parts.end(); ++it) {
      const Rank r = t.rank_of(*it + *std::next(it));
      if (r < limit && r < best_rank) best_rank = r, best = it;
    }
    if (best == parts.end()) break;
    *best += *std::next(best);
    parts.erase(std::next(best));
  }
  *left = parts.front();
  return parts.size();
}

TEST(GgufVocab, MergesAreTheBpeProducingPairsInRankOrder) {
  const Written& w = written();
  ASSERT_TRUE(w.reader);
  const auto merges = w.reader->get_string_array("tokenizer.ggml.merges").value();
  std::vector<Token> unreachable;
  const auto derived = impl().derive_merges(&unreachable);
  EXPECT_TRUE(unreachable.empty()) << unreachable.size() << " o200k tokens unreachable by BPE";
  ASSERT_EQ(merges.size(), derived.size());
  size_t multi = 0;
  for (Token id = 0; id < 199998; ++id) multi += impl().token_bytes(id).size() >= 2;
  EXPECT_EQ(merges.size(), multi);  // one merge per multi-byte token
  std::mt19937_64 rng(testing::fresh_seed());
  Rank prev = 0;
  for (size_t i = 0; i < derived.size(); ++i) {
    const std::string whole = std::string(derived[i].first) + std::string(derived[i].second);
    const Rank r = impl().rank_of(whole);
    ASSERT_NE(r, kNoRank);
    if (i > 0) ASSERT_GT(r, prev);
    prev = r;
    ASSERT_EQ(merges[i], gguf_token_text_for_test(derived[i].first) + " " +
                             gguf_token_text_for_test(derived[i].second));
    if (rng() % 50 == 0) {  // ~4000 tokens against the naive BPE
      std::string left;
      ASSERT_EQ(naive_parts_below(impl(), whole, r, &left), 2u);
      ASSERT_EQ(left, derived[i].first);
    }
  }
}

TEST(GgufVocab, RoundTripGivesTheSameTokenizer) {
  const Written& w = written();
  ASSERT_TRUE(w.reader);
  auto r = Tokenizer::from_gguf(*w.reader);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const Tokenizer& a = testing::o200k();
  const Tokenizer& b = *r.value();
  ASSERT_EQ(a.n_vocab(), b.n_vocab());
  for (Token id = 0; id < a.n_vocab(); ++id) {
    ASSERT_EQ(a.token_bytes(id), b.token_bytes(id)) << id;
    ASSERT_EQ(a.is_special(id), b.is_special(id)) << id;
  }
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  testing::CorpusGen gen(seed);
  size_t bytes = 0;
  while (bytes < 400000) {
    std::string d = gen.document(2000, gen.chance(0.3));
    // The GGUF names 200018 once (<|endofprompt|>); tiktoken's alias is not in it.
    for (size_t at; (at = d.find("<|reserved_200018|>")) != std::string::npos;) d.erase(at, 19);
    bytes += d.size();
    ASSERT_EQ(a.encode(d, false), b.encode(d, false)) << testing::escape(d);
    ASSERT_EQ(a.encode(d, true), b.encode(d, true)) << testing::escape(d);
  }
}

TEST(GgufVocab, RejectsOtherTokenizers) {
  const testing::TempFile file("bad.gguf");
  const std::string& path = file.path();
  gguf::Writer wr;
  wr.set_string("tokenizer.ggml.model", "gpt2");
  wr.set_string("tokenizer.ggml.pre", "llama-bpe");
  wr.set_string_array("tokenizer.ggml.tokens", {"a"});
  ASSERT_TRUE(wr.write(path).is_ok());
  auto rd = gguf::Reader::open(path);
  ASSERT_TRUE(rd.is_ok());
  auto t = Tokenizer::from_gguf(*rd.value());
  ASSERT_FALSE(t.is_ok());
  EXPECT_NE(t.status().message().find("gpt-4o"), std::string::npos) << t.status().message();
  EXPECT_NE(t.status().message().find("llama-bpe"), std::string::npos);
}

}  // namespace
}  // namespace brass::tok
