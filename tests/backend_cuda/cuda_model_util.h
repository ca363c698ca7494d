// Loading a tiny model file onto the CUDA backend (or the CPU reference backend) for the
// whole-model GPU tests: one loader instead of a copy per test file.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "backend/cuda/cuda_backend.h"
#include "cuda_test_util.h"
#include "gguf/reader.h"
#include "model/model.h"

namespace brass::model::testing {

// co: the CUDA backend's options; null: the CPU reference backend. Null (with a recorded
// failure) if anything fails.
inline std::unique_ptr<Model> load_with(const std::string& path, const ModelOptions& o,
                                        const backend::CudaBackendOptions* co) {
  auto reader = gguf::Reader::open(path);
  EXPECT_TRUE(reader.is_ok()) << reader.status().message();
  if (!reader.is_ok()) return nullptr;
  std::unique_ptr<backend::Backend> be;
  if (co) {
    auto b = backend::make_cuda_backend(*co);
    EXPECT_TRUE(b.is_ok()) << b.status().message();
    if (!b.is_ok()) return nullptr;
    be = std::move(b).value();
  } else {
    be = backend::testing::reference_backend();
  }
  auto m = Model::load(std::move(reader).value(), o, std::move(be));
  EXPECT_TRUE(m.is_ok()) << m.status().message();
  return m.is_ok() ? std::move(m).value() : nullptr;
}

// cuda: the CUDA backend with int8 activations q8x (false: exact mode, f32 activations and
// no tensor cores) and, tc_moe_min > 0, that MoE tensor-core threshold in slots per expert;
// else the CPU reference backend.
inline std::unique_ptr<Model> load_on(const std::string& path, const ModelOptions& o, bool cuda, bool q8x = false,
                                      int64_t tc_moe_min = 0) {
  backend::CudaBackendOptions co;
  co.int8_activations = q8x;
  if (tc_moe_min > 0) co.tc_min_slots_per_expert = tc_moe_min;
  return load_with(path, o, cuda ? &co : nullptr);
}

}  // namespace brass::model::testing
