// JSON Schema -> the TypeScript-like signatures that harmony puts in `# Tools` sections
// (`type get_weather = (_: { location: string, unit?: "c" | "f", // default: c }) => any;`).
// Reproduces openai/harmony's json_schema_to_typescript case by case: objects with
// required/optional (`?`) properties, title/description/examples comments, string enums
// as unions of literals, `// default: x` comments (strings quoted unless the schema is an
// enum), arrays (`T[]`, `Array<any>` without items), type lists (`number | string`),
// oneOf unions (top level and per property), nullable (`| null`), and `any` for anything
// else. anyOf/allOf are not interpreted by harmony (they render as `any`); we match that.
// Total on arbitrary JSON: never throws, never recurses deeper than the input nests
// (capped, see kMaxSchemaDepth).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "harmony/chat.h"

namespace brass::harmony {

// Deeper schemas render their innermost levels as `any` (guards the stack on hostile input).
inline constexpr int kMaxSchemaDepth = 64;

std::string json_schema_to_typescript(const Json& schema, std::string_view indent = "");

// The `# Tools` section for a set of namespaces, exactly as harmony templates it.
std::string render_tools_section(const ToolNamespaces& namespaces);

// serde_json's compact Display of a value (ryu shortest floats, `1e21`, `1.0`, `1e-7`):
// what harmony prints after `default: `.
std::string json_compact(const Json& value);

// Rust's str::lines(): split on '\n', strip one trailing '\r' per line, no empty final
// line after a trailing newline, nothing at all for "".
std::vector<std::string_view> rust_lines(std::string_view text);

}  // namespace brass::harmony
