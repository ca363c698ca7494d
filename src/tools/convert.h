// `brass convert`: a Hugging Face gpt-oss checkpoint directory (config.json,
// *.safetensors with an optional model.safetensors.index.json, tokenizer.json when
// present) -> a GGUF file that llama.cpp and brass load.
//
// Name mapping (as llama.cpp's convert_hf_to_gguf.py GptOssModel does):
//   model.embed_tokens.weight                      -> token_embd.weight        (dense type)
//   lm_head.weight                                 -> output.weight            (dense type)
//   model.norm.weight                              -> output_norm.weight       (F32)
//   model.layers.N.input_layernorm.weight          -> blk.N.attn_norm.weight   (F32)
//   model.layers.N.post_attention_layernorm.weight -> blk.N.post_attention_norm.weight
//   model.layers.N.self_attn.{q,k,v,o}_proj.weight -> blk.N.attn_{q,k,v,output}.weight (dense)
//   model.layers.N.self_attn.{q,k,v,o}_proj.bias   -> blk.N.attn_{q,k,v,output}.bias (F32)
//   model.layers.N.self_attn.sinks                 -> blk.N.attn_sinks.weight  (F32)
//   model.layers.N.mlp.router.{weight,bias}        -> blk.N.ffn_gate_inp.{weight,bias} (F32)
//   model.layers.N.mlp.experts.gate_up_proj*       -> blk.N.ffn_{gate,up}_exps.* (even rows /
//                                                     columns gate, odd up)
//   model.layers.N.mlp.experts.down_proj*          -> blk.N.ffn_down_exps.*
// Experts: MXFP4 *_blocks/*_scales are repacked exactly (quant::mxfp4_hf_to_gguf_block);
// bf16 module parameters gate_up_proj (E, n_embd, 2 n_ff) / down_proj (E, n_ff, n_embd),
// used as x @ W, are transposed to GGUF's (out, in) rows and quantized to MXFP4
// (--experts mxfp4) or written in the dense type (--experts keep).
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "core/status.h"
#include "tools/synth.h"

namespace brass::tools {

struct ConvertOptions {
  std::string dir;
  std::string out_path;
  DType dense = DType::BF16;  // attention / embedding / output weights: F32, F16, BF16, Q8_0
  bool experts_mxfp4 = true;  // false: bf16 experts are written in `dense`
  std::string vocab_file;     // o200k_base.tiktoken, used when there is no tokenizer.json
  int threads = 2;
  bool progress = true;
};

struct ConvertStats {
  int64_t bytes = 0;
  int n_tensors = 0;
  double seconds = 0.0;
  bool source_mxfp4 = false;
  std::string tokenizer_source;  // "tokenizer.json", "o200k (...)", "o200k truncated to N"
};

// Hyperparameters from a config.json (errors name the file and the key).
Result<GptOssShape> read_hf_config(const std::string& config_path, GptOssMetaExtras* extras);

Result<ConvertStats> convert(const ConvertOptions& opts);

}  // namespace brass::tools
