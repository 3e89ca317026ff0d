// tiktoken rank files (text/tiktoken_ranks.hpp) and the tokenizer built on one
// (text/tiktoken_tokenizer.hpp, data.tokenizer = "tiktoken:PATH"), on small files written here:
// no download needed. The named encodings against tiktoken itself: tests/text/test_tiktoken.cpp.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "catch.hpp"
#include "tests/data/scratch_dir.hpp"
#include "tests/test_helpers.hpp"
#include "text/pretokenizer.hpp"
#include "text/sha256.hpp"
#include "text/text_error.hpp"
#include "text/tiktoken_encoding.hpp"
#include "text/tiktoken_ranks.hpp"
#include "text/tiktoken_tokenizer.hpp"
#include "text/utf8.hpp"
#include "text/tokenizer.hpp"

using namespace tptrain::text;
using tptrain::test::file_bytes;
using tptrain::test::mentions;
using tptrain::test::put_bytes;
using tptrain::test::ScratchDir;

namespace {

std::string base64(const std::string& bytes) {
  static const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    std::uint32_t group = 0;
    const std::size_t n = std::min<std::size_t>(3, bytes.size() - i);
    for (std::size_t k = 0; k < 3; ++k)
      group = group << 8 | (k < n ? static_cast<unsigned char>(bytes[i + k]) : 0u);
    for (std::size_t k = 0; k < 4; ++k) out += k <= n ? alphabet[group >> (18 - 6 * k) & 63] : '=';
  }
  return out;
}

// Every byte (ranks 0..255, in byte order), then the merges given, from rank 256 on.
std::string rank_file(const std::vector<std::string>& merges) {
  std::string text;
  for (int b = 0; b < 256; ++b) text += base64(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
  for (std::size_t i = 0; i < merges.size(); ++i) text += base64(merges[i]) + " " + std::to_string(256 + i) + "\n";
  return text;
}

const std::vector<std::string> kMerges{"ab", "cd", "abcd", " a", "he", "ll", "hell", "hello", " w", "or", " wor", "ld"};

std::string error_of_ranks(const std::string& text) {
  ScratchDir dir("tiktoken_ranks");
  put_bytes(dir.file("ranks.tiktoken"), text);
  try {
    read_tiktoken_ranks(dir.file("ranks.tiktoken"));
  } catch (const TextError& e) {
    return e.what();
  }
  return "";
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const TextError& e) {
    return e.what();
  }
  return "";
}

// While it lives, the process may map only `headroom` bytes more than it maps now (RLIMIT_AS), so
// that a table sized by a rank a file claims fails here, as std::bad_alloc, instead of taking the
// machine's memory.
class AddressSpaceCap {
 public:
  explicit AddressSpaceCap(rlim_t headroom) {
    REQUIRE(getrlimit(RLIMIT_AS, &saved_) == 0);
    std::ifstream statm("/proc/self/statm");
    rlim_t pages = 0;
    REQUIRE(statm >> pages);
    rlimit cap = saved_;
    cap.rlim_cur = std::min(saved_.rlim_max, pages * static_cast<rlim_t>(sysconf(_SC_PAGESIZE)) + headroom);
    REQUIRE(setrlimit(RLIMIT_AS, &cap) == 0);
  }
  ~AddressSpaceCap() { setrlimit(RLIMIT_AS, &saved_); }
  AddressSpaceCap(const AddressSpaceCap&) = delete;
  AddressSpaceCap& operator=(const AddressSpaceCap&) = delete;

 private:
  rlimit saved_{};
};

// A file of cl100k_base's 100,256 valid ranks that are not OpenAI's.
std::string ranks_of_cl100k_size() {
  std::vector<std::string> merges;
  for (int i = 0; i < 100256 - 256; ++i) merges.push_back("t" + std::to_string(i));
  return rank_file(merges);
}

std::vector<std::string> pieces(SplitPattern p, const std::string& text) {
  const Pretokenizer pretokenizer(p);
  std::vector<std::string> out;
  pretokenizer.split(text, [&](std::string_view piece) { out.emplace_back(piece); });
  return out;
}

using V = std::vector<std::string>;
using T = std::vector<Token>;

}  // namespace

