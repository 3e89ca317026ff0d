// Checkpoints of a training run: bitwise round trip, resharding between layouts, resumption
// equal to the run that never stopped, newest/prune bookkeeping.
#include <filesystem>
#include <fstream>
#include <mpi.h>
#include <unistd.h>

#include "catch.hpp"
#include "src/checkpoint/model_checkpoint.hpp"
#include "src/data/batch_sampler.hpp"
#include "src/data/data_blend.hpp"
#include "tests/model/model_test_util.hpp"
#include "tests/train/train_test_util.hpp"

using namespace tptrain;
namespace fs = std::filesystem;

namespace {

std::string checkpoint_section(const std::string& dir) {
  return "[checkpoint]\ndir = \"" + dir + "\"\nkeep = 2\n";
}

// Logical values of every weight (and moments) of a run, for comparisons across layouts.
// Logical fp32 master weights (the weights of an fp32 run) and moments of a run of any precision.
template <class T>
std::vector<std::vector<double>> logical_state(model::GptModel<T>& m, parallel::Communicator& tp, bool moments) {
  std::vector<std::vector<double>> out;
  for (auto* p : m.parameters()) {
    out.push_back(test::logical_of(*p, p->master, tp));
    if (moments) {
      out.push_back(test::logical_of(*p, p->exp_avg, tp));
      out.push_back(test::logical_of(*p, p->exp_avg_sq, tp));
    }
  }
  return out;
}

}  // namespace

