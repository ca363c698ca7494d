#!/bin/bash
# One device call for the CUDA backend (run from the repo root on the GPU machine):
# configure + build the CUDA targets, run the parity tests, a compute-sanitizer memcheck
# pass over a short subset, and the decode benchmark on a synthetic 20b written there.
# Logs go to $OUT (or /tmp/out). The build deps missing on the device image (fmt, GTest,
# CLI11, nlohmann-json) can travel as Debian .debs in .deps/ (unpacked under /tmp/deps).
# Usage: bench/cuda_device_run.sh [build|test|memcheck|bench|prefill|streams|sweep|cli|ncu|ncu_streams|pipes|trace|probe|wideprobe|burst|headread|clusterswap|cublas|tlb|queue|gupattern|moepattern|moearith|densepattern|densearith|ab|sass]...
#   (sass: SASS_KERNELS filters the loads-before/after-the-wait counts; SASS_AFTER="name ..." lists
#   those kernels' loads and branches right after the wait, bench/cuda_sass_after_wait.py)
#   (default: build test memcheck bench; test runs TEST_FILTER, a gtest filter). sweep: SWEEP="A=1 B=2;C=3 --sync-steps" runs --streams $STREAMS
#   once per setting (same build: the BRASS_CUDA_* measurement knobs; --words are bench arguments); ncu_streams: per-kernel time of
#   ~2 batched steps at NCU_STREAMS (default 64); pipes: pipe use and stall reasons of the
#   NCU_KERNELS (regex) in a batched step (PIPES_ARGS: other bench arguments, e.g. "--depth 0 --n-gen 8" for one-token decode). trace: the decode chain in graphs, per kernel (CUPTI
#   injection, bench/cuda_kernel_trace.cpp; increments from bench/cuda_nsys_timeline.py), for each
#   env setting in TRACE_AB ("A=1;A=0"), bench arguments TRACE_ARGS (e.g. "--n-gen 0 --streams 32":
#   one batched step per "token"), TIMELINE_ARGS for the summary (e.g. "--parity --layers": by
#   layer parity, and a table by layer); burst: cold-read time of one kernel per size
#   (bench/cuda_burst_read.cu: what a streaming kernel of that size could reach); headread: the output
#   head's 615 MB as cold reads, 1s or random bytes, one run or quants + scale plane (bench/cuda_head_read.cu);
#   clusterswap: whether a recorded graph's kernel node can become a cluster kernel and follow the grid
#   (bench/cuda_cluster_swap.cu); cublas: cuBLAS f16
#   GEMMs of the batched-decode dense shapes on cold weights (bench/cuda_cublas_probe.cu); probe: a
#   -DBRASS_PROBE build's in-kernel marks (cuda_probe.cuh, bench/cuda_probe_marks.py; per-us counts of
#   every gate/up and down block, bench/cuda_probe_timeline.py) for each env setting in PROBE_AB; tlb:
#   a pointer chase at page strides (bench/cuda_tlb_probe.cu); queue: L2-hit latency behind an SM's
#   own DRAM reads, by their path (bench/cuda_queue_probe.cu); gupattern: the one-token MoE gate/up's reads in several shapes as
#   cold reads (bench/cuda_gu_pattern.cu); moepattern: the batched MoE gate/up's weight reads at
#   64 streams, GGUF rows against tiles repacked at upload (bench/cuda_moe_pattern.cu); moearith: the
#   lean loop's time on the tiles with parts of its arithmetic left out (bench/cuda_moe_arith.cu); densearith:
#   the dense wide kernel alone, cold, per shape / tokens / K split (bench/cuda_dense_arith.cu); densepattern:
#   the same for the batched dense q/k/v's Q8_0 reads (bench/cuda_dense_pattern.cu). B_DIR: the build the stages after `build` run
#   (default build-dev; B_DIR=build-base after an `ab` stage traces the base tree).
set -o pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
STAGES=${*:-build test memcheck bench}
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,driver_version --format=csv | tee "$OUT/gpu.txt"
PREFIX=()
if [ ! -f /usr/include/fmt/core.h ] || [ ! -d /usr/include/CLI ] || [ ! -f /usr/include/gtest/gtest.h ] ||
   [ ! -d /usr/include/nlohmann ]; then
  mkdir -p /tmp/deps
  for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
  PREFIX=(-DCMAKE_PREFIX_PATH=/tmp/deps/usr)
  export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH
