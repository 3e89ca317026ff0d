// Input deck: parsing, defaults, every validation rule, --set overrides, the relative-path rule,
// to_toml() round trips and the shipped decks in input/. Fixture files are written to a fresh
// temporary directory per test, so the tests depend on nothing but the deck files in input/.
// (No toml++ here: toml++ 3.3 does not compile under nvcc, which CUDA builds may use for tests.)
#include "catch.hpp"

#include <fmt/format.h>

#include "io/data_paths.hpp"
#include "io/deck.hpp"
#include "io/deck_keys.hpp"
#include "io/deck_path.hpp"
#include "src/data/token_dataset.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <type_traits>
#include <variant>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#ifndef TPTRAIN_SOURCE_DIR
#error "TPTRAIN_SOURCE_DIR must name the source tree (set by tests/CMakeLists.txt)"
#endif

namespace fs = std::filesystem;
using tptrain::io::Deck;
using tptrain::io::DataFiles;
using tptrain::io::expand_data_paths;
using tptrain::io::DeckError;
using tptrain::io::load_deck;
using tptrain::io::parse_deck;

namespace {

using tptrain::test::contains;
auto has(const std::string& s) { return contains(s); }
auto matches(const std::string& re) { return Catch::Matchers::Matches(re); }

std::string norm(const fs::path& p) { return p.lexically_normal().string(); }

// A fresh directory, removed with everything in it at the end of the test.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    std::random_device rd;
    path_ = fs::temp_directory_path() /
            ("tptrain-deck-test-" + std::to_string(rd()) + "-" + std::to_string(counter++));
    fs::create_directories(path_);
    path_ = fs::absolute(path_).lexically_normal();
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const fs::path& path() const { return path_; }
  std::string str() const { return path_.string(); }
  fs::path write(const std::string& name, const std::string& text) const {
    const fs::path p = path_ / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }

 private:
  fs::path path_;
};

// The example deck (input/tiny.toml's values), with train.txt/valid.txt next to the deck. `changes` replaces a
// key's value ("" removes the key); a key not in the example is appended to its section.
using Changes = std::vector<std::pair<std::string, std::string>>;
std::string make_deck(const Changes& changes = {}) {
  using Section = std::pair<std::string, std::vector<std::pair<std::string, std::string>>>;
  const std::vector<Section> base = {
      {"model",
       {{"layers", "4"},
        {"hidden", "128"},
        {"heads", "4"},
        {"ffn_hidden", "512"},
        {"seq_length", "128"},
        {"vocab_size", "256"}}},
      {"parallel", {{"tensor", "2"}, {"pipeline", "1"}, {"data", "1"}}},
      {"training",
       {{"global_batch", "16"},
        {"micro_batch", "4"},
        {"steps", "300"},
        {"seed", "1234"},
        {"precision", "\"fp32\""},
        {"grad_clip", "1.0"},
        {"log_interval", "10"},
        {"eval_interval", "100"},
        {"eval_windows", "16"}}},
      {"optimizer",
       {{"lr", "3e-3"},
        {"min_lr", "3e-4"},
        {"warmup_steps", "30"},
        {"decay", "\"cosine\""},
        {"weight_decay", "0.1"},
        {"beta1", "0.9"},
        {"beta2", "0.95"},
        {"eps", "1e-8"}}},
      {"data", {{"train", "\"train.txt\""}, {"valid", "\"valid.txt\""}}},
      {"checkpoint",
       {{"dir", "\"runs/tiny/checkpoints\""},
        {"interval", "100"},
        {"keep", "3"},
        {"resume", "true"}}},
      {"run", {{"dir", "\"runs/tiny\""}}},
  };
  std::map<std::string, std::string> change(changes.begin(), changes.end());
  std::ostringstream out;
  out << "# test deck\n";
  for (const auto& [section, keys] : base) {
    out << "\n[" << section << "]\n";
    for (const auto& [key, value] : keys) {
      const auto it = change.find(section + "." + key);
      if (it == change.end()) {
        out << key << " = " << value << "\n";
      } else {
        if (!it->second.empty()) out << key << " = " << it->second << "\n";
        change.erase(it);
      }
    }
    for (auto it = change.begin(); it != change.end();) {
      if (it->first.rfind(section + ".", 0) == 0) {
        out << it->first.substr(section.size() + 1) << " = " << it->second << "\n";
        it = change.erase(it);
      } else {
        ++it;
      }
    }
  }
  return out.str();
}

// 1-based line of `section.key` in a deck text made by make_deck().
std::size_t line_of(const std::string& text, const std::string& dotted) {
  const auto dot = dotted.find('.');
  const std::string section = dotted.substr(0, dot), key = dotted.substr(dot + 1);
  std::istringstream in(text);
  std::string line, current;
  for (std::size_t n = 1; std::getline(in, line); ++n) {
    if (!line.empty() && line[0] == '[') current = line.substr(1, line.find(']') - 1);
    if (current == section && line.rfind(key + " =", 0) == 0) return n;
  }
  FAIL("no line for " << dotted);
  return 0;
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += s + "\n";
  return out;
}

// A temporary folder with the data files the test deck names.
struct Fixture {
  TempDir dir;
  Fixture() {
    dir.write("train.txt", "hello world\n");
    dir.write("valid.txt", "goodbye world\n");
  }
  Deck parse(const std::string& text, const std::vector<std::string>& overrides = {}) const {
    return parse_deck(text, "deck.toml", dir.str(), overrides);
  }
  // The problems reported for a deck that must fail.
  std::vector<std::string> problems(const std::string& text,
                                    const std::vector<std::string>& overrides = {}) const {
    try {
      parse(text, overrides);
    } catch (const DeckError& e) {
      return e.problems();
    }
    FAIL("expected a DeckError for:\n" << text);
    return {};
  }
  // Exactly one problem, which is returned.
  std::string problem(const std::string& text,
                      const std::vector<std::string>& overrides = {}) const {
    const auto p = problems(text, overrides);
    INFO(join(p));
    REQUIRE(p.size() == 1);
    return p[0];
  }
};

}  // namespace

TEST_CASE("deck: the example deck parses to the values it states", "[io][deck]") {
  Fixture fx;
  const Deck d = fx.parse(make_deck());
  CHECK(d.source == "deck.toml");
  CHECK(d.model.layers == 4);
  CHECK(d.model.hidden == 128);
  CHECK(d.model.heads == 4);
  CHECK(d.model.ffn_hidden == 512);
  CHECK(d.model.seq_length == 128);
  CHECK(d.model.vocab_size == 256);
  CHECK(d.model.head_dim() == 32);
  CHECK(d.parallel.tensor == 2);
  CHECK(d.parallel.pipeline == 1);
  CHECK(d.parallel.data == 1);
  CHECK(d.parallel.world_size() == 2);
  CHECK(d.training.global_batch == 16);
  CHECK(d.training.micro_batch == 4);
  CHECK(d.training.steps == 300);
  CHECK(d.training.seed == 1234u);
  CHECK(d.training.precision == "fp32");
  // fp16's loss scaler: Megatron's defaults (2^32, window 1000, hysteresis 2, min 1, x2, x0.5).
  CHECK(d.training.loss_scale_initial == 4294967296.0);
  CHECK(d.training.loss_scale_window == 1000);
  CHECK(d.training.loss_scale_hysteresis == 2);
  CHECK(d.training.loss_scale_min == 1.0);
  CHECK(d.training.loss_scale_growth_factor == 2.0);
  CHECK(d.training.loss_scale_backoff_factor == 0.5);
  CHECK(d.training.grad_clip == 1.0);
  CHECK(d.training.log_interval == 10);
  CHECK(d.training.eval_interval == 100);
  CHECK(d.training.eval_windows == 16);
  CHECK(d.optimizer.lr == 3e-3);
  CHECK(d.optimizer.min_lr == 3e-4);
  CHECK(d.optimizer.warmup_steps == 30);
  CHECK(d.optimizer.decay == "cosine");
  CHECK(d.optimizer.weight_decay == 0.1);
  CHECK(d.optimizer.beta1 == 0.9);
  CHECK(d.optimizer.beta2 == 0.95);
  CHECK(d.optimizer.eps == 1e-8);
  CHECK(d.data.train == norm(fx.dir.path() / "train.txt"));
  CHECK(d.data.valid == norm(fx.dir.path() / "valid.txt"));
  CHECK(d.checkpoint.dir == norm(fx.dir.path() / "runs/tiny/checkpoints"));
  CHECK(d.checkpoint.interval == 100);
  CHECK(d.checkpoint.keep == 3);
  CHECK(d.checkpoint.resume == true);
  CHECK(d.run.dir == norm(fx.dir.path() / "runs/tiny"));
  CHECK(d.grad_accum_steps() == 4);
}

TEST_CASE("deck: defaults fill every key that is left out", "[io][deck]") {
  Fixture fx;
  const Deck d = fx.parse("[data]\ntrain = \"train.txt\"\n");
  const Deck defaults;
  CHECK(d.model.layers == defaults.model.layers);
  CHECK(d.model.hidden == defaults.model.hidden);
  CHECK(d.model.heads == defaults.model.heads);
  CHECK(d.model.ffn_hidden == 4 * d.model.hidden);  // resolved, not 0
  CHECK(d.model.seq_length == defaults.model.seq_length);
  CHECK(d.model.vocab_size == defaults.model.vocab_size);
  CHECK(d.parallel == defaults.parallel);
  CHECK(d.training == defaults.training);
  CHECK(d.optimizer == defaults.optimizer);
  CHECK(d.data.valid.empty());
  CHECK(d.run.dir == norm(fx.dir.path() / "runs/default"));
  CHECK(d.checkpoint.dir == norm(fx.dir.path() / "runs/default/checkpoints"));
  CHECK(d.checkpoint.interval == defaults.checkpoint.interval);
  CHECK(d.checkpoint.keep == defaults.checkpoint.keep);
  CHECK(d.checkpoint.resume == defaults.checkpoint.resume);
  CHECK(d.grad_accum_steps() == 4);

  SECTION("ffn_hidden follows hidden when left out") {
    const Deck e = fx.parse(make_deck({{"model.ffn_hidden", ""}, {"model.hidden", "64"}}));
    CHECK(e.model.ffn_hidden == 256);
  }
  SECTION("an explicit ffn_hidden is kept") {
    const Deck e = fx.parse(make_deck({{"model.ffn_hidden", "300"}}));
    CHECK(e.model.ffn_hidden == 300);
  }
  SECTION("checkpoint.dir defaults to <run.dir>/checkpoints") {
    const Deck e = fx.parse(make_deck({{"checkpoint.dir", ""}, {"run.dir", "\"elsewhere\""}}));
    CHECK(e.checkpoint.dir == norm(fx.dir.path() / "elsewhere/checkpoints"));
  }
}

TEST_CASE("deck: unknown keys are errors, with the closest key suggested", "[io][deck]") {
  Fixture fx;
  SECTION("a typo in a key") {
    const std::string text = make_deck({{"model.hiden", "96"}});
    const std::string p = fx.problem(text);
    CHECK_THAT(p, has("deck.toml:" + std::to_string(line_of(text, "model.hiden")) + ": "));
    CHECK_THAT(p, has("model.hiden = 96"));
    CHECK_THAT(p, has("unknown key"));
    CHECK_THAT(p, has("did you mean model.hidden?"));
  }
  SECTION("a transposition counts as one edit") {
    CHECK_THAT(fx.problem(make_deck({{"training.stpes", "3"}})),
               has("did you mean training.steps?"));
  }
  SECTION("a key put in the wrong section") {
    CHECK_THAT(fx.problem(make_deck({{"model.lr", "1e-3"}})), has("did you mean optimizer.lr?"));
  }
  SECTION("no suggestion when nothing is close") {
    const std::string p = fx.problem(make_deck({{"model.colour", "\"red\""}}));
    CHECK_THAT(p, has("model.colour = \"red\""));
    CHECK_THAT(p, !has("did you mean"));
  }
  SECTION("a key outside any section") {
    const std::string text = "layers = 4\n" + make_deck();
    const std::string p = fx.problem(text);
    CHECK_THAT(p, has("deck.toml:1: layers = 4"));
    CHECK_THAT(p, has("did you mean model.layers?"));
  }
}

TEST_CASE("deck: unknown sections are errors", "[io][deck]") {
  Fixture fx;
  SECTION("a typo in a section name") {
    const std::string text = make_deck() + "\n[modle]\nlayers = 4\n";
    const std::string p = fx.problem(text);
    CHECK_THAT(p, has("deck.toml:" + std::to_string(line_of(text, "modle.layers") - 1) + ": "));
    CHECK_THAT(p, has("[modle]"));
    CHECK_THAT(p, has("unknown section"));
    CHECK_THAT(p, has("did you mean [model]?"));
  }
  SECTION("an unrelated section") {
    const std::string p = fx.problem(make_deck() + "\n[logging]\nlevel = 1\n");
    CHECK_THAT(p, has("[logging]"));
    CHECK_THAT(p, !has("did you mean"));
  }
  SECTION("a known section that is not a table") {
    const std::string data = "[data]\ntrain = \"train.txt\"\n";
    const std::string p = fx.problem("run = 5\n" + data);
    CHECK_THAT(p, has("deck.toml:1: run = 5: expected a [run] table (got an integer)"));
    const std::string q = fx.problem("[[parallel]]\ntensor = 1\n" + data);
    CHECK_THAT(q, has("deck.toml:1: "));
    CHECK_THAT(q, has("expected a [parallel] table (got an array"));
  }
}

TEST_CASE("deck: values must have the key's TOML type", "[io][deck]") {
  Fixture fx;
  SECTION("a float where an integer is expected") {
    const std::string text = make_deck({{"model.layers", "128.0"}});
    const std::string p = fx.problem(text);
    CHECK_THAT(p, has("deck.toml:" + std::to_string(line_of(text, "model.layers")) +
                      ": model.layers = 128.0: expected an integer >= 1"));
    CHECK_THAT(p, has("got a float"));
  }
  SECTION("a string where an integer is expected") {
    CHECK_THAT(fx.problem(make_deck({{"parallel.tensor", "\"2\""}})),
               has("parallel.tensor = \"2\": expected an integer >= 1 (got a string)"));
  }
  SECTION("integers are accepted where floats are expected") {
    const Deck d = fx.parse(make_deck({{"optimizer.lr", "1"}, {"optimizer.min_lr", "0"}}));
    CHECK(d.optimizer.lr == 1.0);
    CHECK(d.optimizer.min_lr == 0.0);
  }
  SECTION("a string where a float is expected") {
    CHECK_THAT(fx.problem(make_deck({{"optimizer.lr", "\"fast\""}})),
               has("optimizer.lr = \"fast\": expected a number > 0 (got a string)"));
  }
  SECTION("a number where a string is expected") {
    CHECK_THAT(fx.problem(make_deck({{"training.precision", "32"}})),
               has("training.precision = 32: expected a string (got an integer)"));
    CHECK_THAT(fx.problem(make_deck({{"run.dir", "1"}})), has("run.dir = 1: expected a string"));
  }
  SECTION("a number or string where a boolean is expected") {
    CHECK_THAT(fx.problem(make_deck({{"checkpoint.resume", "1"}})),
               has("checkpoint.resume = 1: expected true or false (got an integer)"));
    CHECK_THAT(fx.problem(make_deck({{"checkpoint.resume", "\"yes\""}})),
               has("checkpoint.resume = \"yes\": expected true or false (got a string)"));
  }
  SECTION("an array or a table") {
    CHECK_THAT(fx.problem(make_deck({{"model.heads", "[4, 4]"}})),
               has("model.heads = [ 4, 4 ]: expected an integer >= 1 (got an array)"));
    CHECK_THAT(fx.problem(make_deck({{"model.heads", "{ n = 4 }"}})), has("(got a table)"));
  }
}

