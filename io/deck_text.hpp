// How deck values are written as TOML (the resolved deck, messages); as JSON: io/json_line.hpp.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tptrain::io {

// TOML float text that reads back to the same double, always recognisable as a float (1.0, not
// 1); inf and nan as TOML spells them.
std::string toml_float(double v);
// TOML basic string: double quotes, escapes for backslash, quote and control characters.
std::string toml_string(std::string_view s);
// `v` rounded to 15 significant decimal digits, so that a derived value is the double its
// decimal text names (3e-3 / 10 is 3.0000000000000003e-4 in binary; this gives 3e-4).
double round_decimal(double v);

// The integer values of `keys` in table [section] of a deck's TOML text (e.g. a checkpoint's deck
// attribute); a key that is absent or not an integer maps to nullopt. Throws std::runtime_error
// when the text is not TOML. (Here, in io/, because toml++ is compiled by the host compiler only:
// nvcc cannot parse it, and the model layer may be compiled by nvcc.)
std::map<std::string, std::optional<std::int64_t>> deck_text_integers(const std::string& text,
                                                                      const std::string& section,
                                                                      const std::vector<std::string>& keys);

// The same for any scalar: the value as text (a string's contents, true/false, a number as fmt
// prints it: it reads back to the same double), nullopt when absent or not a scalar.
std::map<std::string, std::optional<std::string>> deck_text_scalars(const std::string& text,
                                                                    const std::string& section,
                                                                    const std::vector<std::string>& keys);

}  // namespace tptrain::io
