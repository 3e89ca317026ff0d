// `tptrain plan` at the edges of its ranges: counts that would wrap 64 bits are refused naming
// the key, figures beyond a double are null in the JSON and said in the report, and the closed
// forms that make plan time independent of the layers and the GPUs equal the per-stage sums they
// replace. (Timing itself: tests/cli_plan_tests.cmake.)
#include "catch.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "src/model/gpt_model.hpp"
#include "src/plan/activation_memory.hpp"
#include "src/plan/communication.hpp"
#include "src/plan/count.hpp"
#include "src/plan/parameter_count.hpp"
#include "src/plan/plan.hpp"
#include "tests/test_helpers.hpp"

using namespace tptrain;
using namespace tptrain::plan;

namespace {

Config tiny(int layers, int pipeline, int tensor = 2) {
  Config c;
  c.shape.layers = layers;
  c.shape.hidden = 64;
  c.shape.heads = 4;
  c.shape.ffn_hidden = 256;
  c.shape.seq_length = 64;
  c.shape.vocab_size = 250;
  c.shape.tensor = tensor;
  c.pipeline = pipeline;
  c.data = 1;
  c.global_batch = 8;
  c.micro_batch = 2;
  return c;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// A tensor's elements on one tensor-parallel rank, from its name as the model's layers split it
// (kept here by hand, independently of the block descriptor the plan reads).
std::int64_t local_elements(const std::string& name, const std::vector<std::int64_t>& logical,
                            const model::GptShape& s) {
  std::int64_t size = 1;
  for (const std::int64_t d : logical) size *= d;
  if (name == "embedding/word") return s.local_vocab() * logical.at(1);  // padded rows
  for (const char* split : {"/attn/qkv/weight", "/attn/qkv/bias", "/mlp/fc/weight", "/mlp/fc/bias",
                            "/attn/proj/weight", "/mlp/proj/weight"})
    if (ends_with(name, split)) return size / s.tensor;
  return size;  // the position embedding, LayerNorms, row-parallel biases: replicated
}

// Each stage's parameters by a pass over every tensor of the model: what stage_parameters did
// before its closed form.
std::vector<std::int64_t> stage_parameters_by_tensor(const model::GptShape& s, int stages) {
  std::vector<std::int64_t> n(static_cast<std::size_t>(stages), 0);
  const int per_stage = s.layers / stages;
  for (const model::LogicalTensor& t : model::logical_tensors(s)) {
    const std::int64_t local = local_elements(t.name, t.shape, s);
    if (t.name.rfind("embedding/", 0) == 0) {
      n[0] += local;
      if (t.name == "embedding/word" && stages > 1) n[static_cast<std::size_t>(stages - 1)] += local;
    } else if (t.name.rfind("ln_f/", 0) == 0) {
      n[static_cast<std::size_t>(stages - 1)] += local;
    } else {
      n[static_cast<std::size_t>(std::stoi(t.name.substr(7)) / per_stage)] += local;
    }
  }
  return n;
}

std::string refusal(const Config& c, const Hardware& hw = {}) {
  try {
    (void)make_plan(c, hw, 1e9);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("plan::Count: sums and products beyond 2^63 - 1 throw instead of wrapping", "[plan]") {
  const Count big = std::numeric_limits<std::int64_t>::max();
  const Count least = std::numeric_limits<std::int64_t>::min();
  CHECK(Count(3) * 4 + 2 - Count(5) == 9);
  CHECK(Count(-3) * -4 == 12);
  CHECK(Count(-3) * 4 == -12);
  CHECK(Count(3) * -4 == -12);
  CHECK(Count(0) * big == 0);
  CHECK(big * -1 == -big.value());
  CHECK(Count(7) / 2 == 3);
  CHECK_THROWS_AS(least * -1, Overflow);
  CHECK_THROWS_AS(Count(-1) * least, Overflow);
  CHECK_THROWS_AS(least / -1, Overflow);
  CHECK_THROWS_AS(Count(-2) * (big / 2 + 2), Overflow);
  CHECK_THROWS_AS(least - 1, Overflow);
  CHECK_THROWS_AS(big + 1, Overflow);
  CHECK_THROWS_AS(1 + big, Overflow);
  CHECK_THROWS_AS(Count(-2) - big, Overflow);
  CHECK_THROWS_AS(big * 2, Overflow);
  CHECK_THROWS_AS(Count(500000000) * 500000000 * 12 * 64, Overflow);
  CHECK_THROWS_AS(Count(std::uint64_t(1) << 63), Overflow);
  Count n = 2;
  CHECK_THROWS_AS(n *= big, Overflow);
}

TEST_CASE("plan: the stages' parameters in closed form equal the sum over every tensor", "[plan]") {
  for (const int tensor : {1, 2, 4})
    for (const int layers : {1, 2, 6, 12})
      for (const int stages : {1, 2, 3, 4, 6, 12}) {
        if (layers % stages != 0) continue;
        const Config c = tiny(layers, stages, tensor);
        INFO("tensor " << tensor << ", " << layers << " layers over " << stages << " stages");
        const StageParameters closed = stage_parameters(c.shape, stages);
        const std::vector<std::int64_t> summed = stage_parameters_by_tensor(c.shape, stages);
        for (int p = 0; p < stages; ++p) CHECK(closed.of(p) == summed[static_cast<std::size_t>(p)]);
        CHECK_THROWS_AS(closed.of(stages), std::out_of_range);
        if (tensor == 1) {
          std::int64_t all = 0;
          for (const model::LogicalTensor& t : model::logical_tensors(c.shape)) {
            std::int64_t size = 1;
            for (const std::int64_t d : t.shape) size *= d;
            all += size;
          }
          CHECK(exact_parameters(c.shape) == all);
        }
      }
}

TEST_CASE("plan: the most loaded rank and the busiest communication, from three stages, are those of all stages",
          "[plan]") {
  for (const int stages : {1, 2, 3, 4, 8})
    for (const int global_batch : {2, 4, 8, 32})
      for (const Recompute r : {Recompute::none, Recompute::full}) {
        Config c = tiny(24, stages);
        c.global_batch = global_batch;  // micro-batches 1 to 16: fewer and more than the stages
        c.recompute = r;
        INFO(stages << " stages, " << c.micro_batches() << " micro-batches");
        const StageParameters n = stage_parameters(c.shape, stages);
        RankMemory most = rank_memory(c, n, 0);
        StepCommunication busiest;
        for (int p = 0; p < stages; ++p) {
          const RankMemory m = rank_memory(c, n, p);
          if (m.total() > most.total()) most = m;
          const StepCommunication s = stage_communication(c, p, n.of(p));
          busiest.tensor = std::max(busiest.tensor, s.tensor);
          busiest.pipeline = std::max(busiest.pipeline, s.pipeline);
          busiest.data = std::max(busiest.data, s.data);
          busiest.embedding = std::max(busiest.embedding, s.embedding);
        }
        const RankMemory planned = most_loaded_rank(c);
        CHECK(planned.stage == most.stage);
        CHECK(planned.total() == most.total());
        const StepCommunication b = busiest_communication(c, n);
        CHECK(b.tensor == busiest.tensor);
        CHECK(b.pipeline == busiest.pipeline);
        CHECK(b.data == busiest.data);
        CHECK(b.embedding == busiest.embedding);
      }
}

TEST_CASE("plan: 2,000,000 layers are counted exactly without a pass over them", "[plan]") {
  const Config one = tiny(1, 1), two = tiny(2, 1);
  const std::int64_t block = exact_parameters(two.shape) - exact_parameters(one.shape);
  Config c = tiny(2000000, 1);
  const Plan p = make_plan(c, Hardware{}, 1e9);
  CHECK(p.parameters == exact_parameters(one.shape) + (2000000 - 1) * block);
  CHECK(p.memory.layers == 2000000);
}

TEST_CASE("plan: counts beyond 2^63 - 1 are refused, naming the key, never wrapped", "[plan]") {
  // The issue's two decks: 6.4e19 parameters; 4.1e18 parameters whose fp32 bytes wrap.
  Config c = tiny(64, 1);
  c.shape.hidden = 500000000;
  c.shape.heads = 2;
  c.shape.ffn_hidden = 2;
  std::string why = refusal(c);
  CHECK_THAT(why, test::contains("model.hidden = 500000000 is too large: the parameter count"));
  CHECK_THAT(why, test::contains("model.layers = 64"));
  CHECK_THAT(why, test::contains("exceeds 2^63 - 1 = 9223372036854775807"));
  c.shape.layers = 2;
  c.shape.hidden = 715827882;
  why = refusal(c);
  CHECK_THAT(why, test::contains("model.hidden = 715827882 is too large: the byte count of a rank"));
  // The batched core's attention scores of a long sequence: micro_batch·(heads/tensor)·seq²·4 bytes.
  c = tiny(2, 1);
  c.shape.flash_attention = false;
  c.shape.seq_length = 2147483646;
  c.shape.heads = 2;
  c.shape.hidden = 1024;
  c.micro_batch = 1;
  c.global_batch = 1;
  why = refusal(c);
  CHECK_THAT(why, test::contains("model.seq_length = 2147483646 is too large: the byte count of"));
  CHECK_THAT(why, test::contains("model.heads = 2"));
}

TEST_CASE("plan: a figure beyond a double is null in the JSON, and the report says why", "[plan][json]") {
  Hardware hw;
  hw.gpu_memory_gib = 1e300;
  Plan p = make_plan(tiny(2, 1), hw, 1e9);
  CHECK_THAT(report_json(p), test::contains(R"("gpu_memory_bytes": null, )"));
  CHECK_THAT(report(p), test::contains("note: gpu_memory_bytes = inf: beyond the range of a double"));
  hw = Hardware{};
  hw.tokens = 1e308;
  hw.peak_tflops = 1e-300;
  p = make_plan(tiny(2, 1), hw, 1e9);
  const std::string json = report_json(p);
  CHECK_THAT(json, test::contains(R"("training_days": null, "training_days_eq4": null, "total_flops_6nt": null)"));
  CHECK(json.find(": inf") == std::string::npos);
  CHECK(json.find("nan,") == std::string::npos);
  CHECK_THAT(report(p), test::contains("note: training_days = inf, training_days_eq4 = inf, total_flops_6nt = inf"));
  // Suggestions too: 0 x inf days is NaN, written null (and sorted last, not breaking the sort).
  hw.tokens = 5e-324;      // 0 iterations of inf seconds
  hw.peak_tflops = 5e-324;  // 5e-312 FLOP/s: a step takes inf seconds
  hw.gpus = 4;
  {
    const test::FloatingPointTrapsOff allowed;  // a user's extreme numbers: x / 0 = inf, 0 x inf = NaN
    p = make_plan(tiny(2, 1), hw, 1e9);
  }
  REQUIRE_FALSE(p.suggestions.empty());
  CHECK_THAT(report_json(p), test::contains(R"("training_days": null})"));
}

TEST_CASE("plan: the layout search takes bounded time for any node size and layer count", "[plan]") {
  Hardware hw;
  hw.gpus = 4;
  hw.gpus_per_node = std::numeric_limits<int>::max();  // a prime: tensor 1 only
  const Plan p = make_plan(tiny(2, 1), hw, 1e9);
  CHECK_FALSE(p.ok());
  CHECK_FALSE(p.suggestions.empty());
  // 720720 = 2^4·3^2·5·7·11·13 heads and GPUs per node (240 divisors) and 720 layers (30): far
  // more (tensor, pipeline) pairs than the search tries; it still finds layouts, the deck's neighbours.
  Config c = tiny(720, 1);
  c.shape.heads = 720720;
  c.shape.hidden = 720720;
  c.shape.ffn_hidden = 720720;
  c.shape.seq_length = 2;
  c.global_batch = 720720;
  c.micro_batch = 1;
  hw.gpus = 720720;
  hw.gpus_per_node = 720720;
  hw.gpu_memory_gib = 1e6;
  const Plan q = make_plan(c, hw, 1e9);
  CHECK_FALSE(q.ok());  // 1 GPU given 720720
  CHECK_FALSE(q.suggestions.empty());
}
