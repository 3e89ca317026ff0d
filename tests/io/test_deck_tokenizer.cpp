// The deck keys of the tokenizer: data.tokenizer ("bytes" | "gpt2" | "cl100k_base" | "o200k_base" |
// "tiktoken:PATH"), data.tokenizer_dir and data.tokenizer_pattern, with the checks a BPE deck
// gets (its files, model.vocab_size, the pattern).
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "catch.hpp"
#include "io/deck.hpp"
#include "test_helpers.hpp"
#include "tests/data/scratch_dir.hpp"

using tptrain::io::DataFiles;
using tptrain::io::Deck;
using tptrain::io::DeckError;
using tptrain::io::load_deck;
using tptrain::test::put_bytes;
using tptrain::test::ScratchDir;

namespace {

// A deck file in `dir` with a train.txt beside it, plus `extra` lines.
std::string write_deck(const ScratchDir& dir, const std::string& model, const std::string& data) {
  put_bytes(dir.file("train.txt"), "some text\n");
  put_bytes(dir.file("deck.toml"), "[model]\n" + model + "\n[data]\ntrain = \"train.txt\"\n" + data + "\n");
  return dir.file("deck.toml");
}

std::string error_of(const std::string& deck, DataFiles files = DataFiles::required) {
  try {
    load_deck(deck, {}, files);
  } catch (const DeckError& e) {
    return e.what();
  }
  return "";
}

// XDG_CACHE_HOME set for one scope (the default folder of GPT-2's files follows it).
class CacheHome {
 public:
  explicit CacheHome(const std::string& value) {
    if (const char* old = std::getenv("XDG_CACHE_HOME")) old_ = old;
    setenv("XDG_CACHE_HOME", value.c_str(), 1);
  }
  ~CacheHome() {
    if (old_) setenv("XDG_CACHE_HOME", old_->c_str(), 1);
    else unsetenv("XDG_CACHE_HOME");
  }

 private:
  std::optional<std::string> old_;
};

}  // namespace

TEST_CASE("deck tokenizer: \"bytes\" by default, every existing deck unchanged", "[io][deck]") {
  ScratchDir dir("tptrain_deck_tok");
  const Deck d = load_deck(write_deck(dir, "", ""));
  CHECK(d.data.tokenizer == "bytes");
  CHECK(d.data.tokenizer_dir.empty());
  CHECK(Deck().data.tokenizer == "bytes");
  CHECK_THAT(error_of(write_deck(dir, "", "tokenizer = \"gpt3\"")),
             tptrain::test::contains("data.tokenizer = \"gpt3\": expected one of \"bytes\", \"gpt2\", \"cl100k_base\", \"o200k_base\", "
                                             "\"tiktoken:PATH\" (did you mean \"gpt2\"?)"));
}

TEST_CASE("deck tokenizer: \"gpt2\" needs its two files, named when missing", "[io][deck]") {
  ScratchDir dir("tptrain_deck_tok");
  std::filesystem::create_directory(dir.file("vocab"));
  const std::string deck = write_deck(dir, "vocab_size = 50304", "tokenizer = \"gpt2\"\ntokenizer_dir = \"vocab\"");
  const std::string e = error_of(deck);
  CHECK_THAT(e, tptrain::test::contains("deck.toml:6: data.tokenizer_dir = \"vocab\": expected GPT-2's encoder.json and "
                                        "vocab.bpe in that folder, but " + dir.file("vocab/encoder.json") +
                                        " does not exist and " + dir.file("vocab/vocab.bpe") + " does not exist"));
  CHECK_THAT(e, tptrain::test::contains("jobs/setup-deps.sh"));
  // check and plan: a warning; bench (no data): nothing.
  std::vector<std::string> warnings;
  CHECK_NOTHROW(load_deck(deck, {}, DataFiles::may_be_absent, &warnings));
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], tptrain::test::contains("needed by train, eval and generate"));
  CHECK(error_of(deck, DataFiles::ignored).empty());
  // With the files there (relative to the deck's folder) the deck is valid.
  put_bytes(dir.file("vocab/encoder.json"), "{}");
  put_bytes(dir.file("vocab/vocab.bpe"), "#version: 0.2\n");
  const Deck d = load_deck(deck);
  CHECK(d.data.tokenizer == "gpt2");
  CHECK(d.data.tokenizer_dir == dir.file("vocab"));
}

TEST_CASE("deck tokenizer: the default folder is the cache folder, named in the message", "[io][deck]") {
  ScratchDir dir("tptrain_deck_tok");
  const CacheHome cache(dir.file("cache"));
  const std::string e = error_of(write_deck(dir, "vocab_size = 50257", "tokenizer = \"gpt2\""));
  CHECK_THAT(e, tptrain::test::contains("data.tokenizer = \"gpt2\": expected GPT-2's encoder.json and vocab.bpe in "
                                        "data.tokenizer_dir (default " + dir.file("cache/tptrain/gpt2") + ")"));
  CHECK_THAT(e, tptrain::test::contains("or set data.tokenizer_dir"));
}

