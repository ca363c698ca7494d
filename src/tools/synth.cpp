// Synthetic gpt-oss GGUF writer (see synth.h). Numerics of the random weights:
//   - matrices: Gaussian(0, 1/sqrt(n_in)) so each projection keeps activations near unit
//     scale; the residual stream then grows only like sqrt(layers) over 24-36 layers.
//   - norms: Gaussian(1, 0.05); biases: Gaussian(0, 0.02); sinks: Gaussian(0, 1);
//     token_embd: Gaussian(0, 1) (RMSNorm follows it, the scale only sets the residual).
// Fast paths generate quantized blocks directly instead of quantizing floats:
//   - MXFP4: each 4-bit code is drawn from a 128-entry table that reproduces the E2M1
//     rounding of a Gaussian with std 2.2 code units; the E8M0 block scale is the
//     exponent e (or e+1 for a fraction of blocks) that gives the requested std on
//     average. Real MXFP4 quantization picks the scale from the block max; the value
//     distribution is the same in shape, which is all a benchmark or a smoke test needs.
//   - Q8_0: each int8 is an Irwin-Hall sum of four uniform values in [0, 63] minus 126
//     (std 36.94), d = std / 36.94.
// Everything else: Gaussian floats (Irwin-Hall of four 16-bit uniforms) converted or
// quantized with quant::quantize_row.
#include "tools/synth.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <thread>

#include "core/half.h"
#include "core/log.h"
#include "core/timer.h"
#include "gguf/writer.h"
#include "quant/quant.h"
#include "tokenizer/tokenizer.h"

