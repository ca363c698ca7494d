// CPU reference backend ops against naive, differently written implementations in
// this file: double-precision loops, full score matrices for attention, complex-number
// rotation for RoPE, sort-based top-k for the router. Random inputs from a fresh seed
// (printed on failure), odd sizes, window boundaries, dominating sinks, router ties,
// SwiGLU clamps; every op also runs with 1 and 3 threads and must agree bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <complex>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/simd_backend.h"
#include "backend/cpu/thread_pool.h"
#include "core/half.h"
#include "quant/quant.h"
#include "test_rng.h"

namespace brass::backend {
namespace {

using testing::Rng;

// A weight matrix stored as `type` plus its exact f32 expansion (the reference's view).
struct TestWeight {
  DType type;
  std::vector<uint8_t> bytes;
  std::vector<float> deq;  // (rows, n_in)
  int64_t ne[3];
  WeightView view() const {
    WeightView w;
    w.type = type;
    w.data = bytes.data();
    w.ne[0] = ne[0];
    w.ne[1] = ne[1];
    w.ne[2] = ne[2];
    return w;
  }
};

TestWeight make_weight(Rng& rng, DType type, int64_t n_in, int64_t n_out, int64_t n_mat = 1, float amp = 1) {
  TestWeight t;
  t.type = type;
  t.ne[0] = n_in;
  t.ne[1] = n_out;
  t.ne[2] = n_mat;
  const int64_t rows = n_out * n_mat, rb = row_bytes(type, n_in);
  t.bytes.resize(rows * rb);
  t.deq.resize(rows * n_in);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> src = rng.vec(n_in, -amp, amp);
    quant::quantize_row(type, src.data(), t.bytes.data() + r * rb, n_in);
    quant::dequantize_row(type, t.bytes.data() + r * rb, t.deq.data() + r * n_in, n_in);
  }
  return t;
}

// |a - b| <= atol + rtol * |b| elementwise.
void expect_close(const std::vector<float>& got, const std::vector<double>& want, double atol, double rtol) {
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i) {
    if (!(std::fabs(got[i] - want[i]) <= atol + rtol * std::fabs(want[i]))) {
      ADD_FAILURE() << "index " << i << ": got " << got[i] << " want " << want[i];
      ++bad;
    }
  }
}

class CpuOps : public ::testing::TestWithParam<int> {
 protected:
  // The reference level explicitly (make_cpu_backend picks the fastest SIMD level, whose
  // int8 activations are checked by simd_matmul_test.cpp against their own bound).
  std::unique_ptr<Backend> be = cpu::make_cpu_backend_level(GetParam(), cpu::KernelLevel::Ref);
};

TEST(ThreadPool, EveryTaskRunsOnceWithValidThreadIndex) {
  for (int n_threads : {1, 2, 5}) {
    cpu::ThreadPool pool(n_threads);
    for (int64_t n_tasks : {0, 1, 7, 1000}) {
      std::vector<int> hits(n_tasks, 0);
      std::vector<int> bad(n_threads, 0);
      pool.parallel_for(n_tasks, [&](int64_t t, int ti) {
        hits[t]++;
        if (ti < 0 || ti >= n_threads) bad[0] = 1;
      });
      for (int64_t t = 0; t < n_tasks; ++t) EXPECT_EQ(hits[t], 1) << t;
      EXPECT_EQ(bad[0], 0);
    }
  }
}

// The pool gives each thread a contiguous slice of the tasks; a thread that finishes
// its own slice must take the rest of a stalled thread's slice. Here the first task a
// non-caller thread runs blocks until all other tasks are done (or 5 s pass): only
// stealing lets them finish.
TEST(ThreadPool, IdleThreadStealsFromStalledSlice) {
  cpu::ThreadPool pool(2);
  const int64_t n_tasks = 200;
  std::vector<std::atomic<int>> hits(n_tasks);
  std::atomic<int64_t> done{0};
  std::atomic<bool> blocked_once{false}, timed_out{false};
  pool.parallel_for(n_tasks, [&](int64_t t, int ti) {
    if (ti != 0 && !blocked_once.exchange(true)) {
      const auto t0 = std::chrono::steady_clock::now();
      while (done.load() < n_tasks - 1) {
        if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(5)) {
          timed_out = true;
          break;
        }
        std::this_thread::yield();
      }
    }
    hits[t]++;
    done++;
  });
  EXPECT_FALSE(timed_out.load()) << "the stalled thread's slice was not taken over";
  for (int64_t t = 0; t < n_tasks; ++t) EXPECT_EQ(hits[t].load(), 1) << t;
}

