// HF gpt-oss checkpoint -> GGUF (see convert.h). Every source tensor is checked (dtype,
// shape) against config.json before the output file is created; tensors are then
// produced one at a time inside gguf::Writer's Fill callbacks, reading straight from the
// mmapped safetensors shards.
#include "tools/convert.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/half.h"
#include "core/log.h"
#include "core/timer.h"
#include "gguf/writer.h"
#include "quant/quant.h"
#include "tokenizer/tokenizer.h"
#include "tools/safetensors.h"

namespace brass::tools {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

Result<int64_t> get_int(const json& j, const std::string& key, const std::string& file) {
  if (!j.contains(key) || !j[key].is_number_integer()) {
    return Status::errorf("{}: key \"{}\" missing or not an integer", file, key);
  }
  return j[key].get<int64_t>();
}
Result<double> get_num(const json& j, const std::string& key, const std::string& file) {
  if (!j.contains(key) || !j[key].is_number()) {
    return Status::errorf("{}: key \"{}\" missing or not a number", file, key);
  }
  return j[key].get<double>();
}

void parallel_rows(int64_t n_rows, int threads, const std::function<void(int64_t)>& fn) {
  std::atomic<int64_t> next{0};
  auto worker = [&] {
    for (int64_t r; (r = next.fetch_add(1)) < n_rows;) fn(r);
  };
  const int n = static_cast<int>(std::clamp<int64_t>(threads, 1, std::max<int64_t>(1, n_rows / 16)));
  std::vector<std::thread> pool;
  for (int t = 1; t < n; ++t) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
}

// Store n floats as `type` (F32/F16/BF16 converted, quantized types via quant::).
void store_row(DType type, const float* src, int64_t n, uint8_t* dst) {
  switch (type) {
    case DType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_f16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_bf16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    default: quant::quantize_row(type, src, dst, n);
  }
}

bool is_float(StDType t) { return t == StDType::BF16 || t == StDType::F16 || t == StDType::F32; }

// GPT-2's byte <-> printable-unicode table (tokenizer.json stores byte-level tokens in it).
std::vector<int> gpt2_unicode_to_byte() {
  std::vector<int> map(512, -1);
  int extra = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    const int cp = printable ? b : 256 + extra++;
    map[static_cast<size_t>(cp)] = b;
  }
  return map;
}

Result<std::string> gpt2_token_to_bytes(const std::string& s, const std::vector<int>& map) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    uint32_t cp;
    int len;
    if (c < 0x80) { cp = c; len = 1; }
    else if ((c >> 5) == 6) { cp = c & 0x1f; len = 2; }
    else if ((c >> 4) == 14) { cp = c & 0x0f; len = 3; }
    else { cp = c & 0x07; len = 4; }
    if (i + len > s.size()) return Status::error("truncated UTF-8");
    for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
    if (cp >= map.size() || map[cp] < 0) return Status::errorf("code point U+{:04X} is not a GPT-2 byte", cp);
    out.push_back(static_cast<char>(map[cp]));
    i += static_cast<size_t>(len);
  }
  return out;
}

std::string base64(std::string_view in) {
  static const char* kA = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    out += kA[v >> 18]; out += kA[(v >> 12) & 63]; out += kA[(v >> 6) & 63]; out += kA[v & 63];
  }
  if (i + 1 == in.size()) {
    const uint32_t v = uint8_t(in[i]) << 16;
    out += kA[v >> 18]; out += kA[(v >> 12) & 63]; out += "==";
  } else if (i + 2 == in.size()) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += kA[v >> 18]; out += kA[(v >> 12) & 63]; out += kA[(v >> 6) & 63]; out += '=';
  }
  return out;
}

struct TempFile {
  std::string path;
  ~TempFile() {
    if (!path.empty()) std::remove(path.c_str());
  }
};

// Specials padded with <|reserved_ID|> up to n_vocab, as o200k_harmony does.
void pad_specials(std::vector<tok::SpecialToken>& specials, int32_t first_free, int32_t n_vocab,
                  const std::vector<bool>& taken) {
  for (int32_t id = first_free; id < n_vocab; ++id) {
    if (id < static_cast<int32_t>(taken.size()) && taken[static_cast<size_t>(id)]) continue;
    specials.push_back({fmt::format("<|reserved_{}|>", id), id});
  }
}

