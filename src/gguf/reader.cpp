// GGUF v2/v3 reader. Everything read from the file is untrusted: every count and
// length is bounded by the bytes that remain before anything is allocated, every
// value type and tensor descriptor is validated, and only then are tensor views
// (pointers into the mapped file) handed out. Every error starts with the file path
// and names the key or tensor, with what was expected and what was found.
#include "gguf/reader.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>

namespace brass::gguf {
namespace {

// Smallest possible on-disk sizes, used to bound counts by the remaining bytes.
// A key/value: u64 key length + >= 1 key byte + u32 type + >= 1 value byte.
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;
// A tensor info: u64 name length + >= 1 name byte + u32 n_dims + >= 1 u64 dim +
// u32 type + u64 offset.
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;
constexpr uint32_t kMaxDims = 4;
// Cap on metadata values in one file. Each parsed value costs ~64 bytes of memory, so
// a crafted 1 GB array of u8 would otherwise cost ~64 GB; real files hold ~1M values
// (gpt-oss: 201k tokens, 446k merges, 201k token types).
constexpr uint64_t kMaxMetadataValues = uint64_t{1} << 24;

// Bytes a single array element occupies at least on disk.
uint64_t min_elem_bytes(ValueType t) {
  if (t == ValueType::STRING) return 8;     // u64 length (may be empty)
  if (t == ValueType::ARRAY) return 4 + 8;  // elem type + count
  return value_type_size(t);
}

std::string describe(const Value& v) {
  if (v.type == ValueType::ARRAY) {
    const auto& a = std::get<Array>(v.v);
    return fmt::format("array of {}", value_type_name(a.elem_type));
  }
  return value_type_name(v.type);
}

// Sequential little-endian reads over [data, data + size) with explicit bounds.
// Errors are plain messages; the caller prefixes path and key/tensor.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  Status need(size_t n, std::string_view what) const {
    if (n > remaining())
      return Status::errorf("{} needs {} bytes at offset {} but the file ends at {} bytes (truncated?)",
                            what, n, pos_, size_);
    return Status::ok();
  }
  template <class T>
  Result<T> take(std::string_view what) {
    BRASS_TRY(need(sizeof(T), what));
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));  // little-endian host assumed (x86, arm64)
    pos_ += sizeof(T);
    return v;
  }
  Result<std::string> take_string(std::string_view what) {
    BRASS_ASSIGN_OR_RETURN(uint64_t len, take<uint64_t>(what));
    if (len > remaining())
      return Status::errorf("{}: string length {} exceeds the {} bytes left in the file", what, len,
                            remaining());
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(len));
    pos_ += len;
    return s;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// Reads one value of type `t`. On error `where` receives the element path below the
