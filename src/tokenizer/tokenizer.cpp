// BpeTokenizer core: construction and validation of a vocabulary, encode (specials,
// UTF-8 repair, pre-tokenization, BPE), decode, the .tiktoken loader, the
// o200k_harmony special table and the streaming detokenizer.
//
// Invalid UTF-8 input: tiktoken only ever sees Python/JS strings, so invalid bytes
// cannot reach it. brass decodes the bytes lossily first (each maximal invalid subpart
// -> U+FFFD, the rule of Python's bytes.decode("utf-8", "replace") and of TextDecoder),
// then encodes that text: encode(bytes) == tiktoken.encode(bytes.decode(errors="replace")).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace brass::tok {

namespace {
constexpr int32_t kMaxVocab = 1 << 22;  // sanity bound on ids from files
}  // namespace

std::vector<SpecialToken> o200k_harmony_specials() {
  // tiktoken_ext/openai_public.py o200k_harmony(): o200k_base's specials
  // (<|endoftext|> 199999, <|endofprompt|> 200018), the Harmony names, and
  // <|reserved_N|> for N in [200013, 201088) -- which spells 200018 a second time.
  // HF's tokenizer.json for gpt-oss (and so llama.cpp's GGUF) names 200018
  // <|endofprompt|>, which is listed first so decode uses it.
  std::vector<SpecialToken> s = {
      {"<|startoftext|>", 199998}, {"<|endoftext|>", 199999},
      {"<|reserved_200000|>", 200000}, {"<|reserved_200001|>", 200001},
      {"<|return|>", 200002},      {"<|constrain|>", 200003},
      {"<|reserved_200004|>", 200004}, {"<|channel|>", 200005},
      {"<|start|>", 200006},       {"<|end|>", 200007},
      {"<|message|>", 200008},     {"<|reserved_200009|>", 200009},
      {"<|reserved_200010|>", 200010}, {"<|reserved_200011|>", 200011},
      {"<|call|>", 200012},        {"<|endofprompt|>", 200018},
  };
  for (Token id = 200013; id < 201088; ++id)
    s.push_back({"<|reserved_" + std::to_string(id) + "|>", id});
  return s;
}

Result<std::unique_ptr<BpeTokenizer>> BpeTokenizer::create(VocabSpec spec) {
  std::unique_ptr<BpeTokenizer> t(new BpeTokenizer());
  const std::string& src = spec.source;
  int64_t max_id = -1;
  for (const auto& [bytes, rank] : spec.ordinary) {
    if (bytes.empty()) return Status::errorf("{}: token of rank {} has no bytes", src, rank);
    if (rank >= Rank(kMaxVocab))
      return Status::errorf("{}: rank {} is out of range (max {})", src, rank, kMaxVocab - 1);
    max_id = std::max<int64_t>(max_id, rank);
  }
  for (const SpecialToken& sp : spec.specials) {
    if (sp.text.empty()) return Status::errorf("{}: special token {} has no text", src, sp.id);
    if (sp.id < 0 || sp.id >= kMaxVocab)
      return Status::errorf("{}: special token {} has id {} out of range", src, sp.text, sp.id);
    max_id = std::max<int64_t>(max_id, sp.id);
  }
  t->n_vocab_ = int32_t(max_id + 1);
  t->kind_.assign(size_t(t->n_vocab_), Kind::kUnused);
  std::vector<std::string_view> bytes_of(size_t(t->n_vocab_));
  t->ranks_.reserve(spec.ordinary.size());
  for (const auto& [bytes, rank] : spec.ordinary) {
    if (t->kind_[rank] != Kind::kUnused)
      return Status::errorf("{}: rank {} is given to two tokens", src, rank);
    if (!t->ranks_.insert(bytes, rank))
      return Status::errorf("{}: token bytes of rank {} appear twice (first at rank {})", src,
                            rank, t->ranks_.find(bytes));
    t->kind_[rank] = Kind::kOrdinary;
    bytes_of[rank] = bytes;
  }
  for (int b = 0; b < 256; ++b) {
    const char c = char(b);
    if (t->ranks_.find(std::string_view(&c, 1)) == kNoRank)
      return Status::errorf("{}: byte 0x{:02X} has no token; byte-level BPE needs all 256",
                            src, b);
  }
  for (const SpecialToken& sp : spec.specials) {
    const Kind k = t->kind_[size_t(sp.id)];
    if (k == Kind::kOrdinary)
      return Status::errorf("{}: special {} has id {}, which is an ordinary token", src,
                            sp.text, sp.id);
    if (!t->special_ranks_.insert(sp.text, Rank(sp.id))) {
      if (t->special_ranks_.find(sp.text) != Rank(sp.id))
        return Status::errorf("{}: special {} is given two ids", src, sp.text);
      continue;  // exact duplicate entry
    }
    if (k == Kind::kUnused) {  // first spelling names the id
      t->kind_[size_t(sp.id)] = Kind::kSpecial;
      bytes_of[size_t(sp.id)] = sp.text;
    }
    t->special_list_.push_back(sp);
    t->special_first_byte_[static_cast<unsigned char>(sp.text[0])] = true;
    if (std::find(t->special_lens_.begin(), t->special_lens_.end(), sp.text.size()) ==
        t->special_lens_.end())
      t->special_lens_.push_back(sp.text.size());
  }
  std::sort(t->special_lens_.rbegin(), t->special_lens_.rend());
  t->offsets_.resize(size_t(t->n_vocab_) + 1);
  for (int32_t id = 0; id < t->n_vocab_; ++id) {
    t->offsets_[size_t(id)] = uint32_t(t->arena_.size());
    t->arena_.append(bytes_of[size_t(id)]);
  }
  t->offsets_[size_t(t->n_vocab_)] = uint32_t(t->arena_.size());
  return t;
}