// Tokenizer for the output file: tokenizer.json if present, else the o200k .tiktoken
// (with the harmony specials), truncated to the first n_vocab ranks for toy checkpoints
// whose vocabulary is smaller than o200k's (those are not real vocabularies; the file
// then still loads everywhere).
Result<std::unique_ptr<tok::Tokenizer>> load_tokenizer(const ConvertOptions& opts, int64_t n_vocab,
                                                        std::string* source) {
  const fs::path tj = fs::path(opts.dir) / "tokenizer.json";
  TempFile tmp;
  tmp.path = (fs::temp_directory_path() / fmt::format("brass-convert-{}.tiktoken", getpid())).string();
  if (fs::exists(tj)) {
    json j;
    try {
      std::ifstream in(tj);
      in >> j;
    } catch (const std::exception& e) {
      return Status::errorf("{}: not valid JSON: {}", tj.string(), e.what());
    }
    if (!j.contains("model") || !j["model"].contains("vocab") || !j["model"]["vocab"].is_object()) {
      return Status::errorf("{}: missing model.vocab (expected a byte-level BPE tokenizer)", tj.string());
    }
    const auto map = gpt2_unicode_to_byte();
    std::ofstream out(tmp.path);
    std::vector<bool> taken(static_cast<size_t>(n_vocab), false);
    for (auto it = j["model"]["vocab"].begin(); it != j["model"]["vocab"].end(); ++it) {
      if (!it.value().is_number_integer()) return Status::errorf("{}: vocab[{}] is not an id", tj.string(), it.key());
      const int64_t id = it.value().get<int64_t>();
      auto bytes = gpt2_token_to_bytes(it.key(), map);
      if (!bytes) return bytes.status().with_context(fmt::format("{}: vocab entry \"{}\"", tj.string(), it.key()));
      out << base64(*bytes) << ' ' << id << '\n';
      if (id >= 0 && id < n_vocab) taken[static_cast<size_t>(id)] = true;
    }
    out.close();
    std::vector<tok::SpecialToken> specials;
    int32_t max_special = -1;
    if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
      for (const auto& a : j["added_tokens"]) {
        if (!a.contains("id") || !a.contains("content")) continue;
        const int32_t id = a["id"].get<int32_t>();
        if (id >= 0 && id < n_vocab && taken[static_cast<size_t>(id)]) continue;  // already a BPE token
        specials.push_back({a["content"].get<std::string>(), id});
        if (id >= 0 && id < n_vocab) taken[static_cast<size_t>(id)] = true;
        max_special = std::max(max_special, id);
      }
    }
    int32_t first_free = 0;
    for (int32_t i = 0; i < static_cast<int32_t>(n_vocab); ++i) if (taken[static_cast<size_t>(i)]) first_free = i + 1;
    pad_specials(specials, first_free, static_cast<int32_t>(n_vocab), taken);
    *source = "tokenizer.json";
    auto t = tok::Tokenizer::from_tiktoken(tmp.path, specials);
    if (!t) return t.status().with_context(tj.string());
    return t;
  }
  if (opts.vocab_file.empty()) {
    return Status::errorf("{}: no tokenizer.json and no --vocab o200k_base.tiktoken given", opts.dir);
  }
  const auto specials = tok::o200k_harmony_specials();
  int32_t n_full = 0;
  for (const auto& s : specials) n_full = std::max(n_full, s.id + 1);
  if (n_vocab == n_full) {
    *source = "o200k_harmony (" + opts.vocab_file + ")";
    return tok::Tokenizer::from_tiktoken(opts.vocab_file, specials);
  }
  if (n_vocab > n_full) {
    return Status::errorf("{}: vocab_size {} is larger than o200k_harmony's {} and there is no tokenizer.json",
                          opts.dir, n_vocab, n_full);
  }
  std::ifstream in(opts.vocab_file);
  if (!in) return Status::errorf("{}: cannot open the vocabulary file", opts.vocab_file);
  std::ofstream out(tmp.path);
  std::string line;
  for (int64_t i = 0; i < n_vocab && std::getline(in, line); ++i) out << line << '\n';
  out.close();
  BRASS_LOG_WARN("convert: vocab_size {} < {}: writing the first {} o200k tokens (a toy vocabulary)", n_vocab,
                 n_full, n_vocab);
  *source = fmt::format("o200k truncated to {}", n_vocab);
  return tok::Tokenizer::from_tiktoken(tmp.path, {});
}

}  // namespace

