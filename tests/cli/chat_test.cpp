// `brass render` and `brass run --chat`, end to end (spawns BRASS_BINARY_DIR/brass).
// render: JSON conversations written here must print exactly openai/harmony's golden
// renders (tests/data/harmony), its ids must equal `brass tokenize --special` of its
// text, and malformed JSON must give a clear error naming the field. chat: two piped
// turns on the built-in model; the second reuses the cached prefix, and (greedy) its
// answer must equal a fresh `brass run` on the same prompt ids, i.e. the KV reuse does
// not change the result.
#include <gtest/gtest.h>

#include "cli_util.h"
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

using namespace brass::cli_test;

namespace fs = std::filesystem;





std::string read_golden(const std::string& name) {
  std::ifstream f(std::string(BRASS_TEST_DATA_DIR) + "/harmony/" + name, std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  return s;
}

std::string chomp(std::string s) {
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

std::vector<int> parse_ids(const std::string& s) {
  std::vector<int> ids;
  std::istringstream in(s);
  int v;
  while (in >> v) ids.push_back(v);
  return ids;
}

// ---- render ----

struct GoldenCase {
  const char* golden;
  const char* json;
};

const GoldenCase kGoldenCases[] = {
    {"test_simple_convo.txt", R"J({"system": {}, "messages": [{"role": "user", "content": "What is 2 + 2?"}]})J"},
    {"test_simple_convo_high_effort.txt", R"J({
      "system": {"reasoning_effort": "high"},
      "developer": {"instructions": "Answer the user's questions like a robot."},
      "messages": [{"role": "user", "content": "What is the capital of the largest country in the world?"}],
      "add_generation_prompt": true})J"},
    // system/developer as message entries with object content
    {"test_simple_convo_medium_effort.txt", R"J({"messages": [
      {"role": "system", "content": {"reasoning_effort": "medium"}},
      {"role": "developer", "content": {"instructions": "Answer the user's questions like a robot."}},
      {"role": "user", "content": "What is the capital of the largest country in the world?"}]})J"},
    {"test_simple_convo_low_effort_no_instruction.txt", R"J({
      "system": {"reasoning_effort": "low", "model_identity": "You are ChatGPT, a large language model trained by OpenAI."},
      "messages": [{"role": "user", "content": "What is the capital of the largest country in the world?"}]})J"},
    {"test_reasoning_system_message_with_dates.txt", R"J({
      "system": {"conversation_start_date": "2021-01-01", "knowledge_cutoff": "2021-01",
                 "valid_channels": ["analysis", "final"]},
      "messages": [{"role": "user", "content": "What is 42 * pi?"}]})J"},
    {"test_render_functions_with_parameters.txt", R"J({
      "system": {"reasoning_effort": "high", "conversation_start_date": "2025-06-28"},
      "developer": {"instructions": "Always respond in riddles", "tools": [
        {"name": "get_location", "description": "Gets the location of the user."},
        {"type": "function", "function": {"name": "get_current_weather",
          "description": "Gets the current weather in the provided location.",
          "parameters": {"type": "object", "properties": {
            "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
            "format": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"}},
            "required": ["location"]}}},
        {"name": "get_multiple_weathers", "description": "Gets the current weather in the provided list of locations.",
          "parameters": {"type": "object", "properties": {
            "locations": {"type": "array", "items": {"type": "string"},
                          "description": "List of city and state, e.g. [\"San Francisco, CA\", \"New York, NY\"]"},
            "format": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"}},
            "required": ["locations"]}},
        {"name": "kitchensink", "description": "A function with various complex schemas.",
          "parameters": {"description": "params object", "type": "object", "properties": {
            "string": {"type": "string", "title": "STRING", "description": "A string", "examples": ["hello", "world"]},
            "string_nullable": {"type": "string", "nullable": true, "description": "A nullable string",
                                "default": "the default"},
            "string_enum": {"type": "string", "enum": ["a", "b", "c"]},
            "oneof_string_or_number": {"oneOf": [{"type": "string", "default": "default_string_in_oneof"},
                                                 {"type": "number", "description": "numbers can happen too"}],
                                       "description": "a oneof", "default": 20}}}}]},
      "messages": [{"role": "user", "content": "What is the weather like in SF?"}]})J"},
    {"test_browser_and_function_tool.txt", R"J({
      "system": {"conversation_start_date": "2025-06-28", "builtin_tools": ["browser"]},
      "developer": {"tools": [{"name": "lookup_weather",
        "description": "Use this tool to lookup the weather in a given location. Call it with the parameter 'location', can be any textual description of a location.",
        "parameters": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}}]}})J"},
    {"test_dropping_cot_by_default.txt", R"J({"messages": [
      {"role": "user", "content": "What is 2 + 2?"},
      {"role": "assistant", "channel": "analysis", "content": "User asks: \u201cWhat is 2 + 2?\u201d Simple arithmetic. Provide answer."},
      {"role": "assistant", "channel": "final", "content": "2 + 2 equals 4."},
      {"role": "user", "content": "What about 9 / 2?"}]})J"},
    {"test_does_not_drop_if_ongoing_analysis.txt", R"J({"messages": [
      {"role": "user", "content": "What is the weather in SF?"},
      {"role": "assistant", "channel": "analysis",
       "content": "User asks: \u201cWhat is the weather in SF?\u201d We need to use lookup_weather tool."},
      {"role": "assistant", "channel": "commentary", "recipient": "functions.lookup_weather",
       "content_type": "<|constrain|>json", "content": "{\"location\": \"San Francisco\"}"},
      {"role": "tool", "name": "functions.lookup_weather", "content": "{\"temperature\": 20, \"description\": \"sunny\"}"}]})J"},
    {"test_keep_analysis_between_finals.txt", R"J({"add_generation_prompt": false, "messages": [
      {"role": "user", "content": "What is 2 + 2?"},
      {"role": "assistant", "channel": "analysis", "content": "thinking 2+2"},
      {"role": "assistant", "channel": "final", "content": "4"},
      {"role": "user", "content": "What is 3 + 5?"},
      {"role": "assistant", "channel": "analysis", "content": "thinking 3+5"},
      {"role": "assistant", "channel": "final", "content": "8"}]})J"},
    {"test_multi_turn_auto_drop_analysis.txt", R"J({"drop_rule": "last_final", "messages": [
      {"role": "developer", "content": "You are a helpful assistant that analyzes code and provides detailed feedback."},
      {"role": "user", "content": "Can you help me optimize this Python function?\n\ndef fibonacci(n):\n    if n <= 1:\n        return n\n    return fibonacci(n-1) + fibonacci(n-2)"},
      {"role": "assistant", "channel": "analysis", "content": "The user provided a recursive Fibonacci implementation. O(2^n) complexity."},
      {"role": "assistant", "channel": "final", "content": "This recursive Fibonacci has exponential time complexity. Would you like me to show optimized versions?"},
      {"role": "user", "content": "Yes, and benchmark them"},
      {"role": "assistant", "channel": "analysis", "content": "User wants benchmarks. I should run some Python code to compare performance."},
      {"role": "assistant", "channel": "final", "content": "I'll benchmark both versions for you."},
      {"role": "user", "content": "Run the benchmark for n=30"},
      {"role": "assistant", "channel": "analysis", "content": "I need to execute Python code to run the benchmark for n=30."},
      {"role": "assistant", "channel": "commentary", "recipient": "functions.python",
       "content": "{\"code\": \"import timeit\\n\\ndef fib_recursive(n):\\n    if n <= 1: return n\\n    return fib_recursive(n-1) + fib_recursive(n-2)\\n\\ndef fib_iter(n):\\n    if n <= 1: return n\\n    a, b = 0, 1\\n    for _ in range(2, n+1): a, b = b, a+b\\n    return b\\n\\nprint(timeit.timeit(lambda: fib_recursive(30), number=1))\\nprint(timeit.timeit(lambda: fib_iter(30), number=1000))\"}"}]})J"},
};

