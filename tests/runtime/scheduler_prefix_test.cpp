// Unit tests of the engine's policy pieces, without a model:
// - plan_step against a naive re-implementation of the documented policy on random
//   inputs, plus a hand-computed example;
// - PrefixCache match / take / LRU eviction on hand-built entries;
// - Histogram buckets and the Prometheus rendering (hand-computed cumulative counts).
#include <gtest/gtest.h>

#include <random>

#include "runtime/metrics.h"
#include "runtime/prefix_cache.h"
#include "runtime/scheduler.h"

namespace brass::runtime {
namespace {

TEST(Scheduler, HandComputedExample) {
  // decode, prefill 10, decode, prefill 3, idle
  std::vector<SchedSeq> s = {{5, 4}, {20, 10}, {9, 8}, {3, 0}, {7, 7}};
  auto p = plan_step(s, 8);
  // decoders first: seq 0 and 2 (1 each) -> 6 left; seq 1 takes 6 (of 10); seq 3 none.
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].index, 0u);
  EXPECT_EQ(p[0].n_tokens, 1);
  EXPECT_TRUE(p[0].completes);
  EXPECT_EQ(p[1].index, 1u);
  EXPECT_EQ(p[1].n_tokens, 6);
  EXPECT_FALSE(p[1].completes);
  EXPECT_EQ(p[2].index, 2u);
  EXPECT_EQ(p[2].n_tokens, 1);
  auto q = plan_step(s, 100);
  ASSERT_EQ(q.size(), 4u);
  EXPECT_EQ(q[1].n_tokens, 10);
  EXPECT_TRUE(q[1].completes);
  EXPECT_EQ(q[3].index, 3u);
  EXPECT_EQ(q[3].n_tokens, 3);
  EXPECT_TRUE(q[3].completes);
}

TEST(Scheduler, RandomAgainstNaivePolicy) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 gen(seed);
  auto U = [&](int a, int b) { return std::uniform_int_distribution<int>(a, b)(gen); };
  for (int it = 0; it < 500; ++it) {
    std::vector<SchedSeq> s(U(0, 12));
    for (auto& x : s) {
      x.computed = U(0, 50);
      const int kind = U(0, 2);
      x.known = x.computed + (kind == 0 ? 0 : kind == 1 ? 1 : U(2, 40));
    }
    const int64_t budget = U(1, 64);
    // Naive: walk the token budget one token at a time, decoders first.
    std::vector<int64_t> want(s.size(), 0);
    int64_t left = budget;
    for (size_t i = 0; i < s.size(); ++i)
      if (s[i].known - s[i].computed == 1 && left > 0) {
        want[i] = 1;
        --left;
      }
    for (size_t i = 0; i < s.size(); ++i)
      while (s[i].known - s[i].computed > 1 && want[i] < s[i].known - s[i].computed && left > 0) ++want[i], --left;
    auto p = plan_step(s, budget);
    std::vector<int64_t> got(s.size(), 0);
    int64_t total = 0;
    size_t prev = 0;
    for (size_t k = 0; k < p.size(); ++k) {
      if (k) {
        EXPECT_GT(p[k].index, prev);
      }
      prev = p[k].index;
      got[p[k].index] = p[k].n_tokens;
      total += p[k].n_tokens;
      EXPECT_EQ(p[k].completes, s[p[k].index].computed + p[k].n_tokens == s[p[k].index].known);
    }
    EXPECT_LE(total, budget);
    EXPECT_EQ(got, want);
  }
}

TEST(PrefixCache, LongestUsableMatchTakeAndLru) {
  PrefixCache c;
  c.put({1, {1, 2, 3, 4, 5, 6}, 100});
  c.put({2, {1, 2, 3, 9}, 50});
  c.put({3, {7, 7}, 10});
  auto always = [](const PrefixEntry&, int64_t n) { return n; };
  std::vector<int32_t> p = {1, 2, 3, 4, 5, 8, 8};
  auto m = c.match(p, always);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->seq_id, 1);
  EXPECT_EQ(m->reuse, 5);
  EXPECT_EQ(m->length, 6);
  // The whole prompt cached: the last prompt token is still recomputed.
  std::vector<int32_t> p2 = {1, 2, 3, 4};
  m = c.match(p2, always);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->reuse, 3);
  // Both 1 and 2 would need a cut; a rule that refuses every cut leaves no match.
  EXPECT_FALSE(c.match(p, [](const PrefixEntry&, int64_t) { return int64_t{0}; }));
}

