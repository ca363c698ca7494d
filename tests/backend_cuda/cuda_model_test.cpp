// The whole gpt-oss forward pass on the CUDA backend against the CPU reference backend,
// on tiny random models (tests/model/tiny_model.h): prompt prefill then token-by-token
// decode (the decode steps go through captured CUDA graphs after the first), logits
// compared step by step; f32 and f16 KV caches; a sliding window short enough that the
// ring wraps; exact (f32 activations) and int8-activation modes. decode_greedy (argmax on the device feeding the next graph launch) must
// pick exactly the argmax of the same backend's forward logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <map>
#include <random>

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

// Sequence id joins every model with a random prompt of lo..hi tokens (one prefill each);
// returns the prompt's length and, in next, the greedy pick of the last model's logits.
int32_t join_all(std::initializer_list<Model*> ms, int32_t id, backend::testing::Rng& rng, int lo, int hi, int64_t V,
                 int32_t& next) {
  std::vector<int32_t> prompt(rng.integer(lo, hi));
  for (auto& t : prompt) t = rng.integer(0, static_cast<int>(V) - 1);
  SeqChunk ch{.seq_id = id, .tokens = prompt, .pos0 = 0};
  ForwardOutput out;
  for (Model* m : ms) {
    EXPECT_TRUE(m->add_sequence(id).is_ok());
    const Status st = m->forward(std::span(&ch, 1), out);
    EXPECT_TRUE(st.is_ok()) << st.message();
    if (!st.is_ok()) return 0;
  }
  next = argmax(out.row(0), V);
  return static_cast<int32_t>(prompt.size());
}

// q8x: int8 activations on the GPU; the reference stays f32, so logits agree only to
// the activation quantization error (tol relative to the largest logit).
void run_case(DType kv, const TinySpec& spec, double tol, bool q8x = false, int n_prompt = 21, int64_t chunk = 16,
              int64_t tc_moe_min = 0) {
  backend::testing::Rng rng;
  SEED_TRACE(rng);
  TempFile file("cuda_model");
  ASSERT_TRUE(make_tiny(spec, rng.seed).write(file.path).is_ok());
  ModelOptions o;
  o.kv_type = kv;
  o.n_ctx = 256;
  o.max_chunk_tokens = chunk;
  auto cpu = load_on(file.path, o, false), gpu = load_on(file.path, o, true, q8x, tc_moe_min);
  ASSERT_TRUE(cpu && gpu);
  const int64_t V = spec.n_vocab;
  std::vector<int32_t> prompt(n_prompt);
  for (auto& t : prompt) t = rng.integer(0, static_cast<int>(V) - 1);
  for (Model* m : {cpu.get(), gpu.get()}) ASSERT_TRUE(m->add_sequence(0).is_ok());
  ForwardOutput oc, og;
  SeqChunk ch{.seq_id = 0, .tokens = prompt, .pos0 = 0, .all_logits = true};
  ASSERT_TRUE(cpu->forward(std::span(&ch, 1), oc).is_ok());
  ASSERT_TRUE(gpu->forward(std::span(&ch, 1), og).is_ok());
  auto corr = [](const float* a, const float* b, int64_t n) {
    double sa = 0, sb = 0, sab = 0, saa = 0, sbb = 0;
    for (int64_t i = 0; i < n; ++i) {
      sa += a[i]; sb += b[i]; sab += double(a[i]) * b[i]; saa += double(a[i]) * a[i]; sbb += double(b[i]) * b[i];
    }
    const double ca = saa - sa * sa / n, cb = sbb - sb * sb / n;
    return (sab - sa * sb / n) / std::sqrt(ca * cb);
  };
  int rows_ok = 0, rows = 0;
  // Int8 activations: a router near-tie can legitimately pick another expert on a row,
  // so rows are checked statistically (logit correlation), not element by element.
  auto check = [&](const std::string& what) {
    const int64_t n_rows = static_cast<int64_t>(oc.logits.size()) / V;
    if (!q8x) {
      backend::testing::expect_close(og.logits, oc.logits, tol, tol, what);
      return;
    }
    for (int64_t r = 0; r < n_rows; ++r, ++rows) rows_ok += corr(og.logits.data() + r * V, oc.logits.data() + r * V, V) > 0.95;
  };
  check("prefill logits");
  // Decode 12 tokens (greedy on the CPU's logits so both follow one path).
  int32_t next = argmax(oc.row(0, static_cast<int64_t>(prompt.size()) - 1), V);
  for (int step = 0; step < 12; ++step) {
    const int32_t pos = static_cast<int32_t>(prompt.size()) + step;
    SeqChunk d{.seq_id = 0, .tokens = std::span(&next, 1), .pos0 = pos};
    ASSERT_TRUE(cpu->forward(std::span(&d, 1), oc).is_ok());
    ASSERT_TRUE(gpu->forward(std::span(&d, 1), og).is_ok());
    check("decode logits, step " + std::to_string(step));
    next = argmax(oc.row(0), V);
  }
  if (q8x) {
    EXPECT_GE(rows_ok, rows * 8 / 10) << rows_ok << " of " << rows << " rows correlate > 0.95 with the reference";
    std::printf("int8 activations: %d of %d logit rows correlate > 0.95 with the f32 reference\n", rows_ok, rows);
  }
  // decode_greedy on the GPU == forward + host argmax on the GPU (sequence 1, same prompt).
  ASSERT_TRUE(gpu->add_sequence(1).is_ok());
  ASSERT_TRUE(gpu->add_sequence(2).is_ok());
  SeqChunk p1{.seq_id = 1, .tokens = prompt, .pos0 = 0}, p2{.seq_id = 2, .tokens = prompt, .pos0 = 0};
  ASSERT_TRUE(gpu->forward(std::span(&p1, 1), og).is_ok());
  int32_t first = argmax(og.row(0), V);
  ASSERT_TRUE(gpu->forward(std::span(&p2, 1), og).is_ok());
  std::vector<int32_t> greedy;
  ASSERT_TRUE(gpu->decode_greedy(2, first, 15, greedy).is_ok());
  std::vector<int32_t> by_forward;
  int32_t t = first;
  for (int step = 0; step < 15; ++step) {
    SeqChunk d{.seq_id = 1, .tokens = std::span(&t, 1), .pos0 = static_cast<int32_t>(prompt.size()) + step};
    ASSERT_TRUE(gpu->forward(std::span(&d, 1), og).is_ok());
    t = argmax(og.row(0), V);
    by_forward.push_back(t);
  }
  EXPECT_EQ(greedy, by_forward);
  EXPECT_EQ(gpu->sequence_length(2).value(), static_cast<int64_t>(prompt.size()) + 15);
}

