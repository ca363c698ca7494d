// The whole model on the CUDA backend with a small KV block size (16 positions), so the
// full-attention layers' blocks of several sequences interleave in the pool and every
// sequence crosses many block boundaries: staggered prompts, then decode steps batched
// over all sequences (batched decode graphs re-targeted every round) mixed with steps of
// one sequence alone (its own captured graph, replayed while new blocks are appended to
// its table), a sequence removed and a new one reusing its blocks; logits against the
// CPU reference backend step by step (exact mode, f32 cache). decode_greedy (argmax on the
// device feeding the next graph launch) across block boundaries equals forward + argmax.
// Skips without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>

#include "backend/cuda/cuda_backend.h"
#include "cuda_model_util.h"
#include "cuda_test_util.h"
#include "gguf/reader.h"
#include "model/model.h"
#include "../model/tiny_model.h"

namespace brass::model {
namespace {

using brass::testing::make_tiny;
using brass::testing::TempFile;
using brass::testing::TinySpec;
using testing::load_on;

int32_t argmax(const float* x, int64_t n) { return static_cast<int32_t>(std::max_element(x, x + n) - x); }

TEST(CudaPagedModel, InterleavedBlocksMatchReference) {
  BRASS_REQUIRE_CUDA();
  backend::testing::Rng rng;
  SEED_TRACE(rng);
  TempFile file("cuda_paged_model");
  const TinySpec spec;
  ASSERT_TRUE(make_tiny(spec, rng.seed).write(file.path).is_ok());
  ModelOptions o;
  o.kv_type = DType::F32;
  o.n_ctx = 256;
  o.max_chunk_tokens = 32;
  o.kv_block_size = 16;
  o.kv_tokens = 1024;
  auto cpu = load_on(file.path, o, false), gpu = load_on(file.path, o, true, /*q8x=*/false);  // exact mode: the reference's numerics
  ASSERT_TRUE(cpu && gpu);
  const int64_t V = spec.n_vocab;
  constexpr int kSeqs = 4;
  std::vector<int32_t> next(kSeqs), len(kSeqs, 0);
  std::vector<int32_t> ids = {0, 1, 2, 3};
  auto prefill = [&](int i, int n) {
    std::vector<int32_t> prompt(n);
    for (auto& t : prompt) t = rng.integer(0, static_cast<int>(V) - 1);
    for (Model* m : {cpu.get(), gpu.get()}) ASSERT_TRUE(m->add_sequence(ids[i]).is_ok());
    ForwardOutput oc, og;
    SeqChunk ch{.seq_id = ids[i], .tokens = prompt, .pos0 = 0};
    ASSERT_TRUE(cpu->forward(std::span(&ch, 1), oc).is_ok());
    ASSERT_TRUE(gpu->forward(std::span(&ch, 1), og).is_ok());
    backend::testing::expect_close(og.logits, oc.logits, 1e-4, 1e-4, "prefill of sequence " + std::to_string(ids[i]));
    next[i] = argmax(oc.row(0), V);
    len[i] = n;
  };
  for (int i = 0; i < kSeqs; ++i) prefill(i, rng.integer(5, 40));
  for (int step = 0; step < 40; ++step) {
    if (step == 20) {  // sequence 0 leaves; a new one takes its blocks
      for (Model* m : {cpu.get(), gpu.get()}) ASSERT_TRUE(m->remove_sequence(ids[0]).is_ok());
      ids[0] = 10;
      prefill(0, rng.integer(20, 40));
    }
    // Every third step sequence 1 alone (single-sequence graph), else all together.
    std::vector<int> who;
    if (step % 3 == 2)
      who = {1};
    else
      who = {0, 1, 2, 3};
    std::vector<SeqChunk> chunks;
    for (int i : who) chunks.push_back({.seq_id = ids[i], .tokens = std::span(&next[i], 1), .pos0 = len[i]});
    ForwardOutput oc, og;
    ASSERT_TRUE(cpu->forward(chunks, oc).is_ok());
    ASSERT_TRUE(gpu->forward(chunks, og).is_ok());
    backend::testing::expect_close(og.logits, oc.logits, 1e-4, 1e-4, "decode step " + std::to_string(step));
    for (size_t k = 0; k < who.size(); ++k) {
      next[who[k]] = argmax(oc.row(k), V);
      ++len[who[k]];
    }
  }
  // decode_greedy across several blocks == forward + argmax on the same backend.
  for (int32_t id : {20, 21}) {
    ASSERT_TRUE(gpu->add_sequence(id).is_ok());
  }
  std::vector<int32_t> prompt(13);
  for (auto& t : prompt) t = rng.integer(0, static_cast<int>(V) - 1);
  ForwardOutput og;
  for (int32_t id : {20, 21}) {
    SeqChunk ch{.seq_id = id, .tokens = prompt, .pos0 = 0};
    ASSERT_TRUE(gpu->forward(std::span(&ch, 1), og).is_ok());
  }
  const int32_t first = argmax(og.row(0), V);
  std::vector<int32_t> greedy, by_forward;
  ASSERT_TRUE(gpu->decode_greedy(20, first, 45, greedy).is_ok());
  int32_t t = first;
  for (int step = 0; step < 45; ++step) {
    SeqChunk d{.seq_id = 21, .tokens = std::span(&t, 1), .pos0 = 13 + step};
    ASSERT_TRUE(gpu->forward(std::span(&d, 1), og).is_ok());
    t = argmax(og.row(0), V);
    by_forward.push_back(t);
  }
  EXPECT_EQ(greedy, by_forward);
  EXPECT_EQ(gpu->kv_cache().held_blocks(20), (13 + 45 + 15) / 16);
}

}  // namespace
}  // namespace brass::model
