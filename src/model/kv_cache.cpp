// KvCache implementation (layout and rules in kv_cache.h).
#include "model/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "core/log.h"

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
  const int64_t bs = o.block_size;
  if (bs < 1 || bs > (int64_t{1} << 20) || (bs & (bs - 1)) != 0)
    return Status::errorf("kv cache: block_size must be a power of two in [1, 2^20], found {}", bs);
  if (o.pool_tokens < 0) return Status::errorf("kv cache: pool_tokens must be >= 0 (0: automatic), found {}", o.pool_tokens);
  kv.ring_cap_ = c.n_swa + kv.opt_.max_chunk_tokens - 1;

  // Pool size.
  const int64_t per_pos = std::max<int64_t>(1, c.kv_bytes_per_token(kv.elt_bytes()));
  int64_t tokens = o.pool_tokens;
  if (tokens == 0) {
    const backend::MemoryInfo mi = o.device ? o.device->memory_info() : backend::host_memory_info();
    const double share = o.device ? kAutoPoolDeviceShare : kAutoPoolHostShare;
    const int64_t mem = o.device ? mi.free_bytes : mi.total_bytes;
    tokens = std::min(kAutoPoolContexts * kv.opt_.n_ctx_max, static_cast<int64_t>(share * static_cast<double>(mem)) / per_pos);
    tokens = std::max(tokens, bs);
    // (logged so that a surprising size can be traced back to its inputs)
    BRASS_LOG_INFO("kv cache: pool of {} positions ({:.1f} MiB; {} MiB {} memory, {} full contexts at most)", tokens,
                   static_cast<double>(tokens) * per_pos / (1 << 20), mem >> 20, o.device ? "free device" : "host",
                   kAutoPoolContexts);
  }
  kv.n_blocks_ = (tokens + bs - 1) / bs;
  if (kv.n_blocks_ > INT32_MAX)
    return Status::errorf("kv cache: pool of {} positions is {} blocks of {}: more than 2^31 - 1", tokens, kv.n_blocks_, bs);
  kv.table_entries_ = kv.blocks_for(kv.opt_.n_ctx_max);
  const int64_t pool_bytes = kv.n_blocks_ * bs * kv.row_bytes();
  kv.pools_.resize(c.n_layer);
  for (int64_t il = 0; il < c.n_layer; ++il) {
    if (c.is_swa_layer(il)) continue;
    Pool& p = kv.pools_[il];
    if (o.device) {
      auto k = o.device->alloc(static_cast<size_t>(pool_bytes));
      auto v = k.is_ok() ? o.device->alloc(static_cast<size_t>(pool_bytes)) : Result<std::unique_ptr<backend::Buffer>>(k.status());
      if (!k.is_ok() || !v.is_ok())
        return Status::errorf("kv cache: cannot allocate the block pool of layer {} ({} positions, 2 x {} bytes; "
                              "choose a smaller pool): {}",
                              il, kv.n_blocks_ * bs, pool_bytes, (!k.is_ok() ? k.status() : v.status()).message());
      p.kd = std::move(k).value();
      p.vd = std::move(v).value();
    } else {
      // Default-initialized: the pages are committed when a block is first written.
      p.k.reset(new (std::nothrow) uint8_t[static_cast<size_t>(pool_bytes)]);
      p.v.reset(new (std::nothrow) uint8_t[static_cast<size_t>(pool_bytes)]);
      if (!p.k || !p.v)
        return Status::errorf("kv cache: cannot allocate the block pool of layer {} ({} positions, 2 x {} bytes; "
                              "choose a smaller pool)",
                              il, kv.n_blocks_ * bs, pool_bytes);
    }
  }
  // Block 0 is taken first (the back of the list): a lightly used host pool touches
  // only its first pages.
  kv.free_.resize(static_cast<size_t>(kv.n_blocks_));
  for (int64_t i = 0; i < kv.n_blocks_; ++i) kv.free_[static_cast<size_t>(i)] = static_cast<int32_t>(kv.n_blocks_ - 1 - i);
  return kv;
}

int64_t KvCache::block_bytes() const { return cfg_.kv_bytes_per_token(elt_bytes()) * opt_.block_size; }

int64_t KvCache::held_blocks(int32_t seq_id) const {
  auto it = seqs_.find(seq_id);
  return it == seqs_.end() ? 0 : static_cast<int64_t>(it->second.blocks.size());
}

int64_t KvCache::blocks_to_grow(int32_t seq_id, int64_t new_length) const {
  return std::max<int64_t>(0, blocks_for(new_length) - held_blocks(seq_id));
}

