// Harmony conversation model: the messages gpt-oss reads and writes. Mirrors the
// openai/harmony `chat` data model (Author, Message, SystemContent, DeveloperContent,
// ToolNamespaceConfig, ToolDescription, ChannelConfig) with the same defaults, so a
// conversation built here renders byte-for-byte as harmony renders it. Tool parameter
// schemas are JSON Schema documents kept as nlohmann::ordered_json: key order matters
// for rendering (harmony's serde_json is built with preserve_order).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace brass::harmony {

using Json = nlohmann::ordered_json;

enum class Role { kUser, kAssistant, kSystem, kDeveloper, kTool };

std::string_view role_name(Role role);                   // "user", "assistant", ...
std::optional<Role> parse_role(std::string_view name);   // exact lowercase names only

struct Author {
  Role role = Role::kUser;
  std::optional<std::string> name;  // tools: "functions.get_weather"; others: rendered as role:name
  bool operator==(const Author&) const = default;
};

enum class ReasoningEffort { kLow, kMedium, kHigh };
std::string_view reasoning_effort_name(ReasoningEffort effort);  // "low" | "medium" | "high"

struct ChannelConfig {
  std::vector<std::string> valid_channels;  // empty: the channels line is not rendered
  bool channel_required = false;
  static ChannelConfig require_channels(std::vector<std::string> channels);
  bool operator==(const ChannelConfig&) const = default;
};

struct ToolDescription {
  std::string name;
  std::string description;
  std::optional<Json> parameters;  // JSON Schema of the single argument object
  bool operator==(const ToolDescription&) const = default;
};

struct ToolNamespaceConfig {
  std::string name;                        // "functions", "browser", "python"
  std::optional<std::string> description;
  std::vector<ToolDescription> tools;
  // harmony's built-in tools, with their exact description texts and schemas.
  static ToolNamespaceConfig browser();
  static ToolNamespaceConfig python();
  bool operator==(const ToolNamespaceConfig&) const = default;
};

// Namespaces keyed (and therefore rendered) in name order, like harmony's BTreeMap.
using ToolNamespaces = std::map<std::string, ToolNamespaceConfig>;

struct SystemContent {
  std::optional<std::string> model_identity =
      std::string("You are ChatGPT, a large language model trained by OpenAI.");
  std::optional<ReasoningEffort> reasoning_effort = ReasoningEffort::kMedium;
  std::optional<ToolNamespaces> tools;
  std::optional<std::string> conversation_start_date;  // "YYYY-MM-DD"
  std::optional<std::string> knowledge_cutoff = std::string("2024-06");
  std::optional<ChannelConfig> channel_config =
      ChannelConfig::require_channels({"analysis", "commentary", "final"});

  SystemContent& with_model_identity(std::string identity);
  SystemContent& with_reasoning_effort(ReasoningEffort effort);
  SystemContent& with_tools(ToolNamespaceConfig ns);  // replaces a namespace of the same name
  SystemContent& with_conversation_start_date(std::string date);
  SystemContent& with_knowledge_cutoff(std::string cutoff);
  SystemContent& with_channel_config(ChannelConfig config);
  SystemContent& with_required_channels(std::vector<std::string> channels);
  SystemContent& with_browser_tool() { return with_tools(ToolNamespaceConfig::browser()); }
  SystemContent& with_python_tool() { return with_tools(ToolNamespaceConfig::python()); }
  bool operator==(const SystemContent&) const = default;
};

struct DeveloperContent {
  std::optional<std::string> instructions;
  std::optional<ToolNamespaces> tools;

  DeveloperContent& with_instructions(std::string text);
  DeveloperContent& with_tools(ToolNamespaceConfig ns);
  DeveloperContent& with_function_tools(std::vector<ToolDescription> tools);  // "functions"
  bool operator==(const DeveloperContent&) const = default;
};

struct TextContent {
  std::string text;
  bool operator==(const TextContent&) const = default;
};

using Content = std::variant<TextContent, SystemContent, DeveloperContent>;

struct Message {
  Author author;
  std::optional<std::string> recipient;     // "functions.get_weather"; "all" is not rendered
  std::optional<std::string> channel;       // "analysis" | "commentary" | "final" | ...
  std::optional<std::string> content_type;  // "<|constrain|>json", "code", ...
  std::vector<Content> content;

  static Message from_role_and_content(Role role, Content content);
  static Message from_role_and_content(Role role, std::string text) {
    return from_role_and_content(role, Content(TextContent{std::move(text)}));
  }
  static Message from_author_and_content(Author author, Content content);
  static Message from_author_and_content(Author author, std::string text) {
    return from_author_and_content(std::move(author), Content(TextContent{std::move(text)}));
  }
  Message& with_channel(std::string c) { channel = std::move(c); return *this; }
  Message& with_recipient(std::string r) { recipient = std::move(r); return *this; }
  Message& with_content_type(std::string t) { content_type = std::move(t); return *this; }
  Message& adding_content(Content c) { content.push_back(std::move(c)); return *this; }

  // Concatenation of the text contents (system/developer contents contribute nothing).
  std::string text() const;
  bool operator==(const Message&) const = default;
};

// Human-readable one-line description for test failure messages and logs.
std::string debug_string(const Message& m);

}  // namespace brass::harmony
