// Engine tests on tiny random gpt-oss models (tests/model/tiny_model.h: 4 layers,
// n_swa 8, 96-token vocabulary, fresh weights per run; the seed is printed on failure).
// The reference is the Model driven directly, one sequence at a time and one token per
// forward call, with its own argmax / Sampler loop: so batching, chunked prefill, prefix
// reuse, cancellation and admission are all checked against a path that has none of
// them. Greedy comparisons tolerate a differing token only where the reference's top
// two logits are within 1e-4 (a batch-shape rounding difference may flip a near tie);
// a failure there prints the margin.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <thread>

#include "engine_test_util.h"
#include "../model/tiny_model.h"
#include "model/model.h"
#include "runtime/engine.h"

namespace brass::runtime {
namespace {

TEST(Engine, ConcurrentRequestsMatchSeparateRuns) {
  Fixture f;
  FIX_TRACE(f);
  EngineOptions eo;
  eo.parallel = 4;
  eo.step_tokens = 64;
  eo.prefix_cache_seqs = 0;
  auto e = f.engine(eo);
  ASSERT_TRUE(e);
  auto ref_model = f.load(Fixture::mopts());
  ASSERT_TRUE(ref_model);
  const int kReq = 7, kGen = 12;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < kReq; ++i) prompts.push_back(f.tokens(std::uniform_int_distribution<int>(3, 40)(f.gen)));
  // Submitted from several threads at once.
  std::vector<Outcome> got(kReq);
  std::vector<std::thread> th;
  Gate gate;
  std::atomic<int> submitted{0};
  for (int i = 0; i < kReq; ++i)
    th.emplace_back([&, i] {
      Request r = greedy_request(prompts[i], kGen);
      if (i == 0) r.constraint = gate.factory();
      // Odd requests skip the token logprob: their picks come from the model's argmax
      // (greedy chunks), in the same steps as the host-sampled even ones.
      if (i % 2 == 1) r.token_logprob = false;
      auto s = e->submit(r);
      if (++submitted == kReq) *gate.open = true;
      ASSERT_TRUE(s.ok()) << s.message;
      got[i] = collect(*s.handle, 1);
    });
  for (auto& t : th) t.join();
  for (int i = 0; i < kReq; ++i) {
    const RefRun ref = reference(*ref_model, prompts[i], kGen);
    expect_same_greedy(got[i].tokens[0], ref, "request " + std::to_string(i));
    EXPECT_EQ(got[i].finish[0], FinishReason::kLength);
    EXPECT_EQ(got[i].usage.prompt_tokens, static_cast<int64_t>(prompts[i].size()));
    EXPECT_EQ(got[i].usage.prompt_tokens_computed, static_cast<int64_t>(prompts[i].size()));
    EXPECT_EQ(got[i].usage.completion_tokens, kGen);
    EXPECT_GE(got[i].timings.ttft_ms, got[i].timings.queue_ms);
    EXPECT_GT(got[i].timings.decode_tok_per_s, 0.0);
  }
  ASSERT_TRUE(e->wait_idle());
  const MetricsSnapshot m = e->metrics();
  EXPECT_GT(m.max_step_seqs, 1) << "continuous batching: several sequences per step";
  EXPECT_LE(m.max_step_seqs, eo.parallel);
  EXPECT_EQ(m.requests_total, static_cast<uint64_t>(kReq));
  EXPECT_EQ(m.requests_finished_total, static_cast<uint64_t>(kReq));
  EXPECT_EQ(m.generation_tokens_total, static_cast<uint64_t>(kReq * kGen));
  EXPECT_EQ(m.ttft_seconds.count, static_cast<uint64_t>(kReq));
  EXPECT_EQ(m.inter_token_seconds.count, static_cast<uint64_t>(kReq * (kGen - 1)));
  EXPECT_EQ(m.kv_bytes, 0);
  const std::string text = render_prometheus(m);
  EXPECT_NE(text.find("brass_sequences_per_step_bucket"), std::string::npos);
}

TEST(Engine, ChunkedPrefillWithSmallBudgetEqualsOneShot) {
  Fixture f;
  FIX_TRACE(f);
  EngineOptions eo;
  eo.parallel = 2;
  eo.step_tokens = 5;  // prompts of 37 and 23 tokens spread over many steps, mixed with decode
  eo.prefix_cache_seqs = 0;
  auto e = f.engine(eo, Fixture::mopts(/*max_chunk=*/4));  // ring 8 + 3: sliding layers wrap
  ASSERT_TRUE(e);
  const auto p1 = f.tokens(37), p2 = f.tokens(23);
  Gate gate;
  Request r1 = greedy_request(p1, 10);
  r1.constraint = gate.factory();
  auto s1 = e->submit(r1);
  auto s2 = e->submit(greedy_request(p2, 10));
  *gate.open = true;
  ASSERT_TRUE(s1.ok() && s2.ok());
  const Outcome o1 = collect(*s1.handle, 1), o2 = collect(*s2.handle, 1);
  auto ref_model = f.load(Fixture::mopts());  // one-shot: max_chunk 512
  // One-shot prefill reference: the whole prompt in one forward call, then argmax decode.
  auto one_shot = [&](const std::vector<int32_t>& p, int n) {
    RefRun r;
    EXPECT_TRUE(ref_model->add_sequence(5).is_ok());
    model::ForwardOutput out;
    std::vector<int32_t> hist = p;
    model::SeqChunk c{5, hist, 0, false};
    EXPECT_TRUE(ref_model->forward(std::span<const model::SeqChunk>(&c, 1), out).is_ok());
    for (int i = 0; i < n; ++i) {
      std::vector<float> row(out.row(0), out.row(0) + out.n_vocab), s = row;
      std::partial_sort(s.begin(), s.begin() + 2, s.end(), std::greater<float>());
      r.margins.push_back(s[0] - s[1]);
      r.tokens.push_back(static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin()));
      hist.push_back(r.tokens.back());
      model::SeqChunk d{5, std::span<const int32_t>(&hist.back(), 1), static_cast<int32_t>(hist.size() - 1), false};
      EXPECT_TRUE(ref_model->forward(std::span<const model::SeqChunk>(&d, 1), out).is_ok());
    }
    EXPECT_TRUE(ref_model->remove_sequence(5).is_ok());
    return r;
  };
  expect_same_greedy(o1.tokens[0], one_shot(p1, 10), "37-token prompt");
  expect_same_greedy(o2.tokens[0], one_shot(p2, 10), "23-token prompt");
  ASSERT_TRUE(e->wait_idle());
  const MetricsSnapshot m = e->metrics();
  // (37 + 23 + 2 * 9 decode tokens) / 5 per step at least.
  EXPECT_GE(m.steps_total, (37u + 23u + 18u + 4u) / 5u);
  EXPECT_EQ(m.step_tokens_total, 37u + 23u + 18u);
  EXPECT_GT(m.max_step_seqs, 1);
}

