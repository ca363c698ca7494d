// The `brass` subcommands. Each registers its options on a CLI11 app and returns the
// function that runs it (exit code 0 on success, 1 on any error with a clear message).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/status.h"
#include "harmony/render.h"
#include "runtime/sampler.h"

namespace brass::cli {

using Runner = std::function<int()>;

Runner add_run(CLI::App& app);
Runner add_inspect(CLI::App& app);
Runner add_synth(CLI::App& app);
Runner add_convert(CLI::App& app);
Runner add_tokenize(CLI::App& app);
Runner add_detokenize(CLI::App& app);
Runner add_render(CLI::App& app);  // cmd_render.cpp
Runner add_serve(CLI::App& app);   // cmd_serve.cpp: the OpenAI-compatible HTTP server
Runner add_bench(CLI::App& app);   // cmd_bench.cpp: llama-bench style prefill / decode speed

// A comma-separated list option ("512,2048" -> {512, 2048}): every entry an integer in
// [lo, hi], at least one; errors name `flag` (cmd_bench.cpp; bench/engine_bench too).
Result<std::vector<int64_t>> parse_list(const std::string& flag, const std::string& s, int64_t lo, int64_t hi);

// `brass run --chat` (cmd_chat.cpp); cmd_run.cpp parses the options.
struct ChatOptions {
  std::string model;                  // empty: the built-in model
  int n_predict = 256;                // max tokens per answer
  runtime::SamplerParams sampler;
  int threads = 0;
  int64_t n_ctx = 4096;
  int64_t kv_tokens = 0;              // KV block pool positions (0: automatic)
  bool yarn_rounded = false;
  std::string moe_tiles = "auto";     // cuda: --moe-tiles auto|on|off (LoadRequest::moe_tiles)
  harmony::ReasoningEffort reasoning = harmony::ReasoningEffort::kMedium;
  std::optional<std::string> instructions;  // --system: the developer message's instructions
  std::optional<std::string> date;          // conversation start date; nullopt: today
  harmony::AnalysisDropRule drop_rule = harmony::AnalysisDropRule::kBeforeLastFinal;  // earlier turns' reasoning dropped, as OpenAI advises
  bool show_prompt = false;                 // print each rendered prompt to stderr
  std::string device = "auto";              // cpu | cuda | auto (cli/load_model.h)
};
int run_chat(const ChatOptions& options);

// "harmony" | "last_final" (also "last-final").
Result<harmony::AnalysisDropRule> parse_drop_rule(const std::string& name);

// Built-in model path: $BRASS_BUILTIN_MODEL, else the file generated at build time.
std::string builtin_model_path();
// o200k_base.tiktoken: $BRASS_VOCAB, else node_modules/ in the source tree.
std::string default_vocab_path();

// Print "brass: error: MSG" to stderr and return 1.
int fail(const std::string& msg);

}  // namespace brass::cli
