#include "text/tiktoken_encoding.hpp"

#include <filesystem>

#include "text/cache_dir.hpp"
#include "text/sha256.hpp"
#include "text/text_error.hpp"

namespace tptrain::text {
namespace {

struct NamedEncoding {
  std::string_view name;
  std::size_t ranks;
  // Of OpenAI's rank file, as tiktoken checks it (expected_hash); also in
  // jobs/fetch-tiktoken-ranks.sh, which a test holds equal.
  std::string_view sha256;
  SplitPattern pattern;
  std::vector<std::pair<std::string, Token>> special_tokens;  // the first separates documents
};

const std::vector<NamedEncoding>& named_encodings() {
  // tiktoken_ext/openai_public.py.
  static const std::vector<NamedEncoding> named{
      {"cl100k_base",
       100256,
       "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
       SplitPattern::cl100k,
       {{"<|endoftext|>", 100257},
        {"<|fim_prefix|>", 100258},
        {"<|fim_middle|>", 100259},
        {"<|fim_suffix|>", 100260},
        {"<|endofprompt|>", 100276}}},
      {"o200k_base",
       199998,
       "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
       SplitPattern::o200k,
       {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}}},
  };
  return named;
}

const NamedEncoding* find_named(std::string_view name) {
  for (const NamedEncoding& e : named_encodings())
    if (e.name == name) return &e;
  return nullptr;
}

// meta-llama/llama3 llama/tokenizer.py: 256 special tokens after the ranks.
std::vector<std::pair<std::string, Token>> llama3_special_tokens(std::size_t ranks) {
  std::vector<std::string> names{"<|begin_of_text|>",
                                 "<|end_of_text|>",
                                 "<|reserved_special_token_0|>",
                                 "<|reserved_special_token_1|>",
                                 "<|reserved_special_token_2|>",
                                 "<|reserved_special_token_3|>",
                                 "<|start_header_id|>",
                                 "<|end_header_id|>",
                                 "<|reserved_special_token_4|>",
                                 "<|eot_id|>"};
  for (int i = 5; i < 256 - 5; ++i) names.push_back("<|reserved_special_token_" + std::to_string(i) + "|>");
  std::vector<std::pair<std::string, Token>> tokens;
  for (std::size_t i = 0; i < names.size(); ++i) tokens.emplace_back(names[i], static_cast<Token>(ranks + i));
  return tokens;
}

std::string patterns_text() {
  std::string s;
  for (std::string_view p : tiktoken_pattern_names()) s += (s.empty() ? "\"" : ", \"") + std::string(p) + "\"";
  return s;
}

}  // namespace

bool is_tiktoken_name(std::string_view name) {
  return find_named(name) || name.substr(0, kTiktokenFilePrefix.size()) == kTiktokenFilePrefix;
}

std::string_view tiktoken_file_of(std::string_view name) {
  if (name.substr(0, kTiktokenFilePrefix.size()) != kTiktokenFilePrefix) return {};
  return name.substr(kTiktokenFilePrefix.size());
}

const std::vector<std::string_view>& tiktoken_pattern_names() {
  static const std::vector<std::string_view> names{"cl100k", "o200k", "llama3"};
  return names;
}

std::optional<SplitPattern> split_pattern_named(std::string_view pattern) {
  if (pattern == "cl100k" || pattern == "llama3") return SplitPattern::cl100k;
  if (pattern == "o200k") return SplitPattern::o200k;
  return std::nullopt;
}

std::optional<std::size_t> named_tiktoken_ranks(std::string_view name) {
  if (const NamedEncoding* e = find_named(name)) return e->ranks;
  return std::nullopt;
}

std::optional<std::string_view> named_tiktoken_sha256(std::string_view name) {
  if (const NamedEncoding* e = find_named(name)) return e->sha256;
  return std::nullopt;
}

