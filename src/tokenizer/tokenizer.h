// o200k_harmony tokenizer: byte-level BPE with tiktoken semantics (lowest-ranked
// pair merges first), the o200k pre-tokenizer regex, and the Harmony special tokens.
// Loads from a .tiktoken rank file (base64 token, rank per line) plus the special
// table, or from GGUF tokenizer metadata as llama.cpp writes it (tokenizer.ggml.tokens
// in GPT-2 byte-to-unicode form, tokenizer.ggml.merges, token_type).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace brass::gguf {
class Reader;
class Writer;
}  // namespace brass::gguf

namespace brass::tok {

using Token = int32_t;

struct SpecialToken {
  std::string text;  // "<|start|>"
  Token id;
};

// The o200k_harmony specials: <|startoftext|> 199998 ... <|call|> 200012, and
// <|reserved_200000|> ... <|reserved_201087|> for the rest (n_vocab 201088).
std::vector<SpecialToken> o200k_harmony_specials();

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  static Result<std::unique_ptr<Tokenizer>> from_tiktoken(
      const std::string& rank_file, const std::vector<SpecialToken>& specials);
  static Result<std::unique_ptr<Tokenizer>> from_gguf(const gguf::Reader& reader);

  // Encode text. With allow_special, exact spellings of special tokens in the text
  // become their ids; without, they are encoded as ordinary text (tiktoken's
  // encode_ordinary / disallowed_special=()).
  virtual std::vector<Token> encode(std::string_view text, bool allow_special = false) const = 0;
  // The bytes of a sequence of tokens (may be invalid UTF-8 mid-character).
  virtual std::string decode(std::span<const Token> tokens) const = 0;
  virtual std::string_view token_bytes(Token t) const = 0;  // "" for unknown ids

  virtual std::optional<Token> special(std::string_view text) const = 0;  // "<|end|>" -> 200007
  virtual bool is_special(Token t) const = 0;
  virtual int32_t n_vocab() const = 0;

  // Write tokenizer.ggml.{model="gpt2", pre="gpt-4o", tokens, token_type, merges, eos/bos/pad
  // ids} so llama.cpp and from_gguf read this vocabulary back identically.
  virtual void write_gguf(gguf::Writer& writer) const = 0;
};

// Streaming detokenizer: feed tokens, get text that is always whole UTF-8 characters;
// bytes of an unfinished character wait for the next token. flush() returns what is
// left (invalid bytes become U+FFFD).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok) : tok_(tok) {}
  std::string push(Token t);
  std::string flush();

 private:
  const Tokenizer& tok_;
  std::string pending_;
};

}  // namespace brass::tok
