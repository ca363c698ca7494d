// Pipelined decode (Model::submit / collect) against forward(): the same batches, in the
// same order, with each feed chunk's token taken on the backend from the previous round's
// pick, give the same picks as forward() given those picks from the host. The pipelined
// model runs on FakeDevice (device-path storage, downloads that land only at await()),
// so a pick read before its round is collected, or a feed copied from the wrong row, shows
// up as a wrong token. Sequences leave and rejoin, one joins with a prompt midway, the
// batch order changes, greedy and sampled chunks mix; bad calls are refused.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "backend/backend.h"
#include "backend/sampling.h"
#include "fake_device.h"
#include "gguf/reader.h"
#include "model/model.h"
#include "tiny_model.h"

namespace brass::model {
namespace {

using brass::testing::FakeDevice;
using brass::testing::make_tiny;
using brass::testing::TempFile;

std::unique_ptr<Model> load(const std::string& path, bool device) {
  ModelOptions o;
  o.max_chunk_tokens = 8;
  o.use_graphs = false;  // (FakeDevice records no graphs)
  std::unique_ptr<backend::Backend> be = backend::make_cpu_backend(1);
  if (device) be = std::make_unique<FakeDevice>(std::move(be));
  auto reader = gguf::Reader::open(path);
  EXPECT_TRUE(reader.is_ok()) << reader.status().message();
  if (!reader.is_ok()) return nullptr;
  auto m = Model::load(std::move(reader).value(), o, std::move(be));
  EXPECT_TRUE(m.is_ok()) << m.status().message();
  return m.is_ok() ? std::move(m).value() : nullptr;
}

// One chunk of a step: a sequence, its host tokens (empty: fed from its last pick), and
// whether it samples.
struct Plan {
  int32_t seq;
  std::vector<int32_t> prompt;  // host tokens (a prompt or a rejoining token); empty: feed
  bool sampled;
};

TEST(ModelPipeline, SubmittedRoundsEqualForwardSteps) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  TempFile file{"pipeline"};
  ASSERT_TRUE(make_tiny({}, seed).write(file.path).is_ok());
  auto ref = load(file.path, false), pipe = load(file.path, true);
  ASSERT_TRUE(ref && pipe);
  std::mt19937 gen(seed);
  auto tokens = [&](int n) {
    std::vector<int32_t> t(n);
    for (auto& x : t) x = std::uniform_int_distribution<int>(0, 95)(gen);
    return t;
  };
  // Steps: which sequences run, in which order. Sequence 2 sits out steps 3-4 and comes back
  // with its last pick from the host; sequence 4 joins at step 4 with a prompt; the order
  // of the fed sequences changes (the feed copies are then not one run).
  const int n_steps = 9;
  std::vector<std::vector<Plan>> plan(n_steps);
  plan[0] = {{0, tokens(5), false}, {1, tokens(1), true}, {2, tokens(8), false}, {3, tokens(3), true}};
  plan[1] = {{0, {}, false}, {1, {}, true}, {2, {}, false}, {3, {}, true}};
  plan[2] = {{3, {}, true}, {2, {}, false}, {1, {}, true}, {0, {}, false}};
  plan[3] = {{1, {}, true}, {3, {}, true}, {0, {}, false}};
  plan[4] = {{0, {}, false}, {4, tokens(6), true}, {1, {}, true}, {3, {}, true}};
  plan[5] = {{2, {}, false}, {0, {}, false}, {1, {}, true}, {3, {}, true}, {4, {}, true}};
  plan[6] = {{0, {}, false}, {1, {}, true}, {2, {}, false}, {3, {}, true}, {4, {}, true}};
  plan[7] = {{4, {}, true}, {0, {}, false}};
  plan[8] = {{0, {}, false}, {4, {}, true}};

  // The reference: forward() a step, feed chunks given the last pick from the host.
  for (int32_t s = 0; s < 5; ++s) {
    ASSERT_TRUE(ref->add_sequence(s).is_ok());
    ASSERT_TRUE(pipe->add_sequence(s).is_ok());
  }
  std::map<int32_t, int32_t> last, pos;
  std::vector<std::vector<int32_t>> want(n_steps);
  std::vector<std::vector<backend::SampleParams>> params(n_steps);
  std::mt19937_64 prng(seed);
  for (int k = 0; k < n_steps; ++k) {
    params[k].resize(plan[k].size());
    for (auto& p : params[k]) {
      p.temperature = 0.5f + static_cast<float>(prng() % 100) / 100.0f;
      p.top_k = static_cast<int32_t>(prng() % 3) * 4;
      p.seed = prng();
      p.counter = static_cast<uint64_t>(k);
    }
    if (k == 5) plan[k][0].prompt = {last.at(2)};  // sequence 2 rejoins with its pick from the host
    std::vector<std::vector<int32_t>> host(plan[k].size());
    std::vector<SeqChunk> batch;
    for (size_t c = 0; c < plan[k].size(); ++c) {
      const Plan& p = plan[k][c];
      host[c] = p.prompt.empty() ? std::vector<int32_t>{last.at(p.seq)} : p.prompt;
      batch.push_back({.seq_id = p.seq, .tokens = host[c], .pos0 = pos[p.seq], .greedy = !p.sampled,
                       .sample = p.sampled ? &params[k][c] : nullptr});
    }
    ForwardOutput out;
    ASSERT_TRUE(ref->forward(batch, out).is_ok()) << "step " << k;
    for (size_t c = 0; c < plan[k].size(); ++c) {
      const Plan& p = plan[k][c];
      last[p.seq] = out.token[c];
      pos[p.seq] += static_cast<int32_t>(host[c].size());
      ASSERT_GE(out.token[c], 0);
    }
    want[k] = out.token;
  }