BpeTokenizer::SpecialHit BpeTokenizer::find_special(std::string_view text, size_t from) const {
  if (special_lens_.empty()) return {std::string_view::npos, 0, 0};
  for (size_t j = from; j < text.size(); ++j) {
    if (!special_first_byte_[static_cast<unsigned char>(text[j])]) continue;
    for (size_t len : special_lens_) {
      if (j + len > text.size()) continue;
      const Rank id = special_ranks_.find(text.substr(j, len));
      if (id != kNoRank) return {j, len, Token(id)};
    }
  }
  return {std::string_view::npos, 0, 0};
}

void BpeTokenizer::encode_ordinary(std::string_view text, std::vector<Token>& out) const {
  std::vector<Rank> ranks;
  size_t i = 0;
  while (i < text.size()) {
    const size_t e = o200k_piece_end(text, i);
    ranks.clear();
    bpe_encode_piece(ranks_, text.substr(i, e - i), ranks);
    for (Rank r : ranks) out.push_back(Token(r));
    i = e;
  }
}

std::vector<Token> BpeTokenizer::encode(std::string_view text, bool allow_special) const {
  std::string repaired;
  if (!is_valid_utf8(text)) {
    repaired = utf8_lossy(text);
    text = repaired;
  }
  std::vector<Token> out;
  out.reserve(text.size() / 3 + 4);
  if (!allow_special) {
    encode_ordinary(text, out);
    return out;
  }
  size_t pos = 0;
  for (;;) {
    const SpecialHit hit = find_special(text, pos);
    if (hit.pos == std::string_view::npos) {
      encode_ordinary(text.substr(pos), out);
      return out;
    }
    encode_ordinary(text.substr(pos, hit.pos - pos), out);
    out.push_back(hit.id);
    pos = hit.pos + hit.len;
  }
}

std::string_view BpeTokenizer::token_bytes(Token t) const {
  if (t < 0 || t >= n_vocab_) return {};
  return std::string_view(arena_).substr(offsets_[size_t(t)],
                                         offsets_[size_t(t) + 1] - offsets_[size_t(t)]);
}

std::string BpeTokenizer::decode(std::span<const Token> tokens) const {
  // Unknown ids contribute nothing (as js-tiktoken's decode); callers that need to
  // reject them check n_vocab()/token_bytes() first.
  std::string out;
  for (Token t : tokens) out.append(token_bytes(t));
  return out;
}

std::optional<Token> BpeTokenizer::special(std::string_view text) const {
  const Rank r = special_ranks_.find(text);
  if (r == kNoRank) return std::nullopt;
  return Token(r);
}

bool BpeTokenizer::is_special(Token t) const {
  return t >= 0 && t < n_vocab_ && kind_[size_t(t)] == Kind::kSpecial;
}

