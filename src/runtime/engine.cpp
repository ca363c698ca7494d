// Engine implementation: the request/handle plumbing between threads, and the engine
// thread's loop (cancellations -> admissions -> one planned forward step -> sampling ->
// finished sequences into the prefix cache). Everything below "engine thread only"
// is touched by that thread alone; the waiting queue, commands and the idle flag live
// under Shared::mu; each request's event queue under its own mutex; metrics under
// metrics_mu.
#include "runtime/engine.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "core/log.h"
#include "model/model.h"
#include "runtime/prefix_cache.h"
#include "runtime/scheduler.h"

namespace brass::runtime {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "error";
}

namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// What the engine thread and the handles share (kept alive by both).
struct Shared {
  std::mutex mu;
  std::condition_variable cv;  // wakes the engine thread
  bool wake = false;
};

struct ReqState {
  uint64_t id = 0;
  Request req;
  std::shared_ptr<Shared> shared;
  Clock::time_point t_submit;
  std::atomic<bool> cancelled{false};
  std::atomic<bool> finished{false};

  std::mutex mu;
  std::condition_variable cv;
  std::deque<Event> events;

  // Engine thread only.
  int32_t admitted = 0;  // completions that were given a sequence (or finished unadmitted)
  int32_t open = 0;      // admitted completions not finished yet
  int32_t with_tokens = 0;
  bool scheduled = false, any_token = false;
  Clock::time_point t_first_sched, t_first_token, t_last_token;
  Usage usage;

  void emit(Event ev) {
    if (req.on_event) {
      req.on_event(ev);
      return;
    }
    {
      std::lock_guard lk(mu);
      events.push_back(std::move(ev));
    }
    cv.notify_all();
  }
};

class Handle final : public RequestHandle {
 public:
  explicit Handle(std::shared_ptr<ReqState> st) : st_(std::move(st)) {}
  uint64_t id() const override { return st_->id; }
  bool next(Event& ev, std::chrono::milliseconds timeout) override {
    if (st_->req.on_event) return false;
    std::unique_lock lk(st_->mu);
    if (!st_->cv.wait_for(lk, timeout, [&] { return !st_->events.empty(); })) return false;
    ev = std::move(st_->events.front());
    st_->events.pop_front();
    return true;
  }
  void cancel() override {
    if (st_->cancelled.exchange(true)) return;
    {
      std::lock_guard lk(st_->shared->mu);
      st_->shared->wake = true;
    }
    st_->shared->cv.notify_all();
  }
  bool finished() const override { return st_->finished.load(); }

 private:
  std::shared_ptr<ReqState> st_;
};

// One completion being generated: a model sequence.
struct Seq {
  int32_t seq_id = 0;
  std::shared_ptr<ReqState> req;
  int32_t index = 0;
  std::vector<int32_t> tokens;  // prompt + generated
  int64_t n_prompt = 0;
  int64_t computed = 0;         // == the model sequence's length
  int64_t n_generated = 0;
  Sampler sampler;
  std::unique_ptr<LogitConstraint> constraint;
  Clock::time_point t_last;
  uint64_t order = 0;           // admission order (priority: lower first; kept when preempted)
  bool done = false;
  bool keep = false;            // on removal: move the KV into the prefix cache

  explicit Seq(const SamplerParams& p) : sampler(p) {}
};

}  // namespace

class Engine::Impl {
 public:
  Impl(std::unique_ptr<model::Model> m, const EngineOptions& o) : model(std::move(m)), opt(o) {
    const int64_t kv_max = model->kv_cache().n_ctx_max();
    n_ctx = opt.n_ctx > 0 ? std::min(opt.n_ctx, kv_max) : kv_max;
    // One sequence must always fit the KV block pool alone (the others preempted, the
    // prefix cache emptied): so no admitted request can wait forever.
    const int64_t pool = model->kv_cache().pool_tokens();
    if (n_ctx > pool) {
      BRASS_LOG_WARN("engine: the KV pool holds {} positions: the per-sequence context is {} instead of {}", pool,
                     pool, n_ctx);
      n_ctx = pool;
      pool_caps_ctx = true;
    }
    opt.n_ctx = n_ctx;
    opt.parallel = std::max(opt.parallel, 1);
    opt.max_queue = std::max(opt.max_queue, 0);
    // Every running sequence must be able to decode each step: the budget covers them.
    opt.step_tokens = std::max<int64_t>(opt.step_tokens, opt.parallel);
    n_vocab = model->config().n_vocab;
    shared = std::make_shared<Shared>();
    thread = std::thread([this] { run(); });
  }
  ~Impl() {
    {
      std::lock_guard lk(shared->mu);
      stop = true;
    }
    shared->cv.notify_all();
    if (thread.joinable()) thread.join();
  }

  Submitted submit(Request r);
  MetricsSnapshot snapshot() const;
  bool wait_idle(std::chrono::milliseconds timeout) {
    std::unique_lock lk(shared->mu);
    return idle_cv.wait_for(lk, timeout, [&] { return idle && waiting.empty(); });
  }
  void command(std::function<void()> fn) {
    auto done = std::make_shared<std::promise<void>>();
    auto fut = done->get_future();
    {
      std::lock_guard lk(shared->mu);
      if (stop) return;
      commands.push_back([fn = std::move(fn), done] {
        fn();
        done->set_value();
      });
    }
    shared->cv.notify_all();
    fut.wait();
  }
  void clear_cache() {
    for (int32_t id : cache.evict(0, 0)) remove_model_seq(id);
    update_kv_metrics();
  }