TEST(CliRender, MatchesHarmonyGoldens) {
  TempDir dir;
  for (const auto& c : kGoldenCases) {
    const std::string expected = read_golden(c.golden);
    ASSERT_FALSE(expected.empty()) << "missing golden " << c.golden;
    const std::string file = dir.write("convo.json", c.json);
    const Proc p = run("render --text-only " + file);
    ASSERT_EQ(p.rc, 0) << c.golden << ": " << p.err;
    EXPECT_EQ(chomp(p.out), expected) << c.golden;
  }
  // stdin ("-") gives the same.
  const std::string file = dir.write("convo.json", kGoldenCases[1].json);
  const Proc s = run("render --text-only - < " + file);
  ASSERT_EQ(s.rc, 0) << s.err;
  EXPECT_EQ(chomp(s.out), read_golden(kGoldenCases[1].golden));
}

TEST(CliRender, IdsEqualTokenizeSpecialOfText) {
  TempDir dir;
  for (int i : {0, 1, 5}) {  // plain conversations and the tool-schema one
    const std::string file = dir.write("convo.json", kGoldenCases[i].json);
    const Proc both = run("render " + file);
    ASSERT_EQ(both.rc, 0) << both.err;
    // Default output: the text, "\n", then the ids as the last line.
    const std::string out = chomp(both.out);
    const size_t nl = out.rfind('\n');
    ASSERT_NE(nl, std::string::npos) << out;
    const std::string text = out.substr(0, nl), ids = out.substr(nl + 1);
    EXPECT_EQ(text, read_golden(kGoldenCases[i].golden));
    const Proc only = run("render --ids-only " + file);
    ASSERT_EQ(only.rc, 0) << only.err;
    EXPECT_EQ(chomp(only.out), ids);

    const std::string text_file = dir.write("text.txt", text);
    const Proc tok = run("tokenize --special - < " + text_file);
    ASSERT_EQ(tok.rc, 0) << tok.err;
    const std::vector<int> a = parse_ids(ids), b = parse_ids(tok.out);
    EXPECT_GT(a.size(), 10u);
    EXPECT_EQ(a, b) << kGoldenCases[i].golden;
    EXPECT_EQ(a.front(), 200006);  // <|start|>
  }
}

