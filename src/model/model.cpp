// Model loading and the gpt-oss forward pass: an explicit per-layer loop over backend
// ops (see forward_round). The graph, as in openai/gpt-oss torch/model.py and llama.cpp
// src/models/openai-moe.cpp:
//   x = embed(tokens)
//   per layer il:
//     h = rmsnorm(x) * attn_norm
//     q, k, v = h Wq^T + bq, h Wk^T + bk, h Wv^T + bv
//     q, k = rope(q), rope(k)                      (NeoX half split, YaRN freqs + concentration)
//     store k, v in the cache (ring on sliding layers)
//     a = attention(q, cache)                      (GQA grouped, sinks, window n_swa on even il)
//     x = x + (a Wo^T + bo)
//     h = rmsnorm(x) * post_attention_norm
//     top-k of (h Wr^T + br), softmax over those k
//     x = x + sum_j w_j * (down_e(swiglu_oai(gate_e h + bg, up_e h + bu)) + bd)
//   logits = rmsnorm(x) * output_norm, then x Wout^T (untied, no soft-cap)
#include "model/model.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "core/log.h"
#include "gguf/reader.h"

namespace brass::model {

Model::~Model() = default;

Result<std::unique_ptr<Model>> Model::load(const std::string& path, const ModelOptions& o) {
  BRASS_ASSIGN_OR_RETURN(auto reader, gguf::Reader::open(path));
  return load(std::move(reader), o);
}

Result<std::unique_ptr<Model>> Model::load(std::unique_ptr<gguf::Reader> reader, const ModelOptions& o) {
  std::unique_ptr<Model> m(new Model());
  m->reader_ = std::move(reader);
  m->opt_ = o;
  BRASS_ASSIGN_OR_RETURN(m->cfg_, load_config(*m->reader_));
  BRASS_ASSIGN_OR_RETURN(m->w_, bind_weights(*m->reader_, m->cfg_));
  m->rope_ = compute_rope_freqs(m->cfg_.rope_params(o.yarn_rounded));
  KvCacheOptions kvo;
  kvo.type = o.kv_type;
  kvo.n_ctx_max = o.n_ctx > 0 ? std::min(o.n_ctx, m->cfg_.n_ctx_train) : m->cfg_.n_ctx_train;
  kvo.max_chunk_tokens = o.max_chunk_tokens;
  BRASS_ASSIGN_OR_RETURN(m->kv_, KvCache::create(m->cfg_, kvo));
  m->be_ = backend::make_cpu_backend(o.n_threads);
  const int64_t half = m->cfg_.head_dim / 2;
  BRASS_ASSIGN_OR_RETURN(m->inv_freq_, m->be_->alloc(half * sizeof(float)));
  m->be_->upload(m->inv_freq_->data(), m->rope_.inv_freq.data(), half * sizeof(float));
  BRASS_LOG_INFO("{}: {}", m->reader_->path(), m->summary());
  return m;
}

std::string Model::summary() const { return config_summary(cfg_, *reader_, kv_.elt_bytes()); }

Status Model::ensure_scratch(int64_t n_tok, int64_t n_out) {
  const GptOssConfig& c = cfg_;
  auto grow = [&](std::unique_ptr<backend::Buffer>& b, int64_t bytes) -> Status {
    if (b && static_cast<int64_t>(b->size()) >= bytes) return Status::ok();
    BRASS_ASSIGN_OR_RETURN(b, be_->alloc(static_cast<size_t>(bytes)));
    return Status::ok();
  };
  if (n_tok > cap_tok_) {
    const int64_t f = sizeof(float);
    BRASS_TRY(grow(x_, n_tok * c.n_embd * f));
    BRASS_TRY(grow(xn_, n_tok * c.n_embd * f));
    BRASS_TRY(grow(q_, n_tok * c.q_dim() * f));
    BRASS_TRY(grow(k_, n_tok * c.kv_dim() * f));
    BRASS_TRY(grow(v_, n_tok * c.kv_dim() * f));
    BRASS_TRY(grow(attn_, n_tok * c.q_dim() * f));
    BRASS_TRY(grow(proj_, n_tok * c.n_embd * f));
    BRASS_TRY(grow(rlog_, n_tok * c.n_expert * f));
    BRASS_TRY(grow(rids_, n_tok * c.n_expert_used * 4));
    BRASS_TRY(grow(rw_, n_tok * c.n_expert_used * f));
    BRASS_TRY(grow(tok_, n_tok * 4));
    BRASS_TRY(grow(pos_, n_tok * 4));
    cap_tok_ = n_tok;
  }
  if (n_out > cap_out_) {
    BRASS_TRY(grow(out_rows_, n_out * 4));
    BRASS_TRY(grow(out_x_, n_out * c.n_embd * sizeof(float)));
    BRASS_TRY(grow(logits_, n_out * c.n_vocab * sizeof(float)));
    cap_out_ = n_out;
  }
  return Status::ok();
}

Status Model::forward(std::span<const SeqChunk> batch, ForwardOutput& out) {
  // Validate everything before touching any state.
  std::set<int32_t> seen;
  int64_t total_rows = 0;
  out.n_vocab = cfg_.n_vocab;
  out.row0.assign(batch.size(), 0);
  out.n_rows.assign(batch.size(), 0);
  for (size_t c = 0; c < batch.size(); ++c) {
    const SeqChunk& ch = batch[c];
    if (!seen.insert(ch.seq_id).second)
      return Status::errorf("forward: sequence {} appears twice in one batch", ch.seq_id);
    if (ch.tokens.empty()) return Status::errorf("forward: sequence {}: empty chunk", ch.seq_id);
    BRASS_ASSIGN_OR_RETURN(int64_t len, kv_.length(ch.seq_id));
    if (ch.pos0 != len)
      return Status::errorf("forward: sequence {}: chunk starts at position {} but the sequence has {} tokens",
                            ch.seq_id, ch.pos0, len);
    if (len + static_cast<int64_t>(ch.tokens.size()) > kv_.n_ctx_max())
      return Status::errorf("forward: sequence {}: {} tokens exceed the context of {}", ch.seq_id,
                            len + ch.tokens.size(), kv_.n_ctx_max());
    for (size_t i = 0; i < ch.tokens.size(); ++i) {
      if (ch.tokens[i] < 0 || ch.tokens[i] >= cfg_.n_vocab)
        return Status::errorf("forward: sequence {}: token {} at index {} is outside the vocabulary [0, {})",
                              ch.seq_id, ch.tokens[i], i, cfg_.n_vocab);
    }
    out.row0[c] = total_rows;
    out.n_rows[c] = ch.all_logits ? static_cast<int64_t>(ch.tokens.size()) : 1;
    total_rows += out.n_rows[c];
  }
  out.logits.assign(total_rows * cfg_.n_vocab, 0.0f);

  // Rounds of at most max_chunk_tokens tokens per sequence.
  const int64_t max_chunk = kv_.max_chunk_tokens();
  for (int64_t off = 0;; off += max_chunk) {
    std::vector<Step> steps;
    for (size_t c = 0; c < batch.size(); ++c) {
      const SeqChunk& ch = batch[c];
      const int64_t n = static_cast<int64_t>(ch.tokens.size());
      if (off >= n) continue;
      Step s;
      s.seq_id = ch.seq_id;
      s.tokens = ch.tokens.subspan(off, std::min(max_chunk, n - off));
      s.pos0 = ch.pos0 + off;
      const int64_t end = off + static_cast<int64_t>(s.tokens.size());
      if (ch.all_logits) {
        s.out_first = 0;
        s.out_dst = out.logits.data() + (out.row0[c] + off) * cfg_.n_vocab;
      } else if (end == n) {
        s.out_first = static_cast<int64_t>(s.tokens.size()) - 1;
        s.out_dst = out.logits.data() + out.row0[c] * cfg_.n_vocab;
      } else {
        s.out_first = -1;
        s.out_dst = nullptr;
      }
      steps.push_back(s);
    }
    if (steps.empty()) break;
    BRASS_TRY(forward_round(steps));
  }
  return Status::ok();
}

Status Model::forward_round(std::span<const Step> steps) {
  const GptOssConfig& c = cfg_;
  backend::Backend& be = *be_;
  // Token rows: steps in order. Output rows: requested rows in the same order.
  std::vector<int32_t> tokens, positions, out_rows;
  std::vector<int64_t> tok0(steps.size());
  for (size_t s = 0; s < steps.size(); ++s) {
    BRASS_TRY(kv_.reserve(steps[s].seq_id, steps[s].pos0, static_cast<int64_t>(steps[s].tokens.size())));
    tok0[s] = static_cast<int64_t>(tokens.size());
    for (size_t i = 0; i < steps[s].tokens.size(); ++i) {
      if (steps[s].out_first >= 0 && static_cast<int64_t>(i) >= steps[s].out_first)
        out_rows.push_back(static_cast<int32_t>(tokens.size()));
      tokens.push_back(steps[s].tokens[i]);
      positions.push_back(static_cast<int32_t>(steps[s].pos0 + static_cast<int64_t>(i)));
    }
  }
  const int64_t n_tok = static_cast<int64_t>(tokens.size());
  const int64_t n_out = static_cast<int64_t>(out_rows.size());
  BRASS_TRY(ensure_scratch(n_tok, std::max<int64_t>(n_out, 1)));
  be.upload(tok_->data(), tokens.data(), n_tok * 4);
  be.upload(pos_->data(), positions.data(), n_tok * 4);
  if (n_out) be.upload(out_rows_->data(), out_rows.data(), n_out * 4);

  float* x = x_->as<float>();        // (n_tok, n_embd) residual stream
  float* xn = xn_->as<float>();      // (n_tok, n_embd) normed
  float* q = q_->as<float>();        // (n_tok, n_head, head_dim)
  float* k = k_->as<float>();        // (n_tok, n_head_kv, head_dim)
  float* v = v_->as<float>();        // (n_tok, n_head_kv, head_dim)
  float* attn = attn_->as<float>();  // (n_tok, n_head * head_dim)
  float* proj = proj_->as<float>();  // (n_tok, n_embd)
  float* rlog = rlog_->as<float>();  // (n_tok, n_expert)
  int32_t* rids = rids_->as<int32_t>();  // (n_tok, n_expert_used)
  float* rw = rw_->as<float>();          // (n_tok, n_expert_used)
  const int32_t* pos = pos_->as<int32_t>();
  const float* inv_freq = inv_freq_->as<float>();

  be.embed({.table = w_.token_embd, .tokens = tok_->as<int32_t>(), .n_tok = n_tok, .out = x});

  std::vector<backend::AttnSeq> seqs(steps.size());
  for (int64_t il = 0; il < c.n_layer; ++il) {
    const LayerWeights& L = w_.layers[il];
    // ---- attention block ----
    be.rms_norm({.x = x, .weight = L.attn_norm, .out = xn, .n_rows = n_tok, .n = c.n_embd, .eps = c.rms_eps});
    be.matmul({.w = L.wq, .bias = L.bq, .x = xn, .y = q, .n_tok = n_tok});
    be.matmul({.w = L.wk, .bias = L.bk, .x = xn, .y = k, .n_tok = n_tok});
    be.matmul({.w = L.wv, .bias = L.bv, .x = xn, .y = v, .n_tok = n_tok});
    be.rope({.x = q, .pos = pos, .inv_freq = inv_freq, .mscale = rope_.mscale, .n_tok = n_tok,
             .n_heads = c.n_head, .head_dim = c.head_dim});
    be.rope({.x = k, .pos = pos, .inv_freq = inv_freq, .mscale = rope_.mscale, .n_tok = n_tok,
             .n_heads = c.n_head_kv, .head_dim = c.head_dim});
    for (size_t s = 0; s < steps.size(); ++s)
      seqs[s] = kv_.view(steps[s].seq_id, il, tok0[s], steps[s].pos0, static_cast<int64_t>(steps[s].tokens.size()));
    be.kv_store({.k = k, .v = v, .kv_type = kv_.type(), .n_head_kv = c.n_head_kv, .head_dim = c.head_dim,
                 .seqs = seqs});
    be.attention({.q = q, .sinks = L.sinks, .out = attn, .kv_type = kv_.type(), .n_head = c.n_head,
                  .n_head_kv = c.n_head_kv, .head_dim = c.head_dim,
                  .window = c.is_swa_layer(il) ? static_cast<int32_t>(c.n_swa) : 0,
                  .scale = c.attn_scale(), .seqs = seqs});
    be.matmul({.w = L.wo, .bias = L.bo, .x = attn, .y = proj, .n_tok = n_tok});
    be.add({.y = x, .x = proj, .n = n_tok * c.n_embd});
    // ---- MoE block ----
    be.rms_norm({.x = x, .weight = L.post_attn_norm, .out = xn, .n_rows = n_tok, .n = c.n_embd, .eps = c.rms_eps});
    be.matmul({.w = L.router, .bias = L.router_b, .x = xn, .y = rlog, .n_tok = n_tok});
    be.router({.logits = rlog, .ids = rids, .weights = rw, .n_tok = n_tok, .n_expert = c.n_expert,
               .k = c.n_expert_used});
    be.moe({.x = xn, .ids = rids, .weights = rw, .gate = L.gate_exps, .up = L.up_exps, .down = L.down_exps,
            .gate_bias = L.gate_b, .up_bias = L.up_b, .down_bias = L.down_b, .out = proj, .n_tok = n_tok,
            .k = c.n_expert_used, .alpha = c.swiglu_alpha, .limit = c.swiglu_limit});
    be.add({.y = x, .x = proj, .n = n_tok * c.n_embd});
  }

  if (n_out > 0) {
    float* ox = out_x_->as<float>();      // (n_out, n_embd)
    float* lg = logits_->as<float>();     // (n_out, n_vocab)
    be.gather_rows({.x = x, .rows = out_rows_->as<int32_t>(), .out = ox, .n_rows = n_out, .n = c.n_embd});
    be.rms_norm({.x = ox, .weight = w_.output_norm, .out = ox, .n_rows = n_out, .n = c.n_embd, .eps = c.rms_eps});
    be.matmul({.w = w_.output, .bias = nullptr, .x = ox, .y = lg, .n_tok = n_out});
    be.synchronize();
    int64_t row = 0;
    for (const Step& s : steps) {
      if (s.out_first < 0) continue;
      const int64_t n = static_cast<int64_t>(s.tokens.size()) - s.out_first;
      be.download(s.out_dst, lg + row * c.n_vocab, n * c.n_vocab * sizeof(float));
      row += n;
    }
  }
  be.synchronize();
  for (const Step& s : steps) kv_.commit(s.seq_id, s.pos0 + static_cast<int64_t>(s.tokens.size()));
  return Status::ok();
}

}  // namespace brass::model