TEST_CASE("deck: values out of range are errors", "[io][deck]") {
  Fixture fx;
  struct Case {
    std::string key, value, expected;
  };
  const std::vector<Case> cases = {
      {"model.layers", "0", "expected an integer >= 1"},
      {"model.hidden", "-128", "expected an integer >= 1"},
      {"model.heads", "0", "expected an integer >= 1"},
      {"model.ffn_hidden", "0", "expected an integer >= 1"},
      {"model.seq_length", "0", "expected an integer >= 1"},
      {"model.vocab_size", "1", "expected an integer in [2, 2147483647]"},
      {"model.vocab_size", "2147483648", "expected an integer in [2, 2147483647]"},
      {"model.layers", "4294967296", "expected an integer >= 1 and <= 2147483647"},
      {"parallel.tensor", "0", "expected an integer >= 1"},
      {"parallel.pipeline", "-1", "expected an integer >= 1"},
      {"parallel.data", "0", "expected an integer >= 1"},
      {"training.global_batch", "0", "expected an integer >= 1"},
      {"training.micro_batch", "0", "expected an integer >= 1"},
      {"training.steps", "0", "expected an integer >= 1"},
      {"training.seed", "-1", "expected an integer >= 0"},
      {"training.grad_clip", "-0.5", "expected a number >= 0 (0 = off)"},
      {"training.log_interval", "0", "expected an integer >= 1"},
      {"training.eval_interval", "-1", "expected an integer >= 0 (0 = never)"},
      {"training.eval_windows", "0", "expected an integer >= 1"},
      {"optimizer.lr", "0", "expected a number > 0"},
      {"optimizer.lr", "-1e-3", "expected a number > 0"},
      {"optimizer.lr", "inf", "expected a finite number > 0"},
      {"optimizer.lr", "nan", "expected a finite number > 0"},
      {"optimizer.min_lr", "-1e-5", "expected a number >= 0"},
      {"optimizer.warmup_steps", "-1", "expected an integer >= 0"},
      {"optimizer.weight_decay", "-0.1", "expected a number >= 0"},
      {"optimizer.beta1", "1.0", "expected a number in [0, 1)"},
      {"optimizer.beta1", "-0.1", "expected a number in [0, 1)"},
      {"optimizer.beta2", "1", "expected a number in [0, 1)"},
      {"optimizer.eps", "0.0", "expected a number > 0"},
      {"checkpoint.interval", "-1", "expected an integer >= 0 (0 = only at the end)"},
      {"checkpoint.keep", "0", "expected an integer >= 1"},
      {"data.train", "\"\"", "expected a non-empty path"},
      {"run.dir", "\"\"", "expected a non-empty path"},
      {"checkpoint.dir", "\"\"", "expected a non-empty path"},
  };
  SECTION("every key's range") {
    for (const Case& c : cases) {
      const std::string text = make_deck({{c.key, c.value}});
      INFO(c.key << " = " << c.value);
      const std::string p = fx.problem(text);
      // <file>:<line>: <section.key> = <value>: expected <what>
      CHECK_THAT(p,
                 has("deck.toml:" + std::to_string(line_of(text, c.key)) + ": " + c.key + " = "));
      CHECK_THAT(p, has(c.expected));
    }
  }
  SECTION("the value is shown as TOML") {
    CHECK_THAT(fx.problem(make_deck({{"optimizer.beta1", "1.0"}})), has("optimizer.beta1 = 1.0: "));
    CHECK_THAT(fx.problem(make_deck({{"optimizer.lr", "-1e-3"}})), has("optimizer.lr = -0.001: "));
  }
  SECTION("the edges of every range are accepted") {
    const Deck d = fx.parse(make_deck({{"training.grad_clip", "0"},
                                       {"training.eval_interval", "0"},
                                       {"training.seed", "0"},
                                       {"checkpoint.interval", "0"},
                                       {"checkpoint.keep", "1"},
                                       {"optimizer.warmup_steps", "300"},
                                       {"optimizer.min_lr", "3e-3"},
                                       {"optimizer.beta1", "0"},
                                       {"optimizer.beta2", "0.0"},
                                       {"optimizer.weight_decay", "0"},
                                       {"model.vocab_size", "2"},
                                       {"model.layers", "1"},
                                       {"parallel.tensor", "1"}}));
    CHECK(d.training.grad_clip == 0.0);
    CHECK(d.optimizer.warmup_steps == d.training.steps);
    CHECK(d.optimizer.min_lr == d.optimizer.lr);
    CHECK(d.model.vocab_size == 2);
    CHECK(fx.parse(make_deck({{"training.seed", "9223372036854775807"}})).training.seed ==
          9223372036854775807ull);
    CHECK(fx.parse(make_deck({{"optimizer.warmup_steps", "0"}})).optimizer.warmup_steps == 0);
  }
  SECTION("warmup_steps may not exceed steps") {
    const std::string text = make_deck({{"optimizer.warmup_steps", "301"}});
    const std::string p = fx.problem(text);
    CHECK_THAT(p, has("deck.toml:" + std::to_string(line_of(text, "optimizer.warmup_steps")) +
                      ": optimizer.warmup_steps = 301: expected an integer <= training.steps = "
                      "300 (line " +
                      std::to_string(line_of(text, "training.steps")) + ")"));
  }
  SECTION("min_lr may not exceed lr") {
    const std::string text = make_deck({{"optimizer.min_lr", "4e-3"}});
    const std::string p = fx.problem(text);
    CHECK_THAT(p, has("deck.toml:" + std::to_string(line_of(text, "optimizer.min_lr")) +
                      ": optimizer.min_lr = 0.004: expected a number <= optimizer.lr = 0.003 "
                      "(line " +
                      std::to_string(line_of(text, "optimizer.lr")) + ")"));
  }
  SECTION("lowering lr below min_lr by --set is reported on the --set") {
    const std::string text = make_deck();
    const std::string p = fx.problem(text, {"optimizer.lr=1e-4"});
    CHECK_THAT(p, has("--set optimizer.lr=1e-4: optimizer.lr = 0.0001: expected a number >= "
                      "optimizer.min_lr = 0.0003 (deck.toml:" +
                      std::to_string(line_of(text, "optimizer.min_lr")) + ")"));
  }
  SECTION("the default min_lr follows lr") {
    const Deck d = fx.parse(make_deck({{"optimizer.min_lr", ""}}), {"optimizer.lr=1e-4"});
    CHECK(d.optimizer.min_lr == 1e-5);
  }
}

// fp16's dynamic loss scaler (Megatron's DynamicGradScaler): ranges, and min <= initial.
TEST_CASE("deck: the fp16 loss-scale keys", "[io][deck]") {
  Fixture fx;
  SECTION("values in range are taken, with any precision") {
    const Deck d = fx.parse(make_deck({{"training.precision", "\"fp16\""},
                                       {"training.loss_scale_initial", "65536"},
                                       {"training.loss_scale_window", "1"},
                                       {"training.loss_scale_hysteresis", "1"},
                                       {"training.loss_scale_min", "0.25"},
                                       {"training.loss_scale_growth_factor", "1.5"},
                                       {"training.loss_scale_backoff_factor", "0.125"}}));
    CHECK(d.training.precision == "fp16");
    CHECK(d.training.loss_scale_initial == 65536.0);
    CHECK(d.training.loss_scale_window == 1);
    CHECK(d.training.loss_scale_hysteresis == 1);
    CHECK(d.training.loss_scale_min == 0.25);
    CHECK(d.training.loss_scale_growth_factor == 1.5);
    CHECK(d.training.loss_scale_backoff_factor == 0.125);
    // Validated (and kept) with fp32 too, where they are unused.
    CHECK(fx.parse(make_deck(), {"training.loss_scale_window=7"}).training.loss_scale_window == 7);
  }
  SECTION("values out of range name the key and its range") {
    const std::string text = make_deck();
    CHECK_THAT(fx.problem(text, {"training.loss_scale_initial=0"}),
               has("training.loss_scale_initial = 0: expected a number in (0, 1.8446744073709552e+19]"));
    CHECK_THAT(fx.problem(text, {"training.loss_scale_initial=inf"}),
               has("training.loss_scale_initial = inf: expected a finite number in (0, 1.8446744073709552e+19]"));
    CHECK_THAT(fx.problem(text, {"training.loss_scale_window=0"}),
               has("training.loss_scale_window = 0: expected an integer >= 1"));
    CHECK_THAT(fx.problem(text, {"training.loss_scale_window=2.5"}),
               has("training.loss_scale_window = 2.5: expected an integer >= 1 (got a float"));
    CHECK_THAT(fx.problem(text, {"training.loss_scale_hysteresis=0"}),
               has("training.loss_scale_hysteresis = 0: expected an integer >= 1"));
    CHECK_THAT(fx.problem(text, {"training.loss_scale_min=0"}),
               has("training.loss_scale_min = 0: expected a number > 0"));
    CHECK_THAT(fx.problem(text, {"training.loss_scale_growth_factor=1"}),
               has("training.loss_scale_growth_factor = 1: expected a number in (1, 1024]"));
    CHECK_THAT(fx.problem(text, {"training.loss_scale_backoff_factor=1"}),
               has("training.loss_scale_backoff_factor = 1: expected a number in [0.0009765625, 1) (at least 1/1024)"));
    CHECK_THAT(fx.problem(text, {"training.loss_scale_backoff_factor=0"}),
               has("training.loss_scale_backoff_factor = 0: expected a number in [0.0009765625, 1) (at least 1/1024)"));
    // Bounded so that the scale stays finite (src/train/loss_scaler.hpp): a growth of 1e308 made
    // it Inf in one step.
    CHECK_THAT(fx.problem(text, {"training.loss_scale_growth_factor=1e308"}),
               has("training.loss_scale_growth_factor = 1e+308: expected a number in (1, 1024]"));
    CHECK_THAT(fx.problem(text, {"training.loss_scale_growth_factor=1024.5"}),
               has("training.loss_scale_growth_factor = 1024.5: expected a number in (1, 1024]"));
    CHECK_THAT(fx.problem(text, {"training.loss_scale_backoff_factor=0.0009"}),
               has("training.loss_scale_backoff_factor = 0.0009: expected a number in [0.0009765625, 1)"));
    CHECK_THAT(fx.problem(text, {"training.loss_scale_initial=3.7e19"}),
               has("training.loss_scale_initial = 3.7e+19: expected a number in (0, 1.8446744073709552e+19] (at most "
                   "2^64)"));
    const Deck edges = fx.parse(text, {"training.loss_scale_growth_factor=1024",
                                           "training.loss_scale_backoff_factor=0.0009765625",
                                           "training.loss_scale_initial=18446744073709551616.0"});
    CHECK(edges.training.loss_scale_growth_factor == 1024.0);
    CHECK(edges.training.loss_scale_backoff_factor == 1.0 / 1024);
    CHECK(edges.training.loss_scale_initial == 0x1p64);
  }
  SECTION("loss_scale_min may not exceed loss_scale_initial") {
    const std::string text = make_deck();
    CHECK_THAT(fx.problem(text, {"training.loss_scale_min=8589934592"}),
               has("--set training.loss_scale_min=8589934592: training.loss_scale_min = "
                   "8589934592.0: expected a number <= training.loss_scale_initial = "
                   "4294967296.0 (default)"));
    CHECK_THAT(fx.problem(text, {"training.loss_scale_initial=0.5"}),
               has("--set training.loss_scale_initial=0.5: training.loss_scale_initial = 0.5: "
                   "expected a number >= training.loss_scale_min = 1.0 (default)"));
    CHECK(fx.parse(text, {"training.loss_scale_initial=1", "training.loss_scale_min=1"})
              .training.loss_scale_initial == 1.0);
  }
}

TEST_CASE("deck: precision and decay take one of their choices", "[io][deck]") {
  Fixture fx;
  SECTION("fp32, bf16 and fp16 are valid") {
    for (const std::string v : {"fp32", "bf16", "fp16"})
      CHECK(fx.parse(make_deck({{"training.precision", "\"" + v + "\""}})).training.precision == v);
    CHECK(fx.parse(make_deck(), {"training.precision=bf16"}).training.precision == "bf16");
  }
  SECTION("anything else lists the valid choices") {
    const std::string p = fx.problem(make_deck({{"training.precision", "\"fp64\""}}));
    CHECK_THAT(p, has("training.precision = \"fp64\": expected one of \"fp32\", \"bf16\", \"fp16\""));
    CHECK_THAT(fx.problem(make_deck({{"training.precision", "\"FP32\""}})),
               has("did you mean \"fp32\"?"));
    CHECK_THAT(fx.problem(make_deck({{"training.precision", "\"bf61\""}})),
               has("did you mean \"bf16\"?"));
  }
  SECTION("decay") {
    for (const std::string v : {"cosine", "linear", "constant"})
      CHECK(fx.parse(make_deck({{"optimizer.decay", "\"" + v + "\""}})).optimizer.decay == v);
    const std::string p = fx.problem(make_deck({{"optimizer.decay", "\"cosin\""}}));
    CHECK_THAT(
        p,
        has("optimizer.decay = \"cosin\": expected one of \"cosine\", \"linear\", \"constant\""));
    CHECK_THAT(p, has("did you mean \"cosine\"?"));
  }
}

TEST_CASE("deck: parallel.order is tp-pp-dp or tp-dp-pp", "[io][deck]") {
  Fixture fx;
  CHECK(fx.parse(make_deck()).parallel.order == "tp-pp-dp");  // the default
  for (const std::string v : {"tp-pp-dp", "tp-dp-pp"})
    CHECK(fx.parse(make_deck({{"parallel.order", "\"" + v + "\""}})).parallel.order == v);
  CHECK(fx.parse(make_deck(), {"parallel.order=tp-dp-pp"}).parallel.order == "tp-dp-pp");
  CHECK_THAT(fx.problem(make_deck({{"parallel.order", "\"dp-pp-tp\""}})),
             has("parallel.order = \"dp-pp-tp\": expected one of \"tp-pp-dp\", \"tp-dp-pp\""));
  CHECK_THAT(fx.problem(make_deck({{"parallel.order", "1"}})),
             has("parallel.order = 1: expected a string (got an integer)"));
}