TEST_CASE("base64: RFC 4648 with padding, and nothing else", "[text]") {
  std::string bytes;
  CHECK(decode_base64("aGVsbG8=", bytes));
  CHECK(bytes == "hello");
  CHECK(decode_base64("AA==", bytes));
  CHECK(bytes == std::string(1, '\0'));
  CHECK(decode_base64("/w==", bytes));
  CHECK(bytes == "\xff");
  for (const char* bad : {"", "aGVsbG8", "aGV=bG8=", "aGVsbG8*", "A===", "AB==CD==", "AB=C", "AR=="})
    CHECK_FALSE(decode_base64(bad, bytes));  // "AR==": bits under the padding
}

TEST_CASE("tiktoken rank file: a custom file round-trips", "[text]") {
  ScratchDir dir("tiktoken_file");
  const std::string path = dir.file("custom.tiktoken");
  put_bytes(path, rank_file(kMerges));
  CHECK(read_tiktoken_ranks(path).size() == 256 + kMerges.size());
  CHECK(count_tiktoken_ranks(path) == 256 + kMerges.size());

  const auto t = make_tokenizer("tiktoken:" + path, {}, "cl100k");
  const Token n = 256 + static_cast<Token>(kMerges.size());
  CHECK(t->vocab_size() == n + 1);  // and <|endoftext|>
  CHECK(t->end_of_text() == n);
  CHECK(end_of_text_of("tiktoken:" + path) == t->end_of_text());
  // A piece that is a token whole; merges by rank, leftmost first; pieces by the cl100k pattern.
  CHECK(t->encode("abcd") == T{258});
  CHECK(t->encode("abcdab") == T{258, 256});
  CHECK(t->encode("hello world") == T{263, 266, 267});  // "hello" " wor" "ld"
  CHECK(t->encode("dcba") == T{'d', 'c', 'b', 'a'});
  CHECK(t->encode("x<|endoftext|>y") == T{'x', n, 'y'});
  std::vector<Token> ordinary;
  t->encode_ordinary("<|endoftext|>", ordinary);
  CHECK(ordinary.size() == 13);  // as text: byte tokens
  CHECK(t->decode(t->encode("x<|endoftext|>y")) == "x<|endoftext|>y");
  CHECK(mentions(error_of([&] { t->decode({n + 1}); }), "is not a token of tiktoken:"));

  std::mt19937 rng(7);
  for (int i = 0; i < 200; ++i) {
    std::string text;
    const int length = static_cast<int>(rng() % 40);
    for (int k = 0; k < length; ++k) text += "abcdhelowr \n\r\t'1234é中😀"[rng() % 23];  // bytes, may cut a code point
    if (utf8_problem(text)) continue;
    INFO(text);
    CHECK(t->decode(t->encode(text)) == text);
  }
}

TEST_CASE("tiktoken rank file: the llama3 pattern adds Llama 3's 256 special tokens", "[text]") {
  ScratchDir dir("tiktoken_llama3");
  const std::string path = dir.file("tokenizer.model");
  put_bytes(path, rank_file(kMerges));
  const auto t = make_tokenizer("tiktoken:" + path, {}, "llama3");
  const Token n = 256 + static_cast<Token>(kMerges.size());
  CHECK(t->vocab_size() == n + 256);
  CHECK(t->end_of_text() == n);  // <|begin_of_text|>, which starts every document
  CHECK(t->encode("<|begin_of_text|>ab<|eot_id|>") == T{n, 256, n + 9});
  CHECK(t->encode("<|end_of_text|><|reserved_special_token_250|>") == T{n + 1, n + 255});
  CHECK(t->decode({n + 6, n + 7}) == "<|start_header_id|><|end_header_id|>");
}

TEST_CASE("tiktoken tokenizers: names and patterns are checked", "[text]") {
  ScratchDir dir("tiktoken_names");
  const std::string path = dir.file("r.tiktoken");
  put_bytes(path, rank_file(kMerges));
  CHECK(mentions(error_of([&] { make_tokenizer("tiktoken:" + path); }), "needs a pre-tokenization pattern"));
  CHECK(mentions(error_of([&] { make_tokenizer("tiktoken:" + path, {}, "gpt4"); }),
                 "unknown pre-tokenization pattern \"gpt4\""));
  CHECK(mentions(error_of([&] { make_tokenizer("cl100k_base", dir.path(), "o200k"); }), "has its own"));
  CHECK(mentions(error_of([&] { make_tokenizer("gpt2", dir.path(), "o200k"); }), "\"tiktoken:PATH\" only"));
  CHECK(mentions(error_of([&] { make_tokenizer("sentencepiece"); }), "unknown tokenizer \"sentencepiece\""));
  // cl100k_base from a folder whose file is not OpenAI's.
  put_bytes(dir.file("cl100k_base.tiktoken"), rank_file(kMerges));
  CHECK(mentions(error_of([&] { make_tokenizer("cl100k_base", dir.path()); }),
                 "is not OpenAI's cl100k_base rank file"));
  CHECK(mentions(error_of([&] { make_tokenizer("o200k_base", dir.path()); }), "cannot read the rank file"));
  CHECK(end_of_text_of("cl100k_base") == Token(100257));
  CHECK(end_of_text_of("o200k_base") == Token(199999));
}

