#!/bin/bash
# One device call for `brass serve --device cuda` (run from the repo root on the GPU
# machine): build brass with the CUDA backend and the server layer, synthesize the 20b
# model, serve it on the GPU and run the python load bench (bench.py) against it.
# The device image lacks the build deps: they travel as Debian .debs in .deps/ (fmt,
# GTest, CLI11, nlohmann-json, cpp-httplib + its openssl/zlib/brotli headers and runtime
# libraries, pkgconf) together with .deps/o200k_base.tiktoken, and are unpacked under
# /tmp/deps. Logs and JSON go to $OUT.
#   tests/server_e2e/cuda_serve_run.sh   (env: LEVELS=1,8,32 SECONDS_PER_LEVEL=15 PARALLEL=32)
set -o pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
LEVELS=${LEVELS:-1,8,32}
SECS=${SECONDS_PER_LEVEL:-15}
PARALLEL=${PARALLEL:-32}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
D=/tmp/deps
mkdir -p $D
for f in .deps/*.deb; do dpkg -x "$f" $D; done
LIBS=$D/usr/lib/x86_64-linux-gnu
# Build-time only: our pkgconf and the .pc files under the unpacked prefix (sysroot
# rewrites their /usr paths to /tmp/deps/usr).
export PKG_CONFIG_SYSROOT_DIR=$D PKG_CONFIG_LIBDIR=$LIBS/pkgconfig:$D/usr/share/pkgconfig
B=build-dev
t0=$(date +%s)
LD_LIBRARY_PATH=$LIBS:$LD_LIBRARY_PATH cmake -S . -B $B -G Ninja -DBRASS_CUDA=ON -DCMAKE_PREFIX_PATH=$D/usr \
  -DPKG_CONFIG_EXECUTABLE=$D/usr/bin/pkgconf -DCMAKE_CXX_FLAGS="-isystem $D/usr/include/x86_64-linux-gnu" > "$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; exit 1; }
grep -iE "httplib|server" "$OUT/cmake.log"
LD_LIBRARY_PATH=$LIBS:$LD_LIBRARY_PATH cmake --build $B --target brass -j16 > "$OUT/build.log" 2>&1 ||
  { grep -E "error|FAILED" -A3 "$OUT/build.log" | head -60; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
run_brass() { LD_LIBRARY_PATH=$LIBS:$LD_LIBRARY_PATH $B/brass "$@"; }
t0=$(date +%s)
run_brass synth --preset 20b --vocab .deps/o200k_base.tiktoken /tmp/20b.gguf > "$OUT/synth.log" 2>&1 ||
  { tail -20 "$OUT/synth.log"; exit 1; }
echo "synth: $(( $(date +%s) - t0 )) s, $(du -h /tmp/20b.gguf | cut -f1)"
run_brass serve -m /tmp/20b.gguf --device cuda --parallel $PARALLEL --ctx 2048 --port 8080 --max-queue 512 \
  > "$OUT/serve.log" 2>&1 &
SPID=$!
PYTHONUNBUFFERED=1 timeout 400 python3 tests/server_e2e/bench.py --wait 180 --levels $LEVELS --seconds $SECS \
  2>&1 | tee "$OUT/bench.log"
echo "bench rc=$?"
grep '^{' "$OUT/bench.log" > "$OUT/bench.jsonl"
curl -s http://127.0.0.1:8080/metrics > "$OUT/metrics.txt" 2>/dev/null || true
nvidia-smi --query-gpu=memory.used --format=csv | tee -a "$OUT/gpu.txt"
kill -TERM $SPID; wait $SPID
echo "serve rc=$?"
tail -8 "$OUT/serve.log"
