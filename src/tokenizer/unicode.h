// Unicode helpers for the tokenizer: the per-codepoint character classes of the o200k
// pre-tokenizer (from the generated unicode_tables.inc, Unicode 15.0), UTF-8 decoding
// of one codepoint, and the "maximal subpart" rule for invalid UTF-8 that Python's
// bytes.decode(errors="replace") and the WHATWG TextDecoder share: each maximal prefix
// of a would-be-valid sequence (or each lone bad byte) becomes one U+FFFD.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace brass::tok {

enum class CharClass : uint8_t {
  kOther = 0,  // punctuation, symbols, controls that are not White_Space, unassigned
  kLu = 1,
  kLl = 2,
  kLt = 3,
  kLm = 4,
  kLo = 5,
  kMark = 6,   // Mn, Mc, Me
  kNumber = 7, // Nd, Nl, No
  kSpace = 8,  // White_Space property (Rust regex's \s)
};

// Class of a codepoint (cp < 0x110000).
CharClass char_class(uint32_t cp);
// True for codepoints that are assigned in the table's Unicode version (not Cn, not Cs).
bool is_assigned(uint32_t cp);

// Length of the valid UTF-8 sequence starting at s[i] (1..4), or 0 when the bytes at i
// are not a complete valid sequence. On 0, *bad_len is the number of bytes (>= 1) that
// form one maximal invalid subpart, and *truncated says whether that subpart is a valid
// prefix cut off by the end of the input (it could still be completed by more bytes).
int utf8_seq_len(std::string_view s, size_t i, int* bad_len, bool* truncated);

// Decode the valid sequence of length n at s[i] (as returned by utf8_seq_len).
inline uint32_t utf8_decode(const unsigned char* p, int n) {
  switch (n) {
    case 1: return p[0];
    case 2: return ((p[0] & 0x1Fu) << 6) | (p[1] & 0x3Fu);
    case 3: return ((p[0] & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
    default:
      return ((p[0] & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) |
             (p[3] & 0x3Fu);
  }
}

void utf8_append(std::string& out, uint32_t cp);

bool is_valid_utf8(std::string_view s);
// Every maximal invalid subpart replaced by U+FFFD (EF BF BD).
std::string utf8_lossy(std::string_view s);

}  // namespace brass::tok
