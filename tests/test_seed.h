// Replaying a randomized test: the tests that draw fresh random inputs print their seed
// on failure, and BRASS_TEST_SEED=<seed> makes them start from it instead.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <optional>

namespace brass::testing {

// The seed to replay (BRASS_TEST_SEED), or nullopt: draw a fresh one.
inline std::optional<uint64_t> replay_seed() {
  const char* e = std::getenv("BRASS_TEST_SEED");
  if (!e) return std::nullopt;
  return std::strtoull(e, nullptr, 10);
}

}  // namespace brass::testing