// key (e.g. "[12][3]") so the caller can name exactly which element is bad.
Result<Value> read_value(Cursor& cur, ValueType t, int depth, uint64_t& budget, std::string& where) {
  Value out;
  out.type = t;
  switch (t) {
    case ValueType::UINT8: {
      BRASS_ASSIGN_OR_RETURN(auto x, cur.take<uint8_t>("uint8 value"));
      out.v = uint64_t{x};
      break;
    }
    case ValueType::UINT16: {
      BRASS_ASSIGN_OR_RETURN(auto x, cur.take<uint16_t>("uint16 value"));
      out.v = uint64_t{x};
      break;
    }
    case ValueType::UINT32: {
      BRASS_ASSIGN_OR_RETURN(auto x, cur.take<uint32_t>("uint32 value"));
      out.v = uint64_t{x};
      break;
    }
    case ValueType::UINT64: {
      BRASS_ASSIGN_OR_RETURN(auto x, cur.take<uint64_t>("uint64 value"));
      out.v = x;
      break;
    }
    case ValueType::INT8: {
      BRASS_ASSIGN_OR_RETURN(auto x, cur.take<int8_t>("int8 value"));
      out.v = int64_t{x};
      break;
    }
    case ValueType::INT16: {
      BRASS_ASSIGN_OR_RETURN(auto x, cur.take<int16_t>("int16 value"));
      out.v = int64_t{x};
      break;
    }
    case ValueType::INT32: {
      BRASS_ASSIGN_OR_RETURN(auto x, cur.take<int32_t>("int32 value"));
      out.v = int64_t{x};
      break;
    }
    case ValueType::INT64: {
      BRASS_ASSIGN_OR_RETURN(auto x, cur.take<int64_t>("int64 value"));
      out.v = x;
      break;
    }
    case ValueType::FLOAT32: {
      BRASS_ASSIGN_OR_RETURN(auto x, cur.take<float>("float32 value"));
      out.v = double{x};
      break;
    }
    case ValueType::FLOAT64: {
      BRASS_ASSIGN_OR_RETURN(auto x, cur.take<double>("float64 value"));
      out.v = x;
      break;
    }
    case ValueType::BOOL: {
      BRASS_ASSIGN_OR_RETURN(auto x, cur.take<uint8_t>("bool value"));
      if (x > 1) return Status::errorf("bool value must be 0 or 1, found {}", x);
      out.v = x == 1;
      break;
    }
    case ValueType::STRING: {
      BRASS_ASSIGN_OR_RETURN(auto s, cur.take_string("string"));
      out.v = std::move(s);
      break;
    }
    case ValueType::ARRAY: {
      if (depth >= kMaxArrayDepth)
        return Status::errorf("arrays nested deeper than the limit of {}", kMaxArrayDepth);
      BRASS_ASSIGN_OR_RETURN(uint32_t et, cur.take<uint32_t>("array element type"));
      if (!is_valid_value_type(et))
        return Status::errorf("unknown array element type {} (valid: 0..12)", et);
      const auto elem = static_cast<ValueType>(et);
      BRASS_ASSIGN_OR_RETURN(uint64_t n, cur.take<uint64_t>("array length"));
      const uint64_t min_bytes = min_elem_bytes(elem);
      if (n > cur.remaining() / min_bytes)
        return Status::errorf(
            "array length {} of {} cannot fit in the {} bytes left in the file ({} bytes each at least)",
            n, value_type_name(elem), cur.remaining(), min_bytes);
      if (n > budget)
        return Status::errorf("array length {} exceeds the metadata limit of {} values per file", n,
                              kMaxMetadataValues);
      budget -= n;
      Array arr;
      arr.elem_type = elem;
      arr.items.reserve(static_cast<size_t>(n));  // bounded by the remaining bytes above
      for (uint64_t i = 0; i < n; ++i) {
        auto item = read_value(cur, elem, depth + 1, budget, where);
        if (!item.is_ok()) {
          where = fmt::format("[{}]{}", i, where);
          return item.status();
        }
        arr.items.push_back(std::move(item).value());
      }
      out.v = std::move(arr);
      break;
    }
  }
  return out;
}

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

}  // namespace

Result<std::unique_ptr<Reader>> Reader::open(const std::string& path) {
  BRASS_ASSIGN_OR_RETURN(MmapFile f, MmapFile::open(path));
  std::unique_ptr<Reader> r(new Reader());
  r->file_ = std::move(f);
  r->base_ = r->file_.data();
  r->size_ = r->file_.size();
  r->path_ = path;
  BRASS_TRY(r->parse_all());
  return r;
}

Result<std::unique_ptr<Reader>> Reader::parse(const uint8_t* bytes, size_t size,
                                              const std::string& name) {
  std::unique_ptr<Reader> r(new Reader());
  r->base_ = bytes;
  r->size_ = bytes ? size : 0;
  r->path_ = name;
  BRASS_TRY(r->parse_all());
  return r;
}

