// Safetensors parsing and validation (see safetensors.h).
#include "tools/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/half.h"

namespace brass::tools {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

Result<StDType> parse_dtype(const std::string& s) {
  if (s == "BF16") return StDType::BF16;
  if (s == "F16") return StDType::F16;
  if (s == "F32") return StDType::F32;
  if (s == "U8") return StDType::U8;
  if (s == "I8") return StDType::I8;
  if (s == "I32") return StDType::I32;
  if (s == "I64") return StDType::I64;
  if (s == "F64") return StDType::F64;
  if (s == "BOOL") return StDType::BOOL;
  return Status::errorf("unsupported dtype \"{}\" (expected BF16, F16, F32, U8, ...)", s);
}

std::string shape_to_string(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + ")";
}

}  // namespace

const char* st_dtype_name(StDType t) {
  switch (t) {
    case StDType::BF16: return "BF16";
    case StDType::F16: return "F16";
    case StDType::F32: return "F32";
    case StDType::U8: return "U8";
    case StDType::I8: return "I8";
    case StDType::I32: return "I32";
    case StDType::I64: return "I64";
    case StDType::F64: return "F64";
    case StDType::BOOL: return "BOOL";
  }
  return "?";
}

int64_t st_dtype_size(StDType t) {
  switch (t) {
    case StDType::BF16:
    case StDType::F16: return 2;
    case StDType::F32:
    case StDType::I32: return 4;
    case StDType::I64:
    case StDType::F64: return 8;
    case StDType::U8:
    case StDType::I8:
    case StDType::BOOL: return 1;
  }
  return 1;
}

std::string StTensor::shape_str() const { return shape_to_string(shape); }

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  auto f = std::unique_ptr<SafetensorsFile>(new SafetensorsFile());
  f->path_ = path;
  BRASS_ASSIGN_OR_RETURN(f->file_, MmapFile::open(path));
  const uint8_t* base = f->file_.data();
  const uint64_t size = f->file_.size();
  if (size < 8) return Status::errorf("{}: file of {} bytes is too small for a safetensors header", path, size);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | base[i];
  if (n > size - 8) {
    return Status::errorf("{}: header length {} exceeds the file ({} bytes)", path, n, size);
  }
  const uint64_t data_start = 8 + n;
  const uint64_t data_size = size - data_start;
  json header;
  try {
    header = json::parse(reinterpret_cast<const char*>(base + 8), reinterpret_cast<const char*>(base + 8 + n));
  } catch (const std::exception& e) {
    return Status::errorf("{}: header is not valid JSON: {}", path, e.what());
  }
  if (!header.is_object()) return Status::errorf("{}: header is not a JSON object", path);

  struct Span { uint64_t b, e; size_t i; };
  std::vector<Span> spans;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const std::string& name = it.key();
    const json& v = it.value();
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets")) {
      return Status::errorf("{}: tensor {}: entry needs dtype, shape and data_offsets", path, name);
    }
    StTensor t;
    t.name = name;
    t.file = path;
    if (!v["dtype"].is_string()) return Status::errorf("{}: tensor {}: dtype is not a string", path, name);
    auto dt = parse_dtype(v["dtype"].get<std::string>());
    if (!dt) return dt.status().with_context(fmt::format("{}: tensor {}", path, name));
    t.dtype = *dt;
    if (!v["shape"].is_array()) return Status::errorf("{}: tensor {}: shape is not an array", path, name);
    int64_t elems = 1;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) {
        return Status::errorf("{}: tensor {}: shape has a non-integer or negative dimension", path, name);
      }
      const int64_t dim = d.get<int64_t>();
      if (dim != 0 && elems > (int64_t{1} << 50) / dim) {
        return Status::errorf("{}: tensor {}: shape overflows", path, name);
      }
      elems *= dim;
      t.shape.push_back(dim);
    }
    const json& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
      return Status::errorf("{}: tensor {}: data_offsets must be two unsigned integers", path, name);
    }
    const uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
    if (e < b || e > data_size) {
      return Status::errorf("{}: tensor {}: data_offsets [{}, {}] outside the data section ({} bytes)", path,
                            name, b, e, data_size);
    }
    t.nbytes = elems * st_dtype_size(t.dtype);
    if (static_cast<uint64_t>(t.nbytes) != e - b) {
      return Status::errorf("{}: tensor {}: {} {} needs {} bytes but data_offsets span {}", path, name,
                            st_dtype_name(t.dtype), t.shape_str(), t.nbytes, e - b);
    }
    t.data = base + data_start + b;
    spans.push_back({b, e, f->tensors_.size()});
    f->tensors_.push_back(std::move(t));
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.b < b.b; });
  for (size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].b < spans[i - 1].e && spans[i].e > spans[i].b) {
      return Status::errorf("{}: tensors {} and {} overlap", path, f->tensors_[spans[i - 1].i].name,
                            f->tensors_[spans[i].i].name);
    }
  }
  return f;
}