TEST_P(CpuOps, MatmulAllTypesOddSizes) {
  Rng rng;
  SEED_TRACE(rng);
  for (DType type : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::MXFP4}) {
    for (int64_t n_tok : {1, 17, 70}) {
      const int64_t n_in = 96, n_out = 37;
      SCOPED_TRACE(::testing::Message() << dtype_name(type) << " n_tok " << n_tok);
      TestWeight w = make_weight(rng, type, n_in, n_out);
      std::vector<float> x = rng.vec(n_tok * n_in), bias = rng.vec(n_out), y(n_tok * n_out);
      be->matmul({.w = w.view(), .bias = bias.data(), .x = x.data(), .y = y.data(), .n_tok = n_tok});
      std::vector<double> want(n_tok * n_out);
      for (int64_t t = 0; t < n_tok; ++t)
        for (int64_t o = 0; o < n_out; ++o) {
          double s = bias[o];
          for (int64_t i = 0; i < n_in; ++i) s += static_cast<double>(x[t * n_in + i]) * w.deq[o * n_in + i];
          want[t * n_out + o] = s;
        }
      // f32 accumulation of 96 products of magnitude <= ~1: error << 1e-4.
      expect_close(y, want, 1e-4, 1e-5);
    }
  }
}

TEST_P(CpuOps, MatmulWithoutBias) {
  Rng rng;
  SEED_TRACE(rng);
  TestWeight w = make_weight(rng, DType::F32, 32, 5);
  std::vector<float> x = rng.vec(3 * 32), y(3 * 5);
  be->matmul({.w = w.view(), .bias = nullptr, .x = x.data(), .y = y.data(), .n_tok = 3});
  std::vector<double> want(15);
  for (int t = 0; t < 3; ++t)
    for (int o = 0; o < 5; ++o)
      for (int i = 0; i < 32; ++i) want[t * 5 + o] += static_cast<double>(x[t * 32 + i]) * w.deq[o * 32 + i];
  expect_close(y, want, 1e-5, 1e-5);
}

TEST_P(CpuOps, EmbedGathersDequantizedRows) {
  Rng rng;
  SEED_TRACE(rng);
  TestWeight table = make_weight(rng, DType::Q8_0, 64, 50);
  std::vector<int32_t> tokens = {0, 49, 7, 7, 23};
  std::vector<float> out(tokens.size() * 64);
  be->embed({.table = table.view(), .tokens = tokens.data(), .n_tok = 5, .out = out.data()});
  for (size_t t = 0; t < tokens.size(); ++t)
    for (int i = 0; i < 64; ++i) EXPECT_EQ(out[t * 64 + i], table.deq[tokens[t] * 64 + i]);
}

TEST_P(CpuOps, RmsNorm) {
  Rng rng;
  SEED_TRACE(rng);
  const int64_t rows = 7, n = 2880;
  std::vector<float> x = rng.vec(rows * n, -3, 3), w = rng.vec(n), out(rows * n);
  be->rms_norm({.x = x.data(), .weight = w.data(), .out = out.data(), .n_rows = rows, .n = n, .eps = 1e-5f});
  std::vector<double> want(rows * n);
  for (int64_t r = 0; r < rows; ++r) {
    double ms = 0;
    for (int64_t i = 0; i < n; ++i) ms += std::pow(x[r * n + i], 2);
    ms /= n;
    for (int64_t i = 0; i < n; ++i) want[r * n + i] = x[r * n + i] / std::sqrt(ms + 1e-5) * w[i];
  }
  expect_close(out, want, 1e-6, 1e-5);
  // In place.
  be->rms_norm({.x = x.data(), .weight = w.data(), .out = x.data(), .n_rows = rows, .n = n, .eps = 1e-5f});
  EXPECT_EQ(x, out);
}

