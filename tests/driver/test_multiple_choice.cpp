// Multiple-choice rows (src/driver/multiple_choice.hpp): lm-eval's split of context and ending,
// the left truncation to the window, and the refusals. The scores themselves are checked against
// an independent Python forward by tests/multiple_choice_eval.py.
#include "catch.hpp"

#include <string>
#include <vector>

#include "src/driver/multiple_choice.hpp"
#include "tests/text/gpt2_vocabulary_dir.hpp"
#include "text/tokenizer.hpp"

using tptrain::driver::choice_row;
using tptrain::driver::move_trailing_whitespace;

namespace {
std::vector<std::int32_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }
}  // namespace

TEST_CASE("lm-eval's split: white space at the end of the context moves to the ending", "[driver][tasks]") {
  using P = std::pair<std::string, std::string>;
  CHECK(move_trailing_whitespace("A man", " runs") == P{"A man", " runs"});
  CHECK(move_trailing_whitespace("A man ", "runs") == P{"A man", " runs"});
  CHECK(move_trailing_whitespace("A man \t\n", "runs") == P{"A man", " \t\nruns"});
  // Python's str.isspace: NO-BREAK SPACE (C2 A0) and IDEOGRAPHIC SPACE (E3 80 80) too, not
  // ZERO WIDTH SPACE (E2 80 8B) nor the é before them.
  CHECK(move_trailing_whitespace("caf\xc3\xa9\xc2\xa0\xe3\x80\x80", "x") ==
        P{"caf\xc3\xa9", "\xc2\xa0\xe3\x80\x80x"});
  CHECK(move_trailing_whitespace("a\xe2\x80\x8b", "x") == P{"a\xe2\x80\x8b", "x"});
  CHECK(move_trailing_whitespace("   ", "x") == P{"", "   x"});
  CHECK(move_trailing_whitespace("", "x") == P{"", "x"});
}

TEST_CASE("a byte model's row: context bytes then ending bytes, the last S + 1 kept", "[driver][tasks]") {
  const auto bytes = tptrain::text::make_tokenizer("bytes");
  auto row = choice_row("ab ", "cd", *bytes, 8);
  CHECK(row.tokens == bytes_of("ab cd"));
  CHECK(row.continuation == 3);  // " cd": the space moved to the ending
  CHECK_FALSE(row.truncated);
  row = choice_row("0123456789", "xy", *bytes, 8);  // 12 tokens, window 9
  CHECK(row.tokens == bytes_of("3456789xy"));
  CHECK(row.continuation == 2);
  CHECK(row.truncated);
  row = choice_row("", "xy", *bytes, 8);  // no context: a newline starts it, as generate's empty prompt
  CHECK(row.tokens == bytes_of("\nxy"));
  CHECK(row.continuation == 2);
  row = choice_row(" \t", "xy", *bytes, 8);  // white space only: it moves, and the newline starts it too
  CHECK(row.tokens == bytes_of("\n \txy"));
  CHECK(row.continuation == 4);
  row = choice_row("c", "12345678", *bytes, 8);  // an ending of S tokens still has one before it
  CHECK(row.tokens == bytes_of("c12345678"));
  CHECK_THROWS_WITH(choice_row("c", "123456789", *bytes, 8),
                    "has 9 tokens, more than the model's window (model.seq_length = 8)");
}

TEST_CASE("a GPT-2 row: the ending's tokens are encode(context + ending) after encode(context)'s", "[.][gpt2]") {
  const auto gpt2 = tptrain::text::make_tokenizer("gpt2", tptrain::test::gpt2_vocabulary_dir());
  const auto ids = [&](const std::string& s) {
    std::vector<std::int32_t> out;
    for (auto t : gpt2->encode(s)) out.push_back(static_cast<std::int32_t>(t));
    return out;
  };
  // "Hello world": the space moves to the ending, which then is the token " world".
  const auto row = choice_row("Hello ", "world", *gpt2, 64);
  CHECK(row.tokens == ids("Hello world"));
  CHECK(row.continuation == 1);
  // A merge across the boundary: "abc" + "d" as one token leaves the ending nothing of its own.
  const std::vector<std::int32_t> whole = ids("Hello"), part = ids("Hel");
  REQUIRE(whole.size() == 1);
  REQUIRE(part.size() == 1);
  CHECK_THROWS_WITH(choice_row("Hel", "lo", *gpt2, 64),
                    "adds no token to the context's: the gpt2 tokenizer encodes the context in 1 tokens and context + "
                    "ending in 1");
  // <|endoftext|> written out is that token, as generate's prompt; no context is that token too.
  CHECK(choice_row("", " world", *gpt2, 64).tokens == std::vector<std::int32_t>{50256, ids(" world")[0]});
}