  // Pipelined: submit step k (fed on the backend), then collect step k - 1.
  pos.clear();
  std::vector<std::vector<int32_t>> got;
  for (int k = 0; k < n_steps; ++k) {
    std::vector<SeqChunk> batch;
    for (size_t c = 0; c < plan[k].size(); ++c) {
      const Plan& p = plan[k][c];
      batch.push_back({.seq_id = p.seq, .tokens = p.prompt, .pos0 = pos[p.seq], .greedy = !p.sampled,
                       .sample = p.sampled ? &params[k][c] : nullptr, .feed = p.prompt.empty()});
      pos[p.seq] += p.prompt.empty() ? 1 : static_cast<int32_t>(p.prompt.size());
    }
    const Status st = pipe->submit(batch);
    ASSERT_TRUE(st.is_ok()) << "step " << k << ": " << st.message();
    EXPECT_EQ(pipe->in_flight(), k == 0 ? 1u : 2u);
    if (k > 0) {
      got.emplace_back();
      ASSERT_TRUE(pipe->collect(got.back()).is_ok());
    }
  }
  got.emplace_back();
  ASSERT_TRUE(pipe->collect(got.back()).is_ok());
  ASSERT_EQ(got.size(), want.size());
  for (int k = 0; k < n_steps; ++k) EXPECT_EQ(got[k], want[k]) << "step " << k;
  for (int32_t s = 0; s < 5; ++s) EXPECT_EQ(pipe->sequence_length(s).value(), ref->sequence_length(s).value());
}

TEST(ModelPipeline, BadCallsAreRefused) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  TempFile file{"pipeline_bad"};
  ASSERT_TRUE(make_tiny({}, seed).write(file.path).is_ok());
  auto m = load(file.path, true);
  ASSERT_TRUE(m);
  ASSERT_TRUE(m->add_sequence(0).is_ok());
  ASSERT_TRUE(m->add_sequence(1).is_ok());
  std::vector<int32_t> picks;
  const std::vector<int32_t> t3 = {1, 2, 3};
  auto expect_error = [](const Status& st, const std::string& part) {
    EXPECT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find(part), std::string::npos) << st.message();
  };
  expect_error(m->collect(picks), "no submitted round");
  // A feed chunk with nothing submitted before; a feed chunk carrying tokens; a logits chunk.
  const SeqChunk feed0{.seq_id = 0, .tokens = {}, .pos0 = 0, .greedy = true, .feed = true};
  expect_error(m->submit(std::span(&feed0, 1)), "previous submitted round");
  const SeqChunk feed_tokens{.seq_id = 0, .tokens = t3, .pos0 = 0, .greedy = true, .feed = true};
  expect_error(m->submit(std::span(&feed_tokens, 1)), "takes its token from the last pick");
  const SeqChunk logits{.seq_id = 0, .tokens = t3, .pos0 = 0};
  expect_error(m->submit(std::span(&logits, 1)), "greedy or sampled");
  EXPECT_EQ(m->sequence_length(0).value(), 0);
  // Two rounds in flight: a third is refused, and so are forward() and decode_greedy().
  const SeqChunk first{.seq_id = 0, .tokens = t3, .pos0 = 0, .greedy = true};
  ASSERT_TRUE(m->submit(std::span(&first, 1)).is_ok());
  const SeqChunk second{.seq_id = 0, .tokens = {}, .pos0 = 3, .greedy = true, .feed = true};
  ASSERT_TRUE(m->submit(std::span(&second, 1)).is_ok());
  const SeqChunk third{.seq_id = 0, .tokens = {}, .pos0 = 4, .greedy = true, .feed = true};
  expect_error(m->submit(std::span(&third, 1)), "in flight already");
  ForwardOutput out;
  const SeqChunk other{.seq_id = 1, .tokens = t3, .pos0 = 0, .greedy = true};
  expect_error(m->forward(std::span(&other, 1), out), "not collected");
  std::vector<int32_t> dg;
  expect_error(m->decode_greedy(1, 5, 2, dg), "not collected");
  ASSERT_TRUE(m->collect(picks).is_ok());
  ASSERT_TRUE(m->collect(picks).is_ok());
  ASSERT_EQ(picks.size(), 1u);
  EXPECT_GE(picks[0], 0);
  // Sequence 1 was not in the last round: it cannot be fed; forward() takes no feed chunks.
  const SeqChunk feed1{.seq_id = 1, .tokens = {}, .pos0 = 0, .greedy = true, .feed = true};
  expect_error(m->submit(std::span(&feed1, 1)), "previous submitted round");
  expect_error(m->forward(std::span(&third, 1), out), "go through submit()");
  EXPECT_EQ(m->sequence_length(0).value(), 4);
  EXPECT_EQ(m->sequence_length(1).value(), 0);
}

}  // namespace
}  // namespace brass::model