TEST_P(CpuOps, RopeIsAComplexRotationOfHalfSplitPairs) {
  Rng rng;
  SEED_TRACE(rng);
  const int64_t n_tok = 17, n_heads = 3, d = 64, half = d / 2;
  std::vector<float> x = rng.vec(n_tok * n_heads * d), orig = x;
  std::vector<float> inv_freq(half);
  for (auto& f : inv_freq) f = std::exp(rng.uni(-12, 0));
  std::vector<int32_t> pos(n_tok);
  for (auto& p : pos) p = rng.integer(0, 5000);
  const float mscale = 1.3466f;
  be->rope({.x = x.data(), .pos = pos.data(), .inv_freq = inv_freq.data(), .mscale = mscale, .n_tok = n_tok,
            .n_heads = n_heads, .head_dim = d});
  std::vector<double> want(x.size());
  for (int64_t t = 0; t < n_tok; ++t)
    for (int64_t h = 0; h < n_heads; ++h)
      for (int64_t j = 0; j < half; ++j) {
        const float* o = &orig[(t * n_heads + h) * d];
        // angle rounded to f32 as the op (and torch / ggml) computes it
        const double ang = static_cast<float>(static_cast<float>(pos[t]) * inv_freq[j]);
        std::complex<double> z(o[j], o[j + half]);
        z *= std::polar(static_cast<double>(mscale), ang);
        want[(t * n_heads + h) * d + j] = z.real();
        want[(t * n_heads + h) * d + j + half] = z.imag();
      }
  expect_close(x, want, 2e-6, 2e-6);
}

// ---- attention ----

struct AttnCase {
  int64_t n_head, n_head_kv, d;
  int32_t window;     // 0 = full
  DType kv_type;
  bool ring;
  bool sinks;
  float sink_bias;    // added to every sink (a large value makes the sink dominate)
};

// One sequence: history positions [0, pos0) already cached, then a chunk of n_tok.
void run_attention_case(Backend& be, Rng& rng, const AttnCase& c, std::vector<std::pair<int32_t, int64_t>> seqs_spec) {
  // seqs_spec: (pos0, n_tok) per sequence; all sequences run in ONE attention call.
  const int64_t n_rep = c.n_head / c.n_head_kv, kv_row = c.n_head_kv * c.d;
  const int64_t elt = c.kv_type == DType::F16 ? 2 : 4;
  std::vector<AttnSeq> seqs;
  std::vector<std::vector<uint8_t>> kst(seqs_spec.size()), vst(seqs_spec.size());
  std::vector<std::vector<float>> kall(seqs_spec.size()), vall(seqs_spec.size());  // (positions, kv_row), as stored
  int64_t total_tok = 0;
  for (auto& [pos0, n_tok] : seqs_spec) total_tok += n_tok;
  std::vector<float> q = rng.vec(total_tok * c.n_head * c.d, -2, 2);
  std::vector<float> sinks = rng.vec(c.n_head, -2, 2);
  for (auto& s : sinks) s += c.sink_bias;
  int64_t tok0 = 0;
  for (size_t si = 0; si < seqs_spec.size(); ++si) {
    const auto [pos0, n_tok] = seqs_spec[si];
    const int64_t n_pos = pos0 + n_tok;
    const int32_t cap = c.ring ? static_cast<int32_t>(c.window + n_tok - 1) : static_cast<int32_t>(n_pos);
    kst[si].assign(static_cast<size_t>(cap) * kv_row * elt, 0xAB);  // garbage in unwritten slots
    vst[si].assign(static_cast<size_t>(cap) * kv_row * elt, 0xCD);
    kall[si] = rng.vec(n_pos * kv_row, -2, 2);
    vall[si] = rng.vec(n_pos * kv_row, -2, 2);
    if (c.kv_type == DType::F16) {
      for (auto& f : kall[si]) f = f16_to_f32(f32_to_f16(f));
      for (auto& f : vall[si]) f = f16_to_f32(f32_to_f16(f));
    }
    // Store history in chunks of n_tok (what the ring is sized for), then the chunk.
    AttnSeq a{.tok0 = 0, .n_tok = 0, .pos0 = 0, .k = kst[si].data(), .v = vst[si].data(), .capacity = cap, .ring = c.ring};
    for (int64_t p = 0; p < n_pos; p += n_tok) {
      AttnSeq h = a;
      h.pos0 = static_cast<int32_t>(p);
      h.n_tok = std::min<int64_t>(n_tok, n_pos - p);
      be.kv_store({.k = kall[si].data() + p * kv_row, .v = vall[si].data() + p * kv_row, .kv_type = c.kv_type,
                   .n_head_kv = c.n_head_kv, .head_dim = c.d, .seqs = std::span<const AttnSeq>(&h, 1)});
    }
    a.tok0 = tok0;
    a.n_tok = n_tok;
    a.pos0 = pos0;
    seqs.push_back(a);
    tok0 += n_tok;
  }
  std::vector<float> out(total_tok * c.n_head * c.d);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.d));
  be.attention({.q = q.data(), .sinks = c.sinks ? sinks.data() : nullptr, .out = out.data(), .kv_type = c.kv_type,
                .n_head = c.n_head, .n_head_kv = c.n_head_kv, .head_dim = c.d, .window = c.window,
                .scale = scale, .seqs = seqs});

  // Reference: full score matrix (n_tok x n_pos [+ sink column]) with an explicit mask.
  std::vector<double> want(out.size());
  for (size_t si = 0; si < seqs_spec.size(); ++si) {
    const auto [pos0, n_tok] = seqs_spec[si];
    const int64_t n_pos = pos0 + n_tok;
    for (int64_t h = 0; h < c.n_head; ++h) {
      const int64_t g = h / n_rep;
      for (int64_t i = 0; i < n_tok; ++i) {
        const int64_t p = pos0 + i, row = seqs[si].tok0 + i;
        std::vector<double> s(n_pos + 1, -INFINITY);
        for (int64_t j = 0; j < n_pos; ++j) {
          const bool masked = j > p || (c.window > 0 && p - j >= c.window);
          if (masked) continue;
          double dot = 0;
          for (int64_t e = 0; e < c.d; ++e)
            dot += static_cast<double>(q[(row * c.n_head + h) * c.d + e]) * kall[si][j * kv_row + g * c.d + e];
          s[j] = dot * scale;
        }
        if (c.sinks) s[n_pos] = sinks[h];
        const double m = *std::max_element(s.begin(), s.end());
        double den = 0;
        for (auto& v : s) den += (v = std::exp(v - m));
        for (int64_t e = 0; e < c.d; ++e) {
          double acc = 0;
          for (int64_t j = 0; j < n_pos; ++j) acc += s[j] / den * vall[si][j * kv_row + g * c.d + e];
          want[(row * c.n_head + h) * c.d + e] = acc;
        }
      }
    }
  }
  expect_close(out, want, 2e-5, 1e-4);
}

