// tptrain's tokenizers equal tiktoken's core (@dqbd/tiktoken) token for token (hidden tag
// [tiktoken]: run by tests/text/compare_tiktoken.sh, which writes the reference file this reads
// and names the encoding: gpt2, cl100k_base or o200k_base).
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "catch.hpp"
#include "tests/text/gpt2_vocabulary_dir.hpp"
#include "text/tokenizer.hpp"

using namespace tptrain::text;

TEST_CASE("Tokenizers: equal to tiktoken on every reference case", "[.][tiktoken]") {
  const char* reference = std::getenv("TPTRAIN_TIKTOKEN_REFERENCE");
  const char* encoding = std::getenv("TPTRAIN_TIKTOKEN_ENCODING");
  if (!reference || !encoding)
    FAIL("TPTRAIN_TIKTOKEN_REFERENCE and TPTRAIN_TIKTOKEN_ENCODING are not set: run tests/text/compare_tiktoken.sh");
  std::ifstream in(reference);
  REQUIRE(in);
  const std::string name = encoding;
  const auto tokenizer = make_tokenizer(name, name == "gpt2" ? tptrain::test::gpt2_vocabulary_dir() : std::string());
  REQUIRE(tokenizer->name() == name);
  int cases = 0, specials = 0;
  for (std::string line; std::getline(in, line);) {
    const auto record = nlohmann::json::parse(line);
    const std::string case_name = record.at("name"), text = record.at("text");
    const bool special = record.at("special");
    const std::vector<Token> expected = record.at("tokens");
    std::vector<Token> got;
    if (special) {
      got = tokenizer->encode(text);
    } else {
      tokenizer->encode_ordinary(text, got);
    }
    std::size_t first_difference = 0;
    while (first_difference < got.size() && first_difference < expected.size() &&
           got[first_difference] == expected[first_difference])
      ++first_difference;
    INFO(name << ", " << case_name << ": " << got.size() << " tokens against tiktoken's " << expected.size()
              << ", first difference at token " << first_difference << "; text " << nlohmann::json(text).dump());
    REQUIRE(got == expected);
    REQUIRE(tokenizer->decode(got) == text);
    ++cases;
    specials += special;
  }
  CHECK(cases > 500);
  CHECK(specials > 50);
}
