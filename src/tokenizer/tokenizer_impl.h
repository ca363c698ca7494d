// BpeTokenizer: the one Tokenizer implementation (internal header shared by the
// tiktoken loader, the GGUF loader/writer and tests). Ordinary tokens: id == tiktoken
// rank, looked up by bytes in a RankMap. Specials: exact strings matched before
// pre-tokenization when allowed (longest special at the leftmost position; in
// o200k_harmony no special is a prefix of another, so this is tiktoken's match). One id
// may have several spellings (o200k_harmony has <|endofprompt|> and
// <|reserved_200018|> for 200018); decode uses the first one given.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/tokenizer.h"

namespace brass::tok {

struct VocabSpec {
  std::string source;                                // file name for error messages
  std::vector<std::pair<std::string, Rank>> ordinary;  // token bytes, rank (= id)
  std::vector<SpecialToken> specials;
};

class BpeTokenizer final : public Tokenizer {
 public:
  static Result<std::unique_ptr<BpeTokenizer>> create(VocabSpec spec);

  std::vector<Token> encode(std::string_view text, bool allow_special = false) const override;
  std::string decode(std::span<const Token> tokens) const override;
  std::string_view token_bytes(Token t) const override;
  std::optional<Token> special(std::string_view text) const override;
  bool is_special(Token t) const override;
  int32_t n_vocab() const override { return n_vocab_; }
  void write_gguf(gguf::Writer& writer) const override;

  // Ordinary-token rank of a byte string, kNoRank when it is not a token.
  Rank rank_of(std::string_view bytes) const { return ranks_.find(bytes); }
  const RankMap& ranks() const { return ranks_; }
  bool is_ordinary(Token t) const {
    return t >= 0 && t < n_vocab_ && kind_[size_t(t)] == Kind::kOrdinary;
  }
  // Every spelling of every special (aliases included), in the order given.
  const std::vector<SpecialToken>& special_list() const { return special_list_; }

  // For each ordinary token of >= 2 bytes, in rank order, the split (left bytes, right
  // bytes) whose merge produces it: BPE of its bytes with only lower ranks allowed must
  // end in exactly two parts. Tokens BPE cannot reach are listed in *unreachable.
  std::vector<std::pair<std::string_view, std::string_view>> derive_merges(
      std::vector<Token>* unreachable) const;

 private:
  enum class Kind : uint8_t { kUnused, kOrdinary, kSpecial };
  BpeTokenizer() = default;
  void encode_ordinary(std::string_view text, std::vector<Token>& out) const;
  // Leftmost special at or after `from`: (pos, len, id); pos == npos when none.
  struct SpecialHit {
    size_t pos, len;
    Token id;
  };
  SpecialHit find_special(std::string_view text, size_t from) const;

  RankMap ranks_;
  RankMap special_ranks_;          // spelling -> id
  std::vector<SpecialToken> special_list_;
  std::vector<size_t> special_lens_;  // distinct spelling lengths, longest first
  bool special_first_byte_[256] = {};
  std::string arena_;              // bytes of every id, concatenated
  std::vector<uint32_t> offsets_;  // (n_vocab + 1)
  std::vector<Kind> kind_;         // (n_vocab)
  int32_t n_vocab_ = 0;
};

}  // namespace brass::tok