TEST(Engine, CancellationFreesTheSequence) {
  Fixture f;
  FIX_TRACE(f);
  EngineOptions eo;
  eo.parallel = 1;
  eo.prefix_cache_seqs = 0;
  auto e = f.engine(eo);
  ASSERT_TRUE(e);
  ASSERT_EQ(e->metrics().kv_bytes, 0);
  auto a = e->submit(greedy_request(f.tokens(20), -1));  // runs until cancelled (or ctx 256)
  auto b = e->submit(greedy_request(f.tokens(10), -1));  // waits: parallel 1
  ASSERT_TRUE(a.ok() && b.ok());
  Event ev;
  ASSERT_TRUE(a.handle->next(ev, 60s));
  ASSERT_EQ(ev.kind, Event::Kind::kToken);
  EXPECT_GT(e->metrics().kv_bytes, 0);
  b.handle->cancel();  // cancelled while waiting: no tokens
  const Outcome ob = collect(*b.handle, 1);
  EXPECT_EQ(ob.finish[0], FinishReason::kCancelled);
  EXPECT_TRUE(ob.tokens[0].empty());
  a.handle->cancel();
  const Outcome oa = collect(*a.handle, 1);
  EXPECT_EQ(oa.finish[0], FinishReason::kCancelled);
  EXPECT_LT(oa.usage.completion_tokens, 230);
  ASSERT_TRUE(e->wait_idle(10s));
  const MetricsSnapshot m = e->metrics();
  EXPECT_EQ(m.kv_bytes, 0);
  EXPECT_EQ(m.kv_tokens, 0);
  EXPECT_EQ(m.kv_sequences, 0);
  EXPECT_EQ(m.sequences_running, 0);
  EXPECT_EQ(m.finish_cancelled_total, 2u);
  // The engine still serves afterwards.
  auto c = e->submit(greedy_request(f.tokens(5), 3));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(collect(*c.handle, 1).tokens[0].size(), 3u);
}

