// The CPU reference backend: every op of backend.h as plain loops, parallelized over
// rows / experts / (token, kv-head) pairs with one persistent ThreadPool. This is the
// oracle the SIMD and CUDA backends are tested against, so clarity beats speed here;
// the loops are still arranged so that prefill reads each weight row once per tile of
// tokens (matrix-matrix work) instead of once per token.
//
// Numerics:
// - Dot products accumulate in f32 with 8 interleaved partial sums (lets the compiler
//   vectorize without -ffast-math; the order is fixed, so results are deterministic
//   and independent of the thread count). RMSNorm's sum of squares uses double.
// - Quantized weights are expanded with quant::dequantize_row (exact) into a per-thread
//   f32 tile of kRowTile rows, then dotted with kTokTile tokens.
// - Softmaxes (attention with sinks, router over the top k) subtract the max first.
// - RoPE angles are computed as float(pos) * inv_freq[j] in f32, then cos/sin in f32,
//   as gpt_oss/torch/model.py and ggml do.
//
// SIMD levels (simd_kernels.h; BRASS_CPU_KERNELS=ref|avx2|avx512, default the best the
// processor has): at avx2/avx512 the Q8_0/MXFP4 matmuls and MoE experts quantize their
// activation rows to int8 blocks once per op and run int8 dot kernels (error bound in
// simd_kernels.h), and f32 dots (attention scores, f32 weights) use the level's FMA
// dot. Everything else, and the whole "ref" level, is the reference code below.
//
// BRASS_PROFILE=1 times every op (steady_clock around each call, so the barrier wait of
// its parallel_fors is included) and prints a per-op table to stderr when the backend
// is destroyed.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <new>
#include <vector>

#include "backend/backend.h"
#include "backend/oai_swiglu.h"
#include "backend/cpu/simd_backend.h"
#include "backend/cpu/simd_kernels.h"
#include "backend/cpu/thread_pool.h"
#include "core/env.h"
#include "core/half.h"
#include "quant/quant.h"

namespace brass::backend {
namespace {

constexpr int64_t kRowTile = 16;  // weight rows dequantized together
constexpr int64_t kTokTile = 64;  // tokens multiplied against one row tile

float dot_f32(const float* a, const float* b, int64_t n) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) s[j] += a[i + j] * b[i + j];
  }
  for (int j = 0; i < n; ++i, ++j) s[j] += a[i] * b[i];
  return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

class CpuBuffer final : public Buffer {
 public:
  explicit CpuBuffer(size_t bytes)
      : size_(bytes),
        data_(static_cast<uint8_t*>(::operator new(bytes ? bytes : 1, std::align_val_t(64)))) {}
  ~CpuBuffer() override { ::operator delete(data_, std::align_val_t(64)); }
  void* data() override { return data_; }
  size_t size() const override { return size_; }

 private:
  size_t size_;
  uint8_t* data_;
};

// Per-op wall-time accumulator behind BRASS_PROFILE=1.
enum ProfOp {
  kPEmbed, kPNorm, kPMatQ8, kPMatMxfp4, kPMatHead, kPMatOther, kPRope, kPKv, kPAttn, kPRouter,
  kPMoeGateUp, kPMoeDown, kPMoeOther, kPAdd, kPGather, kPCount
};
constexpr const char* kProfNames[kPCount] = {
    "embed", "rms_norm", "matmul q8_0", "matmul mxfp4", "matmul head (n_out>=32k)", "matmul other",
    "rope", "kv_store", "attention", "router", "moe gate+up", "moe down", "moe quant+sum", "add", "gather_rows"};

