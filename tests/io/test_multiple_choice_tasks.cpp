// The multiple-choice task file (io/multiple_choice_tasks.hpp): what a good file gives, and every
// bad line refused with the file and line named.
#include "catch.hpp"

#include <filesystem>
#include <fstream>
#include <string>

#include "io/multiple_choice_tasks.hpp"
#include "tests/mpi_test_util.hpp"

using tptrain::io::parse_multiple_choice_tasks;

namespace {

// The message of parsing `text` as tasks.jsonl, or "" when it parses.
std::string error_of(const std::string& text) {
  try {
    parse_multiple_choice_tasks(text, "tasks.jsonl");
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

const std::string kGood = R"({"context": "A man", "endings": [" runs.", " swims."], "label": 1})";

}  // namespace

TEST_CASE("a task file gives each line's context, endings, label and line number", "[io][tasks]") {
  const std::string text = kGood + "\n\n" +
                           R"({"ind": 4, "context": "caf\u00e9  ", "endings": ["\u65e5", "b", "c"], "label": 0, "x": [1]})" +
                           "\r\n   \n" + R"({"context": "", "endings": ["only"], "label": 0})";  // no final newline
  const auto examples = parse_multiple_choice_tasks(text, "tasks.jsonl");
  REQUIRE(examples.size() == 3);
  CHECK(examples[0].context == "A man");
  CHECK(examples[0].endings == std::vector<std::string>{" runs.", " swims."});
  CHECK(examples[0].label == 1);
  CHECK(examples[0].line == 1);
  CHECK(examples[1].context == "caf\xc3\xa9  ");  // JSON escapes decoded to UTF-8; white space kept
  CHECK(examples[1].endings[0] == "\xe6\x97\xa5");
  CHECK(examples[1].endings.size() == 3);
  CHECK(examples[1].line == 3);
  CHECK(examples[2].context.empty());
  CHECK(examples[2].line == 5);
}

TEST_CASE("a bad task line is refused naming the file, the line and what is wrong", "[io][tasks]") {
  const std::string first = kGood + "\n";
  const auto line2 = [&](const std::string& bad) { return error_of(first + bad + "\n" + kGood); };
  using Catch::Contains;
  using Catch::StartsWith;
  CHECK_THAT(line2("{\"context\": \"a\", "), StartsWith("tasks.jsonl:2: not a JSON line"));
  CHECK_THAT(line2("[1, 2]"), StartsWith("tasks.jsonl:2: expected a JSON object"));
  CHECK(line2(R"({"endings": ["a"], "label": 0})") == "tasks.jsonl:2: no \"context\"");
  CHECK(line2(R"({"context": 3, "endings": ["a"], "label": 0})") ==
        "tasks.jsonl:2: \"context\" = 3: expected a string");
  CHECK(line2(R"({"context": "c", "label": 0})") == "tasks.jsonl:2: no \"endings\"");
  CHECK(line2(R"({"context": "c", "endings": [], "label": 0})") ==
        "tasks.jsonl:2: \"endings\" is an empty list: expected at least one ending");
  CHECK(line2(R"({"context": "c", "endings": "a b", "label": 0})") ==
        "tasks.jsonl:2: \"endings\" = \"a b\": expected a list of strings");
  CHECK(line2(R"({"context": "c", "endings": ["a", 7], "label": 0})") ==
        "tasks.jsonl:2: ending 1 = 7: expected a string");
  CHECK(line2(R"({"context": "c", "endings": ["a", null], "label": 0})") ==
        "tasks.jsonl:2: ending 1 = null: expected a string");
  CHECK(line2(R"({"context": "c", "endings": ["a", ""], "label": 0})") ==
        "tasks.jsonl:2: ending 1 is empty: expected some text");
  CHECK(line2(R"({"context": "c", "endings": ["a", "b"]})") == "tasks.jsonl:2: no \"label\"");
  CHECK(line2(R"({"context": "c", "endings": ["a", "b"], "label": 2})") ==
        "tasks.jsonl:2: \"label\" = 2: expected an ending's index, 0 to 1");
  CHECK(line2(R"({"context": "c", "endings": ["a", "b"], "label": -1})") ==
        "tasks.jsonl:2: \"label\" = -1: expected an ending's index, 0 to 1");
  CHECK(line2(R"({"context": "c", "endings": ["a", "b"], "label": 1.0})") ==
        "tasks.jsonl:2: \"label\" = 1.0: expected an integer");
  CHECK(line2(R"({"context": "c", "endings": ["a", "b"], "label": "1"})") ==
        "tasks.jsonl:2: \"label\" = \"1\": expected an integer");
  CHECK(line2(R"({"context": "c", "endings": ["a", "b"], "label": true})") ==
        "tasks.jsonl:2: \"label\" = true: expected an integer");
  CHECK(line2(R"({"context": "c", "endings": ["a", "b"], "label": 18446744073709551615})") ==
        "tasks.jsonl:2: \"label\" = 18446744073709551615: expected an ending's index, 0 to 1");
  // Not UTF-8 inside a string: the parser's message, on its line.
  CHECK_THAT(line2("{\"context\": \"\xff\", \"endings\": [\"a\"], \"label\": 0}"),
             StartsWith("tasks.jsonl:2: not a JSON line") && Contains("UTF-8"));
  // A long value is cut short in the message.
  CHECK(line2(R"({"context": "c", "endings": ["a", {"k": ")" + std::string(200, 'x') + "\"}], \"label\": 0}") ==
        "tasks.jsonl:2: ending 1 = {\"k\":\"" + std::string(51, 'x') + "...: expected a string");
  CHECK(error_of("") == "tasks.jsonl: no examples (expected JSON Lines, one example a line)");
  CHECK(error_of("\n  \n") == "tasks.jsonl: no examples (expected JSON Lines, one example a line)");
}

TEST_CASE("a task file that cannot be read is named with the reason", "[io][tasks]") {
  const tptrain::test::SharedTempDir temp("tptrain_tasks");
  const std::filesystem::path dir(temp.path());
  const std::string missing = (dir / "none.jsonl").string();
  CHECK_THROWS_WITH(tptrain::io::read_multiple_choice_tasks(missing),
                    "task file " + missing + " does not exist");
  CHECK_THROWS_WITH(tptrain::io::read_multiple_choice_tasks(dir.string()),
                    Catch::StartsWith("task file " + dir.string() + " is a directory"));
  const std::string good = (dir / "good.jsonl").string();
  std::ofstream(good) << kGood << "\n{\"context\": \"c\", \"endings\": [\"a\"], \"label\": 1}\n";
  CHECK_THROWS_WITH(tptrain::io::read_multiple_choice_tasks(good),
                    good + ":2: \"label\" = 1: expected an ending's index, 0 to 0");
}