TEST(Engine, FullQueueIsRejected) {
  Fixture f;
  FIX_TRACE(f);
  {
    EngineOptions eo;
    eo.max_queue = 0;
    auto e = f.engine(eo);
    ASSERT_TRUE(e);
    auto s = e->submit(greedy_request(f.tokens(4), 2));
    EXPECT_EQ(s.code, SubmitCode::kQueueFull);
    EXPECT_FALSE(s.handle);
    EXPECT_EQ(e->metrics().requests_rejected_total, 1u);
  }
  EngineOptions eo;
  eo.parallel = 1;
  eo.max_queue = 2;
  auto e = f.engine(eo);
  ASSERT_TRUE(e);
  auto run = e->submit(greedy_request(f.tokens(6), -1));
  ASSERT_TRUE(run.ok());
  Event ev;
  ASSERT_TRUE(run.handle->next(ev, 60s));  // now running, not waiting
  auto w1 = e->submit(greedy_request(f.tokens(6), 2));
  auto w2 = e->submit(greedy_request(f.tokens(6), 2));
  auto w3 = e->submit(greedy_request(f.tokens(6), 2));
  EXPECT_TRUE(w1.ok());
  EXPECT_TRUE(w2.ok());
  EXPECT_EQ(w3.code, SubmitCode::kQueueFull) << w3.message;
  EXPECT_EQ(e->metrics().requests_waiting, 2);
  // Invalid requests are told apart from a full queue.
  EXPECT_EQ(e->submit(greedy_request({}, 2)).code, SubmitCode::kInvalid);
  EXPECT_EQ(e->submit(greedy_request({1, kVocab}, 2)).code, SubmitCode::kInvalid);
  EXPECT_EQ(e->submit(greedy_request(f.tokens(256), 2)).code, SubmitCode::kInvalid);
  run.handle->cancel();
  EXPECT_EQ(collect(*w1.handle, 1).tokens[0].size(), 2u);
  EXPECT_EQ(collect(*w2.handle, 1).tokens[0].size(), 2u);
}

