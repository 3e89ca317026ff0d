#include "text/tiktoken_ranks.hpp"

#include <array>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string_view>
#include <unordered_map>

#include "text/text_error.hpp"

namespace tptrain::text {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw TextError("cannot read the rank file " + path + ": " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw TextError("cannot read the rank file " + path + ": read error");
  return text.str();
}

// Calls line(number, text) for every non-empty line, without its "\n" or "\r\n".
template <class F>
void for_lines(std::string_view text, const F& line) {
  std::size_t number = 0;
  for (std::size_t at = 0; at < text.size();) {
    std::size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    std::string_view l = text.substr(at, end - at);
    ++number;
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    if (!l.empty()) line(number, l);
    at = end + 1;
  }
}

std::string shown(std::string_view line) {
  constexpr std::size_t kShown = 60;
  return "\"" + std::string(line.substr(0, kShown)) + (line.size() > kShown ? "...\"" : "\"");
}

}  // namespace

bool decode_base64(std::string_view text, std::string& bytes) {
  static const std::array<signed char, 256> value = [] {
    std::array<signed char, 256> v{};
    v.fill(-1);
    constexpr std::string_view alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (std::size_t i = 0; i < alphabet.size(); ++i) v[static_cast<unsigned char>(alphabet[i])] = static_cast<signed char>(i);
    return v;
  }();
  bytes.clear();
  if (text.empty() || text.size() % 4 != 0) return false;
  std::size_t padding = 0;
  while (padding < 2 && text[text.size() - 1 - padding] == '=') ++padding;
  for (std::size_t at = 0; at < text.size(); at += 4) {
    const bool last = at + 4 == text.size();
    std::uint32_t group = 0;
    for (std::size_t k = 0; k < 4; ++k) {
      const unsigned char c = static_cast<unsigned char>(text[at + k]);
      int v = value[c];
      if (last && k >= 4 - padding) {
        v = 0;  // padding
      } else if (v < 0) {
        return false;  // outside the alphabet, or '=' anywhere but at the end
      }
      group = group << 6 | static_cast<std::uint32_t>(v);
    }
    const std::size_t n = last ? 3 - padding : 3;
    // The bits under the padding must be zero (RFC 4648 section 3.5: canonical encoding).
    if (last && padding > 0 && (group & ((1u << (8 * padding)) - 1)) != 0) return false;
    for (std::size_t k = 0; k < n; ++k) bytes.push_back(static_cast<char>(group >> (16 - 8 * k) & 0xff));
  }
  return true;
}

std::string read_rank_file(const std::string& path) { return read_file(path); }

std::vector<std::string> parse_tiktoken_ranks(std::string_view text, const std::string& path) {
  // The ranks must be 0 .. N-1 for the N tokens of the file (ids are ranks, and the special
  // tokens follow the last), so a rank >= N is refused on its own line, and every table below is
  // sized by the lines, never by a rank the file claims: a rank of 2^31 is an error, not 80 GB.
  std::size_t n = 0;
  for_lines(text, [&](std::size_t, std::string_view) { ++n; });
  if (n == 0) throw TextError("the rank file " + path + " holds no tokens");
  if (n > kMaxTiktokenRanks)
    throw TextError("the rank file " + path + " holds " + std::to_string(n) + " tokens, more than the " +
                    std::to_string(kMaxTiktokenRanks) + " that 32-bit token ids leave room for");
  std::vector<std::string> token_bytes(n);
  std::vector<std::size_t> line_of_rank(n, 0);  // 0: not given
  std::unordered_map<std::string, std::size_t> line_of_token;
  line_of_token.reserve(n);
  std::string bytes;
  for_lines(text, [&](std::size_t number, std::string_view line) {
    const std::string where = path + ":" + std::to_string(number) + ": ";
    const std::size_t space = line.find(' ');
    if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos)
      throw TextError(where + "expected \"BASE64 RANK\" (a token and its rank, one space between), got " + shown(line));
    const std::string_view token = line.substr(0, space), rank_text = line.substr(space + 1);
    std::uint64_t rank = 0;  // a rank of 20 digits or more is out of range, not malformed
    const auto [end, ec] = std::from_chars(rank_text.data(), rank_text.data() + rank_text.size(), rank);
    if ((ec != std::errc() && ec != std::errc::result_out_of_range) || end != rank_text.data() + rank_text.size() ||
        rank_text.empty())
      throw TextError(where + "the rank " + shown(rank_text) + " is not a non-negative integer");
    if (ec == std::errc::result_out_of_range || rank >= n)
      throw TextError(where + "the rank " + shown(rank_text) + " is out of range: a file of " + std::to_string(n) +
                      " tokens has the ranks 0 .. " + std::to_string(n - 1) + ", each once");
    if (!decode_base64(token, bytes))
      throw TextError(where + "the token " + shown(token) +
                      " is not base64 (RFC 4648: A-Z a-z 0-9 + /, a multiple of 4 characters, = padding at the end)");
    if (line_of_rank[rank] != 0)
      throw TextError(where + "rank " + std::to_string(rank) + " is already given on line " +
                      std::to_string(line_of_rank[rank]));
    if (const auto [it, fresh] = line_of_token.emplace(bytes, number); !fresh)
      throw TextError(where + "the token " + shown(token) + " already has a rank, on line " + std::to_string(it->second));
    line_of_rank[rank] = number;
    token_bytes[rank] = bytes;
  });
  // N distinct ranks below N: every rank is given, no gap to look for.
  for (unsigned b = 0; b < 256; ++b)
    if (!line_of_token.count(std::string(1, static_cast<char>(b))))
      throw TextError(path + ": no token for the byte " + std::to_string(b) + " (every byte needs one)");
  return token_bytes;
}

std::vector<std::string> read_tiktoken_ranks(const std::string& path) {
  return parse_tiktoken_ranks(read_rank_file(path), path);
}

std::size_t count_tiktoken_ranks(const std::string& path) {
  std::size_t n = 0;
  for_lines(read_file(path), [&](std::size_t, std::string_view) { ++n; });
  return n;
}

}  // namespace tptrain::text