TEST(CliRender, BadInputNamesTheField) {
  TempDir dir;
  const std::string user = R"({"role": "user", "content": "hi"})";
  struct Bad {
    std::string json;
    std::vector<std::string> expect;  // substrings of the error message
  };
  const std::vector<Bad> cases = {
      {"{\"messages\": [", {"invalid JSON"}},
      {"", {"invalid JSON"}},
      {"[1, 2]", {"expected an object", "array"}},
      {R"({"messages": [{"role": "robot", "content": "x"}]})", {"messages[0].role", "robot"}},
      {R"({"messages": [{"role": "user", "content": 5}]})", {"messages[0].content", "number"}},
      {R"({"messages": [{"content": "x"}]})", {"messages[0]", "role"}},
      {R"({"messages": [)" + user + R"(, {"role": "tool", "content": "x"}]})", {"messages[1]", "name"}},
      {R"({"messages": "hi"})", {"messages", "array"}},
      {R"({"mesages": []})", {"unknown key \"mesages\""}},
      {R"({"system": {"reasoning_effort": "extreme"}, "messages": [)" + user + "]}",
       {"system.reasoning_effort", "extreme"}},
      {R"({"system": {"reasoning": "high"}, "messages": [)" + user + "]}", {"system", "unknown key \"reasoning\""}},
      {R"({"system": {"builtin_tools": ["shell"]}})", {"system.builtin_tools[0]", "shell"}},
      {R"({"developer": {"tools": [{"description": "x"}]}})", {"developer.tools[0]", "name"}},
      {R"({"developer": {"tools": [{"name": "f", "parameters": "x"}]}})", {"developer.tools[0].parameters"}},
      {R"({"messages": [)" + user + R"(], "add_generation_prompt": "yes"})", {"add_generation_prompt", "true or false"}},
      {R"({"messages": [{"role": "user", "content": "x", "channel": 3}]})", {"messages[0].channel", "string"}},
      {R"({"messages": [)" + user + R"(], "drop_rule": "never"})", {"drop_rule", "never"}},
      {R"({"messages": []})", {"no messages"}},
  };
  for (const auto& c : cases) {
    const std::string file = dir.write("bad.json", c.json);
    const Proc p = run("render " + file);
    EXPECT_EQ(p.rc, 1) << c.json << "\n" << p.err;
    EXPECT_TRUE(p.out.empty()) << c.json << "\n" << p.out;
    EXPECT_NE(p.err.find("brass: error: " + file), std::string::npos) << p.err;
    for (const auto& s : c.expect) EXPECT_NE(p.err.find(s), std::string::npos) << c.json << "\n" << p.err;
  }
  const Proc missing = run("render " + dir.path("missing.json"));
  EXPECT_EQ(missing.rc, 1);
  EXPECT_NE(missing.err.find("missing.json"), std::string::npos) << missing.err;

  // Random bytes and random truncations of a valid conversation: an error or a render,
  // never a crash.
  const uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  const std::string valid = kGoldenCases[5].json;
  for (int i = 0; i < 6; ++i) {
    std::string junk;
    if (i % 2) {
      junk = valid.substr(0, rng() % valid.size());
    } else {
      for (int k = 0; k < 300; ++k) junk.push_back(static_cast<char>(rng()));
    }
    const std::string file = dir.write("junk.json", junk);
    const Proc p = run("render " + file);
    EXPECT_EQ(p.rc, 1) << "seed " << seed << " case " << i << "\n" << p.err;
    EXPECT_NE(p.err.find("brass: error:"), std::string::npos) << "seed " << seed;
  }
}

