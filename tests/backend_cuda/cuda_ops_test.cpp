// Every CUDA backend op against its CPU twin, the reference backend (BRASS_CPU_KERNELS
// =ref): the same op on the same random inputs (fresh seed, printed on failure), odd
// sizes, every supported weight type, both activation modes (f32; int8 per 32, whose
// twin is the reference op on the Q8_0 round trip of the activations), the edge cases the issue lists (first token,
// sliding-window boundary and ring wrap, a dominating sink, router ties, argmax ties).
// The fused ops (attn_qkv, add_rms_norm) are compared with the reference backend's
// default composition of basic ops. Outputs are NaN-poisoned first, so an unwritten
// element fails. Skips (GTEST_SKIP with the reason) without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "backend/cuda/cuda_backend.h"
#include "backend/oai_swiglu.h"
#include "backend/sampling.h"
#include "core/half.h"
#include "cuda_test_util.h"
#include "model/rope.h"
#include "quant/quant.h"

namespace brass::backend {
namespace {

using testing::Dev;
using testing::expect_close;
using testing::kv_rest_untouched;
using testing::kv_row;
using testing::Rng;

struct Fix {
  Rng rng;
  std::unique_ptr<Backend> cpu = testing::reference_backend();
  std::unique_ptr<Backend> gpu;
  bool q8x;
  explicit Fix(bool int8_activations = false) : q8x(int8_activations) {
    CudaBackendOptions o;
    o.int8_activations = int8_activations;
    auto r = make_cuda_backend(o);
    EXPECT_TRUE(r.is_ok()) << r.status().message();
    if (r.is_ok()) gpu = std::move(r).value();
  }
};

// The int8-activation kernels' input as the reference sees it: each row of n quantized
// to Q8_0 and back (the CPU twin of a q8x op is the reference op on this).
std::vector<float> q8_roundtrip(const std::vector<float>& x, int64_t n) {
  std::vector<float> out(x.size());
  std::vector<uint8_t> blk(row_bytes(DType::Q8_0, n));
  for (size_t r = 0; r * n < x.size(); ++r) {
    quant::quantize_row(DType::Q8_0, x.data() + r * n, blk.data(), n);
    quant::dequantize_row(DType::Q8_0, blk.data(), out.data() + r * n, n);
  }
  return out;
}
bool q8x_type(DType t) { return t == DType::Q8_0 || t == DType::MXFP4; }

// A random weight (n_in, n_out[, n_mat]) of `type` in host memory (ggml layout).
struct HostWeight {
  std::vector<uint8_t> bytes;
  WeightView view;
  HostWeight(Rng& rng, DType type, int64_t n_in, int64_t n_out, int64_t n_mat = 1, float amp = 1.0f) {
    const int64_t rb = row_bytes(type, n_in);
    bytes.resize(rb * n_out * n_mat);
    std::vector<float> row(n_in);
    for (int64_t r = 0; r < n_out * n_mat; ++r) {
      for (auto& x : row) x = rng.uni(-amp, amp);
      quant::quantize_row(type, row.data(), bytes.data() + r * rb, n_in);
    }
    view.type = type;
    view.data = bytes.data();
    view.ne[0] = n_in;
    view.ne[1] = n_out;
    view.ne[2] = n_mat;
  }
};

// One MoE layer's experts, random: gate / up (n_embd -> n_ff) and down (n_ff -> n_embd),
// n_expert of each, with their biases. Weights within 3 / sqrt(n_embd) (x4 for gate / up),
// so some SwiGLU clamps fire.
struct HostExperts {
  HostWeight g, u, d;
  std::vector<float> gb, ub, db;
  HostExperts(Rng& rng, DType t, int64_t n_embd, int64_t n_ff, int64_t n_expert)
      : g(rng, t, n_embd, n_ff, n_expert, amp(n_embd) * 4),
        u(rng, t, n_embd, n_ff, n_expert, amp(n_embd) * 4),
        d(rng, t, n_ff, n_embd, n_expert, amp(n_embd)),
        gb(rng.vec(n_expert * n_ff)),
        ub(rng.vec(n_expert * n_ff)),
        db(rng.vec(n_expert * n_embd)) {}
  static float amp(int64_t n_embd) { return 3.0f / std::sqrt(static_cast<float>(n_embd)); }
  MoeArgs args(const float* x, const int32_t* ids, const float* w, float* out, int64_t n_tok, int64_t k) const {
    return {.x = x, .ids = ids, .weights = w, .gate = g.view, .up = u.view, .down = d.view, .gate_bias = gb.data(),
            .up_bias = ub.data(), .down_bias = db.data(), .out = out, .n_tok = n_tok, .k = k};
  }
};

WeightView on_gpu(Backend& gpu, const WeightView& w) {
  auto r = gpu.prepare_weight(w);
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return r.is_ok() ? r.value() : WeightView{};
}

// A HostExperts on a backend; args() points into the bias buffers, so this must outlive
// the ops given them.
struct DevExperts {
  WeightView g, u, d;
  Dev gb, ub, db;
  DevExperts(Backend& be, const HostExperts& ex)
      : g(on_gpu(be, ex.g.view)),
        u(on_gpu(be, ex.u.view)),
        d(on_gpu(be, ex.d.view)),
        gb(Dev::from(be, ex.gb)),
        ub(Dev::from(be, ex.ub)),
        db(Dev::from(be, ex.db)) {}
  MoeArgs args(const float* x, const int32_t* ids, const float* w, float* out, int64_t n_tok, int64_t k) {
    return {.x = x, .ids = ids, .weights = w, .gate = g, .up = u, .down = d, .gate_bias = gb.as<float>(),
            .up_bias = ub.as<float>(), .down_bias = db.as<float>(), .out = out, .n_tok = n_tok, .k = k};
  }
};

class CudaOpsMode : public ::testing::TestWithParam<bool> {};  // param: int8 activations
INSTANTIATE_TEST_SUITE_P(Exact, CudaOpsMode, ::testing::Values(false));
INSTANTIATE_TEST_SUITE_P(Int8Act, CudaOpsMode, ::testing::Values(true));

TEST_P(CudaOpsMode, MatmulAllTypesOddSizes) {
  BRASS_REQUIRE_CUDA();
  Fix f(GetParam());
  SEED_TRACE(f.rng);
  struct Case { DType t; int64_t n_in, n_out, n_tok; };
  const Case cases[] = {{DType::F32, 37, 5, 3},    {DType::F32, 64, 131, 1},   {DType::F16, 40, 7, 6},
                        {DType::F16, 30, 9, 2},    {DType::BF16, 96, 33, 5},   {DType::BF16, 21, 3, 1},
                        {DType::Q8_0, 2880, 67, 1}, {DType::Q8_0, 96, 4099, 7}, {DType::MXFP4, 2880, 300, 1},
                        {DType::MXFP4, 64, 1201, 4}, {DType::Q8_0, 4096, 2880, 1}, {DType::F32, 2880, 32, 1},
                        // one token, every fragment size of the preloading mat-vec (cuda_q8_pre.cu)
                        {DType::MXFP4, 64, 13, 1},  {DType::Q8_0, 96, 29, 1},   {DType::Q8_0, 1536, 70, 1},
                        // the tiled f32 kernel (few rows, many tokens: the router at prefill)
                        {DType::F32, 2880, 32, 600}, {DType::F32, 100, 45, 517}};
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << dtype_name(c.t) << " " << c.n_in << "x" << c.n_out << " tok " << c.n_tok);
    HostWeight w(f.rng, c.t, c.n_in, c.n_out);
    const auto x = f.rng.vec(c.n_in * c.n_tok);
    const auto bias = f.rng.vec(c.n_out);
    std::vector<float> want(c.n_out * c.n_tok);
    const auto xr = f.q8x && q8x_type(c.t) ? q8_roundtrip(x, c.n_in) : x;
    f.cpu->matmul({.w = w.view, .bias = bias.data(), .x = xr.data(), .y = want.data(), .n_tok = c.n_tok});
    Dev dx = Dev::from(*f.gpu, x), db = Dev::from(*f.gpu, bias), dy = Dev::poisoned<float>(*f.gpu, want.size());
    f.gpu->matmul({.w = on_gpu(*f.gpu, w.view), .bias = db.as<float>(), .x = dx.as<float>(), .y = dy.as<float>(),
                   .n_tok = c.n_tok});
    expect_close(dy.get<float>(want.size()), want, 2e-5, 1e-5, "matmul");
  }
}

// Dense matmuls of 2..64 tokens on the int8 MMA kernel (cuda_matmul_mma.cu: Q8_0 and
// MXFP4, every token-tile variant: <= 8, 16, 32, 64 tokens per pass, partial tiles, a
// second pass in y) against the q8x twin (the reference matmul on the Q8_0 round trip of
// x), the real output-head width too; and == the per-token dp4a path of the same backend
// with the MMA range turned off. The q/k/v and wo shapes at 5..64 tokens run with K split
// over blocks (cuda_matmul_mma.cu); a second call must give the same bits.
TEST(CudaMatmulMma, MatchesTwinAtEveryTileSize) {
  BRASS_REQUIRE_CUDA();
  Fix f(true);
  CudaBackendOptions o;
  o.tensor_cores = false;       // every size up to 64 on the MMA kernel (no cuBLAS above 16)
  o.mma_h16_min_tok = 1 << 30;  // the int8 kernel (the f16 one: cuda_tc_test.cpp)
  auto mma = make_cuda_backend(o);
  o.mma_dense_max_tok = 0;
  auto plain = make_cuda_backend(o);
  ASSERT_TRUE(mma.is_ok() && plain.is_ok());
  SEED_TRACE(f.rng);
  struct Case { DType t; int64_t n_in, n_out, n_tok; };
  const Case cases[] = {{DType::Q8_0, 2880, 4096, 2},  {DType::Q8_0, 96, 64, 7},     {DType::Q8_0, 2880, 512, 9},
                        {DType::MXFP4, 128, 96, 16},   {DType::Q8_0, 64, 32, 33},    {DType::MXFP4, 2880, 2880, 64},
                        {DType::Q8_0, 2880, 2048, 64}, {DType::MXFP4, 192, 160, 17}, {DType::Q8_0, 4096, 2880, 5},
                        {DType::Q8_0, 2880, 512, 64},  {DType::Q8_0, 4096, 2880, 64}, {DType::MXFP4, 2880, 4096, 40}};
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << dtype_name(c.t) << " " << c.n_in << "x" << c.n_out << " tok " << c.n_tok);
    HostWeight w(f.rng, c.t, c.n_in, c.n_out);
    const auto x = f.rng.vec(c.n_in * c.n_tok, -3, 3);
    const auto bias = f.rng.vec(c.n_out);
    std::vector<float> want(c.n_out * c.n_tok);
    const auto xr = q8_roundtrip(x, c.n_in);
    f.cpu->matmul({.w = w.view, .bias = bias.data(), .x = xr.data(), .y = want.data(), .n_tok = c.n_tok});
    std::vector<float> got[2];
    Backend* bes[2] = {mma.value().get(), plain.value().get()};
    std::vector<float> again;
    for (int b = 0; b < 2; ++b) {
      Dev dx = Dev::from(*bes[b], x), db = Dev::from(*bes[b], bias), dy = Dev::poisoned<float>(*bes[b], want.size());
      const WeightView wg = on_gpu(*bes[b], w.view);
      const MatmulArgs args{.w = wg, .bias = db.as<float>(), .x = dx.as<float>(), .y = dy.as<float>(), .n_tok = c.n_tok};
      bes[b]->matmul(args);
      got[b] = dy.get<float>(want.size());
      if (b == 0) {  // a second call: the K split's tickets were reset, the sums are the same bits
        Dev dy2 = Dev::poisoned<float>(*bes[b], want.size());
        MatmulArgs a2 = args;
        a2.y = dy2.as<float>();
        bes[b]->matmul(a2);
        again = dy2.get<float>(want.size());
      }
    }
    expect_close(got[0], want, 2e-5, 1e-5, "int8 mma matmul vs twin");
    expect_close(got[0], got[1], 2e-5, 1e-5, "int8 mma matmul vs dp4a mat-vec");
    EXPECT_EQ(again, got[0]) << "a repeated int8 mma matmul differs (K-split reduction not deterministic)";
  }
}

TEST(CudaOps, RmsNormAndFusedAdd) {
  BRASS_REQUIRE_CUDA();
  Fix f;
  SEED_TRACE(f.rng);
  for (int64_t n : {2880, 37}) {
    const int64_t rows = 3;
    auto y = f.rng.vec(rows * n, -3, 3), x = f.rng.vec(rows * n), w = f.rng.vec(n);
    std::vector<float> want(rows * n), want_y = y;
    f.cpu->add_rms_norm({.y = want_y.data(), .x = x.data(), .weight = w.data(), .out = want.data(), .n_rows = rows,
                         .n = n, .eps = 1e-5f});
    Dev dy = Dev::from(*f.gpu, y), dx = Dev::from(*f.gpu, x), dw = Dev::from(*f.gpu, w);
    Dev dout = Dev::poisoned<float>(*f.gpu, rows * n);
    f.gpu->add_rms_norm({.y = dy.as<float>(), .x = dx.as<float>(), .weight = dw.as<float>(), .out = dout.as<float>(),
                         .n_rows = rows, .n = n, .eps = 1e-5f});
    expect_close(dy.get<float>(rows * n), want_y, 1e-6, 1e-6, "add_rms_norm residual");
    expect_close(dout.get<float>(rows * n), want, 1e-5, 1e-6, "add_rms_norm out");
    // Plain rms_norm in place (out aliases x).
    std::vector<float> want2(rows * n);
    f.cpu->rms_norm({.x = x.data(), .weight = w.data(), .out = want2.data(), .n_rows = rows, .n = n, .eps = 1e-5f});
    f.gpu->rms_norm({.x = dx.as<float>(), .weight = dw.as<float>(), .out = dx.as<float>(), .n_rows = rows, .n = n,
                     .eps = 1e-5f});
    expect_close(dx.get<float>(rows * n), want2, 1e-5, 1e-6, "rms_norm in place");
  }
}