  std::unique_ptr<model::Model> model;
  EngineOptions opt;
  int64_t n_ctx = 0, n_vocab = 0;
  bool pool_caps_ctx = false;  // n_ctx is the KV pool's size
  std::shared_ptr<Shared> shared;

  // Under shared->mu.
  std::deque<std::shared_ptr<ReqState>> waiting;
  std::vector<std::function<void()>> commands;
  bool stop = false, idle = true;
  std::condition_variable idle_cv;
  uint64_t next_request_id = 1;

  mutable std::mutex metrics_mu;
  MetricsSnapshot metrics;

 private:
  void run();
  void process_cancellations();
  void admit();
  // false: the KV pool cannot take the sequence now (nothing changed; it stays queued).
  bool start_sequence(const std::shared_ptr<ReqState>& r, int32_t index);
  // A preempted sequence back into the running batch (false: no room yet).
  bool resume_sequence();
  void step();
  // ---- pipelined decode (EngineOptions::pipeline) ----
  // A step whose chunks are all one decode token picked on the backend.
  bool pipelinable(const std::vector<model::SeqChunk>& batch) const;
  // With a round in flight (`ahead`): issue the next round of the same sequences, fed from
  // its picks, then collect it. false (nothing issued): a sequence left, joined, stops
  // picking on the backend, may end by length, or the KV pool cannot grow them.
  bool submit_ahead();
  // Collect the round in flight and take its picks.
  void drain();
  // Collect the oldest round in flight (of `orders`) and take its picks (a failure ends
  // its sequences with an error).
  void collect_round(const std::vector<uint64_t>& orders, const std::vector<uint64_t>* next);
  // A collected round's picks (one per sequence of `orders`) as a step's output; `next`:
  // the sequences of the round issued after it.
  void take_picks(const std::vector<uint64_t>& orders, const std::vector<int32_t>& picks,
                  const std::vector<uint64_t>* next);
  Seq* find_running(uint64_t order);
  void count_step(size_t n_seqs, int64_t n_tok, bool pipelined);
  // ---- the KV block pool ----
  // Blocks the running sequences still need to hold every known token + 1.
  int64_t pending_blocks() const;
  // Drop the least recently used prefix-cache entry (false: the cache is empty).
  bool evict_one_cached();
  // Evict prefix-cache entries until `target` blocks are free; false if they cannot be.
  bool make_room(int64_t target);
  // Free running[i]'s KV and queue it to be recomputed (vLLM's recompute preemption).
  void preempt(size_t i);
  // Insert into `running` by admission order.
  void insert_running(std::unique_ptr<Seq> s);
  // row: the logits row; null when the backend picked greedily (`picked`).
  void sample(Seq& s, const float* row, int32_t picked = -1);
  bool device_greedy(const Seq& s) const;
  bool device_sample(const Seq& s) const;
  void finish(Seq& s, FinishReason why, int32_t token, const std::string& err);
  void finish_completion(ReqState& r, int32_t index, FinishReason why, int32_t token, const std::string& err);
  void maybe_done(ReqState& r);
  void retire_done_sequences();
  void remove_model_seq(int32_t id);
  void update_kv_metrics();
  void update_running_metrics();
  int32_t alloc_seq_id();

  // Engine thread only.
  std::vector<std::unique_ptr<Seq>> running;         // admission order = priority
  std::deque<std::unique_ptr<Seq>> preempted;        // KV freed, to recompute; by admission order
  std::deque<std::shared_ptr<ReqState>> admitting;   // requests with completions still to admit
  // The sequences (Seq::order, in chunk order) of the submitted round whose picks are not
  // back yet (pipelined decode). Their `computed` does not count its position yet.
  std::optional<std::vector<uint64_t>> ahead;
  uint64_t next_order = 0;
  PrefixCache cache;
  std::set<int32_t> live;  // every sequence the engine holds in the model (running + cached)
  int32_t next_seq_id = 0;
  model::ForwardOutput out;
  std::vector<float> masked;  // (n_vocab) logits row handed to a LogitConstraint
  std::thread thread;
};

