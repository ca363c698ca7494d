// The engine on a KV block pool smaller than its requests need together (model::KvCache
// pool, ModelOptions::kv_tokens): admission waits for blocks, the prefix cache is evicted
// first, running sequences are preempted (KV freed, recomputed later) when another must
// grow. Every request must still finish, none with an error, with the tokens of the
// reference (the Model driven directly, one sequence and one token at a time, on a pool
// large enough: engine_test_util.h); a prompt the pool cannot hold is refused at submit.
#include <gtest/gtest.h>

#include <thread>

#include "engine_test_util.h"

namespace brass::runtime {
namespace {

TEST(EnginePool, SmallPoolServesEveryRequestLikeAlone) {
  Fixture f;
  FIX_TRACE(f);
  ModelOptions mo = Fixture::mopts(/*max_chunk=*/24);
  mo.kv_block_size = 16;
  mo.kv_tokens = 128;  // 8 blocks; each request grows to 4-5 blocks, 4 run at once
  EngineOptions eo;
  eo.parallel = 4;
  eo.step_tokens = 24;
  eo.prefix_cache_seqs = 3;
  auto e = f.engine(eo, mo);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->n_ctx(), 128) << "the context is capped at the pool's size";
  auto ref_model = f.load(Fixture::mopts());
  ASSERT_TRUE(ref_model);
  const int kReq = 6, kGen = 40;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < kReq; ++i) prompts.push_back(f.tokens(std::uniform_int_distribution<int>(10, 36)(f.gen)));
  Gate gate;  // holds the engine until every request is queued: they compete for blocks
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (int i = 0; i < kReq; ++i) {
    Request r = greedy_request(prompts[i], kGen);
    if (i == 0) r.constraint = gate.factory();
    if (i % 2 == 1) r.token_logprob = false;  // picked on the backend
    auto s = e->submit(r);
    ASSERT_TRUE(s.ok()) << s.message;
    handles.push_back(s.handle);
  }
  *gate.open = true;
  for (int i = 0; i < kReq; ++i) {
    const Outcome o = collect(*handles[i], 1);
    const RefRun ref = reference(*ref_model, prompts[i], kGen);
    expect_same_greedy(o.tokens[0], ref, "request " + std::to_string(i));
    EXPECT_EQ(o.finish[0], FinishReason::kLength) << "request " << i;
    EXPECT_EQ(o.usage.completion_tokens, kGen);
    EXPECT_GE(o.usage.prompt_tokens_computed, static_cast<int64_t>(prompts[i].size()));
  }
  ASSERT_TRUE(e->wait_idle());
  MetricsSnapshot m = e->metrics();
  EXPECT_EQ(m.finish_error_total, 0u);
  EXPECT_EQ(m.finish_length_total, static_cast<uint64_t>(kReq));
  EXPECT_GT(m.preemptions_total, 0u) << "the pool never forced a preemption";
  EXPECT_EQ(m.sequences_preempted, 0);
  EXPECT_EQ(m.kv_pool_tokens, 128);
  EXPECT_EQ(m.kv_block_size, 16);
  EXPECT_LE(m.max_step_seqs, eo.parallel);
  EXPECT_GT(m.max_step_seqs, 1);
  std::printf("%llu preemptions, %llu prefix-cache evictions\n", static_cast<unsigned long long>(m.preemptions_total),
              static_cast<unsigned long long>(m.prefix_cache_evictions_total));
  e->clear_prefix_cache();
  m = e->metrics();
  EXPECT_EQ(m.kv_pool_free_tokens, 128) << "every block is back once the prefix cache is empty";
  const std::string text = render_prometheus(m);
  EXPECT_NE(text.find("brass_kv_pool_free_tokens 128"), std::string::npos);
  EXPECT_NE(text.find("brass_preemptions_total"), std::string::npos);
}

// n completions of one prompt share the pool with another request; a cancelled request
// whose sequence was preempted still finishes (cancelled) and frees everything.
TEST(EnginePool, CompletionsAndCancellationUnderPressure) {
  Fixture f;
  FIX_TRACE(f);
  ModelOptions mo = Fixture::mopts(/*max_chunk=*/16);
  mo.kv_block_size = 16;
  mo.kv_tokens = 96;  // 6 blocks
  EngineOptions eo;
  eo.parallel = 4;
  eo.step_tokens = 16;
  eo.prefix_cache_seqs = 0;
  auto e = f.engine(eo, mo);
  ASSERT_TRUE(e);
  auto ref_model = f.load(Fixture::mopts());
  ASSERT_TRUE(ref_model);
  const auto p1 = f.tokens(20), p2 = f.tokens(14);
  Gate gate;
  Request r1 = greedy_request(p1, 30);
  r1.n = 3;  // three identical greedy completions
  r1.constraint = gate.factory();
  auto s1 = e->submit(r1);
  auto s2 = e->submit(greedy_request(p2, 50));
  ASSERT_TRUE(s1.ok() && s2.ok());
  *gate.open = true;
  const Outcome o1 = collect(*s1.handle, 3);
  const RefRun ref1 = reference(*ref_model, p1, 30);
  for (int i = 0; i < 3; ++i) {
    expect_same_greedy(o1.tokens[i], ref1, "completion " + std::to_string(i));
    EXPECT_EQ(o1.finish[i], FinishReason::kLength);
  }
  s2.handle->cancel();
  const Outcome o2 = collect(*s2.handle, 1);
  EXPECT_TRUE(o2.finish[0] == FinishReason::kCancelled || o2.finish[0] == FinishReason::kLength);
  ASSERT_TRUE(e->wait_idle());
  const MetricsSnapshot m = e->metrics();
  EXPECT_EQ(m.finish_error_total, 0u);
  EXPECT_EQ(m.kv_pool_free_tokens, 96);
  EXPECT_EQ(m.kv_sequences, 0);
}

TEST(EnginePool, APromptThePoolCannotHoldIsRefused) {
  Fixture f;
  FIX_TRACE(f);
  ModelOptions mo = Fixture::mopts();
  mo.kv_block_size = 16;
  mo.kv_tokens = 64;
  EngineOptions eo;
  auto e = f.engine(eo, mo);
  ASSERT_TRUE(e);
  auto s = e->submit(greedy_request(f.tokens(70), 4));
  EXPECT_EQ(s.code, SubmitCode::kInvalid);
  EXPECT_NE(s.message.find("70 tokens"), std::string::npos) << s.message;
  EXPECT_NE(s.message.find("--kv-tokens"), std::string::npos) << s.message;
  // One that fits generates until the pool (= its context) is full, without an error.
  auto ok = e->submit(greedy_request(f.tokens(60), -1));
  ASSERT_TRUE(ok.ok()) << ok.message;
  const Outcome o = collect(*ok.handle, 1);
  EXPECT_EQ(o.finish[0], FinishReason::kLength);
  EXPECT_EQ(o.usage.completion_tokens, 4);
}

}  // namespace
}  // namespace brass::runtime