TEST_CASE("deck: optimizer.shard, and optimizer.distributed as the spelling of \"optimizer\"", "[io][deck][zero]") {
  Fixture fx;
  const Deck plain = fx.parse(make_deck());
  CHECK(plain.optimizer.shard == "none");
  CHECK(!plain.optimizer.distributed);
  const Deck zero1 = fx.parse(make_deck({{"optimizer.distributed", "true"}}));
  CHECK(zero1.optimizer.shard == "optimizer");
  CHECK(zero1.optimizer.distributed);
  for (const std::string v : {"optimizer", "gradients", "parameters"}) {
    const Deck d = fx.parse(make_deck({{"optimizer.shard", "\"" + v + "\""}}));
    CHECK(d.optimizer.shard == v);
    CHECK(d.optimizer.distributed);
    CHECK(fx.parse(make_deck({{"optimizer.shard", "\"" + v + "\""}, {"optimizer.distributed", "true"}})).optimizer.shard == v);
  }
  CHECK(!fx.parse(make_deck({{"optimizer.shard", "\"none\""}, {"optimizer.distributed", "false"}})).optimizer.distributed);
  CHECK_THAT(fx.problem(make_deck({{"optimizer.shard", "\"none\""}, {"optimizer.distributed", "true"}})),
             has("optimizer.distributed = true: expected false with optimizer.shard = \"none\""));
  CHECK_THAT(fx.problem(make_deck({{"optimizer.shard", "\"gradients\""}, {"optimizer.distributed", "false"}})),
             has("optimizer.distributed = false: expected true with optimizer.shard = \"gradients\""));
  // A --set wins over the file's other spelling.
  CHECK(fx.parse(make_deck({{"optimizer.distributed", "false"}}), {"optimizer.shard=gradients"}).optimizer.shard ==
        "gradients");
  CHECK(fx.parse(make_deck({{"optimizer.shard", "\"none\""}}), {"optimizer.distributed=true"}).optimizer.shard ==
        "optimizer");
  CHECK(!fx.parse(make_deck({{"optimizer.shard", "\"gradients\""}}), {"optimizer.distributed=false"}).optimizer.distributed);
  CHECK_THAT(fx.problem(make_deck(), {"optimizer.shard=none", "optimizer.distributed=true"}),
             has("optimizer.distributed = true: expected false with optimizer.shard = \"none\""));
  CHECK_THAT(fx.problem(make_deck({{"optimizer.shard", "\"weights\""}})),
             has("optimizer.shard = \"weights\": expected one of \"none\", \"optimizer\", \"gradients\", "
                 "\"parameters\""));
  CHECK(fx.parse(make_deck()).optimizer.reshard_after_forward);
  CHECK(!fx.parse(make_deck({{"optimizer.shard", "\"parameters\""}, {"optimizer.reshard_after_forward", "false"}}))
             .optimizer.reshard_after_forward);
}

TEST_CASE("deck: parallel.shard_group divides data x context and needs a shard mode", "[io][deck][zero]") {
  Fixture fx;
  CHECK(fx.parse(make_deck()).parallel.shard_group == 0);
  const auto hybrid = [](std::string shard, std::string group) {
    return make_deck({{"parallel.tensor", "1"}, {"parallel.data", "4"}, {"training.global_batch", "16"},
                      {"optimizer.shard", "\"" + shard + "\""}, {"parallel.shard_group", group}});
  };
  CHECK(fx.parse(hybrid("parameters", "2")).parallel.shard_group == 2);
  CHECK_THAT(fx.problem(hybrid("gradients", "3")),
             has("parallel.shard_group = 3: expected a divisor of parallel.data x parallel.context = 4 x 1 = 4"));
  CHECK_THAT(fx.problem(hybrid("none", "2")),
             has("parallel.shard_group = 2: expected 0 with optimizer.shard = \"none\""));
  CHECK_THAT(fx.problem(hybrid("optimizer", "-1")), has("parallel.shard_group = -1: expected an integer >= 0"));
}

TEST_CASE("deck: divisibility rules, each its own message naming both keys", "[io][deck]") {
  Fixture fx;
  SECTION("hidden % heads") {
    const std::string text = make_deck({{"model.hidden", "130"}, {"model.ffn_hidden", "520"}});
    const std::string p = fx.problem(text);
    CHECK_THAT(p, has("deck.toml:" + std::to_string(line_of(text, "model.hidden")) +
                      ": model.hidden = 130: expected a multiple of model.heads = 4 (line " +
                      std::to_string(line_of(text, "model.heads")) + ")"));
  }
  SECTION("heads % tensor") {
    const std::string text = make_deck({{"parallel.tensor", "3"}, {"model.ffn_hidden", "513"}});
    const std::string p = fx.problem(text);
    CHECK_THAT(p, has("model.heads = 4: expected a multiple of parallel.tensor = 3"));
    CHECK_THAT(p, has("deck.toml:" + std::to_string(line_of(text, "model.heads")) + ": "));
  }
  SECTION("ffn_hidden % tensor") {
    const std::string text = make_deck({{"model.ffn_hidden", "511"}});
    const std::string p = fx.problem(text);
    CHECK_THAT(p, has("deck.toml:" + std::to_string(line_of(text, "model.ffn_hidden")) +
                      ": model.ffn_hidden = 511: expected a multiple of parallel.tensor = 2"));
  }
  SECTION("layers % pipeline") {
    const std::string text = make_deck({{"parallel.pipeline", "3"}});
    const std::string p = fx.problem(text);
    CHECK_THAT(p, has("model.layers = 4: expected a multiple of parallel.pipeline = 3"));
  }
  SECTION("global_batch % (micro_batch * data)") {
    const std::string text = make_deck({{"parallel.data", "3"}});
    const std::string p = fx.problem(text);
    CHECK_THAT(p, has("deck.toml:" + std::to_string(line_of(text, "training.global_batch")) +
                      ": training.global_batch = 16: expected a multiple of "
                      "training.micro_batch * parallel.data = 4 * 3 = 12"));
    CHECK_THAT(
        p, has("parallel.data = 3 (line " + std::to_string(line_of(text, "parallel.data")) + ")"));
  }
  SECTION("a --set that breaks a rule is named as the culprit") {
    const auto p = fx.problems(make_deck(), {"parallel.tensor=3"});
    INFO(join(p));
    REQUIRE(p.size() == 2);  // heads % tensor and ffn_hidden % tensor
    CHECK_THAT(p[0], has("--set parallel.tensor=3: parallel.tensor = 3: expected a divisor of "
                         "model.heads = 4 (deck.toml:"));
    CHECK_THAT(p[1], has("--set parallel.tensor=3: parallel.tensor = 3: expected a divisor of "
                         "model.ffn_hidden = 512"));
    const auto q = fx.problems(make_deck(), {"training.micro_batch=3"});
    REQUIRE(q.size() == 1);
    CHECK_THAT(q[0],
               has("--set training.micro_batch=3: training.micro_batch = 3: expected "
                   "training.micro_batch * parallel.data to divide training.global_batch = 16"));
  }
  SECTION("the default ffn_hidden is named as a default") {
    const auto p = fx.problems(make_deck({{"model.ffn_hidden", ""},
                                          {"model.hidden", "6"},
                                          {"model.heads", "3"},
                                          {"parallel.tensor", "3"}}),
                               {"parallel.tensor=5"});
    INFO(join(p));
    CHECK_THAT(join(p), has("model.ffn_hidden = 24 (default 4 * model.hidden)"));
  }
  SECTION("the vocabulary needs no divisibility") {
    const Deck d = fx.parse(make_deck(
        {{"model.vocab_size", "50257"}, {"parallel.tensor", "4"}, {"model.ffn_hidden", "512"}}));
    CHECK(d.model.vocab_size == 50257);
  }
}

TEST_CASE("deck: data.train is required", "[io][deck]") {
  Fixture fx;
  const std::string p = fx.problem(make_deck({{"data.train", ""}}));
  CHECK_THAT(p, has("deck.toml: data.train is required: "));
  CHECK_THAT(fx.problem("[model]\nlayers = 4\n"), has("deck.toml: data.train is required: "));
  CHECK_THAT(fx.problem(""), has("deck.toml: data.train is required: "));
}

TEST_CASE("deck: data files must exist, be readable and end in .txt or .bin", "[io][deck]") {
  Fixture fx;
  SECTION("a missing file names key, line and resolved path") {
    const std::string text = make_deck({{"data.train", "\"nope/missing.txt\""}});
    const std::string p = fx.problem(text);
    CHECK_THAT(p, has("deck.toml:" + std::to_string(line_of(text, "data.train")) +
                      ": data.train = \"nope/missing.txt\": expected an existing, readable"));
    CHECK_THAT(p, has(norm(fx.dir.path() / "nope/missing.txt") + " does not exist"));
  }
  SECTION("data.valid is checked too, when set") {
    const std::string text = make_deck({{"data.valid", "\"missing.bin\""}});
    CHECK_THAT(fx.problem(text), has("deck.toml:" + std::to_string(line_of(text, "data.valid")) +
                                     ": data.valid = \"missing.bin\""));
    CHECK(fx.parse(make_deck({{"data.valid", "\"\""}})).data.valid.empty());
    CHECK(fx.parse(make_deck({{"data.valid", ""}})).data.valid.empty());
  }
  SECTION("a wrong extension") {
    fx.dir.write("tokens.csv", "1,2,3\n");
    fx.dir.write("tokens", "abc");
    const std::string p = fx.problem(make_deck({{"data.train", "\"tokens.csv\""}}));
    CHECK_THAT(p, has("data.train = \"tokens.csv\""));
    CHECK_THAT(p, has(norm(fx.dir.path() / "tokens.csv") + " ends in .csv"));
    CHECK_THAT(p, !has("does not exist"));
    CHECK_THAT(fx.problem(make_deck({{"data.train", "\"tokens\""}})), has("has no extension"));
    CHECK_THAT(fx.problem(make_deck({{"data.train", "\"gone.csv\""}})),
               has("does not exist and ends in .csv"));
  }
  SECTION("a folder names every shard in it; a folder without any is refused") {
    fs::create_directories(fx.dir.path() / "shards.bin");
    CHECK_THAT(fx.problem(make_deck({{"data.train", "\"shards.bin\""}})),
               has("data.train = \"shards.bin\": expected a folder of readable .txt or .bin token files, but " +
                   norm(fx.dir.path() / "shards.bin") + " is a folder with no .bin or .txt file in it"));
    fx.dir.write("shards.bin/train_000000.bin", std::string(1024, '\0'));
    CHECK(fx.parse(make_deck({{"data.train", "\"shards.bin\""}})).data.train == norm(fx.dir.path() / "shards.bin"));
    // A subfolder is skipped whatever its name (docs/deck-reference.md), x.bin/ too (issue 30).
    fs::create_directories(fx.dir.path() / "shards.bin/train_000001.bin");
    CHECK(expand_data_paths(norm(fx.dir.path() / "shards.bin")).files ==
          std::vector<std::string>{norm(fx.dir.path() / "shards.bin/train_000000.bin")});
    CHECK_NOTHROW(fx.parse(make_deck({{"data.train", "\"shards.bin\""}})));
  }
  SECTION("validation data is never training data") {
    // DIR holds train.bin and valid.bin (the names input/gpt2-small.toml uses): data.train = DIR
    // with data.valid = DIR/valid.bin trained on the validation file.
    fx.dir.write("mixed/train.bin", std::string(1024, '\0'));
    fx.dir.write("mixed/valid.bin", std::string(1024, '\0'));
    const auto both = fx.problems(make_deck({{"data.train", "\"mixed\""}, {"data.valid", "\"mixed/valid.bin\""}}));
    CHECK_THAT(join(both), has("data.train = \"mixed\": expected a folder of readable .txt or .bin token files, but " +
                               norm(fx.dir.path() / "mixed") +
                               " is a folder that mixes a validation split (valid.bin) with other files (train.bin): "
                               "name one kind with a pattern, e.g. \"" +
                               norm(fx.dir.path() / "mixed/train.bin") + "\""));
    // The same file under another name (a link) or in a pattern: refused on data.valid, naming it.
    fs::create_symlink(fx.dir.path() / "train.txt", fx.dir.path() / "held_out.txt");
    CHECK_THAT(fx.problem(make_deck({{"data.valid", "\"held_out.txt\""}})),
               has("data.valid = \"held_out.txt\": expected validation data apart from the training data, but " +
                   norm(fx.dir.path() / "held_out.txt") + " is also training file " + norm(fx.dir.path() / "train.txt")));
    CHECK_THAT(fx.problem(make_deck({{"data.valid", "\"train.txt\""}})),
               has("is also a training file (data.train = " + norm(fx.dir.path() / "train.txt")));
    fx.dir.write("set/a_000000.bin", std::string(1024, '\0'));
    fx.dir.write("set/a_000001.bin", std::string(1024, '\0'));
    CHECK_THAT(fx.problem(make_deck({{"data.train", "\"set\""}, {"data.valid", "\"set/a_000001.bin\""}})),
               has("data.valid = \"set/a_000001.bin\": expected validation data apart from the training data"));
    // Validation names beyond tokenize's valid_ prefix: llm.c's, upper case, test/dev splits.
    for (const char* name : {"fineweb_val_000000.bin", "VALID.bin", "tinystories_test.bin", "Dev-00.bin"}) {
      INFO(name);
      const std::string folder = std::string("family_") + name;
      fx.dir.write(folder + "/fineweb_train_000001.bin", std::string(1024, '\0'));
      fx.dir.write(folder + "/" + name, std::string(1024, '\0'));
      CHECK_THAT(fx.problem(make_deck({{"data.train", "\"" + folder + "\""}})),
                 has("mixes a validation split (" + std::string(name) + ")") &&
                     has("e.g. \"" + norm(fx.dir.path() / folder / "fineweb_train_*.bin") + "\""));
    }
    // Words, not substrings: "contest", "device", "interval" are no split names.
    fx.dir.write("words/contest_000000.bin", std::string(1024, '\0'));
    fx.dir.write("words/device_logs.bin", std::string(1024, '\0'));
    fx.dir.write("words/interval.bin", std::string(1024, '\0'));
    CHECK(expand_data_paths(norm(fx.dir.path() / "words")).problem.empty());
  }
  SECTION("a glob pattern: kept as written (resolved), refused when it matches nothing") {
    fx.dir.write("train_000000.bin", std::string(1024, '\0'));
    fx.dir.write("train_000001.bin", std::string(1024, '\0'));
    CHECK(fx.parse(make_deck({{"data.train", "\"train_*.bin\""}})).data.train == norm(fx.dir.path() / "train_*.bin"));
    CHECK_THAT(fx.problem(make_deck({{"data.valid", "\"valid_*.bin\""}})),
               has("data.valid = \"valid_*.bin\": expected a pattern of readable .txt or .bin token files, but " +
                   norm(fx.dir.path() / "valid_*.bin") + " is a pattern that matches no file"));
    fx.dir.write("train_notes.md", "x");
    CHECK_THAT(fx.problem(make_deck({{"data.train", "\"train_*\""}})),
               has("but " + norm(fx.dir.path() / "train_notes.md") + " (one of 3 files the pattern matches) ends in .md"));
  }
  SECTION(".bin is accepted") {
    fx.dir.write("train.bin", std::string(1024, '\0'));
    CHECK(fx.parse(make_deck({{"data.train", "\"train.bin\""}})).data.train ==
          norm(fx.dir.path() / "train.bin"));
  }
}

