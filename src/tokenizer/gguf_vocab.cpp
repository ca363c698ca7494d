// GGUF side of the tokenizer: read and write the vocabulary the way llama.cpp's
// converter stores it for gpt-oss (convert_hf_to_gguf.py, _set_vocab_gpt2):
//   tokenizer.ggml.model = "gpt2", tokenizer.ggml.pre = "gpt-4o",
//   tokenizer.ggml.tokens: ordinary tokens as GPT-2 byte-to-unicode strings (each byte
//     -> one codepoint: printable Latin-1 bytes map to themselves, the other 68 bytes to
//     U+0100.. in byte order), specials as their plain text,
//   tokenizer.ggml.token_type: 1 NORMAL, 3 CONTROL (specials), 5 UNUSED (gaps),
//   tokenizer.ggml.merges: "left right" in the same byte-to-unicode form, ordered by
//     the rank of the token they produce (llama.cpp's merge priority is list position),
//   tokenizer.ggml.{bos,eos,padding}_token_id.
// HF's tiktoken converter lists every split of a token whose halves are tokens; we write
// only the split BPE actually uses, derived by running BPE on the token's bytes with
// lower ranks only. Reading accepts both.
#include "gguf/reader.h"
#include "gguf/writer.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace brass::tok {
namespace {

struct ByteUnicode {
  uint32_t to_cp[256];
  int16_t from_cp[512];  // codepoints used are all < 0x144
  ByteUnicode() : to_cp(), from_cp() {
    for (int i = 0; i < 512; ++i) from_cp[i] = -1;
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      to_cp[b] = printable ? uint32_t(b) : next++;
      from_cp[to_cp[b]] = int16_t(b);
    }
  }
};
const ByteUnicode& byte_unicode() {
  static const ByteUnicode t;
  return t;
}

std::string bytes_to_gpt2(std::string_view bytes) {
  std::string out;
  for (unsigned char b : bytes) utf8_append(out, byte_unicode().to_cp[b]);
  return out;
}

bool gpt2_to_bytes(std::string_view s, std::string& out) {
  out.clear();
  size_t i = 0;
  while (i < s.size()) {
    int bad;
    bool trunc;
    const int len = utf8_seq_len(s, i, &bad, &trunc);
    if (len == 0) return false;
    const uint32_t cp = utf8_decode(reinterpret_cast<const unsigned char*>(s.data()) + i, len);
    if (cp >= 512 || byte_unicode().from_cp[cp] < 0) return false;
    out.push_back(char(byte_unicode().from_cp[cp]));
    i += size_t(len);
  }
  return true;
}

enum TokenType : int32_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4,
                           kUnused = 5, kByte = 6 };

}  // namespace

