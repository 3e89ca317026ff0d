// Memory at scale: sequence parallelism against tensor parallelism without it (loss and every
// gradient at step 0, loss curves over 20 steps), every activation-recomputation mode against
// recompute = none bit for bit (every layout of the world, both pipeline schedules), and what
// each option keeps in memory.
#include <cmath>
#include <mpi.h>

#include "catch.hpp"
#include "src/train/training_run.hpp"
#include "tests/train/train_test_util.hpp"

using namespace tptrain;

namespace {

struct Layout {
  int tensor, pipeline, data;
};

// The layouts of the world with tensor parallelism (sequence parallelism needs t > 1).
std::vector<Layout> tensor_layouts_of_world() {
  const int n = test::world_size();
  std::vector<Layout> out;
  if (n >= 2) out.push_back({n, 1, 1});
  if (n == 4) {
    out.push_back({2, 2, 1});
    out.push_back({2, 1, 2});
  }
  return out;
}

std::vector<Layout> layouts_of_world() {
  const int n = test::world_size();
  std::vector<Layout> out{{1, n, 1}, {1, 1, n}};
  if (n >= 2) out.push_back({n, 1, 1});
  if (n == 4) out.push_back({2, 2, 1});
  return out;
}

io::Deck deck_of(const Layout& l, bool sequence_parallel, const std::string& recompute = "selective") {
  io::Deck deck = test::pipeline_deck(l.tensor, l.pipeline, l.data, 20);
  deck.parallel.sequence_parallel = sequence_parallel;
  deck.training.recompute = recompute;
  return deck;
}

}  // namespace

TEST_CASE("sequence parallelism gives the loss, gradients and loss curve of tensor parallelism without it",
          "[sequence_parallel][mpi]") {
  {  // One tensor rank: nothing to split, the option changes nothing (bit for bit).
    const Layout one{1, 1, test::world_size()};
    const test::Gradients off = test::gradients_of(deck_of(one, false), MPI_COMM_WORLD, 1);
    const test::Gradients on = test::gradients_of(deck_of(one, true), MPI_COMM_WORLD, 1);
    CHECK(on.loss == off.loss);
    CHECK(on.grads == off.grads);
  }
  for (const Layout& l : tensor_layouts_of_world()) {
    INFO("tensor " << l.tensor << " x pipeline " << l.pipeline << " x data " << l.data);
    {  // it is on: the residual stream holds this rank's tokens only
      parallel::Topology topo(MPI_COMM_WORLD, test::layout_of(deck_of(l, true)));
      train::TrainingRun<float> run(deck_of(l, true), topo);
      CHECK(run.model().sequence_rows() * l.tensor == run.model().tokens());
      CHECK(run.model().stage_input().extent(0) == static_cast<std::size_t>(run.model().tokens() / l.tensor));
    }
    const test::Gradients off = test::gradients_of(deck_of(l, false), MPI_COMM_WORLD, 0);
    const test::Gradients on = test::gradients_of(deck_of(l, true), MPI_COMM_WORLD, 0);
    INFO("loss " << on.loss << " vs " << off.loss << ", norm " << on.norm << " vs " << off.norm);
    CHECK(std::fabs(on.loss - off.loss) <= 1e-5 * std::fabs(off.loss));
    CHECK(std::fabs(on.norm - off.norm) <= 1e-5 * off.norm);
    REQUIRE(on.grads.size() == off.grads.size());
    test::check_close(on.grads, off.grads, 1e-5);

    const auto curve_off = test::loss_curve(deck_of(l, false), MPI_COMM_WORLD, 20);
    const auto curve_on = test::loss_curve(deck_of(l, true), MPI_COMM_WORLD, 20);
    for (std::size_t s = 0; s < curve_on.size(); ++s) {
      INFO("step " << s + 1 << ": " << curve_on[s] << " vs " << curve_off[s]);
      CHECK(std::fabs(curve_on[s] - curve_off[s]) <= 1e-5 * std::fabs(curve_off[s]));
    }
  }
}