TEST_CASE("deck: TOML syntax errors report file, line and column", "[io][deck]") {
  Fixture fx;
  SECTION("a broken value") {
    const std::string p = fx.problem("[model]\nlayers = = 4\n");
    CHECK_THAT(p, matches("deck\\.toml:2:[0-9]+: TOML syntax error: .+"));
  }
  SECTION("a duplicate key") {
    const std::string p = fx.problem("[model]\nlayers = 4\nlayers = 8\n");
    CHECK_THAT(p, matches("deck\\.toml:3:[0-9]+: TOML syntax error: .*layers.*"));
  }
  SECTION("malformed overrides are still reported alongside") {
    const auto p = fx.problems("[model]\nlayers = \n", {"model.layers"});
    INFO(join(p));
    REQUIRE(p.size() == 2);
    CHECK_THAT(p[0], has("deck.toml:2:"));
    CHECK_THAT(p[1], has("--set model.layers: "));
  }
}

TEST_CASE("deck: load_deck names the deck file as given", "[io][deck]") {
  Fixture fx;
  const std::string text = make_deck({{"model.hidden", "-1"},
                                      {"data.train", "\"../train.txt\""},
                                      {"data.valid", "\"../valid.txt\""}});
  const fs::path file = fx.dir.write("decks/exp.toml", text);
  try {
    load_deck(file.string());
    FAIL("no DeckError");
  } catch (const DeckError& e) {
    REQUIRE(e.problems().size() == 1);
    CHECK_THAT(e.problems()[0],
               has(file.string() + ":" + std::to_string(line_of(text, "model.hidden")) +
                   ": model.hidden = -1: expected an integer >= 1"));
    CHECK(std::string(e.what()) == e.problems()[0]);
  }
  SECTION("a deck file that does not exist") {
    REQUIRE_THROWS_WITH(load_deck((fx.dir.path() / "absent.toml").string()),
                        has("absent.toml: cannot read deck file"));
  }
  SECTION("the source is the path as given") {
    const std::string good =
        make_deck({{"data.train", "\"../train.txt\""}, {"data.valid", "\"../valid.txt\""}});
    const fs::path f = fx.dir.write("decks/good.toml", good);
    CHECK(load_deck(f.string()).source == f.string());
  }
}

TEST_CASE("deck: --set overrides", "[io][deck]") {
  Fixture fx;
  const std::string text = make_deck();
  SECTION("integer, float, boolean, string") {
    const std::string train = norm(fx.dir.path() / "train.txt");
    const Deck d = fx.parse(text, {"model.layers=8", "optimizer.lr=1e-3", "checkpoint.resume=false",
                                   "data.train=\"" + train + "\"", "training.precision=fp32",
                                   " training.steps = 400 ", "data.valid="});
    CHECK(d.model.layers == 8);
    CHECK(d.optimizer.lr == 1e-3);
    CHECK(d.checkpoint.resume == false);
    CHECK(d.data.train == train);
    CHECK(d.training.precision == "fp32");
    CHECK(d.training.steps == 400);
    CHECK(d.data.valid.empty());  // empty value: no validation set
  }
  SECTION("a bare string") {
    const std::string train = norm(fx.dir.path() / "train.txt");
    CHECK(fx.parse(text, {"data.train=" + train}).data.train == train);
    CHECK(fx.parse(text, {"optimizer.decay=linear"}).optimizer.decay == "linear");
    CHECK(fx.parse(text, {"run.dir=" + fx.dir.str() + "/2024"}).run.dir ==
          norm(fx.dir.path() / "2024"));
  }
  SECTION("the last --set of a key wins, and a --set replaces a bad file value") {
    const Deck d =
        fx.parse(make_deck({{"model.layers", "0"}}), {"model.layers=2", "model.layers=6"});
    CHECK(d.model.layers == 6);
  }
  SECTION("malformed overrides name the override") {
    CHECK_THAT(fx.problem(text, {"model.layers"}),
               has("--set model.layers: expected section.key=value"));
    const std::string p = fx.problem(text, {"layers=8"});
    CHECK_THAT(p, has("--set layers=8: expected section.key=value"));
    CHECK_THAT(p, has("did you mean model.layers?"));
    const std::string q = fx.problem(text, {"model.hiden=8"});
    CHECK_THAT(q, has("--set model.hiden=8: unknown key model.hiden"));
    CHECK_THAT(q, has("did you mean model.hidden?"));
    const std::string r = fx.problem(text, {"modle.layers=8"});
    CHECK_THAT(r, has("--set modle.layers=8: unknown section [modle]"));
    CHECK_THAT(r, has("did you mean [model]?"));
    CHECK_THAT(fx.problem(text, {"=3"}), has("--set =3: expected section.key=value"));
    CHECK_THAT(fx.problem(text, {"=3"}), has("malformed --set argument: no section.key before '='"));
    CHECK_THAT(fx.problem(text, {"=3"}), !has("names no section"));
  }
  SECTION("an override failing validation is reported against the --set") {
    CHECK_THAT(fx.problem(text, {"model.layers=0"}),
               has("--set model.layers=0: model.layers = 0: expected an integer >= 1"));
    CHECK_THAT(fx.problem(text, {"model.layers=eight"}),
               has("--set model.layers=eight: model.layers = \"eight\": expected an integer >= 1 "
                   "(got a string)"));
    CHECK_THAT(fx.problem(text, {"model.layers=8.0"}),
               has("--set model.layers=8.0: model.layers = 8.0: expected an integer"));
    CHECK_THAT(fx.problem(text, {"training.precision=fp8"}),
               has("--set training.precision=fp8: training.precision = \"fp8\": expected one of "
                   "\"fp32\", \"bf16\", \"fp16\""));
    CHECK_THAT(
        fx.problem(text, {"checkpoint.resume=yes"}),
        has("--set checkpoint.resume=yes: checkpoint.resume = \"yes\": expected true or false"));
    const std::string p = fx.problem(text, {"data.train=no_such_file_7f3a.txt"});
    CHECK_THAT(
        p, has("--set data.train=no_such_file_7f3a.txt: data.train = \"no_such_file_7f3a.txt\""));
    CHECK_THAT(p, has(norm(fs::current_path() / "no_such_file_7f3a.txt") + " does not exist"));
  }
}

TEST_CASE("deck: relative paths follow the deck file; --set paths follow the working directory",
          "[io][deck]") {
  Fixture fx;
  fx.dir.write("sub/valid.txt", "v");
  const std::string text =
      "[data]\ntrain = \"../train.txt\"\nvalid = \"valid.txt\"\n"
      "[checkpoint]\ndir = \"../ckpt/\"\n[run]\ndir = \"out/./x/../y\"\n";
  const fs::path deck_file = fx.dir.write("sub/deck.toml", text);
  SECTION("paths in the file are relative to the file's folder, not the working directory") {
    const Deck d = load_deck(deck_file.string());
    CHECK(d.data.train == norm(fx.dir.path() / "train.txt"));
    CHECK(d.data.valid == norm(fx.dir.path() / "sub/valid.txt"));
    CHECK(d.checkpoint.dir == norm(fx.dir.path() / "ckpt"));
    CHECK(d.run.dir == norm(fx.dir.path() / "sub/out/y"));
  }
  SECTION("a deck named by a relative path") {
    const fs::path rel = fs::relative(deck_file, fs::current_path());
    if (!rel.empty()) {
      const Deck d = load_deck(rel.string());
      CHECK(d.source == rel.string());
      CHECK(d.data.train == norm(fs::current_path() / rel.parent_path() / "../train.txt"));
    }
  }
  SECTION("defaults resolve against the deck's folder") {
    const Deck d =
        load_deck(fx.dir.write("sub/min.toml", "[data]\ntrain = \"../train.txt\"\n").string());
    CHECK(d.run.dir == norm(fx.dir.path() / "sub/runs/default"));
  }
  SECTION("absolute paths stay as they are") {
    const std::string abs = norm(fx.dir.path() / "train.txt");
    CHECK(fx.parse("[data]\ntrain = \"" + abs + "\"\n").data.train == abs);
  }
  SECTION("--set paths are relative to the working directory") {
    const fs::path rel = fs::relative(fx.dir.path() / "train.txt", fs::current_path());
    REQUIRE(!rel.empty());
    REQUIRE(rel.is_relative());
    const Deck d =
        load_deck(deck_file.string(), {"data.train=" + rel.string(), "run.dir=somewhere"});
    CHECK(d.data.train == norm(fs::current_path() / rel));
    CHECK(fs::equivalent(d.data.train.sources.at(0).path, fx.dir.path() / "train.txt"));
    CHECK(d.run.dir == norm(fs::current_path() / "somewhere"));
    // The same relative text that works in the file fails on the command line (unless the
    // working directory happens to be the deck's folder).
    if (fs::current_path() != deck_file.parent_path()) {
      fx.dir.write("sub/only_here_7f3a.txt", "x");
      try {
        load_deck(deck_file.string(), {"data.valid=only_here_7f3a.txt"});
        FAIL("no DeckError");
      } catch (const DeckError& e) {
        REQUIRE(e.problems().size() == 1);
        CHECK_THAT(e.problems()[0], has("--set data.valid=only_here_7f3a.txt: data.valid = "));
        CHECK_THAT(e.problems()[0],
                   has(norm(fs::current_path() / "only_here_7f3a.txt") + " does not exist"));
      }
    }
  }
}

TEST_CASE("deck: to_toml writes every key in table order and round-trips", "[io][deck]") {
  Fixture fx;
  const std::vector<std::string> order = {"model.architecture",
                                          "model.norm",
                                          "model.mlp",
                                          "model.position",
                                          "model.attention",
                                          "model.qkv_bias",
                                          "model.linear_bias",
                                          "model.layers",
                                          "model.hidden",
                                          "model.heads",
                                          "model.kv_heads",
                                          "model.ffn_hidden",
                                          "model.seq_length",
                                          "model.vocab_size",
                                          "model.vocab_pad_multiple",
                                          "model.tie_embeddings",
                                          "model.mtp_depth",
                                          "model.norm_eps",
                                          "model.rope_theta",
                                          "model.rope_factor",
                                          "model.rope_low_freq_factor",
                                          "model.rope_high_freq_factor",
                                          "model.rope_original_max_positions",
                                          "model.rope_beta_fast",
                                          "model.rope_beta_slow",
                                          "model.rope_mscale",
                                          "model.rope_mscale_all_dim",
                                          "model.q_lora_rank",
                                          "model.kv_lora_rank",
                                          "model.qk_nope_head_dim",
                                          "model.qk_rope_head_dim",
                                          "model.v_head_dim",
                                          "model.experts",
                                          "model.moe_ffn_hidden",
                                          "model.moe_shared_experts",
                                          "model.moe_dense_layers",
                                          "model.experts_per_token",
                                          "model.moe_capacity_factor",
                                          "model.moe_score_function",
                                          "model.moe_groups",
                                          "model.moe_groups_per_token",
                                          "model.moe_norm_topk_prob",
                                          "model.moe_routed_scaling",
                                          "parallel.tensor",
                                          "parallel.context",
                                          "parallel.expert",
                                          "parallel.pipeline",
                                          "parallel.data",
                                          "parallel.shard_group",
                                          "parallel.sequence_parallel",
                                          "parallel.order",
                                          "parallel.virtual_stages",
                                          "parallel.nccl_pipeline_lanes",
                                          "parallel.mpi_device_memory",
                                          "training.global_batch",
                                          "training.micro_batch",
                                          "training.steps",
                                          "training.seed",
                                          "training.precision",
                                          "training.loss_scale_initial",
                                          "training.loss_scale_window",
                                          "training.loss_scale_hysteresis",
                                          "training.loss_scale_min",
                                          "training.loss_scale_growth_factor",
                                          "training.loss_scale_backoff_factor",
                                          "training.recompute",
                                          "training.attention",
                                          "training.grad_clip",
                                          "training.moe_bias_update_rate",
                                          "training.moe_aux_loss_coeff",
                                          "training.moe_aux_loss_per_sequence",
                                          "training.moe_z_loss_coeff",
                                          "training.mtp_loss_coeff",
                                          "training.log_interval",
                                          "training.eval_interval",
                                          "training.eval_windows",
                                          "training.tasks",
                                          "training.tasks_interval",
                                          "training.skip_spikes",
                                          "training.spike_zscore",
                                          "training.spike_window",
                                          "training.max_skipped_steps",
                                          "training.straggler_factor",
                                          "training.straggler_intervals",
                                          "training.init_from",
                                          "optimizer.lr",
                                          "optimizer.min_lr",
                                          "optimizer.warmup_steps",
                                          "optimizer.decay",
                                          "optimizer.weight_decay",
                                          "optimizer.beta1",
                                          "optimizer.beta2",
                                          "optimizer.eps",
                                          "optimizer.distributed",
                                          "optimizer.shard",
                                          "optimizer.reshard_after_forward",
                                          "data.train",
                                          "data.valid",
                                          "data.allow_blend_change",
                                          "data.tokenizer",
                                          "data.tokenizer_dir",
                                          "data.tokenizer_pattern",
                                          "data.document_mask",
                                          "data.reset_positions",
                                          "checkpoint.dir",
                                          "checkpoint.interval",
                                          "checkpoint.keep",
                                          "checkpoint.resume",
                                          "checkpoint.overwrite",
                                          "checkpoint.metadata_timeout_s",
                                          "checkpoint.async",
                                          "run.dir"};
  auto keys_in = [](const std::string& toml_text) {
    std::vector<std::string> keys;
    std::istringstream in(toml_text);
    std::string line, section;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      if (line[0] == '[') {
        section = line.substr(1, line.find(']') - 1);
        continue;
      }
      keys.push_back(section + "." + line.substr(0, line.find(' ')));
    }
    return keys;
  };
  auto round_trip = [&](const Deck& d) {
    const std::string text = d.to_toml();
    INFO(text);
    CHECK(keys_in(text) == order);
    // Paths are absolute, so the folder the text is parsed against does not matter.
    const Deck back = parse_deck(text, "<resolved>", "/nonexistent/elsewhere");
    CHECK(back == d);
    CHECK(back.source == "<resolved>");
    const std::string again = back.to_toml();
    CHECK(again.substr(again.find('\n')) == text.substr(text.find('\n')));
  };
  SECTION("the example deck") { round_trip(fx.parse(make_deck())); }
  SECTION("all defaults") { round_trip(fx.parse("[data]\ntrain = \"train.txt\"\n")); }
  SECTION("awkward values") {
    fx.dir.write("we\"ird \\ dir \u00fc/train.txt", "t");
    const Deck d = fx.parse(make_deck({{"optimizer.lr", "1"},
                                       {"optimizer.min_lr", "0"},
                                       {"optimizer.eps", "1e-300"},
                                       {"optimizer.beta1", "0.1"},
                                       {"optimizer.beta2", "0.999999999"},
                                       {"optimizer.weight_decay", "1e20"},
                                       {"training.grad_clip", "0"},
                                       {"training.seed", "9223372036854775807"},
                                       {"optimizer.decay", "\"constant\""},
                                       {"checkpoint.resume", "false"},
                                       {"data.train", "'we\"ird \\ dir \u00fc/train.txt'"},
                                       {"data.valid", ""},
                                       {"run.dir", "'tab\there'"}}));
    CHECK(d.data.train == norm(fx.dir.path() / "we\"ird \\ dir \u00fc/train.txt"));
    round_trip(d);
  }
  SECTION("equality ignores the source but nothing else") {
    Deck a = fx.parse(make_deck());
    Deck b = a;
    b.source = "other.toml";
    CHECK(a == b);
    b.optimizer.eps = 2e-8;
    CHECK(a != b);
  }
}

