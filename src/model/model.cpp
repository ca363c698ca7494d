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
#include <functional>
#include <set>

#include "core/log.h"
#include "core/timer.h"
#include "gguf/reader.h"

namespace brass::model {

Model::~Model() = default;

Result<std::unique_ptr<Model>> Model::load(const std::string& path, const ModelOptions& o) {
  BRASS_ASSIGN_OR_RETURN(auto reader, gguf::Reader::open(path));
  return load(std::move(reader), o);
}

Result<std::unique_ptr<Model>> Model::load(std::unique_ptr<gguf::Reader> reader, const ModelOptions& o) {
  return load(std::move(reader), o, backend::make_cpu_backend(o.n_threads));
}

Result<std::unique_ptr<Model>> Model::load(std::unique_ptr<gguf::Reader> reader, const ModelOptions& o,
                                           std::unique_ptr<backend::Backend> be) {
  if (!be) return Status::error("model: no backend given");
  std::unique_ptr<Model> m(new Model());
  m->reader_ = std::move(reader);
  m->opt_ = o;
  m->be_ = std::move(be);
  BRASS_ASSIGN_OR_RETURN(m->cfg_, load_config(*m->reader_));
  BRASS_ASSIGN_OR_RETURN(m->w_, bind_weights(*m->reader_, m->cfg_));
  if (!m->be_->host_memory()) BRASS_TRY(m->prepare_weights());
  m->rope_ = compute_rope_freqs(m->cfg_.rope_params(o.yarn_rounded));
  KvCacheOptions kvo;
  kvo.type = o.kv_type;
  kvo.n_ctx_max = o.n_ctx > 0 ? std::min(o.n_ctx, m->cfg_.n_ctx_train) : m->cfg_.n_ctx_train;
  kvo.max_chunk_tokens = o.max_chunk_tokens;
  kvo.device = m->be_->host_memory() ? nullptr : m->be_.get();
  kvo.pool_tokens = o.kv_tokens;
  kvo.block_size = o.kv_block_size;
  BRASS_ASSIGN_OR_RETURN(m->kv_, KvCache::create(m->cfg_, kvo));
  const int64_t half = m->cfg_.head_dim / 2;
  BRASS_ASSIGN_OR_RETURN(m->inv_freq_, m->be_->alloc(half * sizeof(float)));
  m->be_->upload(m->inv_freq_->data(), m->rope_.inv_freq.data(), half * sizeof(float));
  BRASS_LOG_INFO("{}: {} (backend {})", m->reader_->path(), m->summary(), m->be_->name());
  return m;
}

// Device backends: every weight and f32 vector through prepare_weight (one copy each).
Status Model::prepare_weights() {
  backend::Backend& be = *be_;
  const GptOssConfig& c = cfg_;
  auto mat = [&](WeightView& w) -> Status {
    BRASS_ASSIGN_OR_RETURN(w, be.prepare_weight(w));
    return Status::ok();
  };
  auto vec = [&](const float*& p, int64_t n) -> Status {
    WeightView w;
    w.type = DType::F32;
    w.data = p;
    w.ne[0] = n;
    BRASS_ASSIGN_OR_RETURN(w, be.prepare_weight(w));
    p = static_cast<const float*>(w.data);
    return Status::ok();
  };
  BRASS_TRY(mat(w_.token_embd));
  BRASS_ASSIGN_OR_RETURN(w_.output, be.prepare_output_head(w_.output));
  BRASS_TRY(vec(w_.output_norm, c.n_embd));
  for (LayerWeights& L : w_.layers) {
    for (WeightView* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.router, &L.gate_exps, &L.up_exps, &L.down_exps})
      BRASS_TRY(mat(*w));
    BRASS_TRY(vec(L.attn_norm, c.n_embd));
    BRASS_TRY(vec(L.post_attn_norm, c.n_embd));
    BRASS_TRY(vec(L.bq, c.q_dim()));
    BRASS_TRY(vec(L.bk, c.kv_dim()));
    BRASS_TRY(vec(L.bv, c.kv_dim()));
    BRASS_TRY(vec(L.bo, c.n_embd));
    BRASS_TRY(vec(L.sinks, c.n_head));
    BRASS_TRY(vec(L.router_b, c.n_expert));
    BRASS_TRY(vec(L.gate_b, c.n_ff * c.n_expert));
    BRASS_TRY(vec(L.up_b, c.n_ff * c.n_expert));
    BRASS_TRY(vec(L.down_b, c.n_embd * c.n_expert));
  }
  be.synchronize();
  return Status::ok();
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
    BRASS_TRY(grow(tokpos_, 2 * n_tok * 4));
    cap_tok_ = n_tok;
    ++scratch_gen_;
  }
  if (n_out > cap_out_) {
    BRASS_TRY(grow(out_rows_, n_out * 4));
    BRASS_TRY(grow(out_x_, n_out * c.n_embd * sizeof(float)));
    BRASS_TRY(grow(logits_, n_out * c.n_vocab * sizeof(float)));
    // picks_ keeps its rows: the next submitted round's feed chunks copy from them.
    std::unique_ptr<backend::Buffer> old_picks = std::move(picks_);
    BRASS_TRY(grow(picks_, n_out * 4));
    if (old_picks) be_->copy(picks_->data(), old_picks->data(), old_picks->size());
    cap_out_ = n_out;
    ++scratch_gen_;
  }
  return Status::ok();
}

