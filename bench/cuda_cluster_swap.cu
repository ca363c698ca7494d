// cuda_cluster_swap: can a recorded decode graph's attention node become a thread-block
// cluster kernel, and follow the depth? Why: at depth 4096 ~5.6 us of each full layer's
// decode attention comes after its keys are summed (partial stores, a release ticket, the
// last block's partial loads: BENCHMARKS.md, session 46). The splits of a kv head as one
// cluster would merge through distributed shared memory instead. But the decode graph
// re-sizes that node's grid once per doubling of the depth
// (cudaGraphExecKernelNodeSetParams, session 44), and a cluster's size is a launch
// attribute or a compile-time property of the kernel. This tool records small graphs and
// prints what each update returns and the cluster size the blocks then see:
// 1. a plain node swapped to kernels with compile-time cluster dims of 8 and 16 (func
//    updates), and back;
// 2. a node launched with a run-time cluster attribute, re-sized to another multiple of
//    it, and to a grid that is not one;
// 3. how many 8- and 16-block clusters of 256-thread, 2-an-SM blocks fit at once;
// 4. the template node's cluster attribute changed and the executable graph updated whole
//    (cudaGraphExecUpdate);
// 5. eager launches as the decode attention issues them: a one-block cluster attribute,
//    16-block clusters, each with and without PDL.
// H200 (driver 580.159.04, session 46; stage `clusterswap` of bench/cuda_device_run.sh):
// 1. plain -> cl8_kernel: the update passed and the blocks ran in clusters of 8, with the
//    neighbour reads right. cl8 -> cl16_kernel (y 16): the update passed, but the blocks
//    still saw clusters of 8. Back to plain_kernel (y 2): the update and the sync passed,
//    but the kernel never ran (nothing written): a silent non-launch. So do not swap a
//    node's func between cluster shapes.
// 2. The run-time 16-block cluster ran. Re-sizing it to y 8 was refused ("cluster
//    misconfiguration"); y 16 passed.
// 3. 30 eight-block and 14 sixteen-block clusters fit at once, at 2 blocks an SM.
// 4. The node's attribute plus cudaGraphExecUpdate worked: clusters of 8, reads right.
//    In a first run this case used case 2's graph after that graph's refused update: it
//    failed with a sticky "unspecified launch failure". Recorded fresh, it passed.
// 5. (call 9) All four launches ran, with the cluster sizes asked for.
// The way through for the attention: change the template node's cluster attribute and
// grid, then update the executable graph whole, only when the cluster shape changes.
// Keep the node valid at every step: bench/cuda_attn_cluster.patch first set a 16-block
// cluster node's grid to 1 and was refused ("cluster misconfiguration"). Set one-block
// clusters first, then the grid, then the new shape.
// Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a bench/cuda_cluster_swap.cu -o /tmp/clswap
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

namespace cg = cooperative_groups;

