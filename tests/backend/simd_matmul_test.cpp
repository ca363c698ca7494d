// SIMD kernel levels of the CPU backend (backend/cpu/simd_kernels.h) against
// independent double-precision loops over the reference dequantization:
// - Q8_0/MXFP4 matmul at every supported level vs the exact product, within the error
//   bound of the int8 activation quantization computed from the data itself:
//   sum_b (amax_b / 254) * sum_{i in b} |w_i| (+ f32 accumulation slack);
// - the same against a scalar emulation of the int8 scheme (quantize x in blocks of 32
//   with round-half-even, exact integer dots, f32 scale) with a tight tolerance, so a
//   kernel bug far below the quantization bound is caught too;
// - MoE at every level vs a naive double MoE on emulated int8 activations;
// - results independent of batch shape and thread count (bit for bit);
// - f32 matmul/attention paths of the levels vs double loops.
// Random inputs from a fresh seed (printed on failure), odd sizes.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/simd_backend.h"
#include "backend/cpu/simd_kernels.h"
#include "quant/quant.h"
#include "test_rng.h"

namespace brass::backend {
namespace {

using cpu::KernelLevel;

using testing::Rng;

std::vector<KernelLevel> simd_levels() {
  std::vector<KernelLevel> v;
  for (KernelLevel l : {KernelLevel::Avx2, KernelLevel::Avx512})
    if (cpu::kernel_level_supported(l)) v.push_back(l);
  return v;
}

struct QWeight {
  DType type;
  int64_t n_in, rows;
  std::vector<uint8_t> bytes;
  std::vector<float> deq;  // (rows, n_in)
};

QWeight make_qweight(Rng& rng, DType type, int64_t n_in, int64_t rows) {
  QWeight w{type, n_in, rows, {}, {}};
  const int64_t rb = row_bytes(type, n_in);
  w.bytes.resize(rb * rows);
  w.deq.resize(n_in * rows);
  for (int64_t r = 0; r < rows; ++r) {
    // vary the row scale over a few octaves so MXFP4 exponents differ between blocks
    std::vector<float> src = rng.vec(n_in, -1, 1);
    for (int64_t i = 0; i < n_in; ++i) src[i] *= std::ldexp(1.0f, rng.integer(-3, 2));
    quant::quantize_row(type, src.data(), w.bytes.data() + r * rb, n_in);
    quant::dequantize_row(type, w.bytes.data() + r * rb, w.deq.data() + r * n_in, n_in);
  }
  return w;
}

WeightView view(const QWeight& w, int64_t n_mat = 1) {
  WeightView v;
  v.type = w.type;
  v.data = w.bytes.data();
  v.ne[0] = w.n_in;
  v.ne[1] = w.rows / n_mat;
  v.ne[2] = n_mat;
  return v;
}

// Scalar emulation of the activation quantization: d = amax / 127, q = rne(x / d).
void emulate_q8(const float* x, int64_t n, std::vector<float>& xq) {
  xq.resize(n);
  for (int64_t b = 0; b < n / 32; ++b) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b * 32 + i]));
    const float d = amax / 127.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    for (int i = 0; i < 32; ++i) {
      float v = std::nearbyint(std::min(127.0f, std::max(-127.0f, x[b * 32 + i] * id)));
      xq[b * 32 + i] = v * d;
    }
  }
}