TEST(CudaOps, EmbedGatherAdd) {
  BRASS_REQUIRE_CUDA();
  Fix f;
  SEED_TRACE(f.rng);
  for (DType t : {DType::Q8_0, DType::F32, DType::F16, DType::MXFP4}) {
    const int64_t n_embd = 96, n_vocab = 50;
    HostWeight table(f.rng, t, n_embd, n_vocab);
    std::vector<int32_t> tok = {0, 49, 7, 7, 23};
    std::vector<float> want(tok.size() * n_embd);
    f.cpu->embed({.table = table.view, .tokens = tok.data(), .n_tok = 5, .out = want.data()});
    Dev dt = Dev::from(*f.gpu, tok), dout = Dev::poisoned<float>(*f.gpu, want.size());
    f.gpu->embed({.table = on_gpu(*f.gpu, table.view), .tokens = dt.as<int32_t>(), .n_tok = 5, .out = dout.as<float>()});
    expect_close(dout.get<float>(want.size()), want, 0, 0, std::string("embed ") + std::string(dtype_name(t)));
  }
  auto x = f.rng.vec(7 * 33);
  std::vector<int32_t> rows = {6, 0, 3};
  std::vector<float> want(3 * 33);
  f.cpu->gather_rows({.x = x.data(), .rows = rows.data(), .out = want.data(), .n_rows = 3, .n = 33});
  Dev dx = Dev::from(*f.gpu, x), dr = Dev::from(*f.gpu, rows), dout = Dev::poisoned<float>(*f.gpu, want.size());
  f.gpu->gather_rows({.x = dx.as<float>(), .rows = dr.as<int32_t>(), .out = dout.as<float>(), .n_rows = 3, .n = 33});
  expect_close(dout.get<float>(want.size()), want, 0, 0, "gather_rows");
  auto y = f.rng.vec(1000), z = f.rng.vec(1000);
  Dev dy = Dev::from(*f.gpu, y), dz = Dev::from(*f.gpu, z);
  f.cpu->add({.y = y.data(), .x = z.data(), .n = 1000});
  f.gpu->add({.y = dy.as<float>(), .x = dz.as<float>(), .n = 1000});
  expect_close(dy.get<float>(1000), y, 0, 0, "add");
}

TEST(CudaOps, RopeBothYarnConventions) {
  BRASS_REQUIRE_CUDA();
  Fix f;
  SEED_TRACE(f.rng);
  for (bool rounded : {false, true}) {
    model::RopeParams rp;
    rp.yarn_rounded = rounded;
    const auto freqs = model::compute_rope_freqs(rp);
    const int64_t n_tok = 4, n_heads = 11, hd = 64;  // two head groups of the kernel, the second partial
    std::vector<int32_t> pos = {0, 1, 4095, 131071};
    auto x = f.rng.vec(n_tok * n_heads * hd);
    std::vector<float> want = x;
    f.cpu->rope({.x = want.data(), .pos = pos.data(), .inv_freq = freqs.inv_freq.data(), .mscale = freqs.mscale,
                 .n_tok = n_tok, .n_heads = n_heads, .head_dim = hd});
    Dev dx = Dev::from(*f.gpu, x), dp = Dev::from(*f.gpu, pos), dfr = Dev::from(*f.gpu, freqs.inv_freq);
    f.gpu->rope({.x = dx.as<float>(), .pos = dp.as<int32_t>(), .inv_freq = dfr.as<float>(), .mscale = freqs.mscale,
                 .n_tok = n_tok, .n_heads = n_heads, .head_dim = hd});
    expect_close(dx.get<float>(x.size()), want, 2e-6, 1e-6, rounded ? "rope (llama.cpp yarn)" : "rope (reference yarn)");
  }
}

TEST(CudaOps, RouterTopKWithTies) {
  BRASS_REQUIRE_CUDA();
  Fix f;
  SEED_TRACE(f.rng);
  // 32 experts: the one-pass rank path (pick_experts); 40: the k-round warp argmax.
  for (const int64_t n_expert : {32, 40}) {
    SCOPED_TRACE(::testing::Message() << n_expert << " experts");
    const int64_t n_tok = 5, k = 4;
    auto logits = f.rng.vec(n_tok * n_expert, -4, 4);
    // token 1: a four-way tie for the top; token 2: all equal; token 3: tie at the k-th place.
    for (int e : {3, 9, 17, 30}) logits[1 * n_expert + e] = 5.0f;
    for (int e = 0; e < n_expert; ++e) logits[2 * n_expert + e] = 0.25f;
    logits[3 * n_expert + 0] = 9; logits[3 * n_expert + 1] = 8; logits[3 * n_expert + 2] = 7;
    logits[3 * n_expert + 20] = 6; logits[3 * n_expert + 5] = 6;
    std::vector<int32_t> ids(n_tok * k);
    std::vector<float> w(n_tok * k);
    f.cpu->router({.logits = logits.data(), .ids = ids.data(), .weights = w.data(), .n_tok = n_tok,
                   .n_expert = n_expert, .k = k});
    Dev dl = Dev::from(*f.gpu, logits), di = Dev::poisoned<int32_t>(*f.gpu, ids.size()),
        dw = Dev::poisoned<float>(*f.gpu, w.size());
    f.gpu->router({.logits = dl.as<float>(), .ids = di.as<int32_t>(), .weights = dw.as<float>(), .n_tok = n_tok,
                   .n_expert = n_expert, .k = k});
    EXPECT_EQ(di.get<int32_t>(ids.size()), ids);
    expect_close(dw.get<float>(w.size()), w, 1e-6, 1e-7, "router weights");
    EXPECT_EQ(ids[3 * k + 3], 5);  // the hand-checked tie: lower index first
  }
}

// The q8x MoE's CPU twin, per slot: the reference ops with x and the SwiGLU activations on
// their Q8_0 round trip where the kernels quantize them. Where it decides a code (each
// 32-group's largest activation, which sets the scale, and every activation within
// kRecheck steps of a rounding boundary) the activation is summed again in double on the
// dequantized row: the twin's codes are those of the exact activations. An
// activation whose exact int8 code sits within kFlip of a rounding boundary may land one
// step away on the GPU (its sums are f32 in another order): `slack` gets, per output
// element, the sum of what those flips could move it (router weight x Q8_0 step x |down
// weight|); it is zero unless an activation is that close. Why: with f32 sums on both
// sides one such flip moved a token of the 64 / 96 Q8_0 case by 0.10 against a tolerance
// of 0.06 (MoeBlockMatchesComposition, BRASS_TEST_SEED=362407187: slot 0's activation 4
// sits 4e-6 steps from its boundary; the slack there is 0.16).
struct Q8xTwin {
  std::vector<float> out, slack;
  int near = 0;  // activations within kFlip of a boundary
};
Q8xTwin moe_q8x_twin(Backend& cpu, const MoeArgs& a) {
  // int8 steps. The GPU's activations are f32 sums of exact per-block integer dots: off the
  // exact ones by ~4e-5 steps at 64 wide, up to ~1.3e-4 at 2880 (90 blocks), where one
  // flip is also well inside the tolerance. (1e-3 flagged ~12 activations a token there.)
  constexpr double kFlip = 2.5e-4;
  // The reference op's f32 sums are within ~6e-4 steps of the exact ones (2880 wide):
  // activations nearer a boundary than this are summed again in double.
  constexpr double kRecheck = 1e-2;
  const int64_t n_embd = a.gate.ne[0], n_ff = a.gate.ne[1];
  auto expert = [](const WeightView& w, int64_t e) {
    WeightView v = w;
    v.data = static_cast<const uint8_t*>(w.data) + e * w.matrix_bytes();
    v.ne[2] = 1;
    return v;
  };
  // row r of w . x in double (the row dequantized; exact to ~1e-16)
  std::vector<float> wrow(n_embd), blk(32);
  auto dot = [&](const WeightView& w, int64_t r, const std::vector<float>& x) {
    quant::dequantize_row(w.type, static_cast<const uint8_t*>(w.data) + r * row_bytes(w.type, n_embd), wrow.data(),
                          n_embd);
    double s = 0;
    for (int64_t c = 0; c < n_embd; ++c) s += double(wrow[c]) * x[c];
    return s;
  };
  auto swiglu = [&](double g, double u) { return oai_swiglu_exact(g, u, a.alpha, a.limit); };
  Q8xTwin tw{std::vector<float>(a.n_tok * n_embd, 0.0f), std::vector<float>(a.n_tok * n_embd, 0.0f)};
  for (int64_t t = 0; t < a.n_tok; ++t) {
    const auto xq = q8_roundtrip(std::vector<float>(a.x + t * n_embd, a.x + (t + 1) * n_embd), n_embd);
    for (int64_t j = 0; j < a.k; ++j) {
      const int64_t e = a.ids[t * a.k + j];
      const float wj = a.weights[t * a.k + j];
      const WeightView ge = expert(a.gate, e), ue = expert(a.up, e), de = expert(a.down, e);
      std::vector<float> g(n_ff), u(n_ff), act(n_ff), d(n_embd);
      cpu.matmul({.w = ge, .bias = a.gate_bias + e * n_ff, .x = xq.data(), .y = g.data(), .n_tok = 1});
      cpu.matmul({.w = ue, .bias = a.up_bias + e * n_ff, .x = xq.data(), .y = u.data(), .n_tok = 1});
      for (int64_t i = 0; i < n_ff; ++i) act[i] = static_cast<float>(swiglu(g[i], u[i]));
      auto exact = [&](int64_t i) {
        return swiglu(a.gate_bias[e * n_ff + i] + dot(ge, i, xq), a.up_bias[e * n_ff + i] + dot(ue, i, xq));
      };
      for (int64_t b = 0; b < n_ff; b += 32) {
        int64_t im = b;  // the group's largest, exact: it sets the scale
        for (int64_t i = b; i < b + 32; ++i) im = std::fabs(act[i]) > std::fabs(act[im]) ? i : im;
        act[im] = static_cast<float>(exact(im));
        float amax = 0.0f;
        for (int64_t i = b; i < b + 32; ++i) amax = std::max(amax, std::fabs(act[i]));
        if (amax == 0.0f) continue;
        const double step = amax / 127.0;
        auto dist = [&](double v) {
          const double code = std::fabs(v) / step;
          return std::fabs(code - std::floor(code) - 0.5);
        };
        for (int64_t i = b; i < b + 32; ++i) {
          if (dist(act[i]) >= kRecheck) continue;
          const double ad = exact(i);
          act[i] = static_cast<float>(ad);  // the exact activation's code
          if (dist(ad) >= kFlip) continue;
          ++tw.near;
          const int64_t bb = row_bytes(de.type, 32), rb = row_bytes(de.type, n_ff);  // down's column i
          for (int64_t r = 0; r < n_embd; ++r) {
            quant::dequantize_row(de.type, static_cast<const uint8_t*>(de.data) + r * rb + (b / 32) * bb, blk.data(), 32);
            tw.slack[t * n_embd + r] += float(wj * step * std::fabs(blk[i - b]));
          }
        }
      }
      const auto aq = q8_roundtrip(act, n_ff);
      cpu.matmul({.w = de, .bias = a.down_bias + e * n_embd, .x = aq.data(), .y = d.data(), .n_tok = 1});
      for (int64_t i = 0; i < n_embd; ++i) tw.out[t * n_embd + i] += wj * d[i];
    }
  }
  if (tw.near) std::printf("q8x twin: %d activations within %g int8 steps of a rounding boundary\n", tw.near, kFlip);
  return tw;
}

// The MoE's reference: the q8x twin in int8 mode, else the reference op (no slack).
Q8xTwin reference_moe(Backend& cpu, MoeArgs a, bool q8) {
  if (q8) return moe_q8x_twin(cpu, a);
  Q8xTwin r;
  r.out.resize(a.n_tok * a.gate.ne[0]);
  a.out = r.out.data();
  cpu.moe(a);
  return r;
}