std::vector<std::pair<std::string_view, std::string_view>> BpeTokenizer::derive_merges(
    std::vector<Token>* unreachable) const {
  std::vector<std::pair<std::string_view, std::string_view>> merges;
  for (Token id = 0; id < n_vocab_; ++id) {
    if (kind_[size_t(id)] != Kind::kOrdinary) continue;
    const std::string_view b = token_bytes(id);
    if (b.size() < 2) continue;
    const std::vector<size_t> parts = bpe_parts_below(ranks_, b, Rank(id));
    if (parts.size() != 3) {
      if (unreachable) unreachable->push_back(id);
      continue;
    }
    merges.emplace_back(b.substr(0, parts[1]), b.substr(parts[1]));
  }
  return merges;
}

namespace {

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// Standard base64 with '=' padding; false on any malformed input.
bool base64_decode(std::string_view in, std::string& out) {
  out.clear();
  if (in.empty() || in.size() % 4 != 0) return false;
  for (size_t i = 0; i < in.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = in[i + k];
      if (c == '=' && i + 4 == in.size() && k >= 2) {
        v[k] = 0;
        ++pad;
      } else {
        if (pad > 0) return false;  // data after padding
        v[k] = base64_value(c);
        if (v[k] < 0) return false;
      }
    }
    const uint32_t w = uint32_t(v[0]) << 18 | uint32_t(v[1]) << 12 | uint32_t(v[2]) << 6 |
                       uint32_t(v[3]);
    out.push_back(char(w >> 16));
    if (pad < 2) out.push_back(char((w >> 8) & 0xFF));
    if (pad < 1) out.push_back(char(w & 0xFF));
  }
  return true;
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_tiktoken(
    const std::string& rank_file, const std::vector<SpecialToken>& specials) {
  std::ifstream f(rank_file, std::ios::binary);
  if (!f) return Status::errorf("{}: cannot open the .tiktoken rank file", rank_file);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string data = ss.str();
  VocabSpec spec;
  spec.source = rank_file;
  spec.specials = specials;
  size_t pos = 0, line_no = 0;
  std::string bytes;
  while (pos < data.size()) {
    size_t nl = data.find('\n', pos);
    if (nl == std::string::npos) nl = data.size();
    std::string_view line(data.data() + pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const size_t sp = line.find(' ');
    if (sp == std::string_view::npos)
      return Status::errorf("{}:{}: expected '<base64 token> <rank>', found no space", rank_file,
                            line_no);
    if (!base64_decode(line.substr(0, sp), bytes))
      return Status::errorf("{}:{}: token '{}' is not valid base64", rank_file, line_no,
                            line.substr(0, std::min<size_t>(sp, 64)));
    const std::string_view rs = line.substr(sp + 1);
    uint64_t rank = 0;
    if (rs.empty() || rs.size() > 9)
      return Status::errorf("{}:{}: rank '{}' is not a number below 1e9", rank_file, line_no,
                            rs.substr(0, 32));
    for (char c : rs) {
      if (c < '0' || c > '9')
        return Status::errorf("{}:{}: rank '{}' is not a decimal number", rank_file, line_no,
                              rs.substr(0, 32));
      rank = rank * 10 + uint64_t(c - '0');
    }
    spec.ordinary.emplace_back(bytes, Rank(rank));
  }
  if (spec.ordinary.empty()) return Status::errorf("{}: no tokens", rank_file);
  BRASS_ASSIGN_OR_RETURN(auto t, BpeTokenizer::create(std::move(spec)));
  return std::unique_ptr<Tokenizer>(std::move(t));
}

// Streaming detokenizer: emit every complete character; a definitely-invalid subpart
// becomes U+FFFD at once (more bytes cannot fix it); only a valid-but-unfinished tail
// (at most 3 bytes) waits. The concatenation of all outputs equals
// utf8_lossy(decode(all tokens)).
std::string StreamDecoder::push(Token t) {
  pending_.append(tok_.token_bytes(t));
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    int bad;
    bool truncated;
    const int len = utf8_seq_len(pending_, i, &bad, &truncated);
    if (len > 0) {
      out.append(pending_, i, size_t(len));
      i += size_t(len);
    } else if (truncated) {
      break;
    } else {
      out.append("\xEF\xBF\xBD");
      i += size_t(bad);
    }
  }
  pending_.erase(0, i);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = utf8_lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace brass::tok