TEST_P(CpuOps, AttentionFullCausalWithSinks) {
  Rng rng;
  SEED_TRACE(rng);
  AttnCase c{.n_head = 8, .n_head_kv = 2, .d = 16, .window = 0, .kv_type = DType::F32, .ring = false, .sinks = true, .sink_bias = 0};
  run_attention_case(*be, rng, c, {{0, 1}});
  run_attention_case(*be, rng, c, {{0, 17}});
  run_attention_case(*be, rng, c, {{23, 17}, {0, 1}, {40, 1}});  // three sequences, one call
}

TEST_P(CpuOps, AttentionSlidingWindowBoundaries) {
  Rng rng;
  SEED_TRACE(rng);
  for (bool ring : {false, true}) {
    AttnCase c{.n_head = 4, .n_head_kv = 4, .d = 8, .window = 8, .kv_type = DType::F32, .ring = ring, .sinks = true, .sink_bias = 0};
    SCOPED_TRACE(ring ? "ring" : "linear");
    // queries at positions window-1, window, window+1 and a chunk spanning them
    run_attention_case(*be, rng, c, {{7, 1}});
    run_attention_case(*be, rng, c, {{8, 1}});
    run_attention_case(*be, rng, c, {{9, 1}});
    run_attention_case(*be, rng, c, {{0, 17}});
    run_attention_case(*be, rng, c, {{30, 5}, {3, 1}});
  }
}

TEST_P(CpuOps, AttentionF16CacheNoSinksAndDominantSink) {
  Rng rng;
  SEED_TRACE(rng);
  AttnCase c{.n_head = 6, .n_head_kv = 3, .d = 32, .window = 0, .kv_type = DType::F16, .ring = false, .sinks = false, .sink_bias = 0};
  run_attention_case(*be, rng, c, {{11, 6}});
  c.sinks = true;
  c.sink_bias = 30;  // the sink takes ~all the mass: outputs ~0, still must match
  run_attention_case(*be, rng, c, {{11, 6}});
}

