// The `brass` subcommands. Each registers its options on a CLI11 app and returns the
// function that runs it (exit code 0 on success, 1 on any error with a clear message).
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace brass::cli {

using Runner = std::function<int()>;

Runner add_run(CLI::App& app);
Runner add_inspect(CLI::App& app);
Runner add_synth(CLI::App& app);
Runner add_convert(CLI::App& app);
Runner add_tokenize(CLI::App& app);
Runner add_detokenize(CLI::App& app);

// Built-in model path: $BRASS_BUILTIN_MODEL, else the file generated at build time.
std::string builtin_model_path();
// o200k_base.tiktoken: $BRASS_VOCAB, else node_modules/ in the source tree.
std::string default_vocab_path();

// Print "brass: error: MSG" to stderr and return 1.
int fail(const std::string& msg);

}  // namespace brass::cli
