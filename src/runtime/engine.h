// Engine: continuous-batching generation over one Model, for the HTTP server and the CLI.
//
// Threads: one engine thread owns the Model (the only thread that calls forward). Any
// other thread submits Requests and gets back a RequestHandle whose events (tokens,
// finish, done) arrive through a thread-safe queue (or, if Request::on_event is set,
// through that callback, called on the engine thread).
//
// Scheduling (vLLM-style, scheduler.h): each sequence knows how many of its tokens are
// known (prompt + generated) and how many have been computed into the KV cache. Every
// step fills a token budget (EngineOptions::step_tokens) first with one decode token per
// running sequence, then with prefill chunks of sequences still reading their prompt,
// and runs them all in ONE Model::forward call. Requests join (from the waiting queue,
// up to `parallel` running sequences) and leave (finished, cancelled) between steps.
//
// KV block pool (model::KvCache): the full-attention layers of every sequence (running
// and prefix-cache entries) draw fixed-size blocks from one pool (ModelOptions::kv_tokens,
// --kv-tokens). A request is admitted only when the pool can hold its prompt + 1 token on
// top of what the running sequences still need for theirs (prefix-cache entries are
// evicted first, least recently used; otherwise it waits in order). When a running
// sequence cannot grow, prefix-cache entries are evicted, then the lowest-priority
// (latest admitted) running sequence is preempted: its KV is freed and it is recomputed
// later from its known tokens (prompt + generated so far; vLLM's recompute preemption),
// ahead of any queued request. The per-sequence context is capped at the pool's size, so
// one sequence alone always fits: a prompt longer than that is refused at submit.
//
// Prefix reuse (prefix_cache.h): a finished sequence's KV stays in the model as a cache
// entry (LRU, bounded by prefix_cache_seqs and prefix_cache_bytes, window snapshots
// included). A new sequence takes the entry with the longest common token prefix that
// the KV cache can truncate to (model::KvCache::usable_cut, the one rule: full-attention
// layers: any length; sliding layers: while their ring still holds the window before
// the cut, or at a length where a window snapshot was taken) and computes only the
// tokens after it. The engine snapshots the sliding window at the end of every prompt
// (~3 MB for the 20b model in f16), so both agent-loop shapes compute only the new turn
// (Usage::prompt_tokens_computed): prompt + whole completion + new turn (the cut is at
// the entry's end) and prompt + final answer only + new turn (Harmony drops the
// analysis: the cut is at the end of the previous prompt, however long the completion).
// Exact: the restored window holds the very K/V bytes the uncut run stored.
//
// n > 1: the n completions are n sequences (seed + i for completion i); each reads the
// prompt (the later ones usually reuse nothing: entries are taken, not shared).
//
// Not done (yet): resuming at a cut that is neither in the ring nor at a snapshot (the
// entry is then reused up to its latest snapshot before the cut, or not at all).
// Recomputing only the last window there would NOT be exact: a sliding layer's K/V
// depend on the previous layers' windows, a receptive field of about
// n_sliding_layers * (n_swa - 1) tokens. Also not done: sharing one prompt prefill
// between the n completions (needs a KV copy).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "runtime/metrics.h"
#include "runtime/sampler.h"

namespace brass::model {
class Model;
struct GptOssConfig;
}  // namespace brass::model