Submitted Engine::Impl::submit(Request r) {
  Submitted res;
  auto invalid = [&](std::string msg) {
    res.code = SubmitCode::kInvalid;
    res.message = std::move(msg);
    return res;
  };
  if (r.prompt.empty()) return invalid("the prompt is empty");
  for (size_t i = 0; i < r.prompt.size(); ++i)
    if (r.prompt[i] < 0 || r.prompt[i] >= n_vocab)
      return invalid(fmt::format("prompt token {} is {}: expected an id in [0, {})", i, r.prompt[i], n_vocab));
  if (static_cast<int64_t>(r.prompt.size()) >= n_ctx)
    return invalid(fmt::format("the prompt has {} tokens: the context of {}{} leaves no room to generate",
                               r.prompt.size(), n_ctx,
                               pool_caps_ctx ? " (the KV block pool's size, --kv-tokens)" : ""));
  if (r.n < 1 || r.n > 128) return invalid(fmt::format("n is {}: expected 1..128", r.n));
  if (r.max_tokens == 0 || r.max_tokens < -1)
    return invalid(fmt::format("max_tokens is {}: expected >= 1 (or -1: until the context is full)", r.max_tokens));
  if (r.sampling.n_logprobs < 0 || r.sampling.n_logprobs > n_vocab)
    return invalid(fmt::format("n_logprobs is {}: expected 0..{}", r.sampling.n_logprobs, n_vocab));
  for (int32_t t : r.stop_tokens)
    if (t < 0 || t >= n_vocab) return invalid(fmt::format("stop token {}: expected an id in [0, {})", t, n_vocab));

  auto st = std::make_shared<ReqState>();
  st->shared = shared;
  st->t_submit = Clock::now();
  const int64_t prompt_tokens = static_cast<int64_t>(r.prompt.size()) * r.n;
  st->usage.prompt_tokens = static_cast<int64_t>(r.prompt.size());
  st->req = std::move(r);
  {
    std::lock_guard lk(shared->mu);
    if (stop) {
      res.code = SubmitCode::kShutdown;
      res.message = "the engine is shutting down";
      return res;
    }
    if (static_cast<int64_t>(waiting.size()) >= opt.max_queue) {
      res.code = SubmitCode::kQueueFull;
      res.message = fmt::format("the queue is full ({} requests waiting)", waiting.size());
      std::lock_guard ml(metrics_mu);
      ++metrics.requests_rejected_total;
      return res;
    }
    st->id = next_request_id++;
    waiting.push_back(st);
    idle = false;
    shared->wake = true;
  }
  {
    std::lock_guard ml(metrics_mu);
    ++metrics.requests_total;
    metrics.prompt_tokens_total += static_cast<uint64_t>(prompt_tokens);
  }
  shared->cv.notify_all();
  res.handle = std::make_shared<Handle>(std::move(st));
  return res;
}

MetricsSnapshot Engine::Impl::snapshot() const {
  MetricsSnapshot m;
  {
    std::lock_guard ml(metrics_mu);
    m = metrics;
  }
  std::lock_guard lk(shared->mu);
  m.requests_waiting = static_cast<int64_t>(waiting.size());
  return m;
}

void Engine::Impl::run() {
  for (;;) {
    std::vector<std::function<void()>> cmds;
    {
      std::unique_lock lk(shared->mu);
      if (running.empty() && preempted.empty() && admitting.empty() && waiting.empty() && !ahead) {
        idle = true;
        idle_cv.notify_all();
      }
      shared->cv.wait(lk, [&] {
        return stop || shared->wake || !commands.empty() || !running.empty() || !preempted.empty() ||
               !admitting.empty() || !waiting.empty() || ahead;
      });
      shared->wake = false;
      if (stop) break;
      cmds.swap(commands);
      if (!waiting.empty()) idle = false;
    }
    for (auto& c : cmds) c();
    process_cancellations();
    admit();
    if (!running.empty() || ahead) step();
    retire_done_sequences();
    update_running_metrics();
  }
  if (ahead) drain();
  // Shutdown: everything still waiting or running is cancelled.
  std::deque<std::shared_ptr<ReqState>> rest;
  {
    std::lock_guard lk(shared->mu);
    rest.swap(waiting);
    for (auto& c : commands) c();
    commands.clear();
  }
  for (auto& s : running)
    if (!s->done) finish(*s, FinishReason::kCancelled, -1, {});
  for (auto& s : preempted) finish(*s, FinishReason::kCancelled, -1, {});
  preempted.clear();
  retire_done_sequences();
  for (auto& r : admitting) rest.push_back(r);
  admitting.clear();
  for (auto& r : rest)
    while (r->admitted < r->req.n) finish_completion(*r, r->admitted++, FinishReason::kCancelled, -1, {});
  clear_cache();
  update_running_metrics();
  std::lock_guard lk(shared->mu);
  idle = true;
  idle_cv.notify_all();
}

void Engine::Impl::process_cancellations() {
  std::vector<std::shared_ptr<ReqState>> dropped;
  {
    std::lock_guard lk(shared->mu);
    for (auto it = waiting.begin(); it != waiting.end();)
      if ((*it)->cancelled) {
        dropped.push_back(*it);
        it = waiting.erase(it);
      } else {
        ++it;
      }
  }
  for (auto it = admitting.begin(); it != admitting.end();)
    if ((*it)->cancelled) {
      dropped.push_back(*it);
      it = admitting.erase(it);
    } else {
      ++it;
    }
  for (auto& s : running)
    if (!s->done && s->req->cancelled) finish(*s, FinishReason::kCancelled, -1, {});
  for (auto it = preempted.begin(); it != preempted.end();)  // (they hold no KV)
    if ((*it)->req->cancelled) {
      finish(**it, FinishReason::kCancelled, -1, {});
      it = preempted.erase(it);
    } else {
      ++it;
    }
  for (auto& r : dropped)
    while (r->admitted < r->req.n) finish_completion(*r, r->admitted++, FinishReason::kCancelled, -1, {});
  retire_done_sequences();
}