Result<std::unique_ptr<Checkpoint>> Checkpoint::open(const std::string& dir) {
  auto c = std::unique_ptr<Checkpoint>(new Checkpoint());
  c->dir_ = dir;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return Status::errorf("{}: not a directory", dir);
  std::vector<std::string> shards;
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  std::map<std::string, std::string> weight_map;
  if (fs::exists(index)) {
    std::ifstream in(index);
    json j;
    try {
      in >> j;
    } catch (const std::exception& e) {
      return Status::errorf("{}: not valid JSON: {}", index.string(), e.what());
    }
    if (!j.contains("weight_map") || !j["weight_map"].is_object()) {
      return Status::errorf("{}: missing object \"weight_map\"", index.string());
    }
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it.value().is_string()) return Status::errorf("{}: weight_map[{}] is not a string", index.string(), it.key());
      weight_map[it.key()] = it.value().get<std::string>();
      if (std::find(shards.begin(), shards.end(), it.value().get<std::string>()) == shards.end()) {
        shards.push_back(it.value().get<std::string>());
      }
    }
  } else {
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      if (e.path().extension() == ".safetensors") shards.push_back(e.path().filename().string());
    }
    std::sort(shards.begin(), shards.end());
  }
  if (shards.empty()) return Status::errorf("{}: no *.safetensors files found", dir);
  for (const auto& s : shards) {
    BRASS_ASSIGN_OR_RETURN(auto f, SafetensorsFile::open((fs::path(dir) / s).string()));
    for (const auto& t : f->tensors()) {
      if (c->index_.count(t.name)) {
        return Status::errorf("{}: tensor {} appears in both {} and {}", dir, t.name, c->index_[t.name]->file, t.file);
      }
      if (!weight_map.empty()) {
        auto it = weight_map.find(t.name);
        if (it == weight_map.end() || it->second != s) {
          return Status::errorf("{}: tensor {} is in {} but the index says {}", dir, t.name, s,
                                it == weight_map.end() ? "nothing" : it->second);
        }
      }
      c->index_[t.name] = &t;
    }
    c->files_.push_back(std::move(f));
  }
  for (const auto& [name, shard] : weight_map) {
    if (!c->index_.count(name)) return Status::errorf("{}: index lists tensor {} in {} but it is not there", dir, name, shard);
  }
  return c;
}

const StTensor* Checkpoint::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

Result<const StTensor*> Checkpoint::require(const std::string& name, StDType dtype,
                                            const std::vector<int64_t>& shape) const {
  const StTensor* t = find(name);
  if (!t) return Status::errorf("{}: tensor {} is missing", dir_, name);
  if (t->dtype != dtype) {
    return Status::errorf("{}: tensor {}: expected dtype {}, found {}", t->file, name, st_dtype_name(dtype),
                          st_dtype_name(t->dtype));
  }
  if (t->shape != shape) {
    return Status::errorf("{}: tensor {}: expected shape {}, found {}", t->file, name, shape_to_string(shape),
                          t->shape_str());
  }
  return t;
}

float st_get_float(const StTensor& t, int64_t i) {
  switch (t.dtype) {
    case StDType::BF16: {
      uint16_t h;
      std::memcpy(&h, t.data + 2 * i, 2);
      return bf16_to_f32(h);
    }
    case StDType::F16: {
      uint16_t h;
      std::memcpy(&h, t.data + 2 * i, 2);
      return f16_to_f32(h);
    }
    case StDType::F32: {
      float f;
      std::memcpy(&f, t.data + 4 * i, 4);
      return f;
    }
    default:
      BRASS_CHECK_MSG(false, "st_get_float on {} tensor {}", st_dtype_name(t.dtype), t.name);
  }
  return 0.0f;
}

}  // namespace brass::tools