Status Reader::parse_all() {
  const std::string& p = path_;
  Cursor cur(base_, size_);

  // ---- header: magic, version, n_tensors, n_kv ----
  if (size_ < 4)
    return Status::errorf("{}: file is {} bytes, too small to be a GGUF file (no magic)", p, size_);
  uint32_t magic = 0;
  std::memcpy(&magic, base_, 4);
  if (magic != kMagic) {
    std::string shown;
    for (int i = 0; i < 4; ++i) {
      const char c = static_cast<char>(base_[i]);
      shown += (c >= 0x20 && c < 0x7f) ? c : '?';
    }
    return Status::errorf("{}: bad magic '{}' (0x{:08x}), expected 'GGUF': not a GGUF file", p, shown,
                          magic);
  }
  cur = Cursor(base_, size_);
  (void)cur.take<uint32_t>("magic");
  auto fail = [&](const Status& s, std::string_view where) {
    return Status::errorf("{}: {}: {}", p, where, s.message());
  };
  {
    auto v = cur.take<uint32_t>("version");
    if (!v.is_ok()) return fail(v.status(), "header");
    version_ = *v;
  }
  if (version_ == 1)
    return Status::errorf("{}: GGUF version 1 is not supported (brass reads versions 2 and 3); "
                          "re-convert the model with a current llama.cpp",
                          p);
  if (version_ != 2 && version_ != 3) {
    const bool swapped = (version_ & 0xffffu) == 0 && version_ != 0;
    return Status::errorf("{}: unsupported GGUF version {} (brass reads versions 2 and 3){}", p,
                          version_, swapped ? "; is this a big-endian file?" : "");
  }
  uint64_t n_tensors = 0, n_kv = 0;
  {
    auto t = cur.take<uint64_t>("n_tensors");
    if (!t.is_ok()) return fail(t.status(), "header");
    n_tensors = *t;
    auto k = cur.take<uint64_t>("n_kv");
    if (!k.is_ok()) return fail(k.status(), "header");
    n_kv = *k;
  }
  if (n_kv > cur.remaining() / kMinKvBytes)
    return Status::errorf(
        "{}: header: n_kv = {} is impossible: the {} bytes after the header hold at most {} "
        "key/value pairs ({} bytes each at least)",
        p, n_kv, cur.remaining(), cur.remaining() / kMinKvBytes, kMinKvBytes);
  if (n_tensors > cur.remaining() / kMinTensorInfoBytes)
    return Status::errorf(
        "{}: header: n_tensors = {} is impossible: the {} bytes after the header hold at most {} "
        "tensor infos ({} bytes each at least)",
        p, n_tensors, cur.remaining(), cur.remaining() / kMinTensorInfoBytes, kMinTensorInfoBytes);

  // ---- metadata ----
  kv_.reserve(static_cast<size_t>(n_kv));
  uint64_t value_budget = kMaxMetadataValues;
  for (uint64_t i = 0; i < n_kv; ++i) {
    auto key = cur.take_string("key");
    if (!key.is_ok()) return fail(key.status(), fmt::format("key #{}", i));
    if (key->empty()) return Status::errorf("{}: key #{}: empty key name", p, i);
    const std::string kname = fmt::format("key '{}'", *key);
    if (auto it = kv_index_.find(*key); it != kv_index_.end())
      return Status::errorf("{}: {}: duplicate key (key #{} and key #{})", p, kname, it->second, i);
    auto type = cur.take<uint32_t>("value type");
    if (!type.is_ok()) return fail(type.status(), kname);
    if (!is_valid_value_type(*type))
      return Status::errorf("{}: {}: unknown value type {} (valid: 0..12)", p, kname, *type);
    std::string where;
    auto value = read_value(cur, static_cast<ValueType>(*type), 0, value_budget, where);
    if (!value.is_ok()) return fail(value.status(), kname + where);
    kv_index_.emplace(*key, kv_.size());
    kv_.push_back(KeyValue{std::move(key).value(), std::move(value).value()});
  }

  // general.alignment: llama.cpp reads it as a u32; it must be a power of two.
  if (const Value* a = find(kKeyAlignment)) {
    if (a->type != ValueType::UINT32)
      return Status::errorf("{}: key '{}': expected uint32, found {}", p, kKeyAlignment, describe(*a));
    const uint64_t al = std::get<uint64_t>(a->v);
    if (al == 0 || (al & (al - 1)) != 0)
      return Status::errorf("{}: key '{}': alignment {} is not a nonzero power of two", p,
                            kKeyAlignment, al);
    alignment_ = al;
  }

  // ---- tensor infos ----
  tensors_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo ti;
    {
      auto name = cur.take_string("name");
      if (!name.is_ok()) return fail(name.status(), fmt::format("tensor #{}", i));
      if (name->empty()) return Status::errorf("{}: tensor #{}: empty tensor name", p, i);
      ti.name = std::move(name).value();
    }
    const std::string tname = fmt::format("tensor '{}'", ti.name);
    if (auto it = tensor_index_.find(ti.name); it != tensor_index_.end())
      return Status::errorf("{}: {}: duplicate tensor name (tensor #{} and tensor #{})", p, tname,
                            it->second, i);
    auto n_dims = cur.take<uint32_t>("n_dims");
    if (!n_dims.is_ok()) return fail(n_dims.status(), tname);
    if (*n_dims < 1 || *n_dims > kMaxDims)
      return Status::errorf("{}: {}: n_dims = {}, expected 1..{}", p, tname, *n_dims, kMaxDims);
    int64_t n_elements = 1;
    for (uint32_t d = 0; d < *n_dims; ++d) {
      auto ne = cur.take<uint64_t>(fmt::format("ne[{}]", d));
      if (!ne.is_ok()) return fail(ne.status(), tname);
      if (*ne < 1 || *ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return Status::errorf("{}: {}: ne[{}] = {}, expected 1..2^63-1", p, tname, d, *ne);
      ti.ne.push_back(static_cast<int64_t>(*ne));
      if (__builtin_mul_overflow(n_elements, ti.ne.back(), &n_elements))
        return Status::errorf("{}: {}: element count of the shape {} overflows int64", p, tname,
                              ti.shape_str() + (d + 1 < *n_dims ? "..." : ""));
    }
    auto type = cur.take<uint32_t>("type");
    if (!type.is_ok()) return fail(type.status(), tname);
    const auto tr = dtype_traits(*type);
    if (!tr) return Status::errorf("{}: {}: unknown tensor type id {}", p, tname, *type);
    ti.type = tr->type;
    if (ti.ne[0] % tr->block_size != 0)
      return Status::errorf("{}: {}: ne[0] = {} is not a multiple of {}'s block size {}", p, tname,
                            ti.ne[0], tr->name, tr->block_size);
    if (__builtin_mul_overflow(n_elements / tr->block_size, tr->block_bytes, &ti.nbytes))
      return Status::errorf("{}: {}: byte size of {} {} overflows int64", p, tname, tr->name,
                            ti.shape_str());
    auto offset = cur.take<uint64_t>("offset");
    if (!offset.is_ok()) return fail(offset.status(), tname);
    ti.offset = *offset;
    if (ti.offset % alignment_ != 0)
      return Status::errorf("{}: {}: offset {} is not a multiple of the alignment {}", p, tname,
                            ti.offset, alignment_);
    tensor_index_.emplace(ti.name, tensors_.size());
    tensors_.push_back(std::move(ti));
  }

  // ---- data section: starts at the aligned end of the tensor infos ----
  data_offset_ = align_up(cur.pos(), alignment_);
  for (auto& ti : tensors_) {
    uint64_t start = 0;
    const uint64_t nbytes = static_cast<uint64_t>(ti.nbytes);
    if (__builtin_add_overflow(data_offset_, ti.offset, &start) || start > size_ ||
        nbytes > size_ - start)
      return Status::errorf(
          "{}: tensor '{}': data [offset {}, {} bytes) runs past the end of the file ({} bytes)", p,
          ti.name, data_offset_ + ti.offset, nbytes, size_);
    ti.data = base_ + start;
  }
  std::vector<size_t> order(tensors_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return tensors_[a].offset < tensors_[b].offset; });
  for (size_t k = 1; k < order.size(); ++k) {
    const TensorInfo& prev = tensors_[order[k - 1]];
    const TensorInfo& cur_t = tensors_[order[k]];
    if (prev.offset + static_cast<uint64_t>(prev.nbytes) > cur_t.offset)
      return Status::errorf(
          "{}: tensor '{}': data [offset {}, {} bytes) overlaps tensor '{}' [offset {}, {} bytes)", p,
          cur_t.name, data_offset_ + cur_t.offset, cur_t.nbytes, prev.name,
          data_offset_ + prev.offset, prev.nbytes);
  }
  return Status::ok();
}

