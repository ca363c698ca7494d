#!/usr/bin/env bash
# Quick start #2: install dependencies, build, and run every test: the GoogleTest
# suites and the oracle suites (llama.cpp, transformers fixtures, tiktoken) through
# ctest, then the GGUF bad-file suite under AddressSanitizer and the fuzzers (a minute
# each) in a separate clang + libFuzzer build. Ends with one "N passed, N failed" line.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
log=$(mktemp)
set +e
(cd build && ctest --output-on-failure -j"$(nproc)" --timeout 1800) 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
summary=$(grep -E "tests passed, [0-9]+ tests failed out of" "$log" | tail -1)
total=$(sed -E 's/.* out of ([0-9]+).*/\1/' <<<"$summary")
failed=$(sed -E 's/.*, ([0-9]+) tests failed.*/\1/' <<<"$summary")
rm -f "$log"
if [ "$rc" != 0 ] || [ -z "$summary" ]; then
  echo "tests: $(( ${total:-0} - ${failed:-0} )) passed, ${failed:-1} failed"
  exit 1
fi
fuzz_runs=0
if [ "${BRASS_SKIP_FUZZ:-0}" != 1 ]; then
  bash scripts/fuzz.sh "${BRASS_FUZZ_SECONDS:-60}"
  fuzz_runs=1
fi
echo "tests: $(( total - failed + fuzz_runs )) passed, 0 failed"
