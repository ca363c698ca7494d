// Random test corpus for the tokenizer: documents mixing source code, prose in many
// scripts (CJK, Arabic, Devanagari, Thai, Khmer, Hebrew, Tamil, ... with combining
// marks, decomposed Latin), emoji with skin tones / ZWJ / flags / keycaps, whitespace
// runs (spaces, tabs, CR LF, NBSP, U+0085, U+3000, U+FEFF), numbers and long digit runs
// in several scripts, contractions in mixed case, random assigned codepoints from many
// planes, Harmony special tokens (whole and broken) and invalid UTF-8. Generated from a
// seed at test time; nothing here is an expected output.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tokenizer/unicode.h"

namespace brass::tok::testing {

class CorpusGen {
 public:
  explicit CorpusGen(uint64_t seed) : rng_(seed) {}

  // One document of roughly `target` bytes. `invalid_utf8`: may contain bad bytes.
  std::string document(size_t target, bool invalid_utf8) {
    std::string d;
    while (d.size() < target) {
      segment(d, invalid_utf8);
      separator(d);
    }
    return d;
  }

  // A document made of one segment kind (for per-kind benchmarks and focused tests).
  std::string prose_english(size_t target) { return repeat(target, [&](std::string& d) { english(d); }); }
  std::string code(size_t target) { return repeat(target, [&](std::string& d) { source_code(d); }); }
  std::string cjk(size_t target) { return repeat(target, [&](std::string& d) { script_text(d, 0); }); }

  uint64_t uniform(uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng_); }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  std::mt19937_64& rng() { return rng_; }

 private:
  template <class F>
  std::string repeat(size_t target, F f) {
    std::string d;
    while (d.size() < target) f(d);
    return d;
  }
  void cp(std::string& d, uint32_t c) { utf8_append(d, c); }
  uint32_t in(uint32_t lo, uint32_t hi) { return lo + uint32_t(uniform(hi - lo + 1)); }
  template <class T>
  const T& pick(const std::vector<T>& v) { return v[uniform(v.size())]; }

  void segment(std::string& d, bool invalid) {
    switch (uniform(invalid ? 12 : 11)) {
      case 0: case 1: english(d); break;
      case 2: source_code(d); break;
      case 3: case 4: script_text(d, int(uniform(kScripts))); break;
      case 5: emoji(d); break;
      case 6: whitespace(d); break;
      case 7: numbers(d); break;
      case 8: contractions(d); break;
      case 9: random_codepoints(d); break;
      case 10: specials(d); break;
      default: bad_bytes(d); break;
    }
  }

  void separator(std::string& d) {
    static const std::vector<std::string> seps = {" ", " ", " ", "\n", ", ", ". ", "\n\n",
                                                  "\t", "\r\n", "  ", "", "/", " - "};
    d += pick(seps);
  }

  void english(std::string& d) {
    static const std::vector<std::string> words = {
        "the", "of", "and", "to", "in", "is", "that", "it", "was", "for", "on", "are", "with",
        "as", "his", "they", "be", "at", "one", "have", "this", "from", "or", "had", "by",
        "word", "but", "what", "some", "we", "can", "out", "other", "were", "all", "there",
        "when", "up", "use", "your", "how", "said", "an", "each", "which", "she", "do",
        "tokenizer", "inference", "engine", "throughput", "latency", "quantization",
        "HTTPRequest", "JSONParser", "iPhone", "McDonald", "NASA", "eBay", "ALLCAPS",
        "naïve", "café", "résumé", "Straße", "coöperate", "über", "Ærøskøbing"};
    const size_t n = 3 + uniform(25);
    for (size_t i = 0; i < n; ++i) {
      std::string w = pick(words);
      if (chance(0.1) && !w.empty() && w[0] >= 'a' && w[0] <= 'z') w[0] = char(w[0] - 32);
      if (chance(0.03)) for (char& c : w) if (c >= 'a' && c <= 'z') c = char(c - 32);
      if (i > 0) d += chance(0.9) ? " " : "  ";
      d += w;
      if (chance(0.08)) d += pick(std::vector<std::string>{",", ".", ";", ":", "!", "?", "...", "\"", ")", "'"});
    }
  }