TEST_P(CudaOpsMode, MoeExperts) {
  BRASS_REQUIRE_CUDA();
  Fix f(GetParam());
  SEED_TRACE(f.rng);
  struct Case { DType t; int64_t n_embd, n_ff, n_expert, k, n_tok; };
  // One token with k = 4 takes the preloading kernels (cuda_q8_pre.cu) in int8 mode: the
  // tiny fragment (MXFP4 96 / 160, Q8_0 64 / 96) and gpt-oss's (MXFP4 2880).
  for (const Case& c : {Case{DType::MXFP4, 96, 160, 8, 4, 3}, Case{DType::Q8_0, 64, 96, 6, 2, 2},
                        Case{DType::MXFP4, 2880, 2880, 32, 4, 1}, Case{DType::F32, 36, 20, 4, 2, 2},
                        Case{DType::MXFP4, 96, 160, 8, 4, 1}, Case{DType::Q8_0, 64, 96, 6, 4, 1}}) {
    SCOPED_TRACE(::testing::Message() << dtype_name(c.t) << " " << c.n_embd << "/" << c.n_ff);
    HostExperts ex(f.rng, c.t, c.n_embd, c.n_ff, c.n_expert);
    auto x = f.rng.vec(c.n_tok * c.n_embd, -2, 2);
    std::vector<int32_t> ids(c.n_tok * c.k);
    std::vector<float> w(c.n_tok * c.k);
    for (int64_t t = 0; t < c.n_tok; ++t) {
      std::vector<int32_t> perm(c.n_expert);
      for (int i = 0; i < c.n_expert; ++i) perm[i] = i;
      std::shuffle(perm.begin(), perm.end(), f.rng.gen);
      for (int64_t j = 0; j < c.k; ++j) { ids[t * c.k + j] = perm[j]; w[t * c.k + j] = f.rng.uni(0, 1); }
    }
    const bool q8 = f.q8x && q8x_type(c.t);
    const auto [want, slack, near] =
        reference_moe(*f.cpu, ex.args(x.data(), ids.data(), w.data(), nullptr, c.n_tok, c.k), q8);
    DevExperts dex(*f.gpu, ex);
    Dev dx = Dev::from(*f.gpu, x), di = Dev::from(*f.gpu, ids), dw = Dev::from(*f.gpu, w),
        dout = Dev::poisoned<float>(*f.gpu, want.size());
    f.gpu->moe(dex.args(dx.as<float>(), di.as<int32_t>(), dw.as<float>(), dout.as<float>(), c.n_tok, c.k));
    // q8x: the SwiGLU activations are re-quantized on both sides from f32 values that
    // differ in the last bits (another summation order): the twin's slack allows the
    // boundary cases a step, and 1e-3 the down sums' order.
    expect_close(dout.get<float>(want.size()), want, q8 ? 1e-3 : 3e-5, 1e-5, "moe", slack);
  }
}

// The grouped int8 MMA MoE (cuda_moe_mma.cu; int8 mode, MXFP4, 2+ tokens below the
// tensor-core threshold) against the q8x twin: tiles of 8 / 16 / 32 tokens per pass (the
// three kernel variants), an expert that receives every token (several passes), experts
// that receive none, the real 2880 x 2880 shape; also == the per-slot dp4a path within the
// same bound (both are the twin's numerics, summed in another order); and on a backend with
// moe_tiles, == the default backend exactly (the 2880 shapes read the MMA tile copy, the
// others are unchanged). The 2880 shapes run
// the k_loop_mx1 kernels (unless BRASS_CUDA_MOE_FAST=0): at 16 tokens (2 an expert on
// average) one block a row block, one token tile a pass; from 6 on average two blocks a
// row block taking the token tiles in turn: at 44 tokens expert 9 gets all of them (tiles
// 0, 2, 4 in one block, 1, 3, 5 in the other, the last with 4 missing columns) and the
// others ~4 (the second block has nothing), at 64 tokens (the 64-stream load, ~8 an
// expert) the experts above 8 give the second block a partial tile.
TEST(CudaMoeMma, MatchesTwinAndPerSlotPath) {
  BRASS_REQUIRE_CUDA();
  Fix f(true);
  CudaBackendOptions o;
  o.mma_moe_min_tok = 1 << 30;  // the per-slot path, for the cross-check
  auto per_slot = make_cuda_backend(o);
  ASSERT_TRUE(per_slot.is_ok());
  CudaBackendOptions ot;
  ot.moe_tiles = true;  // the 2880 shapes' lean loop on the MMA tile copy
  auto tiled = make_cuda_backend(ot);
  ASSERT_TRUE(tiled.is_ok());
  SEED_TRACE(f.rng);
  struct Case { int64_t n_embd, n_ff, n_expert, k, n_tok; int hot; int used; };
  // hot >= 0: every token's first expert is `hot`; used: experts drawn from [0, used).
  for (const Case& c : {Case{128, 192, 8, 4, 5, -1, 8}, Case{64, 128, 8, 2, 37, 1, 7}, Case{192, 64, 8, 4, 25, -1, 6},
                        Case{2880, 2880, 32, 4, 16, -1, 32}, Case{2880, 2880, 32, 4, 44, 9, 32},
                        Case{2880, 2880, 32, 4, 64, -1, 32},
                        Case{64, 64, 4, 2, 2, 3, 4}}) {
    SCOPED_TRACE(::testing::Message() << c.n_embd << "/" << c.n_ff << " experts " << c.n_expert << " tok " << c.n_tok);
    HostExperts ex(f.rng, DType::MXFP4, c.n_embd, c.n_ff, c.n_expert);
    auto x = f.rng.vec(c.n_tok * c.n_embd, -2, 2);
    std::vector<int32_t> ids(c.n_tok * c.k);
    std::vector<float> w(c.n_tok * c.k);
    for (int64_t t = 0; t < c.n_tok; ++t) {
      std::vector<int32_t> perm;
      for (int i = 0; i < c.used; ++i)
        if (i != c.hot) perm.push_back(i);
      std::shuffle(perm.begin(), perm.end(), f.rng.gen);
      if (c.hot >= 0) perm.insert(perm.begin(), c.hot);
      for (int64_t j = 0; j < c.k; ++j) { ids[t * c.k + j] = perm[j]; w[t * c.k + j] = f.rng.uni(0, 1); }
    }
    const auto [want, slack, near] =
        moe_q8x_twin(*f.cpu, ex.args(x.data(), ids.data(), w.data(), nullptr, c.n_tok, c.k));
    std::vector<float> got[3];
    Backend* bes[3] = {f.gpu.get(), per_slot.value().get(), tiled.value().get()};
    for (int b = 0; b < 3; ++b) {
      Backend& be = *bes[b];
      DevExperts dex(be, ex);
      Dev dx = Dev::from(be, x), di = Dev::from(be, ids), dw = Dev::from(be, w),
          dout = Dev::poisoned<float>(be, want.size());
      be.moe(dex.args(dx.as<float>(), di.as<int32_t>(), dw.as<float>(), dout.as<float>(), c.n_tok, c.k));
      got[b] = dout.get<float>(want.size());
    }
    expect_close(got[0], want, 1e-3, 1e-5, "grouped mma moe vs twin", slack);
    expect_close(got[0], got[1], 1e-3, 1e-5, "grouped mma moe vs per-slot dp4a moe", slack);
    // The tile copy holds the same operands for the same instructions: equal bit for bit.
    expect_close(got[2], got[0], 0, 0, "grouped mma moe on the tile copy vs on the GGUF layout");
  }
}

// router then moe on device-resident logits, as the decode layer issues them: the ids /
// weights must come out as the reference router's, and the output as the reference
// router + MoE (twin) composition (a backend that fuses or defers the router, as
// bench/cuda_router_fusion.patch does, must pass unchanged). A second router followed by
// a download checks that nothing is left pending.
TEST_P(CudaOpsMode, RouterThenMoeFused) {
  BRASS_REQUIRE_CUDA();
  Fix f(GetParam());
  SEED_TRACE(f.rng);
  struct Case { DType t; int64_t n_embd, n_ff, n_expert, k, n_tok; };
  for (const Case& c : {Case{DType::MXFP4, 96, 160, 8, 4, 3}, Case{DType::Q8_0, 64, 96, 6, 2, 2},
                        Case{DType::MXFP4, 2880, 2880, 32, 4, 1}}) {
    SCOPED_TRACE(::testing::Message() << dtype_name(c.t) << " " << c.n_embd << "/" << c.n_ff);
    HostExperts ex(f.rng, c.t, c.n_embd, c.n_ff, c.n_expert);
    auto x = f.rng.vec(c.n_tok * c.n_embd, -2, 2);
    auto logits = f.rng.vec(c.n_tok * c.n_expert, -4, 4);
    std::vector<int32_t> ids(c.n_tok * c.k);
    std::vector<float> w(c.n_tok * c.k);
    f.cpu->router({.logits = logits.data(), .ids = ids.data(), .weights = w.data(), .n_tok = c.n_tok,
                   .n_expert = c.n_expert, .k = c.k});
    const bool q8 = f.q8x && q8x_type(c.t);
    const auto [want, slack, near] =
        reference_moe(*f.cpu, ex.args(x.data(), ids.data(), w.data(), nullptr, c.n_tok, c.k), q8);
    Dev dx = Dev::from(*f.gpu, x), dl = Dev::from(*f.gpu, logits), di = Dev::poisoned<int32_t>(*f.gpu, ids.size()),
        dw = Dev::poisoned<float>(*f.gpu, w.size()), dout = Dev::poisoned<float>(*f.gpu, want.size());
    DevExperts dex(*f.gpu, ex);  // (before the router, so that its MoE follows it directly)
    f.gpu->router({.logits = dl.as<float>(), .ids = di.as<int32_t>(), .weights = dw.as<float>(), .n_tok = c.n_tok,
                   .n_expert = c.n_expert, .k = c.k});
    f.gpu->moe(dex.args(dx.as<float>(), di.as<int32_t>(), dw.as<float>(), dout.as<float>(), c.n_tok, c.k));
    EXPECT_EQ(di.get<int32_t>(ids.size()), ids);
    expect_close(dw.get<float>(w.size()), w, 1e-6, 1e-7, "router weights");
    expect_close(dout.get<float>(want.size()), want, q8 ? 1e-3 : 3e-5, 1e-5, "router + moe", slack);
    // A router followed by something other than its MoE still runs (deferred, then flushed).
    Dev di2 = Dev::poisoned<int32_t>(*f.gpu, ids.size()), dw2 = Dev::poisoned<float>(*f.gpu, w.size());
    f.gpu->router({.logits = dl.as<float>(), .ids = di2.as<int32_t>(), .weights = dw2.as<float>(), .n_tok = c.n_tok,
                   .n_expert = c.n_expert, .k = c.k});
    EXPECT_EQ(di2.get<int32_t>(ids.size()), ids);
  }
}

