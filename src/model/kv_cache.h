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
// truncate() supports prefix reuse; on sliding layers it only works while the ring still
// holds the window before the new end (an error says so otherwise).
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
};

class KvCache {
 public:
  static Result<KvCache> create(const GptOssConfig& c, const KvCacheOptions& o);

  DType type() const { return opt_.type; }
  int64_t elt_bytes() const { return opt_.type == DType::F16 ? 2 : 4; }
  int64_t n_ctx_max() const { return opt_.n_ctx_max; }
  int64_t max_chunk_tokens() const { return opt_.max_chunk_tokens; }
  int64_t ring_capacity() const { return ring_cap_; }

  Status add_sequence(int32_t seq_id);
  Status remove_sequence(int32_t seq_id);
  bool has_sequence(int32_t seq_id) const { return seqs_.count(seq_id) != 0; }
  // Positions stored so far (the next token's position).
  Result<int64_t> length(int32_t seq_id) const;
  Status truncate(int32_t seq_id, int64_t n);
  // Bytes held by one sequence (all layers, K and V).
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
  struct Seq {
    int64_t length = 0;
    std::vector<Layer> layers;
  };

  GptOssConfig cfg_;
  KvCacheOptions opt_;
  int64_t ring_cap_ = 0;
  std::map<int32_t, Seq> seqs_;
};

}  // namespace brass::model