  void source_code(std::string& d) {
    static const std::vector<std::string> lines = {
        "int main(int argc, char** argv) {", "  return 0;", "}", "for (int i = 0; i < n; ++i) {",
        "    x[i] = y[i] * 2.5f + b;", "def forward(self, x):", "        return self.proj(x) @ W.T",
        "const auto& [k, v] = *it;", "if (!status.is_ok()) return status;", "// TODO(brass): fix",
        "#include <vector>", "    std::vector<int32_t> ids{1, 2, 3};", "x = {'a': 1, \"b\": [2, 3]}",
        "SELECT id, name FROM users WHERE age >= 21;", "<div class=\"row\"><span>{{ name }}</span></div>",
        "let re = /^[a-z0-9_]+$/i;", "printf(\"%d %s\\n\", n, s);", "    pass", "\t\tcase 0x7F: break;",
        "a+=b;c-=d;e*=f;g/=h;i%=j;k<<=1;l>>=2;", "fn main() -> Result<(), Box<dyn Error>> {",
        "/* block\n * comment\n */", "    // 日本語のコメント", "path = \"/usr/local/lib/\" + name",
        "url: https://example.com/a/b?c=d&e=f#g", "0xDEADBEEF 1e-9 3.14159 -42 1_000_000"};
    const size_t n = 1 + uniform(8);
    for (size_t i = 0; i < n; ++i) {
      const size_t indent = uniform(4);
      for (size_t k = 0; k < indent; ++k) d += chance(0.7) ? "    " : "\t";
      d += pick(lines);
      d += chance(0.85) ? "\n" : "\r\n";
    }
  }

  static constexpr int kScripts = 16;
  // A "word" of 1..8 letters from a script, with combining marks where the script has them.
  void script_word(std::string& d, int script) {
    const size_t n = 1 + uniform(8);
    for (size_t i = 0; i < n; ++i) {
      switch (script) {
        case 0: cp(d, in(0x4E00, 0x9FFF)); break;                        // CJK ideographs
        case 1: cp(d, in(0x3041, 0x3096)); if (chance(0.2)) cp(d, 0x30FC); break;  // hiragana (+Lm)
        case 2: cp(d, in(0xAC00, 0xD7A3)); break;                        // Hangul
        case 3: cp(d, in(0x0627, 0x064A)); if (chance(0.4)) cp(d, in(0x064B, 0x0652)); break;  // Arabic + harakat
        case 4: cp(d, in(0x0915, 0x0939));                               // Devanagari
          if (chance(0.5)) cp(d, in(0x093E, 0x094C));
          if (chance(0.15)) cp(d, 0x094D);
          break;
        case 5: cp(d, in(0x0E01, 0x0E2E));                               // Thai
          if (chance(0.3)) cp(d, pick(std::vector<uint32_t>{0x0E31, 0x0E34, 0x0E35, 0x0E36, 0x0E37, 0x0E38, 0x0E39}));
          if (chance(0.3)) cp(d, in(0x0E48, 0x0E4B));
          break;
        case 6: cp(d, in(0x1780, 0x17A2)); if (chance(0.5)) cp(d, in(0x17B6, 0x17C5)); if (chance(0.1)) cp(d, 0x17D2); break;  // Khmer
        case 7: cp(d, in(0x05D0, 0x05EA)); if (chance(0.3)) cp(d, in(0x05B0, 0x05BC)); break;  // Hebrew + points
        case 8: cp(d, in(0x0410, 0x044F)); break;                        // Cyrillic
        case 9: cp(d, in(0x0391, 0x03C9)); if (chance(0.1)) cp(d, 0x0301); break;  // Greek
        case 10: cp(d, in('a', 'z') - (chance(0.2) ? 32 : 0)); if (chance(0.4)) cp(d, in(0x0300, 0x036F)); break;  // decomposed Latin
        case 11: cp(d, in(0x0B95, 0x0BB9)); if (chance(0.5)) cp(d, in(0x0BBE, 0x0BCD)); break;  // Tamil
        case 12: cp(d, in(0x10D0, 0x10FA)); break;                       // Georgian
        case 13: cp(d, in(0x1200, 0x1248)); break;                       // Ethiopic
        case 14: cp(d, pick(std::vector<uint32_t>{0x01C5, 0x01C8, 0x01CB, 0x01F2, 0x1F88, 0x1F8F, 0x1FBC}));  // Lt
          if (chance(0.5)) cp(d, in('a', 'z'));
          break;
        default: cp(d, pick(std::vector<uint32_t>{0x02B0, 0x02C1, 0x3005, 0x30FC, 0xA67F, 0x1D2C}));  // Lm
          if (chance(0.5)) cp(d, in('A', 'Z'));
          break;
      }
    }
  }
  void script_text(std::string& d, int script) {
    const size_t n = 1 + uniform(12);
    static const std::vector<uint32_t> punct = {0x3002, 0x3001, 0x060C, 0x0964, 0x0E2F, 0x17D4,
                                                0xFF01, 0xFF1F, 0x00BB, 0x201D, '.', ','};
    for (size_t i = 0; i < n; ++i) {
      script_word(d, script);
      if (chance(0.2)) cp(d, pick(punct));
      if (script <= 2 && chance(0.6)) continue;  // CJK often has no spaces
      d += chance(0.9) ? " " : "\xC2\xA0";
    }
  }