TEST(Engine, StopTokensMaxTokensAndContext) {
  Fixture f;
  FIX_TRACE(f);
  EngineOptions eo;
  eo.prefix_cache_seqs = 0;
  eo.n_ctx = 30;
  auto e = f.engine(eo);
  ASSERT_TRUE(e);
  auto ref_model = f.load(Fixture::mopts());
  const auto prompt = f.tokens(12);
  const RefRun ref = reference(*ref_model, prompt, 18);
  // A stop token: the first reference token at index >= 2 not seen before it.
  size_t k = 2;
  while (k < ref.tokens.size() &&
         std::find(ref.tokens.begin(), ref.tokens.begin() + k, ref.tokens[k]) != ref.tokens.begin() + k)
    ++k;
  if (k < ref.tokens.size()) {
    Request r = greedy_request(prompt, 18);
    r.stop_tokens = {ref.tokens[k]};
    auto s = e->submit(r);
    ASSERT_TRUE(s.ok());
    const Outcome o = collect(*s.handle, 1);
    RefRun cut{{ref.tokens.begin(), ref.tokens.begin() + k}, ref.margins};
    expect_same_greedy(o.tokens[0], cut, "stop");
    if (o.tokens[0] == cut.tokens) {
      EXPECT_EQ(o.finish[0], FinishReason::kStop);
      EXPECT_EQ(o.stop_token[0], ref.tokens[k]);
      EXPECT_EQ(o.usage.completion_tokens, static_cast<int64_t>(k + 1));  // stop token counted
    }
  }
  auto s = e->submit(greedy_request(prompt, 5));
  ASSERT_TRUE(s.ok());
  Outcome o = collect(*s.handle, 1);
  EXPECT_EQ(o.finish[0], FinishReason::kLength);
  EXPECT_EQ(o.tokens[0].size(), 5u);
  // The context (30) ends it: prompt 12 + 18 generated.
  s = e->submit(greedy_request(prompt, 100));
  ASSERT_TRUE(s.ok());
  o = collect(*s.handle, 1);
  EXPECT_EQ(o.finish[0], FinishReason::kLength);
  expect_same_greedy(o.tokens[0], ref, "to the context limit");
}

TEST(Engine, SeedsReproduceAndMatchADirectSampler) {
  Fixture f;
  FIX_TRACE(f);
  EngineOptions eo;
  eo.parallel = 3;
  auto e = f.engine(eo);
  ASSERT_TRUE(e);
  auto ref_model = f.load(Fixture::mopts());
  const auto prompt = f.tokens(15);
  Request r;
  r.prompt = prompt;
  r.sampling.temperature = 1.3f;
  r.sampling.top_k = 40;
  r.sampling.seed = std::uniform_int_distribution<uint64_t>()(f.gen);
  r.sampling.n_logprobs = 3;
  r.max_tokens = 16;
  r.n = 3;
  auto s1 = e->submit(r);
  ASSERT_TRUE(s1.ok());
  const Outcome a = collect(*s1.handle, 3);
  auto s2 = e->submit(r);
  ASSERT_TRUE(s2.ok());
  const Outcome b = collect(*s2.handle, 3);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.usage.completion_tokens, 48);
  EXPECT_NE(a.tokens[0], a.tokens[1]) << "completions 0 and 1 use seeds s and s + 1";
  for (int i = 0; i < 3; ++i) {
    SamplerParams sp = r.sampling;
    sp.seed += static_cast<uint64_t>(i);
    const RefRun ref = reference(*ref_model, prompt, 16, &sp);
    EXPECT_EQ(a.tokens[i], ref.tokens) << "completion " << i;
  }
  for (float lp : a.logprobs[0]) EXPECT_LE(lp, 0.0f);
}

// Without logprobs, penalties or a constraint the draw happens on the backend (the model's
// sample op, only the token comes back): the tokens still equal a direct host Sampler's
// with the same seeds, draw for draw (top-k, top-p and min-p all on).
TEST(Engine, DeviceDrawsMatchADirectSampler) {
  Fixture f;
  FIX_TRACE(f);
  EngineOptions eo;
  eo.parallel = 2;
  auto e = f.engine(eo);
  ASSERT_TRUE(e);
  auto ref_model = f.load(Fixture::mopts());
  const auto prompt = f.tokens(11);
  Request r;
  r.prompt = prompt;
  r.sampling.temperature = 0.9f;
  r.sampling.top_k = 30;
  r.sampling.top_p = 0.9f;
  r.sampling.min_p = 0.02f;
  r.sampling.seed = std::uniform_int_distribution<uint64_t>()(f.gen);
  r.max_tokens = 14;
  r.n = 2;
  auto s = e->submit(r);
  ASSERT_TRUE(s.ok());
  const Outcome a = collect(*s.handle, 2);
  for (int i = 0; i < 2; ++i) {
    SamplerParams sp = r.sampling;
    sp.seed += static_cast<uint64_t>(i);
    const RefRun ref = reference(*ref_model, prompt, 14, &sp);
    EXPECT_EQ(a.tokens[i], ref.tokens) << "completion " << i;
  }
}

