// Pipeline parallelism and the bucketed data-parallel reduction: the schedules (deadlock
// freedom, in-flight bounds), the stage split of the model, and every (tensor, pipeline, data)
// layout of the world against the one-rank run — loss, every gradient, the gradient norm, the
// loss curve, evaluation, and checkpoints that resume under another layout.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <mpi.h>
#include <set>
#include <unistd.h>

#include "catch.hpp"
#include "src/checkpoint/model_checkpoint.hpp"
#include "src/schedule/pipeline_schedule.hpp"
#include "tests/schedule/pipeline_simulator.hpp"
#include "src/schedule/schedule_memory.hpp"
#include "src/train/training_run.hpp"
#include "src/util/host_waits.hpp"
#include "tests/model/model_test_util.hpp"
#include "tests/train/train_test_util.hpp"

using namespace tptrain;
namespace fs = std::filesystem;
using test::Gradients;
using test::Named;
using test::check_close;
using test::gradients_of;
using test::layout_of;
using test::logical_by_name;

namespace {

struct LayoutCase {
  int tensor, pipeline, data;
};

// The layouts of the issue that fit the world (2 or 4 ranks).
std::vector<LayoutCase> layouts_of_world() {
  const std::vector<LayoutCase> all{{1, 2, 1}, {1, 1, 2}, {2, 2, 1}, {2, 1, 2}, {1, 2, 2}, {1, 4, 1}, {1, 1, 4}};
  std::vector<LayoutCase> fit;
  for (const auto& l : all)
    if (l.tensor * l.pipeline * l.data == test::world_size()) fit.push_back(l);
  return fit;
}

template <class T = float>
void check_layout_against(const Gradients& ref, const io::Deck& deck, int step, double tol = 1e-5,
                          double loss_tol = 1e-5) {
  const Gradients got = gradients_of<T>(deck, MPI_COMM_WORLD, step);
  INFO("step " << step << ": loss " << got.loss << " vs " << ref.loss << ", norm " << got.norm << " vs " << ref.norm);
  CHECK(std::fabs(got.loss - ref.loss) <= loss_tol * std::fabs(ref.loss));
  CHECK(std::fabs(got.norm - ref.norm) <= tol * ref.norm);
  check_close(got.grads, ref.grads, tol);
}

void check_layout_against_one_rank(const io::Deck& reference_deck, const io::Deck& deck, int step) {
  check_layout_against(gradients_of(reference_deck, MPI_COMM_SELF, step), deck, step);
}

}  // namespace

TEST_CASE("pipeline schedules are deadlock-free and bound the micro-batches in flight", "[pipeline]") {
  for (int P = 1; P <= 6; ++P)
    for (int M = 1; M <= 17; ++M) {
      INFO(P << " stages, " << M << " micro-batches");
      CHECK(schedule::simulate_pipeline(schedule::Schedule::one_f_one_b, P, M) == "");
      CHECK(schedule::simulate_pipeline(schedule::Schedule::all_forward_all_backward, P, M) == "");
      for (int s = 0; s < P; ++s) {
        CHECK(schedule::peak_in_flight(schedule::pipeline_ops(schedule::Schedule::one_f_one_b, s, P, M)) ==
              std::min(P - s, M));
        CHECK(schedule::peak_in_flight(schedule::pipeline_ops(schedule::Schedule::all_forward_all_backward, s, P, M)) == M);
      }
    }
  // One stage: forward and backward alternate, as without a pipeline.
  const auto ops = schedule::pipeline_ops(schedule::Schedule::one_f_one_b, 0, 1, 3);
  REQUIRE(ops.size() == 6);
  for (std::size_t i = 0; i < ops.size(); ++i) {
    CHECK(ops[i].kind == (i % 2 == 0 ? schedule::PipelineOp::forward : schedule::PipelineOp::backward));
    CHECK(ops[i].micro_batch == static_cast<int>(i / 2));
  }
  // Backwards run in micro-batch order under both schedules (identical gradient accumulation).
  for (auto schedule : {schedule::Schedule::one_f_one_b, schedule::Schedule::all_forward_all_backward}) {
    int next = 0;
    for (const auto& op : schedule::pipeline_ops(schedule, 1, 4, 9))
      if (op.kind == schedule::PipelineOp::backward) CHECK(op.micro_batch == next++);
    CHECK(next == 9);
  }
  CHECK_THROWS(schedule::pipeline_ops(schedule::Schedule::one_f_one_b, 2, 2, 4));
}

