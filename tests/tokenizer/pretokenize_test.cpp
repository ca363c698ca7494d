// The o200k splitter against pieces worked out by hand from the regex (leftmost-first
// alternation, greedy quantifiers with backtracking, Rust's \s = White_Space).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tokenizer/pretokenize.h"
#include "test_util.h"

namespace brass::tok {
namespace {

std::vector<std::string> split(std::string_view s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    const size_t e = o200k_piece_end(s, i);
    EXPECT_GT(e, i);
    if (e <= i) break;
    out.emplace_back(s.substr(i, e - i));
    i = e;
  }
  return out;
}

using V = std::vector<std::string>;

TEST(Pretokenize, Words) {
  EXPECT_EQ(split("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(split("HTTPRequest"), (V{"HTTPRequest"}));       // A* then B+ at 'equest'
  EXPECT_EQ(split("ABC DEF"), (V{"ABC", " DEF"}));            // alternative 2
  EXPECT_EQ(split("camelCase"), (V{"camel", "Case"}));
  EXPECT_EQ(split("iPhone"), (V{"i", "Phone"}));
  EXPECT_EQ(split("(hello)"), (V{"(hello", ")"}));            // P? takes the bracket
  EXPECT_EQ(split("\"Quote\""), (V{"\"Quote", "\""}));
}

TEST(Pretokenize, Contractions) {
  EXPECT_EQ(split("it's"), (V{"it's"}));
  EXPECT_EQ(split("THEY'RE here"), (V{"THEY'RE", " here"}));
  EXPECT_EQ(split("we'Ll"), (V{"we'Ll"}));
  EXPECT_EQ(split("x'q"), (V{"x", "'q"}));
  EXPECT_EQ(split("it\xE2\x80\x99s"), (V{"it", "\xE2\x80\x99s"}));  // ’ is not '
  EXPECT_EQ(split("it'\xC5\xBF"), (V{"it'\xC5\xBF"}));              // 'ſ folds to 's
  EXPECT_EQ(split("5's"), (V{"5", "'s"}));
}

TEST(Pretokenize, Numbers) {
  EXPECT_EQ(split("1234567"), (V{"123", "456", "7"}));
  EXPECT_EQ(split("x 12"), (V{"x", " ", "12"}));
  EXPECT_EQ(split("\xD9\xA1\xD9\xA2\xD9\xA3\xD9\xA4"),
            (V{"\xD9\xA1\xD9\xA2\xD9\xA3", "\xD9\xA4"}));  // Arabic-Indic digits
}

TEST(Pretokenize, Punctuation) {
  EXPECT_EQ(split("a, b"), (V{"a", ",", " b"}));
  EXPECT_EQ(split("x = y;\n"), (V{"x", " =", " y", ";\n"}));
  EXPECT_EQ(split("</a>//\n\nz"), (V{"</", "a", ">//\n\n", "z"}));
  EXPECT_EQ(split("\xF0\x9F\x98\x80\xF0\x9F\x98\x80 !"),
            (V{"\xF0\x9F\x98\x80\xF0\x9F\x98\x80", " !"}));
}

TEST(Pretokenize, Whitespace) {
  EXPECT_EQ(split("a   b"), (V{"a", "  ", " b"}));           // \s+(?!\S) gives one back
  EXPECT_EQ(split("a \n\n b"), (V{"a", " \n\n", " b"}));      // \s*[\r\n]+
  EXPECT_EQ(split("a\r\n\tb"), (V{"a", "\r\n", "\tb"}));
  EXPECT_EQ(split("end   "), (V{"end", "   "}));              // at end of text: all
  EXPECT_EQ(split(" \t x"), (V{" \t", " x"}));
  EXPECT_EQ(split("\t\t1"), (V{"\t", "\t", "1"}));            // \t then \s+ before a digit
  // U+0085 is White_Space for Rust's \s (JS's \s lacks it): "a", NEL, NEL+"b".
  EXPECT_EQ(split("a\xC2\x85\xC2\x85" "b"), (V{"a", "\xC2\x85", "\xC2\x85" "b"}));
  // U+FEFF is not White_Space: a run of two is punctuation-like (alternative 4).
  EXPECT_EQ(split("a\xEF\xBB\xBF\xEF\xBB\xBF" "b"), (V{"a", "\xEF\xBB\xBF\xEF\xBB\xBF", "b"}));
}

TEST(Pretokenize, MarksAndScripts) {
  // Devanagari: consonants Lo, vowel signs Mc/Mn: one piece; a leading space joins.
  EXPECT_EQ(split("\xE0\xA4\xB9\xE0\xA4\xBF\xE0\xA4\x82\xE0\xA4\xA6\xE0\xA5\x80 \xE0\xA4\x95"),
            (V{"\xE0\xA4\xB9\xE0\xA4\xBF\xE0\xA4\x82\xE0\xA4\xA6\xE0\xA5\x80", " \xE0\xA4\x95"}));
  // A lone combining mark after a space: P? = space, then the mark is B.
  EXPECT_EQ(split(" \xCC\x81"), (V{" \xCC\x81"}));
  // Decomposed e + acute, uppercase then lowercase: one word.
  EXPECT_EQ(split("E\xCC\x81te"), (V{"E\xCC\x81te"}));
}

TEST(Pretokenize, LinearOnPathologicalInput) {
  const auto time_split = [](const std::string& s) {
    const auto t0 = std::chrono::steady_clock::now();
    size_t i = 0, n = 0;
    while (i < s.size()) i = o200k_piece_end(s, i), ++n;
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  std::string spaces(200000, ' ');
  std::string upper(200000, 'A');
  std::string marks;
  for (int i = 0; i < 50000; ++i) marks += "\xCC\x81";
  std::string mixed;
  for (int i = 0; i < 50000; ++i) mixed += "\n ";
  for (const std::string* s : {&spaces, &upper, &marks, &mixed}) EXPECT_LT(time_split(*s), 1.0);
}

}  // namespace
}  // namespace brass::tok
