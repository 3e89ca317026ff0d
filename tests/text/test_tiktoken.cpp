// tptrain's GPT-2 tokenizer equals js-tiktoken's token for token (hidden tag [tiktoken]: run by
// tests/text/compare_tiktoken.sh, which writes the reference file this reads).
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "catch.hpp"
#include "tests/text/gpt2_vocabulary_dir.hpp"
#include "text/gpt2_tokenizer.hpp"

using namespace tptrain::text;

TEST_CASE("GPT-2 tokenizer: equal to js-tiktoken on every reference case", "[.][tiktoken]") {
  const char* reference = std::getenv("TPTRAIN_TIKTOKEN_REFERENCE");
  if (!reference) FAIL("TPTRAIN_TIKTOKEN_REFERENCE is not set: run tests/text/compare_tiktoken.sh");
  std::ifstream in(reference);
  REQUIRE(in);
  Gpt2Tokenizer tokenizer(Gpt2Vocabulary::load(tptrain::test::gpt2_vocabulary_dir()));
  int cases = 0, specials = 0;
  for (std::string line; std::getline(in, line);) {
    const auto record = nlohmann::json::parse(line);
    const std::string name = record.at("name"), text = record.at("text");
    const bool special = record.at("special");
    const std::vector<Token> expected = record.at("tokens");
    std::vector<Token> got;
    if (special) {
      got = tokenizer.encode(text);
    } else {
      tokenizer.encode_ordinary(text, got);
    }
    std::size_t first_difference = 0;
    while (first_difference < got.size() && first_difference < expected.size() &&
           got[first_difference] == expected[first_difference])
      ++first_difference;
    INFO(name << ": " << got.size() << " tokens against js-tiktoken's " << expected.size()
              << ", first difference at token " << first_difference << "; text " << nlohmann::json(text).dump());
    REQUIRE(got == expected);
    REQUIRE(tokenizer.decode(got) == text);
    ++cases;
    specials += special;
  }
  CHECK(cases > 400);
  CHECK(specials > 20);
}