// ---- chat ----

struct Turn {
  size_t n_new = 0, n_reused = 0;
  std::vector<int> prompt_ids, answer_ids;
  std::string prompt_text;
};

// Parses the --show-prompt and stats lines of a chat's stderr.
std::vector<Turn> parse_turns(const std::string& err) {
  std::vector<Turn> turns;
  const std::regex prompt_re(R"(brass: prompt \(turn (\d+), (\d+) tokens\):\n)");
  const std::regex stats_re(R"(brass: prompt: (\d+) new tokens, (\d+) reused)");
  std::smatch m;
  std::string rest = err;
  while (std::regex_search(rest, m, prompt_re)) {
    Turn t;
    std::string after = m.suffix().str();
    const size_t ids_at = after.find("\nbrass: prompt ids: ");
    if (ids_at == std::string::npos) break;
    t.prompt_text = after.substr(0, ids_at);
    after = after.substr(ids_at + 20);
    t.prompt_ids = parse_ids(after.substr(0, after.find('\n')));
    const size_t ans = after.find("brass: answer ids: ");
    if (ans == std::string::npos) break;
    after = after.substr(ans + 19);
    t.answer_ids = parse_ids(after.substr(0, after.find('\n')));
    std::smatch s;
    if (!std::regex_search(after, s, stats_re)) break;
    t.n_new = std::stoul(s[1]);
    t.n_reused = std::stoul(s[2]);
    turns.push_back(t);
    rest = s.suffix().str();
  }
  return turns;
}

TEST(CliChat, TwoPipedTurnsReuseThePrefix) {
  TempDir dir;
  const std::string input = dir.write("in.txt", "Hello there\nWhat is 2 + 2?\n");
  const Proc p = run("run --chat -n 8 --seed 1 --show-prompt < " + input);
  ASSERT_EQ(p.rc, 0) << p.err;
  const auto turns = parse_turns(p.err);
  ASSERT_EQ(turns.size(), 2u) << p.err;
  EXPECT_EQ(turns[0].n_reused, 0u);
  EXPECT_EQ(turns[0].n_new, turns[0].prompt_ids.size());
  EXPECT_GT(turns[1].n_reused, 0u) << p.err;
  EXPECT_EQ(turns[1].n_new + turns[1].n_reused, turns[1].prompt_ids.size());
  // Turn 2's prompt starts with turn 1's prompt up to its trailing "assistant" (the
  // history then continues with the answer or the next user message), so at least all
  // but that last token are reused.
  EXPECT_GE(turns[1].n_reused, turns[0].prompt_ids.size() - 1);
  for (size_t i = 0; i + 1 < turns[0].prompt_ids.size(); ++i) {
    ASSERT_EQ(turns[1].prompt_ids[i], turns[0].prompt_ids[i]) << i;
  }
  EXPECT_NE(turns[1].prompt_text.find("<|start|>user<|message|>Hello there<|end|>"), std::string::npos);
  EXPECT_NE(turns[1].prompt_text.find("<|start|>user<|message|>What is 2 + 2?<|end|><|start|>assistant"),
            std::string::npos);
  for (const auto& t : turns) {
    EXPECT_GE(t.answer_ids.size(), 1u);
    EXPECT_LE(t.answer_ids.size(), 8u);
  }
  // Two answers on stdout, each ending its line.
  EXPECT_GE(std::count(p.out.begin(), p.out.end(), '\n'), 2) << p.out;
  EXPECT_NE(p.err.find("tok/s"), std::string::npos);
  EXPECT_NE(p.err.find("RANDOM"), std::string::npos);
  // Not a terminal: no ANSI escapes.
  EXPECT_EQ(p.out.find('\x1b'), std::string::npos);
}