void Engine::Impl::admit() {
  while (static_cast<int32_t>(running.size()) < opt.parallel) {
    if (!preempted.empty()) {  // they were running before anything still queued
      if (!resume_sequence()) break;
      continue;
    }
    std::shared_ptr<ReqState> r;
    if (!admitting.empty()) {
      r = admitting.front();
    } else {
      std::lock_guard lk(shared->mu);
      if (waiting.empty()) break;
      r = waiting.front();
      waiting.pop_front();
      admitting.push_back(r);
    }
    const int32_t index = r->admitted++;
    if (!start_sequence(r, index)) {  // the pool is full: wait, in order
      --r->admitted;
      break;
    }
    if (r->admitted >= r->req.n) admitting.pop_front();
  }
  update_kv_metrics();
}

int64_t Engine::Impl::pending_blocks() const {
  const model::KvCache& kv = model->kv_cache();
  int64_t n = 0;
  for (const auto& s : running)
    if (!s->done) n += kv.blocks_to_grow(s->seq_id, static_cast<int64_t>(s->tokens.size()) + 1);
  return n;
}

bool Engine::Impl::evict_one_cached() {
  if (cache.size() == 0) return false;
  const auto ids = cache.evict(cache.size() - 1, INT64_MAX);
  for (int32_t id : ids) remove_model_seq(id);
  std::lock_guard ml(metrics_mu);
  metrics.prefix_cache_evictions_total += ids.size();
  return !ids.empty();
}

bool Engine::Impl::make_room(int64_t target) {
  while (model->kv_cache().free_blocks() < target && evict_one_cached()) {
  }
  return model->kv_cache().free_blocks() >= target;
}

void Engine::Impl::insert_running(std::unique_ptr<Seq> s) {
  auto at = std::upper_bound(running.begin(), running.end(), s->order,
                             [](uint64_t o, const std::unique_ptr<Seq>& x) { return o < x->order; });
  running.insert(at, std::move(s));
}

void Engine::Impl::preempt(size_t i) {
  std::unique_ptr<Seq> s = std::move(running[i]);
  running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
  remove_model_seq(s->seq_id);
  s->computed = 0;  // its known tokens (prompt + generated) are computed again on resume
  auto at = std::upper_bound(preempted.begin(), preempted.end(), s->order,
                             [](uint64_t o, const std::unique_ptr<Seq>& x) { return o < x->order; });
  preempted.insert(at, std::move(s));
  std::lock_guard ml(metrics_mu);
  ++metrics.preemptions_total;
}

bool Engine::Impl::resume_sequence() {
  Seq& s = *preempted.front();
  model::KvCache& kv = model->kv_cache();
  const int64_t need = kv.blocks_for(static_cast<int64_t>(s.tokens.size()) + 1);
  if (!make_room(need + pending_blocks()) && !(running.empty() && make_room(need))) return false;
  std::unique_ptr<Seq> up = std::move(preempted.front());
  preempted.pop_front();
  up->seq_id = alloc_seq_id();
  Status st = model->add_sequence(up->seq_id);
  if (!st) {
    finish(*up, FinishReason::kError, -1, st.message());
    return true;
  }
  live.insert(up->seq_id);
  insert_running(std::move(up));
  return true;
}

int32_t Engine::Impl::alloc_seq_id() {
  for (;;) {
    const int32_t id = next_seq_id;
    next_seq_id = next_seq_id == INT32_MAX ? 0 : next_seq_id + 1;
    if (!model->kv_cache().has_sequence(id)) return id;
  }
}

void Engine::Impl::remove_model_seq(int32_t id) {
  live.erase(id);
  Status st = model->remove_sequence(id);
  if (!st) BRASS_LOG_WARN("engine: {}", st.message());
}