void check_matmul(Rng& rng, KernelLevel level, DType type, int64_t n_in, int64_t n_out, int64_t n_tok, int threads) {
  SCOPED_TRACE(::testing::Message() << cpu::kernel_level_name(level) << " " << dtype_name(type) << " n_in "
                                    << n_in << " n_out " << n_out << " n_tok " << n_tok);
  QWeight w = make_qweight(rng, type, n_in, n_out);
  std::vector<float> x = rng.vec(n_tok * n_in, -2, 2);
  // one token with a wide dynamic range inside blocks (small values lose most)
  for (int64_t i = 0; i < n_in; ++i) x[i] = (i % 7 == 0) ? rng.uni(-50, 50) : rng.uni(-0.01f, 0.01f);
  std::vector<float> bias = rng.vec(n_out);
  std::vector<float> y(n_tok * n_out, NAN);
  auto be = cpu::make_cpu_backend_level(threads, level);
  be->matmul({.w = view(w), .bias = bias.data(), .x = x.data(), .y = y.data(), .n_tok = n_tok});
  std::vector<float> xq;
  int bad = 0;
  for (int64_t t = 0; t < n_tok && bad < 5; ++t) {
    const float* xt = x.data() + t * n_in;
    emulate_q8(xt, n_in, xq);
    for (int64_t r = 0; r < n_out && bad < 5; ++r) {
      const float* wr = w.deq.data() + r * n_in;
      double exact = bias[r], emu = bias[r], bound = 0, mag = 0;
      for (int64_t b = 0; b < n_in / 32; ++b) {
        double amax = 0, wsum = 0;
        for (int i = 0; i < 32; ++i) {
          const int64_t k = b * 32 + i;
          exact += static_cast<double>(wr[k]) * xt[k];
          emu += static_cast<double>(wr[k]) * xq[k];
          mag += std::fabs(static_cast<double>(wr[k]) * xt[k]);
          amax = std::max(amax, static_cast<double>(std::fabs(xt[k])));
          wsum += std::fabs(wr[k]);
        }
        bound += amax / 254.0 * wsum;
      }
      const double got = y[t * n_out + r];
      const double slack = 1e-5 * (mag + bound) + 1e-6 * std::fabs(bias[r]) + 1e-30;
      const double tol_exact = 1.01 * bound + slack;
      const double tol_emu = slack;
      if (!(std::fabs(got - exact) <= tol_exact) || !(std::fabs(got - emu) <= tol_emu)) {
        ++bad;
        ADD_FAILURE() << "t " << t << " r " << r << ": got " << got << " exact " << exact << " (tol " << tol_exact
                      << ") emulated " << emu << " (tol " << tol_emu << ")";
      }
    }
  }
}

TEST(SimdMatmul, QuantizedMatchesExactWithinActivationBound) {
  Rng rng;
  SEED_TRACE(rng);
  const std::vector<KernelLevel> levels = simd_levels();
  if (levels.empty()) GTEST_SKIP() << "no SIMD level on this processor";
  struct Shape {
    int64_t n_in, n_out, n_tok;
  };
  const Shape shapes[] = {{32, 1, 1},  {64, 17, 3},  {32, 2881, 1}, {64, 2881, 70}, {2880, 17, 70},
                          {2880, 1, 3}, {2880, 33, 17}, {96, 5, 2},  {2880, 2881, 1}};
  for (KernelLevel l : levels)
    for (DType t : {DType::Q8_0, DType::MXFP4})
      for (const Shape& s : shapes) check_matmul(rng, l, t, s.n_in, s.n_out, s.n_tok, rng.integer(1, 3));
}

// Same inputs through different batch shapes and thread counts: bit-identical rows.
TEST(SimdMatmul, IndependentOfBatchShapeAndThreads) {
  Rng rng;
  SEED_TRACE(rng);
  for (KernelLevel l : simd_levels()) {
    for (DType type : {DType::Q8_0, DType::MXFP4}) {
      const int64_t n_in = 320, n_out = 131, n_tok = 70;
      QWeight w = make_qweight(rng, type, n_in, n_out);
      std::vector<float> x = rng.vec(n_tok * n_in, -3, 3);
      std::vector<float> all(n_tok * n_out), one(n_out);
      auto be1 = cpu::make_cpu_backend_level(1, l), be3 = cpu::make_cpu_backend_level(3, l);
      be3->matmul({.w = view(w), .bias = nullptr, .x = x.data(), .y = all.data(), .n_tok = n_tok});
      for (int64_t t : {int64_t{0}, int64_t{5}, int64_t{69}}) {
        be1->matmul({.w = view(w), .bias = nullptr, .x = x.data() + t * n_in, .y = one.data(), .n_tok = 1});
        for (int64_t r = 0; r < n_out; ++r)
          ASSERT_EQ(one[r], all[t * n_out + r]) << cpu::kernel_level_name(l) << " t " << t << " r " << r;
      }
    }
  }
}