namespace brass::runtime {

struct EngineOptions {
  int32_t parallel = 4;          // --parallel: max running sequences (completions) at once
  int64_t n_ctx = 0;             // --ctx: per-sequence context (prompt + completion);
                                 //   0 or more than the model's KV n_ctx_max: that limit;
                                 //   at most the KV block pool's positions
  int32_t max_queue = 64;        // --max-queue: waiting requests; more -> SubmitCode::kQueueFull
  int64_t step_tokens = 512;     // token budget of one forward step (decode + prefill chunks)
  int32_t prefix_cache_seqs = 8; // finished sequences kept for prefix reuse (0: reuse off)
  int64_t prefix_cache_bytes = int64_t{4} << 30;  // KV bytes the kept sequences may hold
  // Decode steps whose every sequence picks on the backend (greedy or a plain draw) are
  // pipelined (Model::submit / collect): step N + 1 is issued, fed from step N's picks on
  // the backend, before step N's tokens come back, so the backend does not idle while the
  // host handles them. A sequence that stops at N has one extra position computed (its
  // stop token's) and that pick dropped. false: one forward() a step.
  bool pipeline = true;
};

// Per-completion logit constraint (constrained decoding: JSON schema, grammar, tool
// names). Created once per completion by Request::constraint; `apply` runs on the engine
// thread before each token of that completion is sampled, with the tokens the completion
// generated so far, and may lower logits (set -INFINITY to forbid). Sampling, and the
// reported logprobs, then use the masked row. A failed Status finishes the completion
// with FinishReason::kError and that message.
class LogitConstraint {
 public:
  virtual ~LogitConstraint() = default;
  virtual Status apply(std::span<const int32_t> generated, std::span<float> logits) = 0;
};
using ConstraintFactory = std::function<std::unique_ptr<LogitConstraint>(int32_t index)>;

enum class FinishReason { kStop, kLength, kCancelled, kError };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "cancelled", "error"

struct Usage {
  int64_t prompt_tokens = 0;           // prompt length (counted once, whatever n)
  int64_t cached_prompt_tokens = 0;    // prompt tokens reused from the prefix cache (completion 0)
  int64_t prompt_tokens_computed = 0;  // prompt tokens actually run through the model (all completions)
  int64_t completion_tokens = 0;       // generated tokens of all completions, stop tokens included
};

struct Timings {
  double queue_ms = 0;          // submit -> first step that computed any of its tokens
  double ttft_ms = 0;           // submit -> first generated token (any completion)
  double prompt_ms = 0;         // first scheduled -> first token
  double decode_ms = 0;         // first token -> last token (all completions)
  double decode_tok_per_s = 0;  // tokens after each completion's first / decode time
};

struct Event {
  enum class Kind {
    kToken,   // a generated token of completion `index` (stop tokens are NOT sent as kToken)
    kFinish,  // completion `index` finished: `finish`, and for kStop the stop token in `token`
    kDone,    // the whole request is over (always the last event): usage + timings
  };
  Kind kind = Kind::kToken;
  int32_t index = 0;                // completion 0..n-1
  int32_t token = -1;
  float logprob = 0.0f;             // log-probability of `token` (masked row, see LogitConstraint)
  std::vector<TokenLogprob> top;    // Request::sampling.n_logprobs best alternatives
  FinishReason finish = FinishReason::kStop;
  std::string error;                // kFinish with kError
  Usage usage;                      // kDone
  Timings timings;                  // kDone
};

struct Request {
  std::vector<int32_t> prompt;       // token ids (rendered harmony conversation), not empty
  SamplerParams sampling;            // seed: completion i uses sampling.seed + i;
                                     //   n_logprobs: top alternatives per token (top_logprobs)
  int64_t max_tokens = -1;           // per completion; -1: until the context is full
  std::vector<int32_t> stop_tokens;  // e.g. <|return|>, <|call|>; the token ends with kStop
  int32_t n = 1;                     // completions
  // false: Event::logprob is not computed (left 0). A greedy completion (temperature <= 0,
  // no penalties, no constraint, no top alternatives) then picks its tokens on the model's
  // backend and only the token id comes back (no logits row per step).
  bool token_logprob = true;
  ConstraintFactory constraint;      // optional
  // Optional: receive events here (engine thread; must not block or call into the
  // Engine except RequestHandle::cancel) instead of through RequestHandle::next.
  std::function<void(const Event&)> on_event;
};

class RequestHandle {
 public:
  virtual ~RequestHandle() = default;
  virtual uint64_t id() const = 0;
  // Wait for the next event; false on timeout (or when events go to on_event).
  virtual bool next(Event& ev, std::chrono::milliseconds timeout = std::chrono::hours(24)) = 0;
  // Thread-safe, idempotent: the engine drops the request's sequences (KV freed) before
  // its next step; unfinished completions get kFinish(kCancelled), then kDone.
  virtual void cancel() = 0;
  // kDone has been produced (it may still sit in the queue).
  virtual bool finished() const = 0;
};

enum class SubmitCode {
  kOk,
  kQueueFull,  // max_queue requests already waiting: answer 503 + Retry-After
  kInvalid,    // bad request (empty prompt, token id out of range, prompt >= n_ctx, n < 1, ...)
  kShutdown,   // the engine is stopping or failed
};

struct Submitted {
  SubmitCode code = SubmitCode::kOk;
  std::string message;                    // why, when not kOk
  std::shared_ptr<RequestHandle> handle;  // kOk only
  bool ok() const { return code == SubmitCode::kOk; }
};

class Engine {
 public:
  // Takes the model and starts the engine thread.
  static Result<std::unique_ptr<Engine>> create(std::unique_ptr<model::Model> model,
                                                const EngineOptions& o = {});
  // Stops the thread: requests still waiting or running finish with kCancelled.
  ~Engine();

  Submitted submit(Request r);

  MetricsSnapshot metrics() const;  // thread-safe copy
  const model::GptOssConfig& config() const;
  int64_t n_ctx() const;             // effective per-sequence context
  int64_t n_vocab() const;
  const EngineOptions& options() const;

  // Block until no request is waiting or running (tests, graceful shutdown); false on timeout.
  bool wait_idle(std::chrono::milliseconds timeout = std::chrono::seconds(60));
  // Drop every prefix-cache entry (frees their KV); runs on the engine thread, returns when done.
  void clear_prefix_cache();

  class Impl;

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace brass::runtime
