// `brass render FILE.json|-`: a conversation written as JSON -> the Harmony prompt text
// gpt-oss reads and its token ids (src/harmony/render.h does the rendering; this file
// owns the JSON schema below and its validation).
//
// The JSON schema (close to OpenAI chat messages, plus Harmony's system/developer fields):
//   {
//     "system": {                      optional; absent or null: no system message;
//                                      {} renders harmony's defaults
//       "model_identity": "...",       default "You are ChatGPT, a large language model
//                                      trained by OpenAI."; null leaves the line out
//       "reasoning_effort": "low|medium|high",   default "medium"; null: no line
//       "conversation_start_date": "YYYY-MM-DD", default none
//       "knowledge_cutoff": "YYYY-MM",           default "2024-06"; null: no line
//       "valid_channels": ["analysis", ...],     default analysis, commentary, final;
//                                                [] or null: no channel line
//       "builtin_tools": ["browser", "python"]   harmony's built-in tool namespaces
//     },
//     "developer": {                   optional; absent or null: no developer message
//       "instructions": "...",
//       "tools": [{"name": "get_weather", "description": "...", "parameters": {JSON Schema}}]
//                                      (OpenAI's {"type": "function", "function": {...}}
//                                      wrapper is accepted too); rendered as namespace
//                                      "functions"
//     },
//     "messages": [{                   rendered after the system and developer messages
//       "role": "user|assistant|tool|system|developer",   required
//       "content": "...",              required string (system/developer messages may
//                                      also give an object shaped like "system" /
//                                      "developer" above)
//       "channel": "analysis|commentary|final",   optional (assistant messages)
//       "recipient": "functions.x",    optional: a tool call (assistant) or "assistant"
//       "content_type": "<|constrain|>json",       optional, rendered verbatim after the
//                                      header ("json", "code", "<|constrain|>json")
//       "name": "functions.x"          the tool's name: required for role "tool" (the
//                                      header is the name), optional "role:name" else
//     }],
//     "add_generation_prompt": true,   default true: end with <|start|>assistant
//     "auto_drop_analysis": true,      default true: drop earlier analysis messages
//     "drop_rule": "harmony|last_final"   which analysis is dropped (render.h): harmony
//                                      main's rule (default) or "before the last final"
//   }
// Unknown keys are errors (a misspelt key would otherwise be silently ignored).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>

#include "cli/commands.h"
#include "gguf/reader.h"
#include "harmony/render.h"
#include "tokenizer/tokenizer.h"

namespace brass::cli {

namespace {

using harmony::Json;

struct RenderRequest {
  std::vector<harmony::Message> messages;
  bool add_generation_prompt = true;
  harmony::RenderConfig config;
};

// A JSON value being read, with its path ("messages[2].role") for error messages.
class Field {
 public:
  Field(const Json& v, std::string path) : v_(v), path_(std::move(path)) {}
  const Json& value() const { return v_; }
  const std::string& path() const { return path_; }
  Field at(const std::string& key) const {
    return Field(v_.at(key), path_.empty() ? key : path_ + "." + key);
  }
  Field at(size_t i) const { return Field(v_.at(i), path_ + "[" + std::to_string(i) + "]"); }
  bool has(const char* key) const { return v_.is_object() && v_.contains(key); }
  bool has_non_null(const char* key) const { return has(key) && !v_.at(key).is_null(); }

