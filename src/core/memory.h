// Host memory facts for loading: how much memory the system can give (MemAvailable),
// whether a model's weights fit in it, and reading a mapped region into memory with
// progress (so a large model's first tokens do not stall on page faults).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace brass {

// MemAvailable from /proc/meminfo, in bytes (nullopt when it cannot be read).
std::optional<int64_t> mem_available_bytes();

// "" when `weight_bytes` fit in `available` bytes; otherwise a message naming both and
// what it means for a memory-mapped model (pages re-read from disk on every token).
std::string memory_fit_warning(const std::string& path, int64_t weight_bytes, std::optional<int64_t> available);

// Bring [base, base + len) of a read-only mapping into memory, in chunks, calling
// progress(done, total) after each. Uses MADV_POPULATE_READ where the kernel has it,
// else touches one byte per page.
void populate_read(const uint8_t* base, size_t len, const std::function<void(size_t, size_t)>& progress = {});

}  // namespace brass
