// GGUF v3 writer. Layout (what ggml's gguf reader expects): header (magic, version,
// n_tensors u64, n_kv u64), key/values (u64-length strings, u32 value types, arrays
// as elem type u32 + count u64 + items), tensor infos (name, n_dims u32, ne[] u64,
// type u32, offset u64), zero padding to the alignment, then the data section where
// tensor i starts at the padded end of tensor i-1 (ggml checks offsets are exactly
// these) and every tensor, the last included, is followed by zero padding.
// Metadata and descriptors are validated in write() before a byte is emitted.
#include "gguf/writer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <unordered_set>

namespace brass::gguf {

// Where emitted bytes go: a file (streamed) or memory.
class Writer::Sink {
 public:
  virtual ~Sink() = default;
  virtual Status put(const void* p, size_t n) = 0;
};

namespace {

class FileSink : public Writer::Sink {
 public:
  FileSink(std::FILE* f, const std::string& path) : f_(f), path_(path) {}
  Status put(const void* p, size_t n) override {
    if (n && std::fwrite(p, 1, n, f_) != n)
      return Status::errorf("{}: write failed: {}", path_, std::strerror(errno));
    return Status::ok();
  }

 private:
  std::FILE* f_;
  const std::string& path_;
};

class MemSink : public Writer::Sink {
 public:
  Status put(const void* p, size_t n) override {
    const auto* b = static_cast<const uint8_t*>(p);
    bytes.insert(bytes.end(), b, b + n);
    return Status::ok();
  }
  std::vector<uint8_t> bytes;
};

// Serializes header/metadata/tensor-info bytes into a buffer.
struct Bytes {
  std::vector<uint8_t> b;
  template <class T>
  void put(T v) {
    uint8_t tmp[sizeof(T)];
    std::memcpy(tmp, &v, sizeof(T));  // little-endian host
    b.insert(b.end(), tmp, tmp + sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
  }
};

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// Checks that the variant alternative and range match the declared type.
Status check_value(const Value& v, int depth) {
  const char* tn = value_type_name(v.type);
  if (!is_valid_value_type(static_cast<uint32_t>(v.type)))
    return Status::errorf("invalid value type {}", static_cast<uint32_t>(v.type));
  if (is_unsigned_type(v.type)) {
    const auto* u = std::get_if<uint64_t>(&v.v);
    if (!u) return Status::errorf("{} value must hold uint64_t", tn);
    const int bits = static_cast<int>(value_type_size(v.type)) * 8;
    if (bits < 64 && *u >> bits) return Status::errorf("value {} does not fit {}", *u, tn);
  } else if (is_signed_type(v.type)) {
    const auto* i = std::get_if<int64_t>(&v.v);
    if (!i) return Status::errorf("{} value must hold int64_t", tn);
    const int bits = static_cast<int>(value_type_size(v.type)) * 8;
    if (bits < 64 && (*i < -(int64_t{1} << (bits - 1)) || *i >= (int64_t{1} << (bits - 1))))
      return Status::errorf("value {} does not fit {}", *i, tn);
  } else if (is_float_type(v.type)) {
    if (!std::holds_alternative<double>(v.v)) return Status::errorf("{} value must hold double", tn);
  } else if (v.type == ValueType::BOOL) {
    if (!std::holds_alternative<bool>(v.v)) return Status::error("bool value must hold bool");
  } else if (v.type == ValueType::STRING) {
    if (!std::holds_alternative<std::string>(v.v))
      return Status::error("string value must hold std::string");
  } else {  // ARRAY
    const auto* a = std::get_if<Array>(&v.v);
    if (!a) return Status::error("array value must hold Array");
    if (depth + 1 > kMaxArrayDepth)
      return Status::errorf("arrays nested deeper than the limit of {}", kMaxArrayDepth);
    for (size_t i = 0; i < a->items.size(); ++i) {
      if (a->items[i].type != a->elem_type)
        return Status::errorf("[{}]: item of type {} in an array of {}", i,
                              value_type_name(a->items[i].type), value_type_name(a->elem_type));
      Status s = check_value(a->items[i], depth + 1);
      if (!s.is_ok()) return Status::errorf("[{}]: {}", i, s.message());
    }
  }
  return Status::ok();
}

void put_value(Bytes& out, const Value& v) {
  switch (v.type) {
    case ValueType::UINT8: out.put<uint8_t>(static_cast<uint8_t>(std::get<uint64_t>(v.v))); break;
    case ValueType::UINT16: out.put<uint16_t>(static_cast<uint16_t>(std::get<uint64_t>(v.v))); break;
    case ValueType::UINT32: out.put<uint32_t>(static_cast<uint32_t>(std::get<uint64_t>(v.v))); break;
    case ValueType::UINT64: out.put<uint64_t>(std::get<uint64_t>(v.v)); break;
    case ValueType::INT8: out.put<int8_t>(static_cast<int8_t>(std::get<int64_t>(v.v))); break;
    case ValueType::INT16: out.put<int16_t>(static_cast<int16_t>(std::get<int64_t>(v.v))); break;
    case ValueType::INT32: out.put<int32_t>(static_cast<int32_t>(std::get<int64_t>(v.v))); break;
    case ValueType::INT64: out.put<int64_t>(std::get<int64_t>(v.v)); break;
    case ValueType::FLOAT32: out.put<float>(static_cast<float>(std::get<double>(v.v))); break;
    case ValueType::FLOAT64: out.put<double>(std::get<double>(v.v)); break;
    case ValueType::BOOL: out.put<uint8_t>(std::get<bool>(v.v) ? 1 : 0); break;
    case ValueType::STRING: out.put_string(std::get<std::string>(v.v)); break;
    case ValueType::ARRAY: {
      const auto& a = std::get<Array>(v.v);
      out.put<uint32_t>(static_cast<uint32_t>(a.elem_type));
      out.put<uint64_t>(a.items.size());
      for (const auto& it : a.items) put_value(out, it);
      break;
    }
  }
}

}  // namespace

// ---- metadata setters: a later set of the same key replaces the earlier value ----
void Writer::set_value(const std::string& key, const Value& v) {
  for (auto& kv : kv_) {
    if (kv.key == key) {
      kv.value = v;
      return;
    }
  }
  kv_.push_back(KeyValue{key, v});
}
void Writer::set_u8(const std::string& key, uint8_t v) { set_value(key, make_uint(ValueType::UINT8, v)); }
void Writer::set_u32(const std::string& key, uint32_t v) {
  set_value(key, make_uint(ValueType::UINT32, v));
}
void Writer::set_i32(const std::string& key, int32_t v) { set_value(key, make_int(ValueType::INT32, v)); }
void Writer::set_u64(const std::string& key, uint64_t v) {
  set_value(key, make_uint(ValueType::UINT64, v));
}
void Writer::set_f32(const std::string& key, float v) {
  set_value(key, make_float(ValueType::FLOAT32, v));
}
void Writer::set_bool(const std::string& key, bool v) { set_value(key, make_bool(v)); }
void Writer::set_string(const std::string& key, const std::string& v) {
  set_value(key, make_string(v));
}
void Writer::set_string_array(const std::string& key, const std::vector<std::string>& v) {
  std::vector<Value> items;
  items.reserve(v.size());
  for (const auto& s : v) items.push_back(make_string(s));
  set_value(key, make_array(ValueType::STRING, std::move(items)));
}
void Writer::set_i32_array(const std::string& key, const std::vector<int32_t>& v) {
  std::vector<Value> items;
  items.reserve(v.size());
  for (int32_t x : v) items.push_back(make_int(ValueType::INT32, x));
  set_value(key, make_array(ValueType::INT32, std::move(items)));
}
void Writer::set_f32_array(const std::string& key, const std::vector<float>& v) {
  std::vector<Value> items;
  items.reserve(v.size());
  for (float x : v) items.push_back(make_float(ValueType::FLOAT32, x));
  set_value(key, make_array(ValueType::FLOAT32, std::move(items)));
}

void Writer::add_tensor(const std::string& name, DType type, const std::vector<int64_t>& ne,
                        Fill fill) {
  tensors_.push_back(PendingTensor{name, type, ne, std::move(fill)});
}

void Writer::add_tensor_bytes(const std::string& name, DType type, const std::vector<int64_t>& ne,
                              std::vector<uint8_t> bytes) {
  auto shared = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  add_tensor(name, type, ne, [shared, name](uint8_t* dst, int64_t nbytes) {
    BRASS_CHECK_MSG(static_cast<int64_t>(shared->size()) == nbytes,
                    "tensor '{}': add_tensor_bytes got {} bytes, the shape needs {}", name,
                    shared->size(), nbytes);
    std::memcpy(dst, shared->data(), shared->size());
  });
}

Status Writer::emit(Sink& sink, const std::function<void(int64_t, int64_t)>& progress) const {
  if (alignment_ == 0 || (alignment_ & (alignment_ - 1)) != 0 ||
      alignment_ > std::numeric_limits<uint32_t>::max())
    return Status::errorf("alignment {} is not a power of two that fits uint32", alignment_);

  // Metadata: validate every value; make general.alignment agree with alignment_.
  std::vector<KeyValue> kv = kv_;
  bool have_alignment = false;
  for (const auto& e : kv) {
    if (e.key.empty()) return Status::error("empty metadata key");
    Status s = check_value(e.value, 0);
    if (!s.is_ok()) return Status::errorf("key '{}': {}", e.key, s.message());
    if (e.key == kKeyAlignment) {
      if (e.value.type != ValueType::UINT32 || std::get<uint64_t>(e.value.v) != alignment_)
        return Status::errorf("key '{}': must be uint32 {} (the writer's alignment), found {}",
                              kKeyAlignment, alignment_, value_to_string(e.value));
      have_alignment = true;
    }
  }
  if (!have_alignment && alignment_ != kDefaultAlignment)
    kv.push_back(KeyValue{kKeyAlignment, make_uint(ValueType::UINT32, alignment_)});

  // Tensor descriptors and their offsets in the data section.
  std::vector<uint64_t> offsets(tensors_.size());
  std::vector<int64_t> sizes(tensors_.size());
  std::unordered_set<std::string> names;
  uint64_t data_size = 0;
  int64_t max_bytes = 0, total_bytes = 0;  // progress reports tensor bytes, not padding
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const auto& t = tensors_[i];
    if (t.name.empty()) return Status::errorf("tensor #{}: empty name", i);
    if (t.name.size() > kMaxTensorNameLen)
      return Status::errorf("tensor '{}': name is {} bytes, llama.cpp allows at most {}", t.name,
                            t.name.size(), kMaxTensorNameLen);
    if (!names.insert(t.name).second) return Status::errorf("tensor '{}': duplicate name", t.name);
    if (t.ne.empty() || t.ne.size() > 4)
      return Status::errorf("tensor '{}': {} dims, expected 1..4", t.name, t.ne.size());
    int64_t n = 1;
    for (size_t d = 0; d < t.ne.size(); ++d) {
      if (t.ne[d] < 1) return Status::errorf("tensor '{}': ne[{}] = {}, expected >= 1", t.name, d, t.ne[d]);
      if (__builtin_mul_overflow(n, t.ne[d], &n))
        return Status::errorf("tensor '{}': element count overflows int64", t.name);
    }
    const auto tr = dtype_traits(static_cast<uint32_t>(t.type));
    if (!tr) return Status::errorf("tensor '{}': unknown type id {}", t.name, static_cast<uint32_t>(t.type));
    if (t.ne[0] % tr->block_size != 0)
      return Status::errorf("tensor '{}': ne[0] = {} is not a multiple of {}'s block size {}", t.name,
                            t.ne[0], tr->name, tr->block_size);
    if (__builtin_mul_overflow(n / tr->block_size, tr->block_bytes, &sizes[i]))
      return Status::errorf("tensor '{}': byte size overflows int64", t.name);
    offsets[i] = data_size;
    data_size = align_up(data_size + static_cast<uint64_t>(sizes[i]), alignment_);
    max_bytes = std::max(max_bytes, sizes[i]);
    total_bytes += sizes[i];
  }

