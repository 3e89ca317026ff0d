// The input side of `tptrain tokenize`: files as one stream, the cut points that change no
// token, document parts, and tokens per segment (src/data/corpus.hpp, segment_tokens.hpp).
#include <random>
#include <string>
#include <vector>

#include "catch.hpp"
#include "src/data/corpus.hpp"
#include "src/data/segment_tokens.hpp"
#include "src/data/token_dataset.hpp"
#include "test_helpers.hpp"
#include "tests/data/scratch_dir.hpp"
#include "tests/text/gpt2_vocabulary_dir.hpp"
#include "text/byte_tokenizer.hpp"
#include "text/tokenizer.hpp"
#include "tests/data/data_error_of.hpp"

using tptrain::data::Corpus;
using tptrain::data::DataError;
using tptrain::data::DocumentPart;
using tptrain::test::put_bytes;
using tptrain::test::ScratchDir;

namespace {

struct Part {
  std::string text;
  bool starts;
  std::size_t file;
  std::uint64_t offset;
  bool operator==(const Part& o) const {
    return text == o.text && starts == o.starts && file == o.file && offset == o.offset;
  }
};

std::vector<Part> parts(const Corpus& c, std::uint64_t begin, std::uint64_t end) {
  std::vector<Part> out;
  c.read(begin, end, [&](const DocumentPart& p) {
    out.push_back({std::string(p.text), p.starts_document, p.file, p.offset});
  });
  return out;
}

using tptrain::test::data_error_of;

std::vector<std::uint32_t> tokens(const Corpus& c, std::uint64_t begin, std::uint64_t end,
                                  tptrain::text::Tokenizer& t) {
  std::vector<std::uint64_t> per_file(c.files().size());
  return tptrain::data::tokenize_segment(c, begin, end, t, per_file).tokens;
}

}  // namespace

TEST_CASE("corpus: a text file is cut only between printable lines, \"x\\nY\"", "[data]") {
  ScratchDir dir("tptrain_corpus");
  //                       0 1 2  3 4 5  6 7 8 9  10 11 12 13 14 15
  put_bytes(dir.file("a.txt"), "ab\ncd\n ef\n\nxy\nzz");
  const Corpus c({dir.file("a.txt")});
  REQUIRE(c.total_bytes() == 16);
  CHECK(c.cut_at_or_after(0) == 0);
  CHECK(c.cut_at_or_after(1) == 3);    // "b\nc"
  CHECK(c.cut_at_or_after(3) == 3);
  CHECK(c.cut_at_or_after(4) == 14);   // not before " ef" (a space), nor after the empty line
  CHECK(c.cut_at_or_after(15) == 16);  // none left: the end
  CHECK(c.cut_at_or_after(99) == 16);
  CHECK(parts(c, 3, 14) == std::vector<Part>{{"cd\n ef\n\nxy\n", false, 0, 3}});
  CHECK(parts(c, 0, 3) == std::vector<Part>{{"ab\n", true, 0, 0}});
}

TEST_CASE("corpus: JSON Lines are cut at line starts, each line one document", "[data]") {
  ScratchDir dir("tptrain_corpus");
  put_bytes(dir.file("a.txt"), "one\ntwo");  // 7 bytes, then the JSON Lines at stream offset 7
  const std::string jsonl = "{\"text\": \"x y\", \"id\": 1}\n\n  \r\n{\"text\": \"caf\\u00e9\\n\"}\n{\"text\": \"\"}";
  put_bytes(dir.file("b.JSONL"), jsonl);
  const Corpus c({dir.file("a.txt"), dir.file("b.JSONL")});
  REQUIRE(c.files().size() == 2);
  CHECK_FALSE(c.files()[0].json_lines);
  CHECK(c.files()[1].json_lines);  // the extension, in any case
  CHECK(c.cut_at_or_after(2) == 4);  // "e\nt"
  CHECK(c.cut_at_or_after(5) == 7);  // none left in "one\ntwo": the next file
  CHECK(c.cut_at_or_after(8) == 7 + 25);
  CHECK(c.cut_at_or_after(7 + 26) == 7 + 26);  // the blank line is a line too
  const auto all = parts(c, 0, c.total_bytes());
  REQUIRE(all.size() == 4);
  CHECK(all[0] == Part{"one\ntwo", true, 0, 0});
  CHECK(all[1] == Part{"x y", true, 1, 0});
  CHECK(all[2] == Part{"caf\xC3\xA9\n", true, 1, 30});
  CHECK(all[3] == Part{"", true, 1, 54});
  std::vector<std::uint64_t> per_file(2);
  tptrain::text::ByteTokenizer bytes;
  const auto s = tptrain::data::tokenize_segment(c, 0, c.total_bytes(), bytes, per_file);
  CHECK(s.documents == 3);
  CHECK(s.empty_documents == 1);
  CHECK(per_file == std::vector<std::uint64_t>{1, 2});
  CHECK(s.tokens.size() == 7 + 3 + 6);  // no end-of-text token: the bytes tokenizer has none
}