TEST_CASE("a model stage holds its layers, the embedding and the head where they belong", "[pipeline][model]") {
  auto self = test::tp_group(1);
  model::GptShape shape = test::tiny_shape(1);
  shape.layers = 4;
  CHECK_THROWS_WITH(model::GptModel<float>(shape, 1, *self, 5, model::PipelineStage{0, 3}),
                    test::contains("model.layers = 4 is not a multiple of parallel.pipeline = 3"));

  model::GptModel<float> whole(shape, 2, *self, 5);
  // The checkpoint's tensor list is the whole model's parameter list (names, saved shapes).
  const auto logical = model::logical_tensors(shape);
  const auto params = whole.parameters();
  REQUIRE(logical.size() == params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    INFO(params[i]->name);
    CHECK(logical[i].name == params[i]->name);
    auto saved = params[i]->shape;
    saved[0] = params[i]->saved_rows;
    CHECK(logical[i].shape == saved);
  }
  CHECK(whole.tied_copy() == nullptr);
  CHECK(whole.buckets().size() == 1 + 4 + 1);  // head, 4 blocks, embedding

  for (int P : {2, 4}) {
    INFO(P << " stages");
    std::set<std::string> unique_names;
    std::size_t unique_count = 0;
    std::vector<float> first_word;
    for (int s = 0; s < P; ++s) {
      model::GptModel<float> stage(shape, 2, *self, 5, model::PipelineStage{s, P});
      CHECK(stage.first_layer() == s * 4 / P);
      CHECK(stage.local_layers() == 4 / P);
      for (auto* p : stage.unique_parameters()) unique_names.insert(p->name);
      unique_count += stage.unique_parameters().size();
      std::size_t in_buckets = 0;
      for (auto& b : stage.buckets()) in_buckets += b.params.size();
      CHECK(in_buckets == stage.parameters().size());  // every gradient in exactly one bucket
      const auto word = [](model::Parameter<float>* p) {
        auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p->value);
        return std::vector<float>(h.data(), h.data() + h.size());
      };
      if (s == 0) {
        CHECK(stage.tied_copy() == nullptr);
        first_word = word(stage.word());
      } else if (s == P - 1) {
        REQUIRE(stage.tied_copy() != nullptr);
        CHECK(stage.tied_copy()->name == "embedding/word");
        CHECK(stage.parameters().size() == stage.unique_parameters().size() + 1);
        CHECK(word(stage.tied_copy()) == first_word);  // the same initial values
      } else {
        CHECK(stage.tied_copy() == nullptr);
        CHECK(stage.parameters().size() == model::block_parameter_rows(stage.shape()).size() * 4 / static_cast<std::size_t>(P));
      }
    }
    CHECK(unique_count == params.size());  // every logical parameter on exactly one stage
    CHECK(unique_names.size() == params.size());
  }
}

TEST_CASE("every layout gives the one-rank loss, gradients and gradient norm", "[pipeline][layouts][mpi]") {
  // Step 0: the same initial weights, 1e-5. Step 2, after two optimizer steps (tied copies,
  // clipping, AdamW moments all involved): the weights already differ by fp32 rounding, which
  // AdamW's m / sqrt(v) amplifies for tiny gradient elements — tensor = 2 without a pipeline
  // shows the same 1.04e-5 there — so 1e-4 (a real error would be O(1)).
  const Gradients ref[2] = {gradients_of(test::pipeline_deck(1, 1, 1, 4), MPI_COMM_SELF, 0),
                            gradients_of(test::pipeline_deck(1, 1, 1, 4), MPI_COMM_SELF, 2)};
  for (const auto& l : layouts_of_world()) {
    INFO("tensor " << l.tensor << " x pipeline " << l.pipeline << " x data " << l.data);
    check_layout_against(ref[0], test::pipeline_deck(l.tensor, l.pipeline, l.data, 4), 0);
    check_layout_against(ref[1], test::pipeline_deck(l.tensor, l.pipeline, l.data, 4), 2, 1e-4);
  }
}

