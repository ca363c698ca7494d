// Hand-written matcher for the o200k pattern (see pretokenize.h). For each alternative
// the backtracking regex result is computed directly:
//  alt 1  P? A* B+ C?   A = [Lu Lt Lm Lo M], B = [Ll Lm Lo M], P = [^\r\n L N].
//         A* is greedy and gives back one char at a time until B+ can start, so B+
//         starts at the LAST position k in [p, end of the A-run] whose char is in B;
//         B+ then runs greedily; C? (a contraction) is taken when present. P present is
//         tried before P absent.
//  alt 2  P? A+ B* C?   B* cannot fail, so: the whole A-run (>= 1 char), then the B-run.
//  alt 3  N{1,3}.
//  alt 4  ' '? Q+ [\r\n/]*   Q = [^\s L N].
//  alt 5  \s*[\r\n]+   \s* gives back until [\r\n]+ can match: the match ends right
//         after the last \r or \n of the whitespace run.
//  alt 6  \s+(?!\S)    the whole run at end of text, else the run minus its last char
//         (needs >= 2 chars).
//  alt 7  \s+.
// Every scan is bounded by the piece it produces (plus one lookahead char), so the
// splitter is linear overall.
#include "tokenizer/pretokenize.h"

#include <cstdint>

#include "tokenizer/unicode.h"

