#!/usr/bin/env bash
# Quick start #2: install dependencies, build, and run every test: the GoogleTest
# suites and oracle suites through ctest, then the fuzzers (a minute each) in a
# separate clang + libFuzzer + AddressSanitizer build.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
(cd build && ctest --output-on-failure -j"$(nproc)" --timeout 1800)
if [ "${BRASS_SKIP_FUZZ:-0}" != 1 ] && [ -d fuzz ] && ls fuzz/*.cpp >/dev/null 2>&1; then
  bash scripts/fuzz.sh "${BRASS_FUZZ_SECONDS:-60}"
fi
