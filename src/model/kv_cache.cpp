// KvCache implementation (layout and rules in kv_cache.h).
#include "model/kv_cache.h"

#include <algorithm>

namespace brass::model {

Result<KvCache> KvCache::create(const GptOssConfig& c, const KvCacheOptions& o) {
  KvCache kv;
  kv.cfg_ = c;
  kv.opt_ = o;
  if (o.type != DType::F32 && o.type != DType::F16)
    return Status::errorf("kv cache: type must be f32 or f16, found {}", dtype_name(o.type));
  if (kv.opt_.n_ctx_max <= 0) kv.opt_.n_ctx_max = c.n_ctx_train;
  if (o.max_chunk_tokens < 1) return Status::errorf("kv cache: max_chunk_tokens must be >= 1, found {}", o.max_chunk_tokens);
  kv.ring_cap_ = c.n_swa + kv.opt_.max_chunk_tokens - 1;
  return kv;
}

Status KvCache::add_sequence(int32_t seq_id) {
  if (seqs_.count(seq_id)) return Status::errorf("kv cache: sequence {} already exists", seq_id);
  Seq s;
  s.layers.resize(cfg_.n_layer);
  const int64_t row = cfg_.kv_dim() * elt_bytes();
  for (int64_t il = 0; il < cfg_.n_layer; ++il) {
    if (opt_.device) {
      Layer& l = s.layers[il];
      l.slots = cfg_.is_swa_layer(il) ? ring_cap_ : opt_.n_ctx_max;
      BRASS_ASSIGN_OR_RETURN(l.kd, opt_.device->alloc(static_cast<size_t>(l.slots * row)));
      BRASS_ASSIGN_OR_RETURN(l.vd, opt_.device->alloc(static_cast<size_t>(l.slots * row)));
      continue;
    }
    if (cfg_.is_swa_layer(il)) {
      s.layers[il].slots = ring_cap_;
      s.layers[il].k.resize(ring_cap_ * row);
      s.layers[il].v.resize(ring_cap_ * row);
    }
  }
  seqs_.emplace(seq_id, std::move(s));
  return Status::ok();
}

Status KvCache::remove_sequence(int32_t seq_id) {
  if (!seqs_.erase(seq_id)) return Status::errorf("kv cache: no sequence {}", seq_id);
  return Status::ok();
}

Result<int64_t> KvCache::length(int32_t seq_id) const {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return Status::errorf("kv cache: no sequence {}", seq_id);
  return it->second.length;
}

Result<int64_t> KvCache::bytes(int32_t seq_id) const {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return Status::errorf("kv cache: no sequence {}", seq_id);
  int64_t b = 0;
  for (const auto& l : it->second.layers) {
    b += static_cast<int64_t>(l.k.size() + l.v.size());
    if (l.kd) b += static_cast<int64_t>(l.kd->size() + l.vd->size());
  }
  return b;
}

Status KvCache::truncate(int32_t seq_id, int64_t n) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return Status::errorf("kv cache: no sequence {}", seq_id);
  Seq& s = it->second;
  if (n < 0 || n > s.length)
    return Status::errorf("kv cache: sequence {}: cannot truncate to {} tokens (length {})", seq_id, n, s.length);
  // The ring holds positions [max(0, length - cap), length); the next query (at n)
  // needs [max(0, n - n_swa + 1), n).
  const int64_t oldest_held = std::max<int64_t>(0, s.length - ring_cap_);
  const int64_t oldest_needed = std::max<int64_t>(0, n - cfg_.n_swa + 1);
  if (n > 0 && oldest_needed < oldest_held)
    return Status::errorf(
        "kv cache: sequence {}: cannot truncate to {} tokens: sliding-window layers keep only positions "
        "[{}, {}) but need [{}, {})",
        seq_id, n, oldest_held, s.length, oldest_needed, n);
  s.length = n;
  return Status::ok();
}

Status KvCache::reserve(int32_t seq_id, int64_t pos0, int64_t n_tok) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return Status::errorf("kv cache: no sequence {}", seq_id);
  Seq& s = it->second;
  if (pos0 != s.length)
    return Status::errorf("kv cache: sequence {}: chunk starts at position {} but the sequence has {} tokens",
                          seq_id, pos0, s.length);
  if (n_tok < 1 || n_tok > opt_.max_chunk_tokens)
    return Status::errorf("kv cache: sequence {}: chunk of {} tokens (must be 1..{})", seq_id, n_tok,
                          opt_.max_chunk_tokens);
  const int64_t end = pos0 + n_tok;
  if (end > opt_.n_ctx_max)
    return Status::errorf("kv cache: sequence {}: {} tokens exceed the context of {}", seq_id, end, opt_.n_ctx_max);
  const int64_t row = cfg_.kv_dim() * elt_bytes();
  for (int64_t il = 0; il < cfg_.n_layer; ++il) {
    if (cfg_.is_swa_layer(il) || opt_.device) continue;
    Layer& l = s.layers[il];
    if (l.slots >= end) continue;
    int64_t slots = std::max<int64_t>(256, l.slots);
    while (slots < end) slots *= 2;
    slots = std::min(slots, opt_.n_ctx_max);
    l.k.resize(slots * row);
    l.v.resize(slots * row);
    l.slots = slots;
  }
  return Status::ok();
}

backend::AttnSeq KvCache::view(int32_t seq_id, int64_t il, int64_t tok0, int64_t pos0, int64_t n_tok) {
  Layer& l = seqs_.at(seq_id).layers[il];
  backend::AttnSeq a;
  a.tok0 = tok0;
  a.n_tok = n_tok;
  a.pos0 = static_cast<int32_t>(pos0);
  a.k = l.kd ? l.kd->data() : l.k.data();
  a.v = l.vd ? l.vd->data() : l.v.data();
  a.capacity = static_cast<int32_t>(l.slots);
  a.ring = cfg_.is_swa_layer(il);
  return a;
}

void KvCache::commit(int32_t seq_id, int64_t new_length) { seqs_.at(seq_id).length = new_length; }

}  // namespace brass::model
