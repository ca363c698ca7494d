// Harmony renderer: messages -> pieces (text | special), following harmony's
// encoding.rs message layout, system/developer templates and analysis-dropping rule.
// Every place harmony makes a separate render_text_into call is a separate text piece
// here, because each becomes a separate encode() and so fixes the token boundaries.
#include "harmony/render.h"

#include <fmt/format.h>

#include "harmony/schema_ts.h"

namespace brass::harmony {
namespace {

void text(Pieces& out, std::string s) { out.push_back(Piece{Piece::Kind::kText, std::move(s)}); }
void special(Pieces& out, std::string_view s) {
  out.push_back(Piece{Piece::Kind::kSpecial, std::string(s)});
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += sep;
    out += parts[i];
  }
  return out;
}

std::string render_system(const SystemContent& sys, const MessageRenderOptions& options) {
  std::vector<std::string> sections;
  std::vector<std::string> top;
  if (sys.model_identity) top.push_back(*sys.model_identity);
  if (sys.knowledge_cutoff) top.push_back("Knowledge cutoff: " + *sys.knowledge_cutoff);
  if (sys.conversation_start_date) top.push_back("Current date: " + *sys.conversation_start_date);
  if (!top.empty()) sections.push_back(join(top, "\n"));
  if (sys.reasoning_effort) {
    sections.push_back(fmt::format("Reasoning: {}", reasoning_effort_name(*sys.reasoning_effort)));
  }
  if (sys.tools && !sys.tools->empty()) sections.push_back(render_tools_section(*sys.tools));
  if (sys.channel_config && !sys.channel_config->valid_channels.empty()) {
    std::string line = "# Valid channels: " + join(sys.channel_config->valid_channels, ", ") + ".";
    if (sys.channel_config->channel_required) line += " Channel must be included for every message.";
    if (options.conversation_has_function_tools) {
      line += "\nCalls to these tools must go to the commentary channel: 'functions'.";
    }
    sections.push_back(std::move(line));
  }
  return join(sections, "\n\n");
}

std::string render_developer(const DeveloperContent& dev) {
  std::vector<std::string> sections;
  if (dev.instructions) {
    sections.push_back("# Instructions");
    sections.push_back(*dev.instructions);
  }
  if (dev.tools && !dev.tools->empty()) sections.push_back(render_tools_section(*dev.tools));
  return join(sections, "\n\n");
}

bool has_function_tools(std::span<const Message> messages) {
  for (const auto& m : messages) {
    for (const auto& c : m.content) {
      const auto* dev = std::get_if<DeveloperContent>(&c);
      if (!dev || !dev->tools) continue;
      auto it = dev->tools->find("functions");
      if (it != dev->tools->end() && !it->second.tools.empty()) return true;
    }
  }
  return false;
}

bool on_channel(const Message& m, std::string_view channel) {
  return m.channel && *m.channel == channel;
}

}  // namespace

Result<Pieces> render_message(const Message& m, const MessageRenderOptions& options) {
  Pieces out;
  special(out, kStart);
  if (m.author.role == Role::kTool) {
    if (!m.author.name) {
      return Status::error("harmony render: tool message without an author name "
                           "(expected e.g. \"functions.get_weather\")");
    }
    text(out, *m.author.name);
  } else {
    text(out, std::string(role_name(m.author.role)));
    if (m.author.name) text(out, ":" + *m.author.name);
  }
  if (m.recipient && *m.recipient != "all") text(out, " to=" + *m.recipient);
  if (m.channel) {
    special(out, kChannel);
    text(out, *m.channel);
  }
  if (m.content_type) {
    std::string_view ct = *m.content_type;
    if (ct.substr(0, kConstrain.size()) == kConstrain) {
      text(out, " ");
      special(out, kConstrain);
      if (ct.size() > kConstrain.size()) text(out, std::string(ct.substr(kConstrain.size())));
    } else {
      text(out, " " + *m.content_type);
    }
  }
  special(out, kMessage);
  for (const auto& c : m.content) {
    if (const auto* t = std::get_if<TextContent>(&c)) {
      text(out, t->text);
    } else if (const auto* sys = std::get_if<SystemContent>(&c)) {
      if (m.author.role != Role::kSystem) {
        return Status::errorf("harmony render: system content in a {} message (expected role system)",
                              role_name(m.author.role));
      }
      text(out, render_system(*sys, options));
    } else {
      const auto& dev = std::get<DeveloperContent>(c);
      if (m.author.role != Role::kDeveloper) {
        return Status::errorf(
            "harmony render: developer content in a {} message (expected role developer)",
            role_name(m.author.role));
      }
      text(out, render_developer(dev));
    }
  }
  special(out, m.author.role == Role::kAssistant && m.recipient ? kCall : kEnd);
  return out;
}

