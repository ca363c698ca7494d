// Zero-copy GGUF reader: maps the file, parses and validates the header, every
// metadata key/value (types, lengths, nesting) and every tensor descriptor (known
// type, dims, offset alignment, byte size = shape x type, inside the file, no
// overlaps) before anything is used. Errors name the file and the key or tensor.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/mmap_file.h"
#include "core/status.h"
#include "gguf/gguf.h"

namespace brass::gguf {

class Reader {
 public:
  static Result<std::unique_ptr<Reader>> open(const std::string& path);
  // Parse from memory (used by the fuzzer and tests); `bytes` must outlive the Reader.
  static Result<std::unique_ptr<Reader>> parse(const uint8_t* bytes, size_t size,
                                               const std::string& name);

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // start of the tensor data section
  size_t file_size() const { return size_; }

  const std::vector<KeyValue>& metadata() const { return kv_; }
  const Value* find(std::string_view key) const;

  // Typed getters: error names the key and the expected vs actual type. Integer
  // getters accept any integer type whose value fits.
  Result<uint64_t> get_uint(std::string_view key) const;
  Result<int64_t> get_int(std::string_view key) const;
  Result<double> get_float(std::string_view key) const;  // FLOAT32/FLOAT64 (or integer)
  Result<bool> get_bool(std::string_view key) const;
  Result<std::string> get_string(std::string_view key) const;
  Result<std::vector<std::string>> get_string_array(std::string_view key) const;
  Result<std::vector<int64_t>> get_int_array(std::string_view key) const;
  Result<std::vector<double>> get_float_array(std::string_view key) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* tensor(std::string_view name) const;

  const uint8_t* base() const { return base_; }  // start of the mapped file

 private:
  Reader() = default;
  Status parse_all();

  MmapFile file_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  std::string path_;
  uint32_t version_ = 0;
  uint64_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<KeyValue> kv_;
  std::unordered_map<std::string, size_t> kv_index_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

}  // namespace brass::gguf
