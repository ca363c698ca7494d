// GGUF v3 writer used by tests and tools (convert, synth). Metadata and tensor
// descriptors are collected first; tensor bytes are streamed to the file one tensor
// at a time (a full-size 20b synth never holds more than one tensor in memory).
// Tensors are laid out in add order, each at the padded end of the previous one (the
// exact offsets ggml requires); names are limited to 63 bytes (ggml's GGML_MAX_NAME).
// Note: llama.cpp rejects arrays of arrays in metadata; the writer can write them
// (GGUF allows them) but files meant for llama.cpp should not contain any.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "gguf/gguf.h"

namespace brass::gguf {

class Writer {
 public:
  explicit Writer(uint64_t alignment = kDefaultAlignment) : alignment_(alignment) {}

  void set_u8(const std::string& key, uint8_t v);
  void set_u32(const std::string& key, uint32_t v);
  void set_i32(const std::string& key, int32_t v);
  void set_u64(const std::string& key, uint64_t v);
  void set_f32(const std::string& key, float v);
  void set_bool(const std::string& key, bool v);
  void set_string(const std::string& key, const std::string& v);
  void set_string_array(const std::string& key, const std::vector<std::string>& v);
  void set_i32_array(const std::string& key, const std::vector<int32_t>& v);
  void set_f32_array(const std::string& key, const std::vector<float>& v);
  void set_value(const std::string& key, const Value& v);  // any value, e.g. copied from a Reader

  // Fill callback writes exactly nbytes = row_bytes(type, ne[0]) * prod(ne[1..]) into dst.
  using Fill = std::function<void(uint8_t* dst, int64_t nbytes)>;
  void add_tensor(const std::string& name, DType type, const std::vector<int64_t>& ne, Fill fill);
  // Convenience: copy bytes now (must be exactly the tensor's byte size).
  void add_tensor_bytes(const std::string& name, DType type, const std::vector<int64_t>& ne,
                        std::vector<uint8_t> bytes);

  // Writes header, metadata, tensor infos, then each tensor's bytes at aligned offsets.
  // Calls progress(done_bytes, total_bytes) after each tensor when given (tensor bytes,
  // padding not counted). Writes to path + ".tmp" and renames on success.
  Status write(const std::string& path,
               const std::function<void(int64_t, int64_t)>& progress = {}) const;
  // Same bytes as write(), in memory (tests, fuzz seeds, small files).
  Result<std::vector<uint8_t>> to_bytes() const;

  class Sink;  // destination of emitted bytes (file or memory), defined in writer.cpp

  uint64_t alignment() const { return alignment_; }

 private:
  struct PendingTensor {
    std::string name;
    DType type;
    std::vector<int64_t> ne;
    Fill fill;
  };
  Status emit(Sink& sink, const std::function<void(int64_t, int64_t)>& progress) const;

  uint64_t alignment_;
  std::vector<KeyValue> kv_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace brass::gguf
