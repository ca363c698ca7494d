// Parity with tiktoken: a >= 1 MB random corpus (fresh seed each run) is encoded by brass
// and by js-tiktoken (tests/oracle/tokenizer/tiktoken_oracle.mjs, run through node), with
// and without specials, valid and invalid UTF-8; random token sequences are decoded by
// both (js-tiktoken decodes through TextDecoder, i.e. invalid UTF-8 -> U+FFFD, which must
// equal utf8_lossy(decode) and the StreamDecoder output). Every id must agree.
// node and node_modules are required (scripts/setup.sh installs them): no skipping.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "corpus_gen.h"
#include "test_util.h"
#include "tokenizer/unicode.h"

namespace brass::tok {
namespace {

using testing::escape;

struct Record {
  uint8_t kind;  // 0 encode ordinary, 1 encode with specials, 2 decode
  std::string text;
  std::vector<Token> ids;  // kind 2
};

std::string temp_path(const std::string& stem) {
  return fmt::format("{}/brass_tok_{}_{}", ::testing::TempDir(), getpid(), stem);
}

void write_records(const std::string& path, const std::vector<Record>& recs) {
  std::ofstream f(path, std::ios::binary);
  f << "BTOK1";
  for (const Record& r : recs) {
    std::string payload = r.text;
    if (r.kind == 2) payload.assign(reinterpret_cast<const char*>(r.ids.data()), r.ids.size() * 4);
    const uint32_t n = uint32_t(payload.size());
    f.put(char(r.kind));
    f.write(reinterpret_cast<const char*>(&n), 4);  // little-endian host (x86/arm64)
    f << payload;
  }
}

nlohmann::json run_oracle(const std::string& in, const std::string& out) {
  const std::string script = std::string(BRASS_SOURCE_DIR) + "/tests/oracle/tokenizer/tiktoken_oracle.mjs";
  const std::string cmd =
      fmt::format("node '{}' '{}' '{}' '{}' 2>&1", script, in, out, testing::rank_file_path());
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) {
    ADD_FAILURE() << "cannot run: " << cmd;
    return {};
  }
  std::string log;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) log.append(buf, n);
  const int rc = pclose(p);
  if (rc != 0) {
    ADD_FAILURE() << "node oracle failed (exit " << rc << "); node and node_modules are required "
                  << "(scripts/setup.sh):\n" << cmd << "\n" << log;
    return {};
  }
  std::ifstream f(out);
  return nlohmann::json::parse(f);
}

// Where two id sequences first differ, with the text around it, for a readable failure.
std::string describe_mismatch(const Tokenizer& tok, const std::string& text,
                              const std::vector<Token>& got, const std::vector<Token>& want) {
  size_t k = 0;
  while (k < got.size() && k < want.size() && got[k] == want[k]) ++k;
  std::string prefix;
  for (size_t j = 0; j < k; ++j) prefix += tok.token_bytes(got[j]);
  std::ostringstream os;
  os << "first difference at token " << k << " (byte ~" << prefix.size() << "): brass [";
  for (size_t j = k; j < got.size() && j < k + 6; ++j) os << got[j] << " '" << escape(tok.token_bytes(got[j]), 40) << "' ";
  os << "] tiktoken [";
  for (size_t j = k; j < want.size() && j < k + 6; ++j) os << want[j] << " '" << escape(tok.token_bytes(want[j]), 40) << "' ";
  os << "]\ncontext: '" << escape(std::string_view(text).substr(prefix.size() > 40 ? prefix.size() - 40 : 0, 120)) << "'";
  return os.str();
}

TEST(TiktokenParity, RandomCorpus) {
  const Tokenizer& tok = testing::o200k();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  testing::CorpusGen gen(seed);

  std::vector<Record> recs;
  size_t corpus_bytes = 0;
  while (corpus_bytes < (1u << 20) + 100000) {
    Record r;
    r.kind = gen.chance(0.5) ? 1 : 0;
    r.text = gen.document(50 + gen.uniform(3000), gen.chance(0.3));
    corpus_bytes += r.text.size();
    recs.push_back(std::move(r));
  }
  // Decode checks: random ordinary ids (many are partial UTF-8) and specials.
  for (int k = 0; k < 400; ++k) {
    Record r;
    r.kind = 2;
    const size_t n = 1 + gen.uniform(40);
    for (size_t j = 0; j < n; ++j) {
      Token t = Token(gen.uniform(199998));
      if (gen.chance(0.05)) t = Token(200000 + gen.uniform(18));  // not 200018 (two names)
      r.ids.push_back(t);
    }
    recs.push_back(std::move(r));
  }
  const std::string in = temp_path("records.bin"), out = temp_path("oracle.json");
  write_records(in, recs);
  const nlohmann::json js = run_oracle(in, out);
  ASSERT_TRUE(js.contains("results")) << "oracle output missing";
  const auto& res = js["results"];
  ASSERT_EQ(res.size(), recs.size());

  size_t n_tokens = 0, n_failed = 0;
  for (size_t i = 0; i < recs.size() && n_failed < 5; ++i) {
    const Record& r = recs[i];
    if (r.kind == 2) {
      const std::string want = res[i].get<std::string>();
      const std::string raw = tok.decode(r.ids);
      EXPECT_EQ(utf8_lossy(raw), want) << "decode record " << i;
      StreamDecoder sd(tok);
      std::string streamed;
      for (Token t : r.ids) {
        const std::string piece = sd.push(t);
        EXPECT_TRUE(is_valid_utf8(piece));
        streamed += piece;
      }
      streamed += sd.flush();
      EXPECT_EQ(streamed, want) << "stream decode record " << i;
      continue;
    }
    const std::vector<Token> want = res[i].get<std::vector<Token>>();
    const std::vector<Token> got = tok.encode(r.text, r.kind == 1);
    n_tokens += got.size();
    if (got != want) {
      ++n_failed;
      const std::string dump = temp_path(fmt::format("mismatch_{}.txt", i));
      std::ofstream(dump, std::ios::binary) << r.text;
      ADD_FAILURE() << "document " << i << " (allow_special=" << int(r.kind) << ", "
                    << r.text.size() << " bytes, saved to " << dump << "): "
                    << describe_mismatch(tok, utf8_lossy(r.text), got, want);
      continue;
    }
    // Round trip: valid UTF-8 decodes back exactly; invalid comes back repaired. With
    // specials, 200018's alias <|reserved_200018|> comes back as <|endofprompt|>.
    std::string expect = utf8_lossy(r.text);
    if (r.kind == 1) {
      for (size_t at; (at = expect.find("<|reserved_200018|>")) != std::string::npos;)
        expect.replace(at, 19, "<|endofprompt|>");
    }
    EXPECT_EQ(tok.decode(got), expect) << "round trip of document " << i;
  }
  std::remove(in.c_str());
  std::remove(out.c_str());
  std::printf("tiktoken parity: %zu documents, %zu bytes, %zu tokens, seed %llu\n", recs.size(),
              corpus_bytes, n_tokens, static_cast<unsigned long long>(seed));
}

}  // namespace
}  // namespace brass::tok