  Status wrong_type(const char* expected) const {
    return Status::errorf("field \"{}\": expected {}, found {}", path_, expected, found());
  }
  Status bad_value(const std::string& what) const {
    return Status::errorf("field \"{}\": {}", path_, what);
  }
  Result<std::string> string() const {
    if (!v_.is_string()) return wrong_type("a string");
    return v_.get<std::string>();
  }
  Result<bool> boolean() const {
    if (!v_.is_boolean()) return wrong_type("true or false");
    return v_.get<bool>();
  }
  Status object(std::initializer_list<const char*> allowed) const {
    if (!v_.is_object()) return wrong_type("an object");
    for (const auto& [key, _] : v_.items()) {
      bool ok = false;
      for (const char* a : allowed) ok = ok || key == a;
      if (!ok) {
        std::string list;
        for (const char* a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
        return Status::errorf("field \"{}\": unknown key \"{}\" (expected one of: {})",
                              path_.empty() ? "(top level)" : path_, key, list);
      }
    }
    return Status::ok();
  }
  Result<std::vector<std::string>> strings() const {
    if (!v_.is_array()) return wrong_type("an array of strings");
    std::vector<std::string> out;
    for (size_t i = 0; i < v_.size(); ++i) {
      BRASS_ASSIGN_OR_RETURN(auto s, at(i).string());
      out.push_back(std::move(s));
    }
    return out;
  }

 private:
  std::string found() const {
    if (v_.is_string()) {
      std::string s = v_.get<std::string>();
      if (s.size() > 40) s = s.substr(0, 40) + "...";
      return "string \"" + s + "\"";
    }
    return v_.type_name();
  }
  const Json& v_;
  std::string path_;
};

// An optional string field where null means "leave it out" (std::nullopt).
Status read_nullable_string(const Field& f, const char* key, std::optional<std::string>& dst) {
  if (!f.has(key)) return Status::ok();
  const Field v = f.at(key);
  if (v.value().is_null()) {
    dst.reset();
    return Status::ok();
  }
  BRASS_ASSIGN_OR_RETURN(dst, v.string());
  return Status::ok();
}

Result<harmony::SystemContent> parse_system(const Field& f) {
  BRASS_TRY(f.object({"model_identity", "reasoning_effort", "conversation_start_date", "knowledge_cutoff",
                      "valid_channels", "builtin_tools"}));
  harmony::SystemContent sys;
  BRASS_TRY(read_nullable_string(f, "model_identity", sys.model_identity));
  BRASS_TRY(read_nullable_string(f, "conversation_start_date", sys.conversation_start_date));
  BRASS_TRY(read_nullable_string(f, "knowledge_cutoff", sys.knowledge_cutoff));
  if (f.has("reasoning_effort")) {
    const Field e = f.at("reasoning_effort");
    if (e.value().is_null()) {
      sys.reasoning_effort.reset();
    } else {
      BRASS_ASSIGN_OR_RETURN(const std::string s, e.string());
      if (s == "low") sys.reasoning_effort = harmony::ReasoningEffort::kLow;
      else if (s == "medium") sys.reasoning_effort = harmony::ReasoningEffort::kMedium;
      else if (s == "high") sys.reasoning_effort = harmony::ReasoningEffort::kHigh;
      else return e.bad_value("expected \"low\", \"medium\" or \"high\", found \"" + s + "\"");
    }
  }
  if (f.has("valid_channels")) {
    const Field c = f.at("valid_channels");
    if (c.value().is_null()) {
      sys.channel_config.reset();
    } else {
      BRASS_ASSIGN_OR_RETURN(auto channels, c.strings());
      if (channels.empty()) sys.channel_config.reset();
      else sys.with_required_channels(std::move(channels));
    }
  }
  if (f.has_non_null("builtin_tools")) {
    const Field t = f.at("builtin_tools");
    BRASS_ASSIGN_OR_RETURN(auto names, t.strings());
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i] == "browser") sys.with_browser_tool();
      else if (names[i] == "python") sys.with_python_tool();
      else return t.at(i).bad_value("expected \"browser\" or \"python\", found \"" + names[i] + "\"");
    }
  }
  return sys;
}

Result<harmony::ToolDescription> parse_tool(const Field& f) {
  // OpenAI's tools format: {"type": "function", "function": {name, description, parameters}}.
  if (f.has("function")) {
    BRASS_TRY(f.object({"type", "function"}));
    if (f.has("type")) {
      BRASS_ASSIGN_OR_RETURN(const std::string type, f.at("type").string());
      if (type != "function") return f.at("type").bad_value("expected \"function\", found \"" + type + "\"");
    }
    return parse_tool(f.at("function"));
  }
  BRASS_TRY(f.object({"name", "description", "parameters", "strict"}));
  harmony::ToolDescription tool;
  if (!f.has("name")) return f.bad_value("missing \"name\"");
  BRASS_ASSIGN_OR_RETURN(tool.name, f.at("name").string());
  if (tool.name.empty()) return f.at("name").bad_value("empty tool name");
  if (f.has_non_null("description")) {
    BRASS_ASSIGN_OR_RETURN(tool.description, f.at("description").string());
  }
  if (f.has_non_null("parameters")) {
    const Field p = f.at("parameters");
    if (!p.value().is_object()) return p.wrong_type("a JSON Schema object");
    tool.parameters = p.value();
  }
  return tool;
}