TEST_CASE("every recompute mode gives the gradients of recompute = none bit for bit", "[recompute][mpi]") {
  std::vector<Layout> layouts = layouts_of_world();
  for (const Layout& l : tensor_layouts_of_world()) layouts.push_back(l);  // again, with sequence parallelism
  const std::size_t plain = layouts_of_world().size();
  for (std::size_t i = 0; i < layouts.size(); ++i) {
    const Layout& l = layouts[i];
    const bool sp = i >= plain;
    for (auto schedule : {schedule::Schedule::one_f_one_b, schedule::Schedule::all_forward_all_backward}) {
      if (l.pipeline == 1 && schedule != schedule::Schedule::one_f_one_b) continue;
      INFO("tensor " << l.tensor << " x pipeline " << l.pipeline << " x data " << l.data
                     << (sp ? ", sequence parallel" : "") << ", " << schedule::schedule_name(schedule));
      // Step 1: after an optimizer step, so that the weights are no longer the initial ones.
      const test::Gradients none = test::gradients_of(deck_of(l, sp, "none"), MPI_COMM_WORLD, 1, schedule);
      for (const char* mode : {"selective", "full"}) {
        INFO("recompute = " << mode);
        const test::Gradients got = test::gradients_of(deck_of(l, sp, mode), MPI_COMM_WORLD, 1, schedule);
        CHECK(got.loss == none.loss);
        CHECK(got.norm == none.norm);
        CHECK(got.grads == none.grads);  // bitwise: every element of every gradient
      }
    }
  }
}

TEST_CASE("what each recompute mode and sequence parallelism keep for the backward", "[recompute][sequence_parallel]") {
  // One stage of 4 blocks, micro-batch 2, S = 16, H = 32, 4 heads, F = 64 (the small deck), fp32.
  auto self = test::tp_group(1);
  const io::Deck deck = deck_of({1, 1, 1}, false);
  model::GptShape shape = model::shape_of(deck);
  shape.flash_attention = false;  // the batched core: recompute = none keeps its S×S scores
  const auto saved = [&](model::Recompute r, int slots) {
    model::GptModel<float> m(shape, 2, *self, 1, model::PipelineStage{}, r);
    m.reserve_slots(slots);
    CHECK(m.activation_slots() == slots);
    return m.workspace().bytes(model::BufferCategory::activation);
  };
  const std::size_t N = 2 * 16, H = 32, F = 64, L = 4, heads = 4, S = 16;
  // Per block: x, ln_1 out, x1, ln_2 out [N, H]; qkv [N, 3H]; ctx [N, H]; fc out and GELU
  // sigmoid [N, F] (4 bytes each); LayerNorm mean/rstd 4 [N]; lse [N * heads].
  const std::size_t block = 4 * (N * H * 4 + N * 3 * H + N * H + 2 * N * F + 4 * N + N * heads);
  const std::size_t scores = 4 * 2 * heads * S * S;
  const std::size_t head = 4 * N * H + 4 * 2 * N;  // ln_f out and its mean/rstd (logits are "stage" tensors)
  CHECK(saved(model::Recompute::selective, 1) == L * block + 4 * N * H /*stage output*/ + head);
  CHECK(saved(model::Recompute::none, 1) == L * (block + scores) + 4 * N * H + head);
  {  // flash attention keeps no scores: none keeps what selective keeps
    shape.flash_attention = true;
    CHECK(saved(model::Recompute::none, 1) == L * block + 4 * N * H + head);
    shape.flash_attention = false;
  }
  // full: the residual stream (L block inputs + the stage output) and ln_f out; the blocks share
  // one saved set, a scratch buffer.
  CHECK(saved(model::Recompute::full, 1) == (L + 1) * 4 * N * H + head);
  // A pipeline stage keeps one set per micro-batch in flight (the head once).
  CHECK(saved(model::Recompute::selective, 3) == 3 * (L * block + 4 * N * H) + head);
  CHECK(saved(model::Recompute::full, 3) == 3 * (L + 1) * 4 * N * H + head);
}