// MoE vs a naive double loop that quantizes x and the SwiGLU activations the same way.
TEST(SimdMoe, MatchesNaiveEmulation) {
  Rng rng;
  SEED_TRACE(rng);
  for (KernelLevel l : simd_levels()) {
    for (DType type : {DType::MXFP4, DType::Q8_0}) {
      SCOPED_TRACE(::testing::Message() << cpu::kernel_level_name(l) << " " << dtype_name(type));
      const int64_t n_embd = 96, n_ff = 64, n_expert = 5, k = 3, n_tok = rng.integer(1, 9);
      QWeight gate = make_qweight(rng, type, n_embd, n_ff * n_expert);
      QWeight up = make_qweight(rng, type, n_embd, n_ff * n_expert);
      QWeight down = make_qweight(rng, type, n_ff, n_embd * n_expert);
      std::vector<float> gb = rng.vec(n_expert * n_ff), ub = rng.vec(n_expert * n_ff), db = rng.vec(n_expert * n_embd);
      std::vector<float> x = rng.vec(n_tok * n_embd, -2, 2);
      std::vector<int32_t> ids(n_tok * k);
      std::vector<float> wts(n_tok * k);
      for (int64_t t = 0; t < n_tok; ++t) {
        std::vector<int32_t> perm = {0, 1, 2, 3, 4};
        std::shuffle(perm.begin(), perm.end(), rng.gen);
        for (int64_t j = 0; j < k; ++j) {
          ids[t * k + j] = perm[j];
          wts[t * k + j] = rng.uni(0.1f, 1.0f);
        }
      }
      const float alpha = 1.702f, limit = 7.0f;
      std::vector<float> out(n_tok * n_embd, NAN);
      auto be = cpu::make_cpu_backend_level(rng.integer(1, 3), l);
      be->moe({.x = x.data(), .ids = ids.data(), .weights = wts.data(), .gate = view(gate, n_expert),
               .up = view(up, n_expert), .down = view(down, n_expert), .gate_bias = gb.data(),
               .up_bias = ub.data(), .down_bias = db.data(), .out = out.data(), .n_tok = n_tok, .k = k,
               .alpha = alpha, .limit = limit});
      std::vector<float> xq, act(n_ff), aq;
      for (int64_t t = 0; t < n_tok; ++t) {
        emulate_q8(x.data() + t * n_embd, n_embd, xq);
        std::vector<double> want(n_embd, 0.0), mag(n_embd, 0.0);
        for (int64_t j = 0; j < k; ++j) {
          const int64_t e = ids[t * k + j];
          for (int64_t r = 0; r < n_ff; ++r) {
            double g = gb[e * n_ff + r], u = ub[e * n_ff + r];
            for (int64_t i = 0; i < n_embd; ++i) {
              g += static_cast<double>(gate.deq[(e * n_ff + r) * n_embd + i]) * xq[i];
              u += static_cast<double>(up.deq[(e * n_ff + r) * n_embd + i]) * xq[i];
            }
            g = std::min(g, static_cast<double>(limit));
            u = std::max(-static_cast<double>(limit), std::min(static_cast<double>(limit), u));
            act[r] = static_cast<float>(g / (1.0 + std::exp(-alpha * g)) * (u + 1.0));
          }
          emulate_q8(act.data(), n_ff, aq);
          for (int64_t r = 0; r < n_embd; ++r) {
            double s = db[e * n_embd + r], m = std::fabs(db[e * n_embd + r]);
            for (int64_t i = 0; i < n_ff; ++i) {
              s += static_cast<double>(down.deq[(e * n_embd + r) * n_ff + i]) * aq[i];
              m += std::fabs(static_cast<double>(down.deq[(e * n_embd + r) * n_ff + i]) * act[i]);
            }
            want[r] += wts[t * k + j] * s;
            mag[r] += wts[t * k + j] * m;
          }
        }
        // f32 accumulation, plus an occasional one-step flip of an activation's int8
        // rounding (its f32 value differs from the double one in the last bits)
        for (int64_t r = 0; r < n_embd; ++r)
          ASSERT_NEAR(out[t * n_embd + r], want[r], 2e-3 * mag[r] + 1e-5) << "t " << t << " r " << r;
      }
    }
  }
}

