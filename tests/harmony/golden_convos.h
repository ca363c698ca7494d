// The openai/harmony test conversations that two conformance suites share: the text
// test (golden_test.cpp: our render == the golden file, byte for byte) and the token
// test (tokens_test.cpp: our tokens == the golden encoded with specials allowed).
#pragma once

#include <string>
#include <vector>

#include "harmony/chat.h"

namespace brass::harmony::testing {

inline constexpr const char* kIdentity = "You are ChatGPT, a large language model trained by OpenAI.";

struct GoldenConvo {
  std::string file;               // tests/data/harmony/<file>
  std::vector<Message> messages;  // rendered for completion by the assistant
};

inline std::vector<GoldenConvo> shared_golden_convos() {
  std::vector<GoldenConvo> out;
  {
    SystemContent sys;
    sys.with_model_identity(kIdentity);
    out.push_back({"test_simple_convo.txt",
                   {Message::from_role_and_content(Role::kSystem, sys),
                    Message::from_role_and_content(Role::kUser, "What is 2 + 2?")}});
  }
  struct Effort {
    ReasoningEffort effort;
    const char* file;
    bool instruction;
  } efforts[] = {
      {ReasoningEffort::kLow, "test_simple_convo_low_effort.txt", true},
      {ReasoningEffort::kMedium, "test_simple_convo_medium_effort.txt", true},
      {ReasoningEffort::kHigh, "test_simple_convo_high_effort.txt", true},
      {ReasoningEffort::kLow, "test_simple_convo_low_effort_no_instruction.txt", false},
      {ReasoningEffort::kMedium, "test_simple_convo_medium_effort_no_instruction.txt", false},
      {ReasoningEffort::kHigh, "test_simple_convo_high_effort_no_instruction.txt", false},
  };
  for (const auto& c : efforts) {
    SystemContent sys;
    sys.with_model_identity(kIdentity).with_reasoning_effort(c.effort);
    std::vector<Message> convo = {Message::from_role_and_content(Role::kSystem, sys)};
    if (c.instruction) {
      DeveloperContent dev;
      dev.with_instructions("Answer the user's questions like a robot.");
      convo.push_back(Message::from_role_and_content(Role::kDeveloper, dev));
    }
    convo.push_back(Message::from_role_and_content(
        Role::kUser, "What is the capital of the largest country in the world?"));
    out.push_back({c.file, std::move(convo)});
  }
  {
    SystemContent sys;
    sys.with_model_identity(kIdentity)
        .with_reasoning_effort(ReasoningEffort::kMedium)
        .with_conversation_start_date("2021-01-01")
        .with_knowledge_cutoff("2021-01")
        .with_required_channels({"analysis", "final"});
    out.push_back({"test_reasoning_system_message_with_dates.txt",
                   {Message::from_role_and_content(Role::kSystem, sys),
                    Message::from_role_and_content(Role::kUser, "What is 42 * pi?")}});
  }
  // An unfinished tool-call chain keeps its analysis; harmony also uses it to check that
  // "<|constrain|>json" is tokenized as special tokens.
  out.push_back({"test_does_not_drop_if_ongoing_analysis.txt",
                 {Message::from_role_and_content(Role::kUser, "What is the weather in SF?"),
                  Message::from_role_and_content(
                      Role::kAssistant,
                      "User asks: \u201cWhat is the weather in SF?\u201d We need to use lookup_weather tool.")
                      .with_channel("analysis"),
                  Message::from_role_and_content(Role::kAssistant, "{\"location\": \"San Francisco\"}")
                      .with_channel("commentary")
                      .with_recipient("functions.lookup_weather")
                      .with_content_type("<|constrain|>json"),
                  Message::from_author_and_content(Author{Role::kTool, "functions.lookup_weather"},
                                                   "{\"temperature\": 20, \"description\": \"sunny\"}")}});
  return out;
}

}  // namespace brass::harmony::testing
