// `brass run --chat`: an interactive Harmony chat in the terminal (options parsed in
// cmd_run.cpp). Each stdin line is a user turn (a pipe works: one turn per line, EOF
// ends); /exit ends, /reset starts a new conversation, /help lists the commands.
//
// Per turn: the conversation (system + optional developer message + the user and
// assistant messages so far) is rendered with harmony::render_prompt_tokens, so the
// history rules (earlier analysis dropped, <|return|> stored as <|end|>) are the
// renderer's. The KV cache keeps the tokens fed so far; the new prompt reuses its
// longest common prefix with them (the history rules may change earlier tokens, and
// re-tokenized text may differ from what the model sampled), the cache is truncated
// there, and only the rest is prefilled. The answer is sampled token by token into a
// recovering StreamParser (so malformed Harmony from a random-weight model never ends
// the chat) until <|return|>, <|call|>, EOS, an <|end|> that ends a final-channel
// message, -n tokens, or the context limit. The parsed assistant messages join the
// history.
//
// Display (chat_display.h): the final channel is printed plainly on stdout; analysis (reasoning) is
// dimmed (ANSI \x1b[2m) when stdout is a terminal and NO_COLOR is unset, otherwise
// prefixed "[reasoning] "; other channels and tool calls get a "[channel to=...]"
// label. When nothing parsed as a message (typical of random weights) the raw decoded
// text is shown as "[unparsed] ...". --show-prompt prints each rendered prompt (text and
// ids) and the answer's ids to stderr. After each answer one stats line goes to stderr:
//   brass: prompt: N new tokens, M reused (...); answer: K tokens in ... (X tok/s); stop: ...
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <memory>
#include <set>
#include <string>

#include "cli/chat_display.h"
#include "cli/commands.h"
#include "cli/load_model.h"
#include "core/env.h"
#include "core/timer.h"
#include "gguf/reader.h"
#include "harmony/parser.h"
#include "harmony/render.h"
#include "model/model.h"
#include "runtime/sampler.h"
#include "tokenizer/tokenizer.h"

namespace brass::cli {

namespace {

volatile std::sig_atomic_t g_interrupted = 0;
extern "C" void on_sigint(int) { g_interrupted = 1; }

// Ctrl-C while an answer is generated ends that answer (not the program).
class SigintGuard {
 public:
  SigintGuard() {
    g_interrupted = 0;
    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_);
  }
  ~SigintGuard() { sigaction(SIGINT, &old_, nullptr); }

 private:
  struct sigaction old_ {};
};

std::string today() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

std::string join_ids(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? " " : "") + std::to_string(ids[i]);
  return s;
}

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

}  // namespace