// bf16: the same rounding points on every layout but one. Pipeline and data parallelism move
// bf16 activations that are already rounded and sum fp32 gradients, so they match one rank up
// to fp32 summation order (measured on 2 and 4 ranks: loss and norm bitwise equal, gradients
// within 1.2e-7 of each tensor's largest element). Tensor parallelism rounds each rank's partial
// sum of a row-parallel GEMM to bf16 before the all-reduce (activations travel in bf16, as in
// Megatron) where one rank rounds the full sum once: up to one bf16 ulp (2^-8 relative) more in
// those activations, which the gradients inherit (measured: loss 5.4e-6 relative, norm 6.4e-4,
// gradients 7.8e-3 of each tensor's largest element, i.e. two bf16 ulps). A real error (a missing
// reduction, a wrong shard) is O(1).
TEST_CASE("bf16: every layout gives the one-rank loss, gradients and gradient norm at step 0",
          "[pipeline][layouts][mixed][mpi]") {
  const auto bf16_deck = [](int t, int p, int d) {
    io::Deck deck = test::pipeline_deck(t, p, d, 4);
    deck.training.precision = "bf16";
    return deck;
  };
  const Gradients ref = gradients_of<kx::bf16>(bf16_deck(1, 1, 1), MPI_COMM_SELF, 0);
  std::vector<LayoutCase> layouts = layouts_of_world();
  layouts.push_back({test::world_size(), 1, 1});  // tensor parallelism alone
  for (const auto& l : layouts) {
    INFO("tensor " << l.tensor << " x pipeline " << l.pipeline << " x data " << l.data);
    if (l.tensor == 1)
      check_layout_against<kx::bf16>(ref, bf16_deck(l.tensor, l.pipeline, l.data), 0, 1e-6, 1e-6);
    else
      check_layout_against<kx::bf16>(ref, bf16_deck(l.tensor, l.pipeline, l.data), 0, 2e-2, 1e-4);
  }
}

TEST_CASE("1F1B and all-forward-all-backward give identical gradients", "[pipeline][mpi]") {
  const int n = test::world_size();
  for (int tensor : {1, 2}) {
    if (n % tensor != 0 || n / tensor < 2) continue;
    const io::Deck deck = test::pipeline_deck(tensor, n / tensor, 1, 4);
    INFO("tensor " << tensor << " x pipeline " << n / tensor);
    parallel::Topology topo(MPI_COMM_WORLD, layout_of(deck));
    train::TrainingRun a(deck, topo, train::RunOptions{schedule::Schedule::one_f_one_b, true});
    train::TrainingRun b(deck, topo, train::RunOptions{schedule::Schedule::all_forward_all_backward, true});
    const double loss_a = a.compute_gradients(1);
    const double loss_b = b.compute_gradients(1);
    CHECK(loss_a == loss_b);
    const auto pa = a.model().parameters(), pb = b.model().parameters();
    REQUIRE(pa.size() == pb.size());
    for (std::size_t i = 0; i < pa.size(); ++i) {
      INFO(pa[i]->name);
      auto ga = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), pa[i]->grad);
      auto gb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), pb[i]->grad);
      CHECK(std::vector<float>(ga.data(), ga.data() + ga.size()) ==
            std::vector<float>(gb.data(), gb.data() + gb.size()));  // bitwise
    }
    // Activation slots: P - stage micro-batches in flight under 1F1B, all of them otherwise.
    const int P = topo.layout().pipeline, stage = topo.coords().pp, M = a.micro_batches();
    CHECK(a.model().activation_slots() == std::min(P - stage, M));
    CHECK(b.model().activation_slots() == M);
    // Nothing is recomputed but the attention core (recompute = selective): under 1F1B the last
    // stage runs each backward right after its forward; under GPipe its backwards (in micro-batch
    // order, after every forward) each find another micro-batch's head and recompute it.
    CHECK(a.model().recomputed_blocks() == 0);
    CHECK(a.model().recomputed_heads() == 0);
    CHECK(b.model().recomputed_heads() == (stage == P - 1 && M > 1 ? M : 0));
  }
}

