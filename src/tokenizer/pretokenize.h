// The o200k pre-tokenizer: splits text into the pieces that tiktoken's o200k_base
// pattern (tiktoken_ext/openai_public.py, identical in o200k_harmony) matches,
//
//   [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
// | [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
// | \p{N}{1,3}
// | ?[^\s\p{L}\p{N}]+[\r\n/]*
// | \s*[\r\n]+
// | \s+(?!\S)
// | \s+
//
// with the semantics of the Rust regex engines tiktoken uses (fancy-regex over regex):
// leftmost-first alternation, greedy quantifiers with backtracking, \s = the Unicode
// White_Space property, (?i:'s) also matching U+017F LATIN SMALL LETTER LONG S (simple
// case folding). A hand-written matcher, not a regex engine: each alternative's
// backtracking is resolved in closed form (see pretokenize.cpp), so splitting is linear
// in the input length whatever the input.
#pragma once

#include <cstddef>
#include <string_view>

namespace brass::tok {

// End (exclusive) of the piece that starts at byte i of `text` (valid UTF-8, i < size).
// Pieces are never empty and tile the text.
size_t o200k_piece_end(std::string_view text, size_t i);

}  // namespace brass::tok
