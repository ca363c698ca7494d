// Fresh random inputs for the backend tests (CPU ops, SIMD kernels, CUDA kernels): a
// generator seeded from std::random_device whose seed SEED_TRACE prints on failure.
// BRASS_TEST_SEED=<seed> replays one (test_seed.h): every generator then starts from it.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "../test_seed.h"

namespace brass::backend::testing {

struct Rng {
  uint32_t seed;
  std::mt19937 gen;
  Rng() : seed(static_cast<uint32_t>(brass::testing::replay_seed().value_or(std::random_device{}()))), gen(seed) {}
  float uni(float lo = -1, float hi = 1) { return std::uniform_real_distribution<float>(lo, hi)(gen); }
  std::vector<float> vec(size_t n, float lo = -1, float hi = 1) {
    std::vector<float> v(n);
    for (auto& x : v) x = uni(lo, hi);
    return v;
  }
  int integer(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen); }
};

}  // namespace brass::backend::testing

#define SEED_TRACE(rng) SCOPED_TRACE(::testing::Message() << "seed " << (rng).seed)