// The MoE block (residual add, norm, router, top-k, experts: moe_block) against the
// reference backend's composition of the ops. In int8 mode one token takes the fused
// kernels (cuda_q8_pre.cu), whose twin is the composition with the experts reading x
// and the SwiGLU output on the Q8_0 round trip. The router logits and the norm are sums in
// another order: the ids must match where the reference's k-th and (k+1)-th logits are
// apart (a near-tie is reported and its outputs not compared). Each case runs twice with
// fresh inputs (the fused router's ticket counter must reset itself), with and without
// the residual add, and with each tail: none; accumulate (y += out); next_norm (y += out,
// then the next norm) into moe.x itself or into another buffer; and (round 4, the model's
// use at one token) accumulate with the add given as a projection in front (proj: the
// attention's wo, fused into the router's kernel in int8 mode, cuda_wo_router.cu, whose
// twin reads the projection's input on the Q8_0 round trip; in exact mode a matmul first,
// at every token count). Several
// tokens of 64-multiple widths in int8 mode take the grouped MMA MoE, whose grouping and
// input quantization the norm/router kernel does and whose combine does the tail; the
// 2880-wide case is gpt-oss's (its experts' own loop), in the model's mode only. The
// grouping is per-expert lists up to 8192 lists' rows (n_expert x n_tok), packed above:
// the 128-expert case (gpt-oss-120b's router) takes lists at 64 tokens, packed at 65,
// lists again at 33; the lists' counts (zero at rest, one area for every call of the
// backend) carry over between cases and rounds.
TEST_P(CudaOpsMode, MoeBlockMatchesComposition) {
  BRASS_REQUIRE_CUDA();
  Fix f(GetParam());
  SEED_TRACE(f.rng);
  struct Case {
    DType t;
    int64_t n_embd, n_ff, n_expert, k;
    std::vector<int64_t> toks;
  };
  for (const Case& c : {Case{DType::MXFP4, 2880, 2880, 32, 4, {1, 33}}, Case{DType::MXFP4, 96, 160, 8, 4, {1, 2}},
                        Case{DType::Q8_0, 64, 96, 6, 4, {1}}, Case{DType::MXFP4, 128, 192, 32, 4, {2, 17, 40}},
                        Case{DType::MXFP4, 128, 64, 128, 4, {64, 65, 33}}}) {
    HostExperts ex(f.rng, c.t, c.n_embd, c.n_ff, c.n_expert);
    HostWeight wr(f.rng, DType::F32, c.n_embd, c.n_expert);
    auto rb = f.rng.vec(c.n_expert), norm = f.rng.vec(c.n_embd, 0.5, 1.5), next_norm = f.rng.vec(c.n_embd, 0.5, 1.5);
    DevExperts dex(*f.gpu, ex);
    const WeightView gr = on_gpu(*f.gpu, wr.view);
    Dev drb = Dev::from(*f.gpu, rb), dnorm = Dev::from(*f.gpu, norm), dnext = Dev::from(*f.gpu, next_norm);
    // The projection in front (wo: n_attn -> n_embd; gpt-oss's 4096 at 2880, MXFP4 at the
    // Q8_0 experts' case), small enough that its sum order stays within the tolerances.
    const int64_t n_attn = c.n_embd == 2880 ? 4096 : c.n_embd + 32;
    const DType wo_t = c.t == DType::Q8_0 ? DType::MXFP4 : DType::Q8_0;
    HostWeight wo(f.rng, wo_t, n_attn, c.n_embd, 1, 4.0f / std::sqrt(static_cast<float>(n_attn)));
    const auto bo = f.rng.vec(c.n_embd);
    const WeightView gwo = on_gpu(*f.gpu, wo.view);
    Dev dbo = Dev::from(*f.gpu, bo);
    for (const int64_t n_tok : c.toks) {
      SCOPED_TRACE(::testing::Message() << dtype_name(c.t) << " " << c.n_embd << "/" << c.n_ff << " tok " << n_tok);
      const bool wide = c.n_embd >= 1024 && n_tok > 1;  // (the reference's time)
      // (the proj round in int8 mode at one token only: several tokens take the batched
      // matmul, whose twin is not the Q8_0 round trip)
      const int rounds = wide ? 3 : n_tok == 1 || !f.q8x ? 5 : 4;
      for (int round = wide ? 2 : 0; round < rounds; ++round) {
        const bool with_add = round % 2 == 0, proj = round == 4;
        const int tail = round % 4 + round / 4;  // 0 none, 1 accumulate, 2 next_norm into moe.x, 3 next_norm apart
        SCOPED_TRACE(::testing::Message() << "round " << round);
        auto y = f.rng.vec(n_tok * c.n_embd, -2, 2), add = f.rng.vec(n_tok * c.n_embd);
        const int64_t nx = n_tok * c.n_embd, nk = n_tok * c.k;
        const auto attn = f.rng.vec(n_tok * n_attn);
        const bool q8 = f.q8x && q8x_type(c.t);
        const auto rattn = f.q8x ? q8_roundtrip(attn, n_attn) : attn;
        std::vector<float> ry = y, xn(nx), logits(n_tok * c.n_expert), w(nk), out(nx), radd(nx);
        std::vector<int32_t> ids(nk);
        MoeBlockArgs ref{.y = ry.data(),
                         .add = proj ? radd.data() : with_add ? add.data() : nullptr,
                         .proj = {.w = wo.view, .bias = bo.data(), .x = proj ? rattn.data() : nullptr, .y = radd.data(),
                                  .n_tok = n_tok},
                         .norm = norm.data(),
                         .eps = 1e-5f,
                         .router = wr.view,
                         .router_bias = rb.data(),
                         .logits = logits.data(),
                         .n_expert = c.n_expert,
                         .moe = ex.args(xn.data(), ids.data(), w.data(), out.data(), n_tok, c.k)};
        f.cpu->moe_block(ref);
        Dev dy = Dev::from(*f.gpu, y), dadd = Dev::from(*f.gpu, add), dxn = Dev::poisoned<float>(*f.gpu, nx),
            dattn = Dev::from(*f.gpu, attn),
            dl = Dev::poisoned<float>(*f.gpu, logits.size()), di = Dev::poisoned<int32_t>(*f.gpu, nk),
            dw = Dev::poisoned<float>(*f.gpu, nk), dout = Dev::poisoned<float>(*f.gpu, nx),
            dnxn = Dev::poisoned<float>(*f.gpu, nx);
        f.gpu->moe_block({.y = dy.as<float>(),
                          .add = with_add || proj ? dadd.as<float>() : nullptr,
                          .proj = {.w = gwo,
                                   .bias = dbo.as<float>(),
                                   .x = proj ? dattn.as<float>() : nullptr,
                                   .y = dadd.as<float>(),
                                   .n_tok = n_tok},
                          .norm = dnorm.as<float>(),
                          .eps = 1e-5f,
                          .router = gr,
                          .router_bias = drb.as<float>(),
                          .logits = dl.as<float>(),
                          .n_expert = c.n_expert,
                          .moe = dex.args(dxn.as<float>(), di.as<int32_t>(), dw.as<float>(), dout.as<float>(),
                                          n_tok, c.k),
                          .accumulate = tail == 1,
                          .next_norm = tail >= 2 ? dnext.as<float>() : nullptr,
                          .next_xn = tail == 2 ? dxn.as<float>() : dnxn.as<float>()});
        if (tail == 0) expect_close(dy.get<float>(nx), ry, 1e-6, 1e-6, "residual");
        // The q8x twin quantizes the GPU's own xn where the GPU leaves it (every tail but
        // 2, which overwrites it with the next norm): the CPU's xn is a sum in another
        // order, and one of its elements on the other side of an int8 rounding boundary
        // moves every SwiGLU output of its token (17 tokens at 128 / 192: up to 0.48 on a
        // token's outputs against a tolerance of 0.15, BRASS_TEST_SEED=2080039886).
        std::vector<float> gxn;
        if (tail != 2) {
          gxn = dxn.get<float>(nx);
          expect_close(gxn, xn, 1e-5, 1e-6, "xn");
        }
        std::vector<float> slack;  // (the twin's: int8 roundings that may flip)
        if (q8) {
          MoeArgs tw = ref.moe;
          if (!gxn.empty()) tw.x = gxn.data();
          auto twin = moe_q8x_twin(*f.cpu, tw);
          out = std::move(twin.out);
          slack = std::move(twin.slack);
        }
        // The tail's reference on the (twin's) experts output: y += out, then the next norm.
        std::vector<float> ty = ry, nxn(nx);
        if (tail >= 1)
          for (int64_t i = 0; i < nx; ++i) ty[i] += out[i];
        if (tail >= 2)
          f.cpu->rms_norm({.x = ty.data(),
                           .weight = next_norm.data(),
                           .out = nxn.data(),
                           .n_rows = n_tok,
                           .n = c.n_embd,
                           .eps = 1e-5f});
        expect_close(dl.get<float>(logits.size()), logits, 1e-5, 1e-5, "router logits");
        bool tie = false;
        for (int64_t t = 0; t < n_tok; ++t) {
          std::vector<float> l(logits.begin() + t * c.n_expert, logits.begin() + (t + 1) * c.n_expert);
          std::sort(l.rbegin(), l.rend());
          tie = tie || l[c.k - 1] - l[c.k] < 1e-3f * std::max(1.0f, std::fabs(l[c.k]));
        }
        if (tie) {
          std::printf("moe_block: near-tie at the k-th logit, picks not compared (round %d)\n", round);
          continue;
        }
        EXPECT_EQ(di.get<int32_t>(nk), ids);
        // The logits may differ by their bound above (sums in another order); a softmax
        // weight moves by at most 2 max|dlogit|.
        float lmax = 0.f;
        for (float l : logits) lmax = std::max(lmax, std::fabs(l));
        expect_close(dw.get<float>(nk), w, 1e-5, 2e-5 * (1.0 + lmax), "router weights");
        // (q8: a 2880-wide SwiGLU output re-quantized per 32 flips more int8 roundings
        // against the twin, whose sums run in another order: 3e-3 there.)
        const double out_rtol = q8 ? (c.n_ff >= 1024 ? 3e-3 : 1e-3) : 3e-5;
        if (tail == 0) {
          expect_close(dout.get<float>(nx), out, out_rtol, 1e-5, "moe out", slack);
          continue;
        }
        // The tail adds the experts' output (its error: out_rtol of max |out|) to y; the
        // next norm scales that error (with the largest slack) by w / rms(y) at most.
        float omax = 0.f, wmax = 0.f, smax = 0.f;
        for (float o : out) omax = std::max(omax, std::fabs(o));
        for (float x : next_norm) wmax = std::max(wmax, x);
        for (float x : slack) smax = std::max(smax, x);
        const double ytol = out_rtol * omax + 1e-5;
        expect_close(dy.get<float>(nx), ty, 1e-6, ytol, "residual + experts", slack);
        if (tail < 2) continue;
        double rmax = 0;
        for (int64_t t = 0; t < n_tok; ++t) {
          double ss = 0;
          for (int64_t i = 0; i < c.n_embd; ++i) ss += double(ty[t * c.n_embd + i]) * ty[t * c.n_embd + i];
          rmax = std::max(rmax, 1.0 / std::sqrt(ss / c.n_embd + 1e-5));
        }
        expect_close((tail == 2 ? dxn : dnxn).get<float>(nx), nxn, 1e-5, 2 * (ytol + smax) * wmax * rmax + 1e-6, "next xn");
      }
    }
  }
}

// One decode token in int8 mode: the attention also writes its output quantized as
// Q8_0 (cuda_attention.cu, dec_finish), and the next MoE block's fused wo (wo_router)
// copies that instead of quantizing the f32 output itself. The same bits either way: each
// case runs the attention and the MoE block twice on the same fresh inputs, the second
// time with a device copy in between, which makes the block quantize for itself; the
// residual, the picks and the attention output must match bit for bit, and the fusion
// counter must show that the first run took the copy and the second did not. Cases: the
// gpt-oss shape at the first token, one split and deep (22 splits on a 132-SM GPU: the
// merge writes it), f16 and f32 caches; head_dim 128 and 16 (their merges' other thread
// layouts).
TEST(CudaOps, DecodeAttentionHandsWoItsInt8Input) {
  BRASS_REQUIRE_CUDA();
  Fix f(true);
  SEED_TRACE(f.rng);
  const int64_t n_embd = 128, n_ff = 192, n_expert = 8, k = 4;
  HostExperts ex(f.rng, DType::MXFP4, n_embd, n_ff, n_expert);
  HostWeight wr(f.rng, DType::F32, n_embd, n_expert);
  const auto rb = f.rng.vec(n_expert), norm = f.rng.vec(n_embd, 0.5, 1.5);
  DevExperts dex(*f.gpu, ex);
  const WeightView gr = on_gpu(*f.gpu, wr.view);
  Dev drb = Dev::from(*f.gpu, rb), dnorm = Dev::from(*f.gpu, norm), scratch = Dev::poisoned<float>(*f.gpu, 2);
  struct Case {
    DType kv;
    int64_t n_head, n_head_kv, hd;
    int32_t pos;
  };
  for (const Case& c : {Case{DType::F16, 64, 8, 64, 0}, Case{DType::F16, 64, 8, 64, 300},
                        Case{DType::F16, 64, 8, 64, 4949}, Case{DType::F32, 64, 8, 64, 2000},
                        Case{DType::F16, 8, 1, 128, 3000}, Case{DType::F16, 16, 2, 16, 6000}}) {
    SCOPED_TRACE(::testing::Message() << "heads " << c.n_head << "/" << c.n_head_kv << " hd " << c.hd << " pos "
                                      << c.pos << (c.kv == DType::F16 ? " f16" : " f32"));
    const int64_t n_out = c.n_head * c.hd, row = c.n_head_kv * c.hd, slots = c.pos + 1;
    HostWeight wo(f.rng, DType::Q8_0, n_out, n_embd, 1, 4.0f / std::sqrt(static_cast<float>(n_out)));
    const WeightView gwo = on_gpu(*f.gpu, wo.view);
    const auto bo = f.rng.vec(n_embd), q = f.rng.vec(n_out, -2, 2), sinks = f.rng.vec(c.n_head, -1, 2),
               y = f.rng.vec(n_embd, -2, 2);
    // the cache (every position up to pos, the token's own included) in its element type
    const auto kf = f.rng.vec(slots * row), vf = f.rng.vec(slots * row);
    auto cache = [&](const std::vector<float>& x) {
      if (c.kv == DType::F32) return Dev::from(*f.gpu, x);
      std::vector<uint16_t> h(x.size());
      for (size_t i = 0; i < x.size(); ++i) h[i] = f32_to_f16(x[i]);
      return Dev::from(*f.gpu, h);
    };
    Dev dk = cache(kf), dv = cache(vf), dq = Dev::from(*f.gpu, q), dsk = Dev::from(*f.gpu, sinks),
        dbo = Dev::from(*f.gpu, bo), dpos = Dev::from(*f.gpu, std::vector<int32_t>{c.pos});
    const AttnSeq seq{.tok0 = 0, .n_tok = 1, .pos0 = c.pos, .k = dk.as<void>(), .v = dv.as<void>(),
                      .capacity = static_cast<int32_t>(slots)};
    struct Run {
      std::vector<float> y, attn;
      std::vector<int32_t> ids;
    };
    auto run = [&](bool apart) {
      Dev dy = Dev::from(*f.gpu, y), dadd = Dev::poisoned<float>(*f.gpu, n_embd),
          dattn = Dev::poisoned<float>(*f.gpu, n_out), dxn = Dev::poisoned<float>(*f.gpu, n_embd),
          dl = Dev::poisoned<float>(*f.gpu, n_expert), di = Dev::poisoned<int32_t>(*f.gpu, k),
          dw = Dev::poisoned<float>(*f.gpu, k), dout = Dev::poisoned<float>(*f.gpu, n_embd);
      f.gpu->attention({.q = dq.as<float>(), .sinks = dsk.as<float>(), .out = dattn.as<float>(), .kv_type = c.kv,
                        .n_head = c.n_head, .n_head_kv = c.n_head_kv, .head_dim = c.hd, .window = 0,
                        .scale = 1.0f / std::sqrt(static_cast<float>(c.hd)), .seqs = std::span(&seq, 1),
                        .pos = dpos.as<int32_t>()});
      if (apart) f.gpu->copy(scratch.as<float>() + 1, scratch.as<float>(), sizeof(float));
      f.gpu->moe_block({.y = dy.as<float>(),
                        .add = dadd.as<float>(),
                        .proj = {.w = gwo, .bias = dbo.as<float>(), .x = dattn.as<float>(), .y = dadd.as<float>(),
                                 .n_tok = 1},
                        .norm = dnorm.as<float>(),
                        .eps = 1e-5f,
                        .router = gr,
                        .router_bias = drb.as<float>(),
                        .logits = dl.as<float>(),
                        .n_expert = n_expert,
                        .moe = dex.args(dxn.as<float>(), di.as<int32_t>(), dw.as<float>(), dout.as<float>(), 1, k),
                        .accumulate = true});
      return Run{dy.get<float>(n_embd), dattn.get<float>(n_out), di.get<int32_t>(k)};
    };
    const int64_t before = cuda_fusion_counts(*f.gpu).attn_q8_read;
    const Run fused = run(false);
    EXPECT_EQ(cuda_fusion_counts(*f.gpu).attn_q8_read, before + 1) << "the block did not take the attention's copy";
    const Run own = run(true);
    EXPECT_EQ(cuda_fusion_counts(*f.gpu).attn_q8_read, before + 1) << "the block took a copy after another write";
    for (float x : fused.attn) ASSERT_TRUE(std::isfinite(x)) << "attention output not written";
    EXPECT_EQ(fused.attn, own.attn);
    EXPECT_EQ(fused.ids, own.ids);
    EXPECT_EQ(fused.y, own.y) << "the copy's bits differ from wo_router's own quantization";
  }
}

