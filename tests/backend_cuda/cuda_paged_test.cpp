// Paged KV storage (backend.h AttnSeq::blocks / block_size) on the CUDA backend against
// the CPU reference backend (BRASS_CPU_KERNELS=ref) doing the same ops on the same pool
// layout: several sequences share one block pool through shuffled block tables (their
// blocks interleave, out of order, spare blocks between), the history is stored in
// random chunks that cross block boundaries (one kv_store call per round for all
// sequences: the per-sequence kernel for chunks, the one-launch kernel when every
// sequence has one token), then the chunk is stored and attended. Checked: the whole
// device pool equals the host pool byte for byte (rows where the rule puts them, nothing
// else written), ring sequences mixed into windowed calls keep their rings, attention
// outputs agree to f32 rounding (split decode kernel: lengths crossing block and split
// boundaries, 1 and several sequences, device and host positions), the tensor-core flash
// prefill to its f16 bound, the fused decode q/k/v + store writes the right pool rows,
// and a captured decode graph follows block-table entries appended between launches.
// Skips without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "backend/cuda/cuda_backend.h"
#include "core/half.h"
#include "cuda_test_util.h"
#include "model/rope.h"
#include "quant/quant.h"

namespace brass::backend {
namespace {

using testing::Dev;
using testing::expect_close;
using testing::Rng;

struct Fix {
  Rng rng;
  std::unique_ptr<Backend> cpu = testing::reference_backend();
  std::unique_ptr<Backend> gpu;
  explicit Fix(bool fast = false) {
    CudaBackendOptions o;
    o.int8_activations = fast;  // (fast: tensor cores on, so long f16 chunks take the flash kernel)
    auto r = make_cuda_backend(o);
    EXPECT_TRUE(r.is_ok()) << r.status().message();
    if (r.is_ok()) gpu = std::move(r).value();
  }
};

std::unique_ptr<Buffer> gpu_copy(Backend& gpu, const void* host, size_t n) {
  auto b = std::move(gpu.alloc(n)).value();
  gpu.upload(b->data(), host, n);
  return b;
}

std::vector<uint8_t> gpu_bytes(Backend& gpu, Buffer& b, size_t n) {
  std::vector<uint8_t> h(n);
  gpu.synchronize();
  gpu.download(h.data(), b.data(), n);
  return h;
}

struct PagedCase {
  DType kv;
  int64_t n_head, n_head_kv, hd;
  int32_t window;  // 0: full attention
  int32_t bs;      // block size of the paged sequences
  std::vector<int32_t> pos0, n_tok;
  std::vector<bool> ring;     // per sequence (windowed calls only): a ring of ring_cap slots instead of blocks
  int32_t ring_cap = 0;
  int32_t capacity = 8192;    // paged sequences' logical limit (sizes the decode splits)
  bool device_pos = true;
  double rtol = 2e-5, atol = 2e-6;
  bool round_q = false;       // the reference reads q rounded to f16 (flash prefill's Q operand)
};

// Returns how many of the case's chunks crossed a block boundary (a case with a short
// history may have none; the tests check that their cases together do).
int64_t run_paged_case(Fix& f, const PagedCase& c) {
  SCOPED_TRACE(::testing::Message() << "block " << c.bs << " window " << c.window << " " << dtype_name(c.kv)
                                    << " seqs " << c.pos0.size());
  const size_t n_seq = c.pos0.size();
  const int64_t kv_row = c.n_head_kv * c.hd, esz = c.kv == DType::F16 ? 2 : 4, row = kv_row * esz;
  const int64_t bs = c.bs;
  auto is_ring = [&](size_t s) { return s < c.ring.size() && c.ring[s]; };
  // Block tables: a shuffled permutation of the pool dealt out to the paged sequences.
  std::vector<int64_t> n_blk(n_seq, 0);
  int64_t used = 0;
  for (size_t s = 0; s < n_seq; ++s)
    if (!is_ring(s)) used += n_blk[s] = (c.pos0[s] + c.n_tok[s] + bs - 1) / bs;
  const int64_t n_blocks = used + 2;
  std::vector<int32_t> perm(n_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), f.rng.gen);
  std::vector<std::vector<int32_t>> tables(n_seq);
  std::vector<std::unique_ptr<Buffer>> gtables(n_seq);
  for (size_t s = 0, next = 0; s < n_seq; ++s) {
    for (int64_t b = 0; b < n_blk[s]; ++b) tables[s].push_back(perm[next++]);
    tables[s].resize(std::max<size_t>(tables[s].size(), 1), perm.back());
    gtables[s] = gpu_copy(*f.gpu, tables[s].data(), tables[s].size() * 4);
  }
  // Pools (and rings) start with the same non-zero bytes on both sides.
  std::vector<uint8_t> hk(n_blocks * bs * row, 0x3C), hv(hk.size(), 0x3B);
  auto gk = gpu_copy(*f.gpu, hk.data(), hk.size()), gv = gpu_copy(*f.gpu, hv.data(), hv.size());
  std::vector<std::vector<uint8_t>> rk(n_seq), rv(n_seq);
  std::vector<std::unique_ptr<Buffer>> grk(n_seq), grv(n_seq);
  for (size_t s = 0; s < n_seq; ++s)
    if (is_ring(s)) {
      rk[s].assign(c.ring_cap * row, 0x3C);
      rv[s].assign(c.ring_cap * row, 0x3B);
      grk[s] = gpu_copy(*f.gpu, rk[s].data(), rk[s].size());
      grv[s] = gpu_copy(*f.gpu, rv[s].data(), rv[s].size());
    }
  auto seq = [&](size_t s, bool gpu) {
    AttnSeq a;
    if (is_ring(s)) {
      a.k = gpu ? grk[s]->data() : rk[s].data();
      a.v = gpu ? grv[s]->data() : rv[s].data();
      a.capacity = c.ring_cap;
      a.ring = true;
    } else {
      a.k = gpu ? gk->data() : hk.data();
      a.v = gpu ? gv->data() : hv.data();
      a.capacity = c.capacity;
      a.blocks = gpu ? gtables[s]->as<int32_t>() : tables[s].data();
      a.block_size = c.bs;
    }
    return a;
  };
  // History: rounds of random chunks (rings: only the positions they can hold).
  std::vector<int64_t> done(n_seq);
  for (size_t s = 0; s < n_seq; ++s)
    done[s] = is_ring(s) ? std::max<int64_t>(0, c.pos0[s] - (c.ring_cap - c.n_tok[s])) : 0;
  int64_t crossings = 0;
  for (;;) {
    std::vector<float> k, v;
    std::vector<AttnSeq> cs, gs;
    const bool single = f.rng.integer(0, 2) == 0;  // every sequence one token: the one-launch kernel
    for (size_t s = 0; s < n_seq; ++s) {
      const int64_t left = c.pos0[s] - done[s];
      if (left <= 0) continue;
      const int64_t n = single ? 1 : std::min<int64_t>(left, f.rng.integer(1, static_cast<int>(3 * bs)));
      if (!is_ring(s) && done[s] / bs != (done[s] + n - 1) / bs) ++crossings;
      AttnSeq a = seq(s, false), g = seq(s, true);
      a.tok0 = g.tok0 = static_cast<int64_t>(k.size()) / kv_row;
      a.n_tok = g.n_tok = n;
      a.pos0 = g.pos0 = static_cast<int32_t>(done[s]);
      auto kk = f.rng.vec(n * kv_row), vv = f.rng.vec(n * kv_row);
      k.insert(k.end(), kk.begin(), kk.end());
      v.insert(v.end(), vv.begin(), vv.end());
      cs.push_back(a);
      gs.push_back(g);
      done[s] += n;
    }
    if (cs.empty()) break;
    f.cpu->kv_store({.k = k.data(), .v = v.data(), .kv_type = c.kv, .n_head_kv = c.n_head_kv, .head_dim = c.hd,
                     .seqs = cs});
    Dev dk = Dev::from(*f.gpu, k), dv = Dev::from(*f.gpu, v);
    f.gpu->kv_store({.k = dk.as<float>(), .v = dv.as<float>(), .kv_type = c.kv, .n_head_kv = c.n_head_kv,
                     .head_dim = c.hd, .seqs = gs});
    f.gpu->synchronize();
  }
  // The chunk: store and attend, every sequence in one call.
  std::vector<AttnSeq> cs(n_seq), gs(n_seq);
  std::vector<int32_t> pos;
  int64_t total = 0;
  for (size_t s = 0; s < n_seq; ++s) {
    cs[s] = seq(s, false);
    gs[s] = seq(s, true);
    cs[s].tok0 = gs[s].tok0 = total;
    cs[s].n_tok = gs[s].n_tok = c.n_tok[s];
    cs[s].pos0 = gs[s].pos0 = c.pos0[s];
    if (!is_ring(s) && c.pos0[s] / bs != (c.pos0[s] + c.n_tok[s] - 1) / bs) ++crossings;
    for (int32_t i = 0; i < c.n_tok[s]; ++i) pos.push_back(c.pos0[s] + i);
    total += c.n_tok[s];
  }
  auto q = f.rng.vec(total * c.n_head * c.hd, -2, 2), k = f.rng.vec(total * kv_row), v = f.rng.vec(total * kv_row);
  auto sinks = f.rng.vec(c.n_head, -1, 2);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
  std::vector<float> want(total * c.n_head * c.hd);
  f.cpu->kv_store({.k = k.data(), .v = v.data(), .kv_type = c.kv, .n_head_kv = c.n_head_kv, .head_dim = c.hd,
                   .seqs = cs});
  auto qr = q;
  if (c.round_q)
    for (auto& x : qr) x = f16_to_f32(f32_to_f16(x));
  f.cpu->attention({.q = qr.data(), .sinks = sinks.data(), .out = want.data(), .kv_type = c.kv, .n_head = c.n_head,
                    .n_head_kv = c.n_head_kv, .head_dim = c.hd, .window = c.window, .scale = scale, .seqs = cs});
  Dev dq = Dev::from(*f.gpu, q), dk = Dev::from(*f.gpu, k), dv = Dev::from(*f.gpu, v), dsk = Dev::from(*f.gpu, sinks),
      dp = Dev::from(*f.gpu, pos), dout = Dev::poisoned<float>(*f.gpu, want.size());
  const int32_t* gpos = c.device_pos ? dp.as<int32_t>() : nullptr;
  f.gpu->kv_store({.k = dk.as<float>(), .v = dv.as<float>(), .kv_type = c.kv, .n_head_kv = c.n_head_kv,
                   .head_dim = c.hd, .seqs = gs, .pos = gpos});
  f.gpu->attention({.q = dq.as<float>(), .sinks = dsk.as<float>(), .out = dout.as<float>(), .kv_type = c.kv,
                    .n_head = c.n_head, .n_head_kv = c.n_head_kv, .head_dim = c.hd, .window = c.window,
                    .scale = scale, .seqs = gs, .pos = gpos});
  expect_close(dout.get<float>(want.size()), want, c.rtol, c.atol, "paged attention");
  EXPECT_TRUE(gpu_bytes(*f.gpu, *gk, hk.size()) == hk) << "device K pool differs from the reference pool";
  EXPECT_TRUE(gpu_bytes(*f.gpu, *gv, hv.size()) == hv) << "device V pool differs from the reference pool";
  for (size_t s = 0; s < n_seq; ++s) {
    if (is_ring(s)) {
      EXPECT_TRUE(gpu_bytes(*f.gpu, *grk[s], rk[s].size()) == rk[s]) << "ring of sequence " << s;
    }
  }
  return crossings;
}

TEST(CudaPaged, KvStoreAndDecodeAttention) {
  BRASS_REQUIRE_CUDA();
  Fix f;
  SEED_TRACE(f.rng);
  for (DType kv : {DType::F16, DType::F32})
    for (int32_t bs : {16, 64}) {
      // One sequence (the per-sequence split kernel): first token, the last and first
      // positions of a block, deep (splits of a 8192-position capacity hold 128 keys).
      int64_t crossings = 0;
      for (int32_t p : {0, bs - 1, bs, 4 * bs + 1, 1000, 4097})
        crossings += run_paged_case(f, {.kv = kv, .n_head = 64, .n_head_kv = 8, .hd = 64, .window = 0, .bs = bs, .pos0 = {p},
                           .n_tok = {1}});
      // Batched decode (one launch for all), device and host positions.
      for (bool dpos : {true, false})
        crossings += run_paged_case(f, {.kv = kv, .n_head = 64, .n_head_kv = 8, .hd = 64, .window = 0, .bs = bs,
                           .pos0 = {0, bs, 3 * bs - 1, 2000, 129, 700}, .n_tok = {1, 1, 1, 1, 1, 1},
                           .device_pos = dpos});
      // A windowed call over paged and ring sequences mixed, before and past the window.
      crossings += run_paged_case(f, {.kv = kv, .n_head = 64, .n_head_kv = 8, .hd = 64, .window = 128, .bs = bs,
                         .pos0 = {5, 700, 300, 1500}, .n_tok = {1, 1, 1, 1}, .ring = {false, true, false, true},
                         .ring_cap = 639});
      // Short prefill chunks (split kernel, several tokens), a small capacity (few splits).
      crossings += run_paged_case(f, {.kv = kv, .n_head = 8, .n_head_kv = 2, .hd = 32, .window = 0, .bs = bs,
                                      .pos0 = {bs - 3, 0, 90}, .n_tok = {7, 5, 1}, .capacity = 256});
      EXPECT_GT(crossings, 0) << "no chunk crossed a block boundary (block " << bs << ")";
    }
}

TEST(CudaPaged, FlashPrefill) {
  BRASS_REQUIRE_CUDA();
  Fix f(true);
  SEED_TRACE(f.rng);
  for (int32_t bs : {16, 64}) {
    // Long f16 chunks of head_dim 64 (tensor-core flash kernel): from 0, after history,
    // windowed, two sequences one of which decodes (split kernel) in the same call.
    const PagedCase base{.kv = DType::F16, .n_head = 64, .n_head_kv = 8, .hd = 64, .window = 0, .bs = bs,
                         .pos0 = {0}, .n_tok = {200}, .rtol = 3e-3, .atol = 1e-3, .round_q = true};
    PagedCase c = base;
    EXPECT_GT(run_paged_case(f, c), 0) << "the 200-token chunk crosses blocks of " << bs;
    c.pos0 = {37};
    c.n_tok = {77};
    run_paged_case(f, c);
    c.window = 128;
    c.pos0 = {500};
    c.n_tok = {90};
    run_paged_case(f, c);
    c = base;
    c.n_head = 32;
    c.n_head_kv = 4;
    c.pos0 = {bs + 5, 100};
    c.n_tok = {50, 1};
    run_paged_case(f, c);
  }
}

// The fused decode input block (q/k/v mat-vecs + RoPE + store, one sequence of one or a
// few tokens, exact mode) writes k and v to the pool rows its block table names.
TEST(CudaPaged, FusedQkvStoresIntoBlocks) {
  BRASS_REQUIRE_CUDA();
  Fix f;
  SEED_TRACE(f.rng);
  const auto freqs = model::compute_rope_freqs(model::RopeParams{});
  const int64_t n_embd = 96, n_head = 4, n_head_kv = 2, hd = 16, KV = n_head_kv * hd, Q = n_head * hd;
  for (int64_t n_tok : {1, 3}) {
    const int32_t bs = 4, pos0 = 6;  // the 3-token chunk crosses into the third block
    std::vector<int32_t> table = {5, 2, 7, 0};
    const int64_t n_blocks = 8, row = KV * 4;
    std::vector<uint8_t> hk(n_blocks * bs * row, 0x3C), hv(hk.size(), 0x3B);
    auto gk = gpu_copy(*f.gpu, hk.data(), hk.size()), gv = gpu_copy(*f.gpu, hv.data(), hv.size());
    auto gt = gpu_copy(*f.gpu, table.data(), table.size() * 4);
    auto quant = [&](int64_t n_out) {
      std::vector<uint8_t> b(row_bytes(DType::Q8_0, n_embd) * n_out);
      for (int64_t r = 0; r < n_out; ++r) {
        auto x = f.rng.vec(n_embd);
        quant::quantize_row(DType::Q8_0, x.data(), b.data() + r * row_bytes(DType::Q8_0, n_embd), n_embd);
      }
      return b;
    };
    std::vector<uint8_t> bq = quant(Q), bk = quant(KV), bv = quant(KV);
    auto view = [&](const std::vector<uint8_t>& b, int64_t n_out) {
      WeightView w;
      w.type = DType::Q8_0;
      w.data = b.data();
      w.ne[0] = n_embd;
      w.ne[1] = n_out;
      return w;
    };
    const WeightView wq = view(bq, Q), wk = view(bk, KV), wv = view(bv, KV);
    auto x = f.rng.vec(n_tok * n_embd);
    std::vector<int32_t> pos(n_tok);
    for (int64_t i = 0; i < n_tok; ++i) pos[i] = pos0 + static_cast<int32_t>(i);
    std::vector<float> q(n_tok * Q), k(n_tok * KV), v(n_tok * KV);
    AttnSeq cs{.tok0 = 0, .n_tok = n_tok, .pos0 = pos0, .k = hk.data(), .v = hv.data(), .capacity = 16,
               .blocks = table.data(), .block_size = bs};
    f.cpu->attn_qkv({.x = x.data(), .wq = wq, .wk = wk, .wv = wv, .q = q.data(), .k = k.data(), .v = v.data(),
                     .pos = pos.data(), .inv_freq = freqs.inv_freq.data(), .mscale = freqs.mscale, .n_tok = n_tok,
                     .n_head = n_head, .n_head_kv = n_head_kv, .head_dim = hd, .kv_type = DType::F32,
                     .seqs = std::span(&cs, 1)});
    AttnSeq gs = cs;
    gs.k = gk->data();
    gs.v = gv->data();
    gs.blocks = gt->as<int32_t>();
    Dev dx = Dev::from(*f.gpu, x), dp = Dev::from(*f.gpu, pos), dfr = Dev::from(*f.gpu, freqs.inv_freq),
        dq = Dev::poisoned<float>(*f.gpu, q.size()), dk = Dev::poisoned<float>(*f.gpu, k.size()),
        dv = Dev::poisoned<float>(*f.gpu, v.size());
    auto pw = [&](const WeightView& w) { return std::move(f.gpu->prepare_weight(w)).value(); };
    f.gpu->attn_qkv({.x = dx.as<float>(), .wq = pw(wq), .wk = pw(wk), .wv = pw(wv), .q = dq.as<float>(),
                     .k = dk.as<float>(), .v = dv.as<float>(), .pos = dp.as<int32_t>(), .inv_freq = dfr.as<float>(),
                     .mscale = freqs.mscale, .n_tok = n_tok, .n_head = n_head, .n_head_kv = n_head_kv,
                     .head_dim = hd, .kv_type = DType::F32, .seqs = std::span(&gs, 1)});
    expect_close(dk.get<float>(k.size()), k, 2e-5, 1e-5, "k");
    // Pool: the chunk's rows hold (close to) the reference's; every other row untouched.
    const auto got_k = gpu_bytes(*f.gpu, *gk, hk.size()), got_v = gpu_bytes(*f.gpu, *gv, hv.size());
    for (int64_t r = 0; r < n_blocks * bs; ++r) {
      bool chunk_row = false;
      for (int64_t i = 0; i < n_tok; ++i) chunk_row |= r == kv_storage_row(cs, pos0 + i);
      for (const auto& pr : {std::pair{&got_k, &hk}, std::pair{&got_v, &hv}}) {
        std::vector<float> a(KV), b(KV);
        std::memcpy(a.data(), pr.first->data() + r * row, row);
        std::memcpy(b.data(), pr.second->data() + r * row, row);
        if (chunk_row)
          expect_close(a, b, 2e-5, 1e-5, "pool row " + std::to_string(r));
        else
          ASSERT_EQ(0, std::memcmp(a.data(), b.data(), row)) << "pool row " << r << " was written";
      }
    }
  }
}

// A captured decode step (KV store + attention of one paged sequence, position read from
// device memory) replayed as the sequence grows: the block-table entry of each new block
// is uploaded between launches (as KvCache::reserve does) and the replay must use it.
TEST(CudaPaged, CapturedDecodeFollowsAppendedBlocks) {
  BRASS_REQUIRE_CUDA();
  Fix f;
  SEED_TRACE(f.rng);
  const int64_t n_head = 8, n_head_kv = 2, hd = 32, kv_row = n_head_kv * hd, row = kv_row * 2;
  const int32_t bs = 4, steps = 23;
  const int64_t n_blocks = 12;
  std::vector<int32_t> perm(n_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), f.rng.gen);
  std::vector<int32_t> table(n_blocks, -1);  // filled as the sequence grows
  std::vector<uint8_t> hk(n_blocks * bs * row, 0), hv(hk.size(), 0);
  auto gk = gpu_copy(*f.gpu, hk.data(), hk.size()), gv = gpu_copy(*f.gpu, hv.data(), hv.size());
  auto gt = gpu_copy(*f.gpu, table.data(), table.size() * 4);
  Dev dk = Dev::from(*f.gpu, std::vector<float>(kv_row)), dv = Dev::from(*f.gpu, std::vector<float>(kv_row)),
      dq = Dev::from(*f.gpu, std::vector<float>(n_head * hd)), dp = Dev::from(*f.gpu, std::vector<int32_t>{0}),
      dout = Dev::poisoned<float>(*f.gpu, n_head * hd);
  auto sinks = f.rng.vec(n_head);
  Dev ds = Dev::from(*f.gpu, sinks);
  const AttnSeq gs{.tok0 = 0, .n_tok = 1, .pos0 = 0, .k = gk->data(), .v = gv->data(), .capacity = 48,
                   .blocks = gt->as<int32_t>(), .block_size = bs};
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  auto record = [&] {
    f.gpu->kv_store({.k = dk.as<float>(), .v = dv.as<float>(), .kv_type = DType::F16, .n_head_kv = n_head_kv,
                     .head_dim = hd, .seqs = std::span(&gs, 1), .pos = dp.as<int32_t>()});
    f.gpu->attention({.q = dq.as<float>(), .sinks = ds.as<float>(), .out = dout.as<float>(), .kv_type = DType::F16,
                      .n_head = n_head, .n_head_kv = n_head_kv, .head_dim = hd, .window = 0, .scale = scale,
                      .seqs = std::span(&gs, 1), .pos = dp.as<int32_t>()});
  };
  std::unique_ptr<Graph> graph;
  for (int32_t p = 0; p < steps; ++p) {
    if (p % bs == 0) {  // a new block: its table entry goes up before the launch
      table[p / bs] = perm[p / bs];
      f.gpu->upload(gt->as<int32_t>() + p / bs, &table[p / bs], 4);
    }
    auto q = f.rng.vec(n_head * hd, -2, 2), k = f.rng.vec(kv_row), v = f.rng.vec(kv_row);
    f.gpu->upload(dq.as<float>(), q.data(), q.size() * 4);
    f.gpu->upload(dk.as<float>(), k.data(), k.size() * 4);
    f.gpu->upload(dv.as<float>(), v.data(), v.size() * 4);
    f.gpu->upload(dp.as<int32_t>(), &p, 4);
    if (p == 0) {
      record();  // eager once, then captured
    } else {
      if (!graph) {
        auto g = f.gpu->capture(record);
        ASSERT_TRUE(g.is_ok()) << g.status().message();
        graph = std::move(g).value();
      }
      ASSERT_TRUE(graph->launch().is_ok());
    }
    AttnSeq cs = gs;
    cs.k = hk.data();
    cs.v = hv.data();
    cs.blocks = table.data();
    cs.pos0 = p;
    std::vector<float> want(n_head * hd);
    f.cpu->kv_store({.k = k.data(), .v = v.data(), .kv_type = DType::F16, .n_head_kv = n_head_kv, .head_dim = hd,
                     .seqs = std::span(&cs, 1)});
    f.cpu->attention({.q = q.data(), .sinks = sinks.data(), .out = want.data(), .kv_type = DType::F16,
                      .n_head = n_head, .n_head_kv = n_head_kv, .head_dim = hd, .window = 0, .scale = scale,
                      .seqs = std::span(&cs, 1)});
    expect_close(dout.get<float>(want.size()), want, 2e-5, 2e-6, "step " + std::to_string(p));
  }
  EXPECT_TRUE(gpu_bytes(*f.gpu, *gk, hk.size()) == hk) << "device K pool differs from the reference pool";
}

}  // namespace
}  // namespace brass::backend