TEST_CASE("corpus: bad input names the file, the byte offset and the line", "[data]") {
  ScratchDir dir("tptrain_corpus");
  put_bytes(dir.file("empty.txt"), "");
  put_bytes(dir.file("ok.txt"), "fine\n");
  CHECK_THAT(data_error_of([&] { Corpus({dir.file("ok.txt"), dir.file("empty.txt"), dir.file("none.txt")}); }),
             tptrain::test::contains("empty.txt' is empty") && tptrain::test::contains("none.txt' does not exist"));
  CHECK_THAT(data_error_of([&] { Corpus({dir.path()}); }), tptrain::test::contains("is a directory"));

  put_bytes(dir.file("bad.txt"), "good line\nbad \xFF byte\n");
  const Corpus text({dir.file("ok.txt"), dir.file("bad.txt")});
  tptrain::text::ByteTokenizer bytes;
  CHECK_THAT(data_error_of([&] { tokens(text, 0, text.total_bytes(), bytes); }),
             tptrain::test::contains("bad.txt', byte offset 14: not valid UTF-8"));

  put_bytes(dir.file("d.jsonl"), "{\"text\": \"a\"}\n[1, 2]\n");
  CHECK_THAT(data_error_of([&] { Corpus c({dir.file("d.jsonl")}); tokens(c, 0, c.total_bytes(), bytes); }),
             tptrain::test::contains("d.jsonl', byte offset 14, line 2: expected a JSON object with a string \"text\", got a JSON array"));
  put_bytes(dir.file("e.jsonl"), "{\"text\": 5}\n");
  CHECK_THAT(data_error_of([&] { Corpus c({dir.file("e.jsonl")}); tokens(c, 0, c.total_bytes(), bytes); }),
             tptrain::test::contains("line 1: expected a JSON object with a string \"text\", got \"text\" of type number"));
  put_bytes(dir.file("f.jsonl"), "\n{\"text\": \"ok\"}\n{\"text\": \"caf\xE9\"}\n");
  CHECK_THAT(data_error_of([&] { Corpus c({dir.file("f.jsonl")}); tokens(c, 0, c.total_bytes(), bytes); }),
             tptrain::test::contains("f.jsonl', byte offset 29, line 3: not valid UTF-8"));
  put_bytes(dir.file("g.jsonl"), "{\"text\": \"unterminated}\n");
  CHECK_THAT(data_error_of([&] { Corpus c({dir.file("g.jsonl")}); tokens(c, 0, c.total_bytes(), bytes); }),
             tptrain::test::contains("line 1: not a JSON line"));
}

// An input cut shorter while tokenize runs (issue 30: a 58 MB JSONL truncated at 0.8 s gave exit 0
// and a shard of what had been read): the cut points past the new end used to fall at the old
// end, so no segment read the missing bytes; now finding them is the error, and the sizes are
// checked again before the shards are published.
TEST_CASE("corpus: an input that shrinks while it is read is an error naming it", "[data]") {
  ScratchDir dir("tptrain_corpus_shrinks");
  std::string text;
  for (int i = 0; i < 4000; ++i) text += "line " + std::to_string(i) + "\n";
  put_bytes(dir.file("a.txt"), text);
  put_bytes(dir.file("b.jsonl"), "{\"text\": \"x\"}\n{\"text\": \"y\"}\n");
  const Corpus c({dir.file("a.txt"), dir.file("b.jsonl")});
  CHECK_NOTHROW(c.check_unchanged());
  const std::uint64_t cut = c.cut_at_or_after(text.size() / 2);
  REQUIRE(cut > 0);
  REQUIRE(cut < text.size());
  put_bytes(dir.file("a.txt"), text.substr(0, text.size() / 4));  // truncated under the reader
  CHECK_THAT(data_error_of([&] { c.cut_at_or_after(text.size() / 2); }),
             tptrain::test::contains("a.txt' is shorter than when tokenize started") &&
                 tptrain::test::contains("it changed while it was read"));
  CHECK_THAT(data_error_of([&] { c.check_unchanged(); }),
             tptrain::test::contains("a.txt' has " + std::to_string(text.size() / 4) + " bytes, " +
                                     std::to_string(text.size()) + " when tokenize started"));
  put_bytes(dir.file("a.txt"), text + "more\n");  // grown: not the file that was read either
  CHECK_THAT(data_error_of([&] { c.check_unchanged(); }), tptrain::test::contains("it changed while it was read"));
}

// The claim of src/data/corpus.hpp: cutting at a cut point changes no GPT-2 token.
TEST_CASE("corpus: GPT-2 tokens of any split at cut points equal those of the whole", "[.][gpt2]") {
  ScratchDir dir("tptrain_corpus");
  auto tokenizer = tptrain::text::make_tokenizer("gpt2", tptrain::test::gpt2_vocabulary_dir());
  std::mt19937 rng(11);
  const std::vector<std::string> atoms{"word", " word", "Z", "7", " 42", " ", "   ", "\n", "\n\n", "\t", "'s", "'re",
                                       "'", "!", ".", "\xC3\xA9t\xC3\xA9", " \xE4\xB8\xAD\xE6\x96\x87", "\xF0\x9F\x98\x80",
                                       "\xC2\xA0", "\r\n", "\n'll", "\n's", "\n-", "\n ", "\n\t"};
  for (int round = 0; round < 20; ++round) {
    std::string text;
    for (int k = 0; k < 400; ++k) text += atoms[rng() % atoms.size()];
    put_bytes(dir.file("doc.txt"), text);
    const Corpus c({dir.file("doc.txt")});
    const auto whole = tokens(c, 0, c.total_bytes(), *tokenizer);
    for (std::uint64_t x = 0; x <= c.total_bytes(); x += 1 + rng() % 7) {
      const std::uint64_t cut = c.cut_at_or_after(x);
      auto split = tokens(c, 0, cut, *tokenizer);
      const auto rest = tokens(c, cut, c.total_bytes(), *tokenizer);
      split.insert(split.end(), rest.begin(), rest.end());
      INFO("round " << round << ", cut at byte " << cut);
      REQUIRE(split == whole);
    }
  }
}