Status Model::check_batch(std::span<const SeqChunk> batch, const char* what) const {
  std::set<int32_t> seen;
  int64_t blocks = 0;
  for (const SeqChunk& ch : batch) {
    if (!seen.insert(ch.seq_id).second)
      return Status::errorf("{}: sequence {} appears twice in one batch", what, ch.seq_id);
    if (ch.feed && !ch.tokens.empty())
      return Status::errorf("{}: sequence {}: a feed chunk takes its token from the last pick; found {} tokens", what,
                            ch.seq_id, ch.tokens.size());
    if (!ch.feed && ch.tokens.empty()) return Status::errorf("{}: sequence {}: empty chunk", what, ch.seq_id);
    const int64_t n = ch.feed ? 1 : static_cast<int64_t>(ch.tokens.size());
    BRASS_ASSIGN_OR_RETURN(int64_t len, kv_.length(ch.seq_id));
    if (ch.pos0 != len)
      return Status::errorf("{}: sequence {}: chunk starts at position {} but the sequence has {} tokens", what,
                            ch.seq_id, ch.pos0, len);
    if (len + n > kv_.capacity(ch.seq_id))
      return Status::errorf("{}: sequence {}: {} tokens exceed its context of {}", what, ch.seq_id, len + n,
                            kv_.capacity(ch.seq_id));
    for (size_t i = 0; i < ch.tokens.size(); ++i) {
      if (ch.tokens[i] < 0 || ch.tokens[i] >= cfg_.n_vocab)
        return Status::errorf("{}: sequence {}: token {} at index {} is outside the vocabulary [0, {})", what,
                              ch.seq_id, ch.tokens[i], i, cfg_.n_vocab);
    }
    blocks += kv_.blocks_to_grow(ch.seq_id, len + n);
  }
  if (blocks > kv_.free_blocks())
    return Status::errorf("{}: the batch needs {} more KV blocks of {} positions but the pool has {} free (of {})",
                          what, blocks, kv_.block_size(), kv_.free_blocks(), kv_.pool_blocks());
  return Status::ok();
}