TEST_CASE("tiktoken rank file: hostile files are refused naming the line", "[text]") {
  const std::string good = rank_file(kMerges);
  CHECK(error_of_ranks(good).empty());
  CHECK(mentions(error_of_ranks(good + base64("xy") + " 256\n"), ":269: rank 256 is already given on line 257"));
  CHECK(mentions(error_of_ranks(good + base64("ab") + " 268\n"), ":269: the token \"YWI=\" already has a rank, on line 257"));
  CHECK(mentions(error_of_ranks(good + "YW*= 268\n"), ":269: the token \"YW*=\" is not base64"));
  CHECK(mentions(error_of_ranks(good + "YWJ 268\n"), "is not base64"));
  CHECK(mentions(error_of_ranks(good + "YWJj\n"), ":269: expected \"BASE64 RANK\""));
  CHECK(mentions(error_of_ranks(good + "YWJj  268\n"), "expected \"BASE64 RANK\""));
  CHECK(mentions(error_of_ranks(good + "YWJj -1\n"), "the rank \"-1\" is not a non-negative integer"));
  CHECK(mentions(error_of_ranks(good + "YWJj 12x\n"), "the rank \"12x\""));
  CHECK(mentions(error_of_ranks(good + "YWJj 300\n"),
                 ":269: the rank \"300\" is out of range: a file of 269 tokens has the ranks 0 .. 268, each once"));
  CHECK(mentions(error_of_ranks(good + "YWJj 99999999999999999999999\n"),
                 ":269: the rank \"99999999999999999999999\" is out of range"));
  CHECK(mentions(error_of_ranks(base64("zz") + " 0\n" + rank_file({}).substr(7)), "no token for the byte 0"));
  CHECK(mentions(error_of_ranks(""), "holds no tokens"));
  CHECK(mentions(error_of_ranks(std::string("\r\n\n")), "holds no tokens"));
  CHECK(error_of_ranks(good + "\r\n").empty());  // CRLF and blank lines are fine
  CHECK(mentions(error_of([] { read_tiktoken_ranks("/nonexistent/x.tiktoken"); }),
                 "cannot read the rank file /nonexistent/x.tiktoken"));
}

TEST_CASE("tiktoken rank file: a huge rank is refused at its line, before anything is sized by it", "[text]") {
  // Ranks are 0 .. N-1, so a file of 269 lines has nothing to do with a rank of 2^31: the error
  // names file:line, under a cap of 256 MiB more address space, where a table of 2^31 (or 10^9,
  // or 10^8) entries cannot be allocated.
  const std::string good = rank_file(kMerges);
  for (const char* rank : {"2147483648", "2147483647", "1000000000", "100000000", "4294967295"}) {
    INFO(rank);
    std::string error;
    {
      const AddressSpaceCap cap(256u << 20);
      error = error_of_ranks(good + "YWJj " + rank + "\n");
    }
    CHECK(mentions(error, "ranks.tiktoken:269: the rank \"" + std::string(rank) +
                              "\" is out of range: a file of 269 tokens has the ranks 0 .. 268, each once"));
  }
}