TEST_CASE("deck: all problems are reported together, file lines first, then --set", "[io][deck]") {
  Fixture fx;
  const std::string text = make_deck({{"model.hiden", "96"},    // unknown key
                                      {"model.layers", "4.0"},  // wrong type
                                      {"model.heads", "3"},     // 128 % 3
                                      {"parallel.tensor", "1"},
                                      {"optimizer.beta2", "1.5"},           // out of range
                                      {"data.train", "\"missing.txt\""}});  // missing file
  const auto p = fx.problems(text, {"training.steps=0", "bogus"});
  INFO(join(p));
  REQUIRE(p.size() == 7);
  CHECK_THAT(p[0], has("deck.toml:" + std::to_string(line_of(text, "model.layers")) +
                       ": model.layers = 4.0"));
  CHECK_THAT(p[1], has("deck.toml:" + std::to_string(line_of(text, "model.hidden")) +
                       ": model.hidden = 128: expected a multiple of model.heads = 3"));
  CHECK_THAT(p[2], has("deck.toml:" + std::to_string(line_of(text, "model.hiden")) +
                       ": model.hiden = 96"));
  CHECK_THAT(p[3], has("deck.toml:" + std::to_string(line_of(text, "optimizer.beta2")) +
                       ": optimizer.beta2 = 1.5"));
  CHECK_THAT(p[4], has("deck.toml:" + std::to_string(line_of(text, "data.train")) +
                       ": data.train = \"missing.txt\""));
  CHECK_THAT(p[5], has("--set training.steps=0: training.steps = 0: expected an integer >= 1"));
  CHECK_THAT(p[6], has("--set bogus: expected section.key=value"));
  try {
    fx.parse(text, {"training.steps=0", "bogus"});
  } catch (const DeckError& e) {
    CHECK(std::string(e.what()) == join(p).substr(0, join(p).size() - 1));
  }
}

// The decks shipped in input/. Their data files are made by jobs/prepare-data.sh (tiny) or live
// on clusters (GPT-2 small, GPT-3 175B), so: with the data pointed at fixtures every deck must
// validate, and without, the only problems allowed are missing data files.
TEST_CASE("deck: the decks in input/ validate", "[io][deck]") {
  Fixture fx;
  fx.dir.write("train.bin", std::string(1024, '\0'));
  fx.dir.write("valid.bin", std::string(1024, '\0'));
  const std::string input = std::string(TPTRAIN_SOURCE_DIR) + "/input/";
  auto load = [&](const std::string& name, const std::string& ext) {
    return load_deck(input + name, {"data.train=" + norm(fx.dir.path() / ("train" + ext)),
                                    "data.valid=" + norm(fx.dir.path() / ("valid" + ext))});
  };
  auto only_missing_data = [&](const std::string& name) {
    try {
      load_deck(input + name);
    } catch (const DeckError& e) {
      for (const std::string& p : e.problems()) {
        INFO(p);
        CHECK_THAT(p, has(": data.train = ") || has(": data.valid = "));
        CHECK_THAT(p, has(" does not exist"));
      }
    }
  };
  SECTION("tiny") {
    const Deck d = load("tiny.toml", ".txt");
    CHECK(d.model.layers == 4);
    CHECK(d.model.hidden == 128);
    CHECK(d.model.heads == 4);
    CHECK(d.model.ffn_hidden == 512);
    CHECK(d.model.seq_length == 128);
    CHECK(d.model.vocab_size == 256);
    CHECK(d.parallel.tensor == 2);
    CHECK(d.parallel.world_size() == 2);
    CHECK(d.training.global_batch == 16);
    CHECK(d.training.micro_batch == 4);
    CHECK(d.training.steps == 1500);  // 3.1 M tokens: what a validation loss < 2.0 nats/byte needs
    CHECK(d.optimizer.lr == 3e-3);
    CHECK(d.optimizer.min_lr == 3e-4);
    CHECK(d.optimizer.warmup_steps == 30);
    CHECK(d.run.dir == norm(fs::path(TPTRAIN_SOURCE_DIR) / "runs/tiny"));
    CHECK(d.checkpoint.dir == norm(fs::path(TPTRAIN_SOURCE_DIR) / "runs/tiny/checkpoints"));
    only_missing_data("tiny.toml");
  }
  SECTION("gpt2-small") {
    const Deck d = load("gpt2-small.toml", ".bin");
    CHECK(d.model.layers == 12);
    CHECK(d.model.hidden == 768);
    CHECK(d.model.heads == 12);
    CHECK(d.model.seq_length == 1024);
    CHECK(d.model.vocab_size == 50257);
    CHECK(d.parallel.tensor == 4);
    only_missing_data("gpt2-small.toml");
  }
  SECTION("gpt3-175b") {
    const Deck d = load("gpt3-175b.toml", ".bin");
    CHECK(d.model.layers == 96);
    CHECK(d.model.hidden == 12288);
    CHECK(d.model.heads == 96);
    CHECK(d.model.seq_length == 2048);
    CHECK(d.model.vocab_size == 50257);
    CHECK(d.parallel.tensor == 8);
    CHECK(d.parallel.pipeline == 16);
    CHECK(d.parallel.data == 8);
    CHECK(d.parallel.world_size() == 1024);
    CHECK(d.training.global_batch == 1536);
    CHECK(d.training.micro_batch == 1);
    CHECK(d.grad_accum_steps() == 192);
    CHECK(d.optimizer.lr == 6e-5);
    CHECK(d.training.precision == "bf16");
    CHECK(d.training.recompute == "full");
    only_missing_data("gpt3-175b.toml");
  }
  SECTION("gpt3-175b-seed: as the seed article states it") {
    const Deck d = load("gpt3-175b-seed.toml", ".bin");
    CHECK(d.model.hidden == 12288);
    CHECK(d.parallel.tensor == 8);
    CHECK(d.parallel.pipeline == 16);
    CHECK(d.parallel.data == 32);
    CHECK(d.training.global_batch == 1536);
    CHECK(d.optimizer.lr == 6e-5);
    CHECK(d.training.grad_clip == 1.0);
    only_missing_data("gpt3-175b-seed.toml");
  }
  for (const std::string name : {"gpt3-175b-seed-corrected.toml", "gpt2-124m.toml", "gpt2-350m.toml",
                                 "gpt2-774m.toml", "gpt2-1.5b.toml", "gpt3-1.3b.toml"}) {
    DYNAMIC_SECTION(name) {
      const Deck d = load(name, ".bin");
      CHECK(d.model.vocab_size == 50257);
      CHECK(d.training.precision == "bf16");
      only_missing_data(name);
    }
  }
}

// check and plan read cluster decks whose data lives on the cluster: a data file that does not
// exist is a warning naming the key and the path, everything else about the value stays an error.
TEST_CASE("deck: DataFiles::may_be_absent makes a missing data file a warning, for check and plan", "[io][deck]") {
  Fixture fx;
  const fs::path deck = fx.dir.write("deck.toml", make_deck({{"data.train", "\"gone/train.bin\""},
                                                             {"data.valid", "\"valid.txt\""}}));
  const std::string text = make_deck({{"data.train", "\"gone/train.bin\""}, {"data.valid", "\"valid.txt\""}});
  // train and eval: an error, as before.
  REQUIRE_THROWS_WITH(load_deck(deck.string()), has("data.train = \"gone/train.bin\": expected an existing"));
  std::vector<std::string> warnings;
  const Deck d = load_deck(deck.string(), {}, DataFiles::may_be_absent, &warnings);
  CHECK(d.data.train == norm(fx.dir.path() / "gone/train.bin"));
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], has("deck.toml:" + std::to_string(line_of(text, "data.train")) +
                              ": data.train = \"gone/train.bin\": " + norm(fx.dir.path() / "gone/train.bin") +
                              " does not exist (needed by train and eval"));
  // Still errors: a wrong extension, a file that exists but is not a regular one, a missing key.
  const fs::path csv = fx.dir.write("csv.toml", make_deck({{"data.train", "\"gone.csv\""}}));
  CHECK_THROWS_WITH(load_deck(csv.string(), {}, DataFiles::may_be_absent), has("gone.csv does not exist and ends in"));
  fs::create_directories(fx.dir.path() / "empty");
  CHECK_THROWS_WITH(load_deck(deck.string(), {"data.valid=" + (fx.dir.path() / "empty").string()}, DataFiles::may_be_absent),
                    has("is a folder with no .bin or .txt file in it"));
  // A pattern that matches nothing here may match on the cluster: a warning, like a missing file.
  warnings.clear();
  load_deck(deck.string(), {"data.valid=" + (fx.dir.path() / "valid_*.bin").string()}, DataFiles::may_be_absent,
            &warnings);
  REQUIRE(warnings.size() == 2);
  CHECK_THAT(warnings[1], has("data.valid = \"" + (fx.dir.path() / "valid_*.bin").string() +
                              "\": " + norm(fx.dir.path() / "valid_*.bin") + " is a pattern that matches no file (needed by train and eval"));
  const fs::path no_train = fx.dir.write("no_train.toml", make_deck({{"data.train", ""}}));
  CHECK_THROWS_WITH(load_deck(no_train.string(), {}, DataFiles::may_be_absent), has("data.train is required"));
}

// Widths that are not multiples of 8 miss the tensor-core GEMM shapes: check and plan warn, naming
// the key and where it was set; the deck still loads.
TEST_CASE("deck: hidden, ffn_hidden and head dimension not multiples of 8 are warnings", "[io][deck]") {
  Fixture fx;
  const std::string text = make_deck({{"model.hidden", "36"}, {"model.heads", "3"}, {"model.ffn_hidden", "100"}, {"parallel.tensor", "1"}});
  const fs::path deck = fx.dir.write("deck.toml", text);
  std::vector<std::string> warnings;
  const Deck d = load_deck(deck.string(), {}, DataFiles::may_be_absent, &warnings);
  CHECK(d.model.hidden == 36);
  REQUIRE(warnings.size() == 3);
  CHECK_THAT(warnings[0], has("deck.toml:" + std::to_string(line_of(text, "model.hidden")) +
                              ": model.hidden = 36 is not a multiple of 8"));
  CHECK_THAT(warnings[1], has("model.ffn_hidden = 100 is not a multiple of 8"));
  CHECK_THAT(warnings[2], has("deck.toml:" + std::to_string(line_of(text, "model.heads")) +
                              ": the head dimension model.hidden / model.heads = 12 is not a multiple of 8"));
  // Multiples of 8 everywhere (hidden 64, 4 heads of 16, ffn 256): no warning.
  warnings.clear();
  (void)load_deck(deck.string(), {"model.hidden=64", "model.heads=4", "model.ffn_hidden=256"}, DataFiles::may_be_absent,
                  &warnings);
  CHECK(warnings.empty());
}

// ---- the key table ------------------------------------------------------------------------------

namespace {

using tptrain::io::DeckKey;
using tptrain::io::deck_keys;
using tptrain::io::KeyType;

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string type_word(KeyType t) {
  switch (t) {
    case KeyType::Integer:
      return "integer";
    case KeyType::Number:
      return "number";
    case KeyType::String:
      return "string";
    case KeyType::Path:
      return "string (path)";
    case KeyType::Boolean:
      return "boolean";
  }
  return "?";
}

// A number as the reference writes it: 2^64 rather than 1.8446744073709552e+19.
std::string number_text(double x) {
  int e = 0;
  if (x > 0 && std::frexp(x, &e) == 0.5 && (e - 1 >= 10 || e - 1 <= -10)) return fmt::format("2^{}", e - 1);
  return fmt::format("{}", x);
}

std::string code(std::string_view s) { return "`" + std::string(s) + "`"; }

// A key's default as a table cell.
std::string default_text(const DeckKey& k) {
  return std::visit(
      [](const auto& v) -> std::string {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, std::int64_t>) {
          return code(std::to_string(v));
        } else if constexpr (std::is_same_v<V, double>) {
          return code(number_text(v));
        } else if constexpr (std::is_same_v<V, bool>) {
          return code(v ? "true" : "false");
        } else if constexpr (std::is_same_v<V, std::string_view>) {
          return code("\"" + std::string(v) + "\"");
        } else if constexpr (std::is_same_v<V, tptrain::io::Derived>) {
          // "4 * model.hidden", "<run.dir>/checkpoints" as code; words ("the preset's") as words.
          return v.how.find_first_of(".<*/") == std::string_view::npos ? std::string(v.how) : code(v.how);
        } else {
          return "**required**";
        }
      },
      k.default_value);
}

std::string with_note(std::string text, std::string_view note) {
  if (!note.empty()) text += " " + std::string(note);
  return text;
}

// A key's valid values (its rule) as a table cell; rules between keys are the reference's own
// section.
std::string rule_text(const DeckKey& k) {
  return std::visit(
      [](const auto& r) -> std::string {
        using R = std::decay_t<decltype(r)>;
        if constexpr (std::is_same_v<R, tptrain::io::IntRange>) {
          return with_note(r.hi ? fmt::format("{} to {}", r.lo, *r.hi) : fmt::format("≥ {}", r.lo), r.note);
        } else if constexpr (std::is_same_v<R, tptrain::io::NumberRange>) {
          if (!r.hi) return with_note(fmt::format("{} {}", r.lo_inclusive ? "≥" : ">", number_text(r.lo)), r.note);
          return with_note(fmt::format("in {}{}, {}{}", r.lo_inclusive ? "[" : "(", number_text(r.lo),
                                       number_text(*r.hi), r.hi_inclusive ? "]" : ")"),
                           r.note);
        } else if constexpr (std::is_same_v<R, tptrain::io::Choice>) {
          std::string t;
          for (std::string_view v : r.values) t += (t.empty() ? "" : ", ") + code("\"" + std::string(v) + "\"");
          if (!r.path_prefix.empty()) t += ", " + code("\"" + std::string(r.path_prefix) + "PATH\"");
          return t;
        } else if constexpr (std::is_same_v<R, tptrain::io::PathRule>) {
          const std::string what = r.data_file ? "a `.txt` or `.bin` file, a folder or a glob pattern of them, or a blend `[{path, weight}, ...]` of such"
                                               : "a path";
          return r.allow_empty ? "`\"\"` (none) or " + what : what;
        } else {
          return "`true`, `false`";
        }
      },
      k.rule);
}

