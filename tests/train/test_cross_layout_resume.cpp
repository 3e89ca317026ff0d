// Resuming under another layout in bf16 and fp16 (docs/checkpoints.md, "Writing, resuming and
// what protects a run"): the weights, moments and loss-scaler state load bit for bit, and the
// losses that follow stay within 1e-4 relative of the run that never stopped, the tolerance the
// bf16 layouts are already held to
// (tests/train/test_pipeline.cpp; fp32 resumes there within 1e-5). Two layouts differ only in the
// order of their sums and, with tensor parallelism in 16 bits, in where partial sums are rounded
// (each rank rounds its partial sum, where one rank rounds the whole): up to one ulp in some
// activations, which AdamW's first steps at lr 1e-2 amplify. Measured (tensor 2 -> data 2, small
// deck): bf16 6.2e-5, fp16 7.9e-6. A real error (a shard read into the wrong place, a lost
// loss-scaler state) is O(1e-2) or more.
#include <cmath>
#include <string>
#include <vector>

#include "catch.hpp"
#include "src/checkpoint/model_checkpoint.hpp"
#include "tests/train/train_test_util.hpp"

using namespace tptrain;

namespace {

template <class T>
void resume_under_data_parallelism(const std::string& precision) {
  const int n = test::world_size();
  const int steps = 6, k = 3;
  test::SharedTempDir dir;
  const std::string extra = "[checkpoint]\ndir = \"" + dir.path() + "\"\nkeep = 10\n";
  auto deck = [&](int tensor, int data) {
    io::Deck d = test::small_deck(tensor, data, steps, extra);
    d.training.precision = precision;
    d.training.loss_scale_initial = 1024.0;  // fp16: no overflow on this deck, so no skipped step
    d.training.loss_scale_window = 2;        // ... and the scale grows: state that must travel
    return d;
  };
  // Saved with tensor = n, resumed with tensor = 1, data = n.
  const io::Deck saving = deck(n, 1), resuming = deck(1, n);
  parallel::Topology saving_topo(MPI_COMM_WORLD, test::layout_of(saving));
  std::vector<train::StepResult> straight;
  {
    train::TrainingRun<T> run(saving, saving_topo);
    for (int s = 0; s < steps; ++s) {
      straight.push_back(run.step(s));
      if (s + 1 == k) checkpoint::save_checkpoint(run.model(), saving, saving_topo, k, 0, run.train_state());
    }
  }
  parallel::Topology topo(MPI_COMM_WORLD, test::layout_of(resuming));
  train::TrainingRun<T> run(resuming, topo);
  const io::CheckpointMeta meta = checkpoint::load_weights(run.model(), topo, checkpoint::checkpoint_path(dir.path(), k), true);
  CHECK(meta.tp == n);
  run.restore_train_state(meta.train);
  double worst = 0.0;
  for (int s = k; s < steps; ++s) {
    const train::StepResult r = run.step(s);
    const train::StepResult& want = straight[static_cast<std::size_t>(s)];
    const double rel = std::fabs(r.loss - want.loss) / want.loss;
    worst = std::max(worst, rel);
    INFO(precision << ", step " << s + 1 << ": resumed " << r.loss << ", uninterrupted " << want.loss
                   << ", relative difference " << rel);
    CHECK(rel <= 1e-4);
    CHECK_FALSE(r.skipped);
    CHECK(r.loss_scale == want.loss_scale);
  }
  if (test::world_rank() == 0)
    std::printf("%s, tensor %d -> data %d: largest relative loss difference after resuming %.3g\n",
                precision.c_str(), n, n, worst);
}

}  // namespace

TEST_CASE("bf16 and fp16 checkpoints resume under another layout within the layouts' tolerance",
          "[train][mixed][checkpoint][resume][mpi]") {
  if (test::world_size() == 1) return;  // one layout only
  SECTION("bf16") { resume_under_data_parallelism<kx::bf16>("bf16"); }
  SECTION("fp16") { resume_under_data_parallelism<kx::fp16>("fp16"); }
}