namespace {

constexpr int kThreads = 256;
constexpr unsigned kHeads = 8;  // grid x: gpt-oss's kv heads

// Block (x, y) writes the block count of its cluster (1 without one) and, through
// distributed shared memory, its cluster neighbour's rank (-1 without a cluster): the
// merge the attention would do.
__device__ void record(int* out) {
  __shared__ int mine;
  const cg::cluster_group cl = cg::this_cluster();
  const unsigned n = cl.num_blocks();
  if (threadIdx.x == 0) mine = static_cast<int>(cl.block_rank());
  int seen = -1;
  if (n > 1) {
    cl.sync();
    if (threadIdx.x == 0) seen = *cl.map_shared_rank(&mine, (cl.block_rank() + 1) % n);
    cl.sync();  // no block leaves while a neighbour still reads its shared memory
  }
  if (threadIdx.x == 0) {
    const unsigned b = blockIdx.y * gridDim.x + blockIdx.x;
    out[2 * b] = static_cast<int>(n);
    out[2 * b + 1] = seen;
  }
}
__global__ void __launch_bounds__(kThreads, 2) plain_kernel(int* out) { record(out); }
__global__ void __cluster_dims__(1, 8, 1) __launch_bounds__(kThreads, 2) cl8_kernel(int* out) { record(out); }
__global__ void __cluster_dims__(1, 16, 1) __launch_bounds__(kThreads, 2) cl16_kernel(int* out) { record(out); }

const char* rc(cudaError_t e) { return e == cudaSuccess ? "ok" : cudaGetErrorString(e); }

// The cluster sizes the blocks of a (kHeads, y) grid saw, and whether every neighbour read
// matched (rank + 1 mod n), as one line.
cudaStream_t g_st;
void report(const char* what, int* dev, unsigned y) {
  std::vector<int> h(2 * kHeads * y, -7);
  const cudaError_t e = cudaDeviceSynchronize();
  cudaMemcpy(h.data(), dev, h.size() * sizeof(int), cudaMemcpyDeviceToHost);
  int lo = 1 << 30, hi = -1, bad = 0;
  for (unsigned b = 0; b < kHeads * y; ++b) {
    const int n = h[2 * b];
    lo = n < lo ? n : lo;
    hi = n > hi ? n : hi;
    const int rank = static_cast<int>(b / kHeads) % (n > 0 ? n : 1);  // cluster along y
    if (n > 1 && h[2 * b + 1] != (rank + 1) % n) ++bad;
  }
  std::printf("%-64s run %-8s cluster blocks seen %d..%d, neighbour reads wrong %d\n", what, rc(e), lo, hi, bad);
  cudaMemsetAsync(dev, 0xff, 2 * kHeads * 16 * sizeof(int), g_st);
  cudaStreamSynchronize(g_st);
}

// A (kHeads, y) grid's launch config; with cluster_y, clusters of (1, cluster_y, 1) (the
// attribute kept in at).
cudaLaunchConfig_t config(unsigned y, unsigned cluster_y, cudaLaunchAttribute& at) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(kHeads, y);
  cfg.blockDim = dim3(kThreads);
  if (cluster_y) {
    at.id = cudaLaunchAttributeClusterDimension;
    at.val.clusterDim.x = 1;
    at.val.clusterDim.y = cluster_y;
    at.val.clusterDim.z = 1;
    cfg.attrs = &at;
    cfg.numAttrs = 1;
  }
  return cfg;
}

cudaError_t launch(cudaStream_t st, void (*k)(int*), unsigned y, unsigned cluster_y, int* out) {
  cudaLaunchAttribute at{};
  cudaLaunchConfig_t cfg = config(y, cluster_y, at);
  cfg.stream = st;
  return cudaLaunchKernelEx(&cfg, k, out);
}

// Captures one launch; returns its graph, executable graph and kernel node.
bool record_one(cudaStream_t st, void (*k)(int*), unsigned y, unsigned cluster_y, int* out, cudaGraph_t& g,
                cudaGraphExec_t& ex, cudaGraphNode_t& node) {
  cudaStreamBeginCapture(st, cudaStreamCaptureModeRelaxed);
  const cudaError_t le = launch(st, k, y, cluster_y, out);
  cudaStreamEndCapture(st, &g);
  size_t n = 1;
  cudaGraphGetNodes(g, &node, &n);
  const cudaError_t ie = cudaGraphInstantiate(&ex, g, 0);
  if (le != cudaSuccess || ie != cudaSuccess) {
    std::printf("record (y %u, cluster %u): launch %s, instantiate %s\n", y, cluster_y, rc(le), rc(ie));
    return false;
  }
  return true;
}

cudaError_t set_node(cudaGraphExec_t ex, cudaGraphNode_t node, void (*k)(int*), unsigned y, int** out) {
  cudaKernelNodeParams kp{};
  cudaGraphKernelNodeGetParams(node, &kp);
  void* args[1] = {out};
  kp.func = reinterpret_cast<void*>(k);
  kp.gridDim = dim3(kHeads, y);
  kp.kernelParams = args;
  kp.extra = nullptr;
  return cudaGraphExecKernelNodeSetParams(ex, node, &kp);
}

// set_node, a launch where the update passed, and its report line.
void update_run(cudaGraphExec_t ex, cudaGraphNode_t node, cudaStream_t st, void (*k)(int*), unsigned y, int** out,
                const char* what) {
  const cudaError_t e = set_node(ex, node, k, y, out);
  if (e == cudaSuccess) cudaGraphLaunch(ex, st);
  char line[128];
  std::snprintf(line, sizeof line, "%s, y %u: update %s", what, y, rc(e));
  report(line, *out, y);
}

}  // namespace