bool Engine::Impl::start_sequence(const std::shared_ptr<ReqState>& r, int32_t index) {
  model::KvCache& kv = model->kv_cache();
  const std::vector<int32_t>& prompt = r->req.prompt;
  const int64_t n_prompt = static_cast<int64_t>(prompt.size());
  std::optional<PrefixMatch> m;
  if (opt.prefix_cache_seqs > 0) {
    // The KV cache's own rule (rings + window snapshots): truncate() accepts exactly these cuts.
    m = cache.match(prompt, [&](const PrefixEntry& e, int64_t n) { return kv.usable_cut(e.seq_id, n); });
  }
  // The pool must hold the prompt + 1 token on top of what the running sequences still
  // need for theirs (the entry's blocks past the cut come back when it is truncated).
  // With nothing running, the prompt alone: it always fits (n_ctx <= the pool).
  {
    const int64_t held = m ? kv.held_blocks(m->seq_id) : 0, kept = m ? kv.blocks_for(m->reuse) : 0;
    const int64_t own = kv.blocks_for(n_prompt + 1) - kept - (held - kept);
    std::optional<PrefixEntry> taken;
    if (m) taken = cache.take(m->seq_id);  // (not evicted by make_room)
    const bool fits = make_room(own + pending_blocks()) || (running.empty() && preempted.empty() && make_room(own));
    if (!fits) {
      if (taken) cache.put(std::move(*taken));
      if (running.empty() && preempted.empty()) {  // cannot happen (n_ctx <= pool): never wait forever
        ++r->open;  // (finish_completion counts it down)
        finish_completion(*r, index, FinishReason::kError, -1,
                          fmt::format("the prompt of {} tokens needs {} KV blocks of {} positions: the pool has {}",
                                      n_prompt, kv.blocks_for(n_prompt + 1), kv.block_size(), kv.pool_blocks()));
        return true;
      }
      return false;
    }
  }
  SamplerParams sp = r->req.sampling;
  sp.seed += static_cast<uint64_t>(index);
  auto s = std::make_unique<Seq>(sp);
  s->req = r;
  s->index = index;
  s->tokens = prompt;
  s->n_prompt = n_prompt;
  s->order = next_order++;
  ++r->open;

  int64_t reuse = 0;
  bool have_seq = false;
  if (m) {
    {
      Status st = m->reuse < m->length ? model->truncate_sequence(m->seq_id, m->reuse) : Status::ok();
      if (st) {
        s->seq_id = m->seq_id;
        reuse = m->reuse;
        have_seq = true;
      } else {
        BRASS_LOG_WARN("engine: prefix reuse refused: {}", st.message());
        remove_model_seq(m->seq_id);
      }
    }
  }
  if (!have_seq) {
    s->seq_id = alloc_seq_id();
    Status st = model->add_sequence(s->seq_id);
    if (st) live.insert(s->seq_id);
    if (!st) {
      s->done = true;
      finish_completion(*r, index, FinishReason::kError, -1, st.message());
      return true;
    }
  }
  s->computed = reuse;
  if (index == 0) r->usage.cached_prompt_tokens = reuse;
  {
    std::lock_guard ml(metrics_mu);
    if (reuse > 0) {
      ++metrics.prefix_cache_hits_total;
      metrics.prefix_cache_reused_tokens_total += static_cast<uint64_t>(reuse);
    } else {
      ++metrics.prefix_cache_misses_total;
    }
  }
  if (r->req.constraint) s->constraint = r->req.constraint(index);
  running.push_back(std::move(s));
  return true;
}

void Engine::Impl::step() {
  if (ahead) {
    if (submit_ahead()) return;
    drain();
    if (running.empty()) return;
  }
  model::KvCache& kv = model->kv_cache();
  StepPlan sp;
  for (;;) {
    std::vector<SchedSeq> ss;
    ss.reserve(running.size());
    for (auto& s : running) {
      if (s->done) {
        ss.push_back({});
        continue;
      }
      ss.push_back({static_cast<int64_t>(s->tokens.size()), s->computed, kv.held_tokens(s->seq_id) - s->computed});
    }
    sp = plan_step(ss, opt.step_tokens, PoolBudget{kv.free_blocks(), kv.block_size()});
    if (!sp.starved) break;
    // A sequence cannot grow: free blocks. Prefix-cache entries first, then the
    // lowest-priority running sequence (recomputed later), never the last one.
    if (evict_one_cached()) continue;
    size_t victim = running.size(), alive = 0;
    for (size_t i = 0; i < running.size(); ++i)
      if (!running[i]->done) {
        victim = i;
        ++alive;
      }
    if (alive == 0) break;
    if (alive == 1) {  // cannot happen (n_ctx <= pool); never spin
      finish(*running[victim], FinishReason::kError, -1,
             fmt::format("the sequence needs more KV blocks than the pool's {} of {} positions", kv.pool_blocks(),
                         kv.block_size()));
      continue;
    }
    preempt(victim);
  }
  const std::vector<SchedChunk>& plan = sp.chunks;
  if (plan.empty()) return;
  std::vector<model::SeqChunk> batch;
  batch.reserve(plan.size());
  std::vector<backend::SampleParams> draws(plan.size());  // the chunks' device draws (read by forward)
  const auto now = Clock::now();
  int64_t n_tok = 0;
  for (const SchedChunk& c : plan) {
    Seq& s = *running[c.index];
    batch.push_back({.seq_id = s.seq_id,
                     .tokens = std::span<const int32_t>(s.tokens).subspan(s.computed, c.n_tokens),
                     .pos0 = static_cast<int32_t>(s.computed),
                     .greedy = device_greedy(s)});
    if (device_sample(s)) {
      draws[batch.size() - 1] = s.sampler.draw_params();
      batch.back().sample = &draws[batch.size() - 1];
    }
    if (!s.req->scheduled) {
      s.req->scheduled = true;
      s.req->t_first_sched = now;
    }
    n_tok += c.n_tokens;
  }
  if (opt.pipeline && pipelinable(batch)) {
    Status sub = model->submit(batch);
    if (sub) {
      std::vector<uint64_t> orders;
      for (const SchedChunk& c : plan) orders.push_back(running[c.index]->order);
      ahead = std::move(orders);
      count_step(plan.size(), n_tok, false);
      return;
    }
    BRASS_LOG_WARN("engine: submit failed ({}): one forward step instead", sub.message());
  }
  Status st = model->forward(batch, out);
  count_step(plan.size(), n_tok, false);
  if (!st) {
    BRASS_LOG_WARN("engine: forward failed: {}", st.message());
    for (const SchedChunk& c : plan) finish(*running[c.index], FinishReason::kError, -1, st.message());
    return;
  }
  update_kv_metrics();
  for (size_t i = 0; i < plan.size(); ++i) {
    Seq& s = *running[plan[i].index];
    const int64_t prompt_part = std::max<int64_t>(0, std::min(s.n_prompt, s.computed + plan[i].n_tokens) - s.computed);
    s.computed += plan[i].n_tokens;
    if (prompt_part > 0) {
      s.req->usage.prompt_tokens_computed += prompt_part;
      {
        std::lock_guard ml(metrics_mu);
        metrics.prompt_tokens_computed_total += static_cast<uint64_t>(prompt_part);
      }
      // The end of a prompt is where the next turn of a conversation most likely cuts
      // back to (the completion's analysis is dropped): keep the sliding window there.
      if (s.computed == s.n_prompt && opt.prefix_cache_seqs > 0) {
        Status sn = model->kv_cache().snapshot_window(s.seq_id);
        if (!sn) BRASS_LOG_WARN("engine: window snapshot: {}", sn.message());
      }
    }
    if (plan[i].completes && !s.req->cancelled) sample(s, out.token[i] >= 0 ? nullptr : out.row(i), out.token[i]);
  }
}

