// cli::load_model's --moe-tiles choice: the names it takes and the rule `auto` applies
// (the weights plus the tile copy within half the device's memory).
#include "cli/load_model.h"

#include <gtest/gtest.h>

#include <random>

namespace brass::cli {
namespace {

TEST(MoeTiles, ParsesItsThreeNames) {
  EXPECT_EQ(parse_moe_tiles("auto").value(), MoeTiles::kAuto);
  EXPECT_EQ(parse_moe_tiles("on").value(), MoeTiles::kOn);
  EXPECT_EQ(parse_moe_tiles("off").value(), MoeTiles::kOff);
  for (const char* bad : {"", "yes", "ON", "1"}) {
    const auto r = parse_moe_tiles(bad);
    ASSERT_FALSE(r.is_ok()) << bad;
    EXPECT_NE(r.status().message().find("--moe-tiles"), std::string::npos);
  }
}

// The gpt-oss sizes (GiB: 20b weights ~12.8 + copy ~9.5; 120b ~60.8 + ~56.7) against an
// 80 GB H100 and a 141 GB H200; then random sizes against the rule written out.
TEST(MoeTiles, AutoFitsWithinHalfTheDevice) {
  constexpr int64_t GB = 1000LL * 1000 * 1000;
  const int64_t h100 = 80 * GB, h200 = 141 * GB;
  EXPECT_TRUE(moe_tiles_fit(13 * GB, 10 * GB, h100));
  EXPECT_TRUE(moe_tiles_fit(13 * GB, 10 * GB, h200));
  EXPECT_FALSE(moe_tiles_fit(65 * GB, 61 * GB, h100));
  EXPECT_FALSE(moe_tiles_fit(65 * GB, 61 * GB, h200));
  EXPECT_FALSE(moe_tiles_fit(13 * GB, 0, h200));  // no tiled experts: nothing to gain
  EXPECT_FALSE(moe_tiles_fit(13 * GB, 10 * GB, 0));  // no device memory known
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_int_distribution<int64_t> size(1, 200 * GB);
  for (int i = 0; i < 1000; ++i) {
    const int64_t w = size(rng), t = size(rng), d = size(rng);
    EXPECT_EQ(moe_tiles_fit(w, t, d), static_cast<double>(w) + static_cast<double>(t) <= 0.5 * static_cast<double>(d))
        << w << " " << t << " " << d;
  }
}

}  // namespace
}  // namespace brass::cli