class EvenOnly : public LogitConstraint {
 public:
  Status apply(std::span<const int32_t> generated, std::span<float> logits) override {
    EXPECT_EQ(generated.size(), calls++);
    for (size_t t = 1; t < logits.size(); t += 2) logits[t] = -INFINITY;
    return Status::ok();
  }
  size_t calls = 0;
};

TEST(Engine, LogitConstraintMasksEveryStep) {
  Fixture f;
  FIX_TRACE(f);
  auto e = f.engine(EngineOptions{});
  ASSERT_TRUE(e);
  auto ref_model = f.load(Fixture::mopts());
  const auto prompt = f.tokens(9);
  Request r = greedy_request(prompt, 10);
  r.constraint = [](int32_t) { return std::make_unique<EvenOnly>(); };
  auto s = e->submit(r);
  ASSERT_TRUE(s.ok());
  const Outcome o = collect(*s.handle, 1);
  for (int32_t t : o.tokens[0]) EXPECT_EQ(t % 2, 0);
  const RefRun ref = reference(*ref_model, prompt, 10, nullptr, {}, [](std::vector<float>& row) {
    for (size_t t = 1; t < row.size(); t += 2) row[t] = -INFINITY;
  });
  expect_same_greedy(o.tokens[0], ref, "masked");
}

// Agent loop: request 2 = request 1's prompt + completion + a new turn. Only the new
// turn is computed; the tokens equal a run without any cache. The prefix (40+ tokens)
// is longer than the sliding window (8) and the ring (8 + 8 - 1 = 15) wraps.
TEST(Engine, PrefixReuseComputesOnlyTheNewTokens) {
  Fixture f;
  FIX_TRACE(f);
  EngineOptions eo;
  eo.parallel = 2;
  auto e = f.engine(eo, Fixture::mopts(/*max_chunk=*/8));
  ASSERT_TRUE(e);
  auto ref_model = f.load(Fixture::mopts());
  const auto p1 = f.tokens(30);
  auto s = e->submit(greedy_request(p1, 10));
  ASSERT_TRUE(s.ok());
  const Outcome o1 = collect(*s.handle, 1);
  ASSERT_EQ(o1.tokens[0].size(), 10u);
  EXPECT_EQ(o1.usage.cached_prompt_tokens, 0);
  ASSERT_TRUE(e->wait_idle());
  EXPECT_EQ(e->metrics().kv_cached_seqs, 1);
  EXPECT_GT(e->metrics().kv_bytes, 0);

  // Turn 2: prompt + completion + 6 new tokens.
  std::vector<int32_t> p2 = p1;
  p2.insert(p2.end(), o1.tokens[0].begin(), o1.tokens[0].end());
  const auto extra = f.tokens(6);
  p2.insert(p2.end(), extra.begin(), extra.end());
  s = e->submit(greedy_request(p2, 8));
  ASSERT_TRUE(s.ok());
  const Outcome o2 = collect(*s.handle, 1);
  // Cached: the 30 prompt tokens + the first 9 generated (the 10th was never fed).
  EXPECT_EQ(o2.usage.cached_prompt_tokens, 39);
  EXPECT_EQ(o2.usage.prompt_tokens_computed, static_cast<int64_t>(p2.size()) - 39);
  expect_same_greedy(o2.tokens[0], reference(*ref_model, p2, 8), "turn 2");

  // Turn 3 diverges 5 tokens before the end of turn 2's cached sequence: within the
  // ring's slack (max_chunk 8), so the sequence is truncated and reused.
  ASSERT_TRUE(e->wait_idle());
  std::vector<int32_t> p3(p2.begin(), p2.end());
  p3.insert(p3.end(), o2.tokens[0].begin(), o2.tokens[0].end());
  p3.resize(p3.size() - 1 - 5);  // drop the last generated (not cached) and 5 more
  const auto extra3 = f.tokens(4);
  p3.insert(p3.end(), extra3.begin(), extra3.end());
  const int64_t cut = static_cast<int64_t>(p3.size()) - 4;
  // Make sure the first new token really differs from what is cached there.
  std::vector<int32_t> cached(p2.begin(), p2.end());
  cached.insert(cached.end(), o2.tokens[0].begin(), o2.tokens[0].end());
  if (p3[cut] == cached[cut]) p3[cut] = (p3[cut] + 1) % kVocab;
  s = e->submit(greedy_request(p3, 6));
  ASSERT_TRUE(s.ok());
  const Outcome o3 = collect(*s.handle, 1);
  EXPECT_EQ(o3.usage.cached_prompt_tokens, cut);
  expect_same_greedy(o3.tokens[0], reference(*ref_model, p3, 6), "turn 3 (truncated)");

  // A prompt that leaves the cached sequence 14 tokens before its end: the sliding
  // rings no longer hold that window, and no window snapshot was taken there (they sit
  // at the ends of the three prompts: 30, 46, 52): the sequence is reused up to the
  // latest snapshot before the cut, the end of turn 1's prompt.
  ASSERT_TRUE(e->wait_idle());
  std::vector<int32_t> p4(p3.begin(), p3.begin() + static_cast<int64_t>(p3.size()) - 14);
  ASSERT_GT(static_cast<int64_t>(p4.size()), static_cast<int64_t>(p1.size()));
  ASSERT_LT(static_cast<int64_t>(p4.size()), static_cast<int64_t>(p2.size()));
  p4.push_back((p3[p4.size()] + 1) % kVocab);
  s = e->submit(greedy_request(p4, 6));
  ASSERT_TRUE(s.ok());
  const Outcome o4 = collect(*s.handle, 1);
  EXPECT_EQ(o4.usage.cached_prompt_tokens, static_cast<int64_t>(p1.size()));
  expect_same_greedy(o4.tokens[0], reference(*ref_model, p4, 6), "past the ring: back to a snapshot");

  ASSERT_TRUE(e->wait_idle());
  const MetricsSnapshot m = e->metrics();
  EXPECT_EQ(m.prefix_cache_hits_total, 3u);
  EXPECT_EQ(m.prefix_cache_reused_tokens_total, static_cast<uint64_t>(39 + cut + 30));
  EXPECT_GE(m.kv_cached_seqs, 1);
  e->clear_prefix_cache();
  EXPECT_EQ(e->metrics().kv_bytes, 0);
  EXPECT_EQ(e->metrics().kv_cached_seqs, 0);
}

