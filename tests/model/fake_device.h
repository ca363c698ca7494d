// Test-only "device" backend whose memory happens to be host memory: KvCache may reach
// it only through alloc / upload / download (host_memory() false), and it counts those
// copies; every op is forwarded to an inner backend (usually the CPU reference), so the
// model's device path (device rings, device block tables) runs on the CPU.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "backend/backend.h"

namespace brass::testing {

struct HostBuffer final : backend::Buffer {
  std::vector<uint8_t> bytes;
  explicit HostBuffer(size_t n) : bytes(n) {}
  void* data() override { return bytes.data(); }
  size_t size() const override { return bytes.size(); }
};

// A "device" whose memory happens to be host memory; counts the copies through it.
class FakeDevice final : public backend::Backend {
 public:
  explicit FakeDevice(std::unique_ptr<backend::Backend> inner = nullptr) : in_(std::move(inner)) {}
  int64_t uploads = 0, downloads = 0;
  backend::MemoryInfo mem;  // what memory_info() reports when set (else the host's)
  backend::MemoryInfo memory_info() const override {
    return mem.total_bytes > 0 ? mem : backend::host_memory_info();
  }

  std::string name() const override { return "fake-device"; }
  bool host_memory() const override { return false; }
  bool supports_weight_type(DType t) const override { return in_ && in_->supports_weight_type(t); }
  Result<std::unique_ptr<backend::Buffer>> alloc(size_t n) override {
    return std::unique_ptr<backend::Buffer>(new HostBuffer(n));
  }
  void upload(void* dst, const void* src, size_t n) override {
    ++uploads;
    std::memcpy(dst, src, n);
  }
  void download(void* dst, const void* src, size_t n) override {
    ++downloads;
    std::memcpy(dst, src, n);
  }
  // As a device would: the bytes (taken now: the ops before it are done on the host) reach
  // dst only at await(), so a caller that reads dst early sees what was there before.
  uint64_t download_async(void* dst, const void* src, size_t n) override {
    ++downloads;
    const auto* b = static_cast<const uint8_t*>(src);
    deferred_.push_back({dst, std::vector<uint8_t>(b, b + n), ++tickets_});
    return tickets_;
  }
  void await(uint64_t ticket) override {
    for (Deferred& d : deferred_)
      if (d.ticket != 0 && d.ticket <= ticket) {
        std::memcpy(d.dst, d.bytes.data(), d.bytes.size());
        d.ticket = 0;
      }
  }
#define FWD(op, Args)                                   \
  void op(const backend::Args& a) override {            \
    if (in_) in_->op(a);                                \
    else ADD_FAILURE() << "FakeDevice: " #op " called"; \
  }
  FWD(embed, EmbedArgs)
  FWD(rms_norm, RmsNormArgs)
  FWD(matmul, MatmulArgs)
  FWD(rope, RopeArgs)
  FWD(kv_store, KvStoreArgs)
  FWD(attention, AttentionArgs)
  FWD(router, RouterArgs)
  FWD(moe, MoeArgs)
  FWD(add, AddArgs)
  FWD(gather_rows, GatherRowsArgs)
  FWD(add_rms_norm, AddRmsNormArgs)
  FWD(attn_qkv, AttnQkvArgs)
  FWD(argmax, ArgmaxArgs)
#undef FWD

 private:
  std::unique_ptr<backend::Backend> in_;
  struct Deferred {
    void* dst;
    std::vector<uint8_t> bytes;
    uint64_t ticket;
  };
  std::vector<Deferred> deferred_;
  uint64_t tickets_ = 0;
};

}  // namespace brass::testing