  // Header, metadata and tensor infos.
  Bytes h;
  h.put<uint32_t>(kMagic);
  h.put<uint32_t>(3);
  h.put<uint64_t>(tensors_.size());
  h.put<uint64_t>(kv.size());
  for (const auto& e : kv) {
    h.put_string(e.key);
    h.put<uint32_t>(static_cast<uint32_t>(e.value.type));
    put_value(h, e.value);
  }
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const auto& t = tensors_[i];
    h.put_string(t.name);
    h.put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) h.put<uint64_t>(static_cast<uint64_t>(d));
    h.put<uint32_t>(static_cast<uint32_t>(t.type));
    h.put<uint64_t>(offsets[i]);
  }
  h.b.resize(align_up(h.b.size(), alignment_), 0);
  BRASS_TRY(sink.put(h.b.data(), h.b.size()));

  // Data: one tensor at a time through the Fill callback, then zero padding.
  const std::vector<uint8_t> zeros(alignment_, 0);
  std::vector<uint8_t> buf;  // (max tensor bytes) reused for every tensor
  buf.reserve(static_cast<size_t>(max_bytes));
  int64_t done = 0;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    buf.resize(static_cast<size_t>(sizes[i]));
    tensors_[i].fill(buf.data(), sizes[i]);
    BRASS_TRY(sink.put(buf.data(), buf.size()));
    const uint64_t pad = align_up(static_cast<uint64_t>(sizes[i]), alignment_) - sizes[i];
    BRASS_TRY(sink.put(zeros.data(), pad));
    done += sizes[i];
    if (progress) progress(done, total_bytes);
  }
  if (progress && tensors_.empty()) progress(0, 0);
  return Status::ok();
}

Status Writer::write(const std::string& path,
                     const std::function<void(int64_t, int64_t)>& progress) const {
  // Write to a temporary name and rename, so an interrupted write never leaves a
  // truncated file under the final name.
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return Status::errorf("{}: cannot create: {}", tmp, std::strerror(errno));
  std::setvbuf(f, nullptr, _IOFBF, 4 << 20);
  FileSink sink(f, tmp);
  Status s = emit(sink, progress);
  if (!s.is_ok() && s.message().rfind(tmp, 0) != 0) s = s.with_context(path);
  if (std::fclose(f) != 0 && s.is_ok())
    s = Status::errorf("{}: close failed: {}", tmp, std::strerror(errno));
  if (s.is_ok() && std::rename(tmp.c_str(), path.c_str()) != 0)
    s = Status::errorf("{}: cannot rename to {}: {}", tmp, path, std::strerror(errno));
  if (!s.is_ok()) std::remove(tmp.c_str());
  return s;
}

Result<std::vector<uint8_t>> Writer::to_bytes() const {
  MemSink sink;
  Status s = emit(sink, {});
  if (!s.is_ok()) return s.with_context("<memory>");
  return std::move(sink.bytes);
}

}  // namespace brass::gguf
