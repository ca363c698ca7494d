// The embedded web chat UI (src/server/webui/index.html), turned into a byte array at
// build time by webui/embed.cmake (no npm, no network).
#pragma once

#include <cstddef>

namespace brass::server::webui {
extern const unsigned char kIndexHtml[];
extern const size_t kIndexHtmlSize;
}  // namespace brass::server::webui