TEST(CudaModel, MatchesReferenceF32Cache) {
  BRASS_REQUIRE_CUDA();
  run_case(DType::F32, TinySpec{}, 2e-4);
}

// A 120-token prompt: the decode steps (graph replays after the first) cross 128 keys,
// where the full layers' decode attention goes from one split to two (set_decode_keys).
TEST(CudaModel, MatchesReferenceF16CacheGptOssHeadDim) {
  BRASS_REQUIRE_CUDA();
  TinySpec s;
  s.head_dim = 64;
  s.n_head = 8;
  s.n_head_kv = 2;
  s.n_embd = 128;
  s.n_ff = 96;
  run_case(DType::F16, s, 5e-4, false, 120);
}

TEST(CudaModel, Int8ActivationsStayCloseToReference) {
  BRASS_REQUIRE_CUDA();
  run_case(DType::F16, TinySpec{}, 0.05, true);
}

// A 200-token prompt in one chunk: the dense matmuls and (threshold lowered to 16 slots per
// expert) the MoE go through the tensor-core (cuBLAS, 16-bit operands) paths; decode then
// continues on the int8 kernels. With the default threshold the same prompt's MoE runs on
// the grouped int8 MMA kernels (100 slots per expert).
TEST(CudaModel, TensorCorePrefillStaysCloseToReference) {
  BRASS_REQUIRE_CUDA();
  run_case(DType::F16, TinySpec{}, 0.05, true, 200, 256, 16);
  run_case(DType::F16, TinySpec{}, 0.05, true, 200, 256);
}