Status KvCache::add_sequence(int32_t seq_id, int64_t max_len) {
  if (seqs_.count(seq_id)) return Status::errorf("kv cache: sequence {} already exists", seq_id);
  if (max_len < 0) return Status::errorf("kv cache: sequence {}: max_len {} must be >= 0", seq_id, max_len);
  Seq s;
  s.max_len = max_len > 0 ? std::min(max_len, opt_.n_ctx_max) : opt_.n_ctx_max;
  s.rings.resize(cfg_.n_layer);
  s.blocks.reserve(static_cast<size_t>(blocks_for(s.max_len)));  // host tables never move
  const int64_t ring_bytes = ring_cap_ * row_bytes();
  for (int64_t il = 0; il < cfg_.n_layer; ++il) {
    if (!cfg_.is_swa_layer(il)) continue;
    Ring& r = s.rings[il];
    if (opt_.device) {
      BRASS_ASSIGN_OR_RETURN(r.kd, opt_.device->alloc(static_cast<size_t>(ring_bytes)));
      BRASS_ASSIGN_OR_RETURN(r.vd, opt_.device->alloc(static_cast<size_t>(ring_bytes)));
    } else {
      r.k.resize(ring_bytes);
      r.v.resize(ring_bytes);
    }
  }
  if (opt_.device) {
    if (!spare_tables_.empty()) {
      s.table = std::move(spare_tables_.back());
      spare_tables_.pop_back();
    } else {
      BRASS_ASSIGN_OR_RETURN(s.table, opt_.device->alloc(static_cast<size_t>(std::max<int64_t>(1, table_entries_) * 4)));
    }
  }
  seqs_.emplace(seq_id, std::move(s));
  return Status::ok();
}

int64_t KvCache::capacity(int32_t seq_id) const {
  auto it = seqs_.find(seq_id);
  return it == seqs_.end() ? 0 : it->second.max_len;
}

void KvCache::release_blocks(Seq& s, int64_t keep) {
  // Returned in reverse so that the lowest of them is taken again first.
  while (static_cast<int64_t>(s.blocks.size()) > keep) {
    free_.push_back(s.blocks.back());
    s.blocks.pop_back();
  }
}

Status KvCache::remove_sequence(int32_t seq_id) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return Status::errorf("kv cache: no sequence {}", seq_id);
  release_blocks(it->second, 0);
  // The table buffer serves the next sequence (its entries are rewritten as it grows; a
  // graph that captured this sequence is dropped with it by the model).
  if (it->second.table) spare_tables_.push_back(std::move(it->second.table));
  seqs_.erase(it);
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
  int64_t b = static_cast<int64_t>(it->second.blocks.size()) * block_bytes();
  for (const auto& r : it->second.rings) {
    b += static_cast<int64_t>(r.k.size() + r.v.size());
    if (r.kd) b += static_cast<int64_t>(r.kd->size() + r.vd->size());
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
  release_blocks(s, blocks_for(n));  // full layers keep every position: any cut is fine there
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
    Ring& l = s.rings[il];
    for (int kv = 0; kv < 2; ++kv) {
      uint8_t* ring = static_cast<uint8_t*>(
          l.kd ? (kv == 0 ? l.kd : l.vd)->data() : static_cast<void*>((kv == 0 ? l.k : l.v).data()));
      // Positions [first, at) as contiguous slot runs (one wrap at most).
      for (int64_t p = first; p < at;) {
        const int64_t slot = p % ring_cap_;
        const int64_t n = std::min(at - p, ring_cap_ - slot);
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
  const int64_t need = blocks_for(end) - static_cast<int64_t>(s.blocks.size());
  if (need > free_blocks())
    return Status::errorf(
        "kv cache: sequence {}: {} tokens need {} more blocks of {} positions but the pool has {} free (of {})",
        seq_id, end, need, opt_.block_size, free_blocks(), n_blocks_);
  // The chunk's K/V overwrite the ring slots of positions before end - ring_cap: from
  // here on they are gone (even if the forward fails before commit()).
  s.ring_lo = std::max(s.ring_lo, end - ring_cap_);
  if (need > 0) {
    const size_t first = s.blocks.size();
    for (int64_t i = 0; i < need; ++i) {
      s.blocks.push_back(free_.back());
      free_.pop_back();
    }
    if (s.table)  // ordered before the round's kernels (same stream)
      opt_.device->upload(s.table->as<int32_t>() + first, s.blocks.data() + first, static_cast<size_t>(need) * 4);
  }
  return Status::ok();
}

backend::AttnSeq KvCache::view(int32_t seq_id, int64_t il, int64_t tok0, int64_t pos0, int64_t n_tok) {
  Seq& s = seqs_.at(seq_id);
  backend::AttnSeq a;
  a.tok0 = tok0;
  a.n_tok = n_tok;
  a.pos0 = static_cast<int32_t>(pos0);
  if (cfg_.is_swa_layer(il)) {
    const Ring& r = s.rings[il];
    a.k = r.kd ? r.kd->data() : const_cast<uint8_t*>(r.k.data());
    a.v = r.vd ? r.vd->data() : const_cast<uint8_t*>(r.v.data());
    a.capacity = static_cast<int32_t>(ring_cap_);
    a.ring = true;
  } else {
    const Pool& p = pools_[il];
    a.k = p.kp();
    a.v = p.vp();
    a.capacity = static_cast<int32_t>(s.max_len);
    a.blocks = s.table ? s.table->as<int32_t>() : s.blocks.data();
    a.block_size = static_cast<int32_t>(opt_.block_size);
  }
  return a;
}

void KvCache::commit(int32_t seq_id, int64_t new_length) { seqs_.at(seq_id).length = new_length; }

}  // namespace brass::model
