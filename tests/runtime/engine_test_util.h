// Shared helpers of the engine tests (engine_test.cpp, engine_pool_test.cpp): a tiny
// random model fixture, the reference run (the Model driven directly, one token per
// forward call, with its own argmax / Sampler), event collection, the near-tie-tolerant
// greedy comparison, a gate that holds the engine thread until requests are submitted.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <thread>

#include "../model/tiny_model.h"
#include "model/model.h"
#include "runtime/engine.h"

namespace brass::runtime {
namespace {

using brass::testing::make_tiny;
using brass::testing::TempFile;
using brass::testing::TinySpec;
using model::Model;
using model::ModelOptions;
using namespace std::chrono_literals;

constexpr int kVocab = 96;

struct Fixture {
  uint32_t seed = std::random_device{}();
  TempFile file{"model"};
  std::mt19937 gen{seed};
  Fixture() {
    Status s = make_tiny(TinySpec{}, seed).write(file.path);
    EXPECT_TRUE(s.is_ok()) << s.message();
  }
  static ModelOptions mopts(int64_t max_chunk = 512) {
    ModelOptions o;
    o.n_threads = 1;
    o.n_ctx = 256;
    o.max_chunk_tokens = max_chunk;
    return o;
  }
  std::unique_ptr<Model> load(const ModelOptions& o) {
    auto m = Model::load(file.path, o);
    EXPECT_TRUE(m.is_ok()) << m.status().message();
    return m.is_ok() ? std::move(m).value() : nullptr;
  }
  std::unique_ptr<Engine> engine(const EngineOptions& eo, const ModelOptions& mo = mopts()) {
    auto m = load(mo);
    if (!m) return nullptr;
    auto e = Engine::create(std::move(m), eo);
    EXPECT_TRUE(e.is_ok()) << e.status().message();
    return e.is_ok() ? std::move(e).value() : nullptr;
  }
  std::vector<int32_t> tokens(int n) {
    std::vector<int32_t> t(n);
    for (auto& x : t) x = std::uniform_int_distribution<int>(0, kVocab - 1)(gen);
    return t;
  }
};
#define FIX_TRACE(f) SCOPED_TRACE(::testing::Message() << "model seed " << (f).seed)

struct RefRun {
  std::vector<int32_t> tokens;  // generated (a stop token ends it and is included)
  std::vector<float> margins;   // top1 - top2 logit at each step
};

// The Model directly: prompt token by token, then `n_gen` tokens by argmax (sp ==
// nullptr) or by a Sampler with *sp, optionally masking logits first.
RefRun reference(Model& m, const std::vector<int32_t>& prompt, int n_gen, const SamplerParams* sp = nullptr,
                 const std::vector<int32_t>& stops = {},
                 const std::function<void(std::vector<float>&)>& mask = nullptr) {
  RefRun r;
  const int32_t id = 777;
  EXPECT_TRUE(m.add_sequence(id).is_ok());
  model::ForwardOutput out;
  std::vector<int32_t> hist;
  auto feed = [&](int32_t t) {
    const int32_t pos = static_cast<int32_t>(hist.size());
    hist.push_back(t);
    model::SeqChunk c{id, std::span<const int32_t>(&hist.back(), 1), pos, false};
    Status s = m.forward(std::span<const model::SeqChunk>(&c, 1), out);
    EXPECT_TRUE(s.is_ok()) << s.message();
  };
  for (int32_t t : prompt) feed(t);
  std::unique_ptr<Sampler> sampler = sp ? std::make_unique<Sampler>(*sp) : nullptr;
  for (int i = 0; i < n_gen; ++i) {
    std::vector<float> row(out.row(0), out.row(0) + out.n_vocab);
    if (mask) mask(row);
    std::vector<float> sorted = row;
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
    r.margins.push_back(sorted[0] - sorted[1]);
    int32_t t = 0;
    if (sampler) {
      t = sampler->sample(row, hist).token;
    } else {
      t = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
    }
    r.tokens.push_back(t);
    if (std::find(stops.begin(), stops.end(), t) != stops.end()) break;
    if (i + 1 < n_gen) feed(t);
  }
  EXPECT_TRUE(m.remove_sequence(id).is_ok());
  return r;
}

struct Outcome {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<float>> logprobs;
  std::vector<std::vector<std::vector<TokenLogprob>>> top;  // per completion, per token
  std::vector<FinishReason> finish;
  std::vector<int32_t> stop_token;
  Usage usage;
  Timings timings;
  bool done = false;
  int after_done = 0;
};

Outcome collect(RequestHandle& h, int n) {
  Outcome o;
  o.tokens.resize(n);
  o.logprobs.resize(n);
  o.top.resize(n);
  o.finish.assign(n, FinishReason::kError);
  o.stop_token.assign(n, -2);
  Event ev;
  while (h.next(ev, 60s)) {
    if (ev.kind == Event::Kind::kToken) {
      EXPECT_FALSE(o.done);
      o.tokens.at(ev.index).push_back(ev.token);
      o.logprobs.at(ev.index).push_back(ev.logprob);
      o.top.at(ev.index).push_back(ev.top);
    } else if (ev.kind == Event::Kind::kFinish) {
      o.finish.at(ev.index) = ev.finish;
      o.stop_token.at(ev.index) = ev.token;
    } else {
      o.usage = ev.usage;
      o.timings = ev.timings;
      o.done = true;
      break;
    }
  }
  EXPECT_TRUE(o.done) << "no kDone within 60 s";
  EXPECT_TRUE(h.finished());
  return o;
}

// Engine tokens == reference tokens, except after a reference near tie.
void expect_same_greedy(const std::vector<int32_t>& got, const RefRun& ref, const std::string& what) {
  const size_t n = std::min(got.size(), ref.tokens.size());
  for (size_t i = 0; i < n; ++i) {
    if (got[i] == ref.tokens[i]) continue;
    if (ref.margins[i] < 1e-4f) {
      std::printf("%s: near tie at token %zu (margin %g): comparison stops there\n", what.c_str(), i,
                  ref.margins[i]);
      return;
    }
    ADD_FAILURE() << what << ": token " << i << " is " << got[i] << ", reference " << ref.tokens[i]
                  << " (reference margin " << ref.margins[i] << ")";
    return;
  }
  EXPECT_EQ(got.size(), ref.tokens.size()) << what;
}

// A constraint that changes nothing but holds the engine thread at the first sampling
// until `open` is set: the test submits the other requests meanwhile, so they surely
// share steps with this one (on a loaded machine the test thread could otherwise lag
// behind a tiny model's whole generation).
struct Gate {
  std::shared_ptr<std::atomic<bool>> open = std::make_shared<std::atomic<bool>>(false);
  ConstraintFactory factory() const {
    struct Hold : LogitConstraint {
      std::shared_ptr<std::atomic<bool>> open;
      Status apply(std::span<const int32_t>, std::span<float>) override {
        for (int i = 0; i < 20000 && !open->load(); ++i) std::this_thread::sleep_for(1ms);
        return Status::ok();
      }
    };
    return [o = open](int32_t) {
      auto h = std::make_unique<Hold>();
      h->open = o;
      return h;
    };
  }
};

Request greedy_request(std::vector<int32_t> prompt, int64_t max_tokens) {
  Request r;
  r.prompt = std::move(prompt);
  r.sampling.temperature = 0.0f;
  r.max_tokens = max_tokens;
  return r;
}

}  // namespace
}  // namespace brass::runtime