// The batched-decode tests' model: gpt-oss's head_dim 64 (the flash and multi-sequence
// kernels' shape) with 8 query heads per 2 KV heads.
TinySpec batched_spec() {
  TinySpec spec;
  spec.head_dim = 64;
  spec.n_head = 8;
  spec.n_head_kv = 2;
  spec.n_embd = 128;
  return spec;
}

// Batched decode: N sequences of different lengths stepped together (one forward call per
// step, the one-launch multi-sequence attention and KV store) must pick the same greedy
// tokens as each sequence decoded alone, with logits equal to f32 rounding (exact mode:
// the fast mode's tensor-core paths switch on with the batch size, so its numerics are
// batch-dependent by design; see cuda_tc.h).
TEST(CudaModel, BatchedDecodeEqualsSingleStreams) {
  BRASS_REQUIRE_CUDA();
  backend::testing::Rng rng;
  SEED_TRACE(rng);
  TempFile file("cuda_batched");
  const TinySpec spec = batched_spec();
  ASSERT_TRUE(make_tiny(spec, rng.seed).write(file.path).is_ok());
  ModelOptions o;
  o.kv_type = DType::F16;
  o.n_ctx = 128;
  o.max_chunk_tokens = 32;
  auto batched = load_on(file.path, o, true), single = load_on(file.path, o, true);
  ASSERT_TRUE(batched && single);
  const int64_t V = spec.n_vocab;
  constexpr int kSeqs = 5, kSteps = 12;
  std::vector<std::vector<int32_t>> prompts(kSeqs);
  std::vector<int32_t> next(kSeqs);
  for (int i = 0; i < kSeqs; ++i) {
    prompts[i].resize(3 + 7 * i);
    for (auto& t : prompts[i]) t = rng.integer(0, static_cast<int>(V) - 1);
    for (Model* m : {batched.get(), single.get()}) ASSERT_TRUE(m->add_sequence(i).is_ok());
    ForwardOutput out;
    SeqChunk ch{.seq_id = i, .tokens = prompts[i], .pos0 = 0};
    ASSERT_TRUE(batched->forward(std::span(&ch, 1), out).is_ok());
    ASSERT_TRUE(single->forward(std::span(&ch, 1), out).is_ok());
    next[i] = argmax(out.row(0), V);
  }
  std::vector<int32_t> bnext = next, snext = next;
  for (int step = 0; step < kSteps; ++step) {
    std::vector<SeqChunk> chunks(kSeqs);
    for (int i = 0; i < kSeqs; ++i)
      chunks[i] = {.seq_id = i, .tokens = std::span(&bnext[i], 1),
                   .pos0 = static_cast<int32_t>(prompts[i].size()) + step};
    ForwardOutput bo;
    ASSERT_TRUE(batched->forward(chunks, bo).is_ok());
    for (int i = 0; i < kSeqs; ++i) {
      SeqChunk d{.seq_id = i, .tokens = std::span(&snext[i], 1), .pos0 = static_cast<int32_t>(prompts[i].size()) + step};
      ForwardOutput so;
      ASSERT_TRUE(single->forward(std::span(&d, 1), so).is_ok());
      const std::vector<float> b(bo.row(i), bo.row(i) + V), s1(so.row(0), so.row(0) + V);
      backend::testing::expect_close(b, s1, 1e-4, 1e-5, "step " + std::to_string(step) + " seq " + std::to_string(i));
      bnext[i] = argmax(bo.row(i), V);
      snext[i] = argmax(so.row(0), V);
    }
    ASSERT_EQ(bnext, snext) << "greedy tokens diverge at step " << step;
  }
}

