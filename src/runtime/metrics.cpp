// Histogram bookkeeping and the Prometheus text exposition of a MetricsSnapshot
// (https://prometheus.io/docs/instrumenting/exposition_formats/: HELP/TYPE lines,
// cumulative `_bucket{le=...}` series ending with le="+Inf", then `_sum` and `_count`).
#include "runtime/metrics.h"

#include <fmt/format.h>

#include <algorithm>

namespace brass::runtime {

void Histogram::observe(double v) {
  if (counts.size() != bounds.size() + 1) counts.assign(bounds.size() + 1, 0);
  const size_t i = static_cast<size_t>(std::lower_bound(bounds.begin(), bounds.end(), v) - bounds.begin());
  ++counts[i];
  sum += v;
  ++count;
}

std::vector<double> ttft_buckets_seconds() {
  return {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
}
std::vector<double> inter_token_buckets_seconds() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5};
}
std::vector<double> seqs_per_step_buckets() { return {1, 2, 4, 8, 16, 32, 64, 128, 256}; }

namespace {

struct Writer {
  std::string out;
  std::string_view prefix;
  void head(const char* name, const char* type, const char* help) {
    out += fmt::format("# HELP {}_{} {}\n# TYPE {}_{} {}\n", prefix, name, help, prefix, name, type);
  }
  template <class T>
  void scalar(const char* name, const char* type, const char* help, T v) {
    head(name, type, help);
    out += fmt::format("{}_{} {}\n", prefix, name, v);
  }
  void labeled(const char* name, const char* label, const char* value, uint64_t v) {
    out += fmt::format("{}_{}{{{}=\"{}\"}} {}\n", prefix, name, label, value, v);
  }
  void hist(const char* name, const char* help, const Histogram& h) {
    head(name, "histogram", help);
    uint64_t cum = 0;
    for (size_t i = 0; i < h.bounds.size(); ++i) {
      cum += i < h.counts.size() ? h.counts[i] : 0;
      out += fmt::format("{}_{}_bucket{{le=\"{}\"}} {}\n", prefix, name, h.bounds[i], cum);
    }
    out += fmt::format("{}_{}_bucket{{le=\"+Inf\"}} {}\n", prefix, name, h.count);
    out += fmt::format("{}_{}_sum {}\n{}_{}_count {}\n", prefix, name, h.sum, prefix, name, h.count);
  }
};

}  // namespace

std::string render_prometheus(const MetricsSnapshot& m, std::string_view prefix) {
  Writer w{{}, prefix};
  w.scalar("requests_total", "counter", "Requests accepted.", m.requests_total);
  w.scalar("requests_rejected_total", "counter", "Requests rejected because the queue was full.",
           m.requests_rejected_total);
  w.scalar("requests_finished_total", "counter", "Requests completed (any reason).", m.requests_finished_total);
  w.head("completions_finished_total", "counter", "Completions finished, by reason.");
  w.labeled("completions_finished_total", "reason", "stop", m.finish_stop_total);
  w.labeled("completions_finished_total", "reason", "length", m.finish_length_total);
  w.labeled("completions_finished_total", "reason", "cancelled", m.finish_cancelled_total);
  w.labeled("completions_finished_total", "reason", "error", m.finish_error_total);
  w.scalar("requests_running", "gauge", "Requests with sequences in the running batch.", m.requests_running);
  w.scalar("requests_waiting", "gauge", "Requests waiting in the queue (queue depth).", m.requests_waiting);
  w.scalar("sequences_running", "gauge", "Sequences in the running batch.", m.sequences_running);
  w.scalar("prompt_tokens_total", "counter", "Prompt tokens of accepted requests.", m.prompt_tokens_total);
  w.scalar("prompt_tokens_computed_total", "counter", "Prompt tokens run through the model (not reused).",
           m.prompt_tokens_computed_total);
  w.scalar("generation_tokens_total", "counter", "Generated tokens.", m.generation_tokens_total);
  w.hist("time_to_first_token_seconds", "Time from submit to the first generated token.", m.ttft_seconds);
  w.hist("inter_token_latency_seconds", "Time between consecutive tokens of a sequence.", m.inter_token_seconds);
  w.scalar("steps_total", "counter", "Forward steps run by the scheduler.", m.steps_total);
  w.scalar("pipelined_steps_total", "counter",
           "Decode steps issued before the previous step's tokens came back (pipelined).", m.pipelined_steps_total);
  w.scalar("step_tokens_total", "counter", "Tokens computed by all forward steps.", m.step_tokens_total);
  w.hist("sequences_per_step", "Sequences batched into one forward step (continuous batching).", m.seqs_per_step);
  w.scalar("sequences_last_step", "gauge", "Sequences in the last forward step.", m.last_step_seqs);
  w.scalar("sequences_per_step_max", "gauge", "Most sequences batched into one forward step.", m.max_step_seqs);
  w.scalar("kv_cache_bytes", "gauge", "KV-cache bytes held (running sequences and prefix cache).", m.kv_bytes);
  w.scalar("kv_cache_tokens", "gauge", "KV-cache positions held (running sequences and prefix cache).", m.kv_tokens);
  w.scalar("kv_cache_sequences", "gauge", "Sequences held in the KV cache (running and prefix cache).",
           m.kv_sequences);
  w.scalar("kv_pool_tokens", "gauge", "Positions the KV block pool of the full-attention layers holds.",
           m.kv_pool_tokens);
  w.scalar("kv_pool_free_tokens", "gauge", "Positions of the KV block pool no sequence holds.",
           m.kv_pool_free_tokens);
  w.scalar("kv_block_size", "gauge", "Positions per KV block.", m.kv_block_size);
  w.scalar("preemptions_total", "counter", "Running sequences whose KV was freed to let others grow (recomputed).",
           m.preemptions_total);
  w.scalar("sequences_preempted", "gauge", "Preempted sequences waiting to be recomputed.", m.sequences_preempted);
  w.scalar("prefix_cache_sequences", "gauge", "Finished sequences kept for prefix reuse.", m.kv_cached_seqs);
  w.scalar("prefix_cache_bytes", "gauge", "KV-cache bytes of the prefix-cache entries.", m.kv_cached_bytes);
  w.scalar("prefix_cache_hits_total", "counter", "Sequences that reused a cached prefix.", m.prefix_cache_hits_total);
  w.scalar("prefix_cache_misses_total", "counter", "Sequences that found no reusable prefix.",
           m.prefix_cache_misses_total);
  w.scalar("prefix_cache_reused_tokens_total", "counter", "Prompt tokens reused from the prefix cache.",
           m.prefix_cache_reused_tokens_total);
  w.scalar("prefix_cache_evictions_total", "counter", "Prefix-cache entries evicted.",
           m.prefix_cache_evictions_total);
  return std::move(w.out);
}

}  // namespace brass::runtime
