// Does an L2 hit wait behind the same SM's outstanding DRAM reads? Every one-token kernel
// issues its static rows before its PDL wait and then reads its input (x, the ids, the
// activations: L2 hits, written by the kernel before) behind them; the probe saw those
// reads take 0.6-3 us instead of ~0.15. This kernel (one block an SM, 132 blocks, 200 KB
// of shared memory each so no two share an SM) has warps 1..7 ask for B bytes of cold
// rows a block, then warp 0's lane 0 chases 16 dependent L2 hits (ld.global.cg through a
// warm 16-line ring of its own) and records each hit's cycles, while the rows arrive.
// Modes of the rows' reads: 0 none (the unloaded latency); 1 plain 16-byte loads into
// registers (LDG, 64 KB at most); 2 cp.async 16-byte copies into shared memory; 3 bulk
// copies (cp.async.bulk, 16 KB each, one thread, an mbarrier): the copy engine's path;
// 4 bulk L2 prefetches (cp.async.bulk.prefetch.L2, no data to the SM).
// `who` 1: only even blocks read rows, so the odd blocks show whether the wait is the
// SM's own queue (odd blocks fast) or the memory system's (odd blocks slow as well).
// CH 1: the hits themselves are 16-byte bulk copies (does the copy engine pass the queue?).
// CH 2: the hits are L1 hits (the ring warmed by ld.global.ca, chased by it): does a hit
// that never leaves the SM wait behind its misses? Mode 5: the rows as plain 16-byte loads
// that do not allocate in L1 (ld.global.L1::no_allocate), so they leave the ring there.
// CH 3: no hits; warp 0's lane 0 times griddepcontrol.wait (the PDL wait) behind the rows,
// in a launch that follows an empty kernel with programmatic serialization: does a block
// that starts after its prerequisite finished still wait behind its SM's loads?
// Prints medians over blocks and launches: the first hit's cycles, the mean of the rest,
// and when the block's rows were all in (cycles after the chase began). Stage `queue` of
// bench/cuda_device_run.sh.
// H200 (session 50): unloaded 292 cycles; behind 128 KB of a block's rows the first hit
// took 4,220-4,619 (cp.async) / 3,195-3,480 (bulk copies) / 4,515 (a bulk-copy hit) while
// the rows were all in at ~6,400-7,000: past ~40-55 KB in flight an SM's loads wait in
// order, on every path. With only even blocks reading, the odd ones' hits took 311-353.
// Behind 128 KB of bulk L2 prefetches: 537. BENCHMARKS.md, session 50.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

constexpr int kThreads = 256, kWarpSize = 32, kSmem = 200 << 10, kHits = 16, kRing = 16;

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// One 16-byte bulk copy (the copy engine's path) global -> shared, waited on: the chase's
// step when CH = 1. bar's phase parity flips a step.
__device__ __forceinline__ uint64_t tma_hit(const uint64_t* g, uint64_t* dst, uint64_t* bar, uint32_t parity) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], 16;" ::"r"(smem_u32(bar)) : "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 16, [%2];" ::"r"(
                   smem_u32(dst)),
               "l"(g), "r"(smem_u32(bar))
               : "memory");
  uint32_t ok = 0;
  while (!ok)
    asm volatile("{ .reg .pred q; mbarrier.try_wait.parity.shared::cta.b64 q, [%1], %2; selp.u32 %0, 1, 0, q; }"
                 : "=r"(ok)
                 : "r"(smem_u32(bar)), "r"(parity)
                 : "memory");
  return *reinterpret_cast<volatile uint64_t*>(dst);
}