// Batched decode rounds run through one graph per batch size, re-targeted each round
// (Graph::update) at that round's sequences. Against the same model without graphs
// (same kernels launched one by one): batches of 3 and 4 of 7 live sequences in random
// order and composition, some rows greedy (picked on the device), a sequence removed and
// a new one (new KV storage) joining halfway; fast (int8 / tensor-core) and exact modes.
TEST(CudaModel, BatchGraphsFollowChangingBatches) {
  BRASS_REQUIRE_CUDA();
  for (bool q8x : {true, false}) {
    backend::testing::Rng rng;
    SEED_TRACE(rng);
    TempFile file("cuda_batch_graphs");
    const TinySpec spec = batched_spec();
    ASSERT_TRUE(make_tiny(spec, rng.seed).write(file.path).is_ok());
    ModelOptions o;
    o.kv_type = DType::F16;
    o.n_ctx = 160;
    o.max_chunk_tokens = 32;
    ModelOptions eager_o = o;
    eager_o.use_graphs = false;
    auto graphs = load_on(file.path, o, true, q8x), eager = load_on(file.path, eager_o, true, q8x);
    ASSERT_TRUE(graphs && eager);
    const int64_t V = spec.n_vocab;
    std::map<int32_t, int32_t> len, next;  // live sequences: length, next token
    auto join = [&](int32_t id) {
      std::vector<int32_t> prompt(rng.integer(1, 40));
      for (auto& t : prompt) t = rng.integer(0, static_cast<int>(V) - 1);
      ForwardOutput out;
      SeqChunk ch{.seq_id = id, .tokens = prompt, .pos0 = 0};
      for (Model* m : {graphs.get(), eager.get()}) {
        ASSERT_TRUE(m->add_sequence(id).is_ok());
        ASSERT_TRUE(m->forward(std::span(&ch, 1), out).is_ok());
      }
      len[id] = static_cast<int32_t>(prompt.size());
      next[id] = argmax(out.row(0), V);
    };
    for (int32_t id = 0; id < 7; ++id) join(id);
    for (int step = 0; step < 24; ++step) {
      if (step == 12) {  // one leaves, a new one joins
        for (Model* m : {graphs.get(), eager.get()}) ASSERT_TRUE(m->remove_sequence(2).is_ok());
        len.erase(2);
        next.erase(2);
        join(100);
      }
      std::vector<int32_t> ids;
      for (const auto& [id, l] : len) ids.push_back(id);
      std::shuffle(ids.begin(), ids.end(), rng.gen);
      ids.resize(step % 2 ? 3 : 4);
      std::vector<SeqChunk> chunks;
      for (int32_t id : ids)
        chunks.push_back({.seq_id = id, .tokens = std::span(&next[id], 1), .pos0 = len[id],
                          .greedy = rng.integer(0, 2) == 0});
      ForwardOutput go, eo;
      ASSERT_TRUE(graphs->forward(chunks, go).is_ok());
      ASSERT_TRUE(eager->forward(chunks, eo).is_ok());
      for (size_t i = 0; i < ids.size(); ++i) {
        const std::string what = "step " + std::to_string(step) + " seq " + std::to_string(ids[i]);
        if (chunks[i].greedy) {
          ASSERT_EQ(go.token[i], eo.token[i]) << what;
          next[ids[i]] = go.token[i];
        } else {
          const std::vector<float> g(go.row(i), go.row(i) + V), e(eo.row(i), eo.row(i) + V);
          backend::testing::expect_close(g, e, 1e-6, 1e-6, what);
          next[ids[i]] = argmax(go.row(i), V);
        }
        ++len[ids[i]];
      }
    }
  }
}

