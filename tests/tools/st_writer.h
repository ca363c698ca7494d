// Test helper: writes safetensors files and HF-style checkpoints from in-memory tensors
// (an implementation independent of the reader under test: plain string building).
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace brass::testing_st {

struct Tensor {
  std::string dtype;             // "BF16", "F32", "U8", ...
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

inline void write_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                              bool pad_header = true) {
  std::string header = "{\"__metadata__\":{\"format\":\"pt\"}";
  uint64_t off = 0;
  for (const auto& [name, t] : tensors) {
    header += ",\"" + name + "\":{\"dtype\":\"" + t.dtype + "\",\"shape\":[";
    for (size_t i = 0; i < t.shape.size(); ++i) header += (i ? "," : "") + std::to_string(t.shape[i]);
    header += "],\"data_offsets\":[" + std::to_string(off) + "," + std::to_string(off + t.bytes.size()) + "]}";
    off += t.bytes.size();
  }
  header += "}";
  if (pad_header) while (header.size() % 8) header += ' ';
  std::ofstream out(path, std::ios::binary);
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
  out << header;
  for (const auto& [name, t] : tensors) out.write(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size());
}

}  // namespace brass::testing_st
