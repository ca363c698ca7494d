// KvCache: the K and V history of every live sequence for every layer.
// - Full-attention layers (odd il) keep every position, in a POOL of fixed-size blocks
//   shared by all sequences: per full layer one K pool and one V pool of (n_blocks,
//   block_size, n_head_kv, head_dim) elements. Each sequence has one block table (int32
//   block ids) that serves every full layer: its block b holds positions
//   [b * block_size, (b + 1) * block_size) in each of them. reserve() takes blocks from
//   the free list as the sequence grows, truncate() returns those past the cut,
//   remove_sequence() all of them; nothing is ever copied when a sequence grows. The
//   pool is allocated once at create() (its pointers never move, so captured decode
//   graphs stay valid); host pools are left untouched (new[] without value-init), so
//   the OS commits their pages only as blocks are first written.
// - Sliding-window layers (even il) keep a per-sequence ring: slot = position %
//   ring_capacity, with ring_capacity = n_swa + max_chunk_tokens - 1 so that every query
//   of a chunk of up to max_chunk_tokens tokens still finds its n_swa - 1 predecessors
//   after the whole chunk's K/V were stored.
// Device backends (KvCacheOptions::device): pools and rings are backend memory; each
// sequence's rings are allocated at add_sequence, and its block table lives in a device
// buffer of n_ctx_max / block_size entries (a stable pointer for graphs) that reserve()
// extends with Backend::upload (ordered before the round's kernels on the stream).
// backend::AttnSeq describes both layouts to the ops (backend.h: kv_storage_row()).
// Elements are F32 (reference default) or F16 (16-bit is the floor for gpt-oss: an 8-bit
// KV cache degraded generations badly on another engine).
// Positions of a sequence are contiguous from 0: a chunk must start at length(seq).
//
// Truncation (prefix reuse). A sliding layer's query at position n reads keys
// [n - n_swa + 1, n], so cutting a sequence back to n tokens needs positions
// [max(0, n - n_swa + 1), n) of every ring. Two ways to have them:
// - the ring still holds them: it holds [ring_lo, length) where ring_lo rises as later
//   positions overwrite slots (length - ring_capacity) and after cuts (a cut does not
//   bring back what was overwritten); full-attention layers hold every position anyway;
// - a window snapshot taken when the sequence was exactly n tokens long
//   (snapshot_window: the n_swa - 1 positions before n of every sliding layer, K and
//   V, copied to host memory; through Backend::download / upload for device storage).
//   The engine takes one at the end of every prompt, so an agent loop whose next
//   prompt drops the generated part (Harmony drops the analysis) resumes there however
//   long the completion was. At most max_window_snapshots per sequence (oldest
//   dropped); a cut to n drops the snapshots taken after n (their positions are gone).
// usable_cut() is THE rule (truncate() accepts n exactly when usable_cut(n) == n): no
// caller keeps a copy of it. Restoring is exact: the ring slots get back the very bytes
// the forward pass stored, so the continuation is bit-identical to an uncut run.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "core/dtype.h"
#include "core/status.h"
#include "model/config.h"

namespace brass::model {

struct KvCacheOptions {
  DType type = DType::F32;        // F32 or F16
  int64_t n_ctx_max = 0;          // per sequence; 0: the model's context_length
  int64_t max_chunk_tokens = 512; // tokens of one sequence per forward step
  backend::Backend* device = nullptr;  // allocate storage from this backend (not owned)
  int32_t max_window_snapshots = 4;    // per sequence (0: none are taken)
  int64_t block_size = 64;        // positions per block of the full layers' pool (power of two)
  // Positions the pool holds across all sequences (rounded up to whole blocks); 0:
  // automatic (auto_pool_tokens).
  int64_t pool_tokens = 0;
};

// The automatic pool size: a device gets kAutoPoolDeviceShare of its free memory (after
// the weights: the model creates the cache last) and a host pool kAutoPoolHostShare of
// the physical memory (its pages commit only when written); both at most
// kAutoPoolContexts full contexts of n_ctx_max and at least one block.
inline constexpr double kAutoPoolDeviceShare = 0.5;
inline constexpr double kAutoPoolHostShare = 0.5;
inline constexpr int64_t kAutoPoolContexts = 16;

class KvCache {
 public:
  static Result<KvCache> create(const GptOssConfig& c, const KvCacheOptions& o);

  DType type() const { return opt_.type; }
  int64_t elt_bytes() const { return opt_.type == DType::F16 ? 2 : 4; }
  int64_t n_ctx_max() const { return opt_.n_ctx_max; }
  int64_t max_chunk_tokens() const { return opt_.max_chunk_tokens; }
  int64_t ring_capacity() const { return ring_cap_; }
  int64_t block_size() const { return opt_.block_size; }

  // The block pool of the full-attention layers (positions = blocks * block_size).
  int64_t pool_blocks() const { return n_blocks_; }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }
  int64_t pool_tokens() const { return n_blocks_ * opt_.block_size; }
  int64_t free_tokens() const { return free_blocks() * opt_.block_size; }
  // Bytes of one block over every full layer, K and V.
  int64_t block_bytes() const;
  // Blocks the sequence holds, and the positions they cover (>= its length).
  int64_t held_blocks(int32_t seq_id) const;
  int64_t held_tokens(int32_t seq_id) const { return held_blocks(seq_id) * opt_.block_size; }
  // Blocks the sequence must still take to hold new_length positions (0 if it has them;
  // for an unknown sequence: the blocks of new_length positions).
  int64_t blocks_to_grow(int32_t seq_id, int64_t new_length) const;
  // Blocks that hold n positions.
  int64_t blocks_for(int64_t n) const { return (n + opt_.block_size - 1) / opt_.block_size; }