  void emoji(std::string& d) {
    const size_t n = 1 + uniform(6);
    for (size_t i = 0; i < n; ++i) {
      switch (uniform(6)) {
        case 0: cp(d, in(0x1F600, 0x1F64F)); break;
        case 1: cp(d, in(0x1F466, 0x1F469)); cp(d, in(0x1F3FB, 0x1F3FF)); break;  // skin tone
        case 2:  // ZWJ family / profession sequences
          cp(d, in(0x1F468, 0x1F469)); if (chance(0.5)) cp(d, in(0x1F3FB, 0x1F3FF));
          cp(d, 0x200D); cp(d, pick(std::vector<uint32_t>{0x1F469, 0x1F467, 0x1F4BB, 0x1F52C, 0x2764}));
          if (chance(0.5)) { cp(d, 0x200D); cp(d, 0x1F466); }
          break;
        case 3: cp(d, in(0x1F1E6, 0x1F1FF)); cp(d, in(0x1F1E6, 0x1F1FF)); break;  // flag
        case 4: cp(d, in('0', '9')); cp(d, 0xFE0F); cp(d, 0x20E3); break;       // keycap
        default: cp(d, pick(std::vector<uint32_t>{0x2764, 0x263A, 0x2600, 0x2705})); cp(d, 0xFE0F); break;
      }
      if (chance(0.3)) d += " ";
    }
  }

  void whitespace(std::string& d) {
    static const std::vector<std::string> ws = {" ", " ", "\t", "\n", "\r\n", "\r", "\v", "\f",
                                                "\xC2\xA0", "\xE3\x80\x80", "\xE2\x80\x83",
                                                "\xC2\x85", "\xE2\x80\xA8", "\xEF\xBB\xBF",
                                                "\xE1\x9A\x80", "\xE2\x80\xAF"};
    const size_t n = 1 + uniform(12);
    for (size_t i = 0; i < n; ++i) d += pick(ws);
    if (chance(0.5)) d += pick(std::vector<std::string>{"x", "Word", "1", "!", "\xC3\xA9", ""});
  }