namespace brass::tools {

GptOssShape preset_20b() {
  GptOssShape s;
  s.name = "gpt-oss-20b";
  s.n_layer = 24;
  s.n_embd = 2880;
  s.n_head = 64;
  s.n_head_kv = 8;
  s.head_dim = 64;
  s.n_expert = 32;
  s.n_expert_used = 4;
  s.n_ff = 2880;
  s.n_swa = 128;
  s.n_ctx_train = 131072;
  s.n_vocab = 201088;
  s.rope_theta = 150000.0f;
  s.yarn_factor = 32.0f;
  s.yarn_orig_ctx = 4096;
  s.rms_eps = 1e-5f;
  return s;
}

GptOssShape preset_120b() {
  GptOssShape s = preset_20b();
  s.name = "gpt-oss-120b";
  s.n_layer = 36;
  s.n_expert = 128;
  return s;
}

GptOssShape preset_tiny() {
  GptOssShape s = preset_20b();
  s.name = "gpt-oss-tiny";
  s.n_layer = 4;
  s.n_embd = 64;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.head_dim = 32;  // n_head * head_dim = 128 != n_embd, as in the real model
  s.n_expert = 8;
  s.n_expert_used = 4;
  s.n_ff = 64;
  s.n_swa = 8;
  // YaRN as in the real model (factor 32, theta 150000) over a shorter original context.
  // It must keep the correction range valid for head_dim 32: low = 32 ln(orig / (2 pi 32))
  // / (2 ln theta) > 0 needs orig > 201; 256 gives the range [0.32, 4.98].
  s.yarn_factor = 32.0f;
  s.yarn_orig_ctx = 256;
  s.n_ctx_train = 256 * 32;
  return s;
}

Result<GptOssShape> preset_by_name(std::string_view name) {
  if (name == "20b") return preset_20b();
  if (name == "120b") return preset_120b();
  if (name == "tiny") return preset_tiny();
  return Status::errorf("unknown preset \"{}\" (expected 20b, 120b or tiny)", name);
}

std::vector<TensorPlan> gpt_oss_tensor_plan(const GptOssShape& s, const TypePlan& types) {
  std::vector<TensorPlan> p;
  const int64_t q_dim = s.n_head * s.head_dim, kv_dim = s.n_head_kv * s.head_dim;
  auto mat = [&](std::string name, DType t, std::vector<int64_t> ne) {
    const float std = 1.0f / std::sqrt(static_cast<float>(ne[0]));
    p.push_back({std::move(name), t, std::move(ne), 0.0f, std});
  };
  auto vec = [&](std::string name, std::vector<int64_t> ne, float mean, float std) {
    p.push_back({std::move(name), DType::F32, std::move(ne), mean, std});
  };
  p.push_back({"token_embd.weight", types.dense, {s.n_embd, s.n_vocab}, 0.0f, 1.0f});
  for (int64_t il = 0; il < s.n_layer; ++il) {
    const std::string b = fmt::format("blk.{}.", il);
    vec(b + "attn_norm.weight", {s.n_embd}, 1.0f, 0.05f);
    mat(b + "attn_q.weight", types.dense, {s.n_embd, q_dim});
    vec(b + "attn_q.bias", {q_dim}, 0.0f, 0.02f);
    mat(b + "attn_k.weight", types.dense, {s.n_embd, kv_dim});
    vec(b + "attn_k.bias", {kv_dim}, 0.0f, 0.02f);
    mat(b + "attn_v.weight", types.dense, {s.n_embd, kv_dim});
    vec(b + "attn_v.bias", {kv_dim}, 0.0f, 0.02f);
    mat(b + "attn_output.weight", types.dense, {q_dim, s.n_embd});
    vec(b + "attn_output.bias", {s.n_embd}, 0.0f, 0.02f);
    vec(b + "attn_sinks.weight", {s.n_head}, 0.0f, 1.0f);
    vec(b + "post_attention_norm.weight", {s.n_embd}, 1.0f, 0.05f);
    mat(b + "ffn_gate_inp.weight", DType::F32, {s.n_embd, s.n_expert});
    vec(b + "ffn_gate_inp.bias", {s.n_expert}, 0.0f, 0.02f);
    mat(b + "ffn_gate_exps.weight", types.experts, {s.n_embd, s.n_ff, s.n_expert});
    vec(b + "ffn_gate_exps.bias", {s.n_ff, s.n_expert}, 0.0f, 0.02f);
    mat(b + "ffn_up_exps.weight", types.experts, {s.n_embd, s.n_ff, s.n_expert});
    vec(b + "ffn_up_exps.bias", {s.n_ff, s.n_expert}, 0.0f, 0.02f);
    mat(b + "ffn_down_exps.weight", types.experts, {s.n_ff, s.n_embd, s.n_expert});
    vec(b + "ffn_down_exps.bias", {s.n_embd, s.n_expert}, 0.0f, 0.02f);
  }
  vec("output_norm.weight", {s.n_embd}, 1.0f, 0.05f);
  mat("output.weight", types.dense, {s.n_embd, s.n_vocab});
  return p;
}

uint32_t llama_file_type(const TypePlan& types) {
  // llama_ftype values: ALL_F32 0, MOSTLY_F16 1, MOSTLY_Q8_0 7, MOSTLY_BF16 32, MOSTLY_MXFP4_MOE 38.
  if (types.experts == DType::MXFP4) return 38;
  switch (types.dense) {
    case DType::F32: return 0;
    case DType::F16: return 1;
    case DType::Q8_0: return 7;
    case DType::BF16: return 32;
    default: return 0;
  }
}

void write_gpt_oss_hparams(gguf::Writer& w, const GptOssShape& s, uint32_t file_type,
                           const GptOssMetaExtras& extras) {
  const std::string a = "gpt-oss.";
  w.set_string("general.architecture", "gpt-oss");
  w.set_string("general.type", "model");
  w.set_string("general.name", extras.general_name.empty() ? s.name : extras.general_name);
  w.set_u32(a + "block_count", static_cast<uint32_t>(s.n_layer));
  w.set_u32(a + "context_length", static_cast<uint32_t>(s.n_ctx_train));
  w.set_u32(a + "embedding_length", static_cast<uint32_t>(s.n_embd));
  w.set_u32(a + "feed_forward_length", static_cast<uint32_t>(s.n_ff));
  w.set_u32(a + "attention.head_count", static_cast<uint32_t>(s.n_head));
  w.set_u32(a + "attention.head_count_kv", static_cast<uint32_t>(s.n_head_kv));
  w.set_f32(a + "rope.freq_base", s.rope_theta);
  w.set_f32(a + "attention.layer_norm_rms_epsilon", s.rms_eps);
  w.set_u32(a + "expert_count", static_cast<uint32_t>(s.n_expert));
  w.set_u32(a + "expert_used_count", static_cast<uint32_t>(s.n_expert_used));
  w.set_u32(a + "attention.key_length", static_cast<uint32_t>(s.head_dim));
  w.set_u32(a + "attention.value_length", static_cast<uint32_t>(s.head_dim));
  w.set_u32("general.file_type", file_type);
  w.set_u32(a + "attention.sliding_window", static_cast<uint32_t>(s.n_swa));
  w.set_u32(a + "expert_feed_forward_length", static_cast<uint32_t>(s.n_ff));
  w.set_string(a + "rope.scaling.type", "yarn");
  w.set_f32(a + "rope.scaling.factor", s.yarn_factor);
  w.set_u32(a + "rope.scaling.original_context_length", static_cast<uint32_t>(s.yarn_orig_ctx));
  if (extras.yarn_beta_fast > 0.0f) w.set_f32(a + "rope.scaling.yarn_beta_fast", extras.yarn_beta_fast);
  if (extras.yarn_beta_slow > 0.0f) w.set_f32(a + "rope.scaling.yarn_beta_slow", extras.yarn_beta_slow);
  w.set_u32("general.quantization_version", 2);
}

namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// xoshiro256+ : fast 64-bit generator; quality is ample for synthetic weights.
struct Rng {
  uint64_t s[4];
  explicit Rng(uint64_t seed) {
    for (auto& v : s) v = splitmix64(seed);
  }
  uint64_t next() {
    const uint64_t r = s[0] + s[3];
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = (s[3] << 45) | (s[3] >> 19);
    return r;
  }
  // Approximately standard normal: Irwin-Hall sum of four 16-bit uniforms.
  float gauss() {
    const uint64_t r = next();
    const int64_t sum = static_cast<int64_t>(r & 0xffff) + ((r >> 16) & 0xffff) + ((r >> 32) & 0xffff) + (r >> 48);
    return static_cast<float>(sum - 131070) * (1.7320508f / 65536.0f);
  }
};

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// E2M1 code table: 128 slots whose magnitudes follow round-to-nearest of N(0, 2.2).
struct Mxfp4Table {
  uint8_t mag[128];
  double mean_square = 0;  // of the code value in E2M1 units
  Mxfp4Table() {
    const double v[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    const double sigma = 2.2;
    auto cdf_abs = [&](double x) { return std::erf(x / (sigma * std::sqrt(2.0))); };  // P(|X| < x)
    int slot = 0;
    for (int m = 0; m < 8; ++m) {
      const double hi = m == 7 ? 1.0 : cdf_abs((v[m] + v[m + 1]) / 2);
      const int end = m == 7 ? 128 : static_cast<int>(std::lround(hi * 128));
      for (; slot < end && slot < 128; ++slot) mag[slot] = static_cast<uint8_t>(m);
    }
    for (int i = 0; i < 128; ++i) mean_square += v[mag[i]] * v[mag[i]] / 128.0;
  }
};
const Mxfp4Table& mxfp4_table() {
  static const Mxfp4Table t;
  return t;
}

void fill_mxfp4(Rng& rng, float std, uint8_t* dst, int64_t n_blocks) {
  const auto& t = mxfp4_table();
  // value = code * 2^(e - 127); pick e0 and a fraction f of blocks at e0 + 1 so that
  // E[value^2] = std^2: ms * 4^(e0-127) * (1 + 3f) = std^2.
  const double ratio = static_cast<double>(std) * std / t.mean_square;  // = 4^(e-127)
  const double e_real = 127.0 + 0.5 * std::log2(ratio);
  const int e0 = std::clamp(static_cast<int>(std::floor(e_real)), 1, 253);
  const double f = std::clamp((ratio / std::pow(4.0, e0 - 127) - 1.0) / 3.0, 0.0, 0.999);
  const uint64_t f_threshold = static_cast<uint64_t>(f * 18446744073709551615.0);
  for (int64_t b = 0; b < n_blocks; ++b) {
    uint8_t* blk = dst + b * 17;
    blk[0] = static_cast<uint8_t>(rng.next() < f_threshold ? e0 + 1 : e0);
    for (int j = 0; j < 16; j += 4) {
      uint64_t r = rng.next();
      for (int k = 0; k < 4; ++k) {
        const uint8_t lo = static_cast<uint8_t>((r & 0x80) >> 4 | t.mag[r & 0x7f]);
        const uint8_t hi = static_cast<uint8_t>((r & 0x8000) >> 12 | t.mag[(r >> 8) & 0x7f]);
        blk[1 + j + k] = static_cast<uint8_t>(lo | hi << 4);
        r >>= 16;
      }
    }
  }
}

void fill_q8_0(Rng& rng, float std, uint8_t* dst, int64_t n_blocks) {
  const uint16_t d = f32_to_f16(std / 36.94f);
  for (int64_t b = 0; b < n_blocks; ++b) {
    uint8_t* blk = dst + b * 34;
    std::memcpy(blk, &d, 2);
    for (int j = 0; j < 32; j += 2) {
      const uint64_t r = rng.next();
      for (int k = 0; k < 2; ++k) {
        const uint64_t q = r >> (32 * k);
        const int v = static_cast<int>(q & 63) + static_cast<int>((q >> 8) & 63) +
                      static_cast<int>((q >> 16) & 63) + static_cast<int>((q >> 24) & 63) - 126;
        blk[2 + j + k] = static_cast<uint8_t>(static_cast<int8_t>(v));
      }
    }
  }
}

void fill_rows(const TensorPlan& plan, Rng& rng, uint8_t* dst, int64_t n_rows) {
  const int64_t n_in = plan.ne[0];
  const int64_t n = n_in * n_rows;
  switch (plan.type) {
    case DType::MXFP4: return fill_mxfp4(rng, plan.std, dst, n / 32);
    case DType::Q8_0: return fill_q8_0(rng, plan.std, dst, n / 32);
    default: break;
  }
  std::vector<float> row(static_cast<size_t>(n_in));
  const int64_t rb = row_bytes(plan.type, n_in);
  for (int64_t r = 0; r < n_rows; ++r) {
    for (auto& x : row) x = plan.mean + plan.std * rng.gauss();
    uint8_t* out = dst + r * rb;
    if (plan.type == DType::F32) {
      std::memcpy(out, row.data(), static_cast<size_t>(rb));
    } else if (plan.type == DType::F16) {
      for (int64_t i = 0; i < n_in; ++i) {
        const uint16_t h = f32_to_f16(row[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
    } else if (plan.type == DType::BF16) {
      for (int64_t i = 0; i < n_in; ++i) {
        const uint16_t h = f32_to_bf16(row[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
    } else {
      quant::quantize_row(plan.type, row.data(), out, n_in);
    }
  }
}

}  // namespace

void synth_fill(const TensorPlan& plan, uint64_t seed, int threads, uint8_t* dst, int64_t nbytes) {
  const int64_t n_in = plan.ne[0];
  int64_t n_rows = 1;
  for (size_t i = 1; i < plan.ne.size(); ++i) n_rows *= plan.ne[i];
  const int64_t rb = row_bytes(plan.type, n_in);
  BRASS_CHECK(rb * n_rows == nbytes);
  // Fixed chunk size (~1 MiB of output) so the bytes do not depend on the thread count.
  const int64_t rows_per_chunk = std::max<int64_t>(1, (int64_t{1} << 20) / rb);
  const int64_t n_chunks = (n_rows + rows_per_chunk - 1) / rows_per_chunk;
  const uint64_t tensor_seed = seed ^ fnv1a(plan.name);
  std::atomic<int64_t> next{0};
  auto worker = [&] {
    for (int64_t c; (c = next.fetch_add(1)) < n_chunks;) {
      uint64_t s = tensor_seed + static_cast<uint64_t>(c) * 0x9e3779b97f4a7c15ull;
      Rng rng(splitmix64(s));
      const int64_t r0 = c * rows_per_chunk;
      const int64_t nr = std::min(rows_per_chunk, n_rows - r0);
      fill_rows(plan, rng, dst + r0 * rb, nr);
    }
  };
  const int n_threads = static_cast<int>(std::clamp<int64_t>(threads, 1, n_chunks));
  std::vector<std::thread> pool;
  for (int t = 1; t < n_threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
}

Result<SynthStats> synth(const SynthOptions& opts) {
  BRASS_ASSIGN_OR_RETURN(GptOssShape shape, preset_by_name(opts.preset));
  if (opts.out_path.empty()) return Status::error("synth: no output path given");
  for (DType t : {opts.types.dense, opts.types.experts}) {
    if (t != DType::F32 && t != DType::F16 && t != DType::BF16 && t != DType::Q8_0 && t != DType::MXFP4 &&
        !quant::can_quantize(t)) {
      return Status::errorf("synth: cannot generate tensors of type {}", dtype_name(t));
    }
  }
  if (opts.vocab_file.empty()) {
    return Status::error("synth: no vocabulary file (--vocab o200k_base.tiktoken) given");
  }
  BRASS_ASSIGN_OR_RETURN(auto tokenizer,
                         tok::Tokenizer::from_tiktoken(opts.vocab_file, tok::o200k_harmony_specials()));
  if (tokenizer->n_vocab() != shape.n_vocab) {
    return Status::errorf("synth: vocabulary {} has {} tokens, the {} preset expects {}", opts.vocab_file,
                          tokenizer->n_vocab(), opts.preset, shape.n_vocab);
  }

  gguf::Writer w;
  GptOssMetaExtras extras;
  extras.general_name = shape.name + " (synthetic: random weights)";
  write_gpt_oss_hparams(w, shape, llama_file_type(opts.types), extras);
  w.set_bool("brass.synthetic", true);
  w.set_u64("brass.synthetic.seed", opts.seed);
  tokenizer->write_gguf(w);

  const auto plan = gpt_oss_tensor_plan(shape, opts.types);
  for (const auto& t : plan) {
    if (t.ne[0] % traits(t.type).block_size != 0) {
      return Status::errorf("synth: tensor {} row of {} is not a multiple of the {} block ({})", t.name, t.ne[0],
                            dtype_name(t.type), traits(t.type).block_size);
    }
    const uint64_t seed = opts.seed;
    const int threads = opts.threads;
    w.add_tensor(t.name, t.type, t.ne, [t, seed, threads](uint8_t* dst, int64_t nbytes) {
      synth_fill(t, seed, threads, dst, nbytes);
    });
  }

  Timer timer;
  double last_print = -1.0;
  auto progress = [&](int64_t done, int64_t total) {
    if (!opts.progress) return;
    const double s = timer.seconds();
    if (done < total && s - last_print < 0.5) return;
    last_print = s;
    std::fprintf(stderr, "\rsynth: %3d%%  %.2f / %.2f GiB  %.2f GB/s   ", static_cast<int>(100.0 * done / total),
                 done / 1073741824.0, total / 1073741824.0, s > 0 ? done / s / 1e9 : 0.0);
    if (done == total) std::fprintf(stderr, "\n");
  };
  BRASS_TRY(w.write(opts.out_path, progress));

  SynthStats st;
  st.seconds = timer.seconds();
  st.n_tensors = static_cast<int>(plan.size());
  std::FILE* f = std::fopen(opts.out_path.c_str(), "rb");
  if (f) {
    std::fseek(f, 0, SEEK_END);
    st.bytes = std::ftell(f);
    std::fclose(f);
  }
  return st;
}

}  // namespace brass::tools
