// GPT-2's pre-tokenization (text/pretokenizer.hpp) and the UTF-8 check (text/utf8.hpp).
#include <random>
#include <string>
#include <vector>

#include "catch.hpp"
#include "text/pretokenizer.hpp"
#include "text/text_error.hpp"
#include "text/utf8.hpp"

using namespace tptrain::text;

namespace {

std::vector<std::string> pieces(const std::string& text) {
  static const Pretokenizer pretokenizer;
  std::vector<std::string> out;
  pretokenizer.split(text, [&](std::string_view p) { out.emplace_back(p); });
  return out;
}

using V = std::vector<std::string>;

}  // namespace

TEST_CASE("pre-tokenizer: GPT-2's pieces", "[text]") {
  CHECK(pieces("Hello world") == V{"Hello", " world"});
  CHECK(pieces("it's they're we've I'm you'll she'd don't") ==
        V{"it", "'s", " they", "'re", " we", "'ve", " I", "'m", " you", "'ll", " she", "'d", " don", "'t"});
  CHECK(pieces("IT'S") == V{"IT", "'", "S"});  // the contractions are lower case only
  CHECK(pieces("x 2024 3.14") == V{"x", " 2024", " 3", ".", "14"});
  CHECK(pieces("a, b!!") == V{"a", ",", " b", "!!"});
  CHECK(pieces("\xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80\xF0\x9F\x98\x80") ==  // 中文 😀😀
        V{"\xE4\xB8\xAD\xE6\x96\x87", " \xF0\x9F\x98\x80\xF0\x9F\x98\x80"});
}

TEST_CASE("pre-tokenizer: white space keeps its last space for the next word", "[text]") {
  CHECK(pieces("a  b") == V{"a", " ", " b"});
  CHECK(pieces("a   b") == V{"a", "  ", " b"});
  CHECK(pieces("a\n\nb") == V{"a", "\n", "\n", "b"});
  CHECK(pieces("a \n b") == V{"a", " \n", " b"});
  CHECK(pieces("a\t\t") == V{"a", "\t\t"});  // at the end: all of it
  CHECK(pieces("   ") == V{"   "});
}

TEST_CASE("pre-tokenizer: white space is Unicode's White_Space", "[text]") {
  CHECK(pieces("a\xC2\xA0" "b") == V{"a", "\xC2\xA0", "b"});  // U+00A0 no-break space
  CHECK(pieces("a\xE3\x80\x80" "b") == V{"a", "\xE3\x80\x80", "b"});  // U+3000 ideographic space
  // U+180E Mongolian vowel separator: not White_Space since Unicode 6.3 (tiktoken agrees), though
  // PCRE2's own \s under PCRE2_UCP still takes it: two of them are one run of "other" symbols.
  CHECK(pieces("x\xE1\xA0\x8E\xE1\xA0\x8Ey") == V{"x", "\xE1\xA0\x8E\xE1\xA0\x8E", "y"});
}

TEST_CASE("pre-tokenizer: the pieces cover the text exactly, long runs included", "[text]") {
  std::mt19937 rng(7);
  const std::vector<std::string> atoms{"a", "Z", "7", " ", "  ", "\n", "\t", "'", "'s", ".", "\xC3\xA9", "\xE4\xB8\xAD",
                                       "\xF0\x9F\x98\x80", "\xC2\xA0", "\r\n"};
  for (int i = 0; i < 300; ++i) {
    std::string text;
    const int n = static_cast<int>(rng() % 80);
    for (int k = 0; k < n; ++k) text += atoms[rng() % atoms.size()];
    std::string joined;
    for (const std::string& p : pieces(text)) {
      REQUIRE(!p.empty());
      joined += p;
    }
    REQUIRE(joined == text);
  }
  // A megabyte without a break: JIT matching needs no stack per character.
  const std::string spaces(1 << 20, ' ');
  CHECK(pieces(spaces + "a") == V{std::string((1 << 20) - 1, ' '), " a"});
  CHECK(pieces(std::string(1 << 20, 'x')).size() == 1);
}