Result<GptOssShape> read_hf_config(const std::string& path, GptOssMetaExtras* extras) {
  json j;
  {
    std::ifstream in(path);
    if (!in) return Status::errorf("{}: cannot open", path);
    try {
      in >> j;
    } catch (const std::exception& e) {
      return Status::errorf("{}: not valid JSON: {}", path, e.what());
    }
  }
  GptOssShape s;
  BRASS_ASSIGN_OR_RETURN(s.n_layer, get_int(j, "num_hidden_layers", path));
  BRASS_ASSIGN_OR_RETURN(s.n_embd, get_int(j, "hidden_size", path));
  BRASS_ASSIGN_OR_RETURN(s.n_head, get_int(j, "num_attention_heads", path));
  BRASS_ASSIGN_OR_RETURN(s.n_head_kv, get_int(j, "num_key_value_heads", path));
  s.head_dim = j.contains("head_dim") ? j["head_dim"].get<int64_t>() : s.n_embd / std::max<int64_t>(1, s.n_head);
  BRASS_ASSIGN_OR_RETURN(s.n_expert, get_int(j, "num_local_experts", path));
  if (j.contains("experts_per_token")) {
    BRASS_ASSIGN_OR_RETURN(s.n_expert_used, get_int(j, "experts_per_token", path));
  } else {
    BRASS_ASSIGN_OR_RETURN(s.n_expert_used, get_int(j, "num_experts_per_tok", path));
  }
  BRASS_ASSIGN_OR_RETURN(s.n_ff, get_int(j, "intermediate_size", path));
  BRASS_ASSIGN_OR_RETURN(s.n_swa, get_int(j, "sliding_window", path));
  BRASS_ASSIGN_OR_RETURN(s.n_ctx_train, get_int(j, "max_position_embeddings", path));
  BRASS_ASSIGN_OR_RETURN(s.n_vocab, get_int(j, "vocab_size", path));
  BRASS_ASSIGN_OR_RETURN(double theta, get_num(j, "rope_theta", path));
  s.rope_theta = static_cast<float>(theta);
  BRASS_ASSIGN_OR_RETURN(double eps, get_num(j, "rms_norm_eps", path));
  s.rms_eps = static_cast<float>(eps);
  if (!j.contains("rope_scaling") || !j["rope_scaling"].is_object()) {
    return Status::errorf("{}: key \"rope_scaling\" missing (gpt-oss uses YaRN)", path);
  }
  const json& rs = j["rope_scaling"];
  const std::string type = rs.value("rope_type", rs.value("type", std::string()));
  if (type != "yarn") return Status::errorf("{}: rope_scaling.rope_type is \"{}\", expected \"yarn\"", path, type);
  BRASS_ASSIGN_OR_RETURN(double factor, get_num(rs, "factor", path + ": rope_scaling"));
  s.yarn_factor = static_cast<float>(factor);
  BRASS_ASSIGN_OR_RETURN(s.yarn_orig_ctx, get_int(rs, "original_max_position_embeddings", path + ": rope_scaling"));
  if (extras) {
    extras->yarn_beta_fast = static_cast<float>(rs.value("beta_fast", 0.0));
    extras->yarn_beta_slow = static_cast<float>(rs.value("beta_slow", 0.0));
  }
  for (auto [v, name] : {std::pair{s.n_layer, "num_hidden_layers"}, {s.n_embd, "hidden_size"},
                         {s.n_head, "num_attention_heads"}, {s.n_head_kv, "num_key_value_heads"},
                         {s.head_dim, "head_dim"}, {s.n_expert, "num_local_experts"},
                         {s.n_expert_used, "experts_per_token"}, {s.n_ff, "intermediate_size"},
                         {s.n_vocab, "vocab_size"}}) {
    if (v <= 0) return Status::errorf("{}: \"{}\" must be positive, found {}", path, name, v);
  }
  if (s.n_head % s.n_head_kv != 0) {
    return Status::errorf("{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", path, s.n_head,
                          s.n_head_kv);
  }
  if (s.n_expert_used > s.n_expert) {
    return Status::errorf("{}: experts_per_token {} > num_local_experts {}", path, s.n_expert_used, s.n_expert);
  }
  if (s.n_embd % 32 != 0 || s.n_ff % 32 != 0) {
    return Status::errorf("{}: hidden_size {} and intermediate_size {} must be multiples of 32 (MXFP4 blocks)", path,
                          s.n_embd, s.n_ff);
  }
  return s;
}