TEST_P(CpuOps, AttentionGqaIsGroupedNotModulo) {
  // kv head 0 holds values 1, kv head 1 values -1: with grouping, heads 0,1 -> +1, heads 2,3 -> -1.
  const int64_t d = 4;
  std::vector<float> k(2 * d, 0.5f), v(2 * d);
  for (int e = 0; e < d; ++e) {
    v[e] = 1;
    v[d + e] = -1;
  }
  std::vector<float> q(4 * d, 0.1f), out(4 * d);
  AttnSeq s{.tok0 = 0, .n_tok = 1, .pos0 = 0, .k = k.data(), .v = v.data(), .capacity = 1, .ring = false};
  be->attention({.q = q.data(), .sinks = nullptr, .out = out.data(), .kv_type = DType::F32, .n_head = 4,
                 .n_head_kv = 2, .head_dim = d, .window = 0, .scale = 0.5f, .seqs = std::span<const AttnSeq>(&s, 1)});
  for (int h = 0; h < 4; ++h)
    for (int e = 0; e < d; ++e) EXPECT_EQ(out[h * d + e], h < 2 ? 1.0f : -1.0f) << h;
}

// ---- router ----

TEST_P(CpuOps, RouterTopKSoftmaxWithTies) {
  Rng rng;
  SEED_TRACE(rng);
  const int64_t n_tok = 33, n_expert = 32, k = 4;
  std::vector<float> logits(n_tok * n_expert);
  for (int64_t t = 0; t < n_tok; ++t)
    for (int64_t e = 0; e < n_expert; ++e)
      // odd tokens: few distinct values, so ties are everywhere
      logits[t * n_expert + e] = (t % 2) ? static_cast<float>(rng.integer(0, 3)) : rng.uni(-5, 5);
  std::vector<int32_t> ids(n_tok * k);
  std::vector<float> w(n_tok * k);
  be->router({.logits = logits.data(), .ids = ids.data(), .weights = w.data(), .n_tok = n_tok, .n_expert = n_expert, .k = k});
  for (int64_t t = 0; t < n_tok; ++t) {
    std::vector<int> order(n_expert);
    std::iota(order.begin(), order.end(), 0);
    // descending value, ties to the lower index (torch.topk on CPU and ggml's argsort agree
    // on the set except on exact ties; brass documents lower-index-first)
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return logits[t * n_expert + a] > logits[t * n_expert + b]; });
    double den = 0;
    for (int j = 0; j < k; ++j) den += std::exp(static_cast<double>(logits[t * n_expert + order[j]]));
    for (int j = 0; j < k; ++j) {
      EXPECT_EQ(ids[t * k + j], order[j]) << "token " << t << " j " << j;
      EXPECT_NEAR(w[t * k + j], std::exp(static_cast<double>(logits[t * n_expert + order[j]])) / den, 1e-6);
    }
  }
}

// ---- MoE ----

TEST_P(CpuOps, MoeOaiSwigluWithClampsAndBiases) {
  Rng rng;
  SEED_TRACE(rng);
  for (DType type : {DType::MXFP4, DType::F32, DType::Q8_0}) {
    SCOPED_TRACE(dtype_name(type));
    const int64_t n_embd = 64, n_ff = 96, n_expert = 8, k = 4;
    for (int64_t n_tok : {1, 17}) {
      TestWeight gate = make_weight(rng, type, n_embd, n_ff, n_expert, 1.5f);
      TestWeight up = make_weight(rng, type, n_embd, n_ff, n_expert, 1.5f);
      TestWeight down = make_weight(rng, type, n_ff, n_embd, n_expert, 0.5f);
      std::vector<float> gb = rng.vec(n_expert * n_ff, -2, 2), ub = rng.vec(n_expert * n_ff, -2, 2);
      std::vector<float> db = rng.vec(n_expert * n_embd);
      std::vector<float> x = rng.vec(n_tok * n_embd, -1.5f, 1.5f);  // big enough to hit +-7
      std::vector<int32_t> ids(n_tok * k);
      std::vector<float> wts(n_tok * k);
      for (int64_t t = 0; t < n_tok; ++t) {
        std::vector<int> perm(n_expert);
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng.gen);
        double sum = 0;
        for (int j = 0; j < k; ++j) {
          ids[t * k + j] = perm[j];
          sum += (wts[t * k + j] = rng.uni(0.1f, 1));
        }
        for (int j = 0; j < k; ++j) wts[t * k + j] /= static_cast<float>(sum);
      }
      std::vector<float> out(n_tok * n_embd);
      be->moe({.x = x.data(), .ids = ids.data(), .weights = wts.data(), .gate = gate.view(), .up = up.view(),
               .down = down.view(), .gate_bias = gb.data(), .up_bias = ub.data(), .down_bias = db.data(),
               .out = out.data(), .n_tok = n_tok, .k = k, .alpha = 1.702f, .limit = 7.0f});
      std::vector<double> want(n_tok * n_embd, 0.0);
      int clamped_gate = 0, clamped_up = 0;
      for (int64_t t = 0; t < n_tok; ++t)
        for (int j = 0; j < k; ++j) {
          const int e = ids[t * k + j];
          std::vector<double> act(n_ff);
          for (int64_t f = 0; f < n_ff; ++f) {
            double g = gb[e * n_ff + f], u = ub[e * n_ff + f];
            for (int64_t i = 0; i < n_embd; ++i) {
              g += x[t * n_embd + i] * static_cast<double>(gate.deq[(e * n_ff + f) * n_embd + i]);
              u += x[t * n_embd + i] * static_cast<double>(up.deq[(e * n_ff + f) * n_embd + i]);
            }
            if (g > 7) ++clamped_gate, g = 7;
            if (u > 7 || u < -7) ++clamped_up, u = u > 7 ? 7 : -7;
            act[f] = g * (1.0 / (1.0 + std::exp(-1.702 * g))) * (u + 1.0);
          }
          for (int64_t o = 0; o < n_embd; ++o) {
            double y = db[e * n_embd + o];
            for (int64_t f = 0; f < n_ff; ++f) y += act[f] * down.deq[(e * n_embd + o) * n_ff + f];
            want[t * n_embd + o] += wts[t * k + j] * y;
          }
        }
      if (n_tok == 17) {
        EXPECT_GT(clamped_gate, 0) << "test inputs never reach the gate clamp";
        EXPECT_GT(clamped_up, 0) << "test inputs never reach the up clamp";
      }
      expect_close(out, want, 2e-4, 1e-4);
    }
  }
}

