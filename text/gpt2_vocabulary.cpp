#include "text/gpt2_vocabulary.hpp"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "text/byte_unicode.hpp"
#include "text/gpt2_files.hpp"
#include "text/text_error.hpp"

namespace tptrain::text {
namespace {

constexpr const char* kEndOfText = "<|endoftext|>";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw TextError("cannot read " + path + ": " + std::strerror(errno) + "; " + gpt2_files_hint());
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw TextError("cannot read " + path + ": read error");
  return text.str();
}

// Token id by vocabulary spelling (mapped text).
using Encoder = std::unordered_map<std::string, std::uint32_t>;

Encoder read_encoder(const std::string& path, Gpt2Vocabulary& v) {
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw TextError(path + ": not valid JSON: " + e.what());
  }
  if (!json.is_object() || json.empty())
    throw TextError(path + ": expected a JSON object of token ids (\"text\": id), got " + json.type_name());
  const std::size_t n = json.size();
  Encoder encoder;
  encoder.reserve(n);
  v.token_bytes.assign(n, {});
  std::vector<bool> seen(n, false);
  for (const auto& [key, value] : json.items()) {
    if (!value.is_number_unsigned() || value.get<std::uint64_t>() >= n)
      throw TextError(path + ": the id of " + nlohmann::json(key).dump() + " is " + value.dump() +
                      ", expected an integer from 0 to " + std::to_string(n - 1) + " (ids are 0..N-1 for N entries)");
    const auto id = value.get<std::uint32_t>();
    if (seen[id]) throw TextError(path + ": id " + std::to_string(id) + " is given to two entries");
    seen[id] = true;
    if (key == kEndOfText) {
      v.token_bytes[id] = key;  // decodes to its own text
      v.end_of_text = id;
    } else if (const auto bytes = mapped_text_to_bytes(key)) {
      v.token_bytes[id] = *bytes;
    } else {
      throw TextError(path + ": entry " + nlohmann::json(key).dump() +
                      " is not written in GPT-2's byte-to-unicode alphabet");
    }
    encoder.emplace(key, id);
  }
  if (!encoder.count(kEndOfText)) throw TextError(path + ": no entry \"<|endoftext|>\"");
  for (unsigned b = 0; b < 256; ++b) {
    const auto it = encoder.find(bytes_to_mapped_text(std::string(1, static_cast<char>(b))));
    if (it == encoder.end())
      throw TextError(path + ": no token for the byte " + std::to_string(b) + " (every byte needs one)");
    v.byte_token[b] = it->second;
  }
  return encoder;
}

void read_merges(const std::string& path, const Encoder& encoder, Gpt2Vocabulary& v) {
  std::istringstream text(read_file(path));
  std::unordered_map<std::uint64_t, std::size_t> line_of_pair;
  std::string line;
  for (std::size_t number = 1; std::getline(text, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if ((number == 1 && line.rfind("#version", 0) == 0) || line.empty()) continue;
    const auto where = path + ":" + std::to_string(number) + ": ";
    const std::size_t space = line.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string::npos)
      throw TextError(where + "expected two tokens separated by one space, got " + nlohmann::json(line).dump());
    const std::string left = line.substr(0, space), right = line.substr(space + 1);
    const auto find = [&](const std::string& token) {
      const auto it = encoder.find(token);
      if (it == encoder.end())
        throw TextError(where + nlohmann::json(token).dump() + " is not an entry of " + kGpt2EncoderFile);
      return it->second;
    };
    const Merge m{find(left), find(right), find(left + right)};
    const std::uint64_t pair = static_cast<std::uint64_t>(m.left) << 32 | m.right;
    if (const auto [it, fresh] = line_of_pair.emplace(pair, number); !fresh)
      throw TextError(where + "the pair " + nlohmann::json(line).dump() + " is already merged on line " +
                      std::to_string(it->second));
    v.merges.push_back(m);
  }
  if (v.merges.empty()) throw TextError(path + ": no merges");
}

}  // namespace

Gpt2Vocabulary Gpt2Vocabulary::load(const std::string& dir) {
  const std::vector<std::string> paths = gpt2_file_paths(dir);
  Gpt2Vocabulary v;
  const Encoder encoder = read_encoder(paths[0], v);
  read_merges(paths[1], encoder, v);
  return v;
}

}  // namespace tptrain::text