struct Profiler {
  bool on = false;
  bool batch = false;  // the op being timed has n_tok > 1 (prefill): kept in a separate table
  double sec[2][kPCount] = {};
  int64_t calls[2][kPCount] = {};
  void print() const {
    for (int b = 0; b < 2; ++b) {
      double tot = 0;
      for (double v : sec[b]) tot += v;
      if (tot == 0) continue;
      std::fprintf(stderr, "BRASS_PROFILE cpu backend, %s ops: %.3f s\n", b ? "prefill (n_tok > 1)" : "decode (n_tok = 1)",
                   tot);
      for (int i = 0; i < kPCount; ++i) {
        if (!calls[b][i]) continue;
        std::fprintf(stderr, "  %-26s %9.3f ms %6.1f%% %8lld calls %9.2f us/call\n", kProfNames[i], sec[b][i] * 1e3,
                     100.0 * sec[b][i] / tot, static_cast<long long>(calls[b][i]), sec[b][i] * 1e6 / calls[b][i]);
      }
    }
  }
};

class ProfScope {
 public:
  ProfScope(Profiler& p, int op) : p_(p.on ? &p : nullptr), op_(op) {
    if (p_) t0_ = std::chrono::steady_clock::now();
  }
  ~ProfScope() { stop(); }
  void stop() {
    if (!p_) return;
    const auto t1 = std::chrono::steady_clock::now();
    p_->sec[p_->batch][op_] += std::chrono::duration<double>(t1 - t0_).count();
    ++p_->calls[p_->batch][op_];
    p_ = nullptr;
  }

 private:
  Profiler* p_;
  int op_;
  std::chrono::steady_clock::time_point t0_;
};

class CpuBackend final : public Backend {
 public:
  CpuBackend(int n_threads, cpu::KernelLevel level)
      : pool_(n_threads > 0 ? n_threads : env::threads()),
        scratch_(pool_.size()),
        kt_(cpu::kernel_table(level)),
        dot_(kt_ ? kt_->dot_f32 : &dot_f32) {
    const auto v = env::get("BRASS_PROFILE");
    prof_.on = v && !v->empty() && *v != "0";
  }
  ~CpuBackend() override {
    if (prof_.on) prof_.print();
  }

  std::string name() const override {
    return std::string("cpu-") + cpu::kernel_level_name(kt_ ? kt_->level : cpu::KernelLevel::Ref);
  }
  int n_threads() const override { return pool_.size(); }

  bool supports_weight_type(DType t) const override { return quant::can_dequantize(t); }

