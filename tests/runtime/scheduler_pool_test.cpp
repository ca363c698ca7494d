// plan_step within a KV block pool (scheduler.h PoolBudget): a hand-computed example and
// random inputs against a token-by-token simulation of the documented policy (decode
// tokens first, in order, each taking a block only when its blocks are full; then prompt
// chunks in order, grown one token at a time while the budget and the free blocks last;
// starved when a decoding sequence was left out for lack of blocks, or nothing at all
// could be planned although some sequence has work).
#include <gtest/gtest.h>

#include <random>

#include "runtime/scheduler.h"

namespace brass::runtime {
namespace {

TEST(SchedulerPool, HandComputedExample) {
  // bs 4. seq 0 decodes inside its block (room 2); seq 1 decodes at a block edge (room 0);
  // seq 2 prefills 10 with room 1; seq 3 decodes at an edge; 2 free blocks, budget 20.
  std::vector<SchedSeq> s = {{.known = 5, .computed = 4, .room = 2},
                             {.known = 9, .computed = 8, .room = 0},
                             {.known = 20, .computed = 10, .room = 1},
                             {.known = 13, .computed = 12, .room = 0}};
  StepPlan p = plan_step(s, 20, PoolBudget{.free_blocks = 2, .block_size = 4});
  // seq 0: free token; seq 1: a block (1 left); seq 3: the last block (0 left);
  // seq 2: only its room, 1 token.
  ASSERT_EQ(p.chunks.size(), 4u);
  EXPECT_EQ(p.chunks[2].index, 2u);
  EXPECT_EQ(p.chunks[2].n_tokens, 1);
  EXPECT_EQ(p.blocks, 2);
  EXPECT_FALSE(p.starved);
  // One free block: seq 3 is left out (starved); seq 2 still gets its room.
  p = plan_step(s, 20, PoolBudget{.free_blocks = 1, .block_size = 4});
  EXPECT_TRUE(p.starved);
  ASSERT_EQ(p.chunks.size(), 3u);
  EXPECT_EQ(p.chunks[0].index, 0u);
  EXPECT_EQ(p.chunks[1].index, 1u);
  EXPECT_EQ(p.chunks[2].index, 2u);
  // Nothing free and nobody has room: starved with an empty plan.
  std::vector<SchedSeq> stuck = {{.known = 9, .computed = 2, .room = 0}};
  p = plan_step(stuck, 20, PoolBudget{.free_blocks = 0, .block_size = 4});
  EXPECT_TRUE(p.chunks.empty());
  EXPECT_TRUE(p.starved);
  // Nothing to do is not starving.
  std::vector<SchedSeq> idle = {{.known = 3, .computed = 3, .room = 1}};
  EXPECT_FALSE(plan_step(idle, 20, PoolBudget{.free_blocks = 0, .block_size = 4}).starved);
}

TEST(SchedulerPool, RandomAgainstTokenByTokenSimulation) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  auto uni = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  int starved = 0, limited = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const int64_t bs = int64_t{1} << uni(0, 4);
    std::vector<SchedSeq> s(uni(1, 8));
    for (auto& x : s) {
      x.computed = uni(0, 60);
      x.known = x.computed + (uni(0, 2) == 0 ? 1 : uni(0, 30));
      x.room = uni(0, bs - 1);
    }
    const int64_t budget = uni(1, 40), free0 = uni(0, 6);
    const StepPlan p = plan_step(s, budget, PoolBudget{.free_blocks = free0, .block_size = bs});
    // Simulation.
    std::vector<int64_t> take(s.size(), 0), got_blocks(s.size(), 0);
    int64_t left = budget, free = free0;
    bool want_starved = false, work = false;
    auto add_token = [&](size_t i) {  // false: no block for it
      const int64_t cap = s[i].room + got_blocks[i] * bs;
      if (take[i] + 1 > cap) {
        if (free == 0) return false;
        --free;
        ++got_blocks[i];
      }
      ++take[i];
      --left;
      return true;
    };
    for (size_t i = 0; i < s.size(); ++i)
      if (s[i].known - s[i].computed == 1 && left > 0 && !add_token(i)) want_starved = true;
    for (size_t i = 0; i < s.size(); ++i)
      if (s[i].known - s[i].computed > 1)
        while (left > 0 && take[i] < s[i].known - s[i].computed && add_token(i)) {
        }
    int64_t blocks = 0;
    std::vector<int64_t> got(s.size(), 0);
    for (const SchedChunk& c : p.chunks) {
      ASSERT_LT(c.index, s.size());
      got[c.index] = c.n_tokens;
      EXPECT_EQ(c.completes, s[c.index].computed + c.n_tokens == s[c.index].known);
    }
    for (size_t i = 0; i < s.size(); ++i) {
      blocks += got_blocks[i];
      work |= s[i].known > s[i].computed;
      ASSERT_EQ(got[i], take[i]) << "trial " << trial << " sequence " << i;
    }
    if (p.chunks.empty() && work) want_starved = true;
    EXPECT_EQ(p.blocks, blocks) << "trial " << trial;
    EXPECT_EQ(p.starved, want_starved) << "trial " << trial;
    starved += p.starved;
    limited += free == 0 && left > 0;
  }
  EXPECT_GT(starved, 100);
  EXPECT_GT(limited, 100);
}

}  // namespace
}  // namespace brass::runtime
