// Shared plumbing of the oracle suites: running the brass binary and node, reading
// raw float32 logits, and comparing two logit matrices (max |diff| and greedy
// agreement that tolerates only genuine near-ties).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "../test_seed.h"

namespace brass::oracle {

inline std::string brass_exe() { return std::string(BRASS_BINARY_DIR) + "/brass"; }
inline std::string source(const std::string& rel) { return std::string(BRASS_SOURCE_DIR) + "/" + rel; }

struct CmdResult {
  int rc = -1;
  std::string output;
};

// Runs a shell command (stderr merged), returning its exit code and output.
inline CmdResult run_cmd(const std::string& cmd) {
  CmdResult r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  int st = pclose(p);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "brass-oracle-XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline std::vector<float> read_f32(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// A fresh seed, or BRASS_TEST_SEED's to replay a failure (each test prints its seed).
inline uint64_t fresh_seed() {
  if (const auto r = brass::testing::replay_seed()) return *r;
  uint64_t s = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  return s;
}

struct Comparison {
  double max_abs = 0;          // max |a - b| over everything
  double max_rel_row = 0;      // max over rows of max|a-b| / max|a|
  double rms_rel = 0;          // sqrt(mean (a-b)^2) / sqrt(mean a^2) over everything
  double median_row_rms_rel = 0;  // median over rows of the same ratio: robust to a few
                                  // rows where a router's top-4 flipped
  int argmax_mismatch = 0;     // rows whose argmax differs while the reference's top-2 margin > tie_margin
  int near_ties = 0;           // rows whose argmax differs inside the tie margin
  std::string worst;
};

// a: reference (n_rows, n_vocab); b: brass. A differing argmax counts as a near-tie
// only when the reference's own margin between its top token and brass's choice is
// below tie_margin (the two engines may legitimately order tokens that close).
inline Comparison compare_logits(const float* a, const float* b, int64_t n_rows, int64_t n_vocab,
                                 double tie_margin) {
  Comparison c;
  double sum_d2 = 0, sum_a2 = 0;
  std::vector<double> row_rel;
  for (int64_t r = 0; r < n_rows; ++r) {
    double row_d2 = 0, row_a2 = 0;
    const float* x = a + r * n_vocab;
    const float* y = b + r * n_vocab;
    int64_t ax = 0, ay = 0;
    double row_max = 0, row_abs = 0;
    for (int64_t i = 0; i < n_vocab; ++i) {
      double d = std::fabs(static_cast<double>(x[i]) - y[i]);
      if (!(d <= c.max_abs)) {
        c.max_abs = d;
        c.worst = fmt::format("row {} token {}: ref {} brass {}", r, i, x[i], y[i]);
      }
      row_max = std::max(row_max, d);
      row_d2 += d * d;
      row_a2 += static_cast<double>(x[i]) * x[i];
      row_abs = std::max(row_abs, std::fabs(static_cast<double>(x[i])));
      if (x[i] > x[ax]) ax = i;
      if (y[i] > y[ay]) ay = i;
    }
    c.max_rel_row = std::max(c.max_rel_row, row_max / std::max(row_abs, 1e-30));
    sum_d2 += row_d2;
    sum_a2 += row_a2;
    row_rel.push_back(std::sqrt(row_d2 / std::max(row_a2, 1e-300)));
    if (ax != ay) {
      if (x[ax] - x[ay] < tie_margin) ++c.near_ties;
      else ++c.argmax_mismatch;
    }
  }
  c.rms_rel = std::sqrt(sum_d2 / std::max(sum_a2, 1e-300));
  if (!row_rel.empty()) {
    std::nth_element(row_rel.begin(), row_rel.begin() + row_rel.size() / 2, row_rel.end());
    c.median_row_rms_rel = row_rel[row_rel.size() / 2];
  }
  return c;
}

// What a comparison must satisfy. Every test prints its measured values.
struct Bounds {
  double max_abs;      // bound on max |diff|
  double rms_rel;      // bound on Comparison::rms_rel
  double tie_margin;   // an argmax difference inside this margin is a near-tie
  int max_near_ties;
};

// The CPU kernels in use: "ref" (plain-loop reference) when BRASS_CPU_KERNELS=ref,
// otherwise the fast path picked for this processor. ctest runs the suite both ways.
inline bool reference_kernels() {
  const char* v = std::getenv("BRASS_CPU_KERNELS");
  return v && std::string(v) == "ref";
}

inline std::string join_ids(const std::vector<int32_t>& ids, size_t n) {
  std::string s;
  for (size_t i = 0; i < n && i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s;
}

}  // namespace brass::oracle
