// Unicode tables and UTF-8 repair against hand-checked facts from the Unicode standard.
#include <gtest/gtest.h>

#include "tokenizer/unicode.h"

namespace brass::tok {
namespace {

TEST(Unicode, ClassesOfKnownCodepoints) {
  EXPECT_EQ(char_class('A'), CharClass::kLu);
  EXPECT_EQ(char_class('z'), CharClass::kLl);
  EXPECT_EQ(char_class(0x00DF), CharClass::kLl);    // ß
  EXPECT_EQ(char_class(0x01C5), CharClass::kLt);    // ǅ
  EXPECT_EQ(char_class(0x02B0), CharClass::kLm);    // ʰ
  EXPECT_EQ(char_class(0x30FC), CharClass::kLm);    // ー
  EXPECT_EQ(char_class(0x4E2D), CharClass::kLo);    // 中
  EXPECT_EQ(char_class(0x20000), CharClass::kLo);   // CJK Ext B, inside a First/Last range
  EXPECT_EQ(char_class(0xAC00), CharClass::kLo);    // 가 (range)
  EXPECT_EQ(char_class(0x0301), CharClass::kMark);  // combining acute
  EXPECT_EQ(char_class(0x0E31), CharClass::kMark);  // Thai mai han-akat
  EXPECT_EQ(char_class(0x093E), CharClass::kMark);  // Devanagari AA (Mc)
  EXPECT_EQ(char_class(0x20E3), CharClass::kMark);  // combining enclosing keycap (Me)
  EXPECT_EQ(char_class('7'), CharClass::kNumber);
  EXPECT_EQ(char_class(0x0663), CharClass::kNumber);  // Arabic-Indic 3
  EXPECT_EQ(char_class(0x2160), CharClass::kNumber);  // Ⅰ (Nl)
  EXPECT_EQ(char_class(0x00BD), CharClass::kNumber);  // ½ (No)
  EXPECT_EQ(char_class(' '), CharClass::kSpace);
  EXPECT_EQ(char_class('\v'), CharClass::kSpace);
  EXPECT_EQ(char_class(0x0085), CharClass::kSpace);  // NEL is White_Space
  EXPECT_EQ(char_class(0x00A0), CharClass::kSpace);
  EXPECT_EQ(char_class(0x3000), CharClass::kSpace);
  EXPECT_EQ(char_class(0xFEFF), CharClass::kOther);  // BOM is not White_Space
  EXPECT_EQ(char_class(0x200B), CharClass::kOther);  // ZWSP is not White_Space
  EXPECT_EQ(char_class(0x180E), CharClass::kOther);  // Mongolian vowel separator: not since 6.3
  EXPECT_EQ(char_class('!'), CharClass::kOther);
  EXPECT_EQ(char_class(0x1F600), CharClass::kOther);  // 😀 (So)
  EXPECT_TRUE(is_assigned(0x1F600));
  EXPECT_FALSE(is_assigned(0x0378));  // unassigned in Greek block
  EXPECT_FALSE(is_assigned(0xD800));  // surrogate
  EXPECT_TRUE(is_assigned(0xE000));   // private use is assigned (Co)
}

TEST(Unicode, LossyFollowsMaximalSubparts) {
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(utf8_lossy("abc"), "abc");
  EXPECT_EQ(utf8_lossy("\x80"), r);
  EXPECT_EQ(utf8_lossy("\xE2\x82"), r);               // truncated 3-byte sequence: one
  EXPECT_EQ(utf8_lossy("\xE2\x82" "a"), r + "a");
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x98"), r);           // truncated 4-byte sequence: one
  EXPECT_EQ(utf8_lossy("\xC0\xAF"), r + r);           // overlong lead is never valid
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), r + r + r);   // surrogate: ED then two strays
  EXPECT_EQ(utf8_lossy("\xE0\x80\x80"), r + r + r);   // overlong 3-byte
  EXPECT_EQ(utf8_lossy("\xF4\x90\x80\x80"), r + r + r + r);  // above U+10FFFF
  EXPECT_EQ(utf8_lossy("\xF5\xFF"), r + r);
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x98\x80"), "\xF0\x9F\x98\x80");
  EXPECT_TRUE(is_valid_utf8("\xE2\x82\xAC"));
  EXPECT_FALSE(is_valid_utf8("\xE2\x82"));
}

}  // namespace
}  // namespace brass::tok