TEST_CASE("sequence parallelism needs seq_length divisible by tensor", "[sequence_parallel]") {
  model::GptShape shape = test::tiny_shape(1);
  shape.tensor = 3;
  shape.heads = 3;
  shape.hidden = 12;
  shape.ffn_hidden = 12;
  shape.seq_length = 8;
  shape.sequence_parallel = true;
  CHECK_THROWS_WITH(shape.validate(), test::contains("model.seq_length = 8 is not a multiple of parallel.tensor = 3"));
  shape.sequence_parallel = false;
  CHECK_NOTHROW(shape.validate());
  CHECK_THROWS_WITH(io::parse_deck("[model]\nseq_length = 10\nheads = 4\n[parallel]\ntensor = 4\nsequence_parallel = true\n"
                                   "[data]\ntrain = \"corpus.txt\"\n",
                                   "sp.toml", std::string(TPTRAIN_SOURCE_DIR) + "/tests/data/cli"),
                    test::contains("model.seq_length"));
}

// Not run by default: the activation memory of the model (L8 H1024 A16 S1024, micro-batch 2,
// bf16) at tensor 2, measured from what a stage allocates, per layer beside Korthikanti et al.'s
// Table 2. `mpiexec -n 2 tptrain_tests "[.memory_report]"`.
TEST_CASE("report: activation memory per layer against Korthikanti et al. 2022", "[.memory_report]") {
  const int t = test::world_size();
  auto tp = test::tp_group(t);
  model::GptShape s;
  s.layers = 8;
  s.hidden = 1024;
  s.heads = 16;
  s.ffn_hidden = 4096;
  s.seq_length = 1024;
  s.vocab_size = 50257;
  s.tensor = t;
  const int b = 2;
  const double sbh = double(s.seq_length) * b * s.hidden, MiB = 1 << 20;
  const double as_ht = double(s.heads) * s.seq_length / (double(s.hidden) * t);
  for (const bool sp : {false, true})
    for (auto r : {model::Recompute::none, model::Recompute::selective, model::Recompute::full}) {
      s.sequence_parallel = sp;
      model::GptModel<kx::bf16> m(s, b, *tp, 1, model::PipelineStage{}, r);
      std::size_t per_layers = 0, shared = 0;
      for (const auto& e : m.workspace().entries()) {
        const bool block_input = e.name.rfind("residual.", 0) == 0 && e.name != "residual." + std::to_string(s.layers);
        if (e.name.rfind("layers/", 0) == 0 || block_input) per_layers += e.bytes;
        if (e.name.rfind("recompute.block", 0) == 0) shared += e.bytes;
      }
      const double korthikanti =
          r == model::Recompute::full ? 2.0
          : sp ? 34.0 / t + (r == model::Recompute::none ? 5 * as_ht : 0)
               : 10 + 24.0 / t + (r == model::Recompute::none ? 5 * as_ht : 0);
      const double per_layer = static_cast<double>(per_layers) / s.layers;
      WARN(fmt::format("tensor {} {:3} {:9}: per layer {:7.2f} MiB = {:5.2f} sbh (Korthikanti {:5.2f} sbh = {:7.2f} MiB, "
                       "ratio {:.3f}); recompute working set {:.2f} MiB; stage total {:.1f} MiB (activation {:.1f}, "
                       "stage {:.1f}, scratch {:.1f})",
                       t, sp ? "SP" : "", model::recompute_name(r), per_layer / MiB, per_layer / sbh, korthikanti,
                       korthikanti * sbh / MiB, per_layer / (korthikanti * sbh), shared / MiB,
                       m.workspace().total_bytes() / MiB, m.workspace().bytes(model::BufferCategory::activation) / MiB,
                       m.workspace().bytes(model::BufferCategory::stage) / MiB,
                       m.workspace().bytes(model::BufferCategory::scratch) / MiB));
    }
}