  void numbers(std::string& d) {
    switch (uniform(6)) {
      case 0: { const size_t n = 1 + uniform(60); for (size_t i = 0; i < n; ++i) cp(d, in('0', '9')); break; }
      case 1: d += std::to_string(uniform(1000000)) + "." + std::to_string(uniform(1000)); break;
      case 2: { const uint32_t base = pick(std::vector<uint32_t>{0x0660, 0x0966, 0xFF10, 0x0E50, 0x17E0});
                const size_t n = 1 + uniform(10); for (size_t i = 0; i < n; ++i) cp(d, base + uint32_t(uniform(10))); break; }
      case 3: cp(d, pick(std::vector<uint32_t>{0x00B2, 0x00BD, 0x2460, 0x2167, 0x216B, 0x3007})); cp(d, in('0', '9')); break;
      case 4: d += "$" + std::to_string(uniform(100000)) + ",000"; break;
      default: d += std::to_string(uniform(10000)) + "-" + std::to_string(uniform(100)) + "x" + std::to_string(uniform(10)); break;
    }
  }

  void contractions(std::string& d) {
    static const std::vector<std::string> base = {"it", "HE", "They", "we", "YOU", "i", "don", "Lu", "x"};
    static const std::vector<std::string> suf = {"'s", "'S", "'t", "'T", "'re", "'RE", "'rE", "'Re",
                                                 "'ve", "'VE", "'m", "'M", "'ll", "'LL", "'lL",
                                                 "'d", "'D", "'\xC5\xBF", "'x", "''", "'", "'s's",
                                                 "'lla", "'rex"};
    const size_t n = 1 + uniform(6);
    for (size_t i = 0; i < n; ++i) {
      if (chance(0.2)) d += std::to_string(uniform(100));
      else d += pick(base);
      d += pick(suf);
      d += chance(0.8) ? " " : "";
    }
  }

  void random_codepoints(std::string& d) {
    const size_t n = 1 + uniform(16);
    for (size_t i = 0; i < n; ++i) {
      uint32_t c;
      do {
        switch (uniform(5)) {
          case 0: c = in(0x20, 0x7FF); break;
          case 1: c = in(0x800, 0xFFFF); break;
          case 2: c = in(0x10000, 0x1FFFF); break;
          case 3: c = in(0x20000, 0x3134F); break;
          default: c = pick(std::vector<uint32_t>{in(0xE0000, 0xE01EF), in(0xF0000, 0xF00FF), in(0, 0x1F)}); break;
        }
      } while (!is_assigned(c) || c == 0);
      cp(d, c);
      if (chance(0.15)) d += " ";
    }
  }

  void specials(std::string& d) {
    static const std::vector<std::string> sp = {
        "<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|return|>", "<|call|>",
        "<|constrain|>", "<|endoftext|>", "<|startoftext|>", "<|endofprompt|>",
        "<|reserved_200000|>", "<|reserved_200018|>", "<|reserved_201087|>", "<|reserved_201088|>",
        "<|start", "<|end|", "<|", "|>", "<<|end|>>", "<|START|>", "<| end |>", "<|endoftext|><|end|>"};
    const size_t n = 1 + uniform(4);
    for (size_t i = 0; i < n; ++i) {
      d += pick(sp);
      if (chance(0.5)) d += pick(std::vector<std::string>{"assistant", "user", "analysis", " final", "\n", " to=functions.get"});
    }
  }

  void bad_bytes(std::string& d) {
    static const std::vector<std::string> bad = {"\x80", "\xBF", "\xC0\xAF", "\xC2", "\xE2\x82",
                                                 "\xED\xA0\x80", "\xF0\x9F\x98", "\xF4\x90\x80\x80",
                                                 "\xF5", "\xFF", "\xFE\xFE", "\xE0\x80\x80", "\xF0\x80"};
    const size_t n = 1 + uniform(3);
    for (size_t i = 0; i < n; ++i) {
      d += pick(bad);
      if (chance(0.5)) d += pick(std::vector<std::string>{"a", " ", "\xC3\xA9", "1", ""});
    }
  }

  std::mt19937_64 rng_;
};

}  // namespace brass::tok::testing
