// Evaluate a token sequence with brass (one prefill call, logits at every position).
#pragma once

#include <string>
#include <vector>

#include "model/model.h"

namespace brass::oracle {

// (n_tokens, n_vocab) logits of every position of `tokens`, computed in one forward call.
inline std::vector<float> brass_logits(const std::string& gguf, const std::vector<int32_t>& tokens,
                                       const model::ModelOptions& opts, int64_t* n_vocab) {
  auto m = model::Model::load(gguf, opts);
  EXPECT_TRUE(m.is_ok()) << m.status().message();
  if (!m.is_ok()) return {};
  EXPECT_TRUE((*m)->add_sequence(0).is_ok());
  model::SeqChunk chunk{0, std::span<const int32_t>(tokens), 0, true};
  model::ForwardOutput out;
  auto st = (*m)->forward(std::span<const model::SeqChunk>(&chunk, 1), out);
  EXPECT_TRUE(st.is_ok()) << st.message();
  *n_vocab = out.n_vocab;
  return out.logits;
}

}  // namespace brass::oracle
