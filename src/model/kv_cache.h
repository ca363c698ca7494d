// KvCache: the K and V history of every live sequence for every layer (CPU backends;
// storage is host memory the CPU ops read directly).
// - Full-attention layers (odd il) keep every position: slot = position, storage grows
//   on demand (doubling) up to n_ctx_max.
// - Sliding-window layers (even il) keep a ring: slot = position % ring_capacity, with
//   ring_capacity = n_swa + max_chunk_tokens - 1 so that every query of a chunk of up to
//   max_chunk_tokens tokens still finds its n_swa - 1 predecessors after the whole chunk's
//   K/V were stored.
// Device backends (KvCacheOptions::device): storage is backend memory, and every layer
// gets its full size (ring or n_ctx_max slots) at add_sequence, so the pointers never
// move and a captured decode graph stays valid for the sequence's whole life.
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
};

class KvCache {
 public:
  static Result<KvCache> create(const GptOssConfig& c, const KvCacheOptions& o);

  DType type() const { return opt_.type; }
  int64_t elt_bytes() const { return opt_.type == DType::F16 ? 2 : 4; }
  int64_t n_ctx_max() const { return opt_.n_ctx_max; }
  int64_t max_chunk_tokens() const { return opt_.max_chunk_tokens; }
  int64_t ring_capacity() const { return ring_cap_; }

  // max_len > 0: the sequence will never hold more than max_len positions (at most
  // n_ctx_max): device storage of the full-attention layers is sized for it, so many
  // short sequences do not each take a whole n_ctx_max context. 0: n_ctx_max.
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
  // Bytes held by one sequence (all layers, K and V, snapshots included).
  Result<int64_t> bytes(int32_t seq_id) const;

  // Check that n_tok tokens can be appended at pos0 (== length) and grow storage.
  Status reserve(int32_t seq_id, int64_t pos0, int64_t n_tok);
  // The backend descriptor of one layer for a chunk (after reserve()).
  backend::AttnSeq view(int32_t seq_id, int64_t il, int64_t tok0, int64_t pos0, int64_t n_tok);
  // Record that the chunk was computed: length becomes pos0 + n_tok.
  void commit(int32_t seq_id, int64_t new_length);

 private:
  struct Layer {
    std::vector<uint8_t> k, v;  // (slots, n_head_kv, head_dim) elements
    std::unique_ptr<backend::Buffer> kd, vd;  // the same, in device memory (opt_.device)
    int64_t slots = 0;
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
    std::vector<Layer> layers;
    std::vector<Snapshot> snaps;  // ascending `at`
  };
  int64_t ring_lo(const Seq& s) const;
  bool ring_holds(const Seq& s, int64_t n) const;
  // Copy positions [first, at) of every sliding layer between the rings and `data`.
  void copy_window(Seq& s, int64_t first, int64_t at, uint8_t* data, bool to_ring);

  GptOssConfig cfg_;
  KvCacheOptions opt_;
  int64_t ring_cap_ = 0;
  std::map<int32_t, Seq> seqs_;
};

}  // namespace brass::model
