// libFuzzer target for the harmony layer. The first input byte picks a mode:
//  - even: a token stream. Each 2 input bytes become one token: a small alphabet of
//    the Harmony specials, header-ish bytes and UTF-8 fragments, or a raw byte / id
//    (including unknown ids). It is fed to the streaming parser in strict mode (it must
//    either succeed or fail with a "token N" error, N within the stream) and in
//    recovering mode (it must never fail), both with and without a starting role.
//  - odd: the rest is JSON; if it parses, it is rendered both as a tool parameter schema
//    (json_schema_to_typescript, the tools section, a full developer message) and as a
//    default value (json_compact). Must not crash, hang or blow the stack.
// Uses a byte-level tokenizer (ids 0..255 are bytes, specials at their o200k_harmony
// ids) so the target needs no vocabulary file.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>

#include "harmony/parser.h"
#include "harmony/render.h"
#include "harmony/schema_ts.h"

namespace {

using brass::tok::Token;

class FuzzTokenizer : public brass::tok::Tokenizer {
 public:
  FuzzTokenizer() {
    names_ = {{199998, "<|startoftext|>"}, {199999, "<|endoftext|>"}, {200002, "<|return|>"},
              {200003, "<|constrain|>"},   {200005, "<|channel|>"},   {200006, "<|start|>"},
              {200007, "<|end|>"},         {200008, "<|message|>"},   {200012, "<|call|>"},
              {200100, "<|reserved_200100|>"}};
    for (const auto& [id, name] : names_) ids_[name] = id;
    for (int b = 0; b < 256; ++b) bytes_[b] = std::string(1, static_cast<char>(b));
  }
  std::vector<Token> encode(std::string_view text, bool) const override {
    std::vector<Token> out;
    for (unsigned char c : text) out.push_back(c);
    return out;
  }
  std::string decode(std::span<const Token> tokens) const override {
    std::string out;
    for (auto t : tokens) out += token_bytes(t);
    return out;
  }
  std::string_view token_bytes(Token t) const override {
    if (t >= 0 && t < 256) return bytes_[t];
    auto it = names_.find(t);
    return it == names_.end() ? std::string_view() : std::string_view(it->second);
  }
  std::optional<Token> special(std::string_view text) const override {
    auto it = ids_.find(std::string(text));
    if (it == ids_.end()) return std::nullopt;
    return it->second;
  }
  bool is_special(Token t) const override { return names_.count(t) > 0; }
  int32_t n_vocab() const override { return 201088; }
  void write_gguf(brass::gguf::Writer&) const override {}

 private:
  std::map<Token, std::string> names_;
  std::unordered_map<std::string, Token> ids_;
  std::string bytes_[256];
};

const FuzzTokenizer& tokenizer() {
  static const FuzzTokenizer t;
  return t;
}

void check(bool ok) {
  if (!ok) __builtin_trap();
}

Token token_from(uint8_t sel, uint8_t val) {
  static const Token kAlphabet[] = {200006, 200007, 200008, 200005, 200003, 200002, 200012,
                                    200100, 199999, 'a', ' ', 't', 'o', '=', '<', '.', 0xE2,
                                    0x80, 0x9C, 0xF0, 0xFF, -7, 250000};
  if (sel < 128) return kAlphabet[val % (sizeof kAlphabet / sizeof kAlphabet[0])];
  if (sel < 250) return val;  // ordinary byte token
  return 200000 + val * 5;    // mostly reserved / unknown-to-us ids
}

void fuzz_parser(const uint8_t* data, size_t size) {
  std::vector<Token> stream;
  for (size_t i = 0; i + 1 < size; i += 2) stream.push_back(token_from(data[i], data[i + 1]));
  for (int variant = 0; variant < 4; ++variant) {
    brass::harmony::ParseOptions opt;
    opt.strict = variant < 2;
    if (variant % 2) opt.role = brass::harmony::Role::kAssistant;
    opt.max_header_bytes = 256;
    auto parser = brass::harmony::StreamParser::create(tokenizer(), opt);
    check(parser.is_ok());
    std::vector<brass::harmony::ParseEvent> events;
    bool failed = false;
    for (Token t : stream) {
      events.clear();
      brass::Status s = parser->push(t, &events);
      if (!s.is_ok()) {
        check(opt.strict);
        check(s.message().find("token ") != std::string::npos);
        failed = true;
        break;
      }
    }
    if (!failed) {
      brass::Status s = parser->finish(&events);
      check(s.is_ok() || opt.strict);
    }
    for (const auto& w : parser->warnings()) check(w.token_index <= stream.size());
    check(parser->messages().size() <= stream.size() + 1);
  }
}

void fuzz_schema(const uint8_t* data, size_t size) {
  auto json = brass::harmony::Json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return;
  std::string ts = brass::harmony::json_schema_to_typescript(json);
  std::string compact = brass::harmony::json_compact(json);
  // Moves only: copying a deeply nested JSON value recurses once per level.
  std::vector<brass::harmony::ToolDescription> tools;
  tools.push_back(brass::harmony::ToolDescription{"f", compact.substr(0, 64), std::move(json)});
  brass::harmony::DeveloperContent dev;
  dev.with_function_tools(std::move(tools));
  std::vector<brass::harmony::Message> convo;
  convo.push_back(brass::harmony::Message::from_role_and_content(
      brass::harmony::Role::kDeveloper, brass::harmony::Content(std::move(dev))));
  auto pieces = brass::harmony::render_conversation_for_completion(convo);
  check(pieces.is_ok());
  check(brass::harmony::pieces_to_text(pieces.value()).find(ts) != std::string::npos);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > (1 << 16)) return 0;
  if (data[0] % 2 == 0) {
    fuzz_parser(data + 1, size - 1);
  } else {
    fuzz_schema(data + 1, size - 1);
  }
  return 0;
}