fi
B=${B_DIR:-build-dev}
# Layers that need packages the device lacks (cpp-httplib, PCRE2) are not configured
# there (this is the device's throwaway copy of the tree, the CUDA targets do not need
# them) unless the `cli` stage is asked for: it builds the whole `brass` binary with
# those packages unpacked from .deps (pkg-config pointed at /tmp/deps).
if [[ " $STAGES " == *" cli "* ]]; then
  mkdir -p /tmp/deps
  for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
  export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH
  export PATH=/tmp/deps/usr/bin:$PATH PKG_CONFIG_SYSROOT_DIR=/tmp/deps
  export PKG_CONFIG_LIBDIR=/tmp/deps/usr/lib/x86_64-linux-gnu/pkgconfig:/tmp/deps/usr/share/pkgconfig
  [ -x /tmp/deps/usr/bin/pkg-config ] || ln -sf pkgconf /tmp/deps/usr/bin/pkg-config
else
  for f in $(grep -rl -E "httplib|PCRE2|pcre2" --include=CMakeLists.txt src 2>/dev/null); do
    mv "$f" "$f.device-skipped"; echo "device: skipping $f"
  done
fi
# The -DBRASS_PROBE build of the decode bench (stages probe, wideprobe).
probe_build() {
  cmake -S . -B build-probe -G Ninja -DBRASS_CUDA=ON "${PREFIX[@]}" -DCMAKE_CUDA_FLAGS=-DBRASS_PROBE \
    -DCMAKE_CXX_FLAGS=-DBRASS_PROBE > "$OUT/cmake-probe.log" 2>&1 &&
    cmake --build build-probe --target cuda_decode_bench -j16 > "$OUT/build-probe.log" 2>&1 ||
    { grep -E "error" -A3 "$OUT/build-probe.log" | head -20; return 1; }
}
for s in $STAGES; do
  case $s in
    build)
      t0=$(date +%s)
      cmake -S . -B $B -G Ninja -DBRASS_CUDA=ON "${PREFIX[@]}" > "$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; exit 1; }
      cmake --build $B --target backend_cuda_tests cuda_decode_bench -j16 > "$OUT/build.log" 2>&1 ||
        { grep -E "error|FAILED" -A3 "$OUT/build.log" | head -60; exit 1; }
      grep -E "spill" "$OUT/build.log" | head -5
      echo "build: $(( $(date +%s) - t0 )) s" ;;
    test)
      timeout ${TEST_TIMEOUT:-240} $B/tests/backend_cuda_tests --gtest_filter="${TEST_FILTER:-*}" 2>&1 | tee "$OUT/tests.log" | grep -E "^\[  (FAILED|PASSED|SKIPPED) |OK \]|Failure|seed|cuda |off \(" | head -60 ;;
    memcheck)
      timeout 150 compute-sanitizer --tool memcheck $B/tests/backend_cuda_tests \
        --gtest_filter="${MEMCHECK_FILTER:-*Moe*:*Router*:*Fused*:*Graph*:*Embed*:*Flash*:*TensorCore*:*Paged*:CudaModel.*F32*:CudaModel.Int8*}" \
        > "$OUT/memcheck.log" 2>&1
      echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|Invalid|PASSED|FAILED" "$OUT/memcheck.log" | head -10 ;;
    bench)
      [ -f /tmp/gpt-oss-20b-synth.gguf ] && SRC=(--model /tmp/gpt-oss-20b-synth.gguf) || SRC=(--synth /tmp/gpt-oss-20b-synth.gguf)
      timeout 300 $B/bench/cuda_decode_bench "${SRC[@]}" --depth 4096 ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log" ;;
    prefill)
      [ -f /tmp/gpt-oss-20b-synth.gguf ] && SRC=(--model /tmp/gpt-oss-20b-synth.gguf) || SRC=(--synth /tmp/gpt-oss-20b-synth.gguf)
      timeout 300 $B/bench/cuda_decode_bench "${SRC[@]}" --n-gen 0 --pp ${PP:-512,2048,8192} --pp-ops ${PP_OPS:-2048} 2>&1 | tee "$OUT/prefill.log" ;;
    streams)
      [ -f /tmp/gpt-oss-20b-synth.gguf ] && SRC=(--model /tmp/gpt-oss-20b-synth.gguf) || SRC=(--synth /tmp/gpt-oss-20b-synth.gguf)
      timeout 300 $B/bench/cuda_decode_bench "${SRC[@]}" --n-gen 0 --streams ${STREAMS:-1,8,32,64} 2>&1 | tee "$OUT/streams.log" ;;
    eager)
      [ -f /tmp/gpt-oss-20b-synth.gguf ] && SRC=(--model /tmp/gpt-oss-20b-synth.gguf) || SRC=(--synth /tmp/gpt-oss-20b-synth.gguf)
      timeout 200 $B/bench/cuda_decode_bench "${SRC[@]}" --depth 0 --no-graphs 2>&1 | tee "$OUT/eager.log" | grep -E "tg128|tok/s" ;;
    cli)
      # `brass bench` on the synthetic 20b: pp rows, single-stream tg rows, batched rows.
      cmake --build $B --target brass -j16 > "$OUT/build_cli.log" 2>&1 ||
        { grep -E "error|FAILED" -A3 "$OUT/build_cli.log" | head -40; exit 1; }
      [ -f /tmp/gpt-oss-20b-synth.gguf ] || $B/bench/cuda_decode_bench --synth /tmp/gpt-oss-20b-synth.gguf --n-gen 0 > /dev/null
      timeout 400 $B/brass bench -m /tmp/gpt-oss-20b-synth.gguf ${CLI_ARGS:--p 512,2048,8192 -n 128 -d 0,4096 -s 1,8,32,64,128 -r 3} \
        --json-file "$OUT/brass_bench.json" 2>&1 | tee "$OUT/brass_bench.log" | grep -v "^brass: bench: " ;;
    ncu)
      [ -f /tmp/gpt-oss-20b-synth.gguf ] && SRC=(--model /tmp/gpt-oss-20b-synth.gguf) || SRC=(--synth /tmp/gpt-oss-20b-synth.gguf)
      # One eager decode token (~290 launches) well after load; per-kernel time and DRAM bytes.
      timeout 300 ncu --clock-control none --launch-skip 3000 --launch-count 300 --csv --print-units base \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum $B/bench/cuda_decode_bench \
        "${SRC[@]}" --depth 0 --n-gen 16 --no-graphs > "$OUT/ncu.csv" 2> "$OUT/ncu.err"
      echo "ncu rc=$?"
      python3 bench/cuda_ncu_summary.py "$OUT/ncu.csv" | tee "$OUT/ncu_summary.txt" ;;
    sweep)
      [ -f /tmp/gpt-oss-20b-synth.gguf ] && SRC=(--model /tmp/gpt-oss-20b-synth.gguf) || SRC=(--synth /tmp/gpt-oss-20b-synth.gguf)
      IFS=';' read -ra SW <<< "${SWEEP:-X=0}"
      for e in "${SW[@]}"; do
        echo "== env [$e]"
        # (words of a setting that start with -- are bench arguments, e.g. "X=1 --sync-steps")
        ENVS=(); ARGS=(); for w in $e; do [[ $w == --* ]] && ARGS+=("$w") || ENVS+=("$w"); done
        env "${ENVS[@]}" timeout 200 $B/bench/cuda_decode_bench "${SRC[@]}" --n-gen 0 --streams ${STREAMS:-8,32,64} \
          "${ARGS[@]}" 2>&1 | grep -E "^[0-9]+ "
      done | tee "$OUT/sweep.log" ;;
    ncu_streams)
      [ -f /tmp/gpt-oss-20b-synth.gguf ] && SRC=(--model /tmp/gpt-oss-20b-synth.gguf) || SRC=(--synth /tmp/gpt-oss-20b-synth.gguf)
      # Skips the prompts' prefill (~4,000 launches at 64 sequences) and the first steps.
      timeout 300 ncu --clock-control none --launch-skip ${NCU_SKIP:-6000} --launch-count ${NCU_COUNT:-600} --csv \
        --print-units base --metrics gpu__time_duration.sum,dram__bytes_read.sum $B/bench/cuda_decode_bench \
        "${SRC[@]}" --n-gen 0 --streams ${NCU_STREAMS:-64} > "$OUT/ncu_streams.csv" 2> "$OUT/ncu_streams.err"
      echo "ncu rc=$?"
      python3 bench/cuda_ncu_summary.py "$OUT/ncu_streams.csv" | tee "$OUT/ncu_streams_summary.txt" ;;
    pipes)
      [ -f /tmp/gpt-oss-20b-synth.gguf ] && SRC=(--model /tmp/gpt-oss-20b-synth.gguf) || SRC=(--synth /tmp/gpt-oss-20b-synth.gguf)
      MET=gpu__time_duration.sum,smsp__inst_executed.sum,dram__bytes_read.sum.per_second
      MET=$MET,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active
      for p in alu fma fmaheavy xu lsu tensor; do MET=$MET,smsp__inst_executed_pipe_$p.sum; done
      for p in alu fma shared; do MET=$MET,sm__pipe_${p}_cycles_active.avg.pct_of_peak_sustained_active; done
      for r in long_scoreboard short_scoreboard math_pipe_throttle wait barrier mio_throttle lg_throttle not_selected \
               selected dispatch_stall no_instruction; do
        MET=$MET,smsp__average_warp_latency_issue_stalled_$r.ratio
      done
      for k in ${NCU_KERNELS:-moe_gate_up_mma moe_down_mma}; do
        timeout 150 ncu --clock-control none -k regex:$k --launch-skip 40 --launch-count 1 --metrics $MET \
          $B/bench/cuda_decode_bench "${SRC[@]}" ${PIPES_ARGS:---n-gen 0 --streams ${NCU_STREAMS:-64}} > "$OUT/pipes_$k.txt" 2>&1
        echo "== $k"; grep -E "smsp__|sm__|gpu__|dram__" "$OUT/pipes_$k.txt" | sed 's/  */ /g'
      done ;;
    trace)
      [ -f /tmp/gpt-oss-20b-synth.gguf ] && SRC=(--model /tmp/gpt-oss-20b-synth.gguf) || SRC=(--synth /tmp/gpt-oss-20b-synth.gguf)
      CU=/usr/local/cuda
      g++ -O2 -shared -fPIC bench/cuda_kernel_trace.cpp -I$CU/include -L$CU/lib64 -lcupti -o /tmp/libktrace.so ||
        { echo "trace: CUPTI tracer did not build"; continue; }
      IFS=';' read -ra TAB <<< "${TRACE_AB:-BRASS_CUDA_PDL=1}"
      for e in "${TAB[@]}"; do
        env $e LD_LIBRARY_PATH=$CU/lib64:$LD_LIBRARY_PATH CUDA_INJECTION64_PATH=/tmp/libktrace.so \
          BRASS_TRACE_OUT="$OUT/trace.csv" timeout 200 $B/bench/cuda_decode_bench "${SRC[@]}" \
          ${TRACE_ARGS:---depth ${TRACE_DEPTH:-0} --n-gen 32} > "$OUT/trace.log" 2>&1
        echo "== trace [$e]"; python3 bench/cuda_nsys_timeline.py "$OUT/trace.csv" --tokens 16 ${TIMELINE_ARGS:-} | tee -a "$OUT/timeline.txt"
      done ;;
    probe)
      [ -f /tmp/gpt-oss-20b-synth.gguf ] && SRC=(--model /tmp/gpt-oss-20b-synth.gguf) || SRC=(--synth /tmp/gpt-oss-20b-synth.gguf)
      probe_build || continue
      IFS=';' read -ra PAB <<< "${PROBE_AB:-BRASS_CUDA_PDL=1}"
      for e in "${PAB[@]}"; do
        env $e BRASS_PROBE_OUT="$OUT/marks.csv" timeout 200 build-probe/bench/cuda_decode_bench "${SRC[@]}" --depth ${PROBE_DEPTH:-0} \
          --n-gen 32 > "$OUT/probe.log" 2>&1
        echo "== probe [$e] $(grep -m1 -E '^tg128' "$OUT/probe.log")"
        python3 bench/cuda_probe_marks.py "$OUT/marks.csv" | tee -a "$OUT/probe.txt"
        python3 bench/cuda_probe_timeline.py "$OUT/marks.csv" | tee -a "$OUT/probe.txt"
      done ;;
    wideprobe)
      # Marks inside matmul_h16_wide_kernel's last split call
      # (wo) of a batched step at each of PROBE_STREAMS (bench/cuda_wide_marks.py), then
      # norm_router_rows' after it (bench/cuda_rows_marks.py).
      [ -f /tmp/gpt-oss-20b-synth.gguf ] && SRC=(--model /tmp/gpt-oss-20b-synth.gguf) || SRC=(--synth /tmp/gpt-oss-20b-synth.gguf)
      probe_build || continue
      for s in ${PROBE_STREAMS:-64 32}; do
        rm -f "$OUT/marks.csv"
        BRASS_PROBE_OUT="$OUT/marks.csv" timeout 100 build-probe/bench/cuda_decode_bench "${SRC[@]}" --n-gen 0 \
          --streams $s > "$OUT/wideprobe.log" 2>&1
        echo "== wide kernel marks, $s streams"; python3 bench/cuda_wide_marks.py "$OUT/marks.csv" | tee -a "$OUT/wideprobe.txt"
        python3 bench/cuda_rows_marks.py "$OUT/marks.csv" | tee -a "$OUT/wideprobe.txt"
      done ;;
    ab)
      # Same-call A/B against an older tree: BASE (default .dev/base, e.g. `git archive HEAD~1 |
      # tar -x -C .dev/base`, carried) builds its cuda_decode_bench in build-base; then AB_ROUNDS
      # rounds of: base, then this tree once per AB_ENV setting (";"-separated), each with AB_ARGS.
      [ -f /tmp/gpt-oss-20b-synth.gguf ] && SRC=(--model /tmp/gpt-oss-20b-synth.gguf) || SRC=(--synth /tmp/gpt-oss-20b-synth.gguf)
      BASE=${BASE:-.dev/base}
      (cd "$BASE" && for f in $(grep -rl -E "httplib|PCRE2|pcre2" --include=CMakeLists.txt src 2>/dev/null); do mv "$f" "$f.x"; done
       cmake -S . -B ../../build-base -G Ninja -DBRASS_CUDA=ON "${PREFIX[@]}" > "$OUT/cmake-base.log" 2>&1 &&
       cmake --build ../../build-base --target cuda_decode_bench -j16 > "$OUT/build-base.log" 2>&1) ||
        { echo "ab: base build failed"; tail -20 "$OUT/build-base.log"; continue; }
      [ -f /tmp/gpt-oss-20b-synth.gguf ] || $B/bench/cuda_decode_bench "${SRC[@]}" --n-gen 0 > /dev/null
      SRC=(--model /tmp/gpt-oss-20b-synth.gguf)
      IFS=';' read -ra ABE <<< "${AB_ENV:-BRASS_CUDA_PDL=1}"
      for r in $(seq ${AB_ROUNDS:-2}); do
        echo "== round $r base: $(timeout 200 build-base/bench/cuda_decode_bench "${SRC[@]}" ${AB_ARGS:-} 2>&1 |
          grep -E '^(tg|pp|[0-9]+ )' | tr '\n' '|')"
        for e in "${ABE[@]}"; do
          echo "== round $r [$e]: $(env $e timeout 200 $B/bench/cuda_decode_bench "${SRC[@]}" ${AB_ARGS:-} 2>&1 |
            grep -E '^(tg|pp|[0-9]+ )' | tr '\n' '|')"
        done
      done | tee "$OUT/ab.txt" ;;
    sass)
      # Per kernel of the decode bench (this build, B_DIR): global loads / cp.async copies /
      # bulk prefetches issued before and after the PDL wait (ACQBULK) in its SASS. ptxas may
      # sink a read-only load written before pdl_wait below it (cuda_common.cuh).
      cuobjdump -sass $B/bench/cuda_decode_bench 2>/dev/null | awk '
        /Function : /{if (name != "" && acq) printf "%4d before / %4d after  %s\n", pre, post, name
                      name = $3; pre = 0; post = 0; acq = 0; next}
        /ACQBULK/{acq = 1}
        /(LDG|LDGSTS)\.|UBLKPF/{if (acq) post++; else pre++}  # (not LDGDEPBAR: a commit)
        END{if (acq) printf "%4d before / %4d after  %s\n", pre, post, name}' |
        sed -E 's/_ZN5brass7backend4cuda[0-9]+_GLOBAL__N__[0-9a-f]+_[0-9]+_//' | grep -E "${SASS_KERNELS:-.}" |
        sort -u | tee "$OUT/sass_wait.txt"
      # SASS_AFTER="<name substrings>": those kernels' loads / branches right after the wait.
      [ -n "${SASS_AFTER:-}" ] && cuobjdump -sass $B/bench/cuda_decode_bench 2>/dev/null |
        python3 bench/cuda_sass_after_wait.py $SASS_AFTER | tee "$OUT/sass_after_wait.txt" ;;
    tlb)
      # Pointer chase at page strides: the TLB's reach and miss cost (bench/cuda_tlb_probe.cu).
      nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a bench/cuda_tlb_probe.cu -o /tmp/tlbp && /tmp/tlbp |
        tee "$OUT/tlb.txt" ;;
    queue)
      # Whether an L2 hit waits behind its SM's outstanding DRAM reads, by the reads' path
      # (LDG, cp.async, cp.async.bulk, bulk L2 prefetch; bench/cuda_queue_probe.cu).
      nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a bench/cuda_queue_probe.cu -o /tmp/qp && /tmp/qp |
        tee "$OUT/queue.txt" ;;
    gupattern)
      nvcc -O3 -std=c++20 -Isrc -gencode=arch=compute_90a,code=sm_90a bench/cuda_gu_pattern.cu -o /tmp/gup && /tmp/gup |
        tee "$OUT/gu_pattern.txt" ;;
    moepattern)
      nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a bench/cuda_moe_pattern.cu -o /tmp/moep && /tmp/moep |
        tee "$OUT/moe_pattern.txt" ;;
    moearith)
      nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -DFMT_CONSTEVAL= -Isrc \
        -Xlinker --unresolved-symbols=ignore-all bench/cuda_moe_arith.cu -o /tmp/moea && /tmp/moea | tee "$OUT/moe_arith.txt" ;;
    densearith)
      nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -DFMT_CONSTEVAL= -Isrc \
        -Xlinker --unresolved-symbols=ignore-all bench/cuda_dense_arith.cu -o /tmp/densea && /tmp/densea |
        tee "$OUT/dense_arith.txt" ;;
    densepattern)
      nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a bench/cuda_dense_pattern.cu -o /tmp/densep &&
        /tmp/densep | tee "$OUT/dense_pattern.txt" ;;
    cublas)
      nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a bench/cuda_cublas_probe.cu -lcublas -o /tmp/cublas_probe &&
        /tmp/cublas_probe | tee "$OUT/cublas.txt" ;;
    burst)
      nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a bench/cuda_burst_read.cu -o /tmp/burst && /tmp/burst |
        tee "$OUT/burst.txt" ;;
    headread)
      nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a bench/cuda_head_read.cu -o /tmp/headread &&
        /tmp/headread | tee "$OUT/head_read.txt" ;;
    clusterswap)
      nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a bench/cuda_cluster_swap.cu -o /tmp/clswap &&
        /tmp/clswap | tee "$OUT/cluster_swap.txt" ;;
    ncu_detail)
      [ -f /tmp/gpt-oss-20b-synth.gguf ] && SRC=(--model /tmp/gpt-oss-20b-synth.gguf) || SRC=(--synth /tmp/gpt-oss-20b-synth.gguf)
      for k in ${NCU_KERNELS:-moe_gate_up_q8x_kernel moe_down_q8x_kernel attn_split_kernel}; do
        timeout 120 ncu --clock-control none -k regex:$k --launch-skip 30 --launch-count 1 \
          --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
          --section LaunchStats $B/bench/cuda_decode_bench "${SRC[@]}" --depth 0 --n-gen 16 --no-graphs \
          > "$OUT/ncu_$k.txt" 2>&1
        echo "== $k"; grep -E "Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|L1/TEX Hit|Waves Per SM|Grid Size|Compute \(SM\)|Warp Cycles Per Issued|Stall|Shared Memory Configuration Size|Dynamic Shared" "$OUT/ncu_$k.txt" | head -20
      done ;;
  esac
done
