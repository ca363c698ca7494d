// core/memory: the fit check against hand-picked sizes, MemAvailable sanity, and
// populating a real mapping of a temp file with fresh random content.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <vector>

#include "core/memory.h"
#include "core/mmap_file.h"

namespace brass {
namespace {

TEST(Memory, FitWarningNamesBothSizes) {
  const int64_t gib = int64_t{1} << 30;
  EXPECT_EQ(memory_fit_warning("m.gguf", 11 * gib, 22 * gib), "");
  EXPECT_EQ(memory_fit_warning("m.gguf", 11 * gib, std::nullopt), "");  // unknown: say nothing
  const std::string w = memory_fit_warning("m.gguf", 59 * gib, 22 * gib);
  EXPECT_NE(w.find("m.gguf"), std::string::npos) << w;
  EXPECT_NE(w.find("59.00 GiB"), std::string::npos) << w;
  EXPECT_NE(w.find("22.00 GiB"), std::string::npos) << w;
  EXPECT_NE(w.find("does not fit"), std::string::npos) << w;
}

TEST(Memory, MemAvailableIsPlausible) {
  auto a = mem_available_bytes();
  ASSERT_TRUE(a.has_value());
  const int64_t total = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  EXPECT_GT(*a, 0);
  EXPECT_LE(*a, total);
}

TEST(Memory, PopulateReadsTheWholeMappingWithProgress) {
  std::mt19937_64 rng(std::random_device{}());
  const size_t n = (size_t{3} << 20) + 12345;  // not a multiple of a page
  std::vector<char> bytes(n);
  for (auto& b : bytes) b = static_cast<char>(rng());
  const std::string path = ::testing::TempDir() + "/brass_populate_" + std::to_string(getpid());
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(n));
  auto f = MmapFile::open(path);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  size_t last = 0, calls = 0;
  populate_read(f->data() + 1, f->size() - 1, [&](size_t done, size_t total) {
    EXPECT_EQ(total, n - 1);
    EXPECT_GE(done, last);
    last = done;
    ++calls;
  });
  EXPECT_EQ(last, n - 1);
  EXPECT_GE(calls, 1u);
  EXPECT_EQ(std::memcmp(f->data(), bytes.data(), n), 0);  // the mapping still reads the file
  std::remove(path.c_str());
}

}  // namespace
}  // namespace brass