// CH: how warp 0's lane 0 reads its hits: 0 ld.global.cg, 1 a 16-byte bulk copy each.
template <int MODE, int NLDG, int CH = 0>
__global__ void __launch_bounds__(kThreads) queue_probe(const int4* cold, int bytes, int who, const uint64_t* ring,
                                                       long long* rec, int4* sink) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ __align__(8) uint64_t bar, cbar;
  __shared__ __align__(16) uint64_t cdst[2];
  __shared__ long long t_chase;
  const int tid = threadIdx.x, b = blockIdx.x;
  const bool reads = MODE != 0 && (who == 0 || b % 2 == 0);
  const int4* src = cold + static_cast<size_t>(b) * (kSmem / 16);
  const uint64_t* my = ring + static_cast<size_t>(b) * kRing * 16;  // 16 lines of 128 B
  uint64_t p = 0;
  if (tid == 0) {  // warm the ring into L2 (and the chase's path)
    for (int i = 0; i < 2 * kRing; ++i) p = CH == 2 ? __ldca(my + p) : __ldcg(my + p);
    if (CH == 1) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(&cbar)));
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
  }
  if (tid == kWarpSize && MODE == 3) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(&bar)));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  int4 v[NLDG > 0 ? NLDG : 1];
  if (reads && tid >= kWarpSize) {
    const int t = tid - kWarpSize, nt = kThreads - kWarpSize, n16 = bytes / 16;
    if constexpr (MODE == 1) {
#pragma unroll
      for (int i = 0; i < NLDG; ++i) v[i] = src[t + i * nt];
    } else if constexpr (MODE == 5) {
#pragma unroll
      for (int i = 0; i < NLDG; ++i)
        asm volatile("ld.global.L1::no_allocate.v4.s32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(v[i].x), "=r"(v[i].y), "=r"(v[i].z), "=r"(v[i].w)
                     : "l"(src + t + i * nt));
    } else if constexpr (MODE == 2) {
      for (int i = t; i < n16; i += nt)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_u32(smem + 16 * i)), "l"(src + i)
                     : "memory");
      asm volatile("cp.async.commit_group;" ::: "memory");
    } else if constexpr (MODE == 3) {
      if (t == 0) {
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(&bar)), "r"(bytes)
                     : "memory");
        for (int o = 0; o < bytes; o += 16 << 10)
          asm volatile(
              "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                  smem_u32(smem + o)),
              "l"(reinterpret_cast<const uint8_t*>(src) + o), "r"(min(16 << 10, bytes - o)), "r"(smem_u32(&bar))
              : "memory");
      }
    } else if constexpr (MODE == 4) {
      if (t == 0)
        for (int o = 0; o < bytes; o += 16 << 10)
          asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(reinterpret_cast<const uint8_t*>(src) + o),
                       "r"(min(16 << 10, bytes - o))
                       : "memory");
    }
  }
  __syncthreads();  // every read is asked for; none waited on
  if (tid == 0) {
    long long t[kHits + 1];
    t[0] = clock64();
#pragma unroll
    for (int i = 0; i < kHits; ++i) {
      if constexpr (CH == 1) {  // the wait is inside: t[i + 1] after hit i is in
        if (i == 0) t[0] = clock64();
        p = tma_hit(my + p, cdst, &cbar, i & 1);
      } else if constexpr (CH == 3) {
        asm volatile("griddepcontrol.wait;" ::: "memory");
      } else if constexpr (CH == 2) {
        p = __ldca(my + p);  // an L1 hit (warmed above)
      } else {
        p = __ldcg(my + p);  // issued once the previous hit is in (its address)
      }
      t[i + 1] = clock64();
    }
    t_chase = t[0];
    // CH 0: t[i + 1] is read as hit i is issued, and hit i + 1 issues once hit i is in:
    // t[2] - t[1] is the first hit's latency, t[kHits] - t[1] that of kHits - 1 hits.
    // CH 1: t[i + 1] once hit i is in: t[1] - t[0] the first, t[kHits] - t[1] the rest.
    // CH 3: t[1] - t[0] the first PDL wait, the rest waits already passed.
    rec[b * 4 + 0] = CH == 1 || CH == 3 ? t[1] - t[0] : t[2] - t[1];
    rec[b * 4 + 1] = (t[kHits] - t[1]) / (kHits - 1);
    if (p == 12345) sink[0] = make_int4(1, 1, 1, 1);
  }
  long long done = 0;
  if (reads && tid >= kWarpSize) {
    if constexpr (MODE == 1 || MODE == 5) {
      int4 a = make_int4(0, 0, 0, 0);
#pragma unroll
      for (int i = 0; i < NLDG; ++i) a.x ^= v[i].x ^ v[i].y ^ v[i].z ^ v[i].w;
      if (a.x == 0x12345678) sink[tid] = a;
    } else if constexpr (MODE == 2) {
      asm volatile("cp.async.wait_all;" ::: "memory");
    } else if constexpr (MODE == 3) {
      uint32_t ok = 0;
      while (!ok)
        asm volatile(
            "{ .reg .pred q; mbarrier.try_wait.parity.shared::cta.b64 q, [%1], 0; selp.u32 %0, 1, 0, q; }"
            : "=r"(ok)
            : "r"(smem_u32(&bar))
            : "memory");
    }
    done = clock64();
  }
  __syncthreads();
  __shared__ long long t_done;
  if (tid == kWarpSize) t_done = done;
  __syncthreads();
  // the last warp's drain: max over warps 1..7 via one atomicMax a warp's lane 0
  if (tid % kWarpSize == 0 && tid > 0 && reads) atomicMax(reinterpret_cast<unsigned long long*>(&t_done),
                                                          static_cast<unsigned long long>(done));
  __syncthreads();
  if (tid == 0) {
    rec[b * 4 + 2] = reads ? t_done - t_chase : 0;
    rec[b * 4 + 3] = reads;
  }
}

__global__ void empty_kernel() {}

