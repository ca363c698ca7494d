// Implementations of the small core services: logging, env knobs, mmap.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "core/env.h"
#include "core/log.h"
#include "core/mmap_file.h"

namespace brass {

// ---- env ----
namespace env {
std::optional<std::string> get(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}
std::string log_level() { return get("BRASS_LOG").value_or("info"); }
int threads() {
  if (auto v = get("BRASS_THREADS")) {
    int n = std::atoi(v->c_str());
    if (n > 0) return n;
  }
  unsigned n = std::thread::hardware_concurrency();
  return n ? static_cast<int>(n) : 1;
}
}  // namespace env

// ---- log ----
namespace {
LogLevel parse_level(const std::string& s) {
  if (s == "error") return LogLevel::Error;
  if (s == "warn") return LogLevel::Warn;
  if (s == "debug") return LogLevel::Debug;
  return LogLevel::Info;
}
std::atomic<int> g_level{-1};
std::mutex g_log_mu;
}  // namespace

LogLevel log_level() {
  int l = g_level.load(std::memory_order_relaxed);
  if (l < 0) {
    l = static_cast<int>(parse_level(env::log_level()));
    g_level.store(l, std::memory_order_relaxed);
  }
  return static_cast<LogLevel>(l);
}
void set_log_level(LogLevel level) { g_level.store(static_cast<int>(level)); }
void log_write(LogLevel level, std::string_view msg) {
  static const char* kTags[] = {"error", "warn", "info", "debug"};
  std::lock_guard<std::mutex> lk(g_log_mu);
  std::fprintf(stderr, "brass %s: %.*s\n", kTags[static_cast<int>(level)],
               static_cast<int>(msg.size()), msg.data());
}

// ---- mmap ----
MmapFile::~MmapFile() {
  if (data_ && size_) munmap(const_cast<uint8_t*>(data_), size_);
}
MmapFile::MmapFile(MmapFile&& o) noexcept : data_(o.data_), size_(o.size_), path_(std::move(o.path_)) {
  o.data_ = nullptr;
  o.size_ = 0;
}
MmapFile& MmapFile::operator=(MmapFile&& o) noexcept {
  if (this != &o) {
    if (data_ && size_) munmap(const_cast<uint8_t*>(data_), size_);
    data_ = o.data_;
    size_ = o.size_;
    path_ = std::move(o.path_);
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

Result<MmapFile> MmapFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::errorf("{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return Status::errorf("{}: cannot stat: {}", path, std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::errorf("{}: not a regular file", path);
  }
  MmapFile f;
  f.path_ = path;
  f.size_ = static_cast<size_t>(st.st_size);
  if (f.size_ > 0) {
    void* p = mmap(nullptr, f.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      f.size_ = 0;
      return Status::errorf("{}: mmap of {} bytes failed: {}", path, st.st_size, std::strerror(e));
    }
    f.data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return f;
}

void MmapFile::advise_willneed(size_t offset, size_t len) const {
  if (!data_ || offset >= size_) return;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  size_t start = offset / page * page;
  size_t end = std::min(size_, offset + len);
  madvise(const_cast<uint8_t*>(data_) + start, end - start, MADV_WILLNEED);
}

}  // namespace brass
