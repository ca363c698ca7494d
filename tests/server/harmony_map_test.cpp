// OpenAI <-> Harmony mapping: chat messages -> the expected Harmony messages (built by
// hand here) and rendered text; generated token streams (hand-written Harmony, tokenized
// by the real o200k tokenizer) -> reasoning / content / tool calls, with streamed deltas
// that add up to the totals, and stop strings that cut the content exactly.
#include <gtest/gtest.h>

#include "harmony/render.h"
#include "server/harmony_map.h"
#include "test_util.h"

namespace brass::server {
namespace {

namespace h = brass::harmony;
using testing::o200k;
using testing::Seeded;

std::vector<ChatMessage> weather_chat() {
  std::vector<ChatMessage> m(5);
  m[0].role = h::Role::kSystem;
  m[0].content = "be brief";
  m[1].role = h::Role::kUser;
  m[1].content = "weather in Paris?";
  m[2].role = h::Role::kAssistant;
  m[2].reasoning = "need the tool";
  m[2].tool_calls.push_back({"call_1", "get_weather", "{\"city\":\"Paris\"}"});
  m[3].role = h::Role::kTool;
  m[3].tool_call_id = "call_1";
  m[3].content = "18C";
  m[4].role = h::Role::kUser;
  m[4].content = "thanks";
  return m;
}

TEST(BuildConversation, MapsEveryRole) {
  auto msgs = weather_chat();
  std::vector<FunctionTool> tools = {{"get_weather", "Weather now", Json::parse(R"({"type":"object"})")}};
  ConversationSpec spec{&msgs, &tools, ToolChoice::kAuto, h::ReasoningEffort::kHigh, std::nullopt, "2025-01-02"};
  std::vector<h::Message> conv;
  ASSERT_FALSE(build_conversation(spec, &conv));

  h::SystemContent sys;
  sys.reasoning_effort = h::ReasoningEffort::kHigh;
  sys.conversation_start_date = "2025-01-02";
  h::DeveloperContent dev;
  dev.instructions = "be brief";
  h::ToolNamespaceConfig fns;
  fns.name = "functions";
  fns.tools.push_back({"get_weather", "Weather now", Json::parse(R"({"type":"object"})")});
  dev.tools = h::ToolNamespaces{{"functions", fns}};
  std::vector<h::Message> want;
  want.push_back(h::Message::from_role_and_content(h::Role::kSystem, h::Content(sys)));
  want.push_back(h::Message::from_role_and_content(h::Role::kDeveloper, h::Content(dev)));
  want.push_back(h::Message::from_role_and_content(h::Role::kUser, std::string("weather in Paris?")));
  want.push_back(h::Message::from_role_and_content(h::Role::kAssistant, std::string("need the tool")).with_channel("analysis"));
  want.push_back(h::Message::from_role_and_content(h::Role::kAssistant, std::string("{\"city\":\"Paris\"}"))
                     .with_channel("commentary").with_recipient("functions.get_weather").with_content_type("<|constrain|>json"));
  want.push_back(h::Message::from_author_and_content(h::Author{h::Role::kTool, std::string("functions.get_weather")}, std::string("18C"))
                     .with_recipient("assistant").with_channel("commentary"));
  want.push_back(h::Message::from_role_and_content(h::Role::kUser, std::string("thanks")));
  ASSERT_EQ(conv.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(conv[i], want[i]) << i << ": " << h::debug_string(conv[i]);

  // The rendered prompt carries the effort, the tool result under the tool's name, and
  // ends with the generation prompt.
  auto pieces = h::render_conversation_for_completion(conv);
  ASSERT_TRUE(pieces.is_ok()) << pieces.status().message();
  const std::string text = h::pieces_to_text(*pieces);
  EXPECT_NE(text.find("Reasoning: high"), std::string::npos) << text;
  EXPECT_NE(text.find("Current date: 2025-01-02"), std::string::npos);
  EXPECT_NE(text.find("# Instructions\n\nbe brief"), std::string::npos);
  EXPECT_NE(text.find("type get_weather"), std::string::npos);
  EXPECT_NE(text.find("<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>18C<|end|>"), std::string::npos)
      << text;
  EXPECT_EQ(text.substr(text.size() - 18), "<|start|>assistant") << text;
}

TEST(BuildConversation, ToolChoiceNoneDropsToolsAndUnknownCallIdIs400) {
  auto msgs = weather_chat();
  std::vector<FunctionTool> tools = {{"get_weather", "", std::nullopt}};
  ConversationSpec spec{&msgs, &tools, ToolChoice::kNone, std::nullopt, std::nullopt, ""};
  std::vector<h::Message> conv;
  ASSERT_FALSE(build_conversation(spec, &conv));
  const auto& dev = std::get<h::DeveloperContent>(conv[1].content[0]);
  EXPECT_FALSE(dev.tools.has_value());
  EXPECT_EQ(std::get<h::SystemContent>(conv[0].content[0]).reasoning_effort, h::ReasoningEffort::kMedium);

  msgs[3].tool_call_id = "call_unknown";
  auto e = build_conversation(spec, &conv);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->status, 400);
  EXPECT_EQ(e->param, "messages[3].tool_call_id");
}

struct Mapped {
  std::string reasoning, content;
  std::vector<MappedToolCall> calls;
  std::unique_ptr<OutputMapper> mapper;
};

// Push `harmony_text` token by token (one token per push, like the engine does).
Mapped run(const std::string& harmony_text, std::vector<std::string> stop = {}) {
  Mapped m;
  int n_ids = 0;
  auto r = OutputMapper::create(o200k(), std::move(stop), [&n_ids] { return "call_" + std::to_string(n_ids++); });
  EXPECT_TRUE(r.is_ok());
  m.mapper = std::move(*r);
  std::vector<OutputDelta> deltas;
  for (int32_t t : o200k().encode(harmony_text, true)) m.mapper->push(t, &deltas);
  m.mapper->finish(&deltas);
  for (const auto& d : deltas) {
    if (d.target == OutputDelta::Target::kToolCall) {
      if (d.kind == OutputDelta::Kind::kStart) m.calls.push_back({d.call_id, d.name, ""});
      else if (d.kind == OutputDelta::Kind::kDelta) m.calls.at(d.tool_index).arguments += d.text;
    } else if (d.kind == OutputDelta::Kind::kDelta) {
      (d.target == OutputDelta::Target::kReasoning ? m.reasoning : m.content) += d.text;
    }
  }
  return m;
}

TEST(OutputMapper, ReasoningAndFinal) {
  Mapped m = run("<|channel|>analysis<|message|>User greets. Reply.<|end|><|start|>assistant<|channel|>final<|message|>Hello, world!<|return|>");
  EXPECT_EQ(m.reasoning, "User greets. Reply.");
  EXPECT_EQ(m.content, "Hello, world!");
  EXPECT_EQ(m.mapper->reasoning(), m.reasoning);
  EXPECT_EQ(m.mapper->content(), m.content);
  EXPECT_TRUE(m.mapper->has_reasoning());
  EXPECT_TRUE(m.mapper->tool_calls().empty());
}

TEST(OutputMapper, NoReasoningMeansNoReasoningField) {
  Mapped m = run("<|channel|>final<|message|>Just this.<|return|>");
  EXPECT_FALSE(m.mapper->has_reasoning());
  EXPECT_EQ(m.content, "Just this.");
}

TEST(OutputMapper, ToolCallsBothHeaderOrders) {
  Mapped m = run(
      "<|channel|>analysis<|message|>Need weather.<|end|>"
      "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>");
  EXPECT_EQ(m.reasoning, "Need weather.");
  EXPECT_EQ(m.content, "");
  ASSERT_EQ(m.calls.size(), 1u);
  EXPECT_EQ(m.calls[0].id, "call_0");
  EXPECT_EQ(m.calls[0].name, "get_weather");
  EXPECT_EQ(m.calls[0].arguments, "{\"city\":\"Paris\"}");
  ASSERT_EQ(m.mapper->tool_calls().size(), 1u);
  EXPECT_EQ(m.mapper->tool_calls()[0].arguments, m.calls[0].arguments);

  Mapped m2 = run(" to=functions.lookup<|channel|>commentary <|constrain|>json<|message|>{\"q\": [1, 2]}<|call|>");
  ASSERT_EQ(m2.calls.size(), 1u);
  EXPECT_EQ(m2.calls[0].name, "lookup");
  EXPECT_EQ(m2.calls[0].arguments, "{\"q\": [1, 2]}");
}

TEST(OutputMapper, PreambleIsContent) {
  Mapped m = run("<|channel|>commentary<|message|>Checking now.<|end|><|start|>assistant<|channel|>commentary to=functions.f<|message|>{}<|call|>");
  EXPECT_EQ(m.content, "Checking now.");
  ASSERT_EQ(m.calls.size(), 1u);
  EXPECT_EQ(m.calls[0].name, "f");
}

TEST(OutputMapper, GarbageNeverCrashes) {
  Seeded s;
  SCOPED_TRACE(s.trace());
  for (int iter = 0; iter < 50; ++iter) {
    auto r = OutputMapper::create(o200k(), {"zz"});
    ASSERT_TRUE(r.is_ok());
    std::vector<OutputDelta> d;
    for (int i = 0; i < 300; ++i) {
      // Mostly specials, so every header/content path is hit.
      const int32_t t = (s.rng() % 3 == 0) ? static_cast<int32_t>(s.rng() % 201088) : 199998 + static_cast<int32_t>(s.rng() % 16);
      (*r)->push(t, &d);
    }
    (*r)->finish(&d);
  }
}

// A stop string at a random place: content is exactly the text before it, and no
// streamed delta ever carries any of the stop string.
TEST(OutputMapper, StopStringsCutContent) {
  Seeded s;
  SCOPED_TRACE(s.trace());
  const std::string words[] = {"alpha ", "beta ", "gamma", "\n", "é", "日本", "STOP", "ST", "OP ", "x"};
  for (int iter = 0; iter < 200; ++iter) {
    std::string body;
    const int n = 1 + static_cast<int>(s.rng() % 30);
    for (int i = 0; i < n; ++i) body += words[s.rng() % 10];
    const std::string stop = iter % 2 ? "STOP" : "a b";
    Mapped m = run("<|channel|>final<|message|>" + body + "<|return|>", {stop});
    const size_t at = body.find(stop);
    const std::string want = at == std::string::npos ? body : body.substr(0, at);
    EXPECT_EQ(m.content, want) << body;
    EXPECT_EQ(m.mapper->content(), want);
    EXPECT_EQ(m.mapper->stopped_by_string(), at != std::string::npos);
  }
}

}  // namespace
}  // namespace brass::server
