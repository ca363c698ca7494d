// Default file locations compiled into the CLI (overridable from the environment).
#include <cstdio>

#include "cli/commands.h"
#include "core/env.h"

namespace brass::cli {

std::string builtin_model_path() {
  if (auto p = env::get("BRASS_BUILTIN_MODEL")) return *p;
  return BRASS_BUILTIN_MODEL_PATH;
}
std::string default_vocab_path() {
  if (auto p = env::get("BRASS_VOCAB")) return *p;
  return BRASS_DEFAULT_VOCAB;
}
int fail(const std::string& msg) {
  std::fprintf(stderr, "brass: error: %s\n", msg.c_str());
  return 1;
}

}  // namespace brass::cli
