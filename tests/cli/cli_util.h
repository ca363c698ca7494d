// Shared plumbing of the CLI tests: run the built `brass` binary through the shell
// (so arguments may redirect stdin), capture stdout, stderr and the exit code; fresh
// random seeds; a temporary directory removed at the end of a test.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>

namespace brass::cli_test {

struct Proc {
  int rc = -1;  // exit code; -1 when killed by a signal
  std::string out;
  std::string err;
};

inline uint64_t fresh_seed() {
  std::random_device rd;
  return (uint64_t{rd()} << 32) ^ rd();
}

// Runs `brass ARGS`; stderr goes through a per-call file so it can be told apart.
inline Proc run(const std::string& args) {
  static std::atomic<int> counter{0};
  namespace fs = std::filesystem;
  const std::string err_file = (fs::temp_directory_path() / ("brass_cli_err_" + std::to_string(getpid()) + "_" +
                                                             std::to_string(counter++)))
                                   .string();
  const std::string cmd = std::string(BRASS_BINARY_DIR) + "/brass " + args + " 2>" + err_file;
  Proc p;
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return p;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) p.out.append(buf, n);
  const int status = pclose(f);
  p.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream e(err_file);
  p.err.assign(std::istreambuf_iterator<char>(e), std::istreambuf_iterator<char>());
  fs::remove(err_file);
  return p;
}

class TempDir {
 public:
  TempDir()
      : path_(std::filesystem::temp_directory_path() / ("brass_cli_" + std::to_string(fresh_seed()))) {
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string write(const std::string& name, const std::string& content) const {
    const std::string p = (path_ / name).string();
    std::ofstream f(p, std::ios::binary);
    f << content;
    return p;
  }
  std::string path(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace brass::cli_test