Result<harmony::DeveloperContent> parse_developer(const Field& f) {
  BRASS_TRY(f.object({"instructions", "tools"}));
  harmony::DeveloperContent dev;
  BRASS_TRY(read_nullable_string(f, "instructions", dev.instructions));
  if (f.has_non_null("tools")) {
    const Field t = f.at("tools");
    if (!t.value().is_array()) return t.wrong_type("an array of tools");
    std::vector<harmony::ToolDescription> tools;
    for (size_t i = 0; i < t.value().size(); ++i) {
      BRASS_ASSIGN_OR_RETURN(auto tool, parse_tool(t.at(i)));
      tools.push_back(std::move(tool));
    }
    if (!tools.empty()) dev.with_function_tools(std::move(tools));
  }
  return dev;
}

Result<harmony::Message> parse_message(const Field& f) {
  BRASS_TRY(f.object({"role", "content", "channel", "recipient", "content_type", "name"}));
  if (!f.has("role")) return f.bad_value("missing \"role\"");
  const Field r = f.at("role");
  BRASS_ASSIGN_OR_RETURN(const std::string role_s, r.string());
  const auto role = harmony::parse_role(role_s);
  if (!role) {
    return r.bad_value("unknown role \"" + role_s + "\" (expected user, assistant, tool, system or developer)");
  }
  harmony::Author author{*role, std::nullopt};
  if (f.has_non_null("name")) {
    BRASS_ASSIGN_OR_RETURN(author.name, f.at("name").string());
  }
  if (*role == harmony::Role::kTool && (!author.name || author.name->empty())) {
    return f.bad_value("a tool message needs \"name\": the tool that wrote it, e.g. \"functions.get_weather\"");
  }
  if (!f.has("content")) return f.bad_value("missing \"content\"");
  const Field c = f.at("content");
  harmony::Content content;
  if (c.value().is_object() && *role == harmony::Role::kSystem) {
    BRASS_ASSIGN_OR_RETURN(content, parse_system(c));
  } else if (c.value().is_object() && *role == harmony::Role::kDeveloper) {
    BRASS_ASSIGN_OR_RETURN(content, parse_developer(c));
  } else if (c.value().is_string()) {
    content = harmony::TextContent{c.value().get<std::string>()};
  } else {
    return c.wrong_type(*role == harmony::Role::kSystem || *role == harmony::Role::kDeveloper
                            ? "a string or an object"
                            : "a string");
  }
  harmony::Message m = harmony::Message::from_author_and_content(std::move(author), std::move(content));
  for (auto [key, dst] : {std::pair{"channel", &m.channel}, std::pair{"recipient", &m.recipient},
                          std::pair{"content_type", &m.content_type}}) {
    if (!f.has_non_null(key)) continue;
    BRASS_ASSIGN_OR_RETURN(*dst, f.at(key).string());
    if ((*dst)->empty()) return f.at(key).bad_value("empty string (leave the key out instead)");
  }
  return m;
}

Result<RenderRequest> parse_request(const std::string& text) {
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Json::parse_error& e) {
    return Status::errorf("invalid JSON: {}", e.what());
  }
  const Field top(j, "");
  BRASS_TRY(top.object({"system", "developer", "messages", "add_generation_prompt", "auto_drop_analysis",
                        "drop_rule"}));
  RenderRequest req;
  if (top.has_non_null("system")) {
    BRASS_ASSIGN_OR_RETURN(auto sys, parse_system(top.at("system")));
    req.messages.push_back(harmony::Message::from_role_and_content(harmony::Role::kSystem, std::move(sys)));
  }
  if (top.has_non_null("developer")) {
    BRASS_ASSIGN_OR_RETURN(auto dev, parse_developer(top.at("developer")));
    req.messages.push_back(harmony::Message::from_role_and_content(harmony::Role::kDeveloper, std::move(dev)));
  }
  if (top.has_non_null("messages")) {
    const Field ms = top.at("messages");
    if (!ms.value().is_array()) return ms.wrong_type("an array of messages");
    for (size_t i = 0; i < ms.value().size(); ++i) {
      BRASS_ASSIGN_OR_RETURN(auto m, parse_message(ms.at(i)));
      req.messages.push_back(std::move(m));
    }
  }
  if (top.has("add_generation_prompt")) {
    BRASS_ASSIGN_OR_RETURN(req.add_generation_prompt, top.at("add_generation_prompt").boolean());
  }
  if (top.has("auto_drop_analysis")) {
    BRASS_ASSIGN_OR_RETURN(req.config.auto_drop_analysis, top.at("auto_drop_analysis").boolean());
  }
  if (top.has("drop_rule")) {
    const Field d = top.at("drop_rule");
    BRASS_ASSIGN_OR_RETURN(const std::string rule, d.string());
    BRASS_ASSIGN_OR_RETURN(req.config.drop_rule, parse_drop_rule(rule));
  }
  if (req.messages.empty()) return Status::error("the conversation has no messages (no system, developer or messages)");
  return req;
}

}  // namespace