const Value* Reader::find(std::string_view key) const {
  auto it = kv_index_.find(std::string(key));
  return it == kv_index_.end() ? nullptr : &kv_[it->second].value;
}

const TensorInfo* Reader::tensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

// ---- typed getters ----
namespace {

Result<uint64_t> as_uint(const Value& v) {
  if (const auto* u = std::get_if<uint64_t>(&v.v)) return *u;
  if (const auto* i = std::get_if<int64_t>(&v.v); i && *i >= 0) return static_cast<uint64_t>(*i);
  if (const auto* i = std::get_if<int64_t>(&v.v))
    return Status::errorf("value {} ({}) does not fit an unsigned integer", *i, value_type_name(v.type));
  return Status::errorf("expected an unsigned integer, found {}", describe(v));
}
Result<int64_t> as_int(const Value& v) {
  if (const auto* i = std::get_if<int64_t>(&v.v)) return *i;
  if (const auto* u = std::get_if<uint64_t>(&v.v)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return Status::errorf("value {} ({}) does not fit int64", *u, value_type_name(v.type));
    return static_cast<int64_t>(*u);
  }
  return Status::errorf("expected an integer, found {}", describe(v));
}
Result<double> as_float(const Value& v) {
  if (const auto* d = std::get_if<double>(&v.v)) return *d;
  if (const auto* u = std::get_if<uint64_t>(&v.v)) return static_cast<double>(*u);
  if (const auto* i = std::get_if<int64_t>(&v.v)) return static_cast<double>(*i);
  return Status::errorf("expected a float, found {}", describe(v));
}

}  // namespace

