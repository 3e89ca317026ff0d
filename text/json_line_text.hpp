// A document of JSON Lines (https://jsonlines.org): one JSON object per line, its text in the
// string field "text" (the layout of most text corpora: FineWeb, The Pile, OpenWebText dumps).
#pragma once

#include <string>
#include <string_view>

namespace tptrain::text {

// The "text" of one line (UTF-8 already checked by the caller; JSON escapes decoded). Throws
// TextError saying what is wrong: not JSON (the parser's message), not an object, no "text",
// or a "text" that is not a string.
std::string json_line_text(std::string_view line);

}  // namespace tptrain::text