TEST_CASE("deck tokenizer: \"gpt2\" needs model.vocab_size >= 50257", "[io][deck]") {
  ScratchDir dir("tptrain_deck_tok");
  std::filesystem::create_directory(dir.file("vocab"));
  put_bytes(dir.file("vocab/encoder.json"), "{}");
  put_bytes(dir.file("vocab/vocab.bpe"), "");
  CHECK_THAT(error_of(write_deck(dir, "vocab_size = 256", "tokenizer = \"gpt2\"\ntokenizer_dir = \"vocab\"")),
             tptrain::test::contains("deck.toml:2: model.vocab_size = 256: expected an integer >= 50257 with "
                                     "data.tokenizer = \"gpt2\" (line 5): its tokens are 0..50256"));
  // The key changed on the command line is the one reported.
  try {
    load_deck(write_deck(dir, "vocab_size = 256", "tokenizer_dir = \"vocab\""), {"data.tokenizer=gpt2"});
    FAIL("no DeckError");
  } catch (const DeckError& e) {
    CHECK_THAT(std::string(e.what()), tptrain::test::contains("--set data.tokenizer=gpt2: data.tokenizer = \"gpt2\": "
                                                              "expected a tokenizer whose tokens fit model.vocab_size = "
                                                              "256 (" + dir.file("deck.toml") + ":2); \"gpt2\" has 50257"));
  }
  try {
    load_deck(write_deck(dir, "vocab_size = 50257", "tokenizer = \"gpt2\"\ntokenizer_dir = \"vocab\""),
              {"model.vocab_size=50000"});
    FAIL("no DeckError");
  } catch (const DeckError& e) {
    CHECK_THAT(std::string(e.what()), tptrain::test::contains("--set model.vocab_size=50000: model.vocab_size = 50000: "
                                                              "expected an integer >= 50257 with data.tokenizer"));
  }
}

TEST_CASE("deck tokenizer: tiktoken's encodings need their rank files and their ids in model.vocab_size",
          "[io][deck]") {
  ScratchDir dir("tptrain_deck_tok");
  const CacheHome cache(dir.file("cache"));
  // No rank file: an error for train, a warning for check and plan.
  const std::string deck = write_deck(dir, "vocab_size = 100277", "tokenizer = \"cl100k_base\"");
  CHECK_THAT(error_of(deck), tptrain::test::contains(
                                 "data.tokenizer = \"cl100k_base\": expected cl100k_base's rank file cl100k_base.tiktoken "
                                 "in data.tokenizer_dir (default " + dir.file("cache/tptrain/tiktoken") + ")"));
  CHECK_THAT(error_of(deck), tptrain::test::contains("jobs/fetch-tiktoken-ranks.sh"));
  CHECK(error_of(deck, DataFiles::may_be_absent).empty());
  CHECK_THAT(error_of(write_deck(dir, "vocab_size = 200000", "tokenizer = \"o200k_base\""), DataFiles::may_be_absent),
             tptrain::test::contains("model.vocab_size = 200000: expected an integer >= 200019 with data.tokenizer = "
                                     "\"o200k_base\" (line 5): its tokens are 0..200018"));
  CHECK_THAT(error_of(write_deck(dir, "vocab_size = 100277", "tokenizer = \"cl100k\"")),
             tptrain::test::contains("(did you mean \"cl100k_base\"?)"));
  CHECK_THAT(error_of(write_deck(dir, "vocab_size = 100277", "tokenizer = \"cl100k_base\"\ntokenizer_pattern = \"o200k\""),
                      DataFiles::may_be_absent),
             tptrain::test::contains("data.tokenizer_pattern = \"o200k\": expected \"\" with data.tokenizer = "
                                     "\"cl100k_base\" (" + dir.file("deck.toml") + ":5), which has its own pattern"));
}

TEST_CASE("deck tokenizer: \"tiktoken:PATH\" is relative to the deck and needs data.tokenizer_pattern", "[io][deck]") {
  ScratchDir dir("tptrain_deck_tok");
  std::string ranks;
  const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  for (int b = 0; b < 256; ++b)
    ranks += std::string{alphabet[b >> 2], alphabet[(b & 3) << 4], '=', '='} + " " + std::to_string(b) + "\n";
  put_bytes(dir.file("tokenizer.model"), ranks);
  const Deck d = load_deck(write_deck(dir, "vocab_size = 512", "tokenizer = \"tiktoken:tokenizer.model\"\n"
                                                              "tokenizer_pattern = \"llama3\""));
  CHECK(d.data.tokenizer == "tiktoken:" + dir.file("tokenizer.model"));
  CHECK(d.data.tokenizer_pattern == "llama3");
  CHECK_THAT(error_of(write_deck(dir, "vocab_size = 511", "tokenizer = \"tiktoken:tokenizer.model\"\n"
                                                          "tokenizer_pattern = \"llama3\"")),
             tptrain::test::contains("model.vocab_size = 511: expected an integer >= 512 with data.tokenizer = \"tiktoken:" +
                                     dir.file("tokenizer.model") + "\""));
  CHECK(error_of(write_deck(dir, "vocab_size = 257", "tokenizer = \"tiktoken:tokenizer.model\"\n"
                                                     "tokenizer_pattern = \"cl100k\"")).empty());
  CHECK_THAT(error_of(write_deck(dir, "vocab_size = 512", "tokenizer = \"tiktoken:tokenizer.model\"")),
             tptrain::test::contains("a tiktoken rank file needs data.tokenizer_pattern"));
  CHECK_THAT(error_of(write_deck(dir, "vocab_size = 512", "tokenizer = \"tiktoken:none.model\"\n"
                                                          "tokenizer_pattern = \"llama3\"")),
             tptrain::test::contains("expected the tiktoken rank file, but " + dir.file("none.model")));
  CHECK_THAT(error_of(write_deck(dir, "vocab_size = 512", "tokenizer = \"tiktoken:tokenizer.model\"\n"
                                                          "tokenizer_pattern = \"llama2\"")),
             tptrain::test::contains("data.tokenizer_pattern = \"llama2\": expected one of"));
}