// Batched decode's fusions of 9..64 sequences: the f16 activation copies
// (CudaBackendOptions::activation_copies: the f16 q / k / v and wo calls read their
// input as the f16 copy the MoE block's combine and the attention wrote, instead of a
// to_half launch's), the RoPE + KV store in the q / k / v call (fuse_qkv_rope) and the
// MoE's grouping as per-expert lists placed by the norm / router kernel (moe_lists).
// Against the same model on a backend without any of them: the same logits bit for bit
// (the same halves into the same kernels, the same rope arithmetic, the MoE's rows
// independent of their place in the grouping), with and without graphs,
// over rounds of changing size and composition (a copy must never be read by a call it
// was not made for; a graph update must refill what the fused call reads); all three
// must have run.
TEST(CudaModel, DecodeFusionsChangeNoBits) {
  BRASS_REQUIRE_CUDA();
  backend::testing::Rng rng;
  SEED_TRACE(rng);
  TempFile file("cuda_decode_fusions");
  TinySpec spec = batched_spec();
  spec.n_embd = 256;  // q / k / v of 4 chunks of K: split over 2 blocks (128: 2 chunks, no split, no fused RoPE)
  ASSERT_TRUE(make_tiny(spec, rng.seed).write(file.path).is_ok());
  const int64_t V = spec.n_vocab;
  constexpr int kSeqs = 20, kSteps = 8;
  for (bool graphs : {true, false}) {
    ModelOptions o;
    o.kv_type = DType::F16;
    o.n_ctx = 512;  // (the pool: 16 contexts' positions, in blocks: one a sequence at least)
    o.max_chunk_tokens = 32;
    o.use_graphs = graphs;
    std::unique_ptr<Model> m[2];  // with the fusions, without
    for (int c = 0; c < 2; ++c) {
      backend::CudaBackendOptions co;
      co.int8_activations = true;
      co.activation_copies = c == 0;
      co.fuse_qkv_rope = c == 0;
      co.moe_lists = c == 0;
      m[c] = testing::load_with(file.path, o, &co);
      ASSERT_TRUE(m[c]);
    }
    std::map<int32_t, int32_t> len, next;
    for (int32_t id = 0; id < kSeqs; ++id) len[id] = join_all({m[0].get(), m[1].get()}, id, rng, 1, 20, V, next[id]);
    ASSERT_FALSE(::testing::Test::HasFailure());
    for (int step = 0; step < kSteps; ++step) {
      std::vector<int32_t> ids;
      for (const auto& [id, l] : len) ids.push_back(id);
      std::shuffle(ids.begin(), ids.end(), rng.gen);
      ids.resize(step % 3 == 0 ? kSeqs : rng.integer(9, kSeqs - 1));
      std::vector<SeqChunk> chunks;
      for (int32_t id : ids) chunks.push_back({.seq_id = id, .tokens = std::span(&next[id], 1), .pos0 = len[id]});
      ForwardOutput out[2];
      for (int c = 0; c < 2; ++c) {
        const Status st = m[c]->forward(chunks, out[c]);
        ASSERT_TRUE(st.is_ok()) << st.message();
      }
      for (size_t i = 0; i < ids.size(); ++i) {
        const std::vector<float> a(out[0].row(i), out[0].row(i) + V), b(out[1].row(i), out[1].row(i) + V);
        ASSERT_EQ(a, b) << "graphs " << graphs << " step " << step << " seq " << ids[i] << " of " << ids.size();
        next[ids[i]] = argmax(out[0].row(i), V);
        ++len[ids[i]];
      }
    }
    const backend::CudaFusionCounts on = backend::cuda_fusion_counts(m[0]->backend()),
                                    off = backend::cuda_fusion_counts(m[1]->backend());
    EXPECT_GT(on.copies_read, 0) << "graphs " << graphs;
    EXPECT_GT(on.qkv_ropes, 0) << "graphs " << graphs;
    EXPECT_GT(on.moe_lists, 0) << "graphs " << graphs;
    EXPECT_EQ(off.copies_read + off.qkv_ropes + off.moe_lists, 0) << "graphs " << graphs;
  }
}