// One attention configuration: n_seq sequences with the given chunk lengths and start
// positions, stored then attended, reference vs CUDA (also through attn_qkv when asked).
struct AttnCase {
  DType kv;
  int64_t n_head, n_head_kv, hd;
  int32_t window;  // 0: full (linear storage); > 0: ring of `cap` slots
  int32_t cap;
  std::vector<int32_t> pos0, n_tok;
  bool sinks = true;
  float sink_bias = 0.0f;  // added to every sink (a dominating sink: +30)
  bool device_pos = true;
};

// rtol/atol: the bound; round_q: the reference reads q rounded to f16 (the tensor-core
// prefill kernel's Q operand).
void run_attention_case(Fix& f, const AttnCase& c, double rtol = 2e-5, double atol = 2e-6, bool round_q = false) {
  const int64_t n_seq = static_cast<int64_t>(c.pos0.size());
  const int64_t kv_row = c.n_head_kv * c.hd;
  const int64_t esz = c.kv == DType::F16 ? 2 : 4;
  int64_t total = 0;
  for (auto n : c.n_tok) total += n;
  // Fill each cache with the history before pos0 through kv_store itself (so both
  // backends hold the same bits), then the chunk.
  std::vector<std::vector<uint8_t>> hk(n_seq), hv(n_seq);
  std::vector<std::unique_ptr<Buffer>> gk(n_seq), gv(n_seq);
  std::vector<AttnSeq> cs(n_seq), gs(n_seq);
  std::vector<int32_t> pos;
  int64_t tok0 = 0;
  for (int64_t s = 0; s < n_seq; ++s) {
    const int64_t slots = c.window > 0 ? c.cap : c.pos0[s] + c.n_tok[s];
    hk[s].assign(slots * kv_row * esz, 0);
    hv[s].assign(slots * kv_row * esz, 0);
    gk[s] = std::move(f.gpu->alloc(slots * kv_row * esz)).value();
    gv[s] = std::move(f.gpu->alloc(slots * kv_row * esz)).value();
    f.gpu->upload(gk[s]->data(), hk[s].data(), hk[s].size());  // same zeros as the host cache
    f.gpu->upload(gv[s]->data(), hv[s].data(), hv[s].size());
    // history: positions [max(0, pos0 - cap + n_tok), pos0) for rings, [0, pos0) otherwise
    const int64_t h0 = c.window > 0 ? std::max<int64_t>(0, c.pos0[s] - (c.cap - c.n_tok[s])) : 0;
    const int64_t nh = c.pos0[s] - h0;
    if (nh > 0) {
      auto k = f.rng.vec(nh * kv_row), v = f.rng.vec(nh * kv_row);
      AttnSeq hs{.tok0 = 0, .n_tok = nh, .pos0 = static_cast<int32_t>(h0), .k = hk[s].data(), .v = hv[s].data(),
                 .capacity = static_cast<int32_t>(slots), .ring = c.window > 0};
      f.cpu->kv_store({.k = k.data(), .v = v.data(), .kv_type = c.kv, .n_head_kv = c.n_head_kv, .head_dim = c.hd,
                       .seqs = std::span(&hs, 1)});
      Dev dk = Dev::from(*f.gpu, k), dv = Dev::from(*f.gpu, v);
      AttnSeq gh = hs;
      gh.k = gk[s]->data();
      gh.v = gv[s]->data();
      f.gpu->kv_store({.k = dk.as<float>(), .v = dv.as<float>(), .kv_type = c.kv, .n_head_kv = c.n_head_kv,
                       .head_dim = c.hd, .seqs = std::span(&gh, 1)});
      f.gpu->synchronize();
    }
    cs[s] = AttnSeq{.tok0 = tok0, .n_tok = c.n_tok[s], .pos0 = c.pos0[s], .k = hk[s].data(), .v = hv[s].data(),
                    .capacity = static_cast<int32_t>(slots), .ring = c.window > 0};
    gs[s] = cs[s];
    gs[s].k = gk[s]->data();
    gs[s].v = gv[s]->data();
    for (int64_t i = 0; i < c.n_tok[s]; ++i) pos.push_back(c.pos0[s] + static_cast<int32_t>(i));
    tok0 += c.n_tok[s];
  }
  auto q = f.rng.vec(total * c.n_head * c.hd, -2, 2), k = f.rng.vec(total * kv_row), v = f.rng.vec(total * kv_row);
  auto sinks = f.rng.vec(c.n_head, -1, 2);
  for (auto& s : sinks) s += c.sink_bias;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
  std::vector<float> want(total * c.n_head * c.hd);
  f.cpu->kv_store({.k = k.data(), .v = v.data(), .kv_type = c.kv, .n_head_kv = c.n_head_kv, .head_dim = c.hd,
                   .seqs = cs});
  auto qr = q;
  if (round_q)
    for (auto& x : qr) x = f16_to_f32(f32_to_f16(x));
  f.cpu->attention({.q = qr.data(), .sinks = c.sinks ? sinks.data() : nullptr, .out = want.data(), .kv_type = c.kv,
                    .n_head = c.n_head, .n_head_kv = c.n_head_kv, .head_dim = c.hd, .window = c.window,
                    .scale = scale, .seqs = cs});
  Dev dq = Dev::from(*f.gpu, q), dk = Dev::from(*f.gpu, k), dv = Dev::from(*f.gpu, v), dsk = Dev::from(*f.gpu, sinks),
      dp = Dev::from(*f.gpu, pos), dout = Dev::poisoned<float>(*f.gpu, want.size());
  const int32_t* gpos = c.device_pos ? dp.as<int32_t>() : nullptr;
  f.gpu->kv_store({.k = dk.as<float>(), .v = dv.as<float>(), .kv_type = c.kv, .n_head_kv = c.n_head_kv,
                   .head_dim = c.hd, .seqs = gs, .pos = gpos});
  f.gpu->attention({.q = dq.as<float>(), .sinks = c.sinks ? dsk.as<float>() : nullptr, .out = dout.as<float>(),
                    .kv_type = c.kv, .n_head = c.n_head, .n_head_kv = c.n_head_kv, .head_dim = c.hd,
                    .window = c.window, .scale = scale, .seqs = gs, .pos = gpos});
  expect_close(dout.get<float>(want.size()), want, rtol, atol, "attention");
  // The caches must hold the same elements.
  for (int64_t s = 0; s < n_seq; ++s) {
    std::vector<uint8_t> got(hk[s].size());
    f.gpu->synchronize();
    f.gpu->download(got.data(), gk[s]->data(), got.size());
    EXPECT_TRUE(got == hk[s]) << "K cache of sequence " << s << " differs";
  }
}

TEST(CudaOps, AttentionDecodeAndPrefill) {
  BRASS_REQUIRE_CUDA();
  Fix f;
  SEED_TRACE(f.rng);
  // gpt-oss shape, decode: first token, mid, deep; f16 and f32 caches.
  for (DType kv : {DType::F16, DType::F32}) {
    run_attention_case(f, {kv, 64, 8, 64, 0, 0, {0}, {1}});
    run_attention_case(f, {kv, 64, 8, 64, 0, 0, {1000}, {1}});
    run_attention_case(f, {kv, 64, 8, 64, 0, 0, {4097}, {1}, true, 0, false});
    // sliding window 128 in a ring of 128 + 512 - 1: before, at and past the boundary.
    for (int32_t p : {5, 127, 128, 129, 700, 1500})
      run_attention_case(f, {kv, 64, 8, 64, 128, 639, {p}, {1}});
  }
  // dominating sink: the output shrinks towards 0, relative error still small.
  run_attention_case(f, {DType::F32, 64, 8, 64, 0, 0, {300}, {1}, true, 30.0f});
  // One decode token (the one-launch decode kernel), run back to back so every launch
  // finds the split tickets the last one left: several splits with a partly filled last
  // one, a window smaller than its ring (empty trailing splits) before and after the
  // wrap, n_rep 1 / 4 / 8 at head_dim 16, 32, 64 and 128, no sinks, more splits than the
  // merge keeps in registers (few kv heads: a wave allows many splits per head).
  run_attention_case(f, {DType::F16, 64, 8, 64, 1000, 2000, {300}, {1}});
  run_attention_case(f, {DType::F16, 64, 8, 64, 1000, 2000, {2500}, {1}, true, 0, false});
  run_attention_case(f, {DType::F16, 8, 8, 128, 0, 0, {700}, {1}});
  run_attention_case(f, {DType::F16, 16, 4, 128, 300, 1000, {2345}, {1}});
  run_attention_case(f, {DType::F32, 16, 2, 16, 0, 0, {1500}, {1}});
  run_attention_case(f, {DType::F32, 4, 4, 16, 0, 0, {40}, {1}, false});
  run_attention_case(f, {DType::F16, 32, 4, 32, 0, 0, {257}, {1}});
  run_attention_case(f, {DType::F16, 64, 8, 64, 0, 0, {600}, {1}, false});
  run_attention_case(f, {DType::F16, 8, 2, 64, 0, 0, {5000}, {1}});
  run_attention_case(f, {DType::F32, 8, 1, 64, 0, 0, {3000}, {1}});
  // Deep enough for more splits than the merge's first two chunks of values (refills):
  // head_dim 128 (8 splits a chunk), 32 and 16 (32 a chunk).
  run_attention_case(f, {DType::F16, 8, 2, 128, 0, 0, {6000}, {1}});
  run_attention_case(f, {DType::F16, 16, 2, 32, 0, 0, {7000}, {1}, false});
  run_attention_case(f, {DType::F16, 8, 1, 16, 0, 0, {6000}, {1}});
  // gpt-oss shape, splits of several tiles (22 splits a kv head on a 132-SM GPU): 4949 puts
  // the newest key (read after the PDL wait) in its split's second tile; 9000 (no sinks)
  // four tiles a split; a 4000-key window in a 4500-slot ring, past its wrap.
  run_attention_case(f, {DType::F16, 64, 8, 64, 0, 0, {4949}, {1}});
  run_attention_case(f, {DType::F16, 64, 8, 64, 0, 0, {9000}, {1}, false});
  run_attention_case(f, {DType::F16, 64, 8, 64, 4000, 4500, {7000}, {1}});
  // no sinks; tiny head_dim, n_rep 2; prefill chunks of two sequences.
  run_attention_case(f, {DType::F32, 4, 2, 16, 0, 0, {0, 7}, {5, 3}, false});
  run_attention_case(f, {DType::F16, 8, 2, 32, 8, 12, {9, 0}, {5, 4}});
  run_attention_case(f, {DType::F32, 8, 1, 128, 0, 0, {33}, {6}});
  // batched decode (one token per sequence: the one-launch multi-sequence kernels),
  // first token, deep, ring before/after wrap, positions from the device and from the host.
  run_attention_case(f, {DType::F16, 64, 8, 64, 0, 0, {0, 100, 4000, 17, 1}, {1, 1, 1, 1, 1}});
  run_attention_case(f, {DType::F16, 64, 8, 64, 128, 639, {5, 700, 128, 1500}, {1, 1, 1, 1}, true, 0, false});
  run_attention_case(f, {DType::F32, 8, 2, 32, 0, 0, {3, 9, 0}, {1, 1, 1}, false});
  // 40 sequences of random depths (the f16 cache's one-token kernel for all of them: more
  // (sequence, kv head) ticket counters than one sequence uses, some deep enough to split).
  std::vector<int32_t> many(40);
  for (auto& p : many) p = f.rng.integer(0, 2600);
  run_attention_case(f, {DType::F16, 64, 8, 64, 0, 0, many, std::vector<int32_t>(many.size(), 1)});
  run_attention_case(f, {DType::F16, 64, 8, 64, 128, 639, many, std::vector<int32_t>(many.size(), 1)});
}