TEST_CASE("SHA-256: FIPS 180-4's examples", "[text]") {
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST_CASE("tiktoken named encodings: the file must be OpenAI's, wherever it is read from", "[text]") {
  ScratchDir dir("tiktoken_digest");
  const std::string path = dir.file("cl100k_base.tiktoken");
  put_bytes(path, ranks_of_cl100k_size());  // the right count of valid ranks, not OpenAI's
  const std::string error = error_of([&] { make_tokenizer("cl100k_base", dir.path()); });
  INFO(error);
  CHECK(mentions(error, path + " is not OpenAI's cl100k_base rank file: its SHA-256 is " +
                            sha256_hex(file_bytes(path)) + ", expected " +
                            std::string(*named_tiktoken_sha256("cl100k_base"))));
  CHECK(mentions(error, "jobs/fetch-tiktoken-ranks.sh " + dir.path()));
  CHECK(mentions(error, "\"tiktoken:" + path + "\" with the pre-tokenization pattern \"cl100k\""));
  // The same ranks by path are the user's own: no digest to match.
  CHECK(make_tokenizer("tiktoken:" + path, {}, "cl100k")->vocab_size() == 100257);
  put_bytes(dir.file("o200k_base.tiktoken"), rank_file(kMerges));
  CHECK(mentions(error_of([&] { make_tokenizer("o200k_base", dir.path()); }), "is not OpenAI's o200k_base rank file"));
}

TEST_CASE("tiktoken named encodings: OpenAI's files pass, one with two ranks swapped does not", "[text]") {
  const std::string cache = default_tiktoken_dir();
  bool any = false;
  for (std::string_view name : tokenizer_names()) {
    if (!named_tiktoken_ranks(name)) continue;
    const std::string path = cache + "/" + std::string(name) + ".tiktoken";
    if (!std::filesystem::exists(path)) continue;
    any = true;
    INFO(path);
    CHECK_NOTHROW(check_named_tiktoken_file(name, path, read_rank_file(path)));
  }
  const std::string cl100k = cache + "/cl100k_base.tiktoken";
  if (!any || !std::filesystem::exists(cl100k)) {
    WARN("OpenAI's rank files are not in " + cache + " (jobs/fetch-tiktoken-ranks.sh): not checked");
    return;
  }
  std::string text = file_bytes(cl100k);
  REQUIRE(text.compare(0, 14, "IQ== 0\nIg== 1\n") == 0);  // "!" and "\"", ranks 0 and 1
  text.replace(0, 14, "IQ== 1\nIg== 0\n");
  ScratchDir dir("tiktoken_swapped");
  const std::string path = dir.file("cl100k_base.tiktoken");
  put_bytes(path, text);
  CHECK(mentions(error_of([&] { make_tokenizer("cl100k_base", dir.path()); }),
                 path + " is not OpenAI's cl100k_base rank file: its SHA-256 is " + sha256_hex(text)));
  CHECK(parse_tiktoken_ranks(text, path).size() == 100256);  // otherwise a valid rank file
}

TEST_CASE("tiktoken named encodings: the digests are those jobs/fetch-tiktoken-ranks.sh checks", "[text]") {
  const std::string script = file_bytes(TPTRAIN_SOURCE_DIR "/jobs/fetch-tiktoken-ranks.sh");
  const std::regex entry(R"(\[([a-z0-9_]+)\]=([0-9a-f]{64}))");
  std::vector<std::string> in_script;
  for (std::sregex_iterator it(script.begin(), script.end(), entry), end; it != end; ++it) {
    const std::string name = (*it)[1], digest = (*it)[2];
    INFO(name);
    in_script.push_back(name);
    REQUIRE(named_tiktoken_sha256(name));
    CHECK(*named_tiktoken_sha256(name) == digest);
  }
  for (std::string_view name : tokenizer_names())
    if (named_tiktoken_ranks(name)) CHECK(std::count(in_script.begin(), in_script.end(), name) == 1);
}

TEST_CASE("pre-tokenizer: cl100k's and o200k's pieces", "[text]") {
  CHECK(pieces(SplitPattern::cl100k, "hello world") == V{"hello", " world"});
  CHECK(pieces(SplitPattern::cl100k, "1234567") == V{"123", "456", "7"});
  CHECK(pieces(SplitPattern::cl100k, "DON'T don't") == V{"DON", "'T", " don", "'t"});
  CHECK(pieces(SplitPattern::cl100k, "a\r\n\r\nb") == V{"a", "\r\n\r\n", "b"});
  CHECK(pieces(SplitPattern::cl100k, "x  y") == V{"x", " ", " y"});
  CHECK(pieces(SplitPattern::o200k, "CamelCase") == V{"Camel", "Case"});
  CHECK(pieces(SplitPattern::o200k, "DON'T don't") == V{"DON'T", " don't"});
  CHECK(pieces(SplitPattern::o200k, "a/b//\n") == V{"a", "/b", "//\n"});
  CHECK(pieces(SplitPattern::gpt2, "1234567") == V{"1234567"});
}
