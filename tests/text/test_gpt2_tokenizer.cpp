// GPT-2's tokenizer on GPT-2's own files (hidden tag [gpt2]: needs jobs/fetch-gpt2-vocab.sh).
// Token values come from GPT-2's published vocabulary (and agree with js-tiktoken); the full
// comparison with js-tiktoken is tests/text/compare_tiktoken.sh.
#include <random>
#include <string>
#include <vector>

#include "catch.hpp"
#include "tests/text/gpt2_vocabulary_dir.hpp"
#include "text/byte_unicode.hpp"
#include "text/gpt2_tokenizer.hpp"
#include "text/text_error.hpp"
#include "text/tokenizer.hpp"

using namespace tptrain::text;
using tptrain::test::gpt2_vocabulary_dir;

namespace {

Gpt2Tokenizer& gpt2() {
  static Gpt2Tokenizer tokenizer(Gpt2Vocabulary::load(gpt2_vocabulary_dir()));
  return tokenizer;
}

using T = std::vector<Token>;

// Random valid UTF-8: code points from every length class (1 to 4 bytes), surrogates excluded.
std::string random_utf8(std::mt19937& rng, int length) {
  static const std::pair<char32_t, char32_t> ranges[] = {
      {0x00, 0x7F}, {0x20, 0x7E}, {0x80, 0x7FF}, {0x800, 0xD7FF}, {0xE000, 0xFFFF}, {0x10000, 0x10FFFF}, {0x4E00, 0x9FFF}, {0x1F300, 0x1FAFF}};
  std::string out;
  for (int i = 0; i < length; ++i) {
    const auto& [lo, hi] = ranges[rng() % std::size(ranges)];
    const char32_t cp = lo + static_cast<char32_t>(rng() % (hi - lo + 1));
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  return out;
}

}  // namespace

TEST_CASE("GPT-2 vocabulary: 50257 tokens, 50000 merges, <|endoftext|> = 50256", "[.][gpt2]") {
  const Gpt2Vocabulary v = Gpt2Vocabulary::load(gpt2_vocabulary_dir());
  CHECK(v.token_bytes.size() == 50257);
  CHECK(v.merges.size() == 50000);
  CHECK(v.end_of_text == 50256);
  CHECK(v.token_bytes[50256] == "<|endoftext|>");
  // The byte tokens: encoder.json lists the 188 printable bytes first, in byte order ("!" = 0),
  // then the 68 others (the space, spelled Ġ, is 220).
  CHECK(v.byte_token['!'] == 0);
  CHECK(v.byte_token[' '] == 220);
  CHECK(v.byte_token['\n'] == 198);
  // The first merge of vocab.bpe, "Ġ t", makes token 256, " t".
  CHECK(v.merges[0].left == 220);
  CHECK(v.merges[0].right == v.byte_token['t']);
  CHECK(v.merges[0].merged == 256);
  CHECK(v.token_bytes[256] == " t");
}

TEST_CASE("GPT-2 tokenizer: known encodings", "[.][gpt2]") {
  Gpt2Tokenizer& t = gpt2();
  CHECK(t.name() == "gpt2");
  CHECK(t.vocab_size() == 50257);
  CHECK(t.end_of_text() == std::optional<Token>(50256));
  CHECK(t.end_of_text() == tptrain::text::end_of_text_of("gpt2"));  // the id the model's document masks use
  CHECK_FALSE(tptrain::text::end_of_text_of("bytes"));
  CHECK(t.encode("Hello world") == T{15496, 995});
  CHECK(t.encode(" the") == T{262});
  CHECK(t.encode("\n\n") == T{628});
  CHECK(t.encode("<|endoftext|>") == T{50256});
  T ordinary;
  t.encode_ordinary("<|endoftext|>", ordinary);  // as text: "<|", "endoftext", "|>"
  CHECK(ordinary.size() > 1);
  CHECK(t.decode(ordinary) == "<|endoftext|>");
  CHECK(t.encode("a<|endoftext|>b") == T{64, 50256, 65});
}

TEST_CASE("GPT-2 tokenizer: decode(encode(x)) == x for valid UTF-8", "[.][gpt2]") {
  Gpt2Tokenizer& t = gpt2();
  std::mt19937 rng(20240520);
  for (int i = 0; i < 3000; ++i) {
    const std::string text = random_utf8(rng, static_cast<int>(rng() % 64));
    T tokens;
    t.encode_ordinary(text, tokens);
    INFO("case " << i << ", " << text.size() << " bytes");
    REQUIRE(t.decode(tokens) == text);
    REQUIRE(t.decode(t.encode(text)) == text);
  }
  // Text that repeats: the cache gives the same tokens as the first merge.
  const std::string words = "the cat sat on the mat; the cat sat on the mat";
  CHECK(t.encode(words) == t.encode(words));
  CHECK(t.decode(t.encode(words)) == words);
}

TEST_CASE("GPT-2 tokenizer: bad input is refused", "[.][gpt2]") {
  Gpt2Tokenizer& t = gpt2();
  T tokens{1, 2};
  try {
    t.encode_ordinary("caf\xC3", tokens);
    FAIL("no exception");
  } catch (const InvalidUtf8& e) {
    CHECK(e.offset() == 3);
  }
  CHECK(tokens == T{1, 2});  // nothing appended
  CHECK_THROWS_AS(t.encode("ok <|endoftext|> \xFF"), InvalidUtf8);
  try {
    (void)t.decode({15496, 50257});
    FAIL("no exception");
  } catch (const TextError& e) {
    CHECK(std::string(e.what()).find("token 50257 at index 1") != std::string::npos);
  }
}

TEST_CASE("GPT-2 tokenizer: make_tokenizer loads it by name", "[.][gpt2]") {
  auto t = make_tokenizer("gpt2", gpt2_vocabulary_dir());
  CHECK(t->name() == "gpt2");
  CHECK(t->encode("Hello world") == T{15496, 995});
}