// A table cell's text: a '|' would end the cell.
std::string cell_text(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

// docs/deck-reference.md's table of one section's keys, printed from io/deck_keys.cpp.
std::string key_table(std::string_view section) {
  std::string t = "| key | type | default | valid | meaning |\n|---|---|---|---|---|\n";
  for (const DeckKey& k : deck_keys())
    if (k.section == section)
      t += fmt::format("| {} | {} | {} | {} | {} |\n", code(k.key), type_word(k.type()), cell_text(default_text(k)),
                       cell_text(rule_text(k)), cell_text(k.doc));
  return t;
}

std::string table_name(std::string_view section) { return "deck keys [" + std::string(section) + "]"; }

// The problem with the text between "<!-- generated: NAME ... -->" and
// "<!-- end of generated: NAME -->" in `text` (the document `file`), or "" when it is `table`.
// `fixed`, when given, receives the text with the table in place.
std::string generated_problem(const std::string& file, const std::string& text, const std::string& name,
                              const std::string& table, std::string* fixed = nullptr,
                              std::string_view source = "io/deck_keys.cpp's rows") {
  const std::string begin_mark = "<!-- generated: " + name + " ",
                    end_mark = "<!-- end of generated: " + name + " -->";
  const std::size_t begin = text.find(begin_mark);
  const std::size_t start = begin == std::string::npos ? begin : text.find("-->\n", begin);
  const std::size_t end = start == std::string::npos ? start : text.find(end_mark, start);
  if (end == std::string::npos)
    return fmt::format("{} has no block \"{}...-->\" ... \"{}\" for the table {} (add the two lines, then "
                       "regenerate it)",
                       file, begin_mark, end_mark, name);
  const std::string found = text.substr(start + 4, end - start - 4);
  if (found == table) return "";
  if (fixed) *fixed = text.substr(0, start + 4) + table + text.substr(end);
  return fmt::format("{}: the table {} is not {}; regenerate it with "
                     "TPTRAIN_UPDATE_DOCS=1 build/tests/tptrain_tests \"[deck]\" (it rewrites the table in "
                     "place; then review and commit the file). Expected:\n{}",
                     file, name, source, table);
}

// input/tiny.toml lists every key (with its default in a comment).
std::vector<std::string> tiny_problems(const std::string& text) {
  std::vector<std::string> problems;
  const auto lines = lines_of(text);
  for (const DeckKey& k : deck_keys()) {
    std::string section;
    bool found = false;
    for (const std::string& l : lines) {
      if (l.rfind("[", 0) == 0) section = l.substr(1, l.find(']') - 1);
      // Listed, or (a key the deck's architecture leaves out: kv_heads for gpt2) commented out.
      if (section == k.section &&
          (l.rfind(std::string(k.key) + " ", 0) == 0 || l.rfind("# " + std::string(k.key) + " = ", 0) == 0))
        found = true;
    }
    if (!found) problems.push_back("input/tiny.toml does not list " + k.name());
  }
  return problems;
}

// The rules between keys (io/deck.cpp, DeckReader::build and the rules of base/ it reports), as
// docs/deck-reference.md states them, each with --set overrides of the smallest deck that break
// it; the reference's table shows what tptrain says to each, so a message cannot drift from it.
struct RuleExample {
  std::string_view rule;  // Markdown
  std::vector<std::string> overrides;
};

const std::vector<RuleExample>& rule_examples() {
  static const std::vector<RuleExample> rules = {
      {"`model.hidden % model.heads == 0`", {"model.heads=3"}},
      {"`model.heads % parallel.tensor == 0`", {"parallel.tensor=8"}},
      {"`model.heads % model.kv_heads == 0`, `model.kv_heads % parallel.tensor == 0`", {"model.kv_heads=3"}},
      {"`model.ffn_hidden % parallel.tensor == 0`", {"parallel.tensor=4", "model.ffn_hidden=6"}},
      {"`model.layers % parallel.pipeline == 0`", {"parallel.pipeline=3"}},
      {"with `parallel.virtual_stages > 1`: `parallel.pipeline > 1`", {"parallel.virtual_stages=2"}},
      {"with `parallel.virtual_stages > 1`: `model.layers % (parallel.pipeline * parallel.virtual_stages) == 0`, "
       "micro-batches per step `% parallel.pipeline == 0`",
       {"parallel.pipeline=2", "parallel.virtual_stages=3"}},
      {"with `parallel.sequence_parallel = true`: `model.seq_length % parallel.tensor == 0`",
       {"parallel.sequence_parallel=true", "parallel.tensor=4", "model.seq_length=130"}},
      {"`training.global_batch % (training.micro_batch * parallel.data) == 0`", {"parallel.data=3"}},
      {"`parallel.tensor * parallel.context * parallel.pipeline * parallel.data <= 2147483647`",
       {"parallel.pipeline=65536", "parallel.data=65536", "model.layers=65536", "training.global_batch=65536",
        "training.micro_batch=1"}},
      {"with `model.position = \"rope\"`: an even `model.hidden / model.heads`",
       {"model.position=rope", "model.hidden=36"}},
      {"with `model.norm = \"layernorm\"`: `model.linear_bias = true`", {"model.linear_bias=false"}},
      {"`model.norm_eps` at its default without `model.norm = \"rmsnorm\"`, `model.rope_theta` at its default "
       "without `model.position = \"rope\"`",
       {"model.norm_eps=1e-6"}},
      {"with `model.mlp = \"moe\"`: `model.experts_per_token <= model.experts`",
       {"model.architecture=mixtral", "model.experts=2", "model.experts_per_token=3"}},
      {"with `model.mlp = \"moe\"`: `model.linear_bias = false`", {"model.architecture=mixtral", "model.linear_bias=true"}},
      {"`model.experts`, `model.experts_per_token`, `model.moe_capacity_factor` at their defaults without "
       "`model.mlp = \"moe\"`",
       {"model.experts=4"}},
      {"`training.moe_aux_loss_coeff`, `training.moe_z_loss_coeff` at their defaults without `model.mlp = \"moe\"`",
       {"training.moe_aux_loss_coeff=0.1"}},
      {"`parallel.data % parallel.expert == 0`", {"model.architecture=mixtral", "parallel.expert=2"}},
      {"`model.experts % parallel.expert == 0`",
       {"model.architecture=mixtral", "parallel.data=3", "parallel.expert=3", "training.global_batch=12"}},
      {"`parallel.expert == 1` without `model.mlp = \"moe\"`", {"parallel.data=2", "parallel.expert=2"}},
      {"with `parallel.context > 1`: `model.seq_length % (2 * parallel.context) == 0`",
       {"parallel.context=2", "model.seq_length=130"}},
      {"with `parallel.context > 1` and `parallel.sequence_parallel = true`: `(model.seq_length / parallel.context) "
       "% parallel.tensor == 0`",
       {"parallel.context=2", "parallel.tensor=4", "parallel.sequence_parallel=true", "model.seq_length=132"}},
      {"with `parallel.context > 1`: `training.attention` not `\"batched\"`",
       {"parallel.context=2", "training.attention=batched"}},
      {"with `parallel.context > 1`: no `training.tasks`", {"parallel.context=2", "training.tasks=tasks.jsonl"}},
      {"`data.document_mask`, `data.reset_positions` not with `data.tokenizer = \"bytes\"`",
       {"data.document_mask=true"}},
      {"`data.tokenizer_pattern = \"\"` unless `data.tokenizer = \"tiktoken:PATH\"`", {"data.tokenizer_pattern=llama3"}},
      {"`data.tokenizer = \"tiktoken:PATH\"` needs `data.tokenizer_pattern`", {"data.tokenizer=tiktoken:tokenizer.model"}},
      {"`model.vocab_size` holds `data.tokenizer`'s ids", {"data.tokenizer=gpt2"}},
      {"`optimizer.warmup_steps <= training.steps`", {"optimizer.warmup_steps=400"}},
      {"`optimizer.min_lr <= optimizer.lr`", {"optimizer.min_lr=0.01"}},
      {"`training.loss_scale_min <= training.loss_scale_initial`", {"training.loss_scale_min=1e10"}},
  };
  return rules;
}

// The problems of the smallest deck (data.train alone; the data files are not looked at) with
// `overrides`; none when it loads.
std::vector<std::string> smallest_deck_problems(const std::vector<std::string>& overrides) {
  try {
    (void)parse_deck("[data]\ntrain = \"train.txt\"\n", "deck.toml", fs::temp_directory_path().string(), overrides,
                     DataFiles::ignored);
  } catch (const DeckError& e) {
    return e.problems();
  }
  return {};
}

std::string set_arguments(const std::vector<std::string>& overrides) {
  std::string t;
  for (const std::string& o : overrides) t += (t.empty() ? "--set " : " --set ") + o;
  return t;
}

// A message without its origin ("--set model.heads=3: ", "deck.toml: "), which the table's
// example column shows.
std::string without_origin(const std::string& problem) {
  const std::size_t colon = problem.find(": ");
  return colon == std::string::npos ? problem : problem.substr(colon + 2);
}

// docs/deck-reference.md's table of the rules between keys: each rule, its example and what
// tptrain says to it. `problems` receives the examples that break no rule or more than one, and
// those whose message is on a key the rule does not name.
std::string rule_table(std::vector<std::string>& problems) {
  std::string t = "| rule | e.g. | what tptrain says |\n|---|---|---|\n";
  for (const RuleExample& r : rule_examples()) {
    const std::vector<std::string> found = smallest_deck_problems(r.overrides);
    if (found.size() != 1)
      problems.push_back(fmt::format("{} breaks {} rules, not 1: {}", set_arguments(r.overrides), found.size(),
                                      join(found)));
    // The message is reported on a key of the rule.
    for (const std::string& p : found) {
      const std::string message = without_origin(p);
      const std::string subject = message.substr(0, message.find(" = "));
      if (std::string_view(r.rule).find(subject) == std::string_view::npos)
        problems.push_back(fmt::format("{}: the message is on {}, which the rule {} does not name: {}",
                                        set_arguments(r.overrides), subject, r.rule, message));
    }
    std::string said;
    for (const std::string& p : found) said += (said.empty() ? "" : "<br>") + code(without_origin(p));
    t += fmt::format("| {} | {} | {} |\n", r.rule, code(set_arguments(r.overrides)), cell_text(said));
  }
  return t;
}

// The error example of docs/deck-reference.md ("Error messages"): a deck with a problem of every
// kind, as `tptrain check` reports it, and its first lines, shortened, in the README.
constexpr std::string_view kExampleDeck =
    "[model]\n"
    "layers = 4.0\n"
    "hiden = 96\n"
    "heads = 3\n"
    "\n"
    "[training]\n"
    "precision = \"fp8\"\n"
    "\n"
    "[data]\n"
    "train = \"missing.csv\"\n"
    "\n"
    "[modle]\n";
const std::vector<std::string> kExampleSets = {"training.steps=0", "parallel.data=3"};

std::vector<std::string> example_problems() {
  try {
    (void)parse_deck(kExampleDeck, "input/exp.toml", "/home/me/input", kExampleSets, DataFiles::required);
  } catch (const DeckError& e) {
    return e.problems();
  }
  return {};
}

std::string error_example() {
  std::string t = "```toml\n# input/exp.toml\n" + std::string(kExampleDeck) + "```\n\n";
  t += code("tptrain check input/exp.toml " + set_arguments(kExampleSets)) + " reports, after its line " +
       code("tptrain: error: invalid deck input/exp.toml:") + ":\n\n```\n";
  for (const std::string& p : example_problems()) t += p + "\n";
  return t + "```\n";
}

std::string short_error_example() {
  std::string t = "```\n";
  const std::vector<std::string> all = example_problems();
  for (std::size_t i = 0; i < std::min<std::size_t>(3, all.size()); ++i) {
    std::string line = all[i];
    if (line.size() > 100) line = line.substr(0, line.rfind(' ', 96)) + " ...";
    t += line + "\n";
  }
  return t + "```\n";
}

// Checks the generated block `name` of the document at `path` (text in `text`); with
// TPTRAIN_UPDATE_DOCS set, rewrites it in place instead.
void check_generated(const fs::path& path, std::string& text, const std::string& name, const std::string& block,
                     std::string_view source) {
  std::string fixed;
  const std::string file = path.lexically_relative(TPTRAIN_SOURCE_DIR).string();
  const std::string problem = generated_problem(file, text, name, block, &fixed, source);
  if (!problem.empty() && !fixed.empty() && std::getenv("TPTRAIN_UPDATE_DOCS") != nullptr) {
    text = fixed;
    std::ofstream(path, std::ios::binary) << text;
    WARN(path.string() << ": rewrote the table " << name);
    return;
  }
  INFO(problem);
  CHECK(problem.empty());
}

}  // namespace