// Exposed for tests (declared there).
std::string gguf_token_text_for_test(std::string_view bytes) { return bytes_to_gpt2(bytes); }

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const gguf::Reader& reader) {
  const std::string& src = reader.path();
  BRASS_ASSIGN_OR_RETURN(std::string model, reader.get_string("tokenizer.ggml.model"));
  if (model != "gpt2")
    return Status::errorf("{}: tokenizer.ggml.model is '{}', expected 'gpt2' (byte-level BPE)",
                          src, model);
  BRASS_ASSIGN_OR_RETURN(std::string pre, reader.get_string("tokenizer.ggml.pre"));
  if (pre != "gpt-4o")
    return Status::errorf(
        "{}: tokenizer.ggml.pre is '{}', expected 'gpt-4o' (the o200k pre-tokenizer, the only "
        "one brass implements)", src, pre);
  BRASS_ASSIGN_OR_RETURN(std::vector<std::string> tokens,
                         reader.get_string_array("tokenizer.ggml.tokens"));
  std::vector<int64_t> types(tokens.size(), kNormal);
  if (reader.find("tokenizer.ggml.token_type")) {
    BRASS_ASSIGN_OR_RETURN(types, reader.get_int_array("tokenizer.ggml.token_type"));
    if (types.size() != tokens.size())
      return Status::errorf("{}: tokenizer.ggml.token_type has {} entries, tokens has {}", src,
                            types.size(), tokens.size());
  }
  VocabSpec spec;
  spec.source = src;
  std::string bytes;
  for (size_t id = 0; id < tokens.size(); ++id) {
    switch (types[id]) {
      case kNormal:
        if (!gpt2_to_bytes(tokens[id], bytes) || bytes.empty())
          return Status::errorf(
              "{}: tokenizer.ggml.tokens[{}] = '{}' is not a GPT-2 byte-to-unicode string", src,
              id, tokens[id].substr(0, 64));
        spec.ordinary.emplace_back(bytes, Rank(id));
        break;
      case kControl:
      case kUserDefined:
        spec.specials.push_back({tokens[id], Token(id)});
        break;
      case kUnused:
        break;
      default:
        return Status::errorf(
            "{}: tokenizer.ggml.token_type[{}] = {} ('{}'): expected 1 (normal), 3 (control), "
            "4 (user-defined) or 5 (unused) in a gpt2 vocabulary", src, id, types[id],
            tokens[id].substr(0, 64));
    }
  }
  BRASS_ASSIGN_OR_RETURN(auto t, BpeTokenizer::create(std::move(spec)));

  // brass merges by rank (= id), tiktoken's rule. Check the file's merges agree with
  // that: each joins two tokens into a token, in non-decreasing order of the result.
  if (reader.find("tokenizer.ggml.merges")) {
    BRASS_ASSIGN_OR_RETURN(std::vector<std::string> merges,
                           reader.get_string_array("tokenizer.ggml.merges"));
    Rank prev = 0;
    std::string left, right;
    for (size_t i = 0; i < merges.size(); ++i) {
      const std::string& m = merges[i];
      const size_t sp = m.find(' ', 1);
      if (sp == std::string::npos || !gpt2_to_bytes(std::string_view(m).substr(0, sp), left) ||
          !gpt2_to_bytes(std::string_view(m).substr(sp + 1), right))
        return Status::errorf("{}: tokenizer.ggml.merges[{}] = '{}' is not 'left right' in "
                              "GPT-2 byte-to-unicode form", src, i, m.substr(0, 64));
      const Rank r = t->rank_of(left + right);
      if (r == kNoRank || t->rank_of(left) == kNoRank || t->rank_of(right) == kNoRank)
        return Status::errorf("{}: tokenizer.ggml.merges[{}] = '{}' does not join two tokens "
                              "into a token", src, i, m.substr(0, 64));
      if (r < prev)
        return Status::errorf("{}: tokenizer.ggml.merges[{}] = '{}' produces token {} after a "
                              "merge producing {}: merges must follow token rank", src, i,
                              m.substr(0, 64), r, prev);
      prev = r;
    }
  }
  return std::unique_ptr<Tokenizer>(std::move(t));
}

void BpeTokenizer::write_gguf(gguf::Writer& writer) const {
  std::vector<std::string> tokens(static_cast<size_t>(n_vocab_));
  std::vector<int32_t> types(static_cast<size_t>(n_vocab_));
  for (int32_t id = 0; id < n_vocab_; ++id) {
    switch (kind_[size_t(id)]) {
      case Kind::kOrdinary:
        tokens[size_t(id)] = bytes_to_gpt2(token_bytes(id));
        types[size_t(id)] = kNormal;
        break;
      case Kind::kSpecial:
        tokens[size_t(id)] = std::string(token_bytes(id));
        types[size_t(id)] = kControl;
        break;
      case Kind::kUnused:
        tokens[size_t(id)] = "[PAD" + std::to_string(id) + "]";  // llama.cpp's filler name
        types[size_t(id)] = kUnused;
        break;
    }
  }
  std::vector<std::string> merges;
  for (const auto& [l, r] : derive_merges(nullptr))
    merges.push_back(bytes_to_gpt2(l) + " " + bytes_to_gpt2(r));
  writer.set_string("tokenizer.ggml.model", "gpt2");
  writer.set_string("tokenizer.ggml.pre", "gpt-4o");
  writer.set_string_array("tokenizer.ggml.tokens", tokens);
  writer.set_i32_array("tokenizer.ggml.token_type", types);
  writer.set_string_array("tokenizer.ggml.merges", merges);
  // gpt-oss: bos <|startoftext|>, eos <|return|>, pad <|endoftext|> (HF tokenizer_config).
  if (auto id = special("<|startoftext|>")) writer.set_u32("tokenizer.ggml.bos_token_id", uint32_t(*id));
  if (auto id = special("<|return|>")) writer.set_u32("tokenizer.ggml.eos_token_id", uint32_t(*id));
  if (auto id = special("<|endoftext|>")) writer.set_u32("tokenizer.ggml.padding_token_id", uint32_t(*id));
}

}  // namespace brass::tok
