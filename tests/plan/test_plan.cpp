// `tptrain plan`'s formulas against published numbers (Narayanan et al. 2021 Table 1, eq. 3 and
// eq. 4; Korthikanti et al. 2022 Table 2), against quantities computed another way (the model's
// tensor list, the buffers a TrainingRun allocates), and the refusals of the shipped decks.
#include "catch.hpp"

#include <mpi.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "io/deck.hpp"
#include "src/model/gpt_model.hpp"
#include "src/plan/activation_memory.hpp"
#include "src/plan/communication.hpp"
#include "src/plan/flops.hpp"
#include "src/plan/korthikanti.hpp"
#include "src/plan/parameter_count.hpp"
#include "src/plan/parameter_memory.hpp"
#include "src/plan/plan.hpp"
#include "src/util/memory_ledger.hpp"
#include "tests/mpi_test_util.hpp"
#include "tests/plan/plan_test_util.hpp"
#include "tests/train/train_test_util.hpp"

using namespace tptrain;
using namespace tptrain::plan;

namespace {

// Narayanan et al. 2021, Table 1: heads, hidden, layers and the published parameter count in
// billions (printed to one decimal); V = 51200, s = 2048.
struct Table1Row {
  int heads, hidden, layers;
  double published_billions;
};
const std::vector<Table1Row> kTable1{{24, 2304, 24, 1.7},     {32, 3072, 30, 3.6},      {32, 4096, 36, 7.5},
                                     {48, 6144, 40, 18.4},    {64, 8192, 48, 39.1},     {80, 10240, 60, 76.1},
                                     {96, 12288, 80, 145.6},  {128, 16384, 96, 310.1},  {128, 20480, 105, 529.6},
                                     {160, 25600, 128, 1008.0}};

model::GptShape table1_shape(const Table1Row& r, int tensor = 1) {
  model::GptShape s;
  s.layers = r.layers;
  s.hidden = r.hidden;
  s.heads = r.heads;
  s.ffn_hidden = 4 * r.hidden;
  s.seq_length = 2048;
  s.vocab_size = 51200;
  s.tensor = tensor;
  return s;
}

// GPT-3 175B (Brown et al. 2020) as Narayanan et al. 2021 section 5.1 train it.
Config gpt3_175b() {
  Config c;
  c.shape.layers = 96;
  c.shape.hidden = 12288;
  c.shape.heads = 96;
  c.shape.ffn_hidden = 4 * 12288;
  c.shape.seq_length = 2048;
  c.shape.vocab_size = 51200;
  c.shape.tensor = 8;
  c.pipeline = 16;
  c.data = 8;
  c.global_batch = 1536;
  c.micro_batch = 1;
  c.precision = "bf16";
  c.recompute = Recompute::full;
  return c;
}

// A small configuration whose buffers are easy to count by hand.
// flash = false: the batched attention core, whose S×S buffers the paper's inventory counts.
Config small(int tensor, bool sp, Recompute r, const std::string& precision = "fp32", bool flash = false) {
  Config c;
  c.shape.flash_attention = flash;
  c.shape.layers = 4;
  c.shape.hidden = 32;
  c.shape.heads = 4;
  c.shape.ffn_hidden = 64;
  c.shape.seq_length = 16;
  c.shape.vocab_size = 250;
  c.shape.vocab_pad_multiple = 8;
  c.shape.tensor = tensor;
  c.pipeline = 2;
  c.data = 2;
  c.global_batch = 16;
  c.micro_batch = 2;
  c.sequence_parallel = sp;
  c.recompute = r;
  c.precision = precision;
  return c;
}

std::string input_deck(const std::string& name) { return std::string(TPTRAIN_SOURCE_DIR) + "/input/" + name; }

io::Deck load_cluster_deck(const std::string& name, const std::vector<std::string>& sets = {}) {
  return io::load_deck(input_deck(name), sets, io::DataFiles::may_be_absent);
}

std::string join(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& l : lines) out += l + "\n";
  return out;
}