// Pipelined decode (Model::submit / collect) on the GPU, graphs on: each round is issued
// before the previous one's picks are back, its feed chunks' tokens copied on the device
// from those picks. Against forward() rounds of the same batches given the picks from the
// host: the same tokens, round for round. Rounds of 2..8 of 8 sequences in random order
// (sequences sitting out rejoin with a host token; the picks buffer grows while a round
// feeds from it), some rows sampled on the device, int8 and exact modes.
TEST(CudaModel, PipelinedRoundsEqualForwardRounds) {
  BRASS_REQUIRE_CUDA();
  for (bool q8x : {true, false}) {
    backend::testing::Rng rng;
    SEED_TRACE(rng);
    TempFile file("cuda_pipelined");
    const TinySpec spec = batched_spec();
    ASSERT_TRUE(make_tiny(spec, rng.seed).write(file.path).is_ok());
    ModelOptions o;
    o.kv_type = DType::F16;
    o.n_ctx = 160;
    o.max_chunk_tokens = 32;
    auto ref = load_on(file.path, o, true, q8x), pipe = load_on(file.path, o, true, q8x);
    ASSERT_TRUE(ref && pipe);
    const int64_t V = spec.n_vocab;
    constexpr int kSeqs = 8, kSteps = 20;
    std::map<int32_t, int32_t> len, last;
    for (int32_t id = 0; id < kSeqs; ++id) len[id] = join_all({ref.get(), pipe.get()}, id, rng, 1, 30, V, last[id]);
    ASSERT_FALSE(::testing::Test::HasFailure());
    // The rounds: ids, sampled or greedy, the sampling parameters; the reference runs them.
    struct Round {
      std::vector<int32_t> ids;
      std::vector<backend::SampleParams> params;  // temperature 0: greedy
      std::vector<int32_t> host;                  // the token forward() was given
      std::vector<int32_t> picks;
    };
    std::vector<Round> rounds(kSteps);
    std::map<int32_t, int32_t> ref_len = len, ref_last = last;
    for (int k = 0; k < kSteps; ++k) {
      Round& r = rounds[k];
      for (int32_t id = 0; id < kSeqs; ++id) r.ids.push_back(id);
      std::shuffle(r.ids.begin(), r.ids.end(), rng.gen);
      r.ids.resize(k < 3 ? 2 + k : rng.integer(2, kSeqs));
      std::vector<SeqChunk> chunks;
      r.params.resize(r.ids.size());
      for (size_t i = 0; i < r.ids.size(); ++i) {
        backend::SampleParams& p = r.params[i];
        p.temperature = rng.integer(0, 2) == 0 ? 0.8f : 0.0f;
        p.seed = static_cast<uint64_t>(rng.integer(0, 1 << 30));
        p.counter = static_cast<uint64_t>(k);
        r.host.push_back(ref_last[r.ids[i]]);
      }
      for (size_t i = 0; i < r.ids.size(); ++i)
        chunks.push_back({.seq_id = r.ids[i], .tokens = std::span(&r.host[i], 1), .pos0 = ref_len[r.ids[i]],
                          .greedy = r.params[i].temperature <= 0.0f,
                          .sample = r.params[i].temperature > 0.0f ? &r.params[i] : nullptr});
      ForwardOutput out;
      ASSERT_TRUE(ref->forward(chunks, out).is_ok()) << "round " << k;
      r.picks = out.token;
      for (size_t i = 0; i < r.ids.size(); ++i) {
        ref_last[r.ids[i]] = out.token[i];
        ++ref_len[r.ids[i]];
      }
    }
    // Pipelined: a sequence of the previous round is fed on the device, the others get the
    // reference's token (the same as their last collected pick when the two agree).
    std::vector<int32_t> prev;
    std::vector<std::vector<int32_t>> got;
    for (int k = 0; k < kSteps; ++k) {
      const Round& r = rounds[k];
      std::vector<SeqChunk> chunks;
      for (size_t i = 0; i < r.ids.size(); ++i) {
        const bool feed = std::find(prev.begin(), prev.end(), r.ids[i]) != prev.end();
        chunks.push_back({.seq_id = r.ids[i], .tokens = feed ? std::span<const int32_t>() : std::span(&r.host[i], 1),
                          .pos0 = len[r.ids[i]], .greedy = r.params[i].temperature <= 0.0f,
                          .sample = r.params[i].temperature > 0.0f ? &r.params[i] : nullptr, .feed = feed});
        ++len[r.ids[i]];
      }
      const Status st = pipe->submit(chunks);
      ASSERT_TRUE(st.is_ok()) << "round " << k << ": " << st.message();
      if (k > 0) ASSERT_TRUE(pipe->collect(got.emplace_back()).is_ok());
      prev = r.ids;
    }
    ASSERT_TRUE(pipe->collect(got.emplace_back()).is_ok());
    for (int k = 0; k < kSteps; ++k) EXPECT_EQ(got[k], rounds[k].picks) << "round " << k << (q8x ? " int8" : " exact");
  }
}

TEST(CudaModel, UnsupportedWeightTypeIsRefused) {
  BRASS_REQUIRE_CUDA();
  TinySpec s;
  s.mat_type = DType::Q4_0;
  TempFile file("q4");
  ASSERT_TRUE(make_tiny(s, 1).write(file.path).is_ok());
  auto reader = gguf::Reader::open(file.path);
  ASSERT_TRUE(reader.is_ok());
  auto m = Model::load(std::move(reader).value(), {}, std::move(backend::make_cuda_backend()).value());
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.status().message().find("q4_0"), std::string::npos) << m.status().message();
}

}  // namespace
}  // namespace brass::model
