// Engine metrics: counters, gauges and fixed-bucket histograms the engine thread keeps,
// copied out as a MetricsSnapshot (Engine::metrics) and rendered in the Prometheus text
// exposition format (render_prometheus) for the server's /metrics.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace brass::runtime {

// Fixed upper bounds (le); counts[i] = observations <= bounds[i] and > bounds[i-1]
// (per bucket, not cumulative); counts.back() is the +Inf bucket.
struct Histogram {
  std::vector<double> bounds;
  std::vector<uint64_t> counts;  // bounds.size() + 1
  double sum = 0.0;
  uint64_t count = 0;

  Histogram() = default;
  explicit Histogram(std::vector<double> b) : bounds(std::move(b)), counts(bounds.size() + 1, 0) {}
  void observe(double v);
};

// Bucket sets used by the engine.
std::vector<double> ttft_buckets_seconds();        // 5 ms .. 60 s
std::vector<double> inter_token_buckets_seconds(); // 1 ms .. 5 s
std::vector<double> seqs_per_step_buckets();       // 1, 2, 4, ... 256

struct MetricsSnapshot {
  // Requests
  uint64_t requests_total = 0;           // accepted by submit
  uint64_t requests_rejected_total = 0;  // kQueueFull
  uint64_t requests_finished_total = 0;  // kDone sent
  uint64_t finish_stop_total = 0, finish_length_total = 0, finish_cancelled_total = 0,
           finish_error_total = 0;       // per completion
  int64_t requests_running = 0;          // with at least one sequence scheduled
  int64_t requests_waiting = 0;          // queue depth
  int64_t sequences_running = 0;
  // Tokens
  uint64_t prompt_tokens_total = 0;           // prompt tokens of accepted requests (x n)
  uint64_t prompt_tokens_computed_total = 0;  // run through the model
  uint64_t generation_tokens_total = 0;
  // Latency
  Histogram ttft_seconds{ttft_buckets_seconds()};
  Histogram inter_token_seconds{inter_token_buckets_seconds()};
  // Batching
  uint64_t steps_total = 0;
  uint64_t pipelined_steps_total = 0;  // steps issued before the previous step's tokens were back
  Histogram seqs_per_step{seqs_per_step_buckets()};
  int64_t last_step_seqs = 0, max_step_seqs = 0;
  uint64_t step_tokens_total = 0;
  // KV cache
  int64_t kv_bytes = 0;          // all sequences held by the model (running + prefix cache)
  int64_t kv_tokens = 0;         // positions stored, same sequences
  int64_t kv_sequences = 0;      // sequences held in the model (running + prefix cache)
  int64_t kv_cached_seqs = 0;    // prefix-cache entries
  int64_t kv_cached_bytes = 0;
  int64_t kv_pool_tokens = 0;       // positions the full-attention layers' block pool holds
  int64_t kv_pool_free_tokens = 0;  // of those, not held by any sequence (running or cached)
  int64_t kv_block_size = 0;        // positions per block
  uint64_t preemptions_total = 0;   // running sequences whose KV was freed for others (recomputed later)
  int64_t sequences_preempted = 0;  // waiting to be recomputed
  // Prefix cache
  uint64_t prefix_cache_hits_total = 0;      // sequences that reused > 0 tokens
  uint64_t prefix_cache_misses_total = 0;
  uint64_t prefix_cache_reused_tokens_total = 0;
  uint64_t prefix_cache_evictions_total = 0;
};

// Prometheus text format, every metric named `<prefix>_...` with HELP and TYPE lines.
std::string render_prometheus(const MetricsSnapshot& m, std::string_view prefix = "brass");

}  // namespace brass::runtime