TEST_CASE("UTF-8: PCRE2's check finds the first bad byte", "[text]") {
  CHECK_FALSE(utf8_problem("plain, \xC3\xA9, \xF0\x9F\x98\x80"));
  CHECK_FALSE(utf8_problem(std::string("nul\0inside", 10)));
  const auto offset = [](const std::string& s) { return utf8_problem(s).value().offset(); };
  CHECK(offset("ab\xFF" "cd") == 2);          // never in UTF-8
  CHECK(offset("ab\x80") == 2);               // a continuation byte alone
  CHECK(offset("abc\xE4\xB8") == 3);          // truncated at the end
  CHECK(offset("x\xC0\xAF") == 1);            // overlong '/'
  CHECK(offset("xy\xED\xA0\x80") == 2);       // a surrogate, U+D800
  CHECK(offset("\xF4\x90\x80\x80") == 0);     // above U+10FFFF
  CHECK_THROWS_AS(require_utf8("\xFF"), InvalidUtf8);
  // The pre-tokenizer refuses such text before it yields any piece.
  int calls = 0;
  const Pretokenizer pretokenizer;
  try {
    pretokenizer.split("good words, then \xFF", [&](std::string_view) { ++calls; });
    FAIL("no exception");
  } catch (const InvalidUtf8& e) {
    CHECK(e.offset() == 17);
    CHECK(std::string(e.what()).find("byte offset 17") != std::string::npos);
  }
  CHECK(calls == 0);
}

// o200k's ASCII matcher (pretokenizer.cpp) against PCRE2 alone: the same pieces on random text
// that mixes ASCII words of both cases, contractions, digits, punctuation, every ASCII space and
// line break with the non-ASCII characters that could change a piece: letters of both cases and
// other scripts, a combining mark, ſ (folds to s: 'ſ is a contraction), non-ASCII digits, spaces
// and symbols.
TEST_CASE("pre-tokenizer: o200k's ASCII matcher gives PCRE2's pieces", "[text]") {
  const Pretokenizer fast(SplitPattern::o200k, Pretokenizer::Matcher::ascii_fast_path);
  const Pretokenizer reference(SplitPattern::o200k, Pretokenizer::Matcher::pcre2_only);
  const std::vector<std::string> atoms{
      "a", "b", "z", "A", "Q", "Z", "Hello", "WORLD", "camelCase", "'", "'s", "'S", "'re", "'VE", "'ll", "'d",
      "'m", "'t", "'x", "0", "7", "123", "4567", " ", "  ", "\t", "\n", "\r\n", "\r", "\v", "\f", ".", ",", "!",
      "?", "/", "(", ")", "-", "_", "\"", "#", "\x01", "\x7f", "\xc3\xa9" /* é */, "\xc3\x89" /* É */,
      "\xc5\xbf" /* ſ */, "\xcc\x81" /* combining acute */, "\xd9\xa3" /* ٣ */, "\xc2\xb2" /* ² */,
      "\xc2\xa0" /* NBSP */, "\xc2\x85" /* NEL */, "\xe2\x80\x9c" /* “ */, "\xe4\xb8\xad" /* 中 */,
      "\xd0\x96" /* Ж */, "\xf0\x9f\x98\x80" /* 😀 */, "\xe2\x80\x8d" /* ZWJ */, "\xe3\x80\x80" /* ideographic space */};
  std::mt19937 rng(20261205);
  std::uniform_int_distribution<std::size_t> pick(0, atoms.size() - 1), length(1, 40);
  const auto split = [](const Pretokenizer& p, const std::string& text) {
    std::vector<std::string> out;
    p.split(text, [&](std::string_view piece) { out.emplace_back(piece); });
    return out;
  };
  for (int trial = 0; trial < 20000; ++trial) {
    std::string text;
    for (std::size_t n = length(rng); n > 0; --n) text += atoms[pick(rng)];
    INFO(text);
    REQUIRE(split(fast, text) == split(reference, text));
  }
  // And the plain cases, written out.
  CHECK(split(fast, "x HelloWorld it's IT'S 12345 a...b !!/\n\n  c\t") ==
        V{"x", " Hello", "World", " it's", " IT'S", " ", "123", "45", " a", "...", "b", " !!/\n\n", " ", " c", "\t"});
}
