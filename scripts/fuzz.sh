#!/usr/bin/env bash
# Builds the libFuzzer targets with clang + AddressSanitizer in ./build-fuzz, runs the
# GGUF reader's bad-file suite under AddressSanitizer, then runs each fuzzer for $1
# seconds (default 60). Any crash, leak, timeout, OOM or sanitizer report fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-60}"
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DBRASS_FUZZ=ON -DBRASS_TESTS=ON -DBRASS_CUDA=OFF >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target brass_fuzzers gguf_tests
echo "fuzz: gguf bad-file suite under AddressSanitizer"
ASAN_OPTIONS=detect_leaks=1 build-fuzz/tests/gguf_tests --gtest_brief=1
for f in build-fuzz/fuzz/fuzz_*; do
  [ -x "$f" ] || continue
  name=$(basename "$f")
  corpus="build-fuzz/corpus/$name"; mkdir -p "$corpus"
  seeds="fuzz/seeds/${name#fuzz_}"
  echo "fuzz: $name for ${secs}s"
  args=(-max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=0)
  if [ -d "$seeds" ]; then "$f" "${args[@]}" "$corpus" "$seeds" 2>build-fuzz/$name.log || { tail -50 build-fuzz/$name.log; exit 1; }
  else "$f" "${args[@]}" "$corpus" 2>build-fuzz/$name.log || { tail -50 build-fuzz/$name.log; exit 1; }; fi
  grep -E "^#[0-9]+.*DONE" build-fuzz/$name.log | tail -1 || true
done
echo "fuzz: all targets clean"