TEST_CASE("deck: llama keys, their defaults and their errors name the key", "[io][deck][llama]") {
  Fixture fx;
  const std::string llama = make_deck({{"model.architecture", "\"llama\""}});
  SECTION("defaults: gpt2 tied with kv_heads = heads; llama untied") {
    const Deck g = fx.parse(make_deck());
    CHECK(g.model.architecture == "gpt2");
    CHECK(g.model.kv_heads == 4);
    CHECK(g.model.tie_embeddings);
    CHECK(g.model.norm_eps == 1e-5);
    CHECK(g.model.rope_theta == 10000.0);
    const Deck l = fx.parse(llama, {"model.kv_heads=2", "model.rope_theta=500000"});
    CHECK(l.model.architecture == "llama");
    CHECK(l.model.kv_heads == 2);
    CHECK(!l.model.tie_embeddings);
    CHECK(l.model.rope_theta == 500000.0);
    // The resolved decks load back to themselves (a gpt2 one lists the llama keys at their defaults).
    CHECK(fx.parse(g.to_toml()) == g);
    CHECK(fx.parse(l.to_toml()) == l);
  }
  SECTION("kv_heads must divide heads") {
    const std::string p = join(fx.problems(llama, {"model.kv_heads=3"}));
    CHECK_THAT(p, has("model.kv_heads = 3: expected a divisor of model.heads = 4"));
  }
  SECTION("kv_heads must be a multiple of the tensor size: the nearest valid layouts are named") {
    const std::string p = join(fx.problems(make_deck({{"model.architecture", "\"llama\""}, {"model.heads", "8"}}),
                                           {"model.kv_heads=4", "parallel.tensor=3"}));
    INFO(p);
    CHECK_THAT(p, has("model.kv_heads = 4: expected a multiple of parallel.tensor = 3"));
    CHECK_THAT(p, has("the nearest valid layouts are parallel.tensor = 2 or 4"));
    const std::string q = join(fx.problems(llama, {"model.kv_heads=1"}));  // tensor 2 in the example deck
    CHECK_THAT(q, has("model.kv_heads = 1: expected a multiple of parallel.tensor = 2"));
    CHECK_THAT(q, has("the nearest valid layouts are parallel.tensor = 1"));
  }
  SECTION("rotary embeddings need an even head dimension") {
    const std::string p = join(fx.problems(llama, {"model.hidden=36", "model.kv_heads=2"}));
    INFO(p);
    CHECK_THAT(p, has("model.heads = 4"));
    CHECK_THAT(p, has("an even head dimension"));
    CHECK_THAT(p, has("36 / 4 = 9 is odd"));
  }
  SECTION("keys of a choice the specification does not make are refused, naming the choice") {
    // Grouped-query attention is a choice of any specification, gpt2's too.
    CHECK(fx.parse(make_deck(), {"model.kv_heads=2"}).model.kv_heads == 2);
    const std::string theta = join(fx.problems(make_deck(), {"model.rope_theta=500000"}));
    CHECK_THAT(theta, has("model.rope_theta = 500000"));
    CHECK_THAT(theta, has("expected to be left out with model.position = \"learned\""));
    const std::string eps = join(fx.problems(make_deck(), {"model.norm_eps=1e-6"}));
    CHECK_THAT(eps, has("model.norm_eps = 1e-"));
    CHECK_THAT(eps, has("expected to be left out with model.norm = \"layernorm\""));
    // gpt2 with rotary positions takes a θ; llama with LayerNorm needs its biases.
    CHECK(fx.parse(make_deck(), {"model.position=\"rope\"", "model.rope_theta=500000"}).model.rope_theta == 500000.0);
    const std::string bias = join(fx.problems(llama, {"model.norm=\"layernorm\""}));
    INFO(bias);
    CHECK_THAT(bias, has("model.linear_bias = false (default of model.architecture = \"llama\""));
    CHECK_THAT(bias, has("expected true with model.norm = \"layernorm\""));
    CHECK(fx.parse(llama, {"model.norm=\"layernorm\"", "model.linear_bias=true", "model.kv_heads=2"}).model.norm ==
          "layernorm");
    // At their defaults they are what a resolved gpt2 deck lists: accepted.
    CHECK_NOTHROW(fx.parse(make_deck(), {"model.rope_theta=10000", "model.norm_eps=1e-5", "model.kv_heads=4"}));
    // An untied GPT-2 is allowed.
    CHECK(!fx.parse(make_deck(), {"model.tie_embeddings=false"}).model.tie_embeddings);
  }
  SECTION("an unknown architecture") {
    CHECK_THAT(join(fx.problems(make_deck(), {"model.architecture=llama3"})), has("model.architecture"));
    // Its keys are not judged by another preset's choices (the default gpt2's LayerNorm).
    const std::string p = join(fx.problems(make_deck(), {"model.architecture=\"mistral\"", "model.norm_eps=1e-6"}));
    CHECK_THAT(p, has("model.architecture = \"mistral\": expected one of"));
    CHECK_THAT(p, !has("model.norm_eps"));
  }
}

TEST_CASE("deck: the mixture of experts' keys and expert parallelism, each error on its key", "[io][deck][moe]") {
  Fixture fx;
  // The example deck: tensor 2, data 1, global batch 16 of micro-batches of 4.
  const std::string mixtral = make_deck({{"model.architecture", "\"mixtral\""}});
  SECTION("defaults: 8 experts, top 2, dropless, no expert parallelism; resolved decks load back") {
    const Deck m = fx.parse(mixtral);
    CHECK(m.model.mlp == "moe");
    CHECK(!m.model.linear_bias);
    CHECK(m.model.experts == 8);
    CHECK(m.model.experts_per_token == 2);
    CHECK(m.model.moe_capacity_factor == 0.0);
    CHECK(m.parallel.expert == 1);
    CHECK(m.model.moe_aux_loss_coeff == 0.02);
    CHECK(m.model.moe_z_loss_coeff == 0.0);
    CHECK(fx.parse(m.to_toml()) == m);
    // A gpt2 deck lists the mixture's keys at their defaults: accepted.
    const Deck g = fx.parse(make_deck());
    CHECK(fx.parse(g.to_toml()) == g);
    const Deck e = fx.parse(mixtral, {"parallel.data=2", "parallel.expert=2", "model.experts=4",
                                      "training.moe_z_loss_coeff=0.001"});
    CHECK(e.parallel.expert == 2);
    CHECK(e.model.experts == 4);
    CHECK(fx.parse(e.to_toml()) == e);
    // An expert group as wide as the data group, and experts as many as its ranks.
    CHECK(fx.parse(mixtral, {"parallel.data=4", "parallel.expert=4", "model.experts=4"}).parallel.expert == 4);
  }
  SECTION("experts_per_token at most experts") {
    CHECK_THAT(fx.problem(mixtral, {"model.experts=2", "model.experts_per_token=3"}),
               has("model.experts_per_token = 3: expected at most model.experts = 2"));
    CHECK(fx.parse(mixtral, {"model.experts=2", "model.experts_per_token=2"}).model.experts_per_token == 2);
  }
  SECTION("the experts have no biases") {
    CHECK_THAT(fx.problem(mixtral, {"model.linear_bias=true"}),
               has("model.linear_bias = true: expected false with model.mlp = \"moe\""));
  }
  SECTION("the mixture's keys are refused with another MLP, naming it") {
    const std::string p = fx.problem(make_deck({{"model.experts", "4"}}));
    CHECK_THAT(p, has("deck.toml:"));
    CHECK_THAT(p, has("model.experts = 4: expected to be left out with model.mlp = \"gelu\""));
    CHECK_THAT(fx.problem(make_deck(), {"model.moe_capacity_factor=1.25"}),
               has("model.moe_capacity_factor = 1.25: expected to be left out with model.mlp"));
    const std::string aux = fx.problem(make_deck(), {"training.moe_aux_loss_coeff=0.1"});
    CHECK_THAT(aux, has("training.moe_aux_loss_coeff = 0.1: expected to be left out with model.mlp = \"gelu\""));
    CHECK_THAT(aux, has("load-balancing loss"));
    CHECK_THAT(fx.problem(make_deck({{"model.architecture", "\"llama\""}}), {"training.moe_z_loss_coeff=0.001"}),
               has("training.moe_z_loss_coeff = 0.001: expected to be left out with model.mlp = \"swiglu\""));
    // At their defaults (what a resolved deck lists) they are accepted.
    CHECK_NOTHROW(fx.parse(make_deck(), {"model.experts=8", "model.experts_per_token=2", "model.moe_capacity_factor=0",
                                         "training.moe_aux_loss_coeff=0.02", "training.moe_z_loss_coeff=0"}));
  }
  SECTION("parallel.expert > 1 needs a mixture of experts") {
    CHECK_THAT(fx.problem(make_deck(), {"parallel.data=2", "parallel.expert=2"}),
               has("parallel.expert = 2: expected 1 without a mixture of experts"));
  }
  SECTION("parallel.expert divides parallel.data") {
    const std::string p = fx.problem(mixtral, {"parallel.data=2", "parallel.expert=4"});
    CHECK_THAT(p, has("parallel.data = 2: expected a multiple of parallel.expert = 4 (--set parallel.expert=4)"));
    CHECK_THAT(p, has("expert parallelism takes its ranks from the data-parallel ones"));
    // Set in the file, the data size blamed on parallel.expert set on the command line.
    const std::string q = fx.problem(make_deck({{"model.architecture", "\"mixtral\""}, {"parallel.data", "2"}}),
                                     {"parallel.expert=4"});
    CHECK_THAT(q, has("parallel.expert = 4: expected a divisor of parallel.data = 2"));
  }
  SECTION("model.experts a multiple of parallel.expert") {
    const std::string p = fx.problem(mixtral, {"parallel.data=2", "parallel.expert=2", "model.experts=3"});
    CHECK_THAT(p, has("model.experts = 3: expected a multiple of parallel.expert = 2"));
    CHECK_THAT(p, has("whole experts"));
    // The default 8 experts over 3 expert ranks: blamed on the key that was set.
    const std::string q = join(fx.problems(mixtral, {"parallel.data=3", "parallel.expert=3", "training.global_batch=12"}));
    CHECK_THAT(q, has("parallel.expert = 3: expected a divisor of model.experts = 8 (default)"));
  }
}

TEST_CASE("deck: docs/deck-reference.md's key tables, rules and error example are printed from the code; "
          "input/tiny.toml lists every key",
          "[io][deck][docs]") {
  const fs::path src(TPTRAIN_SOURCE_DIR);
  const fs::path reference_path = src / "docs/deck-reference.md";
  std::string reference = read_text(reference_path);
  const std::string tiny = read_text(src / "input/tiny.toml");
  const std::string readme = read_text(src / "README.md");
  REQUIRE(!reference.empty());
  REQUIRE(!tiny.empty());
  // The README keeps no key table of its own (it would drift): it links to the reference.
  CHECK_THAT(readme, has("docs/deck-reference.md"));
  for (std::string_view section : tptrain::io::deck_sections())
    check_generated(reference_path, reference, table_name(section), key_table(section), "io/deck_keys.cpp's rows");
  CHECK(join(tiny_problems(tiny)) == "");
  // The rules between keys, each with what tptrain says to its example, and the error example.
  std::vector<std::string> rule_problems;
  check_generated(reference_path, reference, "rules between keys", rule_table(rule_problems),
                  "what tptrain says to its examples");
  CHECK(join(rule_problems) == "");
  check_generated(reference_path, reference, "error example", error_example(), "what tptrain says to the example");
  std::string readme_text = readme;
  check_generated(src / "README.md", readme_text, "error example", short_error_example(),
                  "what tptrain says to docs/deck-reference.md's example");

  SECTION("a stale or missing table, and a key missing from input/tiny.toml, are found") {
    auto without = [](const std::string& text, const std::string& row_start) {
      std::string out;
      for (const std::string& l : lines_of(text))
        if (l.rfind(row_start, 0) != 0) out += l + "\n";
      return out;
    };
    const std::string table = key_table("training");
    CHECK_THAT(table, has("| `eval_windows` | integer | `16` | ≥ 1 |"));
    CHECK_THAT(key_table("data"), has("| `train` | string (path) | **required** |"));
    CHECK_THAT(key_table("model"), has("| `ffn_hidden` | integer | `4 * model.hidden` |"));
    CHECK_THAT(key_table("training"), has("| `loss_scale_initial` | number | `2^32` | in (0, 2^64] (at most 2^64) |"));
    const std::string doc = "x\n<!-- generated: " + table_name("training") + " (a test) -->\n" + table +
                            "<!-- end of generated: " + table_name("training") + " -->\ny\n";
    CHECK(generated_problem("doc.md", doc, table_name("training"), table).empty());
    std::string fixed;
    const std::string stale = without(doc, "| `eval_windows` |");
    const std::string p = generated_problem("doc.md", stale, table_name("training"), table, &fixed);
    CHECK_THAT(p, has("doc.md: the table deck keys [training] is not io/deck_keys.cpp's rows"));
    CHECK_THAT(p, has("TPTRAIN_UPDATE_DOCS=1 build/tests/tptrain_tests \"[deck]\""));
    CHECK(fixed == doc);
    CHECK_THAT(generated_problem("doc.md", "no table\n", table_name("run"), key_table("run")),
               has("doc.md has no block \"<!-- generated: deck keys [run] ...-->\""));
    CHECK_THAT(join(tiny_problems(without(tiny, "keep "))),
               has("input/tiny.toml does not list checkpoint.keep"));
  }
}

TEST_CASE("deck: the key table drives defaults, comparison and printing", "[io][deck]") {
  const Deck defaults;
  std::vector<std::string> names;
  for (const DeckKey& k : deck_keys()) {
    INFO(k.name());
    names.push_back(k.name());
    CHECK(tptrain::io::find_deck_key(k.section, k.key) == &k);
    // A default-constructed Deck holds the table's default, in the member's own type.
    tptrain::io::visit_member(defaults, k, [&](const auto& m) {
      using Member = std::decay_t<decltype(m)>;
      std::visit(
          [&](const auto& v) {
            using V = std::decay_t<decltype(v)>;
            if constexpr (std::is_same_v<V, std::int64_t>) {
              CHECK((std::is_integral_v<Member> && !std::is_same_v<Member, bool>));
              if constexpr (std::is_integral_v<Member>) CHECK(static_cast<std::int64_t>(m) == v);
            } else if constexpr (std::is_same_v<V, double>) {
              CHECK(std::is_same_v<Member, double>);
              if constexpr (std::is_same_v<Member, double>) CHECK(m == v);
            } else if constexpr (std::is_same_v<V, bool>) {
              CHECK(std::is_same_v<Member, bool>);
              if constexpr (std::is_same_v<Member, bool>) CHECK(m == v);
            } else if constexpr (std::is_same_v<V, std::string_view>) {
              CHECK((std::is_same_v<Member, std::string> || std::is_same_v<Member, tptrain::io::DataSources>));
              if constexpr (std::is_same_v<Member, std::string>) CHECK(m == v);
              if constexpr (std::is_same_v<Member, tptrain::io::DataSources>) CHECK(m == std::string(v));
            }
          },
          k.default_value);
    });
    // Every key takes part in the comparison.
    Deck changed = defaults;
    tptrain::io::visit_member(changed, k, [](auto& m) {
      using Member = std::decay_t<decltype(m)>;
      if constexpr (std::is_same_v<Member, bool>)
        m = !m;
      else if constexpr (std::is_same_v<Member, std::string>)
        m += "x";
      else if constexpr (std::is_same_v<Member, tptrain::io::DataSources>)
        m.sources.push_back({"x", 1.0});
      else
        m = m + 1;
    });
    CHECK(changed != defaults);
  }
  CHECK(std::set<std::string>(names.begin(), names.end()).size() == names.size());
  CHECK(defaults.model.ffn_width() == 4 * defaults.model.hidden);
  CHECK(defaults.optimizer.min_lr == 3e-4);  // the derived default, lr / 10
  CHECK(defaults.checkpoint.dir == defaults.run.dir + "/checkpoints");

  SECTION("to_json: one line, every key in table order, then ranks") {
    Fixture fx;
    const Deck d = fx.parse(make_deck({{"run.dir", "'a \"quoted\" dir'"}}));
    const std::string json = d.to_json();
    INFO(json);
    CHECK(json.find('\n') == std::string::npos);
    CHECK(json.front() == '{');
    CHECK_THAT(json, matches("\\{\"model\\.architecture\": \"gpt2\", \"model\\.norm\": \"layernorm\", .*\"model\\.layers\": 4, \"model\\.hidden\": 128, .*, "
                             "\"run\\.dir\": \".*a \\\\\"quoted\\\\\" dir\", \"ranks\": 2\\}"));
    CHECK_THAT(json, has("\"optimizer.lr\": 0.003, "));
    CHECK_THAT(json, has("\"checkpoint.resume\": true, "));
    CHECK_THAT(json, has("\"training.precision\": \"fp32\", "));
    std::size_t at = 0;
    for (const std::string& name : names) {
      const auto pos = json.find("\"" + name + "\": ", at);
      INFO(name);
      CHECK(pos != std::string::npos);
      if (pos != std::string::npos) at = pos;
    }
  }
}