Status Model::forward(std::span<const SeqChunk> batch, ForwardOutput& out) {
  if (!pending_.empty())
    return Status::errorf("forward: {} submitted rounds are not collected yet", pending_.size());
  // Validate everything before touching any state.
  for (const SeqChunk& ch : batch)
    if (ch.feed) return Status::errorf("forward: sequence {}: feed chunks go through submit()", ch.seq_id);
  BRASS_TRY(check_batch(batch, "forward"));
  pick_rows_.clear();  // (this call's picks overwrite the last submitted round's)
  int64_t total_rows = 0;
  out.n_vocab = cfg_.n_vocab;
  out.row0.assign(batch.size(), 0);
  out.n_rows.assign(batch.size(), 0);
  out.token.assign(batch.size(), -1);
  for (size_t c = 0; c < batch.size(); ++c) {
    const SeqChunk& ch = batch[c];
    out.row0[c] = total_rows;
    out.n_rows[c] = ch.all_logits ? static_cast<int64_t>(ch.tokens.size()) : (ch.greedy || ch.sample) ? 0 : 1;
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
        if (ch.greedy || ch.sample) {
          s.out_dst = nullptr;
          s.greedy_dst = &out.token[c];
          s.sample = ch.sample;
        } else {
          s.out_dst = out.logits.data() + out.row0[c] * cfg_.n_vocab;
        }
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

Status Model::submit(std::span<const SeqChunk> batch) {
  if (pending_.size() >= kMaxInFlight)
    return Status::errorf("submit: {} rounds are in flight already (at most {}): collect one first", pending_.size(),
                          kMaxInFlight);
  if (batch.empty()) return Status::error("submit: empty batch");
  for (const SeqChunk& ch : batch) {
    if (!(ch.greedy || ch.sample) || ch.all_logits)
      return Status::errorf("submit: sequence {}: every chunk must be greedy or sampled (only its pick comes back)",
                            ch.seq_id);
    if (static_cast<int64_t>(ch.tokens.size()) > kv_.max_chunk_tokens())
      return Status::errorf("submit: sequence {}: {} tokens exceed one round's {}", ch.seq_id, ch.tokens.size(),
                            kv_.max_chunk_tokens());
  }
  BRASS_TRY(check_batch(batch, "submit"));
  for (const SeqChunk& ch : batch)
    if (ch.feed && !pick_rows_.count(ch.seq_id))
      return Status::errorf("submit: sequence {}: a feed chunk needs the sequence in the previous submitted round",
                            ch.seq_id);
  Pending p;
  p.picks.assign(batch.size(), -1);
  static constexpr int32_t kPlaceholder = 0;  // a feed row's token before the copy from picks_
  std::vector<Step> steps(batch.size());
  std::vector<Feed> feeds;
  int64_t row = 0;
  for (size_t c = 0; c < batch.size(); ++c) {
    const SeqChunk& ch = batch[c];
    Step& s = steps[c];
    s.seq_id = ch.seq_id;
    s.tokens = ch.feed ? std::span<const int32_t>(&kPlaceholder, 1) : ch.tokens;
    s.pos0 = ch.pos0;
    s.out_first = static_cast<int64_t>(s.tokens.size()) - 1;
    s.out_dst = nullptr;
    s.greedy_dst = &p.picks[c];  // (marks the row: the picks come back by download_async)
    s.sample = ch.sample;
    if (ch.feed) feeds.push_back({row, pick_rows_.at(ch.seq_id)});
    row += static_cast<int64_t>(s.tokens.size());
  }
  int64_t n_out = 0;
  bool picked = false;
  BRASS_TRY(issue_round(steps, feeds, n_out, picked));
  Timer timer;
  if (!picked) BRASS_TRY(issue_picks(steps, n_out).status());  // (every chunk is greedy or sampled)
  // Each chunk has one output row, in batch order: pick row c is chunk c's.
  p.ticket = be_->download_async(p.picks.data(), picks_->data(), batch.size() * sizeof(int32_t));
  pick_rows_.clear();
  for (size_t c = 0; c < batch.size(); ++c) {
    pick_rows_[batch[c].seq_id] = static_cast<int64_t>(c);
    kv_.commit(batch[c].seq_id, steps[c].pos0 + static_cast<int64_t>(steps[c].tokens.size()));
  }
  pending_.push_back(std::move(p));
  times_.issue_s += timer.seconds();
  ++times_.rounds;
  return Status::ok();
}

Status Model::collect(std::vector<int32_t>& picks) {
  if (pending_.empty()) return Status::error("collect: no submitted round is in flight");
  Timer timer;
  be_->await(pending_.front().ticket);
  picks = std::move(pending_.front().picks);
  pending_.pop_front();
  times_.wait_s += timer.seconds();
  return Status::ok();
}

Status Model::issue_round(std::span<const Step> steps, std::span<const Feed> feeds, int64_t& n_out,
                          bool& picked) {
  const GptOssConfig& c = cfg_;
  backend::Backend& be = *be_;
  Timer timer;
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
  n_out = static_cast<int64_t>(out_rows.size());
  BRASS_TRY(ensure_scratch(n_tok, std::max<int64_t>(n_out, 1)));
  // Tokens and positions in one upload (tokpos_'s layout; two where a long prompt's
  // capacity left a wide gap between them), the output rows only where the round gathers
  // them (not direct, below): each copy between two rounds costs the GPU a few us.
  if (cap_tok_ - n_tok <= 4096) {
    tokens.resize(static_cast<size_t>(cap_tok_));
    tokens.insert(tokens.end(), positions.begin(), positions.end());
    be.upload(tok(), tokens.data(), tokens.size() * 4);
  } else {
    be.upload(tok(), tokens.data(), n_tok * 4);
    be.upload(pos(), positions.data(), n_tok * 4);
  }
  // Fed rows: picks_ -> tok() (after the upload, in issue order), runs of neighbours at once.
  for (size_t i = 0; i < feeds.size();) {
    size_t j = i + 1;
    while (j < feeds.size() && feeds[j].row == feeds[j - 1].row + 1 && feeds[j].pick == feeds[j - 1].pick + 1) ++j;
    be.copy(tok() + feeds[i].row, picks_->as<int32_t>() + feeds[i].pick, (j - i) * sizeof(int32_t));
    i = j;
  }
  const bool single = steps.size() == 1 && n_tok == 1 && n_out == 1;
  const bool batch = n_tok >= 2 && n_tok == static_cast<int64_t>(steps.size()) && n_out == n_tok &&
                     opt_.use_graphs && !be.host_memory();
  if (n_out && !single && !batch) be.upload(out_rows_->data(), out_rows.data(), n_out * 4);

  std::vector<std::vector<backend::AttnSeq>> seqs(c.n_layer, std::vector<backend::AttnSeq>(steps.size()));
  for (int64_t il = 0; il < c.n_layer; ++il)
    for (size_t s = 0; s < steps.size(); ++s)
      seqs[il][s] = kv_.view(steps[s].seq_id, il, tok0[s], steps[s].pos0, static_cast<int64_t>(steps[s].tokens.size()));

  times_.prep_s += timer.seconds();
  timer.reset();
  picked = false;
  if (single) {
    BRASS_TRY(run_decode_round(fwd_graphs_, steps[0].seq_id, seqs, /*greedy=*/false));
  } else if (batch) {
    // Batched decode: the output rows are the token rows, in order (direct). Every row
    // greedy: the argmax goes with the head into the round's graph (no launch between the
    // graph and the picks' download; the head's tail overlaps the argmax's start).
    picked = std::all_of(steps.begin(), steps.end(), [](const Step& s) { return s.greedy_dst && !s.sample; });
    BRASS_TRY(run_batch_round(n_tok, seqs, picked));
  } else {
    record_round(n_tok, n_out, seqs, /*direct=*/false, RoundPick::none);
  }
  times_.issue_s += timer.seconds();
  return Status::ok();
}

Result<bool> Model::issue_picks(std::span<const Step> steps, int64_t n_out) {
  const GptOssConfig& c = cfg_;
  backend::Backend& be = *be_;
  const float* lg = logits_->as<float>();  // (n_out, n_vocab)
  // Sampled rows: one sample op over every output row, per-row parameters from backend
  // memory (greedy and logits-only rows get temperature 0: an argmax nobody reads).
  if (std::any_of(steps.begin(), steps.end(), [](const Step& s) { return s.sample != nullptr; })) {
    std::vector<backend::SampleParams> params(static_cast<size_t>(n_out));
    for (auto& p : params) p.temperature = 0.0f;
    int64_t r = 0;
    for (const Step& s : steps) {
      if (s.out_first < 0) continue;
      r += static_cast<int64_t>(s.tokens.size()) - s.out_first;
      if (s.sample) params[r - 1] = *s.sample;
    }
    const size_t bytes = params.size() * sizeof(backend::SampleParams);
    if (!sample_params_ || sample_params_->size() < bytes) {
      BRASS_ASSIGN_OR_RETURN(sample_params_, be.alloc(bytes));
    }
    be.upload(sample_params_->data(), params.data(), bytes);
    be.sample({.x = lg, .params = sample_params_->as<backend::SampleParams>(), .out = picks_->as<int32_t>(),
               .n_rows = n_out, .n = c.n_vocab});
  } else if (std::any_of(steps.begin(), steps.end(), [](const Step& s) { return s.greedy_dst != nullptr; })) {
    be.argmax({.x = lg, .out = picks_->as<int32_t>(), .n_rows = n_out, .n = c.n_vocab});
  } else {
    return false;
  }
  return true;
}

Status Model::forward_round(std::span<const Step> steps) {
  const GptOssConfig& c = cfg_;
  backend::Backend& be = *be_;
  int64_t n_out = 0;
  bool picked = false;
  BRASS_TRY(issue_round(steps, {}, n_out, picked));
  Timer timer;
  if (n_out > 0) {
    const float* lg = logits_->as<float>();  // (n_out, n_vocab)
    // Greedy / sampled rows: only the picks come back.
    bool any = picked;
    if (!any) {
      BRASS_ASSIGN_OR_RETURN(any, issue_picks(steps, n_out));
    }
    std::vector<int32_t> picks;
    if (any) {
      picks.resize(n_out);
      be.download(picks.data(), picks_->data(), n_out * sizeof(int32_t));
    }
    be.synchronize();
    int64_t row = 0;
    for (const Step& s : steps) {
      if (s.out_first < 0) continue;
      const int64_t n = static_cast<int64_t>(s.tokens.size()) - s.out_first;
      if (s.greedy_dst)
        *s.greedy_dst = picks[row + n - 1];
      else
        be.download(s.out_dst, lg + row * c.n_vocab, n * c.n_vocab * sizeof(float));
      row += n;
    }
  }
  be.synchronize();
  for (const Step& s : steps) kv_.commit(s.seq_id, s.pos0 + static_cast<int64_t>(s.tokens.size()));
  times_.wait_s += timer.seconds();
  ++times_.rounds;
  return Status::ok();
}

Status Model::run_decode_round(std::map<int32_t, GraphSlot>& cache, int32_t seq_id,
                               const std::vector<std::vector<backend::AttnSeq>>& seqs, bool greedy) {
  const RoundPick pick = greedy ? RoundPick::feedback : RoundPick::none;
  auto record = [&] { record_round(1, 1, seqs, /*direct=*/true, pick); };
  if (!opt_.use_graphs || be_->host_memory()) {
    record();
    return Status::ok();
  }
  // The sequence's storage is fixed for its life: its graph replays as recorded, told how
  // many keys this token attends (Graph::set_decode_keys: splits sized by the depth).
  const backend::AttnSeq& s = seqs.at(0).at(0);
  return run_in_slot(cache[seq_id], record, /*retarget=*/false, s.pos0 + s.n_tok);
}

Status Model::run_batch_round(int64_t n, const std::vector<std::vector<backend::AttnSeq>>& seqs, bool pick_rows) {
  constexpr size_t kMaxBatchGraphs = 64;
  const int64_t key = 2 * n + (pick_rows ? 1 : 0);
  batch_graphs_[key].last_use = ++batch_uses_;
  if (batch_graphs_.size() > kMaxBatchGraphs) {
    auto lru = std::min_element(batch_graphs_.begin(), batch_graphs_.end(),
                                [](const auto& a, const auto& b) { return a.second.last_use < b.second.last_use; });
    batch_graphs_.erase(lru);  // (never key: it was just used)
  }
  const RoundPick pick = pick_rows ? RoundPick::rows : RoundPick::none;
  return run_in_slot(batch_graphs_.at(key), [&] { record_round(n, n, seqs, /*direct=*/true, pick); },
                     /*retarget=*/true);
}

Status Model::run_in_slot(GraphSlot& g, const std::function<void()>& record, bool retarget, int64_t decode_keys) {
  if (g.scratch_gen != scratch_gen_) {  // new, or the scratch moved: start over
    g.graph.reset();
    g.eager_runs = 0;
    g.eager_only = false;
    g.scratch_gen = scratch_gen_;
  }
  auto replay = [&]() -> Status {  // (a single-token round tells the graph its depth first)
    if (decode_keys > 0) BRASS_TRY(g.graph->set_decode_keys(decode_keys));
    return g.graph->launch();
  };
  if (g.graph) {
    if (!retarget) return replay();
    if (g.graph->update(record).is_ok()) return g.graph->launch();
    g.graph.reset();
    g.eager_only = true;  // (an update can only fail for a recording the backend cannot re-target)
  }
  if (g.eager_only || g.eager_runs < 1) {  // the first round runs eagerly: backend scratch settles
    record();
    ++g.eager_runs;
    return Status::ok();
  }
  BRASS_ASSIGN_OR_RETURN(g.graph, be_->capture(record));
  return replay();
}

void Model::record_round(int64_t n_tok, int64_t n_out, const std::vector<std::vector<backend::AttnSeq>>& seqs,
                         bool direct, RoundPick round_pick) {
  const GptOssConfig& c = cfg_;
  backend::Backend& be = *be_;
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
  const int32_t* pos = this->pos();
  const float* inv_freq = inv_freq_->as<float>();

  // One token: the residual adds fold into the MoE block and the attention norm into
  // q/k/v (the CUDA backend fuses both into its one-token kernels); several tokens keep
  // the add + norm between the blocks, as the MoE block's tail (next_norm). The same
  // arithmetic either way.
  const bool fold = n_tok == 1;
  be.embed({.table = w_.token_embd, .tokens = tok(), .n_tok = n_tok, .out = x});
  if (!fold)
    be.rms_norm({.x = x, .weight = w_.layers[0].attn_norm, .out = xn, .n_rows = n_tok, .n = c.n_embd, .eps = c.rms_eps});
  for (int64_t il = 0; il < c.n_layer; ++il) {
    const LayerWeights& L = w_.layers[il];
    // ---- attention block (xn = attn_norm(x) on entry, or normed by attn_qkv) ----
    be.attn_qkv({.x = fold ? x : xn, .norm = fold ? L.attn_norm : nullptr, .eps = c.rms_eps, .xn = xn, .wq = L.wq,
                 .wk = L.wk, .wv = L.wv, .bq = L.bq, .bk = L.bk, .bv = L.bv, .q = q, .k = k, .v = v, .pos = pos,
                 .inv_freq = inv_freq, .mscale = rope_.mscale, .n_tok = n_tok,
                 .n_head = c.n_head, .n_head_kv = c.n_head_kv, .head_dim = c.head_dim, .kv_type = kv_.type(),
                 .seqs = seqs[il]});
    be.attention({.q = q, .sinks = L.sinks, .out = attn, .kv_type = kv_.type(), .n_head = c.n_head,
                  .n_head_kv = c.n_head_kv, .head_dim = c.head_dim,
                  .window = c.is_swa_layer(il) ? static_cast<int32_t>(c.n_swa) : 0,
                  .scale = c.attn_scale(), .seqs = seqs[il], .pos = pos});
    // ---- MoE block ----
    // proj = attn wo^T + bo (the backend may fuse it with what follows); x += proj; xn =
    // post_attn_norm(x); router; experts -> proj; then x += proj, for several tokens (not
    // after the last layer) with the next layer's attn_norm into xn.
    const bool last = il + 1 == c.n_layer;
    be.moe_block({.y = x, .add = proj, .proj = {.w = L.wo, .bias = L.bo, .x = attn, .y = proj, .n_tok = n_tok},
                  .norm = L.post_attn_norm, .eps = c.rms_eps, .router = L.router,
                  .router_bias = L.router_b, .logits = rlog, .n_expert = c.n_expert,
                  .moe = {.x = xn, .ids = rids, .weights = rw, .gate = L.gate_exps, .up = L.up_exps,
                          .down = L.down_exps, .gate_bias = L.gate_b, .up_bias = L.up_b, .down_bias = L.down_b,
                          .out = proj, .n_tok = n_tok, .k = c.n_expert_used, .alpha = c.swiglu_alpha,
                          .limit = c.swiglu_limit},
                  .accumulate = fold || last,
                  .next_norm = fold || last ? nullptr : w_.layers[il + 1].attn_norm, .next_xn = xn});
  }
  if (n_out <= 0) return;
  float* ox = out_x_->as<float>();   // (n_out, n_embd)
  float* lg = logits_->as<float>();  // (n_out, n_vocab)
  // The final norm: in the head's call where the round's rows are the output rows (n_tok ==
  // n_out; a backend may fold it into its one-row head), else in place on the gathered rows.
  if (!direct) {
    be.gather_rows({.x = x, .rows = out_rows_->as<int32_t>(), .out = ox, .n_rows = n_out, .n = c.n_embd});
    be.rms_norm({.x = ox, .weight = w_.output_norm, .out = ox, .n_rows = n_out, .n = c.n_embd, .eps = c.rms_eps});
  }
  backend::ArgmaxArgs pick;  // feedback: the pick feeds the next step (token, position, history)
  if (round_pick == RoundPick::feedback)
    pick = {.out = tok(), .pos = this->pos(), .history = history_->as<int32_t>()};
  else if (round_pick == RoundPick::rows)
    pick = {.out = picks_->as<int32_t>()};
  be.output_head({.mm = {.w = w_.output, .bias = nullptr, .x = direct ? x : ox, .y = lg, .n_tok = n_out},
                  .pick = pick,
                  .norm = direct ? w_.output_norm : nullptr,
                  .eps = c.rms_eps,
                  .xn = ox});
}

Status Model::decode_greedy(int32_t seq_id, int32_t token, int64_t n_steps, std::vector<int32_t>& out) {
  out.clear();
  if (!pending_.empty())
    return Status::errorf("decode_greedy: {} submitted rounds are not collected yet", pending_.size());
  BRASS_ASSIGN_OR_RETURN(const int64_t len, kv_.length(seq_id));
  if (token < 0 || token >= cfg_.n_vocab)
    return Status::errorf("decode_greedy: sequence {}: token {} is outside the vocabulary [0, {})", seq_id, token,
                          cfg_.n_vocab);
  if (n_steps < 1) return Status::errorf("decode_greedy: n_steps must be >= 1, found {}", n_steps);
  if (len + n_steps > kv_.capacity(seq_id))
    return Status::errorf("decode_greedy: sequence {}: {} + {} tokens exceed its context of {}", seq_id, len, n_steps,
                          kv_.capacity(seq_id));
  if (const int64_t need = kv_.blocks_to_grow(seq_id, len + n_steps); need > kv_.free_blocks())
    return Status::errorf("decode_greedy: sequence {}: {} + {} tokens need {} more KV blocks of {} positions but the "
                          "pool has {} free (of {})",
                          seq_id, len, n_steps, need, kv_.block_size(), kv_.free_blocks(), kv_.pool_blocks());
  BRASS_TRY(ensure_scratch(1, 1));
  if (!history_) {
    BRASS_ASSIGN_OR_RETURN(history_, be_->alloc((kv_.n_ctx_max() + 1) * sizeof(int32_t)));
  }
  const int32_t p0 = static_cast<int32_t>(len);
  be_->upload(tok(), &token, 4);
  be_->upload(pos(), &p0, 4);
  std::vector<std::vector<backend::AttnSeq>> seqs(cfg_.n_layer, std::vector<backend::AttnSeq>(1));
  for (int64_t i = 0; i < n_steps; ++i) {
    BRASS_TRY(kv_.reserve(seq_id, len + i, 1));
    for (int64_t il = 0; il < cfg_.n_layer; ++il) seqs[il][0] = kv_.view(seq_id, il, 0, len + i, 1);
    BRASS_TRY(run_decode_round(greedy_graphs_, seq_id, seqs, /*greedy=*/true));
    kv_.commit(seq_id, len + i + 1);
  }
  out.resize(n_steps);
  be_->synchronize();
  be_->download(out.data(), history_->as<int32_t>() + len + 1, n_steps * sizeof(int32_t));
  return Status::ok();
}

}  // namespace brass::model