void check_named_tiktoken_file(std::string_view name, const std::string& path, std::string_view bytes) {
  const NamedEncoding* named = find_named(name);
  if (!named) return;
  const std::string got = sha256_hex(bytes);
  if (got == named->sha256) return;
  const std::string folder = std::filesystem::path(path).parent_path().string();
  throw TextError(path + " is not OpenAI's " + std::string(name) + " rank file: its SHA-256 is " + got +
                  ", expected " + std::string(named->sha256) + " (an edited, truncated or other file under that " +
                  "name). Fetch the right one with jobs/fetch-tiktoken-ranks.sh " + (folder.empty() ? "." : folder) +
                  ", or use ranks of your own as the tokenizer \"tiktoken:" + path +
                  "\" with the pre-tokenization pattern \"" + std::string(split_pattern_name(named->pattern)) + "\"");
}

std::string default_tiktoken_dir() { return tptrain_cache_dir("tiktoken"); }

std::string tiktoken_files_hint() {
  const std::string dir = default_tiktoken_dir();
  return "jobs/setup-deps.sh (or jobs/fetch-tiktoken-ranks.sh) fetches them into " +
         (dir.empty() ? std::string("${XDG_CACHE_HOME:-$HOME/.cache}/tptrain/tiktoken") : dir);
}

std::string tiktoken_ranks_path(std::string_view name, const std::string& dir) {
  if (find_named(name)) {
    const std::string folder = dir.empty() ? default_tiktoken_dir() : dir;
    if (folder.empty())
      throw TextError("no folder for tiktoken's rank files: neither XDG_CACHE_HOME nor HOME is set; name the folder");
    return (std::filesystem::path(folder) / (std::string(name) + ".tiktoken")).string();
  }
  const std::string_view path = tiktoken_file_of(name);
  if (path.empty())
    throw TextError("tokenizer \"" + std::string(name) + "\" is not a tiktoken encoding: expected \"cl100k_base\", "
                    "\"o200k_base\" or \"tiktoken:PATH\" (PATH a rank file)");
  return std::string(path);
}

void check_tiktoken_pattern(std::string_view name, std::string_view pattern) {
  if (find_named(name)) {
    if (!pattern.empty())
      throw TextError("a pre-tokenization pattern (\"" + std::string(pattern) + "\") is given with the tokenizer \"" +
                      std::string(name) + "\", which has its own: a pattern goes with \"tiktoken:PATH\" only");
    return;
  }
  if (pattern.empty())
    throw TextError("the tokenizer \"" + std::string(name) + "\" needs a pre-tokenization pattern (data.tokenizer_pattern, "
                    "`tokenize --tokenizer-pattern`): one of " + patterns_text());
  if (!split_pattern_named(pattern))
    throw TextError("unknown pre-tokenization pattern \"" + std::string(pattern) + "\": expected one of " +
                    patterns_text());
}

TiktokenEncoding tiktoken_encoding(std::string_view name, std::string_view pattern, const std::string& dir,
                                   std::size_t ranks) {
  check_tiktoken_pattern(name, pattern);
  TiktokenEncoding e;
  e.name = std::string(name);
  e.ranks_path = tiktoken_ranks_path(name, dir);
  if (const NamedEncoding* named = find_named(name)) {
    if (ranks != named->ranks)
      throw TextError(e.ranks_path + " holds " + std::to_string(ranks) + " tokens, " + e.name + " has " +
                      std::to_string(named->ranks) + " (not OpenAI's file? " + tiktoken_files_hint() + ")");
    e.pattern = named->pattern;
    e.special_tokens = named->special_tokens;
  } else {
    e.pattern = *split_pattern_named(pattern);
    if (pattern == "llama3")
      e.special_tokens = llama3_special_tokens(ranks);
    else
      e.special_tokens = {{"<|endoftext|>", static_cast<Token>(ranks)}};
  }
  e.end_of_text = e.special_tokens.front().second;
  e.vocab_size = ranks;
  for (const auto& [text, id] : e.special_tokens) e.vocab_size = std::max<std::size_t>(e.vocab_size, id + std::size_t{1});
  return e;
}

}  // namespace tptrain::text