  Result<std::unique_ptr<Buffer>> alloc(size_t bytes) override {
    try {
      return std::unique_ptr<Buffer>(std::make_unique<CpuBuffer>(bytes));
    } catch (const std::bad_alloc&) {
      return Status::errorf("cpu backend: cannot allocate {} bytes", bytes);
    }
  }
  void upload(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void download(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }

  void embed(const EmbedArgs& a) override {
    prof_.batch = a.n_tok > 1;
    ProfScope ps_(prof_, kPEmbed);
    const int64_t n_embd = a.table.ne[0];
    const int64_t rb = a.table.row_bytes();
    const auto* base = static_cast<const uint8_t*>(a.table.data);
    pool_.parallel_for(a.n_tok, [&](int64_t t, int) {
      quant::dequantize_row(a.table.type, base + a.tokens[t] * rb, a.out + t * n_embd, n_embd);
    });
  }

  void rms_norm(const RmsNormArgs& a) override {
    prof_.batch = a.n_rows > 1;
    ProfScope ps_(prof_, kPNorm);
    pool_.parallel_for(a.n_rows, [&](int64_t r, int) {
      const float* x = a.x + r * a.n;
      float* o = a.out + r * a.n;
      double ss = 0;
      for (int64_t i = 0; i < a.n; ++i) ss += static_cast<double>(x[i]) * x[i];
      const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(a.n) + a.eps));
      for (int64_t i = 0; i < a.n; ++i) o[i] = x[i] * inv * a.weight[i];
    });
  }

  void matmul(const MatmulArgs& a) override {
    prof_.batch = a.n_tok > 1;
    ProfScope ps_(prof_, a.w.ne[1] >= 32768 ? kPMatHead
                         : a.w.type == DType::Q8_0 ? kPMatQ8
                         : a.w.type == DType::MXFP4 ? kPMatMxfp4 : kPMatOther);
    if (use_qgemm(a.w)) return matmul_q(a);
    const int64_t n_in = a.w.ne[0], n_out = a.w.ne[1];
    const int64_t rb = a.w.row_bytes();
    const auto* base = static_cast<const uint8_t*>(a.w.data);
    const int64_t n_row_tiles = (n_out + kRowTile - 1) / kRowTile;
    const int64_t n_tok_tiles = (a.n_tok + kTokTile - 1) / kTokTile;
    pool_.parallel_for(n_row_tiles * n_tok_tiles, [&](int64_t task, int ti) {
      const int64_t r0 = (task / n_tok_tiles) * kRowTile, r1 = std::min(n_out, r0 + kRowTile);
      const int64_t t0 = (task % n_tok_tiles) * kTokTile, t1 = std::min(a.n_tok, t0 + kTokTile);
      const float* rows[kRowTile];
      expand_rows(a.w.type, base, rb, n_in, r0, r1, ti, 0, rows);
      for (int64_t t = t0; t < t1; ++t) {
        const float* xt = a.x + t * n_in;
        float* yt = a.y + t * n_out;
        for (int64_t r = r0; r < r1; ++r) {
          yt[r] = dot_(xt, rows[r - r0], n_in) + (a.bias ? a.bias[r] : 0.0f);
        }
      }
    });
  }

  void rope(const RopeArgs& a) override {
    prof_.batch = a.n_tok > 1;
    ProfScope ps_(prof_, kPRope);
    const int64_t half = a.head_dim / 2;
    pool_.parallel_for(a.n_tok, [&](int64_t t, int ti) {
      float* cs = scratch(ti, 0, 2 * half);
      const float p = static_cast<float>(a.pos[t]);
      for (int64_t j = 0; j < half; ++j) {
        const float ang = p * a.inv_freq[j];
        cs[j] = std::cos(ang) * a.mscale;
        cs[half + j] = std::sin(ang) * a.mscale;
      }
      for (int64_t h = 0; h < a.n_heads; ++h) {
        float* x = a.x + (t * a.n_heads + h) * a.head_dim;
        for (int64_t j = 0; j < half; ++j) {
          const float x0 = x[j], x1 = x[j + half];
          x[j] = x0 * cs[j] - x1 * cs[half + j];
          x[j + half] = x1 * cs[j] + x0 * cs[half + j];
        }
      }
    });
  }

  void kv_store(const KvStoreArgs& a) override {
    prof_.batch = a.seqs.size() > 1 || (a.seqs.size() == 1 && a.seqs[0].n_tok > 1);
    ProfScope ps_(prof_, kPKv);
    const int64_t row = a.n_head_kv * a.head_dim;
    for (const AttnSeq& s : a.seqs) {
      pool_.parallel_for(s.n_tok, [&](int64_t i, int) {
        const int64_t pos = s.pos0 + i;
        const int64_t slot = kv_storage_row(s, pos);
        const float* k = a.k + (s.tok0 + i) * row;
        const float* v = a.v + (s.tok0 + i) * row;
        if (a.kv_type == DType::F16) {
          uint16_t* kd = static_cast<uint16_t*>(s.k) + slot * row;
          uint16_t* vd = static_cast<uint16_t*>(s.v) + slot * row;
          for (int64_t e = 0; e < row; ++e) {
            kd[e] = f32_to_f16(k[e]);
            vd[e] = f32_to_f16(v[e]);
          }
        } else {
          std::memcpy(static_cast<float*>(s.k) + slot * row, k, row * sizeof(float));
          std::memcpy(static_cast<float*>(s.v) + slot * row, v, row * sizeof(float));
        }
      });
    }
  }

  void attention(const AttentionArgs& a) override {
    prof_.batch = a.seqs.size() > 1 || (a.seqs.size() == 1 && a.seqs[0].n_tok > 1);
    ProfScope ps_(prof_, kPAttn);
    const int64_t n_rep = a.n_head / a.n_head_kv;
    const int64_t d = a.head_dim;
    const int64_t kv_row = a.n_head_kv * d;
    for (const AttnSeq& s : a.seqs) {
      pool_.parallel_for(s.n_tok * a.n_head_kv, [&](int64_t task, int ti) {
        const int64_t i = task / a.n_head_kv, g = task % a.n_head_kv;
        const int64_t t = s.tok0 + i;
        const int64_t p = s.pos0 + i;
        const int64_t lo = a.window > 0 ? std::max<int64_t>(0, p - a.window + 1) : 0;
        const int64_t n_keys = p - lo + 1;
        float* scores = scratch(ti, 0, n_rep * n_keys);  // (n_rep, n_keys)
        float* kf = scratch(ti, 1, 2 * d);               // one K and one V row in f32
        float* vf = kf + d;
        for (int64_t j = 0; j < n_keys; ++j) {
          const int64_t pos = lo + j;
          const int64_t slot = kv_storage_row(s, pos);
          const float* kr = load_row(a.kv_type, s.k, slot * kv_row + g * d, d, kf);
          for (int64_t r = 0; r < n_rep; ++r) {
            const float* q = a.q + (t * a.n_head + g * n_rep + r) * d;
            scores[r * n_keys + j] = dot_(q, kr, d) * a.scale;
          }
        }
        for (int64_t r = 0; r < n_rep; ++r) {
          const int64_t h = g * n_rep + r;
          float* sc = scores + r * n_keys;
          float m = a.sinks ? a.sinks[h] : -std::numeric_limits<float>::infinity();
          for (int64_t j = 0; j < n_keys; ++j) m = std::max(m, sc[j]);
          float denom = a.sinks ? std::exp(a.sinks[h] - m) : 0.0f;
          for (int64_t j = 0; j < n_keys; ++j) {
            sc[j] = std::exp(sc[j] - m);
            denom += sc[j];
          }
          const float inv = 1.0f / denom;
          for (int64_t j = 0; j < n_keys; ++j) sc[j] *= inv;
        }
        float* outs = a.out + t * a.n_head * d + g * n_rep * d;  // n_rep heads, contiguous
        std::fill(outs, outs + n_rep * d, 0.0f);
        for (int64_t j = 0; j < n_keys; ++j) {
          const int64_t pos = lo + j;
          const int64_t slot = kv_storage_row(s, pos);
          const float* vr = load_row(a.kv_type, s.v, slot * kv_row + g * d, d, vf);
          for (int64_t r = 0; r < n_rep; ++r) {
            const float w = scores[r * n_keys + j];
            float* o = outs + r * d;
            if (kt_) {
              kt_->axpy_f32(w, vr, o, d);
            } else {
              for (int64_t e = 0; e < d; ++e) o[e] += w * vr[e];
            }
          }
        }
      });
    }
  }

  void router(const RouterArgs& a) override {
    prof_.batch = a.n_tok > 1;
    ProfScope ps_(prof_, kPRouter);
    pool_.parallel_for(a.n_tok, [&](int64_t t, int) {
      const float* l = a.logits + t * a.n_expert;
      int32_t* ids = a.ids + t * a.k;
      float* w = a.weights + t * a.k;
      for (int64_t j = 0; j < a.k; ++j) {
        int64_t best = -1;
        for (int64_t e = 0; e < a.n_expert; ++e) {
          bool taken = false;
          for (int64_t q = 0; q < j; ++q) taken = taken || ids[q] == e;
          if (taken) continue;
          // strict '>' keeps the lower index on ties
          if (best < 0 || l[e] > l[best]) best = e;
        }
        ids[j] = static_cast<int32_t>(best);
        w[j] = l[best];
      }
      const float m = w[0];  // the largest: sorted descending
      float sum = 0;
      for (int64_t j = 0; j < a.k; ++j) {
        w[j] = std::exp(w[j] - m);
        sum += w[j];
      }
      for (int64_t j = 0; j < a.k; ++j) w[j] /= sum;
    });
  }

  void moe(const MoeArgs& a) override {
    prof_.batch = a.n_tok > 1;
    if (use_qgemm(a.gate) && use_qgemm(a.up) && use_qgemm(a.down)) return moe_q(a);
    ProfScope ps_(prof_, kPMoeOther);
    const int64_t n_embd = a.gate.ne[0], n_ff = a.gate.ne[1], n_expert = a.gate.ne[2];
    const int64_t n_slots = a.n_tok * a.k;
    // Which (token, j) slots each expert serves, in slot order (deterministic).
    std::vector<std::vector<int64_t>> by_expert(n_expert);
    for (int64_t s = 0; s < n_slots; ++s) by_expert[a.ids[s]].push_back(s);
    std::vector<int64_t> active;
    for (int64_t e = 0; e < n_expert; ++e)
      if (!by_expert[e].empty()) active.push_back(e);
    act_.resize(n_slots * n_ff);       // (n_slots, n_ff) SwiGLU outputs
    eout_.resize(n_slots * n_embd);    // (n_slots, n_embd) per-expert outputs

    const auto* gbase = static_cast<const uint8_t*>(a.gate.data);
    const auto* ubase = static_cast<const uint8_t*>(a.up.data);
    const auto* dbase = static_cast<const uint8_t*>(a.down.data);
    const int64_t g_rb = a.gate.row_bytes(), u_rb = a.up.row_bytes(), d_rb = a.down.row_bytes();

    // Phase 1: gate and up rows of each active expert, SwiGLU into act_.
    const int64_t ff_tiles = (n_ff + kRowTile - 1) / kRowTile;
    pool_.parallel_for(static_cast<int64_t>(active.size()) * ff_tiles, [&](int64_t task, int ti) {
      const int64_t e = active[task / ff_tiles];
      const int64_t r0 = (task % ff_tiles) * kRowTile, r1 = std::min(n_ff, r0 + kRowTile);
      const float* grows[kRowTile];
      const float* urows[kRowTile];
      expand_rows(a.gate.type, gbase + e * a.gate.matrix_bytes(), g_rb, n_embd, r0, r1, ti, 0, grows);
      expand_rows(a.up.type, ubase + e * a.up.matrix_bytes(), u_rb, n_embd, r0, r1, ti, 1, urows);
      for (int64_t s : by_expert[e]) {
        const float* xt = a.x + (s / a.k) * n_embd;
        float* act = act_.data() + s * n_ff;
        for (int64_t r = r0; r < r1; ++r) {
          float g = dot_f32(xt, grows[r - r0], n_embd) + (a.gate_bias ? a.gate_bias[e * n_ff + r] : 0.0f);
          float u = dot_f32(xt, urows[r - r0], n_embd) + (a.up_bias ? a.up_bias[e * n_ff + r] : 0.0f);
          act[r] = oai_swiglu(g, u, a.alpha, a.limit);
        }
      }
    });

    // Phase 2: down rows of each active expert into eout_.
    const int64_t embd_tiles = (n_embd + kRowTile - 1) / kRowTile;
    pool_.parallel_for(static_cast<int64_t>(active.size()) * embd_tiles, [&](int64_t task, int ti) {
      const int64_t e = active[task / embd_tiles];
      const int64_t r0 = (task % embd_tiles) * kRowTile, r1 = std::min(n_embd, r0 + kRowTile);
      const float* drows[kRowTile];
      expand_rows(a.down.type, dbase + e * a.down.matrix_bytes(), d_rb, n_ff, r0, r1, ti, 0, drows);
      for (int64_t s : by_expert[e]) {
        const float* act = act_.data() + s * n_ff;
        float* eo = eout_.data() + s * n_embd;
        for (int64_t r = r0; r < r1; ++r) {
          eo[r] = dot_f32(act, drows[r - r0], n_ff) + (a.down_bias ? a.down_bias[e * n_embd + r] : 0.0f);
        }
      }
    });

    // Phase 3: weighted sum over the k experts of each token, in j order.
    pool_.parallel_for(a.n_tok, [&](int64_t t, int) {
      float* o = a.out + t * n_embd;
      std::fill(o, o + n_embd, 0.0f);
      for (int64_t j = 0; j < a.k; ++j) {
        const float w = a.weights[t * a.k + j];
        const float* eo = eout_.data() + (t * a.k + j) * n_embd;
        for (int64_t i = 0; i < n_embd; ++i) o[i] += w * eo[i];
      }
    });
  }

  void add(const AddArgs& a) override {
    prof_.batch = false;
    ProfScope ps_(prof_, kPAdd);
    constexpr int64_t kChunk = 1 << 16;
    pool_.parallel_for((a.n + kChunk - 1) / kChunk, [&](int64_t c, int) {
      const int64_t i1 = std::min(a.n, (c + 1) * kChunk);
      for (int64_t i = c * kChunk; i < i1; ++i) a.y[i] += a.x[i];
    });
  }

  void gather_rows(const GatherRowsArgs& a) override {
    prof_.batch = a.n_rows > 1;
    ProfScope ps_(prof_, kPGather);
    for (int64_t i = 0; i < a.n_rows; ++i) {
      std::memcpy(a.out + i * a.n, a.x + static_cast<int64_t>(a.rows[i]) * a.n, a.n * sizeof(float));
    }
  }

 private:
  // ---- SIMD quantized paths (simd_kernels.h) ----
  static constexpr int64_t kQRows = 32;  // weight rows per task in the quantized paths

  bool use_qgemm(const WeightView& w) const {
    return kt_ && cpu::qgemm_supports(w.type) && w.ne[0] % 32 == 0;
  }

  // Quantize n_rows rows of n floats (row stride n) for weights of type t into slot
  // `which` (0: matmul / MoE input, 1: MoE down input); returns the per-row views.
  const cpu::QActRow* quantize_rows(DType t, const float* x, int64_t n_rows, int64_t n, int which) {
    QActs& q = qacts_[which];
    const int64_t nb = n / 32;
    q.q.resize(n_rows * n);
    q.d.resize(n_rows * nb);
    q.nb.resize(n_rows * nb * 8);
    q.nbt.resize(n_rows * nb);
    q.rows.resize(n_rows);
    pool_.parallel_for(n_rows, [&](int64_t r, int) {
      kt_->quantize_row(t, x + r * n, n, q.q.data() + r * n, q.d.data() + r * nb, q.nb.data() + r * nb * 8,
                        q.nbt.data() + r * nb);
      q.rows[r] = {q.q.data() + r * n, q.d.data() + r * nb, q.nb.data() + r * nb * 8, q.nbt.data() + r * nb};
    });
    return q.rows.data();
  }

  void matmul_q(const MatmulArgs& a) {
    const int64_t n_in = a.w.ne[0], n_out = a.w.ne[1];
    const cpu::QActRow* xr = quantize_rows(a.w.type, a.x, a.n_tok, n_in, 0);
    yptr_.resize(a.n_tok);
    for (int64_t t = 0; t < a.n_tok; ++t) yptr_[t] = a.y + t * n_out;
    const int64_t n_row_tiles = (n_out + kQRows - 1) / kQRows;
    const int64_t n_tok_tiles = (a.n_tok + kTokTile - 1) / kTokTile;
    pool_.parallel_for(n_row_tiles * n_tok_tiles, [&](int64_t task, int) {
      const int64_t r0 = (task / n_tok_tiles) * kQRows;
      const int64_t t0 = (task % n_tok_tiles) * kTokTile, t1 = std::min(a.n_tok, t0 + kTokTile);
      kt_->qgemm({.type = a.w.type, .w = static_cast<const uint8_t*>(a.w.data), .row_bytes = a.w.row_bytes(),
                  .n_in = n_in, .r0 = r0, .r1 = std::min(n_out, r0 + kQRows), .x = xr + t0, .n_tok = t1 - t0,
                  .y = yptr_.data() + t0, .bias = a.bias});
    });
  }

  // MoE with int8 activations: the (token, j) slots are grouped by expert (slot order
  // inside a group); each task runs one expert's gate+up (or down) rows for all its slots.
  void moe_q(const MoeArgs& a) {
    ProfScope ps_pre(prof_, kPMoeOther);
    const int64_t n_embd = a.gate.ne[0], n_ff = a.gate.ne[1], n_expert = a.gate.ne[2];
    const int64_t n_slots = a.n_tok * a.k;
    std::vector<int64_t> start(n_expert + 1, 0);  // grouped order: expert e owns [start[e], start[e+1])
    for (int64_t s = 0; s < n_slots; ++s) ++start[a.ids[s] + 1];
    for (int64_t e = 0; e < n_expert; ++e) start[e + 1] += start[e];
    std::vector<int64_t> order(n_slots), fill(start.begin(), start.end() - 1);
    for (int64_t s = 0; s < n_slots; ++s) order[fill[a.ids[s]]++] = s;
    std::vector<int64_t> active;
    for (int64_t e = 0; e < n_expert; ++e)
      if (start[e + 1] > start[e]) active.push_back(e);
    act_.resize(n_slots * n_ff);
    eout_.resize(n_slots * n_embd);
    gbuf_.resize(n_slots * n_ff);
    ubuf_.resize(n_slots * n_ff);

    // Phase 1: gate and up for every slot, SwiGLU into act_ (slot-major).
    const cpu::QActRow* xq = quantize_rows(a.gate.type, a.x, a.n_tok, n_embd, 0);
    std::vector<cpu::QActRow> xr(n_slots);
    std::vector<float*> gp(n_slots), up(n_slots), dp(n_slots);
    for (int64_t i = 0; i < n_slots; ++i) {
      const int64_t s = order[i];
      xr[i] = xq[s / a.k];
      gp[i] = gbuf_.data() + s * n_ff;
      up[i] = ubuf_.data() + s * n_ff;
      dp[i] = eout_.data() + s * n_embd;
    }
    const auto* gbase = static_cast<const uint8_t*>(a.gate.data);
    const auto* ubase = static_cast<const uint8_t*>(a.up.data);
    const auto* dbase = static_cast<const uint8_t*>(a.down.data);
    const int64_t ff_tiles = (n_ff + kQRows - 1) / kQRows;
    ps_pre.stop();
    ProfScope ps_gu(prof_, kPMoeGateUp);
    pool_.parallel_for(static_cast<int64_t>(active.size()) * ff_tiles, [&](int64_t task, int) {
      const int64_t e = active[task / ff_tiles];
      const int64_t r0 = (task % ff_tiles) * kQRows, r1 = std::min(n_ff, r0 + kQRows);
      const int64_t i0 = start[e], n = start[e + 1] - start[e];
      for (int64_t t0 = 0; t0 < n; t0 += kTokTile) {
        const int64_t nt = std::min(kTokTile, n - t0);
        kt_->qgemm({.type = a.gate.type, .w = gbase + e * a.gate.matrix_bytes(), .row_bytes = a.gate.row_bytes(),
                    .n_in = n_embd, .r0 = r0, .r1 = r1, .x = xr.data() + i0 + t0, .n_tok = nt,
                    .y = gp.data() + i0 + t0, .bias = a.gate_bias ? a.gate_bias + e * n_ff : nullptr});
        kt_->qgemm({.type = a.up.type, .w = ubase + e * a.up.matrix_bytes(), .row_bytes = a.up.row_bytes(),
                    .n_in = n_embd, .r0 = r0, .r1 = r1, .x = xr.data() + i0 + t0, .n_tok = nt,
                    .y = up.data() + i0 + t0, .bias = a.up_bias ? a.up_bias + e * n_ff : nullptr});
      }
      for (int64_t i = i0; i < i0 + n; ++i) {
        const int64_t s = order[i];
        float* act = act_.data() + s * n_ff;
        for (int64_t r = r0; r < r1; ++r) {
          act[r] = oai_swiglu(gp[i][r], up[i][r], a.alpha, a.limit);
        }
      }
    });

    ps_gu.stop();
    // Phase 2: down rows of each active expert into eout_.
    ProfScope ps_q2(prof_, kPMoeOther);
    const cpu::QActRow* aq = quantize_rows(a.down.type, act_.data(), n_slots, n_ff, 1);
    for (int64_t i = 0; i < n_slots; ++i) xr[i] = aq[order[i]];
    const int64_t embd_tiles = (n_embd + kQRows - 1) / kQRows;
    ps_q2.stop();
    ProfScope ps_dn(prof_, kPMoeDown);
    pool_.parallel_for(static_cast<int64_t>(active.size()) * embd_tiles, [&](int64_t task, int) {
      const int64_t e = active[task / embd_tiles];
      const int64_t r0 = (task % embd_tiles) * kQRows, r1 = std::min(n_embd, r0 + kQRows);
      const int64_t i0 = start[e], n = start[e + 1] - start[e];
      for (int64_t t0 = 0; t0 < n; t0 += kTokTile) {
        kt_->qgemm({.type = a.down.type, .w = dbase + e * a.down.matrix_bytes(), .row_bytes = a.down.row_bytes(),
                    .n_in = n_ff, .r0 = r0, .r1 = r1, .x = xr.data() + i0 + t0,
                    .n_tok = std::min(kTokTile, n - t0), .y = dp.data() + i0 + t0,
                    .bias = a.down_bias ? a.down_bias + e * n_embd : nullptr});
      }
    });
    ps_dn.stop();
    ProfScope ps_sum(prof_, kPMoeOther);

    // Phase 3: weighted sum over the k experts of each token, in j order.
    pool_.parallel_for(a.n_tok, [&](int64_t t, int) {
      float* o = a.out + t * n_embd;
      std::fill(o, o + n_embd, 0.0f);
      for (int64_t j = 0; j < a.k; ++j) {
        const float w = a.weights[t * a.k + j];
        const float* eo = eout_.data() + (t * a.k + j) * n_embd;
        for (int64_t i = 0; i < n_embd; ++i) o[i] += w * eo[i];
      }
    });
  }

  // Per-thread scratch slot `which` (0..2) of at least n floats.
  float* scratch(int ti, int which, int64_t n) {
    auto& v = scratch_[ti][which];
    if (static_cast<int64_t>(v.size()) < n) v.resize(n);
    return v.data();
  }

  // Make rows [r0, r1) of a weight matrix available as f32: F32 rows are used in place,
  // other types are dequantized into the thread's scratch slot `which`.
  void expand_rows(DType type, const uint8_t* base, int64_t rb, int64_t n_in, int64_t r0,
                   int64_t r1, int ti, int which, const float** rows) {
    if (type == DType::F32) {
      for (int64_t r = r0; r < r1; ++r) rows[r - r0] = reinterpret_cast<const float*>(base + r * rb);
      return;
    }
    float* buf = scratch(ti, which, (r1 - r0) * n_in);
    for (int64_t r = r0; r < r1; ++r) {
      quant::dequantize_row(type, base + r * rb, buf + (r - r0) * n_in, n_in);
      rows[r - r0] = buf + (r - r0) * n_in;
    }
  }

  // Element offset `off` of a K/V store as f32: F32 in place, F16 converted into tmp.
  static const float* load_row(DType t, const void* store, int64_t off, int64_t n, float* tmp) {
    if (t == DType::F32) return static_cast<const float*>(store) + off;
    const uint16_t* h = static_cast<const uint16_t*>(store) + off;
    for (int64_t i = 0; i < n; ++i) tmp[i] = f16_to_f32(h[i]);
    return tmp;
  }

  struct QActs {
    std::vector<int8_t> q;
    std::vector<float> d;
    std::vector<int32_t> nb, nbt;
    std::vector<cpu::QActRow> rows;
  };

  Profiler prof_;
  cpu::ThreadPool pool_;
  std::vector<std::array<std::vector<float>, 3>> scratch_;
  std::vector<float> act_, eout_;
  const cpu::KernelTable* kt_;                        // null at the ref level
  float (*dot_)(const float*, const float*, int64_t);  // f32 dot of the level
  QActs qacts_[2];
  std::vector<float*> yptr_;
  std::vector<float> gbuf_, ubuf_;  // (n_slots, n_ff) gate / up outputs
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int n_threads) {
  return std::make_unique<CpuBackend>(n_threads, cpu::selected_kernel_level());
}

std::unique_ptr<Backend> cpu::make_cpu_backend_level(int n_threads, cpu::KernelLevel level) {
  return std::make_unique<CpuBackend>(n_threads, level);
}

}  // namespace brass::backend
