// KvCache implementation (layout and rules in kv_cache.h).
#include "model/kv_cache.h"

#include <algorithm>
#include <cstring>

namespace brass::model {

Result<KvCache> KvCache::create(const GptOssConfig& c, const KvCacheOptions& o) {
  KvCache kv;
  kv.cfg_ = c;
  kv.opt_ = o;
  if (o.type != DType::F32 && o.type != DType::F16)
    return Status::errorf("kv cache: type must be f32 or f16, found {}", dtype_name(o.type));
  if (kv.opt_.n_ctx_max <= 0) kv.opt_.n_ctx_max = c.n_ctx_train;
  if (o.max_window_snapshots < 0)
    return Status::errorf("kv cache: max_window_snapshots must be >= 0, found {}", o.max_window_snapshots);
  if (o.max_chunk_tokens < 1) return Status::errorf("kv cache: max_chunk_tokens must be >= 1, found {}", o.max_chunk_tokens);
  kv.ring_cap_ = c.n_swa + kv.opt_.max_chunk_tokens - 1;
  return kv;
}

Status KvCache::add_sequence(int32_t seq_id, int64_t max_len) {
  if (seqs_.count(seq_id)) return Status::errorf("kv cache: sequence {} already exists", seq_id);
  if (max_len < 0) return Status::errorf("kv cache: sequence {}: max_len {} must be >= 0", seq_id, max_len);
  Seq s;
  s.max_len = max_len > 0 ? std::min(max_len, opt_.n_ctx_max) : opt_.n_ctx_max;
  s.layers.resize(cfg_.n_layer);
  const int64_t row = cfg_.kv_dim() * elt_bytes();
  for (int64_t il = 0; il < cfg_.n_layer; ++il) {
    if (opt_.device) {
      Layer& l = s.layers[il];
      l.slots = cfg_.is_swa_layer(il) ? ring_cap_ : s.max_len;
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

int64_t KvCache::capacity(int32_t seq_id) const {
  auto it = seqs_.find(seq_id);
  return it == seqs_.end() ? 0 : it->second.max_len;
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
  for (const auto& sn : it->second.snaps) b += static_cast<int64_t>(sn.data.size());
  return b;
}

int64_t KvCache::ring_lo(const Seq& s) const {
  return std::max<int64_t>({0, s.ring_lo, s.length - ring_cap_});
}

bool KvCache::ring_holds(const Seq& s, int64_t n) const {
  // The next query (at n) needs [max(0, n - n_swa + 1), n) (empty for n == 0 or
  // n_swa == 1); the rings hold [ring_lo, length).
  const int64_t need = std::max<int64_t>(0, n - std::max<int64_t>(cfg_.n_swa - 1, 0));
  return need >= n || need >= ring_lo(s);
}

int64_t KvCache::usable_cut(int32_t seq_id, int64_t n) const {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end() || n <= 0) return 0;
  const Seq& s = it->second;
  n = std::min(n, s.length);
  if (n == s.length || ring_holds(s, n)) return n;
  // ring_holds is monotone in n (a shorter cut needs older positions), so below n only
  // snapshots can help.
  for (auto sn = s.snaps.rbegin(); sn != s.snaps.rend(); ++sn)
    if (sn->at <= n) return sn->at;
  return 0;
}

Status KvCache::truncate(int32_t seq_id, int64_t n) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return Status::errorf("kv cache: no sequence {}", seq_id);
  Seq& s = it->second;
  if (n < 0 || n > s.length)
    return Status::errorf("kv cache: sequence {}: cannot truncate to {} tokens (length {})", seq_id, n, s.length);
  if (n == s.length) return Status::ok();
  if (usable_cut(seq_id, n) != n)
    return Status::errorf(
        "kv cache: sequence {}: cannot truncate to {} tokens: sliding-window layers keep only positions "
        "[{}, {}) but need [{}, {}), and no window snapshot was taken at length {}",
        seq_id, n, ring_lo(s), s.length, std::max<int64_t>(0, n - cfg_.n_swa + 1), n, n);
  if (ring_holds(s, n)) {
    s.ring_lo = std::min(ring_lo(s), n);  // (n: when nothing is needed, n == 0 or n_swa == 1)
  } else {
    auto sn = std::find_if(s.snaps.begin(), s.snaps.end(), [&](const Snapshot& x) { return x.at == n; });
    copy_window(s, sn->first, sn->at, sn->data.data(), /*to_ring=*/true);
    s.ring_lo = sn->first;
  }
  s.length = n;
  // Snapshots past the cut describe positions that are gone.
  s.snaps.erase(std::remove_if(s.snaps.begin(), s.snaps.end(), [&](const Snapshot& x) { return x.at > n; }),
                s.snaps.end());
  return Status::ok();
}

int64_t KvCache::window_snapshot_bytes() const {
  return cfg_.n_swa_layers() * 2 * std::max<int64_t>(0, cfg_.n_swa - 1) * cfg_.kv_dim() * elt_bytes();
}

void KvCache::copy_window(Seq& s, int64_t first, int64_t at, uint8_t* data, bool to_ring) {
  const int64_t row = cfg_.kv_dim() * elt_bytes();
  const int64_t n_rows = at - first;
  uint8_t* dst = data;
  for (int64_t il = 0; il < cfg_.n_layer; ++il) {
    if (!cfg_.is_swa_layer(il)) continue;
    Layer& l = s.layers[il];
    for (int kv = 0; kv < 2; ++kv) {
      uint8_t* ring = static_cast<uint8_t*>(
          l.kd ? (kv == 0 ? l.kd : l.vd)->data() : static_cast<void*>((kv == 0 ? l.k : l.v).data()));
      // Positions [first, at) as contiguous slot runs (one wrap at most).
      for (int64_t p = first; p < at;) {
        const int64_t slot = p % l.slots;
        const int64_t n = std::min(at - p, l.slots - slot);
        uint8_t* r = ring + slot * row;
        uint8_t* h = dst + (p - first) * row;
        const size_t nb = static_cast<size_t>(n * row);
        if (opt_.device) {
          if (to_ring) opt_.device->upload(r, h, nb);
          else opt_.device->download(h, r, nb);
        } else {
          if (to_ring) std::memcpy(r, h, nb);
          else std::memcpy(h, r, nb);
        }
        p += n;
      }
      dst += n_rows * row;
    }
  }
  // Uploads may be asynchronous: the snapshot's host bytes must outlive them, and the
  // next forward must see them (same stream, but be plain about it).
  if (opt_.device && to_ring) opt_.device->synchronize();
}

Status KvCache::snapshot_window(int32_t seq_id) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return Status::errorf("kv cache: no sequence {}", seq_id);
  Seq& s = it->second;
  if (opt_.max_window_snapshots == 0) return Status::ok();
  for (const Snapshot& x : s.snaps)
    if (x.at == s.length) return Status::ok();
  Snapshot sn;
  sn.at = s.length;
  sn.first = std::max<int64_t>(0, s.length - std::max<int64_t>(cfg_.n_swa - 1, 0));
  if (sn.first < sn.at && sn.first < ring_lo(s))  // cannot happen: the next query's window is always held
    return Status::errorf("kv cache: sequence {}: window [{}, {}) no longer in the rings (they hold [{}, {}))",
                          seq_id, sn.first, sn.at, ring_lo(s), s.length);
  sn.data.resize(static_cast<size_t>(cfg_.n_swa_layers() * 2 * (sn.at - sn.first) * cfg_.kv_dim() * elt_bytes()));
  copy_window(s, sn.first, sn.at, sn.data.data(), /*to_ring=*/false);
  s.snaps.push_back(std::move(sn));  // lengths only grow between cuts: stays ascending
  if (static_cast<int64_t>(s.snaps.size()) > opt_.max_window_snapshots) s.snaps.erase(s.snaps.begin());
  return Status::ok();
}

std::vector<int64_t> KvCache::snapshot_lengths(int32_t seq_id) const {
  std::vector<int64_t> out;
  auto it = seqs_.find(seq_id);
  if (it != seqs_.end())
    for (const Snapshot& x : it->second.snaps) out.push_back(x.at);
  return out;
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
  if (end > s.max_len)
    return Status::errorf("kv cache: sequence {}: {} tokens exceed its context of {}", seq_id, end, s.max_len);
  // The chunk's K/V overwrite the ring slots of positions before end - ring_cap: from
  // here on they are gone (even if the forward fails before commit()).
  s.ring_lo = std::max(s.ring_lo, end - ring_cap_);
  const int64_t row = cfg_.kv_dim() * elt_bytes();
  for (int64_t il = 0; il < cfg_.n_layer; ++il) {
    if (cfg_.is_swa_layer(il) || opt_.device) continue;
    Layer& l = s.layers[il];
    if (l.slots >= end) continue;
    int64_t slots = std::max<int64_t>(256, l.slots);
    while (slots < end) slots *= 2;
    slots = std::min(slots, s.max_len);
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