// Chunks of >= 16 tokens with an f16 cache and head_dim 64 go to the tensor-core flash
// kernel (fast mode): q and the probabilities are rounded to f16 there, so the reference
// reads f16-rounded q and the bound allows the probabilities' rounding (relative 2^-11
// each). Full and sliding (ring) layers, a chunk after history, odd lengths, group
// sizes 8 and 4, a dominating sink, no sinks, two sequences in one call (one of them
// short: the split kernel).
// A recorded one-token decode attention (gpt-oss's shape, f16 cache of 8192 positions:
// as many splits as the GPU gives such a capacity) replayed across depths: before each
// launch set_decode_keys re-sizes its splits by the power-of-two bound on the keys (128
// keys a split, the tensor-core kernel's tile), up to the recorded count and back down.
// Every replay against the reference attention on the same cache bits; the last one
// repeats the first replay's inputs and must give its bits.
TEST(CudaOps, DecodeGraphSplitsFollowTheDepth) {
  BRASS_REQUIRE_CUDA();
  Fix f(true);
  SEED_TRACE(f.rng);
  const int64_t n_head = 64, n_head_kv = 8, hd = 64, row = n_head_kv * hd, n_out = n_head * hd;
  const int32_t cap = 8192;
  std::vector<uint16_t> hk(cap * row), hv(cap * row);  // f16 bits, the same on both sides
  for (auto& x : hk) x = f32_to_f16(f.rng.uni());
  for (auto& x : hv) x = f32_to_f16(f.rng.uni());
  const auto sinks = f.rng.vec(n_head, -1, 2);
  Dev dk = Dev::from(*f.gpu, hk), dv = Dev::from(*f.gpu, hv), dsk = Dev::from(*f.gpu, sinks),
      dq = Dev::poisoned<float>(*f.gpu, n_out), dpos = Dev::poisoned<int32_t>(*f.gpu, 1),
      dout = Dev::poisoned<float>(*f.gpu, n_out);
  const float scale = 0.125f;
  const AttnSeq gs{.tok0 = 0, .n_tok = 1, .pos0 = 0, .k = dk.as<void>(), .v = dv.as<void>(), .capacity = cap};
  auto record = [&] {
    f.gpu->attention({.q = dq.as<float>(), .sinks = dsk.as<float>(), .out = dout.as<float>(), .kv_type = DType::F16,
                      .n_head = n_head, .n_head_kv = n_head_kv, .head_dim = hd, .window = 0, .scale = scale,
                      .seqs = std::span(&gs, 1), .pos = dpos.as<int32_t>()});
  };
  const auto q_eager = f.rng.vec(n_out);
  f.gpu->upload(dpos.as<int32_t>(), &gs.pos0, 4);
  f.gpu->upload(dq.as<float>(), q_eager.data(), n_out * 4);
  record();  // (eagerly first, as the model does: the backend's scratch settles)
  auto g = f.gpu->capture(record);
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  Graph& graph = *g.value();
  const auto recorded = cuda_graph_decode_splits(graph);
  ASSERT_EQ(recorded.size(), 1u) << "the decode launch's node was not recorded";
  const int32_t full = recorded[0];
  ASSERT_GE(full, 2) << "a capacity of 8192 keys should take several splits";
  const auto q0 = f.rng.vec(n_out, -2, 2);
  std::vector<float> first;
  const std::vector<int32_t> depths = {0, 127, 128, 300, 1000, 2100, 4500, 8191, 2000, 40, 0};
  for (size_t i = 0; i < depths.size(); ++i) {
    const int32_t pos = depths[i];
    SCOPED_TRACE(::testing::Message() << "position " << pos);
    const bool again = i + 1 == depths.size();  // the first replay's inputs
    const auto q = i == 0 || again ? q0 : f.rng.vec(n_out, -2, 2);
    f.gpu->upload(dq.as<float>(), q.data(), n_out * 4);
    f.gpu->upload(dpos.as<int32_t>(), &pos, 4);
    ASSERT_TRUE(graph.set_decode_keys(pos + 1).is_ok());
    const int64_t bound = static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(pos + 1)));
    EXPECT_EQ(cuda_graph_decode_splits(graph)[0], std::min<int64_t>(full, (bound + 127) / 128));
    ASSERT_TRUE(graph.launch().is_ok());
    const AttnSeq cs{.tok0 = 0, .n_tok = 1, .pos0 = pos, .k = hk.data(), .v = hv.data(), .capacity = cap};
    std::vector<float> want(n_out);
    f.cpu->attention({.q = q.data(), .sinks = sinks.data(), .out = want.data(), .kv_type = DType::F16,
                      .n_head = n_head, .n_head_kv = n_head_kv, .head_dim = hd, .window = 0, .scale = scale,
                      .seqs = std::span(&cs, 1)});
    const auto got = dout.get<float>(n_out);
    expect_close(got, want, 2e-5, 2e-6, "decode attention replay");
    if (i == 0) first = got;
    if (again) EXPECT_EQ(got, first) << "the same depth and inputs gave other bits";
  }
}

TEST(CudaOps, FlashPrefillAttention) {
  BRASS_REQUIRE_CUDA();
  Fix f(true);
  SEED_TRACE(f.rng);
  const double rt = 3e-3, at = 1e-3;
  run_attention_case(f, {DType::F16, 64, 8, 64, 0, 0, {0}, {200}}, rt, at, true);
  run_attention_case(f, {DType::F16, 64, 8, 64, 0, 0, {37}, {77}}, rt, at, true);
  run_attention_case(f, {DType::F16, 64, 8, 64, 128, 128 + 300 - 1, {0}, {300}}, rt, at, true);
  run_attention_case(f, {DType::F16, 64, 8, 64, 128, 128 + 90 - 1, {500}, {90}}, rt, at, true);
  run_attention_case(f, {DType::F16, 16, 4, 64, 8, 8 + 33 - 1, {20}, {33}}, rt, at, true);
  run_attention_case(f, {DType::F16, 64, 8, 64, 0, 0, {5}, {64}, true, 30.0f}, rt, at, true);
  run_attention_case(f, {DType::F16, 32, 4, 64, 0, 0, {0, 100}, {50, 1}, false}, rt, at, true);
}

TEST_P(CudaOpsMode, FusedQkvMatchesComposition) {
  BRASS_REQUIRE_CUDA();
  Fix f(GetParam());
  SEED_TRACE(f.rng);
  const auto freqs = model::compute_rope_freqs(model::RopeParams{});
  struct Case {
    DType wt, kv; int64_t n_embd, n_head, n_head_kv, hd, n_tok; int32_t pos0; bool ring; int32_t cap;
    bool norm = false;  // x is the residual, normed by attn_qkv (the decode graph's one-token form)
  };
  // (Int8Act mode, 2..8 tokens: q / k / v in one launch of the int8 MMA kernel; one token:
  // the preloading kernel of cuda_q8_pre.cu at every fragment size, with and without the norm;
  // Q8_0 with n_embd % 64 == 0 stages its rows in shared memory, 160 keeps them in registers.)
  for (const Case& c : {Case{DType::Q8_0, DType::F16, 2880, 64, 8, 64, 1, 4100, false, 0},
                        Case{DType::Q8_0, DType::F16, 2880, 64, 8, 64, 5, 100, false, 0},
                        Case{DType::MXFP4, DType::F32, 128, 4, 2, 32, 7, 0, false, 0},
                        Case{DType::Q8_0, DType::F32, 96, 4, 2, 16, 5, 3, true, 12},
                        Case{DType::F32, DType::F16, 40, 4, 1, 64, 2, 700, true, 639},
                        Case{DType::Q8_0, DType::F16, 2880, 64, 8, 64, 1, 130, true, 128, true},
                        Case{DType::MXFP4, DType::F16, 2880, 64, 8, 64, 1, 7, false, 0, true},
                        Case{DType::MXFP4, DType::F32, 128, 4, 2, 32, 1, 0, false, 0, true},
                        Case{DType::Q8_0, DType::F32, 1536, 6, 3, 16, 1, 21, false, 0, true},
                        Case{DType::Q8_0, DType::F32, 192, 4, 2, 16, 1, 9, false, 0, true},
                        Case{DType::Q8_0, DType::F16, 160, 4, 2, 16, 1, 3, false, 0, true},
                        Case{DType::F32, DType::F16, 40, 4, 1, 64, 1, 700, true, 639, true}}) {
    SCOPED_TRACE(::testing::Message() << dtype_name(c.wt) << " n_embd " << c.n_embd << " n_tok " << c.n_tok
                                      << (c.norm ? " norm" : ""));
    const int64_t Q = c.n_head * c.hd, KV = c.n_head_kv * c.hd;
    HostWeight wq(f.rng, c.wt, c.n_embd, Q), wk(f.rng, c.wt, c.n_embd, KV), wv(f.rng, c.wt, c.n_embd, KV);
    auto bq = f.rng.vec(Q), bk = f.rng.vec(KV), bv = f.rng.vec(KV), x = f.rng.vec(c.n_tok * c.n_embd);
    const auto nw = f.rng.vec(c.n_embd, 0.5, 1.5);
    std::vector<float> xn(x.size());
    if (c.norm)
      f.cpu->rms_norm({.x = x.data(), .weight = nw.data(), .out = xn.data(), .n_rows = c.n_tok, .n = c.n_embd,
                       .eps = 1e-5f});
    std::vector<int32_t> pos(c.n_tok);
    for (int64_t i = 0; i < c.n_tok; ++i) pos[i] = c.pos0 + static_cast<int32_t>(i);
    const int64_t slots = c.ring ? c.cap : c.pos0 + c.n_tok, esz = c.kv == DType::F16 ? 2 : 4;
    std::vector<uint8_t> hk(slots * KV * esz, 0), hv(slots * KV * esz, 0);
    std::vector<float> q(c.n_tok * Q), k(c.n_tok * KV), v(c.n_tok * KV);
    AttnSeq cs{.tok0 = 0, .n_tok = c.n_tok, .pos0 = c.pos0, .k = hk.data(), .v = hv.data(),
               .capacity = static_cast<int32_t>(slots), .ring = c.ring};
    const auto& xin = c.norm ? xn : x;
    const auto xr = f.q8x && q8x_type(c.wt) ? q8_roundtrip(xin, c.n_embd) : xin;
    f.cpu->attn_qkv({.x = xr.data(), .wq = wq.view, .wk = wk.view, .wv = wv.view, .bq = bq.data(), .bk = bk.data(),
                     .bv = bv.data(), .q = q.data(), .k = k.data(), .v = v.data(), .pos = pos.data(),
                     .inv_freq = freqs.inv_freq.data(), .mscale = freqs.mscale, .n_tok = c.n_tok, .n_head = c.n_head,
                     .n_head_kv = c.n_head_kv, .head_dim = c.hd, .kv_type = c.kv, .seqs = std::span(&cs, 1)});
    auto gk = std::move(f.gpu->alloc(hk.size())).value(), gv = std::move(f.gpu->alloc(hv.size())).value();
    f.gpu->upload(gk->data(), hk.data(), hk.size());
    f.gpu->upload(gv->data(), hv.data(), hv.size());
    Dev dx = Dev::from(*f.gpu, x), dbq = Dev::from(*f.gpu, bq), dbk = Dev::from(*f.gpu, bk), dbv = Dev::from(*f.gpu, bv),
        dp = Dev::from(*f.gpu, pos), dfr = Dev::from(*f.gpu, freqs.inv_freq), dq = Dev::poisoned<float>(*f.gpu, q.size()),
        dk = Dev::poisoned<float>(*f.gpu, k.size()), dv = Dev::poisoned<float>(*f.gpu, v.size()),
        dnw = Dev::from(*f.gpu, nw), dxn = Dev::poisoned<float>(*f.gpu, x.size());
    AttnSeq gs = cs;
    gs.k = gk->data();
    gs.v = gv->data();
    f.gpu->attn_qkv({.x = dx.as<float>(), .norm = c.norm ? dnw.as<float>() : nullptr, .eps = 1e-5f,
                     .xn = dxn.as<float>(), .wq = on_gpu(*f.gpu, wq.view), .wk = on_gpu(*f.gpu, wk.view),
                     .wv = on_gpu(*f.gpu, wv.view), .bq = dbq.as<float>(), .bk = dbk.as<float>(),
                     .bv = dbv.as<float>(), .q = dq.as<float>(), .k = dk.as<float>(), .v = dv.as<float>(),
                     .pos = dp.as<int32_t>(), .inv_freq = dfr.as<float>(), .mscale = freqs.mscale, .n_tok = c.n_tok,
                     .n_head = c.n_head, .n_head_kv = c.n_head_kv, .head_dim = c.hd, .kv_type = c.kv,
                     .seqs = std::span(&gs, 1)});
    // With the norm in int8 mode, x is quantized from a norm summed in another order: an
    // element on a rounding boundary may land one int8 step apart (1e-3, as for the MoE).
    const double rt = c.norm && f.q8x && q8x_type(c.wt) ? 1e-3 : 2e-5;
    if (c.norm) expect_close(dxn.get<float>(x.size()), xn, 1e-5, 1e-6, "xn");
    expect_close(dq.get<float>(q.size()), q, rt, 1e-5, "q");
    expect_close(dk.get<float>(k.size()), k, rt, 1e-5, "k");
    expect_close(dv.get<float>(v.size()), v, rt, 1e-5, "v");
    // Cache rows of this chunk, as floats.
    std::vector<uint8_t> got(hk.size());
    f.gpu->download(got.data(), gk->data(), got.size());
    std::vector<float> gotf, wantf;
    for (int64_t i = 0; i < c.n_tok; ++i) {
      const int64_t slot = c.ring ? (c.pos0 + i) % c.cap : c.pos0 + i;
      const std::vector<float> a = kv_row(got, slot, KV, esz), b = kv_row(hk, slot, KV, esz);
      gotf.insert(gotf.end(), a.begin(), a.end());
      wantf.insert(wantf.end(), b.begin(), b.end());
    }
    expect_close(gotf, wantf, 2e-3, 1e-5, "k cache rows");  // f16: one rounding step apart at most
  }
}

