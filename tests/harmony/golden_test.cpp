// Conformance: re-creates the conversations of openai/harmony's tests (src/tests.rs,
// tests/test_harmony.py) and requires our rendered text to equal harmony's golden
// files in tests/data/harmony/ byte for byte.
#include <gtest/gtest.h>

#include "harmony/render.h"
#include "golden_convos.h"
#include "test_tokenizer.h"

namespace brass::harmony {
namespace {

using testing::read_golden;

std::string render_completion_text(const std::vector<Message>& convo, RenderConfig config = {}) {
  auto r = render_conversation_for_completion(convo, Role::kAssistant, config);
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return r.is_ok() ? pieces_to_text(r.value()) : std::string();
}

// First differing byte, for readable failures on long renders.
std::string first_diff(const std::string& a, const std::string& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return "first difference at byte " + std::to_string(i) + ":\n  expected: ..." +
         a.substr(i > 40 ? i - 40 : 0, 120) + "\n  actual:   ..." + b.substr(i > 40 ? i - 40 : 0, 120);
}

#define EXPECT_GOLDEN(name, actual)                                      \
  do {                                                                   \
    std::string expected_ = read_golden(name);                           \
    ASSERT_FALSE(expected_.empty()) << "missing golden " << name;        \
    std::string actual_ = (actual);                                      \
    EXPECT_EQ(expected_, actual_) << name << ": " << first_diff(expected_, actual_); \
  } while (0)

using testing::kIdentity;

TEST(HarmonyGolden, SharedConversations) {
  for (const auto& c : testing::shared_golden_convos()) EXPECT_GOLDEN(c.file, render_completion_text(c.messages));
}

TEST(HarmonyGolden, ReasoningSystemMessages) {
  {
    SystemContent sys;
    sys.with_model_identity(kIdentity)
        .with_reasoning_effort(ReasoningEffort::kMedium)
        .with_required_channels({"analysis", "final"});
    std::vector<Message> convo = {Message::from_role_and_content(Role::kSystem, sys),
                                  Message::from_role_and_content(Role::kUser, "What is 2 + 2?")};
    EXPECT_GOLDEN("test_reasoning_system_message.txt", render_completion_text(convo));
  }
  {
    SystemContent sys;
    sys.with_model_identity(kIdentity)
        .with_reasoning_effort(ReasoningEffort::kHigh)
        .with_required_channels({"analysis", "final"});
    std::vector<Message> convo = {
        Message::from_role_and_content(Role::kSystem, sys),
        Message::from_role_and_content(Role::kUser,
                                       "What is the best place to eat candy in the world?")};
    EXPECT_GOLDEN("test_reasoning_system_message_no_instruction.txt",
                  render_completion_text(convo));
  }
  // test_reasoning_system_message_with_dates.txt: in SharedConversations.
}

TEST(HarmonyGolden, RenderFunctionsWithParameters) {
  SystemContent sys;
  sys.with_reasoning_effort(ReasoningEffort::kHigh).with_conversation_start_date("2025-06-28");
  DeveloperContent dev;
  dev.with_instructions("Always respond in riddles")
      .with_function_tools({
          ToolDescription{"get_location", "Gets the location of the user.", std::nullopt},
          ToolDescription{"get_current_weather",
                          "Gets the current weather in the provided location.", Json::parse(R"({
              "type": "object",
              "properties": {
                "location": {"type": "string",
                             "description": "The city and state, e.g. San Francisco, CA"},
                "format": {"type": "string", "enum": ["celsius", "fahrenheit"],
                           "default": "celsius"}
              },
              "required": ["location"]})")},
          ToolDescription{"get_multiple_weathers",
                          "Gets the current weather in the provided list of locations.",
                          Json::parse(R"({
              "type": "object",
              "properties": {
                "locations": {"type": "array", "items": {"type": "string"},
                  "description": "List of city and state, e.g. [\"San Francisco, CA\", \"New York, NY\"]"},
                "format": {"type": "string", "enum": ["celsius", "fahrenheit"],
                           "default": "celsius"}
              },
              "required": ["locations"]})")},
          ToolDescription{"kitchensink", "A function with various complex schemas.",
                          Json::parse(R"({
              "description": "params object",
              "type": "object",
              "properties": {
                "string": {"type": "string", "title": "STRING", "description": "A string",
                           "examples": ["hello", "world"]},
                "string_nullable": {"type": "string", "nullable": true,
                                    "description": "A nullable string", "default": "the default"},
                "string_enum": {"type": "string", "enum": ["a", "b", "c"]},
                "oneof_string_or_number": {
                  "oneOf": [{"type": "string", "default": "default_string_in_oneof"},
                            {"type": "number", "description": "numbers can happen too"}],
                  "description": "a oneof",
                  "default": 20}
              }})")},
      });
  std::vector<Message> convo = {
      Message::from_role_and_content(Role::kSystem, sys),
      Message::from_role_and_content(Role::kDeveloper, dev),
      Message::from_role_and_content(Role::kUser, "What is the weather like in SF?")};
  EXPECT_GOLDEN("test_render_functions_with_parameters.txt", render_completion_text(convo));
}

TEST(HarmonyGolden, BuiltInTools) {
  {
    SystemContent sys;
    sys.with_conversation_start_date("2025-06-28");
    std::vector<Message> convo = {Message::from_role_and_content(Role::kSystem, sys)};
    EXPECT_GOLDEN("test_no_tools.txt", render_completion_text(convo));
  }
  {
    SystemContent sys;
    sys.with_conversation_start_date("2025-06-28").with_browser_tool();
    std::vector<Message> convo = {Message::from_role_and_content(Role::kSystem, sys)};
    EXPECT_GOLDEN("test_browser_tool_only.txt", render_completion_text(convo));
  }
  {
    // python is added after browser but renders after it only because of name order.
    SystemContent sys;
    sys.with_conversation_start_date("2025-06-28").with_python_tool().with_browser_tool();
    std::vector<Message> convo = {Message::from_role_and_content(Role::kSystem, sys)};
    EXPECT_GOLDEN("test_browser_and_python_tool.txt", render_completion_text(convo));
  }
  {
    SystemContent sys;
    sys.with_conversation_start_date("2025-06-28").with_browser_tool();
    DeveloperContent dev;
    dev.with_function_tools({ToolDescription{
        "lookup_weather",
        "Use this tool to lookup the weather in a given location. Call it with the parameter "
        "'location', can be any textual description of a location.",
        Json::parse(R"({"type": "object", "properties": {"location": {"type": "string"}},
                        "required": ["location"]})")}});
    std::vector<Message> convo = {Message::from_role_and_content(Role::kSystem, sys),
                                  Message::from_role_and_content(Role::kDeveloper, dev)};
    EXPECT_GOLDEN("test_browser_and_function_tool.txt", render_completion_text(convo));
  }
}

TEST(HarmonyGolden, AnalysisDropping) {
  const char* cot = "User asks: \u201cWhat is 2 + 2?\u201d Simple arithmetic. Provide answer.";
  std::vector<Message> convo = {
      Message::from_role_and_content(Role::kUser, "What is 2 + 2?"),
      Message::from_role_and_content(Role::kAssistant, cot).with_channel("analysis"),
      Message::from_role_and_content(Role::kAssistant, "2 + 2 equals 4.").with_channel("final"),
      Message::from_role_and_content(Role::kUser, "What about 9 / 2?")};
  EXPECT_GOLDEN("test_dropping_cot_by_default.txt", render_completion_text(convo));

  std::vector<Message> preserve = convo;
  preserve[1] = Message::from_role_and_content(
                    Role::kAssistant, "User asks a simple question: \"What is 2 + 2?\" The answer: 4.")
                    .with_channel("analysis");
  RenderConfig keep;
  keep.auto_drop_analysis = false;
  EXPECT_GOLDEN("test_preserve_cot.txt", render_completion_text(preserve, keep));

  // test_does_not_drop_if_ongoing_analysis.txt: in SharedConversations.

  std::vector<Message> between = {
      Message::from_role_and_content(Role::kUser, "What is 2 + 2?"),
      Message::from_role_and_content(Role::kAssistant, "thinking 2+2").with_channel("analysis"),
      Message::from_role_and_content(Role::kAssistant, "4").with_channel("final"),
      Message::from_role_and_content(Role::kUser, "What is 3 + 5?"),
      Message::from_role_and_content(Role::kAssistant, "thinking 3+5").with_channel("analysis"),
      Message::from_role_and_content(Role::kAssistant, "8").with_channel("final")};
  auto r = render_conversation(between);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_GOLDEN("test_keep_analysis_between_finals.txt", pieces_to_text(r.value()));
}

// From harmony PR #96 (openai/harmony 2ade0f2): analysis before the LAST final dropped.
// That golden was made from plain-text developer content and a tool call without a
// content type (harmony would render " json"), so the messages here are built that way.
TEST(HarmonyGolden, MultiTurnAutoDropAnalysisBeforeLastFinal) {
  std::vector<Message> convo = {
      Message::from_role_and_content(
          Role::kDeveloper,
          "You are a helpful assistant that analyzes code and provides detailed feedback."),
      Message::from_role_and_content(Role::kUser,
                                     "Can you help me optimize this Python function?\n\n"
                                     "def fibonacci(n):\n"
                                     "    if n <= 1:\n"
                                     "        return n\n"
                                     "    return fibonacci(n-1) + fibonacci(n-2)"),
      Message::from_role_and_content(
          Role::kAssistant,
          "The user provided a recursive Fibonacci implementation. O(2^n) complexity.")
          .with_channel("analysis"),
      Message::from_role_and_content(Role::kAssistant,
                                     "This recursive Fibonacci has exponential time complexity. "
                                     "Would you like me to show optimized versions?")
          .with_channel("final"),
      Message::from_role_and_content(Role::kUser, "Yes, and benchmark them"),
      Message::from_role_and_content(
          Role::kAssistant,
          "User wants benchmarks. I should run some Python code to compare performance.")
          .with_channel("analysis"),
      Message::from_role_and_content(Role::kAssistant, "I'll benchmark both versions for you.")
          .with_channel("final"),
      Message::from_role_and_content(Role::kUser, "Run the benchmark for n=30"),
      Message::from_role_and_content(
          Role::kAssistant, "I need to execute Python code to run the benchmark for n=30.")
          .with_channel("analysis"),
      Message::from_role_and_content(
          Role::kAssistant,
          R"JSON({"code": "import timeit\n\ndef fib_recursive(n):\n    if n <= 1: return n\n    return fib_recursive(n-1) + fib_recursive(n-2)\n\ndef fib_iter(n):\n    if n <= 1: return n\n    a, b = 0, 1\n    for _ in range(2, n+1): a, b = b, a+b\n    return b\n\nprint(timeit.timeit(lambda: fib_recursive(30), number=1))\nprint(timeit.timeit(lambda: fib_iter(30), number=1000))"})JSON")
          .with_channel("commentary")
          .with_recipient("functions.python"),
  };
  RenderConfig config;
  config.drop_rule = AnalysisDropRule::kBeforeLastFinal;
  EXPECT_GOLDEN("test_multi_turn_auto_drop_analysis.txt", render_completion_text(convo, config));
  // harmony main's rule keeps all three analyses here (the last assistant message is a call).
  std::string main_rule = render_completion_text(convo);
  EXPECT_NE(main_rule.find("O(2^n) complexity."), std::string::npos);
  EXPECT_NE(main_rule.find("compare performance."), std::string::npos);
}

TEST(HarmonyGolden, ToolResponseRender) {
  // test_tool_response_parsing.txt is harmony's render of this message minus <|end|>.
  Message m = Message::from_author_and_content(Author{Role::kTool, "browser.search"},
                                               "{\"result\": \"https://openai.com/\"}")
                  .with_channel("commentary")
                  .with_recipient("assistant");
  auto r = render_message(m);
  ASSERT_TRUE(r.is_ok());
  Pieces p = r.value();
  ASSERT_EQ(p.back(), (Piece{Piece::Kind::kSpecial, "<|end|>"}));
  p.pop_back();
  EXPECT_GOLDEN("test_tool_response_parsing.txt", pieces_to_text(p));
}

}  // namespace
}  // namespace brass::harmony