void Engine::Impl::count_step(size_t n_seqs, int64_t n_tok, bool pipelined) {
  std::lock_guard ml(metrics_mu);
  ++metrics.steps_total;
  if (pipelined) ++metrics.pipelined_steps_total;
  metrics.step_tokens_total += static_cast<uint64_t>(n_tok);
  metrics.seqs_per_step.observe(static_cast<double>(n_seqs));
  metrics.last_step_seqs = static_cast<int64_t>(n_seqs);
  metrics.max_step_seqs = std::max<int64_t>(metrics.max_step_seqs, metrics.last_step_seqs);
}

bool Engine::Impl::pipelinable(const std::vector<model::SeqChunk>& batch) const {
  for (const model::SeqChunk& c : batch)
    if (c.tokens.size() != 1 || c.all_logits || !(c.greedy || c.sample)) return false;
  return !batch.empty();
}

Seq* Engine::Impl::find_running(uint64_t order) {
  for (auto& s : running)
    if (s && s->order == order) return s.get();
  return nullptr;
}

bool Engine::Impl::submit_ahead() {
  const std::vector<uint64_t>& orders = *ahead;
  size_t live_n = 0;
  for (const auto& s : running)
    if (s && !s->done) ++live_n;
  if (live_n != orders.size() || static_cast<int64_t>(orders.size()) > opt.step_tokens) return false;
  model::KvCache& kv = model->kv_cache();
  std::vector<Seq*> seqs;
  int64_t grow = 0;
  for (uint64_t o : orders) {
    Seq* s = find_running(o);
    if (!s || s->done || s->req->cancelled || !(device_greedy(*s) || device_sample(*s))) return false;
    // The round in flight gives token n_generated + 1 at position computed; this one
    // n_generated + 2 at computed + 1: neither may end the sequence by length (a stop
    // token is the only way one ends with this round in flight).
    const int64_t max_tokens = s->req->req.max_tokens;
    if ((max_tokens > 0 && s->n_generated + 2 > max_tokens) || static_cast<int64_t>(s->tokens.size()) + 2 > n_ctx)
      return false;
    grow += kv.blocks_to_grow(s->seq_id, s->computed + 2);
    seqs.push_back(s);
  }
  if (grow > kv.free_blocks()) return false;
  std::vector<model::SeqChunk> batch;
  std::vector<backend::SampleParams> draws(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    Seq& s = *seqs[i];
    batch.push_back({.seq_id = s.seq_id, .pos0 = static_cast<int32_t>(s.computed + 1), .greedy = device_greedy(s),
                     .feed = true});
    if (device_sample(s)) {
      draws[i] = s.sampler.draw_params();
      ++draws[i].counter;  // the round in flight made draw number `counter`
      batch.back().sample = &draws[i];
    }
  }
  if (Status st = model->submit(batch); !st) {
    BRASS_LOG_WARN("engine: pipelined submit failed: {}", st.message());
    return false;
  }
  count_step(seqs.size(), static_cast<int64_t>(seqs.size()), true);
  // The new round in flight has the same sequences in the same order.
  collect_round(*ahead, &*ahead);
  return true;
}

void Engine::Impl::drain() {
  const std::vector<uint64_t> prev = std::move(*ahead);
  ahead.reset();
  collect_round(prev, nullptr);
}

void Engine::Impl::collect_round(const std::vector<uint64_t>& orders, const std::vector<uint64_t>* next) {
  std::vector<int32_t> picks;
  if (Status st = model->collect(picks); !st) {
    BRASS_LOG_WARN("engine: collect failed: {}", st.message());
    for (uint64_t o : orders)
      if (Seq* s = find_running(o)) finish(*s, FinishReason::kError, -1, st.message());
    return;
  }
  take_picks(orders, picks, next);
  update_kv_metrics();
}