TEST(CliChat, GreedyAnswerWithReusedCacheEqualsFreshRun) {
  TempDir dir;
  const std::string input = dir.write("in.txt", "Tell me a story\nAnd another one\n");
  const Proc p = run("run --chat -n 6 --temp 0 --show-prompt < " + input);
  ASSERT_EQ(p.rc, 0) << p.err;
  const auto turns = parse_turns(p.err);
  ASSERT_EQ(turns.size(), 2u) << p.err;
  ASSERT_GT(turns[1].n_reused, 0u);
  for (const auto& t : turns) {
    std::string ids;
    for (int id : t.prompt_ids) ids += (ids.empty() ? "" : ",") + std::to_string(id);
    const Proc fresh = run("run --json --temp 0 -n 6 --tokens " + ids);
    ASSERT_EQ(fresh.rc, 0) << fresh.err;
    const auto j = nlohmann::json::parse(fresh.out);
    const auto fresh_tokens = j["tokens"].get<std::vector<int>>();
    // The chat may stop earlier (an <|end|> closing a final message); compare its tokens.
    ASSERT_LE(t.answer_ids.size(), fresh_tokens.size());
    EXPECT_EQ(t.answer_ids, std::vector<int>(fresh_tokens.begin(), fresh_tokens.begin() + t.answer_ids.size()));
  }
}

TEST(CliChat, ReasoningAndInstructionsInTheSystemPrompt) {
  TempDir dir;
  const std::string input = dir.write("in.txt", "Hi\n");
  const Proc p = run("run --chat -n 2 --seed 7 --reasoning high --system 'Be terse.' --date 2025-01-02 "
                     "--show-prompt < " + input);
  ASSERT_EQ(p.rc, 0) << p.err;
  const auto turns = parse_turns(p.err);
  ASSERT_EQ(turns.size(), 1u) << p.err;
  // Built by hand from harmony's layout (cf. tests/data/harmony/test_simple_convo_high_effort.txt).
  const std::string expected =
      "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
      "Knowledge cutoff: 2024-06\nCurrent date: 2025-01-02\n\nReasoning: high\n\n"
      "# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>"
      "<|start|>developer<|message|># Instructions\n\nBe terse.<|end|>"
      "<|start|>user<|message|>Hi<|end|><|start|>assistant";
  EXPECT_EQ(turns[0].prompt_text, expected);
  const Proc low = run("run --chat -n 1 --seed 7 --reasoning low --show-prompt < " + input);
  ASSERT_EQ(low.rc, 0) << low.err;
  EXPECT_NE(low.err.find("Reasoning: low"), std::string::npos);
  EXPECT_EQ(low.err.find("Reasoning: high"), std::string::npos);
}

TEST(CliChat, ResetAndExitCommands) {
  TempDir dir;
  const std::string input = dir.write("in.txt", "first question\n/reset\n\nsecond question\n/exit\nnever sent\n");
  const Proc p = run("run --chat -n 3 --seed 2 --show-prompt < " + input);
  ASSERT_EQ(p.rc, 0) << p.err;
  const auto turns = parse_turns(p.err);
  ASSERT_EQ(turns.size(), 2u) << p.err;
  EXPECT_EQ(turns[1].prompt_text.find("first question"), std::string::npos);
  EXPECT_NE(turns[1].prompt_text.find("second question"), std::string::npos);
  EXPECT_GT(turns[1].n_reused, 0u);  // the system message is still cached
  EXPECT_EQ(p.err.find("never sent"), std::string::npos);
  EXPECT_NE(p.err.find("new conversation"), std::string::npos);
}

TEST(CliChat, BadOptions) {
  for (const std::string args : {"run --reasoning high -p hi", "run --chat -p hi < /dev/null",
                                 "run --chat --reasoning extreme < /dev/null", "run --show-prompt -p hi",
                                 "run --chat -n 0 < /dev/null"}) {
    const Proc p = run(args);
    EXPECT_EQ(p.rc, 1) << args << "\n" << p.err;
    EXPECT_FALSE(p.err.empty()) << args;
  }
  // Empty stdin: no turns, clean exit.
  const Proc e = run("run --chat -n 2 < /dev/null");
  EXPECT_EQ(e.rc, 0) << e.err;
}

}  // namespace