// Batched decode's attn_qkv: n sequences of one token each, at scattered positions, ring
// (sliding-window) and linear caches side by side. The CUDA backend rotates q and k and
// stores k and v in one launch (rope_store_multi_kernel) after the projections (the int8
// MMA kernel for MXFP4 in Int8Act mode, three matmuls otherwise); the reference composes
// rope, rope, kv_store. Every sequence's cache row is compared, and the cache is checked
// untouched elsewhere.
TEST_P(CudaOpsMode, BatchedQkvOfOneTokenSequences) {
  BRASS_REQUIRE_CUDA();
  Fix f(GetParam());
  SEED_TRACE(f.rng);
  const auto freqs = model::compute_rope_freqs(model::RopeParams{});
  struct Case { DType wt, kv; int64_t n_embd, n_head, n_head_kv, hd, n_seq; };
  for (const Case& c : {Case{DType::F32, DType::F16, 96, 4, 2, 64, 5}, Case{DType::MXFP4, DType::F32, 128, 8, 2, 32, 40},
                        Case{DType::MXFP4, DType::F16, 2880, 64, 8, 64, 32}}) {
    SCOPED_TRACE(::testing::Message() << dtype_name(c.wt) << " n_embd " << c.n_embd << " seqs " << c.n_seq);
    const int64_t Q = c.n_head * c.hd, KV = c.n_head_kv * c.hd, n = c.n_seq, esz = c.kv == DType::F16 ? 2 : 4;
    HostWeight wq(f.rng, c.wt, c.n_embd, Q), wk(f.rng, c.wt, c.n_embd, KV), wv(f.rng, c.wt, c.n_embd, KV);
    auto bq = f.rng.vec(Q), bk = f.rng.vec(KV), bv = f.rng.vec(KV), x = f.rng.vec(n * c.n_embd);
    const auto xr = f.q8x && q8x_type(c.wt) ? q8_roundtrip(x, c.n_embd) : x;
    constexpr int32_t kCap = 128;  // ring sequences' slots
    std::vector<int32_t> pos(n);
    std::vector<AttnSeq> cs(n), gs(n);
    std::vector<std::vector<uint8_t>> hk(n), hv(n);
    std::vector<std::unique_ptr<Buffer>> gk(n), gv(n);
    for (int64_t i = 0; i < n; ++i) {
      pos[i] = static_cast<int32_t>(f.rng.uni(0.0f, 300.0f));
      const bool ring = i % 2 == 1;
      const int32_t slots = ring ? kCap : pos[i] + 1;
      hk[i].assign(slots * KV * esz, 0);
      hv[i].assign(slots * KV * esz, 0);
      for (auto* h : {&hk[i], &hv[i]})  // random bytes: a stray write shows
        for (auto& b : *h) b = static_cast<uint8_t>(f.rng.uni(0.0f, 64.0f));
      cs[i] = AttnSeq{.tok0 = i, .n_tok = 1, .pos0 = pos[i], .k = hk[i].data(), .v = hv[i].data(), .capacity = slots,
                      .ring = ring};
      gk[i] = std::move(f.gpu->alloc(hk[i].size())).value();
      gv[i] = std::move(f.gpu->alloc(hv[i].size())).value();
      f.gpu->upload(gk[i]->data(), hk[i].data(), hk[i].size());
      f.gpu->upload(gv[i]->data(), hv[i].data(), hv[i].size());
      gs[i] = cs[i];
      gs[i].k = gk[i]->data();
      gs[i].v = gv[i]->data();
    }
    std::vector<float> q(n * Q), k(n * KV), v(n * KV);
    f.cpu->attn_qkv({.x = xr.data(), .wq = wq.view, .wk = wk.view, .wv = wv.view, .bq = bq.data(), .bk = bk.data(),
                     .bv = bv.data(), .q = q.data(), .k = k.data(), .v = v.data(), .pos = pos.data(),
                     .inv_freq = freqs.inv_freq.data(), .mscale = freqs.mscale, .n_tok = n, .n_head = c.n_head,
                     .n_head_kv = c.n_head_kv, .head_dim = c.hd, .kv_type = c.kv, .seqs = cs});
    Dev dx = Dev::from(*f.gpu, x), dbq = Dev::from(*f.gpu, bq), dbk = Dev::from(*f.gpu, bk), dbv = Dev::from(*f.gpu, bv),
        dp = Dev::from(*f.gpu, pos), dfr = Dev::from(*f.gpu, freqs.inv_freq), dq = Dev::poisoned<float>(*f.gpu, q.size()),
        dk = Dev::poisoned<float>(*f.gpu, k.size()), dv = Dev::poisoned<float>(*f.gpu, v.size());
    f.gpu->attn_qkv({.x = dx.as<float>(), .wq = on_gpu(*f.gpu, wq.view), .wk = on_gpu(*f.gpu, wk.view),
                     .wv = on_gpu(*f.gpu, wv.view), .bq = dbq.as<float>(), .bk = dbk.as<float>(),
                     .bv = dbv.as<float>(), .q = dq.as<float>(), .k = dk.as<float>(), .v = dv.as<float>(),
                     .pos = dp.as<int32_t>(), .inv_freq = dfr.as<float>(), .mscale = freqs.mscale, .n_tok = n,
                     .n_head = c.n_head, .n_head_kv = c.n_head_kv, .head_dim = c.hd, .kv_type = c.kv, .seqs = gs});
    expect_close(dq.get<float>(q.size()), q, 2e-5, 1e-5, "q");
    expect_close(dk.get<float>(k.size()), k, 2e-5, 1e-5, "k");
    expect_close(dv.get<float>(v.size()), v, 2e-5, 1e-5, "v");
    for (int64_t i = 0; i < n; ++i) {
      SCOPED_TRACE(::testing::Message() << "sequence " << i << " pos " << pos[i]);
      const int64_t slot = cs[i].ring ? pos[i] % kCap : pos[i], row = KV * esz;
      for (const auto& [dev, host] : {std::pair{gk[i].get(), &hk[i]}, std::pair{gv[i].get(), &hv[i]}}) {
        std::vector<uint8_t> got(host->size());
        f.gpu->download(got.data(), dev->data(), got.size());
        ASSERT_TRUE(kv_rest_untouched(got, *host, slot, row));
        // f16: one rounding step apart at most
        expect_close(kv_row(got, slot, KV, esz), kv_row(*host, slot, KV, esz), 2e-3, 1e-5, "cache row");
      }
    }
  }
}

TEST(CudaOps, ArgmaxTiesAndFeedback) {
  BRASS_REQUIRE_CUDA();
  Fix f;
  SEED_TRACE(f.rng);
  const int64_t n = 201088;
  auto x = f.rng.vec(3 * n, -5, 5);
  const int a = f.rng.integer(0, n - 1), b = f.rng.integer(0, n - 1);
  x[std::max(a, b)] = 7.0f;  // a tie in row 0: the lower index must win
  x[std::min(a, b)] = 7.0f;
  x[n + 123456] = 9.0f;
  for (int i = 0; i < 64; ++i) x[n + f.rng.integer(0, n - 1)] = std::nanf("");  // NaN never wins (row 1)
  x[n + 123456] = 9.0f;
  for (int64_t i = 2 * n; i < 3 * n; ++i) x[i] = std::nanf("");  // an all-NaN row picks 0
  std::vector<int32_t> out(3), pos = {10, 20, 30}, hist(40, -1);
  f.cpu->argmax({.x = x.data(), .out = out.data(), .n_rows = 3, .n = n, .pos = pos.data(), .history = hist.data()});
  EXPECT_EQ(out[0], std::min(a, b));
  EXPECT_EQ(out[1], 123456);
  EXPECT_EQ(out[2], 0);
  Dev dx = Dev::from(*f.gpu, x), dout = Dev::poisoned<int32_t>(*f.gpu, 3),
      dp = Dev::from(*f.gpu, std::vector<int32_t>{10, 20, 30}), dh = Dev::from(*f.gpu, std::vector<int32_t>(40, -1));
  for (int rep = 0; rep < 2; ++rep)  // twice: the completion counters must reset
    f.gpu->argmax({.x = dx.as<float>(), .out = dout.as<int32_t>(), .n_rows = 3, .n = n, .pos = dp.as<int32_t>(),
                   .history = dh.as<int32_t>()});
  EXPECT_EQ(dout.get<int32_t>(3), out);
  EXPECT_EQ(dp.get<int32_t>(3), (std::vector<int32_t>{12, 22, 32}));
  auto h = dh.get<int32_t>(40);
  EXPECT_EQ(h[11], out[0]);
  EXPECT_EQ(h[12], out[0]);
  EXPECT_EQ(h[21], out[1]);
  EXPECT_EQ(h[22], out[1]);
  // Batched steps' shapes: rows split over fewer blocks each (argmax_parts), the vocabulary
  // read as float4 or (n % 4 != 0) as floats; each row's maximum planted twice (the lower
  // index wins) at random places, so the pair often lies in two blocks' ranges.
  for (const auto [rows, m] : {std::pair<int64_t, int64_t>{64, 201088}, {37, 1001}, {9, 4096}, {2, 203}}) {
    SCOPED_TRACE(::testing::Message() << rows << " rows of " << m);
    auto xs = f.rng.vec(rows * m, -5, 5);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t p = f.rng.integer(0, static_cast<int>(m - 1)), q = f.rng.integer(0, static_cast<int>(m - 1));
      xs[r * m + p] = 6.0f + static_cast<float>(r % 3);
      xs[r * m + q] = 6.0f + static_cast<float>(r % 3);
    }
    std::vector<int32_t> want(rows);
    f.cpu->argmax({.x = xs.data(), .out = want.data(), .n_rows = rows, .n = m});
    Dev dxs = Dev::from(*f.gpu, xs), dgot = Dev::poisoned<int32_t>(*f.gpu, rows);
    for (int rep = 0; rep < 2; ++rep) f.gpu->argmax({.x = dxs.as<float>(), .out = dgot.as<int32_t>(), .n_rows = rows, .n = m});
    EXPECT_EQ(dgot.get<int32_t>(rows), want);
  }
}