void Engine::Impl::take_picks(const std::vector<uint64_t>& orders, const std::vector<int32_t>& picks,
                              const std::vector<uint64_t>* next) {
  for (size_t i = 0; i < orders.size() && i < picks.size(); ++i) {
    Seq* s = find_running(orders[i]);
    if (!s || s->done) continue;  // finished or cancelled since: the pick is dropped
    ++s->computed;
    if (!s->req->cancelled) sample(*s, nullptr, picks[i]);
    // Stopped here with the next round in flight: that round computes its stop token's
    // position, so the model sequence is one longer (and holds exactly tokens[0, computed)).
    if (s->done && next && std::find(next->begin(), next->end(), orders[i]) != next->end()) ++s->computed;
  }
}

// A greedy pick needs nothing from the logits row but its argmax: the model computes it
// on the backend (same rule as sampling::argmax: ties to the lower index).
bool Engine::Impl::device_greedy(const Seq& s) const {
  const SamplerParams& p = s.req->req.sampling;
  const bool penalties = p.penalty_last_n != 0 && (p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f ||
                                                   p.frequency_penalty != 0.0f);
  return p.temperature <= 0.0f && !penalties && p.n_logprobs == 0 && !s.req->req.token_logprob && !s.constraint;
}

// A plain draw (temperature, top-k / top-p / min-p) needs no logits on the host either:
// the backend's sample op draws it with the sequence's seed and draw counter (the same
// draw the host Sampler would make; the counter advances either way).
bool Engine::Impl::device_sample(const Seq& s) const {
  const SamplerParams& p = s.req->req.sampling;
  const bool penalties = p.penalty_last_n != 0 && (p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f ||
                                                   p.frequency_penalty != 0.0f);
  return p.temperature > 0.0f && !penalties && p.n_logprobs == 0 && !s.req->req.token_logprob && !s.constraint;
}

void Engine::Impl::sample(Seq& s, const float* row, int32_t picked) {
  SampleResult r;
  if (row == nullptr) {
    r.token = picked;
    if (s.req->req.sampling.temperature > 0.0f) s.sampler.skip_draw();  // drawn on the backend
  } else {
    std::span<const float> logits(row, static_cast<size_t>(n_vocab));
    if (s.constraint) {
      masked.assign(row, row + n_vocab);
      Status st = s.constraint->apply(std::span<const int32_t>(s.tokens).subspan(s.n_prompt), masked);
      if (!st) {
        finish(s, FinishReason::kError, -1, st.message());
        return;
      }
      logits = masked;
    }
    r = s.sampler.sample(logits, s.tokens);
  }
  const auto now = Clock::now();
  ReqState& q = *s.req;
  s.tokens.push_back(r.token);
  ++s.n_generated;
  ++q.usage.completion_tokens;
  {
    std::lock_guard ml(metrics_mu);
    ++metrics.generation_tokens_total;
    if (!q.any_token) metrics.ttft_seconds.observe(std::chrono::duration<double>(now - q.t_submit).count());
    if (s.n_generated > 1) metrics.inter_token_seconds.observe(std::chrono::duration<double>(now - s.t_last).count());
  }
  if (!q.any_token) {
    q.any_token = true;
    q.t_first_token = now;
  }
  if (s.n_generated == 1) ++q.with_tokens;
  q.t_last_token = now;
  s.t_last = now;

  const auto& stops = q.req.stop_tokens;
  if (std::find(stops.begin(), stops.end(), r.token) != stops.end()) {
    finish(s, FinishReason::kStop, r.token, {});
    return;
  }
  Event ev;
  ev.kind = Event::Kind::kToken;
  ev.index = s.index;
  ev.token = r.token;
  ev.logprob = r.logprob;
  ev.top = std::move(r.top);
  q.emit(std::move(ev));
  if ((q.req.max_tokens > 0 && s.n_generated >= q.req.max_tokens) ||
      static_cast<int64_t>(s.tokens.size()) >= n_ctx)
    finish(s, FinishReason::kLength, -1, {});
}

void Engine::Impl::finish(Seq& s, FinishReason why, int32_t token, const std::string& err) {
  if (s.done) return;
  s.done = true;
  s.keep = (why == FinishReason::kStop || why == FinishReason::kLength) && opt.prefix_cache_seqs > 0;
  finish_completion(*s.req, s.index, why, token, err);
}

void Engine::Impl::finish_completion(ReqState& r, int32_t index, FinishReason why, int32_t token,
                                     const std::string& err) {
  Event ev;
  ev.kind = Event::Kind::kFinish;
  ev.index = index;
  ev.finish = why;
  ev.token = why == FinishReason::kStop ? token : -1;
  ev.error = err;
  r.emit(std::move(ev));
  {
    std::lock_guard ml(metrics_mu);
    switch (why) {
      case FinishReason::kStop: ++metrics.finish_stop_total; break;
      case FinishReason::kLength: ++metrics.finish_length_total; break;
      case FinishReason::kCancelled: ++metrics.finish_cancelled_total; break;
      case FinishReason::kError: ++metrics.finish_error_total; break;
    }
  }
  --r.open;
  maybe_done(r);
}