// A cut the KV cache cannot make exactly may still be made shorter (a window snapshot
// at the end of an earlier prompt): match() compares the usable cuts, not the common
// prefixes.
TEST(PrefixCache, ShorterUsableCutsCompete) {
  PrefixCache c;
  c.put({1, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, 100});  // "snapshots" at 4 and 9
  c.put({2, {1, 2, 3, 4, 5, 6, 7, 9}, 100});                 // cuts anywhere
  auto rule = [](const PrefixEntry& e, int64_t n) -> int64_t {
    if (e.seq_id == 2) return n;
    return n >= 9 ? 9 : n >= 4 ? 4 : 0;
  };
  std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 50, 51};  // common 10 with 1, 7 with 2
  auto m = c.match(a, rule);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->seq_id, 1);
  EXPECT_EQ(m->reuse, 9);
  EXPECT_EQ(m->length, 12);
  std::vector<int32_t> b = {1, 2, 3, 4, 5, 6, 7, 8, 60};  // common 8 with 1 (cut 4), 7 with 2
  m = c.match(b, rule);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->seq_id, 2);
  EXPECT_EQ(m->reuse, 7);
  // A rule answering more than asked is held to the common prefix.
  m = c.match(b, [](const PrefixEntry&, int64_t n) { return n + 5; });
  ASSERT_TRUE(m);
  EXPECT_EQ(m->reuse, 8);
  EXPECT_EQ(m->seq_id, 1);
}

TEST(PrefixCache, StrictTruncationAndEviction) {
  PrefixCache c;
  c.put({1, {1, 2, 3, 4, 5, 6}, 100});
  c.put({2, {1, 2, 3}, 50});
  auto strict = [](const PrefixEntry&, int64_t) { return int64_t{0}; };
  std::vector<int32_t> p = {1, 2, 3, 4, 5, 8, 8};
  auto m = c.match(p, strict);
  ASSERT_TRUE(m);  // entry 2 matches whole (3 tokens, no cut); entry 1 would need a cut
  EXPECT_EQ(m->seq_id, 2);
  EXPECT_EQ(m->reuse, 3);
  EXPECT_FALSE(c.match(std::vector<int32_t>{9, 9, 9}, strict));
  EXPECT_EQ(c.bytes(), 150);
  EXPECT_EQ(c.tokens(), 9);
  auto e = c.take(1);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->tokens.size(), 6u);
  EXPECT_EQ(c.bytes(), 50);
  c.put(std::move(*e));  // now most recent: LRU order 1, 2
  c.put({3, {4}, 30});   // order 3, 1, 2
  auto ev = c.evict(2, 1000);
  EXPECT_EQ(ev, std::vector<int32_t>({2}));
  ev = c.evict(10, 40);
  EXPECT_EQ(ev, std::vector<int32_t>({1}));
  EXPECT_EQ(c.seq_ids(), std::vector<int32_t>({3}));
  EXPECT_EQ(PrefixCache::common_prefix(std::vector<int32_t>{1, 2, 3}, std::vector<int32_t>{1, 2}), 2);
}

TEST(Metrics, HistogramAndPrometheusText) {
  Histogram h({1, 2, 4});
  for (double v : {0.5, 1.0, 1.5, 3.0, 9.0, 9.0}) h.observe(v);
  EXPECT_EQ(h.counts, std::vector<uint64_t>({2, 1, 1, 2}));
  EXPECT_EQ(h.count, 6u);
  EXPECT_DOUBLE_EQ(h.sum, 24.0);
  MetricsSnapshot m;
  m.requests_total = 7;
  m.requests_waiting = 3;
  m.seqs_per_step = h;
  m.kv_bytes = 12345;
  const std::string t = render_prometheus(m, "x");
  EXPECT_NE(t.find("# TYPE x_requests_total counter\nx_requests_total 7\n"), std::string::npos) << t;
  EXPECT_NE(t.find("x_requests_waiting 3\n"), std::string::npos);
  EXPECT_NE(t.find("x_kv_cache_bytes 12345\n"), std::string::npos);
  // cumulative buckets 2, 3, 4, then +Inf 6
  EXPECT_NE(t.find("x_sequences_per_step_bucket{le=\"1\"} 2\n"
                   "x_sequences_per_step_bucket{le=\"2\"} 3\n"
                   "x_sequences_per_step_bucket{le=\"4\"} 4\n"
                   "x_sequences_per_step_bucket{le=\"+Inf\"} 6\n"
                   "x_sequences_per_step_sum 24\n"
                   "x_sequences_per_step_count 6\n"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("# TYPE x_time_to_first_token_seconds histogram"), std::string::npos);
  EXPECT_NE(t.find("x_completions_finished_total{reason=\"stop\"} 0"), std::string::npos);
}

}  // namespace
}  // namespace brass::runtime