// The agent loop of a Harmony conversation: each turn's prompt is the previous prompt
// + a short final answer (the long analysis the model wrote is dropped) + a new user
// message. The common prefix with the cached sequence ends at the previous prompt's
// end, 40 generated tokens before the entry's end, far past what the sliding rings hold
// (n_swa 8 + max_chunk 4 - 1 = 11 slots): only the window snapshot the engine took at
// the end of that prompt makes the reuse possible. Compared with an engine without a
// prefix cache that computes every prompt whole: the same greedy tokens (near-tie rule
// above) and the same logprobs within 1e-5 (different chunk boundaries: rows meet the
// kernels in other batch shapes).
TEST(Engine, AgentLoopDroppingTheCompletionReusesThePreviousPrompt) {
  Fixture f;
  FIX_TRACE(f);
  EngineOptions eo;
  eo.parallel = 1;
  auto e = f.engine(eo, Fixture::mopts(/*max_chunk=*/4));
  EngineOptions fresh_o = eo;
  fresh_o.prefix_cache_seqs = 0;
  auto fresh = f.engine(fresh_o, Fixture::mopts(/*max_chunk=*/4));
  ASSERT_TRUE(e && fresh);
  auto request = [](const std::vector<int32_t>& p) {
    Request r = greedy_request(p, 40);
    r.sampling.n_logprobs = 2;
    return r;
  };
  std::vector<int32_t> prompt = f.tokens(25);
  double max_diff = 0;
  for (int turn = 0; turn < 4; ++turn) {
    SCOPED_TRACE(::testing::Message() << "turn " << turn << ", prompt " << prompt.size() << " tokens");
    auto s = e->submit(request(prompt));
    ASSERT_TRUE(s.ok());
    const Outcome o = collect(*s.handle, 1);
    auto sf = fresh->submit(request(prompt));
    ASSERT_TRUE(sf.ok());
    const Outcome of = collect(*sf.handle, 1);
    ASSERT_EQ(o.tokens[0].size(), 40u);
    ASSERT_EQ(of.tokens[0].size(), 40u);
    EXPECT_EQ(of.usage.prompt_tokens_computed, static_cast<int64_t>(prompt.size()));
    if (turn > 0) {
      EXPECT_EQ(o.usage.cached_prompt_tokens, static_cast<int64_t>(prompt.size()) - 9);
      EXPECT_EQ(o.usage.prompt_tokens_computed, 9) << "only the final answer and the new user turn";
    } else {
      EXPECT_EQ(o.usage.prompt_tokens_computed, static_cast<int64_t>(prompt.size()));
    }
    // The fresh engine is the reference: its top-2 logprobs give the margins.
    RefRun ref;
    ref.tokens = of.tokens[0];
    for (const auto& t : of.top[0]) {
      ASSERT_EQ(t.size(), 2u);
      ref.margins.push_back(t[0].logprob - t[1].logprob);
    }
    expect_same_greedy(o.tokens[0], ref, "turn " + std::to_string(turn));
    for (size_t i = 0; i < o.tokens[0].size() && o.tokens[0][i] == of.tokens[0][i]; ++i) {
      const double d = std::fabs(o.logprobs[0][i] - of.logprobs[0][i]);
      max_diff = std::max(max_diff, d);
      EXPECT_LE(d, 1e-5) << "token " << i;
    }
    ASSERT_TRUE(e->wait_idle());
    // Next turn: this prompt + a 4-token "final answer" + a 5-token user turn. On turn 1
    // the final starts with the completion's first token, so the common prefix is one
    // token longer than the prompt: the cut still falls back to the snapshot at its end.
    std::vector<int32_t> final_answer = f.tokens(4), user = f.tokens(5);
    if (turn == 1) final_answer[0] = o.tokens[0][0];
    else if (final_answer[0] == o.tokens[0][0]) final_answer[0] = (final_answer[0] + 1) % kVocab;
    prompt.insert(prompt.end(), final_answer.begin(), final_answer.end());
    prompt.insert(prompt.end(), user.begin(), user.end());
  }
  std::printf("agent loop: max |logprob difference| vs a fresh engine %g\n", max_diff);
  const MetricsSnapshot m = e->metrics();
  EXPECT_EQ(m.prefix_cache_hits_total, 3u);
  EXPECT_EQ(m.prefix_cache_misses_total, 1u);
}

TEST(Engine, PrefixCacheBudgetEvictsLeastRecent) {
  Fixture f;
  FIX_TRACE(f);
  EngineOptions eo;
  eo.prefix_cache_seqs = 2;
  auto e = f.engine(eo);
  ASSERT_TRUE(e);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 3; ++i) {
    prompts.push_back(f.tokens(12));
    prompts.back()[0] = i;  // distinct first tokens: no reuse between them
    auto s = e->submit(greedy_request(prompts.back(), 3));
    ASSERT_TRUE(s.ok());
    collect(*s.handle, 1);
    ASSERT_TRUE(e->wait_idle());
  }
  MetricsSnapshot m = e->metrics();
  EXPECT_EQ(m.kv_cached_seqs, 2);
  EXPECT_EQ(m.prefix_cache_evictions_total, 1u);
  // prompts[0] was evicted; prompts[2] is cached.
  auto s = e->submit(greedy_request(prompts[0], 2));
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(collect(*s.handle, 1).usage.cached_prompt_tokens, 0);
  s = e->submit(greedy_request(prompts[2], 2));
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(collect(*s.handle, 1).usage.cached_prompt_tokens, 11);
}

}  // namespace
}  // namespace brass::runtime