int run_chat(const ChatOptions& o) {
  const bool builtin = o.model.empty();
  if (o.n_predict <= 0) return fail("-n must be > 0 in chat mode");
  auto dev = parse_device(o.device);
  if (!dev) return fail(dev.status().message());
  LoadRequest req;
  req.model = o.model;
  req.device = *dev;
  req.options.n_threads = o.threads;
  req.options.n_ctx = o.n_ctx;
  req.options.kv_tokens = o.kv_tokens;
  auto tiles = parse_moe_tiles(o.moe_tiles);
  if (!tiles) return fail(tiles.status().message());
  req.moe_tiles = *tiles;
  req.options.yarn_rounded = o.yarn_rounded;
  auto loaded = load_model(req);
  if (!loaded) return fail(loaded.status().message());
  const std::string& path = loaded->path;
  const bool synthetic = loaded->synthetic;
  const tok::Tokenizer& tk = *loaded->tokenizer;
  model::Model& m = *loaded->model;
  // Greedy without penalties on a device: the backend picks each next token
  // (decode_greedy, one step per call) and no logits row is copied back.
  const bool device_greedy = loaded->device == Device::kCuda && is_plain_greedy(o.sampler);
  const int64_t n_vocab = m.config().n_vocab;

  // Turn-ending tokens: <|return|>, <|call|> (harmony's assistant-action stops) and EOS.
  auto action_stops = harmony::stop_tokens_for_assistant_actions(tk);
  if (!action_stops) return fail(action_stops.status().message());
  std::set<int32_t> stop(action_stops->begin(), action_stops->end());
  if (auto id = tk.special("<|endoftext|>")) stop.insert(*id);
  if (auto eos = m.reader().get_uint("tokenizer.ggml.eos_token_id")) stop.insert(static_cast<int32_t>(*eos));

  harmony::SystemContent sys;
  sys.with_reasoning_effort(o.reasoning);
  const std::string date = o.date ? *o.date : today();
  if (!date.empty()) sys.with_conversation_start_date(date);
  std::vector<harmony::Message> head = {harmony::Message::from_role_and_content(harmony::Role::kSystem, sys)};
  if (o.instructions) {
    harmony::DeveloperContent dev;
    dev.with_instructions(*o.instructions);
    head.push_back(harmony::Message::from_role_and_content(harmony::Role::kDeveloper, dev));
  }
  harmony::RenderConfig render_config;
  render_config.drop_rule = o.drop_rule;

  const bool tty_in = isatty(STDIN_FILENO) == 1;
  const bool color = isatty(STDOUT_FILENO) == 1 && !env::get("NO_COLOR");
  std::fprintf(stderr, "brass: %s\nbrass: %s\n", path.c_str(), m.summary().c_str());
  if (builtin || synthetic) {
    std::fprintf(stderr, "brass: NOTE: this model has RANDOM weights (%s): its answers are gibberish and rarely "
                 "well-formed Harmony\n", builtin ? "built-in tiny model" : "made by brass synth");
  }
  std::fprintf(stderr, "brass: chat: reasoning %s, seed %llu, up to %d tokens per answer, loaded in %.2f s\n",
               std::string(harmony::reasoning_effort_name(o.reasoning)).c_str(),
               static_cast<unsigned long long>(o.sampler.seed), o.n_predict, loaded->load_s);
  std::fprintf(stderr, "brass: device %s%s\n", loaded->device_desc.c_str(),
               device_greedy ? " (greedy: tokens picked on the device)" : "");
  if (tty_in) std::fprintf(stderr, "brass: type a message; /exit to quit, /reset for a new conversation\n");

  if (auto s = m.add_sequence(0); !s) return fail(s.message());
  runtime::Sampler sampler(o.sampler);
  std::vector<harmony::Message> history;  // user + assistant messages
  std::vector<int32_t> kv_tokens;         // tokens in the KV cache, positions 0..size-1
  model::ForwardOutput out;
  int rc = 0;
  std::string line;
  for (int turn = 1;;) {
    if (tty_in) {
      std::printf("%s>>> ", turn > 1 ? "\n" : "");
      std::fflush(stdout);
    }
    if (!std::getline(std::cin, line)) break;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/help") {
      std::fprintf(stderr, "brass: /exit (or EOF) quits, /reset starts a new conversation\n");
      continue;
    }
    if (line == "/reset") {
      history.clear();  // the KV cache stays: the next prompt reuses its system prefix
      std::fprintf(stderr, "brass: new conversation\n");
      continue;
    }

    history.push_back(harmony::Message::from_role_and_content(harmony::Role::kUser, line));
    std::vector<harmony::Message> convo = head;
    convo.insert(convo.end(), history.begin(), history.end());
    auto pieces = harmony::render_conversation_for_completion(convo, harmony::Role::kAssistant, render_config);
    if (!pieces) return fail(pieces.status().message());
    auto prompt_r = harmony::pieces_to_tokens(*pieces, tk);
    if (!prompt_r) return fail(prompt_r.status().message());
    const std::vector<int32_t> prompt(prompt_r->begin(), prompt_r->end());
    if (o.show_prompt) {
      std::fprintf(stderr, "brass: prompt (turn %d, %zu tokens):\n%s\nbrass: prompt ids: %s\n", turn, prompt.size(),
                   harmony::pieces_to_text(*pieces).c_str(), join_ids(prompt).c_str());
    }
    if (static_cast<int64_t>(prompt.size()) >= o.n_ctx) {
      history.pop_back();
      rc = 1;
      std::fprintf(stderr, "brass: error: the conversation is %zu tokens, the context holds %lld: /reset to start "
                   "over (or a larger -c)\n", prompt.size(), static_cast<long long>(o.n_ctx));
      continue;
    }

    // Reuse the cached prefix; at least one token is fed to get the next logits.
    size_t reuse = common_prefix(kv_tokens, prompt);
    if (reuse == prompt.size()) --reuse;
    if (auto s = m.truncate_sequence(0, static_cast<int64_t>(reuse)); !s) return fail(s.message());
    kv_tokens.assign(prompt.begin(), prompt.end());
    const std::span<const int32_t> fresh(prompt.data() + reuse, prompt.size() - reuse);
    Timer t_prefill;
    model::SeqChunk chunk{0, fresh, static_cast<int32_t>(reuse), false};
    if (auto s = m.forward(std::span<const model::SeqChunk>(&chunk, 1), out); !s) return fail(s.message());
    const double prefill_s = t_prefill.seconds();

    harmony::ParseOptions po;
    po.strict = false;
    po.role = harmony::Role::kAssistant;
    auto parser_r = harmony::StreamParser::create(tk, po);
    if (!parser_r) return fail(parser_r.status().message());
    harmony::StreamParser& parser = *parser_r;
    ChatDisplay display(stdout, color);
    std::vector<harmony::ParseEvent> events;
    std::vector<int32_t> generated;
    std::string stop_reason = "length";
    Timer t_decode;
    {
      SigintGuard guard;
      int32_t next = -1;  // device_greedy: the token decode_greedy picked
      std::vector<int32_t> picked;
      for (int i = 0;; ++i) {
        runtime::SampleResult r;
        if (next >= 0) {
          r.token = next;
        } else {
          r = sampler.sample(std::span<const float>(out.row(0), static_cast<size_t>(n_vocab)), kv_tokens);
        }
        generated.push_back(r.token);
        events.clear();
        (void)parser.push(r.token, &events);  // recovering mode: never fails
        bool final_ended = false;
        for (const auto& e : events) {
          display.on_event(e);
          final_ended = final_ended || (e.kind == harmony::ParseEvent::Kind::kMessageEnd &&
                                        e.message.channel == std::string("final"));
        }
        if (stop.count(r.token)) {
          stop_reason = tk.token_bytes(r.token).empty() ? "stop token" : std::string(tk.token_bytes(r.token));
          break;
        }
        if (final_ended) {
          stop_reason = "end of final message";
          break;
        }
        if (i + 1 >= o.n_predict) break;
        if (g_interrupted) {
          stop_reason = "interrupted";
          break;
        }
        if (static_cast<int64_t>(kv_tokens.size()) >= o.n_ctx) {
          stop_reason = "context full";
          break;
        }
        if (device_greedy) {
          if (auto s = m.decode_greedy(0, r.token, 1, picked); !s) return fail(s.message());
          next = picked[0];
        } else {
          model::SeqChunk step{0, std::span<const int32_t>(&generated.back(), 1),
                               static_cast<int32_t>(kv_tokens.size()), false};
          if (auto s = m.forward(std::span<const model::SeqChunk>(&step, 1), out); !s) return fail(s.message());
        }
        kv_tokens.push_back(r.token);
      }
    }
    const double decode_s = t_decode.seconds();
    events.clear();
    (void)parser.finish(&events);
    for (const auto& e : events) display.on_event(e);
    if (!display.shown_content()) {
      std::vector<tok::Token> text_tokens;
      for (int32_t t : generated) if (!stop.count(t)) text_tokens.push_back(t);
      display.unparsed(tk.decode(text_tokens));
    }
    display.end_turn();

    size_t kept = 0;
    for (const auto& msg : parser.messages()) {
      if (msg.author.role != harmony::Role::kAssistant) continue;  // the model wrote another role's turn
      history.push_back(msg);
      ++kept;
    }
    if (o.show_prompt) std::fprintf(stderr, "brass: answer ids: %s\n", join_ids(generated).c_str());
    const double prefill_tps = prefill_s > 0 ? fresh.size() / prefill_s : 0.0;
    const double decode_tps = decode_s > 0 ? generated.size() / decode_s : 0.0;
    std::string warn;
    if (!parser.warnings().empty()) {
      warn = fmt::format("; not well-formed Harmony ({} parser warnings)", parser.warnings().size());
    }
    std::fprintf(stderr, "brass: prompt: %zu new tokens, %zu reused (%.1f tok/s); answer: %zu tokens in %.1f ms "
                 "(%.1f tok/s), %zu message%s; stop: %s%s\n",
                 fresh.size(), reuse, prefill_tps, generated.size(), decode_s * 1e3, decode_tps, kept,
                 kept == 1 ? "" : "s", stop_reason.c_str(), warn.c_str());
    ++turn;
  }
  if (tty_in) std::printf("\n");
  return rc;
}

}  // namespace brass::cli