static double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main() {
  int n_sm = 0;
  cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, 0);
  const size_t cold_bytes = size_t(8) << 30, per_launch = size_t(n_sm) * kSmem;
  int4* cold;
  uint64_t* ring;
  long long* rec;
  int4* sink;
  if (cudaMalloc(&cold, cold_bytes) != cudaSuccess) {
    printf("malloc failed\n");
    return 1;
  }
  cudaMemset(cold, 1, cold_bytes);
  cudaMalloc(&ring, size_t(n_sm) * kRing * 128);
  cudaMalloc(&rec, size_t(n_sm) * 4 * sizeof(long long));
  cudaMalloc(&sink, kThreads * sizeof(int4));
  // each block's ring: line i (16 words) points to line (i + 5) % 16 of the same block
  std::vector<uint64_t> h(size_t(n_sm) * kRing * 16, 0);
  for (int b = 0; b < n_sm; ++b)
    for (int i = 0; i < kRing; ++i) h[(size_t(b) * kRing + i) * 16] = uint64_t((i + 5) % kRing) * 16;
  cudaMemcpy(ring, h.data(), h.size() * 8, cudaMemcpyHostToDevice);
  size_t off = 0;
  auto run = [&](auto kern, const char* name, int bytes, int who, bool pdl = false) {
    cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
    std::vector<double> first[2], mean[2], drain;
    for (int rep = 0; rep < 7; ++rep) {
      if ((off + 1) * per_launch / 16 * 16 > cold_bytes) off = 0;
      if (pdl) {  // an empty kernel first, then this one as its programmatic dependent
        empty_kernel<<<1, 32>>>();
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(n_sm);
        cfg.blockDim = dim3(kThreads);
        cfg.dynamicSmemBytes = kSmem;
        cudaLaunchAttribute at[1];
        at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = at;
        cfg.numAttrs = 1;
        cudaLaunchKernelEx(&cfg, kern, static_cast<const int4*>(cold + off * per_launch / 16), bytes, who,
                           static_cast<const uint64_t*>(ring), rec, sink);
      } else {
        kern<<<n_sm, kThreads, kSmem>>>(cold + off * per_launch / 16, bytes, who, ring, rec, sink);
      }
      ++off;
      std::vector<long long> r(size_t(n_sm) * 4);
      if (cudaMemcpy(r.data(), rec, r.size() * 8, cudaMemcpyDeviceToHost) != cudaSuccess) {
        printf("%s: launch failed: %s\n", name, cudaGetErrorString(cudaGetLastError()));
        exit(1);
      }
      if (rep < 2) continue;  // warm-up
      for (int b = 0; b < n_sm; ++b) {
        const int rd = static_cast<int>(r[b * 4 + 3]);
        first[rd].push_back(double(r[b * 4]));
        mean[rd].push_back(double(r[b * 4 + 1]));
        if (rd) drain.push_back(double(r[b * 4 + 2]));
      }
    }
    for (int rd = 1; rd >= 0; --rd) {
      if (first[rd].empty()) continue;
      printf("%-22s %4d KB  who %d  %-9s  first hit %6.0f  mean of %d %6.0f cycles", name, bytes >> 10, who,
             rd ? "reading" : "idle", median(first[rd]), kHits - 1, median(mean[rd]));
      if (rd) printf("  rows in after %7.0f", median(drain));
      printf("\n");
    }
  };
  run(queue_probe<0, 0>, "none", 0, 0);
  for (int who : {0, 1}) {
    run(queue_probe<1, 4>, "LDG (registers)", 4 * 16 * (kThreads - 32), who);
    run(queue_probe<1, 9>, "LDG (registers)", 9 * 16 * (kThreads - 32), who);
    run(queue_probe<1, 18>, "LDG (registers)", 18 * 16 * (kThreads - 32), who);
    for (int kb : {16, 64, 128, 192}) {
      run(queue_probe<2, 0>, "cp.async 16 B", kb << 10, who);
      run(queue_probe<3, 0>, "cp.async.bulk", kb << 10, who);
      run(queue_probe<4, 0>, "bulk prefetch.L2", kb << 10, who);
    }
  }
  // the hits themselves as bulk copies: does the copy engine's path pass the SM's queue?
  run(queue_probe<0, 0, 1>, "none, hits by bulk", 0, 0);
  for (int kb : {64, 128, 192}) {
    run(queue_probe<2, 0, 1>, "cp.async, hits by bulk", kb << 10, 0);
    run(queue_probe<3, 0, 1>, "bulk, hits by bulk", kb << 10, 0);
  }
  // L1 hits (the ring in L1): behind cp.async.cg (no L1), bulk copies and no-allocate loads
  run(queue_probe<0, 0, 2>, "none, L1 hits", 0, 0);
  for (int kb : {16, 64, 128, 192}) {
    run(queue_probe<2, 0, 2>, "cp.async, L1 hits", kb << 10, 0);
    run(queue_probe<3, 0, 2>, "bulk, L1 hits", kb << 10, 0);
  }
  run(queue_probe<5, 9, 2>, "LDG no-alloc, L1 hits", 9 * 16 * (kThreads - 32), 0);
  run(queue_probe<5, 18, 2>, "LDG no-alloc, L1 hits", 18 * 16 * (kThreads - 32), 0);
  run(queue_probe<5, 18, 0>, "LDG no-alloc, L2 hits", 18 * 16 * (kThreads - 32), 0);
  // the PDL wait behind the rows (its prerequisite, an empty kernel, long done)
  run(queue_probe<0, 0, 3>, "none, PDL wait", 0, 0, true);
  for (int kb : {16, 64, 128, 192}) run(queue_probe<2, 0, 3>, "cp.async, PDL wait", kb << 10, 0, true);
  run(queue_probe<1, 18, 3>, "LDG, PDL wait", 18 * 16 * (kThreads - 32), 0, true);
  return 0;
}
