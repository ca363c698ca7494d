// Sliding-window snapshots (model/kv_cache.h) through the CUDA backend's device KV: a
// sequence prefilled, snapshotted, decoded 40 steps with captured graphs (its rings wrap),
// cut back to the prompt end (restoring the snapshot) and continued must equal a fresh
// sequence that reads the same tokens; without a snapshot the same cut is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "backend/cuda/cuda_backend.h"
#include "cuda_test_util.h"
#include "gguf/reader.h"
#include "model/model.h"
#include "../model/tiny_model.h"

namespace brass::model {
namespace {
using brass::testing::make_tiny;
using brass::testing::TempFile;
using brass::testing::TinySpec;

TEST(KvSnapCuda, RestoreContinuesLikeAFreshRun) {
  BRASS_REQUIRE_CUDA();
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  TempFile file("model");
  ASSERT_TRUE(make_tiny(TinySpec{}, seed).write(file.path).is_ok());
  std::mt19937 rng(seed);
  auto toks = [&](int n) {
    std::vector<int32_t> t(n);
    for (auto& x : t) x = std::uniform_int_distribution<int>(0, 95)(rng);
    return t;
  };
  for (DType kvt : {DType::F32, DType::F16}) {
    ModelOptions o;
    o.n_ctx = 256;
    o.max_chunk_tokens = 4;
    o.kv_type = kvt;
    auto reader = gguf::Reader::open(file.path);
    ASSERT_TRUE(reader.is_ok());
    auto be = backend::make_cuda_backend(0);
    ASSERT_TRUE(be.is_ok()) << be.status().message();
    auto mr = Model::load(std::move(reader).value(), o, std::move(be).value());
    ASSERT_TRUE(mr.is_ok()) << mr.status().message();
    Model& m = *mr.value();
    const auto p = toks(21), y = toks(13);
    const int32_t lp = 21;
    ForwardOutput out_a, out_b, tmp;
    auto run = [&](int32_t id, const std::vector<int32_t>& t, int32_t pos0, bool all, ForwardOutput& out) {
      SeqChunk ch{id, t, pos0, all};
      Status s = m.forward({&ch, 1}, out);
      ASSERT_TRUE(s.is_ok()) << s.message();
    };
    ASSERT_TRUE(m.add_sequence(1).is_ok());
    run(1, p, 0, false, tmp);
    ASSERT_TRUE(m.kv_cache().snapshot_window(1).is_ok());
    std::vector<int32_t> gen;
    ASSERT_TRUE(m.decode_greedy(1, 7, 40, gen).is_ok());  // graphs; the rings wrap
    EXPECT_EQ(m.kv_cache().usable_cut(1, lp + 3), lp);
    ASSERT_TRUE(m.truncate_sequence(1, lp).is_ok());
    run(1, y, lp, true, out_a);
    std::vector<int32_t> ga, gb;
    ASSERT_TRUE(m.decode_greedy(1, 5, 20, ga).is_ok());
    ASSERT_TRUE(m.add_sequence(2).is_ok());
    run(2, p, 0, false, tmp);
    run(2, y, lp, true, out_b);
    ASSERT_TRUE(m.decode_greedy(2, 5, 20, gb).is_ok());
    ASSERT_EQ(out_a.logits.size(), out_b.logits.size());
    double md = 0;
    for (size_t i = 0; i < out_a.logits.size(); ++i) md = std::max(md, (double)std::fabs(out_a.logits[i] - out_b.logits[i]));
    std::printf("kv %s: max |logit diff| restored vs fresh %g, bit-identical %d\n", std::string(dtype_name(kvt)).c_str(), md,
                std::memcmp(out_a.logits.data(), out_b.logits.data(), out_a.logits.size() * 4) == 0);
    EXPECT_LE(md, 1e-5);
    EXPECT_EQ(ga, gb);
    ASSERT_TRUE(m.add_sequence(3).is_ok());
    run(3, p, 0, false, tmp);
    ASSERT_TRUE(m.decode_greedy(3, 7, 40, gen).is_ok());
    EXPECT_FALSE(m.truncate_sequence(3, lp).is_ok());
  }
}
}  // namespace
}  // namespace brass::model