#define BRASS_GGUF_LOOKUP(key)                                                   \
  const Value* v = find(key);                                                    \
  if (!v) return Status::errorf("{}: key '{}' not found", path_, key);

Result<uint64_t> Reader::get_uint(std::string_view key) const {
  BRASS_GGUF_LOOKUP(key);
  auto r = as_uint(*v);
  if (!r.is_ok()) return Status::errorf("{}: key '{}': {}", path_, key, r.status().message());
  return r;
}

Result<int64_t> Reader::get_int(std::string_view key) const {
  BRASS_GGUF_LOOKUP(key);
  auto r = as_int(*v);
  if (!r.is_ok()) return Status::errorf("{}: key '{}': {}", path_, key, r.status().message());
  return r;
}

Result<double> Reader::get_float(std::string_view key) const {
  BRASS_GGUF_LOOKUP(key);
  auto r = as_float(*v);
  if (!r.is_ok()) return Status::errorf("{}: key '{}': {}", path_, key, r.status().message());
  return r;
}

Result<bool> Reader::get_bool(std::string_view key) const {
  BRASS_GGUF_LOOKUP(key);
  if (v->type != ValueType::BOOL)
    return Status::errorf("{}: key '{}': expected bool, found {}", path_, key, describe(*v));
  return std::get<bool>(v->v);
}

Result<std::string> Reader::get_string(std::string_view key) const {
  BRASS_GGUF_LOOKUP(key);
  if (v->type != ValueType::STRING)
    return Status::errorf("{}: key '{}': expected string, found {}", path_, key, describe(*v));
  return std::get<std::string>(v->v);
}

Result<std::vector<std::string>> Reader::get_string_array(std::string_view key) const {
  BRASS_GGUF_LOOKUP(key);
  if (v->type != ValueType::ARRAY || std::get<Array>(v->v).elem_type != ValueType::STRING)
    return Status::errorf("{}: key '{}': expected array of string, found {}", path_, key,
                          describe(*v));
  std::vector<std::string> out;
  const auto& items = std::get<Array>(v->v).items;
  out.reserve(items.size());
  for (const auto& it : items) out.push_back(std::get<std::string>(it.v));
  return out;
}

Result<std::vector<int64_t>> Reader::get_int_array(std::string_view key) const {
  BRASS_GGUF_LOOKUP(key);
  if (v->type != ValueType::ARRAY || !is_integer_type(std::get<Array>(v->v).elem_type))
    return Status::errorf("{}: key '{}': expected array of integers, found {}", path_, key,
                          describe(*v));
  std::vector<int64_t> out;
  const auto& items = std::get<Array>(v->v).items;
  out.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    auto r = as_int(items[i]);
    if (!r.is_ok())
      return Status::errorf("{}: key '{}'[{}]: {}", path_, key, i, r.status().message());
    out.push_back(*r);
  }
  return out;
}

Result<std::vector<double>> Reader::get_float_array(std::string_view key) const {
  BRASS_GGUF_LOOKUP(key);
  if (v->type != ValueType::ARRAY) {
    return Status::errorf("{}: key '{}': expected array of floats, found {}", path_, key,
                          describe(*v));
  }
  const auto et = std::get<Array>(v->v).elem_type;
  if (!is_float_type(et) && !is_integer_type(et))
    return Status::errorf("{}: key '{}': expected array of floats, found {}", path_, key,
                          describe(*v));
  std::vector<double> out;
  const auto& items = std::get<Array>(v->v).items;
  out.reserve(items.size());
  for (const auto& it : items) out.push_back(as_float(it).value());
  return out;
}

#undef BRASS_GGUF_LOOKUP

}  // namespace brass::gguf
