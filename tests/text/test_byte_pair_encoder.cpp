// The merge loop of byte-pair encoding (text/byte_pair_encoder.hpp) on small hand-made
// vocabularies, where the right answer can be worked out by hand from GPT-2's bpe().
#include <string>
#include <vector>

#include "catch.hpp"
#include "text/byte_pair_encoder.hpp"

using namespace tptrain::text;

namespace {

// Bytes are tokens 0..255; merge k (rank k) makes token 256 + k from two earlier tokens.
struct TinyVocabulary {
  Gpt2Vocabulary v;
  TinyVocabulary() {
    for (unsigned b = 0; b < 256; ++b) {
      v.byte_token[b] = b;
      v.token_bytes.push_back(std::string(1, static_cast<char>(b)));
    }
  }
  std::uint32_t merge(std::uint32_t left, std::uint32_t right) {
    const auto id = static_cast<std::uint32_t>(v.token_bytes.size());
    v.merges.push_back({left, right, id});
    v.token_bytes.push_back(v.token_bytes[left] + v.token_bytes[right]);
    return id;
  }
  std::uint32_t merge(char left, char right) {
    return merge(static_cast<std::uint32_t>(left), static_cast<std::uint32_t>(right));
  }
  std::uint32_t merge(std::uint32_t left, char right) { return merge(left, static_cast<std::uint32_t>(right)); }
  std::uint32_t merge(char left, std::uint32_t right) { return merge(static_cast<std::uint32_t>(left), right); }
  std::vector<std::uint32_t> encode(const std::string& piece) const {
    std::vector<std::uint32_t> out;
    BytePairEncoder(v).encode(piece, out);
    return out;
  }
};

using T = std::vector<std::uint32_t>;

}  // namespace

TEST_CASE("BPE: the lowest rank merges first, wherever it is", "[text]") {
  TinyVocabulary t;
  const auto bc = t.merge('b', 'c');  // rank 0
  const auto ab = t.merge('a', 'b');  // rank 1: would come first left to right, but ranks lower
  CHECK(t.encode("abc") == T{'a', bc});
  CHECK(t.encode("abx") == T{ab, 'x'});
  CHECK(t.encode("") == T{});
  CHECK(t.encode("z") == T{'z'});
  CHECK(t.encode("xyz") == T{'x', 'y', 'z'});  // nothing to merge
}

TEST_CASE("BPE: a pair's occurrences merge left to right without overlapping", "[text]") {
  TinyVocabulary t;
  const auto aa = t.merge('a', 'a');
  CHECK(t.encode("aaa") == T{aa, 'a'});
  CHECK(t.encode("aaaaa") == T{aa, aa, 'a'});
  const auto aaaa = t.merge(aa, aa);
  CHECK(t.encode("aaaaa") == T{aaaa, 'a'});
  CHECK(t.encode("aaaaaaaaa") == T{aaaa, aaaa, 'a'});
}

TEST_CASE("BPE: merged tokens merge again, in rank order", "[text]") {
  TinyVocabulary t;
  const auto th = t.merge('t', 'h');
  const auto he = t.merge('h', 'e');  // loses to th in "the": h is taken
  const auto the = t.merge(th, 'e');
  const auto sp_the = t.merge(' ', the);
  CHECK(t.encode("the") == T{the});
  CHECK(t.encode(" the") == T{sp_the});
  CHECK(t.encode("hehe") == T{he, he});
  // t h e h e -> (t h, rank 0) th e h e -> (h e, rank 1) th e he -> (th e, rank 2) the he
  CHECK(t.encode("thehe") == T{the, he});
}

TEST_CASE("BPE: a long piece costs n log n, not n squared", "[text]") {
  TinyVocabulary t;
  std::uint32_t run = 'a';
  for (int k = 0; k < 16; ++k) run = t.merge(run, run);  // a^(2^16)
  const std::string piece((1 << 16) * 3 + 5, 'a');
  const T tokens = t.encode(piece);
  REQUIRE(tokens.size() == 3 + 2);  // three a^65536, then a^4 and 'a'
  CHECK(tokens[0] == run);
  CHECK(tokens[2] == run);
  CHECK(t.v.token_bytes[tokens[3]] == "aaaa");
  CHECK(tokens[4] == 'a');
}
