// Safetensors reader (zero copy) for Hugging Face checkpoints. A file is an 8-byte
// little-endian header length N, N bytes of JSON ({"name": {"dtype", "shape",
// "data_offsets": [begin, end]}, "__metadata__": {...}}), then the data section; offsets
// are relative to its start. Every tensor is validated before use: known dtype, byte
// size = prod(shape) x dtype size, inside the file, no two tensors overlapping.
// A Checkpoint is a directory: model.safetensors.index.json (weight_map: name -> shard)
// when present, else every *.safetensors file in it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/mmap_file.h"
#include "core/status.h"

namespace brass::tools {

enum class StDType { BF16, F16, F32, U8, I8, I32, I64, F64, BOOL };
const char* st_dtype_name(StDType t);
int64_t st_dtype_size(StDType t);

struct StTensor {
  std::string name;
  StDType dtype = StDType::F32;
  std::vector<int64_t> shape;  // row-major, outermost first (PyTorch order)
  const uint8_t* data = nullptr;
  int64_t nbytes = 0;
  std::string file;  // the shard it lives in (for error messages)

  int64_t n_elements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  std::string shape_str() const;  // "(32, 5760, 90, 16)"
};

class SafetensorsFile {
 public:
  static Result<std::unique_ptr<SafetensorsFile>> open(const std::string& path);
  const std::string& path() const { return path_; }
  const std::vector<StTensor>& tensors() const { return tensors_; }

 private:
  MmapFile file_;
  std::string path_;
  std::vector<StTensor> tensors_;
};

class Checkpoint {
 public:
  static Result<std::unique_ptr<Checkpoint>> open(const std::string& dir);
  const StTensor* find(const std::string& name) const;
  // Tensor that must exist with this dtype and shape; errors name tensor, file, expected vs found.
  Result<const StTensor*> require(const std::string& name, StDType dtype,
                                  const std::vector<int64_t>& shape) const;
  const std::map<std::string, const StTensor*>& all() const { return index_; }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const StTensor*> index_;
};

// Float value of element i of a BF16/F16/F32 tensor.
float st_get_float(const StTensor& t, int64_t i);

}  // namespace brass::tools
