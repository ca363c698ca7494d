// `brass run`: load a model, prefill the prompt in one forward call, then decode with
// the sampler, streaming text as it is generated; ends with prefill tok/s, decode tok/s
// and ms/token (stderr), or one JSON object with --json (stdout). Without -m it runs the
// built-in tiny model, whose weights are RANDOM (it exercises the engine, it does not
// produce meaningful text). `brass run --chat` is the interactive Harmony chat
// (cmd_chat.cpp); its options are parsed here.
#include <algorithm>
#include <cstdio>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/load_model.h"
#include "core/timer.h"
#include "gguf/reader.h"
#include "model/model.h"
#include "runtime/sampler.h"
#include "tokenizer/tokenizer.h"

namespace brass::cli {

namespace {

Result<std::vector<int32_t>> parse_ids(const std::string& s, int64_t n_vocab) {
  std::vector<int32_t> ids;
  std::string t = s;
  for (char& c : t) if (c == ',') c = ' ';
  std::istringstream in(t);
  std::string w;
  while (in >> w) {
    char* end = nullptr;
    const long v = std::strtol(w.c_str(), &end, 10);
    if (!end || *end || v < 0 || v >= n_vocab) {
      return Status::errorf("--tokens: \"{}\" is not a token id (0..{})", w, n_vocab - 1);
    }
    ids.push_back(static_cast<int32_t>(v));
  }
  if (ids.empty()) return Status::error("--tokens: no token ids given");
  return ids;
}

}  // namespace

Runner add_run(CLI::App& app) {
  struct Opts {
    std::string model, prompt, tokens;
    int n_predict = 64;
    runtime::SamplerParams sp;
    bool seed_given = false;
    bool json = false, yarn_rounded = false;
    std::string moe_tiles = "auto";
    int threads = 0;
    int64_t n_ctx = 4096;
    int64_t kv_tokens = 0;
    bool chat = false, show_prompt = false;
    std::string reasoning = "medium", system, date, drop_rule = "last_final";
    std::string device = "auto";
  };
  auto o = std::make_shared<Opts>();
  o->sp.temperature = 1.0f;
  app.add_option("-m,--model", o->model,
                 "GGUF file (default: the built-in tiny model: real o200k vocabulary, RANDOM weights)");
  app.add_option("-p,--prompt", o->prompt, "prompt text (special-token spellings like <|start|> are parsed)");
  app.add_option("--tokens", o->tokens, "prompt as token ids, e.g. 1,2,3 (instead of -p)");
  app.add_option("-n,--n-predict", o->n_predict, "tokens to generate")->capture_default_str();
  app.add_option("--temp", o->sp.temperature, "temperature (0: greedy)")->capture_default_str();
  app.add_option("--top-k", o->sp.top_k, "top-k (0: off)")->capture_default_str();
  app.add_option("--top-p", o->sp.top_p, "top-p (1: off)")->capture_default_str();
  app.add_option("--min-p", o->sp.min_p, "min-p (0: off)")->capture_default_str();
  app.add_option("--repeat-penalty", o->sp.repetition_penalty, "repetition penalty (1: off)")->capture_default_str();
  app.add_option("--repeat-last-n", o->sp.penalty_last_n, "penalty window (-1: all, 0: off)")->capture_default_str();
  app.add_option("--presence-penalty", o->sp.presence_penalty, "presence penalty")->capture_default_str();
  app.add_option("--frequency-penalty", o->sp.frequency_penalty, "frequency penalty")->capture_default_str();
  app.add_option("--seed", o->sp.seed, "sampling seed (default: random, printed)");
  app.add_flag("--json", o->json, "print one JSON object {tokens, prompt_tokens, text, timings}");
  app.add_option("-t,--threads", o->threads, "CPU threads (default: BRASS_THREADS or all cores)");
  app.add_option("-c,--ctx", o->n_ctx, "context size per sequence")->capture_default_str();
  app.add_option("--kv-tokens", o->kv_tokens, "positions the KV block pool holds across all sequences (0: automatic)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))->capture_default_str();
  app.add_option("--device", o->device, "cpu | cuda | auto (auto: CUDA when built with it and a GPU is present)")
      ->capture_default_str();
  app.add_option("--moe-tiles", o->moe_tiles, kMoeTilesHelp)->check(CLI::IsMember({"auto", "on", "off"}))->capture_default_str();
  app.add_flag("--yarn-rounded", o->yarn_rounded, "llama.cpp's rounded YaRN ramp (bit-parity with llama.cpp)");
  auto* chat = app.add_flag("--chat", o->chat,
                            "interactive Harmony chat: each stdin line is a user turn (/exit, /reset; EOF ends)");
  app.add_option("--reasoning", o->reasoning, "chat: reasoning effort low|medium|high")
      ->check(CLI::IsMember({"low", "medium", "high"}))->needs(chat)->capture_default_str();
  app.add_option("--system", o->system, "chat: instructions (rendered as the developer message's # Instructions)")
      ->needs(chat);
  app.add_option("--date", o->date, "chat: conversation start date in the system message (default: today; '' for none)")
      ->needs(chat);
  app.add_option("--drop-rule", o->drop_rule, "chat: which earlier analysis the prompt drops: harmony|last_final")
      ->check(CLI::IsMember({"harmony", "last_final", "last-final"}))->needs(chat)->capture_default_str();
  app.add_flag("--show-prompt", o->show_prompt, "chat: print each rendered prompt (text, ids) and the answer ids to stderr")->needs(chat);
  app.footer("Without -m, brass runs its built-in tiny gpt-oss model. Its weights are RANDOM: the output is\n"
             "gibberish by design; it exists to exercise and time the engine.\n\n"
             "--chat: renders the conversation with Harmony each turn, reuses the KV cache for the unchanged\n"
             "prompt prefix, streams the answer (reasoning dimmed on a terminal, \"[reasoning] \" prefixed\n"
             "otherwise; the final channel plain) and prints one stats line per answer to stderr. -n (default\n"
             "256 in chat) caps each answer.");
  return [o, &app]() -> int {
    const bool builtin = o->model.empty();
    if (app.count("--seed") == 0) o->sp.seed = std::random_device{}();
    if (o->n_predict < 0) return fail("-n must be >= 0");
    if (o->chat) {
      if (!o->prompt.empty() || !o->tokens.empty() || o->json) {
        return fail("--chat reads the conversation from stdin: -p, --tokens and --json do not apply");
      }
      ChatOptions c;
      c.model = o->model;
      c.n_predict = app.count("-n") ? o->n_predict : 256;
      c.sampler = o->sp;
      c.threads = o->threads;
      c.n_ctx = o->n_ctx;
      c.kv_tokens = o->kv_tokens;
      c.yarn_rounded = o->yarn_rounded;
      c.reasoning = o->reasoning == "low"    ? harmony::ReasoningEffort::kLow
                    : o->reasoning == "high" ? harmony::ReasoningEffort::kHigh
                                             : harmony::ReasoningEffort::kMedium;
      if (app.count("--system")) c.instructions = o->system;
      if (app.count("--date")) c.date = o->date;
      auto rule = parse_drop_rule(o->drop_rule);
      if (!rule) return fail(rule.status().message());
      c.drop_rule = *rule;
      c.show_prompt = o->show_prompt;
      c.device = o->device;
      c.moe_tiles = o->moe_tiles;
      return run_chat(c);
    }
    if (o->prompt.empty() && o->tokens.empty()) return fail("give a prompt with -p TEXT or --tokens IDS");

    LoadRequest req;
    req.model = o->model;
    req.options.n_threads = o->threads;
    req.options.n_ctx = o->n_ctx;
    req.options.kv_tokens = o->kv_tokens;
    req.options.yarn_rounded = o->yarn_rounded;
    auto tiles = parse_moe_tiles(o->moe_tiles);
    if (!tiles) return fail(tiles.status().message());
    req.moe_tiles = *tiles;
    auto dev = parse_device(o->device);
    if (!dev) return fail(dev.status().message());
    req.device = *dev;
    auto loaded = load_model(req);
    if (!loaded) return fail(loaded.status().message());
    auto& m = *loaded->model;
    const tok::Tokenizer& tk = *loaded->tokenizer;
    const bool synthetic = loaded->synthetic;
    const double load_s = loaded->load_s;
    const int64_t n_vocab = m.config().n_vocab;

    std::vector<int32_t> prompt;
    if (!o->tokens.empty()) {
      auto ids = parse_ids(o->tokens, n_vocab);
      if (!ids) return fail(ids.status().message());
      prompt = *ids;
    } else {
      prompt = tk.encode(o->prompt, /*allow_special=*/true);
      if (prompt.empty()) return fail("the prompt encodes to no tokens");
    }
    if (static_cast<int64_t>(prompt.size()) >= o->n_ctx) {
      return fail(fmt::format("prompt of {} tokens does not fit the context of {}", prompt.size(), o->n_ctx));
    }
    std::set<int32_t> stop;
    for (const char* s : {"<|return|>", "<|call|>", "<|endoftext|>"}) {
      if (auto id = tk.special(s)) stop.insert(*id);
    }
    if (auto eos = m.reader().get_uint("tokenizer.ggml.eos_token_id")) stop.insert(static_cast<int32_t>(*eos));
    // Greedy without penalties on a device: the backend picks the tokens (decode_greedy,
    // kDeviceChunk steps per host round trip); logprobs are then not computed.
    const bool device_greedy = loaded->device == Device::kCuda && is_plain_greedy(o->sp);

    if (!o->json) {
      std::fprintf(stderr, "brass: %s\nbrass: %s\nbrass: device %s%s\n", loaded->path.c_str(), m.summary().c_str(),
                   loaded->device_desc.c_str(), device_greedy ? " (greedy: tokens picked on the device)" : "");
      if (builtin || synthetic) {
        std::fprintf(stderr, "brass: NOTE: this model has RANDOM weights (%s): the text below is gibberish by design\n",
                     builtin ? "built-in tiny model" : "made by brass synth");
      }
      std::fprintf(stderr, "brass: seed %llu, %zu prompt tokens, loaded in %.2f s\n",
                   static_cast<unsigned long long>(o->sp.seed), prompt.size(), load_s);
    }

    if (auto s = m.add_sequence(0); !s) return fail(s.message());
    runtime::Sampler sampler(o->sp);
    tok::StreamDecoder dec(tk);
    std::vector<int32_t> history = prompt, generated;
    std::vector<float> logprobs;
    std::string text, stop_reason = "length";
    model::ForwardOutput out;

    Timer t_prefill;
    model::SeqChunk chunk{0, prompt, 0, false};
    if (auto s = m.forward(std::span<const model::SeqChunk>(&chunk, 1), out); !s) return fail(s.message());
    const double prefill_s = t_prefill.seconds();

    Timer t_decode;
    int n_decoded = 0;  // tokens fed after the prefill (forward calls, or decode_greedy steps)
    // Emits one generated token; false when generation ends with it.
    auto emit = [&](int32_t token, float logprob, int i) -> bool {
      generated.push_back(token);
      history.push_back(token);
      logprobs.push_back(logprob);
      if (stop.count(token)) {
        stop_reason = "stop";
        return false;
      }
      const std::string piece = dec.push(token);
      text += piece;
      if (!o->json) {
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      }
      if (i + 1 == o->n_predict) return false;
      if (static_cast<int64_t>(history.size()) >= o->n_ctx) {
        stop_reason = "context";
        return false;
      }
      return true;
    };
    if (o->n_predict > 0) {
      // The first token always comes from the prefill's logits (host sampler).
      const auto r0 = sampler.sample(std::span<const float>(out.row(0), static_cast<size_t>(n_vocab)), history);
      bool more = emit(r0.token, r0.logprob, 0);
      if (device_greedy) {
        constexpr int64_t kDeviceChunk = 16;  // tokens per decode_greedy call (one host sync each)
        std::vector<int32_t> picked;
        while (more) {
          const int64_t left = std::min<int64_t>(o->n_predict - static_cast<int64_t>(generated.size()),
                                                 o->n_ctx - static_cast<int64_t>(history.size()));
          const int64_t n = std::min(kDeviceChunk, left);
          if (auto s = m.decode_greedy(0, history.back(), n, picked); !s) return fail(s.message());
          n_decoded += static_cast<int>(n);
          for (int32_t t : picked) {
            more = emit(t, std::numeric_limits<float>::quiet_NaN(), static_cast<int>(generated.size()));
            if (!more) break;
          }
        }
      } else {
        while (more) {
          model::SeqChunk step{0, std::span<const int32_t>(&history.back(), 1),
                               static_cast<int32_t>(history.size() - 1), false};
          if (auto s = m.forward(std::span<const model::SeqChunk>(&step, 1), out); !s) return fail(s.message());
          ++n_decoded;
          const auto r = sampler.sample(std::span<const float>(out.row(0), static_cast<size_t>(n_vocab)), history);
          more = emit(r.token, r.logprob, static_cast<int>(generated.size()));
        }
      }
    }
    const double decode_s = t_decode.seconds();
    const std::string tail = dec.flush();
    text += tail;

    const double prefill_tps = prefill_s > 0 ? prompt.size() / prefill_s : 0.0;
    const double decode_tps = decode_s > 0 && n_decoded > 0 ? n_decoded / decode_s : 0.0;
    const double ms_per_token = n_decoded > 0 ? decode_s * 1e3 / n_decoded : 0.0;
    if (o->json) {
      nlohmann::json j;
      j["model"] = loaded->path;
      j["device"] = device_name(loaded->device);
      j["device_greedy"] = device_greedy;
      j["random_weights"] = builtin || synthetic;
      j["seed"] = o->sp.seed;
      j["prompt_tokens"] = prompt.size();
      j["prompt"] = prompt;
      j["tokens"] = generated;
      j["logprobs"] = logprobs;
      j["text"] = text;
      j["stop_reason"] = stop_reason;
      j["timings"] = {{"load_s", load_s},
                      {"prefill_s", prefill_s},
                      {"prefill_tokens_per_s", prefill_tps},
                      {"decode_s", decode_s},
                      {"decode_tokens", n_decoded},
                      {"decode_tokens_per_s", decode_tps},
                      {"ms_per_token", ms_per_token}};
      std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
      std::fwrite(tail.data(), 1, tail.size(), stdout);
      std::printf("\n");
      std::fprintf(stderr, "brass: stop: %s\nbrass: prefill %zu tokens in %.1f ms (%.1f tok/s); decode %d tokens in %.1f ms "
                   "(%.1f tok/s, %.2f ms/token)\n",
                   stop_reason.c_str(), prompt.size(), prefill_s * 1e3, prefill_tps, n_decoded, decode_s * 1e3,
                   decode_tps, ms_per_token);
    }
    return 0;
  };
}

}  // namespace brass::cli