Result<harmony::AnalysisDropRule> parse_drop_rule(const std::string& name) {
  if (name == "harmony") return harmony::AnalysisDropRule::kHarmony;
  if (name == "last_final" || name == "last-final") return harmony::AnalysisDropRule::kBeforeLastFinal;
  return Status::errorf("field \"drop_rule\": expected \"harmony\" or \"last_final\", found \"{}\"", name);
}

Runner add_render(CLI::App& app) {
  struct Opts {
    std::string model, file;
    bool ids_only = false, text_only = false;
  };
  auto o = std::make_shared<Opts>();
  app.add_option("-m,--model", o->model, "GGUF file whose tokenizer to use (default: the built-in model)");
  app.add_option("FILE", o->file, "conversation JSON file, or - for stdin")->required();
  auto* ids = app.add_flag("--ids-only", o->ids_only, "print only the token ids");
  app.add_flag("--text-only", o->text_only, "print only the rendered text")->excludes(ids);
  app.footer(R"(Prints the Harmony prompt text, a newline, then the token ids on the last line.

Conversation JSON (all keys optional except messages[].role/content; unknown keys are errors):
  {"system": {"reasoning_effort": "low|medium|high", "model_identity": "...",
              "conversation_start_date": "YYYY-MM-DD", "knowledge_cutoff": "YYYY-MM",
              "valid_channels": ["analysis", "commentary", "final"],
              "builtin_tools": ["browser", "python"]},
   "developer": {"instructions": "...",
                 "tools": [{"name": "get_weather", "description": "...",
                            "parameters": {JSON Schema}}]},
   "messages": [{"role": "user|assistant|tool|system|developer", "content": "...",
                 "channel": "analysis|commentary|final", "recipient": "functions.get_weather",
                 "content_type": "<|constrain|>json", "name": "functions.get_weather"}],
   "add_generation_prompt": true, "auto_drop_analysis": true, "drop_rule": "harmony|last_final"}
No "system" key: no system message ({} gives harmony's defaults: ChatGPT identity, knowledge
cutoff 2024-06, reasoning medium, channels analysis/commentary/final). A tool message needs
"name" (its header). Tools may also use OpenAI's {"type": "function", "function": {...}} form;
a system/developer entry of "messages" may give an object like "system"/"developer" as content.
add_generation_prompt (default true) ends with <|start|>assistant.)");
  return [o]() -> int {
    std::string text;
    if (o->file == "-") {
      text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    } else {
      std::ifstream f(o->file, std::ios::binary);
      if (!f) return fail(o->file + ": cannot open");
      text.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    }
    const std::string where = o->file == "-" ? "stdin" : o->file;
    auto req = parse_request(text);
    if (!req) return fail(where + ": " + req.status().message());
    auto pieces = req->add_generation_prompt
                      ? harmony::render_conversation_for_completion(req->messages, harmony::Role::kAssistant,
                                                                    req->config)
                      : harmony::render_conversation(req->messages, req->config);
    if (!pieces) return fail(where + ": " + pieces.status().message());
    std::vector<tok::Token> tokens;
    if (!o->text_only) {
      auto reader = gguf::Reader::open(o->model.empty() ? builtin_model_path() : o->model);
      if (!reader) return fail(reader.status().message());
      auto tokenizer = tok::Tokenizer::from_gguf(**reader);
      if (!tokenizer) return fail(tokenizer.status().message());
      auto t = harmony::pieces_to_tokens(*pieces, **tokenizer);
      if (!t) return fail(t.status().message());
      tokens = std::move(*t);
    }
    if (!o->ids_only) {
      const std::string rendered = harmony::pieces_to_text(*pieces);
      std::fwrite(rendered.data(), 1, rendered.size(), stdout);
      std::printf("\n");
    }
    if (o->text_only) return 0;
    std::string line;
    for (size_t i = 0; i < tokens.size(); ++i) line += (i ? " " : "") + std::to_string(tokens[i]);
    std::printf("%s\n", line.c_str());
    return 0;
  };
}

}  // namespace brass::cli