// The output head of one row (cuda_head.cu: the head and the greedy pick in one launch)
// against the q8x twin (the reference matmul on the Q8_0 round trip of x), then the pick
// against the host argmax of the very logits the kernel wrote: two identical weight rows
// planted as the largest logit (a tie: the lower row wins), pos / history fed back, twice
// (the ticket resets), and the logits-only launch giving the same bits. Shapes: the
// gpt-oss head (201,088 x 2,880) and n = 4096 / 1024 (the flat walk: a row ends inside a
// 32-chunk step, or at its end; rows not a multiple of 8), the tiny models' (96 x 64) and
// 1001 x 128 (4 lanes a row; a lane's last batch runs past the row's end).
TEST(CudaOps, OutputHeadPickMatchesTwin) {
  BRASS_REQUIRE_CUDA();
  Fix f(true);
  SEED_TRACE(f.rng);
  struct Case { int64_t n_in, rows; bool bias; };
  for (const Case c : {Case{2880, 201088, false}, Case{64, 96, false}, Case{128, 1001, true}, Case{4096, 517, true},
                       Case{1024, 1003, true}}) {
    SCOPED_TRACE(::testing::Message() << c.n_in << " x " << c.rows);
    const auto x = f.rng.vec(c.n_in);
    std::vector<float> rows(c.n_in * c.rows);
    for (auto& v : rows) v = f.rng.uni(-1.f, 1.f);
    const int lo = f.rng.integer(0, static_cast<int>(c.rows) - 2);
    const int hi = f.rng.integer(lo + 1, static_cast<int>(c.rows) - 1);
    for (int64_t i = 0; i < c.n_in; ++i) rows[lo * c.n_in + i] = rows[hi * c.n_in + i] = x[i] > 0 ? 1.f : -1.f;
    std::vector<uint8_t> bytes(row_bytes(DType::Q8_0, c.n_in) * c.rows);
    for (int64_t r = 0; r < c.rows; ++r)
      quant::quantize_row(DType::Q8_0, rows.data() + r * c.n_in, bytes.data() + r * row_bytes(DType::Q8_0, c.n_in),
                          c.n_in);
    WeightView w{.type = DType::Q8_0, .data = bytes.data(), .ne = {c.n_in, c.rows, 1, 1}};
    auto bias = c.bias ? f.rng.vec(c.rows, -0.01f, 0.01f) : std::vector<float>{};
    if (c.bias) bias[hi] = bias[lo];
    std::vector<float> want(c.rows);
    const auto xr = q8_roundtrip(x, c.n_in);
    f.cpu->matmul({.w = w, .bias = c.bias ? bias.data() : nullptr, .x = xr.data(), .y = want.data(), .n_tok = 1});
    const WeightView gw = on_gpu(*f.gpu, w);
    Dev dx = Dev::from(*f.gpu, x), db = Dev::from(*f.gpu, bias), dy = Dev::poisoned<float>(*f.gpu, c.rows),
        dy2 = Dev::poisoned<float>(*f.gpu, c.rows), dout = Dev::poisoned<int32_t>(*f.gpu, 1),
        dp = Dev::from(*f.gpu, std::vector<int32_t>{5}), dh = Dev::from(*f.gpu, std::vector<int32_t>(10, -1));
    const MatmulArgs mm{
        .w = gw, .bias = c.bias ? db.as<float>() : nullptr, .x = dx.as<float>(), .y = dy.as<float>(), .n_tok = 1};
    const ArgmaxArgs pick{.out = dout.as<int32_t>(), .pos = dp.as<int32_t>(), .history = dh.as<int32_t>()};
    for (int rep = 0; rep < 2; ++rep) f.gpu->output_head({.mm = mm, .pick = pick});
    const auto got = dy.get<float>(c.rows);
    expect_close(got, want, 2e-5, 1e-5, "head logits");
    EXPECT_EQ(got[lo], got[hi]);
    EXPECT_EQ(argmax_row(got), lo);
    EXPECT_EQ(dout.get<int32_t>(1)[0], lo);
    EXPECT_EQ(dp.get<int32_t>(1)[0], 7);
    const auto h = dh.get<int32_t>(10);
    EXPECT_EQ(h[6], lo);
    EXPECT_EQ(h[7], lo);
    MatmulArgs only = mm;
    only.y = dy2.as<float>();
    f.gpu->output_head({.mm = only});
    const auto got2 = dy2.get<float>(c.rows);
    EXPECT_EQ(0, std::memcmp(got2.data(), got.data(), got.size() * 4)) << "logits-only launch differs";
  }
}

// The output head with the model's final norm folded in (OutputHeadArgs::norm): the
// residual x is normed on the way (written to xn) and the logits match the q8x twin on the
// host's RMSNorm of x; the pick follows the logits the kernel wrote. n_in <= 3,072 takes
// the norm inside the one-row head's blocks (head_norms counts it; every block norms the
// same bits, block 0 writes them), 4,096 first as an rms_norm launch; 64 goes through the
// 4-lanes-a-row walk. Fresh random residuals of a scale unlike 1 and random norm weights,
// so an unnormed or doubly normed x fails.
TEST(CudaOps, OutputHeadNormMatchesTwin) {
  BRASS_REQUIRE_CUDA();
  Fix f(true);
  SEED_TRACE(f.rng);
  struct Case { int64_t n_in, rows; bool folded; };
  for (const Case c : {Case{2880, 201088, true}, Case{64, 96, true}, Case{1024, 1003, true}, Case{4096, 517, false}}) {
    SCOPED_TRACE(::testing::Message() << c.n_in << " x " << c.rows);
    const auto x = f.rng.vec(c.n_in, -20.f, 20.f);
    const auto nw = f.rng.vec(c.n_in, 0.25f, 2.f);
    const float eps = 1e-5f;
    const HostWeight w(f.rng, DType::Q8_0, c.n_in, c.rows);
    std::vector<float> xn(c.n_in), want(c.rows);
    f.cpu->rms_norm({.x = x.data(), .weight = nw.data(), .out = xn.data(), .n_rows = 1, .n = c.n_in, .eps = eps});
    const WeightView gw = on_gpu(*f.gpu, w.view);
    Dev dx = Dev::from(*f.gpu, x), dnw = Dev::from(*f.gpu, nw), dxn = Dev::poisoned<float>(*f.gpu, c.n_in),
        dy = Dev::poisoned<float>(*f.gpu, c.rows), dout = Dev::poisoned<int32_t>(*f.gpu, 1);
    const int64_t before = cuda_fusion_counts(*f.gpu).head_norms;
    for (int rep = 0; rep < 2; ++rep)
      f.gpu->output_head({.mm = {.w = gw, .x = dx.as<float>(), .y = dy.as<float>(), .n_tok = 1},
                          .pick = {.out = dout.as<int32_t>()},
                          .norm = dnw.as<float>(),
                          .eps = eps,
                          .xn = dxn.as<float>()});
    EXPECT_EQ(cuda_fusion_counts(*f.gpu).head_norms, before + (c.folded ? 2 : 0));
    // The twin on the kernel's own normed x: a sum order unlike the host's may move a code
    // of x's Q8_0 round trip across its rounding boundary (one code is ~1e-2 on a logit).
    const auto gxn = dxn.get<float>(c.n_in);
    expect_close(gxn, xn, 1e-5, 1e-6, "normed x");
    const auto xr = q8_roundtrip(gxn, c.n_in);
    f.cpu->matmul({.w = w.view, .x = xr.data(), .y = want.data(), .n_tok = 1});
    const auto got = dy.get<float>(c.rows);
    expect_close(got, want, 2e-5, 1e-5, "head logits");
    EXPECT_EQ(dout.get<int32_t>(1)[0], argmax_row(got));
  }
}

TEST(CudaOps, GraphReplaysWithNewInputs) {
  BRASS_REQUIRE_CUDA();
  Fix f(true);
  SEED_TRACE(f.rng);
  HostWeight w(f.rng, DType::Q8_0, 256, 77);
  const WeightView gw = on_gpu(*f.gpu, w.view);
  auto x1 = f.rng.vec(256), x2 = f.rng.vec(256);
  Dev dx = Dev::from(*f.gpu, x1), dy = Dev::poisoned<float>(*f.gpu, 77);
  auto g = f.gpu->capture([&] { f.gpu->matmul({.w = gw, .x = dx.as<float>(), .y = dy.as<float>(), .n_tok = 1}); });
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  for (const auto* xv : {&x1, &x2}) {
    f.gpu->upload(dx.as<float>(), xv->data(), 256 * 4);
    ASSERT_TRUE(g.value()->launch().is_ok());
    std::vector<float> want(77);
    const auto xr = q8_roundtrip(*xv, 256);
    f.cpu->matmul({.w = w.view, .x = xr.data(), .y = want.data(), .n_tok = 1});
    expect_close(dy.get<float>(77), want, 2e-5, 1e-5, "graph replay");
  }
}

// Batched decode through a graph re-targeted by Graph::update: KV store + attention of
// three one-token sequences recorded once, then updated for other sequences (other cache
// buffers, positions, ring and linear layers mixed in call order) and replayed: each round
// equals the reference on the same caches. An update with another batch size, or with a
// single sequence (whose launch carries its storage by value), is refused and leaves the
// graph usable.
TEST(CudaOps, GraphUpdateRetargetsBatchedDecode) {
  BRASS_REQUIRE_CUDA();
  Fix f;
  SEED_TRACE(f.rng);
  constexpr int64_t kHead = 8, kHeadKv = 2, kHd = 64, kSlots = 96, kSeqs = 6;
  constexpr int64_t kRow = kHeadKv * kHd;
  std::vector<std::vector<float>> hk(kSeqs), hv(kSeqs);
  std::vector<std::unique_ptr<Buffer>> gk(kSeqs), gv(kSeqs);
  std::vector<int32_t> len(kSeqs);
  for (int64_t s = 0; s < kSeqs; ++s) {  // random history of random length in every cache
    hk[s] = f.rng.vec(kSlots * kRow);
    hv[s] = f.rng.vec(kSlots * kRow);
    len[s] = f.rng.integer(0, 60);
    gk[s] = std::move(f.gpu->alloc(kSlots * kRow * 4)).value();
    gv[s] = std::move(f.gpu->alloc(kSlots * kRow * 4)).value();
    f.gpu->upload(gk[s]->data(), hk[s].data(), kSlots * kRow * 4);
    f.gpu->upload(gv[s]->data(), hv[s].data(), kSlots * kRow * 4);
  }
  const int32_t window = 16;  // sequences 0, 2, 4 stored as rings of kSlots slots
  auto seq_list = [&](const std::vector<int>& ids, bool host) {
    std::vector<AttnSeq> out;
    for (size_t i = 0; i < ids.size(); ++i) {
      const int s = ids[i];
      out.push_back({.tok0 = static_cast<int64_t>(i), .n_tok = 1, .pos0 = len[s],
                     .k = host ? static_cast<void*>(hk[s].data()) : gk[s]->data(),
                     .v = host ? static_cast<void*>(hv[s].data()) : gv[s]->data(),
                     .capacity = static_cast<int32_t>(kSlots), .ring = s % 2 == 0});
    }
    return out;
  };
  const float scale = 0.125f;
  auto sinks = f.rng.vec(kHead, -1, 2);
  Dev dsk = Dev::from(*f.gpu, sinks), dq = Dev::poisoned<float>(*f.gpu, 4 * kHead * kHd),
      dk = Dev::poisoned<float>(*f.gpu, 4 * kRow), dv = Dev::poisoned<float>(*f.gpu, 4 * kRow),
      dp = Dev::poisoned<int32_t>(*f.gpu, 4), dout = Dev::poisoned<float>(*f.gpu, 4 * kHead * kHd);
  std::vector<AttnSeq> cur;  // what the recording issues (device storage)
  auto record = [&] {
    f.gpu->kv_store({.k = dk.as<float>(), .v = dv.as<float>(), .kv_type = DType::F32, .n_head_kv = kHeadKv,
                     .head_dim = kHd, .seqs = cur, .pos = dp.as<int32_t>()});
    f.gpu->attention({.q = dq.as<float>(), .sinks = dsk.as<float>(), .out = dout.as<float>(), .kv_type = DType::F32,
                      .n_head = kHead, .n_head_kv = kHeadKv, .head_dim = kHd, .window = window, .scale = scale,
                      .seqs = cur, .pos = dp.as<int32_t>()});
  };
  // One round for `ids`: fresh q/k/v, positions = current lengths; the reference stores
  // and attends on the host caches (same arguments, host storage).
  std::unique_ptr<Graph> g;
  auto round = [&](const std::vector<int>& ids, bool capture) {
    const int64_t n = static_cast<int64_t>(ids.size());
    auto q = f.rng.vec(n * kHead * kHd, -2, 2), k = f.rng.vec(n * kRow), v = f.rng.vec(n * kRow);
    std::vector<int32_t> pos;
    for (int s : ids) pos.push_back(len[s]);
    f.gpu->upload(dq.as<float>(), q.data(), q.size() * 4);
    f.gpu->upload(dk.as<float>(), k.data(), k.size() * 4);
    f.gpu->upload(dv.as<float>(), v.data(), v.size() * 4);
    f.gpu->upload(dp.as<int32_t>(), pos.data(), pos.size() * 4);
    cur = seq_list(ids, false);
    if (capture) {
      auto r = f.gpu->capture(record);
      ASSERT_TRUE(r.is_ok()) << r.status().message();
      g = std::move(r).value();
    } else {
      const Status st = g->update(record);
      ASSERT_TRUE(st.is_ok()) << st.message();
    }
    ASSERT_TRUE(g->launch().is_ok());
    auto hs = seq_list(ids, true);
    std::vector<float> want(n * kHead * kHd);
    f.cpu->kv_store({.k = k.data(), .v = v.data(), .kv_type = DType::F32, .n_head_kv = kHeadKv, .head_dim = kHd,
                     .seqs = hs});
    f.cpu->attention({.q = q.data(), .sinks = sinks.data(), .out = want.data(), .kv_type = DType::F32,
                      .n_head = kHead, .n_head_kv = kHeadKv, .head_dim = kHd, .window = window, .scale = scale,
                      .seqs = hs});
    expect_close(dout.get<float>(want.size()), want, 2e-5, 2e-6, "graph round");
    for (int s : ids) ++len[s];
  };
  round({0, 1, 2}, true);
  round({5, 3, 4}, false);
  round({1, 0, 5}, false);
  // Refused: another batch size; one sequence (per-sequence launch arguments).
  cur = seq_list({0, 1, 2, 3}, false);
  EXPECT_FALSE(g->update(record).is_ok());
  cur = seq_list({4}, false);
  EXPECT_FALSE(g->update(record).is_ok());
  round({2, 4, 3}, false);
  // A graph recorded with a per-sequence launch cannot be updated at all.
  cur = seq_list({1}, false);
  auto single = f.gpu->capture(record);
  ASSERT_TRUE(single.is_ok()) << single.status().message();
  cur = seq_list({2}, false);
  EXPECT_FALSE(single.value()->update(record).is_ok());
  f.gpu->synchronize();
}

}  // namespace
}  // namespace brass::backend
