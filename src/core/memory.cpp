// Host memory facts and populating a mapping (see memory.h).
#include "core/memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14
#endif

namespace brass {

std::optional<int64_t> mem_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemAvailable:", 0) == 0) {
      std::istringstream s(line.substr(13));
      int64_t kib = 0;
      if (s >> kib) return kib * 1024;
    }
  }
  return std::nullopt;
}

std::string memory_fit_warning(const std::string& path, int64_t weight_bytes, std::optional<int64_t> available) {
  if (!available || weight_bytes <= *available) return "";
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  return fmt::format(
      "{}: the weights are {:.2f} GiB but only {:.2f} GiB of memory is available: the model does not fit, "
      "so the operating system will re-read parts of the file from disk for every token (expect decoding to "
      "be many times slower). Free memory, use a smaller or more quantized model, or run it on a GPU "
      "(--device cuda).",
      path, weight_bytes / kGiB, *available / kGiB);
}

void populate_read(const uint8_t* base, size_t len, const std::function<void(size_t, size_t)>& progress) {
  if (!base || len == 0) {
    if (progress) progress(0, 0);
    return;
  }
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t chunk = size_t{256} << 20;
  const uintptr_t start = reinterpret_cast<uintptr_t>(base) / page * page;
  const uintptr_t end = reinterpret_cast<uintptr_t>(base) + len;
  bool populate_ok = true;
  volatile uint8_t sink = 0;
  for (uintptr_t p = start; p < end; p += chunk) {
    const size_t n = std::min<size_t>(chunk, end - p);
    if (populate_ok && madvise(reinterpret_cast<void*>(p), n, MADV_POPULATE_READ) != 0) populate_ok = false;
    if (!populate_ok) {  // older kernel: fault the pages in by reading one byte of each
      for (uintptr_t q = std::max<uintptr_t>(p, reinterpret_cast<uintptr_t>(base)); q < p + n; q += page)
        sink = sink + *reinterpret_cast<const uint8_t*>(q);
    }
    if (progress) progress(std::min<size_t>(p + n - reinterpret_cast<uintptr_t>(base), len), len);
  }
}

}  // namespace brass