std::vector<size_t> kept_message_indices(std::span<const Message> messages,
                                         const RenderConfig& config) {
  size_t n = messages.size();
  size_t drop_before = 0;  // analysis messages with index < drop_before are dropped
  if (config.auto_drop_analysis) {
    if (config.drop_rule == AnalysisDropRule::kHarmony) {
      bool last_assistant_final = false;
      for (size_t i = n; i-- > 0;) {
        if (messages[i].author.role == Role::kAssistant) {
          last_assistant_final = on_channel(messages[i], "final");
          break;
        }
      }
      if (last_assistant_final) {
        for (size_t i = 0; i < n; ++i) {
          if (on_channel(messages[i], "final")) {
            drop_before = i;
            break;
          }
        }
      }
    } else {
      for (size_t i = n; i-- > 0;) {
        if (on_channel(messages[i], "final")) {
          drop_before = i;
          break;
        }
      }
    }
  }
  std::vector<size_t> kept;
  for (size_t i = 0; i < n; ++i) {
    if (i < drop_before && on_channel(messages[i], "analysis")) continue;
    kept.push_back(i);
  }
  return kept;
}

Result<Pieces> render_conversation(std::span<const Message> messages, const RenderConfig& config) {
  MessageRenderOptions options;
  options.conversation_has_function_tools = has_function_tools(messages);
  Pieces out;
  for (size_t i : kept_message_indices(messages, config)) {
    auto r = render_message(messages[i], options);
    if (!r.is_ok()) return r.status().with_context(fmt::format("message {}", i));
    auto& p = r.value();
    out.insert(out.end(), std::make_move_iterator(p.begin()), std::make_move_iterator(p.end()));
  }
  return out;
}

Result<Pieces> render_conversation_for_completion(std::span<const Message> messages, Role next_role,
                                                  const RenderConfig& config) {
  BRASS_ASSIGN_OR_RETURN(Pieces out, render_conversation(messages, config));
  special(out, kStart);
  text(out, std::string(role_name(next_role)));
  return out;
}

Result<Pieces> render_conversation_for_training(std::span<const Message> messages,
                                                const RenderConfig& config) {
  BRASS_ASSIGN_OR_RETURN(Pieces out, render_conversation(messages, config));
  if (!messages.empty() && !out.empty()) {
    const Message& last = messages.back();
    if (last.author.role == Role::kAssistant && on_channel(last, "final")) {
      out.back() = Piece{Piece::Kind::kSpecial, std::string(kReturn)};
    }
  }
  return out;
}

std::string pieces_to_text(const Pieces& pieces) {
  std::string out;
  for (const auto& p : pieces) out += p.text;
  return out;
}

Result<std::vector<tok::Token>> pieces_to_tokens(const Pieces& pieces, const tok::Tokenizer& tok) {
  std::vector<tok::Token> out;
  for (const auto& p : pieces) {
    if (p.kind == Piece::Kind::kSpecial) {
      auto id = tok.special(p.text);
      if (!id) {
        return Status::errorf("harmony: tokenizer has no special token {} (expected the "
                              "o200k_harmony vocabulary)", p.text);
      }
      out.push_back(*id);
    } else if (!p.text.empty()) {
      auto ids = tok.encode(p.text, /*allow_special=*/false);
      out.insert(out.end(), ids.begin(), ids.end());
    }
  }
  return out;
}

Result<std::vector<tok::Token>> render_prompt_tokens(std::span<const Message> messages,
                                                     const tok::Tokenizer& tok, Role next_role,
                                                     const RenderConfig& config) {
  BRASS_ASSIGN_OR_RETURN(Pieces pieces,
                         render_conversation_for_completion(messages, next_role, config));
  return pieces_to_tokens(pieces, tok);
}

static Result<std::vector<tok::Token>> lookup(const tok::Tokenizer& tok,
                                              std::initializer_list<std::string_view> names) {
  std::vector<tok::Token> out;
  for (auto name : names) {
    auto id = tok.special(name);
    if (!id) return Status::errorf("harmony: tokenizer has no special token {}", name);
    out.push_back(*id);
  }
  return out;
}

Result<std::vector<tok::Token>> stop_tokens(const tok::Tokenizer& tok) {
  return lookup(tok, {kReturn, kCall, kEnd});
}

Result<std::vector<tok::Token>> stop_tokens_for_assistant_actions(const tok::Tokenizer& tok) {
  return lookup(tok, {kReturn, kCall});
}

}  // namespace brass::harmony
