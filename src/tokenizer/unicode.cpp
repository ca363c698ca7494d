// Character-class lookup (two-stage table generated from the UCD) and UTF-8
// validation / lossy repair. See unicode.h.
#include "tokenizer/unicode.h"

namespace brass::tok {
namespace {
#include "tokenizer/unicode_tables.inc"

inline uint8_t table_byte(uint32_t cp) {
  if (cp >= 0x110000) return 0x80;
  return kUnicodeStage2[(size_t(kUnicodeStage1[cp >> kUnicodeBlockShift]) << kUnicodeBlockShift) |
                        (cp & ((1u << kUnicodeBlockShift) - 1))];
}
}  // namespace

CharClass char_class(uint32_t cp) { return CharClass(table_byte(cp) & 0x0F); }
bool is_assigned(uint32_t cp) { return (table_byte(cp) & 0x80) == 0; }

int utf8_seq_len(std::string_view s, size_t i, int* bad_len, bool* truncated) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  const unsigned b0 = p[i];
  *truncated = false;
  if (b0 < 0x80) return 1;
  int need;
  unsigned lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    if (b0 == 0xE0) lo = 0xA0;       // no overlong forms
    else if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    if (b0 == 0xF0) lo = 0x90;       // no overlong forms
    else if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    *bad_len = 1;  // 80..C1, F5..FF never start a sequence
    return 0;
  }
  for (int k = 1; k <= need; ++k) {
    if (i + k >= n) {
      *bad_len = k;
      *truncated = true;
      return 0;
    }
    const unsigned b = p[i + k];
    const unsigned l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) {
      *bad_len = k;
      return 0;
    }
  }
  return need + 1;
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (cp < 0x800) {
    out.push_back(char(0xC0 | (cp >> 6)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(char(0xE0 | (cp >> 12)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (cp >> 18)));
    out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  }
}

bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    int bad;
    bool trunc;
    const int len = utf8_seq_len(s, i, &bad, &trunc);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  size_t i = 0;
  while (i < s.size()) {
    int bad;
    bool trunc;
    const int len = utf8_seq_len(s, i, &bad, &trunc);
    if (len > 0) {
      out.append(s.data() + i, len);
      i += len;
    } else {
      out.append("\xEF\xBF\xBD");
      i += bad;
    }
  }
  return out;
}

}  // namespace brass::tok
