// `brass tokenize` and `brass detokenize`: the tokenizer of a GGUF file (default: the
// built-in model, whose vocabulary is the real o200k_harmony one).
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>

#include "cli/commands.h"
#include "gguf/reader.h"
#include "tokenizer/tokenizer.h"

namespace brass::cli {

namespace {

Result<std::unique_ptr<tok::Tokenizer>> open_tokenizer(const std::string& model) {
  BRASS_ASSIGN_OR_RETURN(auto r, gguf::Reader::open(model.empty() ? builtin_model_path() : model));
  return tok::Tokenizer::from_gguf(*r);
}

}  // namespace

Runner add_tokenize(CLI::App& app) {
  struct Opts {
    std::string model, text;
    bool special = false;
  };
  auto o = std::make_shared<Opts>();
  app.add_option("-m,--model", o->model, "GGUF file whose tokenizer to use (default: built-in model)");
  app.add_flag("--special", o->special, "spellings of special tokens (<|start|>) become their ids");
  app.add_option("TEXT", o->text, "text, or - for stdin")->required();
  return [o]() -> int {
    auto t = open_tokenizer(o->model);
    if (!t) return fail(t.status().message());
    std::string text = o->text;
    if (text == "-") text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    const auto ids = (*t)->encode(text, o->special);
    std::string out;
    for (size_t i = 0; i < ids.size(); ++i) out += (i ? " " : "") + std::to_string(ids[i]);
    std::printf("%s\n", out.c_str());
    return 0;
  };
}

Runner add_detokenize(CLI::App& app) {
  struct Opts {
    std::string model;
    std::vector<std::string> ids;
  };
  auto o = std::make_shared<Opts>();
  app.add_option("-m,--model", o->model, "GGUF file whose tokenizer to use (default: built-in model)");
  app.add_option("IDS", o->ids, "token ids (space or comma separated)")->required();
  return [o]() -> int {
    auto t = open_tokenizer(o->model);
    if (!t) return fail(t.status().message());
    std::vector<tok::Token> ids;
    for (std::string s : o->ids) {
      for (char& c : s) if (c == ',') c = ' ';
      std::istringstream in(s);
      std::string w;
      while (in >> w) {
        char* end = nullptr;
        const long v = std::strtol(w.c_str(), &end, 10);
        if (!end || *end || v < 0 || v >= (*t)->n_vocab()) {
          return fail(fmt::format("\"{}\" is not a token id (0..{})", w, (*t)->n_vocab() - 1));
        }
        ids.push_back(static_cast<tok::Token>(v));
      }
    }
    const std::string text = (*t)->decode(ids);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::printf("\n");
    return 0;
  };
}

}  // namespace brass::cli