TEST_CASE("each micro-batch is sampled once per step, on the stages that read tokens", "[pipeline][mpi]") {
  const int n = test::world_size();
  for (const schedule::Schedule schedule : {schedule::Schedule::one_f_one_b, schedule::Schedule::all_forward_all_backward}) {
    INFO(schedule::schedule_name(schedule) << " on " << n << " stages");
    const io::Deck deck = test::pipeline_deck(1, n, 1, 4, 4 * n);  // 2n micro-batches
    parallel::Topology topo(MPI_COMM_WORLD, layout_of(deck));
    train::TrainingRun run(deck, topo, train::RunOptions{schedule, true});
    const int stage = topo.coords().pp, M = run.micro_batches();
    const bool reads_tokens = stage == 0 || stage == n - 1;
    for (int step = 0; step < 2; ++step) {
      const std::int64_t before = run.pipeline().batches().samples();
      run.step(step);
      CHECK(run.pipeline().batches().samples() - before == (reads_tokens ? M : 0));
    }
    // Nothing grows after the first step: the entries were reserved with the activation slots.
    CHECK(run.pipeline().batches().entries() == (reads_tokens ? run.model().activation_slots() + 1 : 0));
  }
}

TEST_CASE("a training step waits on the host where docs/design.md says", "[pipeline][mpi]") {
  // docs/design.md, "Host waits": on MPI the pipeline transfers and the embedding group's
  // all-reduce wait on the host (a fence before MPI reads, the request's wait); everything else
  // is the same on every backend. Counted per step, after a first step.
  const int n = test::world_size();
  const io::Deck deck = test::pipeline_deck(1, n, 1, 4, 4 * n);
  parallel::Topology topo(MPI_COMM_WORLD, layout_of(deck));
  train::TrainingRun run(deck, topo);
  REQUIRE(run.pipeline().matching() == schedule::Matching::by_tag);  // the MPI backend
  const int stage = topo.coords().pp, M = run.micro_batches();
  std::int64_t transfers = 0;
  for (const schedule::PipelineOp& op : schedule::pipeline_ops(schedule::Schedule::one_f_one_b, run.pipeline().place(), M,
                                                         true, schedule::Matching::by_tag))
    transfers += static_cast<std::int64_t>(op.transfers.size());
  const std::int64_t embedding_group = n > 1 && (stage == 0 || stage == n - 1) ? 1 : 0;
  using W = util::HostWait;
  std::map<W, std::int64_t> expected{{W::batch_buffer_reuse, 0},  // host memory: no copies to wait for
                                     {W::loss_to_host, 1},
                                     {W::norm_to_host, 1},
                                     // the agreement on the step's tokens; the loss and the norm over PP
                                     {W::host_scalar_reduce, 1 + (n > 1 ? 2 : 0)},
                                     {W::request_wait, transfers + embedding_group},
                                     {W::mpi_fence, transfers + embedding_group},
                                     {W::staged_copy_back, 0}};
  run.step(0);
  for (int step = 1; step < 3; ++step) {
    const util::HostWaits::Counts before = util::HostWaits::instance().counts();
    run.step(step);
    for (const auto& [kind, count] : expected) {
      INFO(util::host_wait_name(kind) << ", stage " << stage << " of " << n << ", step " << step);
      CHECK(util::HostWaits::instance().count(kind) - before[static_cast<std::size_t>(kind)] == count);
    }
  }
}

TEST_CASE("fewer micro-batches than pipeline stages", "[pipeline][mpi]") {
  const int P = test::world_size();
  for (int global_batch : {2, 4}) {  // 1 and 2 micro-batches
    if (global_batch / 2 >= P) continue;
    INFO(global_batch / 2 << " micro-batches on " << P << " stages");
    check_layout_against_one_rank(test::pipeline_deck(1, 1, 1, 4, global_batch),
                                  test::pipeline_deck(1, P, 1, 4, global_batch), 1);
  }
}