// ---- inputs that would never end, names that cannot be opened --------------------------------

TEST_CASE("deck: FIFOs, devices and huge files are refused before they are read",
          "[io][deck][nonregular]") {
  Fixture fx;
  const fs::path fifo_deck = fx.dir.path() / "fifo.toml";
  REQUIRE(::mkfifo(fifo_deck.c_str(), 0600) == 0);
  SECTION("a FIFO as the deck") {
    REQUIRE_THROWS_WITH(load_deck(fifo_deck.string()),
                        has(fifo_deck.string() + ": cannot read deck file: it is not a regular "
                                                 "file (a FIFO)"));
  }
  SECTION("/dev/zero and /dev/urandom as the deck") {
    REQUIRE_THROWS_WITH(load_deck("/dev/zero"),
                        has("/dev/zero: cannot read deck file: it is not a regular file (a "
                            "character device)"));
    REQUIRE_THROWS_WITH(load_deck("/dev/urandom"), has("/dev/urandom: cannot read deck file"));
  }
  SECTION("a FIFO as a data file") {
    REQUIRE(::mkfifo((fx.dir.path() / "pipe.txt").c_str(), 0600) == 0);
    const std::string text = make_deck({{"data.valid", "\"pipe.txt\""}});
    const std::string p = fx.problem(text);
    CHECK_THAT(p, has("deck.toml:" + std::to_string(line_of(text, "data.valid")) +
                      ": data.valid = \"pipe.txt\""));
    CHECK_THAT(p, has(norm(fx.dir.path() / "pipe.txt") + " is not a regular file (a FIFO)"));
    CHECK_THAT(fx.problem(make_deck({{"data.train", "\"/dev/zero\""}})),
               has("/dev/zero is not a regular file (a character device)"));
  }
  SECTION("a FIFO or a device given to TokenDataset::open") {
    REQUIRE(::mkfifo((fx.dir.path() / "pipe.bin").c_str(), 0600) == 0);
    REQUIRE_THROWS_WITH(tptrain::data::TokenDataset::open((fx.dir.path() / "pipe.bin").string(), 256),
                        has("pipe.bin': is not a regular file (a FIFO)"));
    const fs::path dev_link = fx.dir.path() / "zero.txt";
    fs::create_symlink("/dev/zero", dev_link);
    REQUIRE_THROWS_WITH(tptrain::data::TokenDataset::open(dev_link.string(), 256),
                        has("zero.txt': is not a regular file (a character device)"));
  }
  SECTION("a deck over the size limit, by its size") {
    const std::string big(tptrain::io::kMaxDeckBytes + 1, '#');
    const fs::path file = fx.dir.write("big.toml", big);
    REQUIRE_THROWS_WITH(load_deck(file.string()),
                        has("big.toml: cannot read deck file: it is 1048577 bytes, more than the "
                            "limit of 1048576 bytes"));
    const fs::path at_limit = fx.dir.write(
        "at_limit.toml", "[data]\ntrain = \"train.txt\"\n" +
                             std::string(tptrain::io::kMaxDeckBytes - 27, '#'));
    CHECK(load_deck(at_limit.string()).data.train == norm(fx.dir.path() / "train.txt"));
  }
}

TEST_CASE("deck: a path that cannot be accessed is reported with the reason", "[io][deck]") {
  Fixture fx;
  SECTION("a name too long (ENAMETOOLONG), shortened in the message") {
    const std::string long_path = fx.dir.str() + "/" + std::string(5000, 'a') + ".toml";
    try {
      load_deck(long_path);
      FAIL("no DeckError");
    } catch (const DeckError& e) {
      const std::string p = e.problems().at(0);
      CHECK_THAT(p, has("cannot read deck file: it cannot be accessed: the file name is too long "
                        "(ENAMETOOLONG)"));
      CHECK_THAT(p, !has("does not exist"));
      CHECK(p.size() < 500);
    }
  }
  SECTION("a component that is not a directory (ENOTDIR)") {
    REQUIRE_THROWS_WITH(load_deck((fx.dir.path() / "train.txt/deck.toml").string()),
                        has("not a directory (ENOTDIR)"));
    CHECK_THAT(fx.problem(make_deck({{"data.train", "\"train.txt/x.txt\""}})),
               has("train.txt/x.txt cannot be accessed: a component of the path is not a "
                   "directory (ENOTDIR)"));
  }
  SECTION("permission denied (EACCES)") {
    if (::geteuid() == 0) return;  // root reads everything
    const fs::path closed = fx.dir.path() / "closed";
    fs::create_directories(closed);
    fx.dir.write("closed/deck.toml", "[data]\ntrain = \"../train.txt\"\n");
    fs::permissions(closed, fs::perms::none);
    CHECK_THROWS_WITH(load_deck((closed / "deck.toml").string()),
                      has("permission denied (EACCES)"));
    fs::permissions(closed, fs::perms::owner_all);
  }
  SECTION("the reasons, one per errno") {
    CHECK(tptrain::io::errno_problem(ENOENT) == "does not exist");
    CHECK_THAT(tptrain::io::errno_problem(EACCES), has("permission denied (EACCES)"));
    CHECK_THAT(tptrain::io::errno_problem(ENOTDIR), has("not a directory (ENOTDIR)"));
    CHECK_THAT(tptrain::io::errno_problem(ENAMETOOLONG), has("too long (ENAMETOOLONG)"));
  }
}

TEST_CASE("deck: a path with a NUL character is refused, naming the key", "[io][deck]") {
  Fixture fx;
  const std::string text = make_deck({{"data.train", "\"train.txt\\u0000.csv\""}});
  const std::string p = fx.problem(text);
  CHECK_THAT(p, has("deck.toml:" + std::to_string(line_of(text, "data.train")) +
                    ": data.train = \"train.txt\\u0000.csv\": expected a path without NUL "
                    "characters"));
  CHECK_THAT(fx.problem(make_deck({{"run.dir", "\"runs\\u0000x\""}})),
             has("run.dir = \"runs\\u0000x\": expected a path without NUL characters"));
}

TEST_CASE("deck: --set numbers that no TOML number holds are out of range, not strings",
          "[io][deck]") {
  Fixture fx;
  const std::string text = make_deck();
  const std::string p = fx.problem(text, {"optimizer.lr=1e999"});
  CHECK_THAT(p, has("--set optimizer.lr=1e999: optimizer.lr = 1e999: expected a finite number > 0 "
                    "(1e999 is out of range: not a finite 64-bit floating-point number)"));
  CHECK_THAT(p, !has("string"));
  CHECK_THAT(fx.problem(text, {"model.layers=99999999999999999999"}),
             has("model.layers = 99999999999999999999: expected an integer >= 1 "
                 "(99999999999999999999 is out of the range of a 64-bit integer)"));
  // Text that is no number at all is still a string.
  CHECK_THAT(fx.problem(text, {"optimizer.lr=fast"}), has("(got a string)"));
  // A later --set that TOML can read replaces it.
  CHECK(fx.parse(text, {"optimizer.lr=1e999", "optimizer.lr=1e-3"}).optimizer.lr == 1e-3);
}

// A new user's first experiment, --set model.heads=H, works on every shipped deck without naming
// a key they never set: a gpt2 deck leaves model.kv_heads out (its default is model.heads), and a
// llama or qwen2 deck's key/value heads are its own design (H is then a multiple of them).
TEST_CASE("deck: --set model.heads works on every shipped deck", "[io][deck]") {
  const fs::path input = fs::path(TPTRAIN_SOURCE_DIR) / "input";
  std::vector<fs::path> decks;
  for (const fs::path& dir : {input, input / "bench"})
    for (const auto& entry : fs::directory_iterator(dir))
      if (entry.path().extension() == ".toml") decks.push_back(entry.path());
  REQUIRE(decks.size() >= 15);
  for (const fs::path& path : decks) {
    DYNAMIC_SECTION(path.filename().string()) {
      const Deck d = load_deck(path.string(), {}, DataFiles::may_be_absent);
      const bool rotary = d.model.position == "rope";
      bool kv_in_file = false;
      for (const std::string& l : lines_of(read_text(path))) kv_in_file = kv_in_file || l.rfind("kv_heads", 0) == 0;
      if (d.model.architecture == "gpt2") CHECK_FALSE(kv_in_file);
      const auto fits = [&](int h) {
        return h % d.parallel.tensor == 0 && d.model.hidden % h == 0 && (!kv_in_file || h % d.model.kv_heads == 0) &&
               (!rotary || d.model.hidden / h % 2 == 0);
      };
      int heads = 0;
      for (int h = d.model.heads - 1; h >= 1 && heads == 0; --h)
        if (fits(h)) heads = h;
      for (int h = d.model.heads + 1; heads == 0 && h <= d.model.hidden; ++h)
        if (fits(h)) heads = h;
      REQUIRE(heads > 0);
      INFO("--set model.heads=" << heads);
      std::vector<std::string> warnings;
      CHECK(load_deck(path.string(), {"model.heads=" + std::to_string(heads)}, DataFiles::may_be_absent, &warnings)
                .model.heads == heads);
    }
  }
}

TEST_CASE("deck: document masks and restarted positions need an end-of-text token", "[io][deck]") {
  Fixture fx;
  // The test deck's tokenizer is "bytes": no <|endoftext|>.
  CHECK_THAT(fx.problem(make_deck({{"data.document_mask", "true"}})),
             has("data.document_mask = true: expected false with data.tokenizer = \"bytes\""));
  CHECK_THAT(fx.problem(make_deck({{"data.reset_positions", "true"}})),
             has("data.reset_positions = true: expected false with data.tokenizer = \"bytes\""));
  // With GPT-2's tokens the keys are accepted, with either attention core.
  Changes gpt2{{"data.tokenizer", "\"gpt2\""}, {"model.vocab_size", "50257"}, {"data.document_mask", "true"}};
  const Deck d = tptrain::io::parse_deck(make_deck(gpt2), "deck.toml", fx.dir.str(), {}, DataFiles::ignored);
  CHECK(d.data.document_mask);
  gpt2.push_back({"training.attention", "\"batched\""});
  CHECK(tptrain::io::parse_deck(make_deck(gpt2), "deck.toml", fx.dir.str(), {}, DataFiles::ignored).data.document_mask);
}

TEST_CASE("deck: data.train and data.valid take weighted blends", "[io][deck][blend]") {
  Fixture fx;
  fx.dir.write("b.txt", "another dataset\n");
  const std::string blend = "[{path = \"train.txt\", weight = 0.7}, {path = \"b.txt\", weight = 3}]";
  const Deck d = fx.parse("[data]\ntrain = " + blend + "\nvalid = [{path = \"valid.txt\", weight = 2}]\n");
  REQUIRE(d.data.train.size() == 2);
  CHECK(d.data.train.is_blend());
  CHECK(d.data.train.sources[0].path == norm(fx.dir.path() / "train.txt"));
  CHECK(d.data.train.sources[0].weight == 0.7);
  CHECK(d.data.train.sources[1].path == norm(fx.dir.path() / "b.txt"));
  CHECK(d.data.train.sources[1].weight == 3.0);
  // A one-entry blend is its path, weight 1.
  CHECK(d.data.valid == norm(fx.dir.path() / "valid.txt"));
  CHECK_FALSE(d.data.valid.is_blend());
  // [[data.train]] tables, and --set with an inline array, read the same.
  const Deck tables = fx.parse(
      "[[data.train]]\npath = \"train.txt\"\nweight = 0.7\n[[data.train]]\npath = \"b.txt\"\nweight = 3\n"
      "[data]\nvalid = \"valid.txt\"\n");
  CHECK(tables.data.train == d.data.train);
  const Deck set = fx.parse("[data]\ntrain = \"valid.txt\"\n",
                            {"data.train=[{path = \"" + (fx.dir.path() / "train.txt").string() +
                             "\", weight = 0.7}, {path = \"" + (fx.dir.path() / "b.txt").string() + "\", weight = 3}]"});
  CHECK(set.data.train == d.data.train);
  // The resolved deck prints the blend and reads back to it; JSON has it as a list of objects.
  CHECK_THAT(d.to_toml(), Catch::Contains("train = [{path = \"" + norm(fx.dir.path() / "train.txt") +
                                          "\", weight = 0.7}, {path = "));
  CHECK(fx.parse(d.to_toml()) == d);
  CHECK_THAT(d.to_json(), Catch::Contains("\"data.train\": [{\"path\": \"" + norm(fx.dir.path() / "train.txt") +
                                          "\", \"weight\": 0.7}, {\"path\": "));
}

TEST_CASE("deck: bad blends are refused naming the entry", "[io][deck][blend]") {
  Fixture fx;
  const auto with = [&](const std::string& value) { return fx.problems("[data]\ntrain = " + value + "\n"); };
  const auto has_one = [&](const std::vector<std::string>& p, const std::string& text) {
    INFO(join(p));
    CHECK(std::any_of(p.begin(), p.end(), [&](const std::string& s) { return s.find(text) != std::string::npos; }));
  };
  has_one(with("[]"), "deck.toml:2: data.train = []: expected a path, or a blend of at least one");
  has_one(with("[{path = \"train.txt\", weight = 0}]"), "data.train[0].weight = 0: expected a finite weight > 0");
  has_one(with("[{path = \"train.txt\", weight = -0.5}]"), "data.train[0].weight = -0.5: expected a finite weight > 0");
  has_one(with("[{path = \"train.txt\", weight = 1}, {path = \"valid.txt\", weight = nan}]"),
          "data.train[1].weight = nan: expected a finite weight > 0");
  has_one(with("[{path = \"train.txt\", weight = inf}]"), "data.train[0].weight = inf: expected a finite weight > 0");
  has_one(with("[{path = \"train.txt\", weight = \"1\"}]"), "data.train[0].weight = \"1\": expected a number > 0");
  has_one(with("[{path = \"train.txt\"}]"), "data.train[0] = {...}: expected a table with a weight");
  has_one(with("[{weight = 1}]"), "data.train[0] = {...}: expected a table with a path");
  has_one(with("[{path = \"train.txt\", weight = 1, wieght = 2}]"), "data.train[0].wieght = 2: expected a key of a blend entry");
  has_one(with("[\"train.txt\"]"), "data.train[0] = \"train.txt\": expected a table {path = \"...\", weight = ...}");
  has_one(with("[{path = \"train.txt\", weight = 1}, {path = \"missing.txt\", weight = 1}]"),
          "data.train[1].path = \"missing.txt\": expected an existing, readable");
  has_one(with("[{path = \"\", weight = 1}]"), "data.train[0].path = \"\": expected a non-empty path");
  // Validation data inside a blend's training files is refused as for one path.
  has_one(fx.problems("[data]\ntrain = [{path = \"train.txt\", weight = 1}, {path = \"valid.txt\", weight = 1}]\n"
                      "valid = \"valid.txt\"\n"),
          "data.valid = \"valid.txt\": expected validation data apart from the training data");
}