int main() {
  int* out = nullptr;
  cudaMalloc(&out, 2 * kHeads * 16 * sizeof(int));
  cudaMemset(out, 0xff, 2 * kHeads * 16 * sizeof(int));
  cudaStream_t st;
  cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
  g_st = st;
  const cudaError_t np16 = cudaFuncSetAttribute(cl16_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  std::printf("non-portable cluster sizes for cl16_kernel: %s\n", rc(np16));
  const cudaError_t np = cudaFuncSetAttribute(plain_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  std::printf("non-portable cluster sizes for plain_kernel: %s\n", rc(np));
  char line[128];

  // 1. a plain node (y = 4) swapped to the compile-time 8- and 16-block cluster kernels, and back.
  cudaGraph_t g;
  cudaGraphExec_t ex;
  cudaGraphNode_t node;
  if (record_one(st, plain_kernel, 4, 0, out, g, ex, node)) {
    cudaGraphLaunch(ex, st);
    report("1. plain node, y 4", out, 4);
    for (const unsigned y : {8u, 16u}) update_run(ex, node, st, cl8_kernel, y, &out, "1. swapped to cl8_kernel");
    update_run(ex, node, st, cl16_kernel, 16, &out, "1. swapped to cl16_kernel");
    update_run(ex, node, st, plain_kernel, 2, &out, "1. back to plain_kernel");
    cudaGraphExecDestroy(ex);
    cudaGraphDestroy(g);
  }

  // 2. a run-time 16-block cluster (y 16), re-sized to y 8 (not a multiple) and back to 16.
  if (record_one(st, plain_kernel, 16, 16, out, g, ex, node)) {
    cudaGraphLaunch(ex, st);
    report("2. run-time cluster 16, y 16", out, 16);
    for (const unsigned y : {8u, 16u}) update_run(ex, node, st, plain_kernel, y, &out, "2. re-sized");
    cudaGraphExecDestroy(ex);
    cudaGraphDestroy(g);
  }

  // 3. clusters that fit at once, 2 blocks an SM (100 KB of dynamic shared memory each).
  const int smem = 100 * 1024;
  cudaFuncSetAttribute(plain_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  for (const unsigned c : {8u, 16u}) {
    cudaLaunchAttribute at{};
    cudaLaunchConfig_t cfg = config(c, c, at);
    cfg.dynamicSmemBytes = smem;
    int n = 0;
    const cudaError_t e = cudaOccupancyMaxActiveClusters(&n, plain_kernel, &cfg);
    std::printf("3. %2u-block clusters at 2 blocks an SM: %d fit at once (%s)\n", c, n, rc(e));
  }
  // 4. (last: its launch failed on the H200 and the error is sticky) the template node's
  // cluster attribute to 8 and the grid to y 8, then a whole update of the executable graph.
  if (record_one(st, plain_kernel, 16, 16, out, g, ex, node)) {
    cudaLaunchAttributeValue v{};
    v.clusterDim.x = 1;
    v.clusterDim.y = 8;
    v.clusterDim.z = 1;
    const cudaError_t ae = cudaGraphKernelNodeSetAttribute(node, cudaLaunchAttributeClusterDimension, &v);
    cudaKernelNodeParams kp{};
    cudaGraphKernelNodeGetParams(node, &kp);
    void* args[1] = {&out};
    kp.gridDim = dim3(kHeads, 8);
    kp.kernelParams = args;
    kp.extra = nullptr;
    const cudaError_t pe = cudaGraphKernelNodeSetParams(node, &kp);
    cudaGraphExecUpdateResultInfo info{};
    const cudaError_t ue = cudaGraphExecUpdate(ex, g, &info);
    if (ue == cudaSuccess) cudaGraphLaunch(ex, st);
    std::snprintf(line, sizeof line, "4. node attribute 8 %s, params %s, exec update %s (result %d)", rc(ae), rc(pe),
                  rc(ue), static_cast<int>(info.result));
    report(line, out, 8);
    cudaGraphExecDestroy(ex);
    cudaGraphDestroy(g);
  }
  // 5. eager launches as the decode attention would issue them: a one-block cluster
  // attribute, and 16-block clusters with programmatic stream serialization (PDL).
  cudaFuncSetAttribute(plain_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 0);
  for (const unsigned c : {1u, 16u}) {
    for (const bool pdl : {false, true}) {
      cudaLaunchAttribute at[2]{};
      cudaLaunchConfig_t cfg = config(c, c, at[0]);
      cfg.stream = st;
      if (pdl) {
        at[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[1].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = at;
        cfg.numAttrs = 2;
      }
      const cudaError_t e = cudaLaunchKernelEx(&cfg, plain_kernel, out);
      std::snprintf(line, sizeof line, "5. eager, cluster %u%s: launch %s", c, pdl ? " + PDL" : "", rc(e));
      report(line, out, c);
      cudaGetLastError();
    }
  }
  std::printf("last error: %s\n", rc(cudaGetLastError()));
  return 0;
}