  // max_len > 0: the sequence will never hold more than max_len positions (at most
  // n_ctx_max). 0: n_ctx_max. Storage of the full layers comes from the pool as the
  // sequence grows, whatever max_len is.
  Status add_sequence(int32_t seq_id, int64_t max_len = 0);
  // The most positions the sequence can hold (its max_len); 0 for an unknown sequence.
  int64_t capacity(int32_t seq_id) const;
  Status remove_sequence(int32_t seq_id);
  bool has_sequence(int32_t seq_id) const { return seqs_.count(seq_id) != 0; }
  // Positions stored so far (the next token's position).
  Result<int64_t> length(int32_t seq_id) const;
  // Keep the first n positions (see the top of the file for when that is possible).
  Status truncate(int32_t seq_id, int64_t n);
  // The longest m <= min(n, length) that truncate() accepts: n itself when n == length,
  // n == 0, or the rings still hold [n - n_swa + 1, n); else the latest window snapshot
  // taken at a length <= n; else 0. 0 for an unknown sequence.
  int64_t usable_cut(int32_t seq_id, int64_t n) const;
  // Copy the sliding layers' window before the current length into a snapshot (a no-op
  // when one at this length exists). Costs window_snapshot_bytes() of host memory.
  Status snapshot_window(int32_t seq_id);
  // Lengths the sequence's snapshots were taken at (ascending).
  std::vector<int64_t> snapshot_lengths(int32_t seq_id) const;
  // Host bytes of one full snapshot: n_swa_layers * 2 * (n_swa - 1) * kv_dim * elt.
  int64_t window_snapshot_bytes() const;
  // Bytes held by one sequence (its rings, its pool blocks, its snapshots).
  Result<int64_t> bytes(int32_t seq_id) const;

  // Check that n_tok tokens can be appended at pos0 (== length) and take the pool blocks
  // they need. An error (nothing changed) when the pool has too few free blocks.
  Status reserve(int32_t seq_id, int64_t pos0, int64_t n_tok);
  // The backend descriptor of one layer for a chunk (after reserve()).
  backend::AttnSeq view(int32_t seq_id, int64_t il, int64_t tok0, int64_t pos0, int64_t n_tok);
  // Record that the chunk was computed: length becomes pos0 + n_tok.
  void commit(int32_t seq_id, int64_t new_length);

 private:
  struct Ring {  // a sliding layer's ring of one sequence
    std::vector<uint8_t> k, v;  // (ring_cap, n_head_kv, head_dim) elements (host storage)
    std::unique_ptr<backend::Buffer> kd, vd;  // the same, in device memory (opt_.device)
  };
  struct Pool {  // a full layer's blocks, (n_blocks, block_size, n_head_kv, head_dim) elements
    std::unique_ptr<uint8_t[]> k, v;  // host storage (left uninitialized: lazy pages)
    std::unique_ptr<backend::Buffer> kd, vd;  // device storage (opt_.device)
    void* kp() const { return kd ? kd->data() : static_cast<void*>(k.get()); }
    void* vp() const { return vd ? vd->data() : static_cast<void*>(v.get()); }
  };
  struct Snapshot {
    int64_t at = 0;     // the sequence length it was taken at
    int64_t first = 0;  // first position held: max(0, at - n_swa + 1)
    std::vector<uint8_t> data;  // per sliding layer: K rows then V rows, (at - first, kv_dim)
  };
  struct Seq {
    int64_t length = 0;
    int64_t max_len = 0;  // capacity in positions (<= n_ctx_max)
    int64_t ring_lo = 0;  // the rings hold positions [max(ring_lo, length - ring_cap), length)
    std::vector<Ring> rings;  // (n_layer): filled for sliding layers only
    std::vector<int32_t> blocks;  // the block table (host copy; capacity reserved up front)
    std::unique_ptr<backend::Buffer> table;  // device copy (opt_.device): n_ctx_max / block_size entries
    std::vector<Snapshot> snaps;  // ascending `at`
  };
  int64_t ring_lo(const Seq& s) const;
  bool ring_holds(const Seq& s, int64_t n) const;
  // Copy positions [first, at) of every sliding layer between the rings and `data`.
  void copy_window(Seq& s, int64_t first, int64_t at, uint8_t* data, bool to_ring);
  // Give the sequence's blocks past its first `keep` back to the free list.
  void release_blocks(Seq& s, int64_t keep);
  int64_t row_bytes() const { return cfg_.kv_dim() * elt_bytes(); }

  GptOssConfig cfg_;
  KvCacheOptions opt_;
  int64_t ring_cap_ = 0;
  int64_t n_blocks_ = 0;
  int64_t table_entries_ = 0;    // device block tables: blocks_for(n_ctx_max)
  std::vector<Pool> pools_;      // (n_layer): allocated for full layers only
  std::vector<int32_t> free_;    // free block ids; the back is taken first
  std::vector<std::unique_ptr<backend::Buffer>> spare_tables_;  // device tables of removed sequences
  std::map<int32_t, Seq> seqs_;
};

}  // namespace brass::model