TEST_CASE("every layout reproduces the one-rank loss curve and evaluation", "[pipeline][layouts][mpi]") {
  const int steps = 6;
  const io::Deck ref_deck = test::pipeline_deck(1, 1, 1, steps);
  parallel::Topology self(MPI_COMM_SELF, parallel::Layout{});
  train::TrainingRun ref(ref_deck, self);
  std::vector<double> reference;
  for (int s = 0; s < steps; ++s) reference.push_back(ref.step(s).loss);
  const double ref_eval = ref.evaluate();
  for (const auto& l : layouts_of_world()) {
    INFO("tensor " << l.tensor << " x pipeline " << l.pipeline << " x data " << l.data);
    const io::Deck deck = test::pipeline_deck(l.tensor, l.pipeline, l.data, steps);
    parallel::Topology topo(MPI_COMM_WORLD, layout_of(deck));
    train::TrainingRun run(deck, topo);
    for (int s = 0; s < steps; ++s) {
      const double loss = run.step(s).loss;
      INFO("step " << s + 1 << ": " << loss << " vs " << reference[static_cast<std::size_t>(s)]);
      CHECK(std::fabs(loss - reference[static_cast<std::size_t>(s)]) <= 1e-5 * reference[static_cast<std::size_t>(s)]);
    }
    const double eval = run.evaluate();
    CHECK(std::fabs(eval - ref_eval) <= 1e-5 * ref_eval);
    // The tied copies of the word embedding stay bit-identical (first and last stage).
    if (l.pipeline > 1 && topo.in_embedding_group()) {
      CHECK(test::tied_embedding_copies_identical(run.model(), topo));
    }
  }
}

TEST_CASE("a checkpoint saved with one layout resumes under another", "[pipeline][checkpoint][mpi]") {
  const int n = test::world_size();
  const int steps = 6, k = 3;
  test::SharedTempDir dir;
  const std::string extra = "[checkpoint]\ndir = \"" + dir.path() + "\"\nkeep = 10\n";
  std::vector<std::pair<LayoutCase, LayoutCase>> pairs;
  if (n == 2) pairs = {{{1, 2, 1}, {1, 1, 2}}, {{1, 1, 2}, {1, 2, 1}}, {{2, 1, 1}, {1, 2, 1}}};
  if (n == 4) pairs = {{{1, 4, 1}, {2, 2, 1}}, {{2, 2, 1}, {1, 2, 2}}, {{1, 2, 2}, {1, 4, 1}}, {{1, 1, 4}, {1, 4, 1}}};
  if (pairs.empty()) return;

  const io::Deck ref_deck = test::pipeline_deck(1, 1, 1, steps, 8, extra);
  const auto reference = test::loss_curve(ref_deck, MPI_COMM_SELF, steps);
  int id = 0;
  for (const auto& [save, load] : pairs) {
    INFO("saved with " << save.tensor << "x" << save.pipeline << "x" << save.data << ", resumed with "
                       << load.tensor << "x" << load.pipeline << "x" << load.data);
    const int file_step = 100 * ++id + k;  // a distinct file per pair
    {
      const io::Deck deck = test::pipeline_deck(save.tensor, save.pipeline, save.data, steps, 8, extra);
      parallel::Topology topo(MPI_COMM_WORLD, layout_of(deck));
      train::TrainingRun run(deck, topo);
      for (int s = 0; s < k; ++s) run.step(s);
      checkpoint::save_checkpoint(run.model(), deck, topo, file_step, 0);
    }
    const std::string file = checkpoint::checkpoint_path(dir.path(), file_step);
    const io::Deck deck = test::pipeline_deck(load.tensor, load.pipeline, load.data, steps, 8, extra);
    parallel::Topology topo(MPI_COMM_WORLD, layout_of(deck));
    train::TrainingRun run(deck, topo);
    CHECK(checkpoint::load_weights(run.model(), topo, file, true).pp == save.pipeline);
    // Bitwise the tensors of the file: compare with the whole model read on one rank.
    {
      parallel::Topology self(MPI_COMM_SELF, parallel::Layout{});
      train::TrainingRun whole(ref_deck, self);
      checkpoint::load_weights(whole.model(), self, file, true);
      const Named want = logical_by_name(whole.model(), self.tp(), false);
      for (const auto& [name, got] : logical_by_name(run.model(), topo.tp(), false)) {
        INFO(name);
        CHECK(got == want.at(name));
      }
    }
    for (int s = k; s < steps; ++s) {
      const double loss = run.step(s).loss;
      INFO("step " << s + 1);
      CHECK(std::fabs(loss - reference[static_cast<std::size_t>(s)]) <= 1e-5 * reference[static_cast<std::size_t>(s)]);
    }
  }
}