void Engine::Impl::maybe_done(ReqState& r) {
  if (r.open > 0 || r.admitted < r.req.n || r.finished) return;
  const auto now = Clock::now();
  Event ev;
  ev.kind = Event::Kind::kDone;
  ev.usage = r.usage;
  Timings& t = ev.timings;
  t.queue_ms = ms_between(r.t_submit, r.scheduled ? r.t_first_sched : now);
  if (r.any_token) {
    t.ttft_ms = ms_between(r.t_submit, r.t_first_token);
    t.prompt_ms = ms_between(r.t_first_sched, r.t_first_token);
    t.decode_ms = ms_between(r.t_first_token, r.t_last_token);
    const int64_t decoded = r.usage.completion_tokens - r.with_tokens;
    t.decode_tok_per_s = t.decode_ms > 0 ? decoded / (t.decode_ms / 1e3) : 0.0;
  }
  r.finished = true;
  r.emit(std::move(ev));
  std::lock_guard ml(metrics_mu);
  ++metrics.requests_finished_total;
}

void Engine::Impl::retire_done_sequences() {
  bool any = false;
  for (auto& s : running) {
    if (!s->done) continue;
    any = true;
    if (s->keep && s->computed > 0) {
      auto bytes = model->kv_cache().bytes(s->seq_id);
      PrefixEntry e;
      e.seq_id = s->seq_id;
      e.tokens.assign(s->tokens.begin(), s->tokens.begin() + s->computed);
      e.bytes = bytes.is_ok() ? bytes.value() : 0;
      cache.put(std::move(e));
    } else {
      remove_model_seq(s->seq_id);
    }
    s.reset();
  }
  if (!any) return;
  running.erase(std::remove(running.begin(), running.end(), nullptr), running.end());
  const auto evicted = cache.evict(opt.prefix_cache_seqs, opt.prefix_cache_bytes);
  for (int32_t id : evicted) remove_model_seq(id);
  {
    std::lock_guard ml(metrics_mu);
    metrics.prefix_cache_evictions_total += evicted.size();
  }
  update_kv_metrics();
}

void Engine::Impl::update_kv_metrics() {
  int64_t bytes = 0, tokens = 0;
  auto add = [&](int32_t id) {
    auto b = model->kv_cache().bytes(id);
    auto l = model->kv_cache().length(id);
    if (b.is_ok()) bytes += b.value();
    if (l.is_ok()) tokens += l.value();
  };
  for (int32_t id : live) add(id);
  const model::KvCache& kv = model->kv_cache();
  std::lock_guard ml(metrics_mu);
  metrics.kv_pool_tokens = kv.pool_tokens();
  metrics.kv_pool_free_tokens = kv.free_tokens();
  metrics.kv_block_size = kv.block_size();
  metrics.kv_sequences = static_cast<int64_t>(live.size());
  metrics.kv_bytes = bytes;
  metrics.kv_tokens = tokens;
  metrics.kv_cached_seqs = cache.size();
  metrics.kv_cached_bytes = cache.bytes();
}

void Engine::Impl::update_running_metrics() {
  std::set<const ReqState*> reqs;
  for (auto& s : running) reqs.insert(s->req.get());
  for (auto& r : admitting) reqs.insert(r.get());
  for (auto& s : preempted) reqs.insert(s->req.get());
  std::lock_guard ml(metrics_mu);
  metrics.sequences_running = static_cast<int64_t>(running.size());
  metrics.sequences_preempted = static_cast<int64_t>(preempted.size());
  metrics.requests_running = static_cast<int64_t>(reqs.size());
}

// ---- Engine ----

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

Result<std::unique_ptr<Engine>> Engine::create(std::unique_ptr<model::Model> model, const EngineOptions& o) {
  if (!model) return Status::error("engine: no model");
  if (o.parallel < 1) return Status::errorf("engine: parallel is {}: expected >= 1", o.parallel);
  if (o.step_tokens < 1) return Status::errorf("engine: step_tokens is {}: expected >= 1", o.step_tokens);
  if (o.n_ctx < 0) return Status::errorf("engine: n_ctx is {}: expected >= 0", o.n_ctx);
  if (o.max_queue < 0) return Status::errorf("engine: max_queue is {}: expected >= 0", o.max_queue);
  return std::unique_ptr<Engine>(new Engine(std::make_unique<Impl>(std::move(model), o)));
}

Submitted Engine::submit(Request r) { return impl_->submit(std::move(r)); }
MetricsSnapshot Engine::metrics() const { return impl_->snapshot(); }
const model::GptOssConfig& Engine::config() const { return impl_->model->config(); }
int64_t Engine::n_ctx() const { return impl_->n_ctx; }
int64_t Engine::n_vocab() const { return impl_->n_vocab; }
const EngineOptions& Engine::options() const { return impl_->opt; }
bool Engine::wait_idle(std::chrono::milliseconds timeout) { return impl_->wait_idle(timeout); }
void Engine::clear_prefix_cache() {
  impl_->command([this] { impl_->clear_cache(); });
}

}  // namespace brass::runtime