namespace brass::tok {
namespace {

struct Ch {
  CharClass cls;
  uint32_t cp;
  int len;  // 0 at end of text
};

// ASCII classes, the hot path.
constexpr CharClass ascii_class(uint32_t c) {
  if (c == ' ' || (c >= 9 && c <= 13)) return CharClass::kSpace;
  if (c >= 'A' && c <= 'Z') return CharClass::kLu;
  if (c >= 'a' && c <= 'z') return CharClass::kLl;
  if (c >= '0' && c <= '9') return CharClass::kNumber;
  return CharClass::kOther;
}
struct AsciiTable {
  CharClass cls[128];
  constexpr AsciiTable() : cls() {
    for (uint32_t c = 0; c < 128; ++c) cls[c] = ascii_class(c);
  }
};
constexpr AsciiTable kAscii;

inline Ch at(std::string_view s, size_t i) {
  if (i >= s.size()) return {CharClass::kOther, 0, 0};
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + i;
  if (p[0] < 0x80) return {kAscii.cls[p[0]], p[0], 1};
  // Input is valid UTF-8 (the tokenizer repairs it first): length from the lead byte.
  const int n = p[0] >= 0xF0 ? 4 : p[0] >= 0xE0 ? 3 : 2;
  const uint32_t cp = utf8_decode(p, n);
  return {char_class(cp), cp, n};
}

inline bool is_letter(CharClass c) { return c >= CharClass::kLu && c <= CharClass::kLo; }
inline bool in_a(CharClass c) {
  return c == CharClass::kLu || c == CharClass::kLt || c == CharClass::kLm ||
         c == CharClass::kLo || c == CharClass::kMark;
}
inline bool in_b(CharClass c) {
  return c == CharClass::kLl || c == CharClass::kLm || c == CharClass::kLo ||
         c == CharClass::kMark;
}
inline bool in_p(const Ch& c) {
  return c.len > 0 && c.cp != '\r' && c.cp != '\n' && !is_letter(c.cls) &&
         c.cls != CharClass::kNumber;
}
inline bool in_q(const Ch& c) {
  return c.len > 0 && (c.cls == CharClass::kOther || c.cls == CharClass::kMark);
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d)? at e: returns the end after the optional contraction.
size_t contraction(std::string_view s, size_t e) {
  if (e >= s.size() || s[e] != '\'') return e;
  auto lc = [&](size_t i) -> char {
    if (i >= s.size()) return 0;
    const char c = s[i];
    return (c >= 'A' && c <= 'Z') ? char(c - 'A' + 'a') : c;
  };
  const char c1 = lc(e + 1);
  switch (c1) {
    case 's': case 't': case 'm': case 'd':
      return e + 2;
    case 'r': case 'v':
      return lc(e + 2) == 'e' ? e + 3 : e;
    case 'l':
      return lc(e + 2) == 'l' ? e + 3 : e;
    default:
      break;
  }
  // U+017F LATIN SMALL LETTER LONG S case-folds to 's'.
  if (e + 2 < s.size() && static_cast<unsigned char>(s[e + 1]) == 0xC5 &&
      static_cast<unsigned char>(s[e + 2]) == 0xBF)
    return e + 3;
  return e;
}

size_t b_run_end(std::string_view s, size_t k) {
  for (;;) {
    const Ch c = at(s, k);
    if (c.len == 0 || !in_b(c.cls)) return k;
    k += c.len;
  }
}

// Alternative 1 starting (after P?) at p: end or 0 when it fails.
size_t alt1(std::string_view s, size_t p) {
  size_t last_b = SIZE_MAX;
  size_t q = p;
  for (;;) {
    const Ch c = at(s, q);
    if (c.len == 0 || !in_a(c.cls)) {
      if (c.len > 0 && in_b(c.cls)) last_b = q;  // an Ll right after the A-run
      break;
    }
    if (in_b(c.cls)) last_b = q;
    q += c.len;
  }
  if (last_b == SIZE_MAX) return 0;
  return contraction(s, b_run_end(s, last_b));
}

// Alternative 2 starting (after P?) at p: end or 0 when it fails.
size_t alt2(std::string_view s, size_t p) {
  size_t q = p;
  for (;;) {
    const Ch c = at(s, q);
    if (c.len == 0 || !in_a(c.cls)) break;
    q += c.len;
  }
  if (q == p) return 0;
  return contraction(s, b_run_end(s, q));
}

}  // namespace

size_t o200k_piece_end(std::string_view s, size_t i) {
  const Ch c0 = at(s, i);
  const bool p0 = in_p(c0);
  const size_t after_p = i + c0.len;

  // Letters (and marks) with an optional leading non-letter.
  if (p0) {
    if (size_t e = alt1(s, after_p)) return e;
  }
  if (size_t e = alt1(s, i)) return e;
  if (p0) {
    if (size_t e = alt2(s, after_p)) return e;
  }
  if (size_t e = alt2(s, i)) return e;

  // \p{N}{1,3}
  if (c0.cls == CharClass::kNumber) {
    size_t e = after_p;
    for (int k = 1; k < 3; ++k) {
      const Ch c = at(s, e);
      if (c.len == 0 || c.cls != CharClass::kNumber) break;
      e += c.len;
    }
    return e;
  }

  // ' '?[^\s\p{L}\p{N}]+[\r\n/]*
  {
    size_t q = SIZE_MAX;
    if (c0.cp == ' ' && in_q(at(s, after_p))) q = after_p;
    else if (in_q(c0)) q = i;
    if (q != SIZE_MAX) {
      for (;;) {
        const Ch c = at(s, q);
        if (!in_q(c)) break;
        q += c.len;
      }
      while (q < s.size() && (s[q] == '\r' || s[q] == '\n' || s[q] == '/')) ++q;
      return q;
    }
  }

  if (c0.cls == CharClass::kSpace) {
    // One scan of the whitespace run serves alternatives 5, 6 and 7.
    size_t q = i, last_nl_end = SIZE_MAX, last_start = i;
    for (;;) {
      const Ch c = at(s, q);
      if (c.len == 0 || c.cls != CharClass::kSpace) break;
      last_start = q;
      q += c.len;
      if (c.cp == '\r' || c.cp == '\n') last_nl_end = q;
    }
    if (last_nl_end != SIZE_MAX) return last_nl_end;   // \s*[\r\n]+
    if (q >= s.size()) return q;                        // \s+(?!\S) at end of text
    if (last_start > i) return last_start;              // \s+(?!\S), giving back one
    return q;                                           // \s+
  }
  // Unreachable for valid input (every char is a letter, number, Q or space), kept so a
  // bug can never loop forever.
  return c0.len > 0 ? after_p : i + 1;
}

}  // namespace brass::tok