// Not run by default: the figures of the design notes. `tptrain_tests "[.report]"`.
TEST_CASE("report: activation memory of the pipeline schedules (tiny deck)", "[.report]") {
  const io::Deck deck = io::load_deck(std::string(TPTRAIN_SOURCE_DIR) + "/input/tiny.toml");
  auto self = test::tp_group(1);
  model::GptShape shape = model::shape_of(deck);
  shape.tensor = 1;
  const double MiB = 1048576.0;
  for (auto recompute : {model::Recompute::none, model::Recompute::selective, model::Recompute::full})
    for (int P : {2, 4})
      for (int M : {4, 16})
        for (auto schedule : {schedule::Schedule::one_f_one_b, schedule::Schedule::all_forward_all_backward}) {
          std::string line = fmt::format("{:9} P={} M={:2} {:24}:", model::recompute_name(recompute), P, M,
                                         schedule::schedule_name(schedule));
          std::size_t worst = 0;
          for (int s = 0; s < P; ++s) {
            model::GptModel<float> stage(shape, deck.training.micro_batch, *self, 1, model::PipelineStage{s, P},
                                         recompute);
            const int in_flight = schedule::peak_in_flight(schedule::pipeline_ops(schedule, s, P, M));
            stage.reserve_slots(in_flight);
            line += fmt::format(" | stage {}: {} in flight, {:.2f} MiB", s, in_flight, stage.activation_bytes() / MiB);
            worst = std::max(worst, stage.activation_bytes());
          }
          WARN(line + fmt::format(" | peak {:.2f} MiB", worst / MiB));
        }
}

// Not run by default: how much of the data-parallel all-reduce the backward hides. Run as
// `mpiexec -n 2 tptrain_tests "[.bench]"` (tiny deck, data = world). A step's exposed
// communication is the wait after the backward on the rank that finished its backward LAST
// (the minimum over the DP group: the others also wait for it, which is skew, not
// communication); without overlap that is the whole all-reduce. Medians over the steps.
TEST_CASE("bench: data-parallel all-reduce overlap (tiny deck, data = world)", "[.bench]") {
  const int n = test::world_size();
  if (n < 2) return;  // nothing to reduce
  const io::Deck deck = io::load_deck(std::string(TPTRAIN_SOURCE_DIR) + "/input/tiny.toml",
                                      {"parallel.tensor=1", "parallel.data=" + std::to_string(n)});
  parallel::Topology topo(MPI_COMM_WORLD, layout_of(deck));
  const int steps = 24;
  double exposed[2] = {0, 0};
  std::string buckets;
  for (bool overlap : {false, true}) {
    train::TrainingRun run(deck, topo, train::RunOptions{schedule::Schedule::one_f_one_b, overlap});
    run.step(0);  // warm-up
    std::vector<double> waits;
    std::vector<double> by_bucket_before = run.reduction_stats().wait_by_bucket_s;
    for (int s = 1; s <= steps; ++s) {
      const double before = run.reduction_stats().wait_s;
      run.step(s);
      const double wait = run.reduction_stats().wait_s - before;  // min over DP = -max(-wait)
      waits.push_back(-parallel::all_reduce_scalar(topo.dp(), -wait, parallel::ReduceOp::max));
    }
    std::sort(waits.begin(), waits.end());
    exposed[overlap ? 1 : 0] = waits[waits.size() / 2];
    if (overlap) {
      const auto& by_bucket = run.reduction_stats().wait_by_bucket_s;
      for (std::size_t b = 0; b < by_bucket.size(); ++b)
        buckets += fmt::format(" {} {:.2f} ms ({:.2f} MB);", run.model().buckets()[b].name,
                               1e3 * (by_bucket[b] - by_bucket_before[b]) / steps,
                               run.model().buckets()[b].grads.span() * 4e-6);
    }
  }
  WARN(fmt::format("DP all-reduce per step (median): {:.2f} ms without overlap, {:.2f} ms exposed with overlap: "
                   "{:.0f}% hidden. Mean wait per bucket with overlap (rank {}):{}",
                   1e3 * exposed[0], 1e3 * exposed[1], 100.0 * (1.0 - exposed[1] / std::max(exposed[0], 1e-9)),
                   topo.world_rank(),
                   buckets));
}
