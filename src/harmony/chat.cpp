// Harmony conversation model: role names, builders and harmony's built-in tool
// namespaces (browser, python). The description texts and schemas of the built-in
// tools are data that the model was trained on; they must match harmony's exactly
// (the conformance goldens test_browser_*.txt pin them byte for byte).
#include "harmony/chat.h"

#include <fmt/format.h>

namespace brass::harmony {

std::string_view role_name(Role role) {
  switch (role) {
    case Role::kUser: return "user";
    case Role::kAssistant: return "assistant";
    case Role::kSystem: return "system";
    case Role::kDeveloper: return "developer";
    case Role::kTool: return "tool";
  }
  return "user";
}

std::optional<Role> parse_role(std::string_view name) {
  if (name == "user") return Role::kUser;
  if (name == "assistant") return Role::kAssistant;
  if (name == "system") return Role::kSystem;
  if (name == "developer") return Role::kDeveloper;
  if (name == "tool") return Role::kTool;
  return std::nullopt;
}

std::string_view reasoning_effort_name(ReasoningEffort effort) {
  switch (effort) {
    case ReasoningEffort::kLow: return "low";
    case ReasoningEffort::kMedium: return "medium";
    case ReasoningEffort::kHigh: return "high";
  }
  return "medium";
}

ChannelConfig ChannelConfig::require_channels(std::vector<std::string> channels) {
  return ChannelConfig{std::move(channels), true};
}

ToolNamespaceConfig ToolNamespaceConfig::browser() {
  ToolNamespaceConfig ns;
  ns.name = "browser";
  ns.description =
      "Tool for browsing.\n"
      "The `cursor` appears in brackets before each browsing display: `[{cursor}]`.\n"
      "Cite information from the tool using the following format:\n"
      "`\u3010{cursor}\u2020L{line_start}(-L{line_end})?\u3011`, for example: "
      "`\u30106\u2020L9-L11\u3011` or `\u30108\u2020L3\u3011`.\n"
      "Do not quote more than 10 words directly from the tool output.\n"
      "sources=web (default: web)";
  ns.tools.push_back(ToolDescription{
      "search",
      "Searches for information related to `query` and displays `topn` results.",
      Json::parse(R"({"type": "object",
                      "properties": {"query": {"type": "string"},
                                     "topn": {"type": "number", "default": 10},
                                     "source": {"type": "string"}},
                      "required": ["query"]})")});
  ns.tools.push_back(ToolDescription{
      "open",
      "Opens the link `id` from the page indicated by `cursor` starting at line number `loc`, "
      "showing `num_lines` lines.\n"
      "Valid link ids are displayed with the formatting: `\u3010{id}\u2020.*\u3011`.\n"
      "If `cursor` is not provided, the most recent page is implied.\n"
      "If `id` is a string, it is treated as a fully qualified URL associated with `source`.\n"
      "If `loc` is not provided, the viewport will be positioned at the beginning of the "
      "document or centered on the most relevant passage, if available.\n"
      "Use this function without `id` to scroll to a new location of an opened page.",
      Json::parse(R"({"type": "object",
                      "properties": {"id": {"type": ["number", "string"], "default": -1},
                                     "cursor": {"type": "number", "default": -1},
                                     "loc": {"type": "number", "default": -1},
                                     "num_lines": {"type": "number", "default": -1},
                                     "view_source": {"type": "boolean", "default": false},
                                     "source": {"type": "string"}}})")});
  ns.tools.push_back(ToolDescription{
      "find",
      "Finds exact matches of `pattern` in the current page, or the page given by `cursor`.",
      Json::parse(R"({"type": "object",
                      "properties": {"pattern": {"type": "string"},
                                     "cursor": {"type": "number", "default": -1}},
                      "required": ["pattern"]})")});
  return ns;
}

ToolNamespaceConfig ToolNamespaceConfig::python() {
  ToolNamespaceConfig ns;
  ns.name = "python";
  ns.description =
      "Use this tool to execute Python code in your chain of thought. The code will not be "
      "shown to the user. This tool should be used for internal reasoning, but not for code "
      "that is intended to be visible to the user (e.g. when creating plots, tables, or "
      "files).\n\n"
      "When you send a message containing Python code to python, it will be executed in a "
      "stateful Jupyter notebook environment. python will respond with the output of the "
      "execution or time out after 120.0 seconds. The drive at '/mnt/data' can be used to "
      "save and persist user files. Internet access for this session is UNKNOWN. Depends on "
      "the cluster.";
  return ns;
}

static void insert_namespace(std::optional<ToolNamespaces>& map, ToolNamespaceConfig ns) {
  if (!map) map.emplace();
  std::string key = ns.name;
  (*map)[key] = std::move(ns);
}

SystemContent& SystemContent::with_model_identity(std::string identity) {
  model_identity = std::move(identity);
  return *this;
}
SystemContent& SystemContent::with_reasoning_effort(ReasoningEffort effort) {
  reasoning_effort = effort;
  return *this;
}
SystemContent& SystemContent::with_tools(ToolNamespaceConfig ns) {
  insert_namespace(tools, std::move(ns));
  return *this;
}
SystemContent& SystemContent::with_conversation_start_date(std::string date) {
  conversation_start_date = std::move(date);
  return *this;
}
SystemContent& SystemContent::with_knowledge_cutoff(std::string cutoff) {
  knowledge_cutoff = std::move(cutoff);
  return *this;
}
SystemContent& SystemContent::with_channel_config(ChannelConfig config) {
  channel_config = std::move(config);
  return *this;
}
SystemContent& SystemContent::with_required_channels(std::vector<std::string> channels) {
  channel_config = ChannelConfig::require_channels(std::move(channels));
  return *this;
}

DeveloperContent& DeveloperContent::with_instructions(std::string text) {
  instructions = std::move(text);
  return *this;
}
DeveloperContent& DeveloperContent::with_tools(ToolNamespaceConfig ns) {
  insert_namespace(tools, std::move(ns));
  return *this;
}
DeveloperContent& DeveloperContent::with_function_tools(std::vector<ToolDescription> fns) {
  return with_tools(ToolNamespaceConfig{"functions", std::nullopt, std::move(fns)});
}

Message Message::from_role_and_content(Role role, Content content) {
  return from_author_and_content(Author{role, std::nullopt}, std::move(content));
}

Message Message::from_author_and_content(Author author, Content content) {
  Message m;
  m.author = std::move(author);
  m.content.push_back(std::move(content));
  return m;
}

std::string Message::text() const {
  std::string out;
  for (const auto& c : content) {
    if (const auto* t = std::get_if<TextContent>(&c)) out += t->text;
  }
  return out;
}

std::string debug_string(const Message& m) {
  std::string s = fmt::format("{{role={}", role_name(m.author.role));
  if (m.author.name) s += fmt::format(" name={:?}", *m.author.name);
  if (m.recipient) s += fmt::format(" recipient={:?}", *m.recipient);
  if (m.channel) s += fmt::format(" channel={:?}", *m.channel);
  if (m.content_type) s += fmt::format(" content_type={:?}", *m.content_type);
  for (const auto& c : m.content) {
    if (const auto* t = std::get_if<TextContent>(&c)) {
      s += fmt::format(" text={:?}", t->text);
    } else if (std::holds_alternative<SystemContent>(c)) {
      s += " <system content>";
    } else {
      s += " <developer content>";
    }
  }
  return s + "}";
}

}  // namespace brass::harmony
