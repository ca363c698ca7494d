// brass: command-line entry point. Subcommands live in cmd_*.cpp; this file only wires
// them into CLI11 and turns every error (including exceptions) into a message and exit 1.
#include <cstdio>
#include <exception>
#include <map>

#include "cli/commands.h"


int main(int argc, char** argv) {
  using namespace brass::cli;
  CLI::App app{"brass: inference engine for OpenAI's gpt-oss models"};
  app.require_subcommand(1);
  std::map<std::string, Runner> runners;
  auto add = [&](const char* name, const char* help, Runner (*fn)(CLI::App&)) {
    CLI::App* sub = app.add_subcommand(name, help);
    runners[name] = fn(*sub);
  };
  add("run", "generate text from a prompt, or chat with --chat (no -m: the built-in tiny model with RANDOM weights)",
      add_run);
  add("inspect", "print a GGUF file's metadata, tensor table and model summary", add_inspect);
  add("synth", "write a gpt-oss GGUF with random weights (20b, 120b or tiny)", add_synth);
  add("convert", "convert a Hugging Face gpt-oss checkpoint directory to GGUF", add_convert);
  add("tokenize", "print the token ids of a text", add_tokenize);
  add("detokenize", "print the text of token ids", add_detokenize);
#ifdef BRASS_HAVE_SERVER
  add("serve", "OpenAI-compatible HTTP server + web chat UI (no -m: the built-in tiny model)", add_serve);
#endif
  add("bench", "llama-bench style prefill / decode speed, GB/s and % of the measured bandwidth floor", add_bench);
  add("render", "render a JSON conversation as a Harmony prompt: text and token ids", add_render);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 1;
  }
  try {
    for (CLI::App* sub : app.get_subcommands()) return runners.at(sub->get_name())();
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  return 1;
}