Result<ConvertStats> convert(const ConvertOptions& opts) {
  ConvertStats stats;
  Timer timer;
  if (opts.dense != DType::F32 && opts.dense != DType::F16 && opts.dense != DType::BF16 && opts.dense != DType::Q8_0) {
    return Status::errorf("convert: --type {} not supported (f32, f16, bf16, q8_0)", dtype_name(opts.dense));
  }
  GptOssMetaExtras extras;
  BRASS_ASSIGN_OR_RETURN(GptOssShape s, read_hf_config((fs::path(opts.dir) / "config.json").string(), &extras));
  extras.general_name = fs::path(opts.dir).filename().string();
  if (extras.general_name.empty()) extras.general_name = fs::path(opts.dir).parent_path().filename().string();
  s.name = extras.general_name;
  BRASS_ASSIGN_OR_RETURN(auto ckpt, Checkpoint::open(opts.dir));

  const int64_t E = s.n_expert, F = s.n_ff, D = s.n_embd;
  const int64_t q_dim = s.n_head * s.head_dim, kv_dim = s.n_head_kv * s.head_dim;
  const std::string l0 = "model.layers.0.mlp.experts.";
  stats.source_mxfp4 = ckpt->find(l0 + "gate_up_proj_blocks") != nullptr;
  TypePlan types;
  types.dense = opts.dense;
  types.experts = (stats.source_mxfp4 || opts.experts_mxfp4) ? DType::MXFP4 : opts.dense;

  gguf::Writer w;
  write_gpt_oss_hparams(w, s, llama_file_type(types), extras);
  BRASS_ASSIGN_OR_RETURN(auto tokenizer, load_tokenizer(opts, s.n_vocab, &stats.tokenizer_source));
  if (tokenizer->n_vocab() != s.n_vocab) {
    return Status::errorf("{}: tokenizer has {} tokens but config.json vocab_size is {}", opts.dir,
                          tokenizer->n_vocab(), s.n_vocab);
  }
  tokenizer->write_gguf(w);

  const int threads = opts.threads;
  auto find_float = [&](const std::string& name, const std::vector<int64_t>& shape) -> Result<const StTensor*> {
    const StTensor* t = ckpt->find(name);
    if (!t) return Status::errorf("{}: tensor {} is missing", opts.dir, name);
    if (!is_float(t->dtype)) {
      return Status::errorf("{}: tensor {}: expected BF16, F16 or F32, found {}", t->file, name, st_dtype_name(t->dtype));
    }
    if (t->shape != shape) {
      StTensor want;
      want.shape = shape;
      return Status::errorf("{}: tensor {}: expected shape {}, found {}", t->file, name, want.shape_str(), t->shape_str());
    }
    return t;
  };
  // A (rows, cols) source matrix or vector written row by row as `type` (GGUF ne = {cols, rows}).
  auto add_plain = [&](const std::string& src, const std::string& dst, DType type,
                       std::vector<int64_t> shape) -> Status {
    BRASS_ASSIGN_OR_RETURN(const StTensor* t, find_float(src, shape));
    const int64_t cols = shape.back();
    std::vector<int64_t> ne(shape.rbegin(), shape.rend());
    if (cols % traits(type).block_size != 0) type = DType::F32;
    w.add_tensor(dst, type, ne, [t, type, cols, threads](uint8_t* out, int64_t nbytes) {
      const int64_t rb = row_bytes(type, cols);
      parallel_rows(nbytes / rb, threads, [&](int64_t r) {
        std::vector<float> row(static_cast<size_t>(cols));
        for (int64_t i = 0; i < cols; ++i) row[i] = st_get_float(*t, r * cols + i);
        store_row(type, row.data(), cols, out + r * rb);
      });
    });
    return Status::ok();
  };
  // Experts from an MXFP4 checkpoint: GGUF row (e, r) <- HF row (e, r * stride + offset).
  auto add_mxfp4 = [&](const std::string& base, const std::string& dst, int64_t hf_rows, int64_t n_in,
                       int64_t stride, int64_t offset) -> Status {
    const int64_t nb = n_in / 32;
    BRASS_ASSIGN_OR_RETURN(const StTensor* blocks, ckpt->require(base + "_blocks", StDType::U8, {E, hf_rows, nb, 16}));
    BRASS_ASSIGN_OR_RETURN(const StTensor* scales, ckpt->require(base + "_scales", StDType::U8, {E, hf_rows, nb}));
    const int64_t out_rows = hf_rows / stride;
    w.add_tensor(dst, DType::MXFP4, {n_in, out_rows, E},
                 [=](uint8_t* out, int64_t nbytes) {
                   const int64_t rb = nb * 17;
                   parallel_rows(E * out_rows, threads, [&](int64_t r) {
                     const int64_t e = r / out_rows, o = r % out_rows;
                     const int64_t hf_row = e * hf_rows + o * stride + offset;
                     for (int64_t b = 0; b < nb; ++b) {
                       quant::mxfp4_hf_to_gguf_block(blocks->data + (hf_row * nb + b) * 16,
                                                     scales->data[hf_row * nb + b], out + r * rb + b * 17);
                     }
                   });
                 });
    return Status::ok();
  };
  // Experts from bf16 module parameters W (E, n_in, n_cols_total) used as x @ W: GGUF
  // row (e, o) element i = W[e, i, o * stride + offset].
  auto add_dense_experts = [&](const std::string& src, const std::string& dst, int64_t n_in, int64_t n_cols,
                               int64_t stride, int64_t offset) -> Status {
    BRASS_ASSIGN_OR_RETURN(const StTensor* t, find_float(src, {E, n_in, n_cols}));
    const int64_t out_rows = n_cols / stride;
    const DType type = types.experts;
    w.add_tensor(dst, type, {n_in, out_rows, E}, [=](uint8_t* out, int64_t nbytes) {
      const int64_t rb = row_bytes(type, n_in);
      parallel_rows(E * out_rows, threads, [&](int64_t r) {
        const int64_t e = r / out_rows, o = r % out_rows;
        std::vector<float> row(static_cast<size_t>(n_in));
        for (int64_t i = 0; i < n_in; ++i) row[i] = st_get_float(*t, (e * n_in + i) * n_cols + o * stride + offset);
        store_row(type, row.data(), n_in, out + r * rb);
      });
    });
    return Status::ok();
  };
  // Expert biases (E, n_cols): GGUF (n_cols/stride, E) taking every stride-th column.
  auto add_expert_bias = [&](const std::string& src, const std::string& dst, int64_t n_cols, int64_t stride,
                             int64_t offset) -> Status {
    BRASS_ASSIGN_OR_RETURN(const StTensor* t, find_float(src, {E, n_cols}));
    const int64_t m = n_cols / stride;
    w.add_tensor(dst, DType::F32, {m, E}, [=](uint8_t* out, int64_t) {
      for (int64_t e = 0; e < E; ++e) {
        for (int64_t j = 0; j < m; ++j) {
          const float v = st_get_float(*t, e * n_cols + j * stride + offset);
          std::memcpy(out + 4 * (e * m + j), &v, 4);
        }
      }
    });
    return Status::ok();
  };

  BRASS_TRY(add_plain("model.embed_tokens.weight", "token_embd.weight", opts.dense, {s.n_vocab, D}));
  for (int64_t il = 0; il < s.n_layer; ++il) {
    const std::string h = fmt::format("model.layers.{}.", il), g = fmt::format("blk.{}.", il);
    BRASS_TRY(add_plain(h + "input_layernorm.weight", g + "attn_norm.weight", DType::F32, {D}));
    BRASS_TRY(add_plain(h + "self_attn.q_proj.weight", g + "attn_q.weight", opts.dense, {q_dim, D}));
    BRASS_TRY(add_plain(h + "self_attn.q_proj.bias", g + "attn_q.bias", DType::F32, {q_dim}));
    BRASS_TRY(add_plain(h + "self_attn.k_proj.weight", g + "attn_k.weight", opts.dense, {kv_dim, D}));
    BRASS_TRY(add_plain(h + "self_attn.k_proj.bias", g + "attn_k.bias", DType::F32, {kv_dim}));
    BRASS_TRY(add_plain(h + "self_attn.v_proj.weight", g + "attn_v.weight", opts.dense, {kv_dim, D}));
    BRASS_TRY(add_plain(h + "self_attn.v_proj.bias", g + "attn_v.bias", DType::F32, {kv_dim}));
    BRASS_TRY(add_plain(h + "self_attn.o_proj.weight", g + "attn_output.weight", opts.dense, {D, q_dim}));
    BRASS_TRY(add_plain(h + "self_attn.o_proj.bias", g + "attn_output.bias", DType::F32, {D}));
    BRASS_TRY(add_plain(h + "self_attn.sinks", g + "attn_sinks.weight", DType::F32, {s.n_head}));
    BRASS_TRY(add_plain(h + "post_attention_layernorm.weight", g + "post_attention_norm.weight", DType::F32, {D}));
    BRASS_TRY(add_plain(h + "mlp.router.weight", g + "ffn_gate_inp.weight", DType::F32, {E, D}));
    BRASS_TRY(add_plain(h + "mlp.router.bias", g + "ffn_gate_inp.bias", DType::F32, {E}));
    const std::string x = h + "mlp.experts.";
    if (stats.source_mxfp4) {
      BRASS_TRY(add_mxfp4(x + "gate_up_proj", g + "ffn_gate_exps.weight", 2 * F, D, 2, 0));
      BRASS_TRY(add_mxfp4(x + "gate_up_proj", g + "ffn_up_exps.weight", 2 * F, D, 2, 1));
      BRASS_TRY(add_mxfp4(x + "down_proj", g + "ffn_down_exps.weight", D, F, 1, 0));
    } else {
      BRASS_TRY(add_dense_experts(x + "gate_up_proj", g + "ffn_gate_exps.weight", D, 2 * F, 2, 0));
      BRASS_TRY(add_dense_experts(x + "gate_up_proj", g + "ffn_up_exps.weight", D, 2 * F, 2, 1));
      BRASS_TRY(add_dense_experts(x + "down_proj", g + "ffn_down_exps.weight", F, D, 1, 0));
    }
    BRASS_TRY(add_expert_bias(x + "gate_up_proj_bias", g + "ffn_gate_exps.bias", 2 * F, 2, 0));
    BRASS_TRY(add_expert_bias(x + "gate_up_proj_bias", g + "ffn_up_exps.bias", 2 * F, 2, 1));
    BRASS_TRY(add_expert_bias(x + "down_proj_bias", g + "ffn_down_exps.bias", D, 1, 0));
  }
  BRASS_TRY(add_plain("model.norm.weight", "output_norm.weight", DType::F32, {D}));
  BRASS_TRY(add_plain("lm_head.weight", "output.weight", opts.dense, {s.n_vocab, D}));
  stats.n_tensors = 3 + static_cast<int>(s.n_layer) * 19;

  double last_print = -1.0;
  auto progress = [&](int64_t done, int64_t total) {
    if (!opts.progress) return;
    const double t = timer.seconds();
    if (done < total && t - last_print < 0.5) return;
    last_print = t;
    std::fprintf(stderr, "\rconvert: %3d%%  %.2f / %.2f GiB  %.2f GB/s   ", static_cast<int>(100.0 * done / total),
                 done / 1073741824.0, total / 1073741824.0, t > 0 ? done / t / 1e9 : 0.0);
    if (done == total) std::fprintf(stderr, "\n");
  };
  BRASS_TRY(w.write(opts.out_path, progress));
  stats.seconds = timer.seconds();
  std::error_code ec;
  stats.bytes = static_cast<int64_t>(fs::file_size(opts.out_path, ec));
  return stats;
}

}  // namespace brass::tools
