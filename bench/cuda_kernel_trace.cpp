// A CUPTI injection library that records every kernel's GPU start and end (graph kernel
// nodes included) and writes them as CSV at exit, in the columns of nsys's
// cuda_gpu_trace report ("Start (ns)", "Duration (ns)", "Name"), for
// bench/cuda_nsys_timeline.py. For machines without Nsight Systems.
// Build: g++ -O2 -shared -fPIC bench/cuda_kernel_trace.cpp -I$CUDA/include -L$CUDA/lib64 -lcupti
//        -o /tmp/libktrace.so   (CUDA=/usr/local/cuda; cupti.h and libcupti ship in the toolkit)
// Use:   CUDA_INJECTION64_PATH=/tmp/libktrace.so BRASS_TRACE_OUT=trace.csv <program>
#include <cupti.h>
#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#ifndef BRASS_KREC
#define BRASS_KREC CUpti_ActivityKernel10
#endif

namespace {

struct Rec {
  uint64_t start, end;
  std::string name;
};
std::vector<Rec>* g_recs = nullptr;
std::mutex g_mu;

void CUPTIAPI buffer_requested(uint8_t** buf, size_t* size, size_t* max_records) {
  *size = 16 << 20;
  *buf = static_cast<uint8_t*>(std::aligned_alloc(8, *size));
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buf, size_t, size_t valid) {
  CUpti_Activity* r = nullptr;
  std::lock_guard<std::mutex> lk(g_mu);
  while (cuptiActivityGetNextRecord(buf, valid, &r) == CUPTI_SUCCESS) {
    if (r->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && r->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
    const auto* k = reinterpret_cast<const BRASS_KREC*>(r);
    int st = 0;
    char* dm = abi::__cxa_demangle(k->name, nullptr, nullptr, &st);
    g_recs->push_back({k->start, k->end, st == 0 && dm ? dm : k->name});
    std::free(dm);
  }
  std::free(buf);
}

void write_out() {
  cuptiActivityFlushAll(1);
  const char* path = std::getenv("BRASS_TRACE_OUT");
  FILE* f = std::fopen(path ? path : "kernel_trace.csv", "w");
  if (!f) return;
  std::fprintf(f, "Start (ns),Duration (ns),Name\n");
  std::lock_guard<std::mutex> lk(g_mu);
  for (const Rec& r : *g_recs) {
    std::string n = r.name;
    for (char& c : n)
      if (c == '"') c = '\'';
    std::fprintf(f, "%llu,%llu,\"%s\"\n", static_cast<unsigned long long>(r.start),
                 static_cast<unsigned long long>(r.end - r.start), n.c_str());
  }
  std::fclose(f);
}

}  // namespace

extern "C" int InitializeInjection(void) {
  g_recs = new std::vector<Rec>();
  g_recs->reserve(1 << 20);
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS) return 0;
  if (cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) return 0;
  std::atexit(write_out);
  return 1;
}
