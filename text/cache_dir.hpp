// Where the tokenizers' downloaded files live: ${XDG_CACHE_HOME:-$HOME/.cache}/tptrain/<what>.
#pragma once

#include <string>
#include <string_view>

namespace tptrain::text {

// The XDG base-directory rules: an empty or relative XDG_CACHE_HOME is ignored. "" when neither
// variable is set.
std::string tptrain_cache_dir(std::string_view what);

}  // namespace tptrain::text