TEST_P(CpuOps, AddAndGatherRows) {
  Rng rng;
  SEED_TRACE(rng);
  const int64_t n = 200003;
  std::vector<float> y = rng.vec(n), x = rng.vec(n), y0 = y;
  be->add({.y = y.data(), .x = x.data(), .n = n});
  for (int64_t i = 0; i < n; i += 997) EXPECT_EQ(y[i], y0[i] + x[i]);
  EXPECT_EQ(y[n - 1], y0[n - 1] + x[n - 1]);
  std::vector<float> src = rng.vec(5 * 3), dst(2 * 3);
  std::vector<int32_t> rows = {4, 1};
  be->gather_rows({.x = src.data(), .rows = rows.data(), .out = dst.data(), .n_rows = 2, .n = 3});
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(dst[i], src[12 + i]);
    EXPECT_EQ(dst[3 + i], src[3 + i]);
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, CpuOps, ::testing::Values(1, 3));

TEST(CpuOpsDeterminism, ThreadCountDoesNotChangeBits) {
  Rng rng;
  SEED_TRACE(rng);
  auto be1 = cpu::make_cpu_backend_level(1, cpu::KernelLevel::Ref),
       be3 = cpu::make_cpu_backend_level(3, cpu::KernelLevel::Ref);
  TestWeight w = make_weight(rng, DType::MXFP4, 128, 61, 4);
  std::vector<float> x = rng.vec(19 * 128);
  std::vector<int32_t> ids(19 * 2);
  for (auto& i : ids) i = rng.integer(0, 3);
  for (size_t t = 0; t < 19; ++t)
    if (ids[2 * t] == ids[2 * t + 1]) ids[2 * t + 1] = (ids[2 * t] + 1) % 4;
  std::vector<float> wts(19 * 2, 0.5f);
  TestWeight down = make_weight(rng, DType::MXFP4, 64, 128, 4);
  TestWeight gate = make_weight(rng, DType::MXFP4, 128, 64, 4), up = make_weight(rng, DType::MXFP4, 128, 64, 4);
  std::vector<float> y1(19 * 61), y3(19 * 61), m1(19 * 128), m3(19 * 128);
  for (auto* b : {be1.get(), be3.get()}) {
    const bool one = b == be1.get();
    b->matmul({.w = WeightView{DType::MXFP4, w.bytes.data(), {128, 61, 1, 1}}, .bias = nullptr, .x = x.data(),
               .y = one ? y1.data() : y3.data(), .n_tok = 19});
    b->moe({.x = x.data(), .ids = ids.data(), .weights = wts.data(), .gate = gate.view(), .up = up.view(),
            .down = down.view(), .out = one ? m1.data() : m3.data(), .n_tok = 19, .k = 2});
  }
  EXPECT_EQ(y1, y3);
  EXPECT_EQ(m1, m3);
}

}  // namespace
}  // namespace brass::backend