TEST_CASE("checkpoint round trip is bitwise, and loads under every other layout", "[train][checkpoint][mpi]") {
  const int n = test::world_size();
  test::SharedTempDir dir;
  const std::string extra = checkpoint_section(dir.path());
  // Save after 3 steps with every (tensor, data) layout of the world, and with one rank.
  for (int save_tp = 1; save_tp <= n; save_tp *= 2) {
    if (n % save_tp != 0) continue;
    const io::Deck deck = test::small_deck(save_tp, n / save_tp, 3, extra);
    parallel::Topology topo(MPI_COMM_WORLD, parallel::Layout{save_tp, 1, n / save_tp});
    train::TrainingRun run(deck, topo);
    for (int s = 0; s < 3; ++s) run.step(s);
    checkpoint::save_checkpoint(run.model(), deck, topo, 3, 0);
    const std::string file = checkpoint::checkpoint_path(dir.path(), 3);
    const auto saved = logical_state(run.model(), topo.tp(), true);
    const double saved_eval = run.evaluate();

    for (int load_tp = 1; load_tp <= n; load_tp *= 2) {
      if (n % load_tp != 0) continue;
      INFO("saved with tensor " << save_tp << ", loaded with tensor " << load_tp);
      const io::Deck deck2 = test::small_deck(load_tp, n / load_tp, 3, extra);
      parallel::Topology topo2(MPI_COMM_WORLD, parallel::Layout{load_tp, 1, n / load_tp});
      train::TrainingRun run2(deck2, topo2);
      const io::CheckpointMeta meta = checkpoint::load_weights(run2.model(), topo2, file, true);
      CHECK(meta.step == 3);
      CHECK(meta.tp == save_tp);
      CHECK(logical_state(run2.model(), topo2.tp(), true) == saved);  // bitwise
      CHECK(std::fabs(run2.evaluate() - saved_eval) <= 1e-5 * saved_eval);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

// Checkpoints hold the vocab_size logical rows of the word embedding, never the padding: one
// written with the old padding (a multiple of the tensor size, vocab_pad_multiple = 1) loads
// under the default 128, with every layout, bitwise and with the same evaluation loss.
// vocab_size 257 (the byte corpus needs 256) pads to 257 or 258 rows with the old rule, and to
// 384 or 512 with the new one.
TEST_CASE("a checkpoint written with another vocabulary padding loads with the same eval loss",
          "[train][checkpoint][mpi]") {
  const int n = test::world_size();
  test::SharedTempDir dir;
  const std::string extra = checkpoint_section(dir.path());
  const auto deck_of = [&](int tensor, int pad) {
    io::Deck d = test::small_deck(tensor, n / tensor, 3, extra);
    d.model.vocab_size = 257;
    d.model.vocab_pad_multiple = pad;
    return d;
  };
  for (int save_tp = 1; save_tp <= n; save_tp *= 2) {
    if (n % save_tp != 0) continue;
    const io::Deck deck = deck_of(save_tp, 1);
    parallel::Topology topo(MPI_COMM_WORLD, parallel::Layout{save_tp, 1, n / save_tp});
    train::TrainingRun run(deck, topo);
    REQUIRE(run.model().shape().padded_vocab() == (257 + save_tp - 1) / save_tp * save_tp);  // 257, 258, 260
    for (int s = 0; s < 3; ++s) run.step(s);
    checkpoint::save_checkpoint(run.model(), deck, topo, 3, 0);
    const std::string file = checkpoint::checkpoint_path(dir.path(), 3);
    const auto saved = logical_state(run.model(), topo.tp(), true);
    const double saved_eval = run.evaluate();
    for (int load_tp = 1; load_tp <= n; load_tp *= 2) {
      if (n % load_tp != 0) continue;
      INFO("saved with tensor " << save_tp << " and the old padding, loaded with tensor " << load_tp
                                << " and vocab_pad_multiple 128");
      const io::Deck deck2 = deck_of(load_tp, 128);
      parallel::Topology topo2(MPI_COMM_WORLD, parallel::Layout{load_tp, 1, n / load_tp});
      train::TrainingRun run2(deck2, topo2);
      const int m = 128 * load_tp;
      REQUIRE(run2.model().shape().padded_vocab() == (257 + m - 1) / m * m);  // 384, 512, 512
      const io::CheckpointMeta meta = checkpoint::load_weights(run2.model(), topo2, file, true);
      CHECK(meta.step == 3);
      CHECK(logical_state(run2.model(), topo2.tp(), true) == saved);  // bitwise
      const double eval = run2.evaluate();
      INFO("eval loss saved " << saved_eval << ", loaded " << eval);
      CHECK(std::fabs(eval - saved_eval) <= 1e-5 * saved_eval);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

TEST_CASE("a model shape that differs from the checkpoint is refused by name", "[train][checkpoint][mpi]") {
  const int n = test::world_size();
  test::SharedTempDir dir;
  const io::Deck deck = test::small_deck(n, 1, 2, checkpoint_section(dir.path()));
  parallel::Topology topo(MPI_COMM_WORLD, parallel::Layout{n, 1, 1});
  train::TrainingRun run(deck, topo);
  checkpoint::save_checkpoint(run.model(), deck, topo, 1, 0);
  io::Deck wider = deck;
  wider.model.ffn_hidden = 128;
  train::TrainingRun other(wider, topo);
  CHECK_THROWS_WITH(checkpoint::load_weights(other.model(), topo, checkpoint::checkpoint_path(dir.path(), 1)),
                    test::contains("holds a different model") &&
                        test::contains("model.ffn_hidden: the checkpoint has 64, the deck has 128"));
  // Shapes that give the same tensors are told apart too: 8 heads of 4 or 4 heads of 8 have
  // the same QKV weight, and fewer layers would silently read the first layers of a deeper model.
  const auto refused = [&](io::Deck changed, const std::string& message) {
    train::TrainingRun same_tensors(changed, topo);
    CHECK_THROWS_WITH(checkpoint::load_weights(same_tensors.model(), topo, checkpoint::checkpoint_path(dir.path(), 1)),
                      test::contains(message));
  };
  io::Deck more_heads = deck, fewer_layers = deck;
  more_heads.model.heads = 8;
  fewer_layers.model.layers = 1;
  refused(more_heads, "model.heads: the checkpoint has 4, the deck has 8");
  refused(fewer_layers, "model.layers: the checkpoint has 2, the deck has 1");
}

TEST_CASE("resuming after step k gives the loss curve of the run that never stopped", "[train][resume][mpi]") {
  const int n = test::world_size();
  test::SharedTempDir dir;
  const int steps = 8, k = 3;
  const io::Deck deck = test::small_deck(n, 1, steps, checkpoint_section(dir.path()));
  const auto straight = test::loss_curve(deck, MPI_COMM_WORLD, steps);

  parallel::Topology topo(MPI_COMM_WORLD, parallel::Layout{n, 1, 1});
  {
    train::TrainingRun first(deck, topo);
    for (int s = 0; s < k; ++s) CHECK(first.step(s).loss == straight[static_cast<std::size_t>(s)]);
    checkpoint::save_checkpoint(first.model(), deck, topo, k, 0);
  }
  train::TrainingRun second(deck, topo);
  const std::string latest = checkpoint::newest_checkpoint(MPI_COMM_WORLD, dir.path());
  REQUIRE(latest == checkpoint::checkpoint_path(dir.path(), k));
  CHECK(checkpoint::load_weights(second.model(), topo, latest, true).step == k);
  for (int s = k; s < steps; ++s) CHECK(second.step(s).loss == straight[static_cast<std::size_t>(s)]);  // bit for bit
}

// Issue 49: data_share and data_epochs after a resume count what was drawn, before and after a
// change of the blend, not the new blend's draws from step 0; and the changes are named.
TEST_CASE("a resume continues the blend's draw counts from the checkpoint; a changed blend counts from there on",
          "[train][resume][blend][mpi]") {
  const int n = test::world_size();
  test::SharedTempDir dir;
  const int steps = 6, k = 2;
  io::Deck deck = test::small_deck(n, 1, steps, checkpoint_section(dir.path()));
  const std::string a = deck.data.train.sources.at(0).path, b = deck.data.valid.sources.at(0).path;
  deck.data.train.sources = {{a, 3.0}, {b, 4.0}};
  io::Deck changed = deck;
  changed.data.train.sources = {{a, 1.0}, {b, 99.0}};
  parallel::Topology topo(MPI_COMM_WORLD, parallel::Layout{n, 1, 1});
  const std::int64_t batch = deck.training.global_batch;

  train::TrainingRun first(deck, topo);
  const train::TrainingRun<float>::DataUse straight = first.data_use(steps);
  const io::BlendRecord record = first.data_record(k);
  REQUIRE(record.entries.size() == 2);
  CHECK(record.entries[0].path == a);
  CHECK(record.entries[1].weight == 4.0);
  CHECK(record.sequences == k * batch);
  CHECK(record.entries[0].drawn + record.entries[1].drawn == k * batch);
  checkpoint::save_checkpoint(first.model(), deck, topo, k, 0, {}, record);
  const std::string file = checkpoint::checkpoint_path(dir.path(), k);

  // The same blend: the counts of the run that never stopped.
  train::TrainingRun same(deck, topo);
  const io::CheckpointMeta meta = checkpoint::load_weights(same.model(), topo, file, true);
  CHECK(meta.blend == record);
  CHECK(same.resume_data_use(meta.blend, k).empty());
  CHECK(same.data_use(steps).share == straight.share);
  CHECK(same.data_use(steps).epochs == straight.epochs);

  // 3:4 -> 1:99: the checkpoint's counts, then the new blend's draws of steps k .. steps-1,
  // counted here by a sampler of the new blend alone.
  train::TrainingRun resumed(changed, topo);
  CHECK(resumed.resume_data_use(meta.blend, k) ==
        std::vector<std::string>{"data.train[0] \"" + a + "\": weight 3 -> 1",
                                 "data.train[1] \"" + b + "\": weight 4 -> 99"});
  const data::DataBlend blend = data::DataBlend::open(changed.data.train, "data.train", 256);
  const data::BatchSampler sampler(blend, changed.model.seq_length, static_cast<int>(batch),
                                   changed.training.micro_batch, 0, 1, changed.training.seed);
  std::vector<std::int64_t> want = {record.entries[0].drawn, record.entries[1].drawn};
  for (std::int64_t s = k; s < steps; ++s) sampler.count_datasets(s, want);
  const train::TrainingRun<float>::DataUse use = resumed.data_use(steps);
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK(use.share[i] == static_cast<double>(want[i]) / static_cast<double>(steps * batch));
    CHECK(use.epochs[i] == static_cast<double>(want[i]) * changed.model.seq_length /
                               static_cast<double>(blend.dataset(i).size()));
  }
  CHECK(use.share != straight.share);  // the new weights did count from step k on

  // A checkpoint without a record (from before it): nothing to compare, the counts from step 0
  // under the deck's blend.
  train::TrainingRun old(changed, topo);
  CHECK(old.resume_data_use(io::BlendRecord{}, k).empty());
  std::vector<std::int64_t> from_zero;
  for (std::int64_t s = 0; s < steps; ++s) sampler.count_datasets(s, from_zero);
  CHECK(old.data_use(steps).share[1] == static_cast<double>(from_zero[1]) / static_cast<double>(steps * batch));
}

namespace {

// Rank 0 writes an empty checkpoint (metadata only) of step `step` with /train/run_id = `run_id`
// (none for 0: a checkpoint of an older tptrain).
void labelled_checkpoint(const std::string& dir, std::int64_t step, std::int64_t run_id) {
  if (test::world_rank() != 0) return;
  io::CheckpointMeta meta;
  meta.step = step;
  meta.deck = "[model]\n";
  meta.train = {{"step", step}};
  if (run_id != 0) meta.train[checkpoint::kRunIdAttribute] = run_id;
  io::write_checkpoint(MPI_COMM_SELF, checkpoint::checkpoint_path(dir, step), meta, {});
}

}  // namespace

TEST_CASE("newest complete checkpoint ignores temporaries; pruning keeps the newest", "[train][checkpoint][mpi]") {
  test::SharedTempDir dir;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  CHECK(checkpoint::newest_checkpoint(MPI_COMM_WORLD, dir.path()).empty());
  for (int step : {2, 10, 9}) labelled_checkpoint(dir.path(), step, 7);
  if (rank == 0)
    for (const char* name : {"step_00000011.h5.tmp", "notes.txt"}) std::ofstream(fs::path(dir.path()) / name) << "x";
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(checkpoint::newest_checkpoint(MPI_COMM_WORLD, dir.path()) == checkpoint::checkpoint_path(dir.path(), 10));
  checkpoint::prune_checkpoints(MPI_COMM_WORLD, dir.path(), 2, checkpoint::RunIdentity{7, false});
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK_FALSE(fs::exists(fs::path(dir.path()) / "step_00000002.h5"));
  CHECK(fs::exists(fs::path(dir.path()) / "step_00000009.h5"));
  CHECK(fs::exists(fs::path(dir.path()) / "step_00000010.h5"));
  CHECK(fs::exists(fs::path(dir.path()) / "step_00000011.h5.tmp"));  // not ours to delete
}

// Issue 30: a second run in the same checkpoint.dir (another seed, steps 1-3) used to rotate
// away as "older" the first run's steps 8-10, or they its own. Only the writing run's own
// checkpoints (by /train/run_id) count for checkpoint.keep.
TEST_CASE("pruning deletes only the checkpoints of the run that writes", "[train][checkpoint][mpi]") {
  test::SharedTempDir dir;
  for (int step : {8, 9, 10}) labelled_checkpoint(dir.path(), step, 111);  // another run, newer steps
  labelled_checkpoint(dir.path(), 4, 0);                                     // an older tptrain's
  for (int step : {1, 2, 3}) labelled_checkpoint(dir.path(), step, 222);
  if (test::world_rank() == 0) std::ofstream(checkpoint::checkpoint_path(dir.path(), 5)) << "not HDF5";
  MPI_Barrier(MPI_COMM_WORLD);
  checkpoint::prune_checkpoints(MPI_COMM_WORLD, dir.path(), 2, checkpoint::RunIdentity{222, false});
  MPI_Barrier(MPI_COMM_WORLD);
  const auto exists = [&](std::int64_t step) { return fs::exists(checkpoint::checkpoint_path(dir.path(), step)); };
  CHECK_FALSE(exists(1));
  for (int step : {2, 3, 4, 5, 8, 9, 10}) CHECK(exists(step));  // 5: unreadable, so not known to be ours
  // A run resumed from a checkpoint without an id owns those too (it continues that run).
  labelled_checkpoint(dir.path(), 6, 333);
  MPI_Barrier(MPI_COMM_WORLD);
  checkpoint::prune_checkpoints(MPI_COMM_WORLD, dir.path(), 1, checkpoint::RunIdentity{333, true});
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK_FALSE(exists(4));
  for (int step : {2, 3, 6, 8, 9, 10}) CHECK(exists(step));
  // The run ids: a new run draws one (the same on every rank, positive); a resumed run keeps its
  // checkpoint's.
  const checkpoint::RunIdentity fresh = checkpoint::new_run_identity(MPI_COMM_WORLD);
  CHECK(fresh.id > 0);
  std::int64_t lo = fresh.id, hi = fresh.id;
  MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  CHECK(lo == hi);
  CHECK(checkpoint::new_run_identity(MPI_COMM_WORLD).id != fresh.id);
  const checkpoint::RunIdentity resumed = checkpoint::resumed_run_identity(MPI_COMM_WORLD, {{"step", 3}, {"run_id", 222}});
  CHECK(resumed.id == 222);
  CHECK_FALSE(resumed.owns_unlabelled);
  CHECK(checkpoint::resumed_run_identity(MPI_COMM_WORLD, {{"step", 3}}).owns_unlabelled);
}

TEST_CASE("steps of nine and more digits are checkpoints too, ordered by number", "[train][checkpoint][mpi]") {
  test::SharedTempDir dir;
  for (std::int64_t step : {std::int64_t{99999999}, std::int64_t{100000000}, std::int64_t{123456789012}})
    labelled_checkpoint(dir.path(), step, 5);
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(checkpoint::checkpoint_path(dir.path(), 100000000) == (fs::path(dir.path()) / "step_100000000.h5").string());
  CHECK(checkpoint::newest_checkpoint(MPI_COMM_WORLD, dir.path()) == checkpoint::checkpoint_path(dir.path(), 123456789012));
  checkpoint::prune_checkpoints(MPI_COMM_WORLD, dir.path(), 1, checkpoint::RunIdentity{5, false});
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK_FALSE(fs::exists(checkpoint::checkpoint_path(dir.path(), 99999999)));
  CHECK_FALSE(fs::exists(checkpoint::checkpoint_path(dir.path(), 100000000)));
  CHECK(fs::exists(checkpoint::checkpoint_path(dir.path(), 123456789012)));
}

TEST_CASE("a checkpoint directory that cannot be listed fails on every rank", "[train][checkpoint][mpi]") {
  test::SharedTempDir dir;
  const std::string not_a_dir = (fs::path(dir.path()) / "file").string();
  if (test::world_rank() == 0) std::ofstream(not_a_dir) << "x";
  MPI_Barrier(MPI_COMM_WORLD);
  // Not "no checkpoint, start from step 0": that would silently discard the run's progress.
  CHECK_THROWS_WITH(checkpoint::newest_checkpoint(MPI_COMM_WORLD, not_a_dir),
                    test::contains("cannot list its checkpoints") && test::contains("Not a directory"));
  CHECK(checkpoint::newest_checkpoint(MPI_COMM_WORLD, not_a_dir + "_missing").empty());  // a new run
}