bool mentions(const std::vector<std::string>& lines, const std::string& what) {
  for (const std::string& l : lines)
    if (l.find(what) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("plan: eq. 2 reproduces the ten parameter counts of Narayanan et al. 2021 Table 1", "[plan]") {
  for (const Table1Row& r : kTable1) {
    INFO(r.published_billions << " B: " << r.heads << " heads, hidden " << r.hidden << ", " << r.layers << " layers");
    const double eq2 = narayanan_parameters(r.layers, r.hidden, 51200, 2048);
    const double published = r.published_billions * 1e9;
    // The table prints one decimal: eq. 2 rounds to it in every row (1.652 B -> 1.7, 3.562 B -> 3.6) ...
    CHECK(std::abs(eq2 - published) <= 0.05e9);
    // ... and is within 1 % wherever one decimal can say 1 % (every row but 1.7 B and 3.6 B, where the
    // rounding alone is 2.8 % and 1.05 %).
    if (0.05e9 / published < 0.01) CHECK(std::abs(eq2 - published) / published < 0.01);
    // The exact count of tptrain's tensors is eq. 2 plus the final LayerNorm's 2h.
    CHECK(exact_parameters(table1_shape(r)) == static_cast<std::int64_t>(std::llround(eq2)) + 2 * r.hidden);
  }
}

TEST_CASE("plan: GPT-3 175B on 1024 A100 at 140 TFLOP/s trains 300B tokens in about 34 days", "[plan]") {
  // Narayanan et al. 2021 section 5.1: 8TP/(nX) with P = 175e9, T = 300e9, n = 1024, X = 140e12.
  const double published = narayanan_training_seconds(300e9, 175e9, 1024, 140e12, true) / 86400;
  CHECK(published == Approx(8 * 300e9 * 175e9 / (1024 * 140e12) / 86400));
  CHECK(published > 33.5);
  CHECK(published < 34.5);
  CHECK(six_n_t(175e9, 300e9) == Approx(3.15e23));
  // The same run from tptrain's exact count and eq. 3 (which adds the attention and logit terms),
  // its time simulated on the default machine (a DGX A100 80 GB) with the batched attention core
  // Megatron ran in 2021 (costed as the batched GEMMs it is): within 15 % of the published 140
  // TFLOP/s per GPU (Narayanan et al. 2021 Table 1, 1024 GPUs, full recomputation;
  // docs/planning.md, "Validation").
  Config c = gpt3_175b();
  c.set_context(1);
  c.attention = "batched";
  c.shape.flash_attention = false;
  Hardware hw;
  const Plan p = make_plan(c, hw, 300e9);
  CHECK(p.parameters == Approx(174.6e9).epsilon(0.001));
  CHECK(p.total_flops_6nt == Approx(3.14e23).epsilon(0.002));  // the seed's 6·N·T figure
  CHECK(p.achieved_flops == Approx(140e12).epsilon(0.15));
  // Eq. 4 at the simulated speed: 8TP/(nX) against the simulated days, eq. 3's s/(6h) and
  // V/(16lh) terms 3 % apart.
  CHECK(p.training_days == Approx(p.training_days_eq4).epsilon(0.04));
  CHECK(p.flops == Approx(p.flops_eq3).epsilon(1e-12));
  CHECK(p.fits);
  CHECK(p.ok());
  CHECK(p.bubble == Approx(15.0 / 192));
}

TEST_CASE("plan: FLOPs per iteration are eq. 3 with full recomputation and its parts without", "[plan]") {
  for (const Table1Row& r : kTable1) {
    Config c;
    c.shape = table1_shape(r, 8);
    c.global_batch = 512;
    c.micro_batch = 1;
    const double B = c.global_batch, s = 2048, h = r.hidden, l = r.layers, V = 51200;
    CHECK(flops_per_iteration(c, Recompute::full) ==
          Approx(narayanan_flops_per_iteration(B, s, l, h, V)).epsilon(1e-12));
    // Without recomputation the blocks run 3 passes instead of 4 (eq. 3's 72 in place of 96); the
    // logits, never recomputed, stay 6BshV.
    CHECK(flops_per_iteration(c, Recompute::none) ==
          Approx(72 * B * s * l * h * h * (1 + s / (6 * h)) + 6 * B * s * h * V).epsilon(1e-12));
    // Selective recomputation re-runs the attention core: QKᵀ and P·V, 2Bs²h each per layer.
    CHECK(flops_per_iteration(c, Recompute::selective) - flops_per_iteration(c, Recompute::none) ==
          Approx(l * 4 * B * s * s * h).epsilon(1e-9));
  }
  // The block's GEMMs counted from the model's own tensor list: 2 FLOPs per weight element and token.
  model::GptShape s = table1_shape(kTable1[0]);
  s.ffn_hidden = 3 * s.hidden;  // any ffn width
  s.layers = 1;
  double weights = 0;
  for (const model::LogicalTensor& t : model::logical_tensors(s))
    if (t.shape.size() == 2 && t.name.rfind("layers/", 0) == 0) weights += double(t.shape[0]) * double(t.shape[1]);
  const double B = 3, S = s.seq_length;
  CHECK(block_forward_flops(B, s) == Approx(2 * B * S * weights + 4 * B * S * S * s.hidden));
}

TEST_CASE("plan: Korthikanti et al. 2022 Table 2 rebuilt from their section 4.1 inventory", "[plan]") {
  struct Shape {
    double s, b, h, a, t;
  };
  // GPT-3 175B, Megatron-Turing 530B and 1T (their Table 3) and a small one with t = 1.
  for (const Shape& x : {Shape{2048, 1, 12288, 96, 8}, Shape{2048, 1, 20480, 128, 8}, Shape{2048, 1, 25600, 160, 8},
                         Shape{128, 4, 256, 8, 1}, Shape{1024, 2, 768, 12, 4}}) {
    INFO("s " << x.s << " b " << x.b << " h " << x.h << " a " << x.a << " t " << x.t);
    for (const KorthikantiCase k :
         {KorthikantiCase::no_parallelism, KorthikantiCase::tensor, KorthikantiCase::tensor_sequence,
          KorthikantiCase::tensor_selective, KorthikantiCase::tensor_sequence_selective,
          KorthikantiCase::full_recompute}) {
      INFO(korthikanti_case_name(k));
      CHECK(korthikanti_from_inventory(k, x.s, x.b, x.h, x.a, x.t) ==
            Approx(korthikanti_table2(k, x.s, x.b, x.h, x.a, x.t)).epsilon(1e-12));
    }
  }
  // Section 4.1's totals: attention 11sbh + 5as²b, MLP 19sbh, LayerNorms 4sbh.
  double sbh = 0, scores = 0;
  for (const KorthikantiTensor& x : korthikanti_inventory()) {
    sbh += x.sbh_coefficient;
    scores += x.score_coefficient;
  }
  CHECK(sbh == 34);
  CHECK(scores == 5);
  // The paper's headline for GPT-3 175B: sequence parallelism with selective recomputation keeps
  // 34/t sbh of the 10 + 24/t + 5as/(ht) of tensor parallelism alone (about 5x less).
  const double tp = korthikanti_table2(KorthikantiCase::tensor, 2048, 1, 12288, 96, 8);
  const double both = korthikanti_table2(KorthikantiCase::tensor_sequence_selective, 2048, 1, 12288, 96, 8);
  CHECK(tp / both > 4.5);
  CHECK(tp / both < 6.0);
}

TEST_CASE("plan: tptrain's activation inventory, buffer by buffer", "[plan]") {
  // b 2, s 16, h 32, f 64, a 4, V 250; N = 32 tokens.
  const std::int64_t N = 32, h = 32, f = 64, b = 2, s = 16, a = 4;
  for (const std::string precision : {"fp32", "bf16"}) {
    const std::int64_t e = precision == "fp32" ? 4 : 2;
    for (const int t : {1, 2, 4}) {
      INFO(precision << " tensor " << t);
      const std::int64_t scores = b * (a / t) * s * s * e;
      const auto kept = [&](std::int64_t n) {  // n: tokens of the replicated (or sequence-split) tensors
        return 4 * n * h * e + 2 * 2 * n * 4                               // x, ln_1, x1, ln_2; mean and rstd
               + N * (3 * h / t) * e + N * (a / t) * 4 + N * (h / t) * e  // qkv, lse, context
               + 2 * N * (f / t) * e;                                      // fc, GELU sigmoid
      };
      CHECK(total_bytes(layer_activations(small(t, false, Recompute::none, precision))) == kept(N) + scores);
      CHECK(total_bytes(layer_activations(small(t, false, Recompute::selective, precision))) == kept(N));
      CHECK(total_bytes(layer_activations(small(t, true, Recompute::selective, precision))) == kept(N / t));
      CHECK(total_bytes(layer_activations(small(t, true, Recompute::none, precision))) == kept(N / t) + scores);
      // Flash attention keeps no scores: recompute = none keeps what selective keeps.
      CHECK(total_bytes(layer_activations(small(t, false, Recompute::none, precision, true))) == kept(N));
      CHECK(total_bytes(layer_activations(small(t, true, Recompute::none, precision, true))) == kept(N / t));
      const Config full = small(t, true, Recompute::full, precision);
      CHECK(total_bytes(layer_activations(full)) == (N / t) * h * e);
      CHECK(total_bytes(recompute_working_set(full)) == kept(N / t) - (N / t) * h * e);
      // A stage keeps its layers' activations and its output for each micro-batch in flight, the
      // working set once.
      CHECK(stage_activation_bytes(full, 2, 3) == 3 * 3 * (N / t) * h * e + kept(N / t) - (N / t) * h * e);
      // The loss head: ln_f, one buffer of logits over the padded vocabulary (the gradient is
      // written over them), 4 fp32 vectors.
      const std::int64_t vocab_padded = (250 + 8 * t - 1) / (8 * t) * (8 * t);  // vocab_pad_multiple 8
      CHECK(total_bytes(head_buffers(small(t, false, Recompute::none, precision))) ==
            N * h * e + 2 * N * 4 + N * (vocab_padded / t) * e + 4 * N * 4);
      // Workspace, in every mode: the block's output and gradient buffers, and one region shared by
      // the attention's scratch and the MLP's activation (its gradient written over it), each
      // buffer starting on 128 bytes. The batched attention's: the softmax's scores buffer
      // (recompute = none copies the kept scores into it), the backward's row tile (s = 16 < 128
      // rows: as large), d_qkv (whose Q block holds the context gradient first) and bf16's fp32 dK
      // and dV sums; flash's: d_qkv, the fp32 dQ sum and D. The stage adds its gradient ping-pong, and with
      // sequence parallelism the gathered and partial [N, h].
      const auto aligned = [](std::int64_t bytes) { return (bytes + 127) / 128 * 128; };
      const std::int64_t dkv_sum = e < 4 ? aligned(N * (2 * h / t) * 4) : 0;
      const std::int64_t batched_part = 2 * aligned(scores) + aligned(N * (3 * h / t) * e) + dkv_sum;
      const std::int64_t flash_part = aligned(N * (3 * h / t) * e) + aligned(N * (h / t) * 4) + aligned(N * (a / t) * 4);
      const std::int64_t mlp_part = aligned(N * (f / t) * e);
      for (const Recompute r : {Recompute::none, Recompute::selective, Recompute::full})
        for (const bool sp : {false, true}) {
          const Config c = small(t, sp, r, precision);
          const std::int64_t n = sp ? N / t : N;
          const std::int64_t scratch = 3 * n * h * e + std::max(batched_part, mlp_part);
          CHECK(total_bytes(block_scratch(c)) == scratch);
          CHECK(total_bytes(workspace_buffers(c)) == scratch + 2 * n * h * e + (sp && t > 1 ? 2 * N * h * e : 0));
          const Config fc = small(t, sp, r, precision, true);
          CHECK(total_bytes(block_scratch(fc)) == 3 * n * h * e + std::max(flash_part, mlp_part));
        }
    }
  }
  // 1F1B: stage p of P keeps min(P - p, M) micro-batches.
  CHECK(micro_batches_in_flight(0, 16, 192) == 16);
  CHECK(micro_batches_in_flight(15, 16, 192) == 1);
  CHECK(micro_batches_in_flight(0, 16, 4) == 4);
}

TEST_CASE("plan: parameter bytes per rank, Megatron's 16 and 18 bytes, sharded by the distributed optimizer",
          "[plan]") {
  Config c = small(1, false, Recompute::none);
  c.data = 4;
  CHECK(parameter_bytes(1000, c).total() == 16 * 1000);
  c.distributed_optimizer = true;
  CHECK(parameter_bytes(1000, c).total() == 8 * 1000 + 8 * 250);  // 8 + 8/d
  c.precision = "bf16";
  CHECK(parameter_bytes(1000, c).total() == 6 * 1000 + 12 * 250);  // 6 + 12/d
  c.distributed_optimizer = false;
  CHECK(parameter_bytes(1000, c).total() == 18 * 1000);
  c.precision = "fp16";
  const ParameterBytes p = parameter_bytes(1000, c);
  CHECK(p.weights == 2000);
  CHECK(p.master == 4000);
  CHECK(p.gradients == 4000);
  CHECK(p.optimizer == 8000);
}

TEST_CASE("plan: each rank's parameters and their bytes equal what a TrainingRun allocates", "[plan][mpi]") {
  const int n = test::world_size();
  for (int tensor = 1; tensor <= n; tensor *= 2) {
    const int pipeline = n / tensor;
    for (const std::string precision : {"fp32", "bf16"}) {
      io::Deck deck = test::pipeline_deck(tensor, pipeline, 1, 2);
      deck.model.vocab_size = 250;  // padded to a multiple of 128 times the tensor size
      deck.training.precision = precision;
      INFO("tensor " << tensor << " x pipeline " << pipeline << ", " << precision);
      parallel::Topology topo(MPI_COMM_WORLD, parallel::Layout{tensor, pipeline, 1});
      train::RunOptions options;
      options.synthetic_tokens = 4096;
      const Config c = config_of(deck);
      const StageParameters stages = stage_parameters(c.shape, pipeline);
      const int stage = topo.coords().pp;
      const ParameterBytes planned = parameter_bytes(stages.of(stage), c);
      const auto check = [&](const train::ParameterMemory& measured, int in_flight) {
        CHECK(measured.parameters == stages.of(stage));
        CHECK(std::int64_t(measured.weight) == planned.weights);
        CHECK(std::int64_t(measured.master) == planned.master);
        CHECK(std::int64_t(measured.gradient) == planned.gradients);
        CHECK(std::int64_t(measured.optimizer) == planned.optimizer);
        CHECK(in_flight == micro_batches_in_flight(stage, pipeline, c.micro_batches()));
      };
      if (precision == "fp32") {
        train::TrainingRun<float> run(deck, topo, options);
        check(run.parameter_memory(), run.model().activation_slots());
      } else {
        train::TrainingRun<kx::bf16> run(deck, topo, options);
        check(run.parameter_memory(), run.model().activation_slots());
      }
    }
  }
}

TEST_CASE("plan: the shipped GPT-3 175B decks: Megatron's fits, the seed's is refused for both reasons", "[plan]") {
  Hardware a100;  // the default machine: a DGX A100 80 GB, 8 GPUs per node, 312 TFLOP/s bf16
  {
    const Plan p = make_plan(load_cluster_deck("gpt3-175b.toml"), a100);
    CHECK(p.ok());
    CHECK(p.gpus == 1024);
    CHECK(p.tokens == Approx(300e9).epsilon(1e-4));
    CHECK(p.achieved_flops == Approx(140e12).epsilon(0.25));  // Narayanan et al. 2021: 140 TFLOP/s (flash here)
    CHECK(p.memory.stage == 0);
    CHECK(p.memory.total() < std::int64_t(80) << 30);
  }
  {
    Hardware seed = a100;
    seed.gpus = 1024;  // "1024 A100 GPUs"
    const Plan p = make_plan(load_cluster_deck("gpt3-175b-seed.toml"), seed);
    CHECK_FALSE(p.ok());
    CHECK_FALSE(p.fits);
    REQUIRE(p.problems.size() == 2);
    CHECK(mentions(p.problems, "wrong GPU count: the deck needs tensor 8 x context 1 x pipeline 16 x data 32 = 4096 "
                               "GPUs, but 1024 are given"));
    CHECK(mentions(p.problems, "does not fit: the most loaded rank (pipeline stage 0) needs"));
    REQUIRE_FALSE(p.suggestions.empty());
    for (const Suggestion& s : p.suggestions) {
      INFO(join(s.sets));
      CHECK(s.config.world() == 1024);
      CHECK(s.bytes <= std::int64_t(80) << 30);
      CHECK(s.config.layout_problem().empty());
      // Applied to the deck, a suggestion is a valid deck that plans as fitting.
      const Plan again = make_plan(load_cluster_deck("gpt3-175b-seed.toml", s.sets), a100);
      CHECK(again.ok());
      CHECK(again.memory.total() == s.bytes);
    }
    // The seed's launch script: tensor 8 x pipeline 4 on 32 GPUs holds 175B parameters in 32 ranks.
    const Plan script =
        make_plan(load_cluster_deck("gpt3-175b-seed.toml", {"parallel.pipeline=4", "parallel.data=1"}), a100);
    CHECK_FALSE(script.fits);
    CHECK(script.memory.parameter_bytes.total() > std::int64_t(80) << 30);
  }
  {
    const Plan p = make_plan(load_cluster_deck("gpt3-175b-seed-corrected.toml"), a100);
    CHECK(p.ok());
    CHECK(p.gpus == 1024);
  }
}

TEST_CASE("plan: every shipped cluster deck plans and fits its layout", "[plan]") {
  for (const std::string name : {"gpt2-124m.toml", "gpt2-350m.toml", "gpt2-774m.toml", "gpt2-1.5b.toml",
                                 "gpt3-1.3b.toml", "gpt3-175b.toml", "gpt3-175b-seed-corrected.toml",
                                 "gpt2-small.toml"}) {
    INFO(name);
    Hardware a100;
    a100.gpus_per_node = name == "gpt2-small.toml" ? 4 : 8;
    const Plan p = make_plan(load_cluster_deck(name), a100);
    INFO(join(p.problems) << join(p.notes));
    CHECK(p.ok());
    CHECK(p.notes.empty());
  }
}

TEST_CASE("plan: communication per step", "[plan]") {
  CHECK(all_reduce_bytes(800, 8) == 1400);
  CHECK(all_gather_bytes(800, 8) == 700);
  CHECK(all_reduce_bytes(800, 1) == 0);
  // GPT-3 175B, a middle stage, bf16: two [N, h] all-reduces per layer forward, two backward, two
  // more in the recomputed forward, 6 layers, 192 micro-batches.
  const Config c = gpt3_175b();
  const double A = 2048.0 * 12288 * 2;
  const StepCommunication s = stage_communication(c, 5, 1000);
  CHECK(s.tensor == Approx(192 * 6 * 6 * all_reduce_bytes(A, 8)));
  CHECK(s.pipeline == Approx(192 * 2 * A));  // activations forward, gradients backward
  CHECK(s.data == Approx(all_reduce_bytes(1000 * 4.0, 8)));
  CHECK(s.embedding == 0);
  // Sequence parallelism moves the same bytes in the forward and gathers the LayerNorm outputs
  // again in the backward; the pipeline sends 1/t of the tokens.
  Config sp = c;
  sp.sequence_parallel = true;
  sp.recompute = Recompute::selective;
  const StepCommunication q = stage_communication(sp, 5, 1000);
  CHECK(q.tensor == Approx(192 * 6 * (4 * all_reduce_bytes(A, 8) + 2 * all_gather_bytes(A, 8))));
  CHECK(q.pipeline == Approx(192 * 2 * A / 8));
}

TEST_CASE("plan: hardware options out of range are refused, naming the option", "[plan]") {
  const Config c = gpt3_175b();
  Hardware hw;
  hw.gpu_memory_gib = -1;
  CHECK_THROWS_WITH(make_plan(c, hw, 1e9), test::contains("--gpu-memory = -1"));
  Config bad = c;
  bad.data = 7;  // 1536 sequences do not split over 7 replicas
  CHECK_THROWS_WITH(make_plan(bad, Hardware{}, 1e9), test::contains("training.global_batch = 1536"));
}

// The plan's activation inventory is the model's, byte for byte: every buffer a model stage
// allocates (Workspace) is counted, for every recompute mode, with and without sequence
// parallelism, fp32 and bf16, with several micro-batches in flight. (The column-sum partials of
// the bias and LayerNorm gradients, a few KiB, are the one scratch buffer the plan leaves out.)
TEST_CASE("plan: the activation inventory is what a model stage allocates", "[plan][mpi]") {
  const int n = test::world_size();
  for (const int t : {1, n}) {
    if (t > 4) continue;
    auto tp = test::tp_group(t);
    for (const std::string precision : {"fp32", "bf16"})
      for (const bool sp : {false, true})
        for (const Recompute r : {Recompute::none, Recompute::selective, Recompute::full})
          for (const int slots : {1, 3})
            for (const bool flash : {false, true}) {
            Config c = small(t, sp, r, precision, flash);
            c.shape.sequence_parallel = sp;
            INFO("tensor " << t << ", " << precision << (sp ? ", sequence parallel" : "") << ", recompute "
                           << recompute_name(r) << ", " << slots << " micro-batches in flight"
                           << (flash ? ", flash" : ", batched"));
            CHECK(test::planned_stage_bytes(c, slots) == test::allocated_stage_bytes(c, *tp, nullptr, r, slots));
          }
  }
}

// The check on this machine: the plan's memory for a CPU run against the high-water mark
// the memory ledger measures over the run's construction and a training step (every Kokkos
// allocation of the run, its transient ones included): the issue asks for 15 %; the plan counts
// every buffer of the model, so 5 % is asserted (measured: within 4 %, the rest is Kokkos' own).
TEST_CASE("plan: a CPU run's measured peak memory is the plan's", "[plan][memory][mpi]") {
  const int n = test::world_size();
  std::vector<std::array<int, 3>> layouts{{n, 1, 1}};
  if (n > 1) layouts.push_back({1, n, 1});
  for (const auto& [t, p, d] : layouts)
    for (const bool sp : {false, true})
      for (const std::string recompute : {"none", "selective", "full"}) {
        if (sp && t == 1) continue;
        io::Deck deck = test::pipeline_deck(t, p, d, 2);
        deck.parallel.sequence_parallel = sp;
        deck.training.recompute = recompute;
        parallel::Topology topo(MPI_COMM_WORLD, test::layout_of(deck));
        INFO("tensor " << t << " x pipeline " << p << (sp ? ", sequence parallel" : "") << ", recompute " << recompute
                       << ", stage " << topo.coords().pp);
        // Kokkos' own lazily grown buffers (the Serial backend's scratch, up to 237 KB for these
        // kernels) once before, so that the figure does not depend on which tests ran first.
        { train::TrainingRun<float>(deck, topo).step(0); }
        auto& ledger = util::memory_ledger();
        REQUIRE(ledger.installed());
        const std::size_t before = ledger.total();
        ledger.reset_high_water();
        {
          train::TrainingRun<float> run(deck, topo);
          run.step(0);
        }
        const double measured = static_cast<double>(ledger.high_water() - before);
        const Config c = config_of(deck);
        const double planned =
            static_cast<double>(rank_memory(c, stage_parameters(c.shape, p), topo.coords().pp).total());
        INFO("planned " << planned << " bytes, measured " << measured);
        CHECK(std::fabs(planned - measured) <= 0.05 * measured);
      }
}

// Interleaved 1F1B (parallel.virtual_stages = 2): each rank's activation slots per chunk, its
// received-gradient buffers and every byte of its activations, head and workspace are what the
// plan counts from the schedule (schedule::schedule_memory), as for one chunk above.
TEST_CASE("plan: with virtual stages each rank allocates the plan's activation, head and workspace bytes",
          "[plan][interleaved][mpi]") {
  const int n = test::world_size();
  for (const std::string precision : {"fp32", "bf16"})
    for (const std::string recompute : {"none", "selective", "full"})
      for (const bool sp : {false, true}) {
        const int tensor = sp ? 2 : 1;
        if (n % (2 * tensor) != 0) continue;
        const int pipeline = n / tensor;
        io::Deck deck = test::pipeline_deck(tensor, pipeline, 1, 2);  // 4 micro-batches per step
        deck.model.layers = 2 * pipeline;
        deck.parallel.virtual_stages = 2;
        deck.parallel.sequence_parallel = sp;
        deck.training.recompute = recompute;
        deck.training.precision = precision;
        parallel::Topology topo(MPI_COMM_WORLD, test::layout_of(deck));
        INFO("tensor " << tensor << " x pipeline " << pipeline << ", v = 2, " << precision << ", recompute "
                       << recompute << (sp ? ", sequence parallel" : "") << ", stage " << topo.coords().pp);
        train::RunOptions options;
        options.synthetic_tokens = 4096;
        const Config c = config_of(deck);
        const RankMemory planned = rank_memory(c, stage_parameters(c.shape, pipeline, c.virtual_stages), topo.coords().pp);
        const auto check = [&](auto& run) {
          const auto& m = run.model();
          REQUIRE(m.chunks() == 2);
          for (int k = 0; k < 2; ++k) CHECK(m.activation_slots(k) == planned.chunk_slots[static_cast<std::size_t>(k)]);
          CHECK(m.received_gradients() == planned.received_gradients);
          CHECK(planned.received_gradients == 1);
          std::size_t column_sums = 0;
          for (const auto& e : m.workspace().entries())
            if (e.name == "column_sums") column_sums += e.bytes;
          CHECK(static_cast<std::int64_t>(m.workspace().total_bytes() - column_sums) ==
                planned.activations + planned.head + planned.workspace);
          const train::ParameterMemory pm = run.parameter_memory();
          CHECK(pm.parameters == planned.parameters);
          CHECK(std::int64_t(pm.total()) == planned.parameter_bytes.total());
        };
        if (precision == "fp32") {
          train::TrainingRun<float> run(deck, topo, options);
          check(run);
        } else {
          train::TrainingRun<kx::bf16> run(deck, topo, options);
          check(run);
        }
      }
}