// The f32 paths of the levels (f32 weights, attention scores) vs double loops.
TEST(SimdF32, MatmulF32AndAttention) {
  Rng rng;
  SEED_TRACE(rng);
  for (KernelLevel l : simd_levels()) {
    SCOPED_TRACE(cpu::kernel_level_name(l));
    auto be = cpu::make_cpu_backend_level(2, l);
    const int64_t n_in = rng.integer(1, 100), n_out = rng.integer(1, 40), n_tok = rng.integer(1, 5);
    std::vector<float> w = rng.vec(n_in * n_out), x = rng.vec(n_tok * n_in), y(n_tok * n_out);
    WeightView v;
    v.type = DType::F32;
    v.data = w.data();
    v.ne[0] = n_in;
    v.ne[1] = n_out;
    be->matmul({.w = v, .bias = nullptr, .x = x.data(), .y = y.data(), .n_tok = n_tok});
    for (int64_t t = 0; t < n_tok; ++t)
      for (int64_t r = 0; r < n_out; ++r) {
        double s = 0, m = 0;
        for (int64_t i = 0; i < n_in; ++i) {
          s += static_cast<double>(w[r * n_in + i]) * x[t * n_in + i];
          m += std::fabs(static_cast<double>(w[r * n_in + i]) * x[t * n_in + i]);
        }
        ASSERT_NEAR(y[t * n_out + r], s, 1e-6 * m + 1e-7);
      }

    // attention, one sequence, f32 cache, GQA 4 heads / 2 kv heads, head_dim 64
    const int64_t nh = 4, nkv = 2, d = 64, n = rng.integer(1, 40);
    std::vector<float> q = rng.vec(n * nh * d), kc = rng.vec(n * nkv * d), vc = rng.vec(n * nkv * d);
    std::vector<float> sinks = rng.vec(nh), out(n * nh * d);
    AttnSeq s{.tok0 = 0, .n_tok = n, .pos0 = 0, .k = kc.data(), .v = vc.data(), .capacity = static_cast<int32_t>(n)};
    const float scale = 0.125f;
    be->attention({.q = q.data(), .sinks = sinks.data(), .out = out.data(), .kv_type = DType::F32, .n_head = nh,
                   .n_head_kv = nkv, .head_dim = d, .window = 0, .scale = scale, .seqs = {&s, 1}});
    for (int64_t i = 0; i < n; ++i)
      for (int64_t h = 0; h < nh; ++h) {
        const int64_t g = h / (nh / nkv);
        std::vector<double> sc(i + 1);
        double m = sinks[h];
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < d; ++e) dot += static_cast<double>(q[(i * nh + h) * d + e]) * kc[(j * nkv + g) * d + e];
          sc[j] = dot * scale;
          m = std::max(m, sc[j]);
        }
        double den = std::exp(sinks[h] - m);
        for (double& v2 : sc) den += (v2 = std::exp(v2 - m));
        for (int64_t e = 0; e < d; ++e) {
          double o = 0;
          for (int64_t j = 0; j <= i; ++j) o += sc[j] / den * vc[(j * nkv + g) * d + e];
          ASSERT_NEAR(out[(i * nh + h) * d + e], o, 1e-5) << "i " << i << " h " << h << " e " << e;
        }
      }
  }
}

// E8M0 exponent bytes 0..247 (subnormal scales e = 0, 1 included; from 248 up a row sum
// of 128 values up to 12 * 2^(e-128) can overflow f32), against the reference
// dequantizer; x = 1 quantizes to d = 1/127, q = 127.
TEST(SimdMatmul, Mxfp4AllExponentBytes) {
  Rng rng;
  SEED_TRACE(rng);
  const int64_t n_in = 32 * 4;
  for (KernelLevel l : simd_levels()) {
    auto be = cpu::make_cpu_backend_level(1, l);
    for (int e0 = 0; e0 < 248; e0 += 4) {
      std::vector<uint8_t> row(17 * 4);
      for (int b = 0; b < 4; ++b) {
        row[b * 17] = static_cast<uint8_t>(e0 + b);
        for (int j = 0; j < 16; ++j) row[b * 17 + 1 + j] = static_cast<uint8_t>(rng.integer(0, 255));
      }
      std::vector<float> deq(n_in), x(n_in, 1.0f), y(1);
      quant::dequantize_row(DType::MXFP4, row.data(), deq.data(), n_in);
      WeightView v;
      v.type = DType::MXFP4;
      v.data = row.data();
      v.ne[0] = n_in;
      v.ne[1] = 1;
      be->matmul({.w = v, .bias = nullptr, .x = x.data(), .y = y.data(), .n_tok = 1});
      double want = 0, mag = 0;
      for (int64_t i = 0; i < n_in; ++i) {
        want += static_cast<double>(deq[i]) * (127.0f * (1.0f / 127.0f));
        mag += std::fabs(static_cast<double>(deq[i]));
      }
      // f32 products 2^(e-128) * d_x lose bits only when subnormal (e < 2 + 7): abs slack
      ASSERT_NEAR(y[0], want, 1e-6 * mag + 1e-43) << cpu::kernel_level_name(l) << " e " << e0;
    }
  }
}

TEST(SimdDispatch, LevelsAndNames) {
  EXPECT_TRUE(cpu::kernel_level_supported(KernelLevel::Ref));
  const KernelLevel best = cpu::best_kernel_level();
  EXPECT_TRUE(cpu::kernel_level_supported(best));
  EXPECT_EQ(cpu::kernel_table(KernelLevel::Ref), nullptr);
  for (KernelLevel l : simd_levels()) {
    ASSERT_NE(cpu::kernel_table(l), nullptr);
    EXPECT_EQ(cpu::kernel_table(l)->level, l);
    EXPECT_EQ(cpu::make_cpu_backend_level(1, l)->name(), std::string("cpu-") + cpu::kernel_level_name(l));
  }
  EXPECT_EQ(cpu::make_cpu_backend_level(1, KernelLevel::Ref)->name(), "cpu-ref");
}

}  // namespace
}  // namespace brass::backend
