// OpenAI chat messages -> Harmony conversation, and generated Harmony tokens -> OpenAI
// deltas (see harmony_map.h for the mapping rules).
#include "server/harmony_map.h"

#include <random>

#include <fmt/format.h>

namespace brass::server {

namespace h = brass::harmony;

std::optional<ApiError> build_conversation(const ConversationSpec& spec, std::vector<h::Message>* out) {
  out->clear();
  h::SystemContent sys;
  sys.with_reasoning_effort(spec.reasoning_effort.value_or(h::ReasoningEffort::kMedium));
  if (!spec.date.empty()) sys.with_conversation_start_date(spec.date);
  out->push_back(h::Message::from_role_and_content(h::Role::kSystem, h::Content(sys)));

  // Instructions: the Responses `instructions`, then every OpenAI system/developer message.
  std::string instructions = spec.instructions.value_or("");
  for (const auto& m : *spec.messages) {
    if (m.role == h::Role::kSystem || m.role == h::Role::kDeveloper) {
      if (!instructions.empty()) instructions += "\n\n";
      instructions += m.content;
    }
  }
  const bool with_tools = spec.tools && !spec.tools->empty() && spec.tool_choice != ToolChoice::kNone;
  if (!instructions.empty() || with_tools) {
    h::DeveloperContent dev;
    if (!instructions.empty()) dev.with_instructions(instructions);
    if (with_tools) {
      std::vector<h::ToolDescription> tools;
      for (const auto& t : *spec.tools) {
        h::ToolDescription d;
        d.name = t.name;
        d.description = t.description;
        if (t.parameters) d.parameters = *t.parameters;
        tools.push_back(std::move(d));
      }
      dev.with_function_tools(std::move(tools));
    }
    out->push_back(h::Message::from_role_and_content(h::Role::kDeveloper, h::Content(dev)));
  }

  const auto& msgs = *spec.messages;
  for (size_t i = 0; i < msgs.size(); ++i) {
    const ChatMessage& m = msgs[i];
    switch (m.role) {
      case h::Role::kSystem:
      case h::Role::kDeveloper:
        break;  // folded into the developer message above
      case h::Role::kUser:
        out->push_back(h::Message::from_role_and_content(h::Role::kUser, m.content));
        break;
      case h::Role::kAssistant: {
        if (m.reasoning && !m.reasoning->empty()) {
          out->push_back(h::Message::from_role_and_content(h::Role::kAssistant, *m.reasoning).with_channel("analysis"));
        }
        if (!m.content.empty()) {
          // With tool calls the text is a preamble (commentary); otherwise the answer.
          out->push_back(h::Message::from_role_and_content(h::Role::kAssistant, m.content)
                             .with_channel(m.tool_calls.empty() ? "final" : "commentary"));
        }
        for (const auto& c : m.tool_calls) {
          out->push_back(h::Message::from_role_and_content(h::Role::kAssistant, c.arguments)
                             .with_channel("commentary")
                             .with_recipient("functions." + c.name)
                             .with_content_type("<|constrain|>json"));
        }
        break;
      }
      case h::Role::kTool: {
        std::optional<std::string> name;
        if (m.tool_call_id) {
          for (size_t j = i; j-- > 0 && !name;) {
            for (const auto& c : msgs[j].tool_calls) {
              if (c.id == *m.tool_call_id) name = c.name;
            }
          }
        }
        if (!name) name = m.name;
        if (!name) {
          return invalid_param(fmt::format("messages[{}].tool_call_id", i),
                               fmt::format("no earlier assistant tool call has id '{}'", m.tool_call_id.value_or("")));
        }
        out->push_back(h::Message::from_author_and_content(h::Author{h::Role::kTool, "functions." + *name}, m.content)
                           .with_recipient("assistant")
                           .with_channel("commentary"));
        break;
      }
    }
  }
  return std::nullopt;
}

std::string random_id(const std::string& prefix) {
  static const char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 rng(std::random_device{}() ^ (uint64_t{std::random_device{}()} << 32));
  std::string s = prefix;
  for (int i = 0; i < 24; ++i) s += kAlnum[rng() % 62];
  return s;
}

Result<std::unique_ptr<OutputMapper>> OutputMapper::create(const tok::Tokenizer& tok, std::vector<std::string> stop,
                                                          std::function<std::string()> make_call_id) {
  h::ParseOptions po;
  po.strict = false;  // a model may emit anything; never fail the request on it
  po.role = h::Role::kAssistant;
  BRASS_ASSIGN_OR_RETURN(auto parser, h::StreamParser::create(tok, po));
  if (!make_call_id) make_call_id = [] { return random_id("call_"); };
  return std::unique_ptr<OutputMapper>(new OutputMapper(tok, std::move(parser), std::move(stop), std::move(make_call_id)));
}

OutputMapper::OutputMapper(const tok::Tokenizer& tok, h::StreamParser parser, std::vector<std::string> stop,
                           std::function<std::string()> make_call_id)
    : tok_(&tok), parser_(std::move(parser)), stop_(std::move(stop)), make_call_id_(std::move(make_call_id)) {
  for (const auto& s : stop_) max_stop_ = std::max(max_stop_, s.size());
}

void OutputMapper::push(int32_t token, std::vector<OutputDelta>* out) {
  last_was_content_ = false;
  if (finished_ || stopped_) return;
  std::vector<h::ParseEvent> events;
  (void)parser_.push(token, &events);  // recovering mode: never fails
  for (const auto& e : events) on_event(e, out);
  last_was_content_ = !tok_->is_special(token) && parser_.in_content() && current_ == OutputDelta::Target::kContent;
}

void OutputMapper::finish(std::vector<OutputDelta>* out) {
  if (finished_) return;
  if (!stopped_) {
    std::vector<h::ParseEvent> events;
    (void)parser_.finish(&events);
    for (const auto& e : events) on_event(e, out);
  }
  flush_held(out);
  if (current_) {
    OutputDelta d;
    d.kind = OutputDelta::Kind::kEnd;
    d.target = *current_;
    if (*current_ == OutputDelta::Target::kToolCall) d.tool_index = static_cast<int>(calls_.size()) - 1;
    out->push_back(d);
    current_.reset();
  }
  finished_ = true;
}

void OutputMapper::on_event(const h::ParseEvent& e, std::vector<OutputDelta>* out) {
  using K = h::ParseEvent::Kind;
  using T = OutputDelta::Target;
  if (stopped_) return;
  switch (e.kind) {
    case K::kMessageStart: {
      const auto& hd = e.header;
      const std::string channel = hd.channel.value_or("");
      OutputDelta d;
      d.kind = OutputDelta::Kind::kStart;
      if (hd.recipient && hd.author.role == h::Role::kAssistant) {
        d.target = T::kToolCall;
        MappedToolCall c;
        c.id = make_call_id_();
        c.name = *hd.recipient;
        if (c.name.rfind("functions.", 0) == 0) c.name = c.name.substr(10);
        d.tool_index = static_cast<int>(calls_.size());
        d.call_id = c.id;
        d.name = c.name;
        calls_.push_back(std::move(c));
      } else if (channel == "analysis") {
        d.target = T::kReasoning;
        has_reasoning_ = true;
        if (!reasoning_.empty()) {  // separate consecutive analysis messages
          reasoning_ += "\n";
          OutputDelta sep;
          sep.target = T::kReasoning;
          sep.text = "\n";
          out->push_back(d);
          current_ = T::kReasoning;
          out->push_back(sep);
          return;
        }
      } else {
        d.target = T::kContent;
        flush_held(out);
      }
      current_ = d.target;
      out->push_back(d);
      break;
    }
    case K::kContentDelta: {
      if (!current_ || e.delta.empty()) break;
      if (*current_ == T::kContent) {
        add_content(e.delta, out);
      } else {
        OutputDelta d;
        d.target = *current_;
        d.text = e.delta;
        if (*current_ == T::kReasoning) {
          reasoning_ += e.delta;
        } else {
          calls_.back().arguments += e.delta;
          d.tool_index = static_cast<int>(calls_.size()) - 1;
        }
        out->push_back(std::move(d));
      }
      break;
    }
    case K::kMessageEnd: {
      if (!current_) break;
      if (*current_ == T::kContent) flush_held(out);
      OutputDelta d;
      d.kind = OutputDelta::Kind::kEnd;
      d.target = *current_;
      if (*current_ == T::kToolCall) d.tool_index = static_cast<int>(calls_.size()) - 1;
      out->push_back(d);
      current_.reset();
      break;
    }
    case K::kToolCall:
      break;  // already reported at its start
  }
}

void OutputMapper::add_content(const std::string& text, std::vector<OutputDelta>* out) {
  held_ += text;
  if (!stop_.empty()) {
    // The earliest stop string in released + held text (a stop may straddle both).
    const size_t from = content_.size() > max_stop_ ? content_.size() - max_stop_ : 0;
    const std::string window = content_.substr(from) + held_;
    size_t best = std::string::npos;
    for (const auto& s : stop_) best = std::min(best, window.find(s));
    if (best != std::string::npos) {
      const size_t abs = from + best;  // position in content_ + held_
      std::string all = content_ + held_;
      const std::string release = abs > content_.size() ? all.substr(content_.size(), abs - content_.size()) : "";
      if (abs < content_.size()) content_.resize(abs);  // cannot happen: released text never holds a stop
      held_.clear();
      if (!release.empty()) {
        OutputDelta d;
        d.target = OutputDelta::Target::kContent;
        d.text = release;
        content_ += release;
        out->push_back(std::move(d));
      }
      stopped_ = true;
      OutputDelta end;
      end.kind = OutputDelta::Kind::kEnd;
      end.target = OutputDelta::Target::kContent;
      out->push_back(end);
      current_.reset();
      return;
    }
  }
  // Release all but the last max_stop_ - 1 bytes, at a UTF-8 character boundary.
  size_t keep = max_stop_ > 0 ? max_stop_ - 1 : 0;
  if (held_.size() <= keep) return;
  size_t cut = held_.size() - keep;
  while (cut > 0 && (static_cast<unsigned char>(held_[cut]) & 0xC0) == 0x80) --cut;
  if (cut == 0) return;
  OutputDelta d;
  d.target = OutputDelta::Target::kContent;
  d.text = held_.substr(0, cut);
  content_ += d.text;
  held_.erase(0, cut);
  out->push_back(std::move(d));
}

void OutputMapper::flush_held(std::vector<OutputDelta>* out) {
  if (held_.empty()) return;
  OutputDelta d;
  d.target = OutputDelta::Target::kContent;
  d.text = std::move(held_);
  held_.clear();
  content_ += d.text;
  out->push_back(std::move(d));
}

}  // namespace brass::server
