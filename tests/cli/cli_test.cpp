// `brass` end to end: spawns the built binary (BRASS_BINARY_DIR/brass) on the built-in
// tiny model and checks what a user or a script sees: --json parses and is consistent,
// seeds reproduce, --tokens works, tokenize/detokenize round-trip, inspect lists the
// tensors, and bad input gives "brass: error: ..." with exit code 1, never a crash.
#include <gtest/gtest.h>

#include "cli_util.h"
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

namespace {

using namespace brass::cli_test;

namespace fs = std::filesystem;




TEST(Cli, RunJsonParsesAndIsConsistent) {
  const uint64_t seed = fresh_seed();
  const Proc p = run("run --json -n 12 --seed " + std::to_string(seed) + " -p 'The quick brown fox'");
  ASSERT_EQ(p.rc, 0) << p.err;
  const auto j = nlohmann::json::parse(p.out);
  ASSERT_TRUE(j["tokens"].is_array());
  EXPECT_GE(j["tokens"].size(), 1u);
  EXPECT_LE(j["tokens"].size(), 12u);
  EXPECT_EQ(j["prompt_tokens"].get<size_t>(), j["prompt"].size());
  EXPECT_GT(j["prompt_tokens"].get<int>(), 0);
  EXPECT_EQ(j["logprobs"].size(), j["tokens"].size());
  for (const auto& lp : j["logprobs"]) EXPECT_LE(lp.get<double>(), 0.0);
  EXPECT_TRUE(j["random_weights"].get<bool>());
  EXPECT_EQ(j["seed"].get<uint64_t>(), seed);
  for (const char* k : {"prefill_s", "prefill_tokens_per_s", "decode_s", "decode_tokens_per_s", "ms_per_token"}) {
    EXPECT_TRUE(j["timings"].contains(k)) << k;
  }
  for (const auto& t : j["tokens"]) {
    EXPECT_GE(t.get<int>(), 0);
    EXPECT_LT(t.get<int>(), 201088);
  }
}

TEST(Cli, SameSeedSameTokens) {
  const std::string seed = std::to_string(fresh_seed());
  const std::string args = "run --json -n 10 --temp 1.0 --top-k 50 -p 'Once upon a time' --seed ";
  const Proc a = run(args + seed), b = run(args + seed), c = run(args + seed + "1");
  ASSERT_EQ(a.rc, 0) << a.err;
  ASSERT_EQ(b.rc, 0) << b.err;
  ASSERT_EQ(c.rc, 0) << c.err;
  const auto ja = nlohmann::json::parse(a.out), jb = nlohmann::json::parse(b.out), jc = nlohmann::json::parse(c.out);
  EXPECT_EQ(ja["tokens"], jb["tokens"]);
  EXPECT_EQ(ja["text"], jb["text"]);
  EXPECT_NE(ja["tokens"], jc["tokens"]);  // 10 draws from top-50: a collision is ~impossible
}

TEST(Cli, TokensPathAndGreedyIgnoresSeed) {
  const Proc a = run("run --json -n 6 --temp 0 --tokens 1,2,3 --seed 1");
  const Proc b = run("run --json -n 6 --temp 0 --tokens 1,2,3 --seed 2");
  ASSERT_EQ(a.rc, 0) << a.err;
  ASSERT_EQ(b.rc, 0) << b.err;
  const auto ja = nlohmann::json::parse(a.out), jb = nlohmann::json::parse(b.out);
  EXPECT_EQ(ja["prompt"], nlohmann::json::array({1, 2, 3}));
  EXPECT_EQ(ja["prompt_tokens"].get<int>(), 3);
  EXPECT_EQ(ja["tokens"], jb["tokens"]);
}

TEST(Cli, StreamsTextAndReportsSpeed) {
  const Proc p = run("run -n 8 --seed 3 -p 'Hello'");
  ASSERT_EQ(p.rc, 0) << p.err;
  EXPECT_NE(p.err.find("RANDOM"), std::string::npos) << p.err;
  EXPECT_NE(p.err.find("tok/s"), std::string::npos) << p.err;
  EXPECT_NE(p.err.find("ms/token"), std::string::npos) << p.err;
  const Proc h = run("run --help");
  EXPECT_EQ(h.rc, 0);
  EXPECT_NE(h.out.find("RANDOM"), std::string::npos) << h.out;
}

TEST(Cli, TokenizeDetokenizeRoundTrip) {
  const std::string text = "Hello, brass! 12345 \xc3\xa9t\xc3\xa9";
  const Proc t = run("tokenize '" + text + "'");
  ASSERT_EQ(t.rc, 0) << t.err;
  ASSERT_FALSE(t.out.empty());
  std::string ids = t.out;
  while (!ids.empty() && ids.back() == '\n') ids.pop_back();
  const Proc d = run("detokenize " + ids);
  ASSERT_EQ(d.rc, 0) << d.err;
  EXPECT_EQ(d.out, text + "\n");
  const Proc s = run("tokenize --special '<|start|>user<|message|>hi<|end|>'");
  ASSERT_EQ(s.rc, 0);
  EXPECT_EQ(s.out.rfind("200006 ", 0), 0u) << s.out;  // <|start|> is id 200006
}

TEST(Cli, InspectListsTensorsAndSummary) {
  const Proc p = run(std::string("inspect ") + BRASS_BINARY_DIR + "/models/builtin-tiny.gguf");
  ASSERT_EQ(p.rc, 0) << p.err;
  for (const char* s : {"general.architecture", "gpt-oss.block_count", "blk.3.ffn_down_exps.weight", "mxfp4",
                        "q8_0", "token_embd.weight", "[201088 x", "4 layers"}) {
    EXPECT_NE(p.out.find(s), std::string::npos) << s;
  }
}

TEST(Cli, BadInputIsACleanError) {
  const std::string dir = (fs::temp_directory_path() / ("brass_cli_" + std::to_string(fresh_seed()))).string();
  fs::create_directories(dir);
  {
    std::ofstream f(dir + "/garbage.gguf", std::ios::binary);
    std::mt19937 rng(fresh_seed());
    f << "GGUF";
    for (int i = 0; i < 4096; ++i) f.put(static_cast<char>(rng()));
  }
  const std::vector<std::string> bad = {
      "run -m " + dir + "/missing.gguf -p hi",
      "run -m " + dir + "/garbage.gguf -p hi",
      "inspect " + dir + "/garbage.gguf",
      "run --tokens 1,x,3",
      "run --tokens 999999999",
      "run",
      "detokenize 12 -5",
      "convert " + dir + " " + dir + "/out.gguf",
      "synth --preset 7b " + dir + "/x.gguf",
      "nosuchcommand",
  };
  for (const auto& args : bad) {
    const Proc p = run(args);
    EXPECT_EQ(p.rc, 1) << args << "\n" << p.err;
    EXPECT_FALSE(p.err.empty()) << args;
  }
  const Proc m = run("run -m " + dir + "/missing.gguf -p hi");
  EXPECT_NE(m.err.find("brass: error:"), std::string::npos) << m.err;
  EXPECT_NE(m.err.find("missing.gguf"), std::string::npos) << m.err;
  fs::remove_all(dir);
}

}  // namespace
