// Pipelined decode in the engine (EngineOptions::pipeline: step N + 1 issued from step N's
// picks on the backend before they come back): the same tokens as the reference (the
// Model driven one token per forward call, engine_test_util.h) for greedy and
// device-sampled completions, one stopping mid-generation with the next step in flight,
// and the prefix cache then reusing that stopped sequence (whose KV holds one more
// position than without pipelining: its stop token's). An engine with pipelining off
// runs the same requests as a cross-check; the pipelined_steps_total metric shows which
// engine pipelined.
#include <gtest/gtest.h>

#include "engine_test_util.h"

namespace brass::runtime {
namespace {

Request device_greedy(std::vector<int32_t> prompt, int64_t max_tokens, std::vector<int32_t> stops = {}) {
  Request r = greedy_request(std::move(prompt), max_tokens);
  r.token_logprob = false;  // only the pick comes back: the step can be pipelined
  r.stop_tokens = std::move(stops);
  return r;
}

TEST(EnginePipeline, TokensMatchTheReferenceWithStopsSamplingAndPrefixReuse) {
  Fixture f;
  FIX_TRACE(f);
  auto ref_model = f.load(Fixture::mopts());
  ASSERT_TRUE(ref_model);
  const auto p_stop = f.tokens(13);
  auto p_len = f.tokens(7), p_draw = f.tokens(10);
  // Other first tokens: neither may take the stopped sequence's cache entry as a prefix.
  p_len[0] = (p_stop[0] + 1) % kVocab;
  p_draw[0] = (p_stop[0] + 2) % kVocab;
  const int kGen = 16;
  const RefRun ref_stop = reference(*ref_model, p_stop, kGen);
  const RefRun ref_len = reference(*ref_model, p_len, 9);
  // A stop token: the first reference token at index >= 3 not seen before it.
  size_t k = 3;
  while (k < ref_stop.tokens.size() && std::find(ref_stop.tokens.begin(), ref_stop.tokens.begin() + k,
                                                 ref_stop.tokens[k]) != ref_stop.tokens.begin() + k)
    ++k;
  const bool stops = k < ref_stop.tokens.size();
  Request draw;
  draw.prompt = p_draw;
  draw.token_logprob = false;
  draw.sampling.temperature = 0.8f;
  draw.sampling.top_k = 40;
  draw.sampling.top_p = 0.95f;
  draw.sampling.seed = std::uniform_int_distribution<uint64_t>()(f.gen);
  draw.max_tokens = 12;
  draw.n = 2;

  for (const bool pipeline : {true, false}) {
    SCOPED_TRACE(pipeline ? "pipelined" : "one forward a step");
    EngineOptions eo;
    eo.parallel = 4;
    eo.prefix_cache_seqs = 8;
    eo.pipeline = pipeline;
    auto e = f.engine(eo);
    ASSERT_TRUE(e);
    // Alone, so its steps pipeline from its second generated token on: the stop token
    // (k >= 3) comes back with the next step already in flight.
    auto a = e->submit(device_greedy(p_stop, kGen, stops ? std::vector<int32_t>{ref_stop.tokens[k]}
                                                          : std::vector<int32_t>{}));
    ASSERT_TRUE(a.ok());
    const Outcome oa = collect(*a.handle, 1);
    auto b = e->submit(device_greedy(p_len, 9));
    auto c = e->submit(draw);
    ASSERT_TRUE(b.ok() && c.ok());
    const Outcome ob = collect(*b.handle, 1), oc = collect(*c.handle, 2);
    if (stops) {
      // (The stop token comes with the finish event, not as a token.)
      const RefRun cut{{ref_stop.tokens.begin(), ref_stop.tokens.begin() + k}, ref_stop.margins};
      expect_same_greedy(oa.tokens[0], cut, "stopped");
      if (oa.tokens[0] == cut.tokens) EXPECT_EQ(oa.finish[0], FinishReason::kStop);
    } else {
      expect_same_greedy(oa.tokens[0], ref_stop, "no stop token found");
    }
    expect_same_greedy(ob.tokens[0], ref_len, "length");
    EXPECT_EQ(ob.finish[0], FinishReason::kLength);
    for (int i = 0; i < 2; ++i) {
      SamplerParams sp = draw.sampling;
      sp.seed += static_cast<uint64_t>(i);
      EXPECT_EQ(oc.tokens[i], reference(*ref_model, p_draw, 12, &sp).tokens) << "draw " << i;
    }
    ASSERT_TRUE(e->wait_idle());
    const MetricsSnapshot m = e->metrics();
    if (pipeline)
      EXPECT_GT(m.pipelined_steps_total, 0u);
    else
      EXPECT_EQ(m.pipelined_steps_total, 0u);
    const bool stopped = oa.finish[0] == FinishReason::kStop;
    EXPECT_EQ(m.generation_tokens_total, oa.tokens[0].size() + (stopped ? 1 : 0) + ob.tokens[0].size() + 24);

    // The next turn extends the stopped completion (its stop token included): the cached
    // sequence is reused and the new tokens are the reference's for the whole prompt.
    if (!stopped || oa.tokens[0].size() != k) continue;
    std::vector<int32_t> p2 = p_stop;
    p2.insert(p2.end(), oa.tokens[0].begin(), oa.tokens[0].end());
    p2.push_back(oa.stop_token[0]);
    const auto extra = f.tokens(5);
    p2.insert(p2.end(), extra.begin(), extra.end());
    auto d = e->submit(device_greedy(p2, 6));
    ASSERT_TRUE(d.ok());
    const Outcome od = collect(*d.handle, 1);
    // Pipelined, the stop token's position was computed (by the step in flight when it
    // came back); one forward a step never feeds it.
    const int64_t cached = static_cast<int64_t>(p_stop.size() + k) + (pipeline ? 1 : 0);
    EXPECT_EQ(od.usage.cached_prompt_tokens, cached);
    expect_same_greedy(od.tokens[0], reference(*ref_model, p2, 6), "turn 2 on the cached sequence");
  }
}

// Requests arriving and leaving while steps are pipelined (joins, cancellations, a
// completion that needs its logits on the host): every completion still equals its
// reference, and nothing is left in flight when the engine goes idle.
TEST(EnginePipeline, JoinsCancellationsAndHostRowsBreakThePipelineCleanly) {
  Fixture f;
  FIX_TRACE(f);
  auto ref_model = f.load(Fixture::mopts());
  ASSERT_TRUE(ref_model);
  EngineOptions eo;
  eo.parallel = 3;
  eo.prefix_cache_seqs = 0;
  auto e = f.engine(eo);
  ASSERT_TRUE(e);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) prompts.push_back(f.tokens(std::uniform_int_distribution<int>(4, 20)(f.gen)));
  std::vector<Submitted> subs;
  for (int i = 0; i < 6; ++i) {
    Request r = device_greedy(prompts[i], 10 + i);
    if (i == 4) r.token_logprob = true;  // host-sampled: its steps take forward()
    subs.push_back(e->submit(r));
    ASSERT_TRUE(subs.back().ok());
    if (i == 2) std::this_thread::sleep_for(std::chrono::milliseconds(3));  // later joins
  }
  subs[5].handle->cancel();
  for (int i = 0; i < 6; ++i) {
    const Outcome o = collect(*subs[i].handle, 1);
    if (i == 5) {
      EXPECT_TRUE(o.finish[0] == FinishReason::kCancelled || o.finish[0] == FinishReason::kLength);
      continue;
    }
    expect_same_greedy(o.tokens[0], reference(*ref_model, prompts[i], 10 + i), "request " + std::to_string(i));
    EXPECT_EQ(o.finish[0], FinishReason::kLength);
  }
  ASSERT_TRUE(e->wait_idle());
  EXPECT_EQ(e->metrics().kv_bytes, 0);
  // The engine still serves after going idle with nothing in flight.
  auto s = e->submit(device_greedy(prompts[0], 4));
  ASSERT_TRUE(s.ok());
  const Outcome o = collect(*s.handle, 1);
  expect_same_greedy(o.tokens[0], reference(*ref_model, prompts[0], 4), "after idle");
}

}  // namespace
}  // namespace brass::runtime
