// The distributed optimizer (optimizer.distributed, ZeRO-1): the checkpoint slabs of a range of
// a parameter's local elements, the same training as plain data parallelism, the memory it
// saves, and checkpoints that move between runs with and without it.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <mpi.h>
#include <vector>

#include "catch.hpp"
#include "src/checkpoint/model_checkpoint.hpp"
#include "src/train/training_run.hpp"
#include "tests/train/per_parameter_optimizer.hpp"
#include "tests/train/train_test_util.hpp"

using namespace tptrain;

namespace {

struct LayoutCase {
  int tensor, pipeline, data;
  int shard_group = 0;  // hybrid sharding (parallel.shard_group)
};

// The layouts of the issue that fit the world, each with data > 1 unless the world is one rank.
std::vector<LayoutCase> layouts_of_world() {
  const int n = test::world_size();
  if (n == 1) return {{1, 1, 1}};
  std::vector<LayoutCase> fit{{1, 1, n}};
  if (n == 4) {
    fit.push_back({2, 1, 2});
    fit.push_back({1, 2, 2});
    fit.push_back({1, 1, 4, 2});  // hybrid: shard groups of 2, 2 replicas (the second writes no checkpoint)
  }
  return fit;
}

io::Deck deck_of(const LayoutCase& l, bool distributed, const std::string& precision, int steps,
                 const std::string& extra = "") {
  io::Deck deck = test::pipeline_deck(l.tensor, l.pipeline, l.data, steps, 8, extra);
  deck.optimizer.distributed = distributed;
  deck.optimizer.shard = distributed ? "optimizer" : "none";
  deck.parallel.shard_group = l.shard_group;
  deck.training.precision = precision;
  return deck;
}

parallel::Layout layout_of(const io::Deck& deck) {
  parallel::Layout layout{deck.parallel.tensor, deck.parallel.pipeline, deck.parallel.data};
  layout.shard_group = deck.parallel.shard_group;
  return layout;
}

// Logical index (row * logical columns + column) of local element i of p; -1 for a vocabulary
// padding row. Element by element, independent of slabs_of.
template <class T>
std::int64_t logical_element(const model::Parameter<T>& p, std::int64_t i) {
  std::int64_t row = i / p.cols(), col = i % p.cols();
  if (p.sharding.dim == 0) row = p.logical_index(row);
  if (p.sharding.dim == 1) col = p.logical_index(col);
  if (row >= p.saved_rows) return -1;
  return row * (p.shape.size() > 1 ? p.shape[1] : 1) + col;
}

// The optimizer state of a whole model as logical tensors, assembled over the world from what
// each rank's buckets hold (its shard, or everything without a distributed optimizer):
// name -> {master, exp_avg, exp_avg_sq}, each of the tensor's logical size. An element that no
// rank holds stays NaN. The last stage's tied copy of the word embedding is left out (the first
// stage's is the one of record).
using State = std::map<std::string, std::vector<std::vector<double>>>;

template <class T>
State logical_state(model::GptModel<T>& m) {
  constexpr double none = -std::numeric_limits<double>::infinity();
  State state;
  for (const auto& t : model::logical_tensors(m.shape())) {
    std::int64_t size = 1;
    for (auto d : t.shape) size *= d;
    state[t.name].assign(3, std::vector<double>(static_cast<std::size_t>(size), none));
  }
  for (const auto& b : m.buckets()) {
    const std::vector<Kokkos::View<float*, Kokkos::HostSpace>> held{
        Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b.master),
        Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b.exp_avg),
        Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b.exp_avg_sq)};
    std::int64_t offset = 0;
    for (const model::Parameter<T>* p : b.params) {
      for (std::int64_t f = std::max(offset, b.shard_begin); f < std::min(offset + p->local_size(), b.shard_end);
           ++f) {
        const std::int64_t l = logical_element(*p, f - offset);
        if (l < 0 || m.is_tied_copy(p)) continue;
        for (std::size_t k = 0; k < 3; ++k)
          state[p->name][k][static_cast<std::size_t>(l)] = static_cast<double>(held[k](static_cast<std::size_t>(f - b.shard_begin)));
      }
      offset += p->local_size();
    }
  }
  for (auto& [name, tensors] : state)
    for (auto& v : tensors) {
      MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      for (double& x : v)
        if (x == none) x = std::nan("");
    }
  return state;
}

// Every element of every tensor: |got - want| <= tol (0: bitwise; NaN, an element nobody
// holds, never passes).
void check_state(const State& got, const State& want, double tol) {
  REQUIRE(got.size() == want.size());
  static const char* kinds[] = {"master", "exp_avg", "exp_avg_sq"};
  for (const auto& [name, tensors] : want)
    for (std::size_t k = 0; k < 3; ++k) {
      const auto& w = tensors[k];
      const auto& g = got.at(name)[k];
      std::size_t bad = 0;
      double worst = 0;
      for (std::size_t i = 0; i < w.size(); ++i) {
        const double d = std::fabs(g[i] - w[i]);
        if (!(d <= tol)) ++bad;
        if (d > worst) worst = d;
      }
      INFO(name << " " << kinds[k] << ": " << bad << " of " << w.size() << " elements differ, by up to " << worst);
      CHECK(bad == 0);
    }
}

// The compute copy (values) of every parameter this rank holds: equal to the master rounded.
template <class T>
void check_values_are_rounded_masters(model::GptModel<T>& m, const State& state) {
  for (const model::Parameter<T>* p : m.parameters()) {
    auto v = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p->value);
    const auto& master = state.at(p->name)[0];
    std::size_t wrong = 0;
    for (std::int64_t i = 0; i < p->local_size(); ++i) {
      const std::int64_t l = logical_element(*p, i);
      const float want = l < 0 ? 0.0f : static_cast<float>(T(static_cast<float>(master[static_cast<std::size_t>(l)])));
      wrong += static_cast<float>(v(static_cast<std::size_t>(i))) != want;
    }
    INFO(p->name << (m.is_tied_copy(p) ? " (tied copy)" : ""));
    CHECK(wrong == 0);
  }
}

}  // namespace

TEST_CASE("a split of unequal blocks gives each rank its slice of every block", "[train][checkpoint][zero]") {
  // Llama's QKV with 4 query heads and 2 key/value heads of d = 2: [Q 8 | K 4 | V 4] rows over 2 ranks.
  const model::Sharding s = model::Sharding::of(0, 3, {8, 4, 4}, 16);
  const std::vector<std::int64_t> rank0{0, 1, 2, 3, 8, 9, 12, 13}, rank1{4, 5, 6, 7, 10, 11, 14, 15};
  for (std::int64_t i = 0; i < 8; ++i) {
    CHECK(s.logical_index(i, 0, 2) == rank0[std::size_t(i)]);
    CHECK(s.logical_index(i, 1, 2) == rank1[std::size_t(i)]);
  }
  CHECK(s.local_block_end(0, 2) == 4);
  CHECK(s.local_block_end(4, 2) == 6);
  CHECK(s.local_block_end(7, 2) == 8);
  CHECK_THROWS_AS(model::Sharding::of(0, 4, {}, 16), std::logic_error);  // more blocks than a Sharding holds
}

TEST_CASE("slabs of a range of local elements are those elements, in storage order", "[train][checkpoint][zero]") {
  // Parameters of every kind of split, each on every TP rank, over every range [begin, end).
  struct Kind {
    std::vector<std::int64_t> shape;
    std::int64_t saved_rows;
    model::Sharding sharding;
  };
  const auto split = [](int dim, int blocks, std::int64_t global, std::vector<std::int64_t> extents = {}) {
    return model::Sharding::of(dim, blocks, extents, global);
  };
  const std::vector<Kind> kinds{
      {{6, 4}, 6, {}},                     // replicated (LayerNorm-like 2-D stand-in)
      {{5}, 5, {}},                        // replicated 1-D
      {{12, 4}, 12, split(0, 3, 12)},      // QKV weight: three row blocks
      {{12}, 12, split(0, 3, 12)},         // QKV bias
      {{16, 4}, 16, split(0, 3, 16, {8, 4, 4})},  // llama's QKV with grouped-query attention: [Q | K | V] unequal
      {{8, 4}, 8, split(0, 2, 8)},         // llama's gate and up
      {{8, 3}, 7, split(0, 1, 8)},         // word embedding with one padding row
      {{4, 8}, 4, split(1, 1, 8)},         // row-parallel weight: columns split
      {{3, 12}, 3, split(1, 3, 12)},       // columns split in three blocks (no such layer; the general case)
      {{3, 16}, 3, split(1, 3, 16, {4, 8, 4})},  // and in unequal ones
  };
  for (const Kind& k : kinds)
    for (int tp_size : {1, 2, 4}) {
      bool divides = true;
      for (int b = 0; b < k.sharding.blocks && k.sharding.dim >= 0; ++b) divides = divides && k.sharding.extent[b] % tp_size == 0;
      if (!divides) continue;
      for (int tp_rank = 0; tp_rank < tp_size; ++tp_rank) {
        model::Parameter<float> p;
        p.name = "p";
        p.shape = k.shape;
        p.saved_rows = k.saved_rows;
        p.sharding = k.sharding;
        p.tp_rank = tp_rank;
        p.tp_size = tp_size;
        const std::int64_t n = p.local_size();
        for (std::int64_t begin = 0; begin <= n; ++begin)
          for (std::int64_t end = begin; end <= n; ++end) {
            std::vector<std::int64_t> want;  // logical indices of the range's saved elements
            for (std::int64_t i = begin; i < end; ++i)
              if (const std::int64_t l = logical_element(p, i); l >= 0) want.push_back(l);
            std::vector<std::int64_t> got;  // the slabs' elements, slab after slab, row-major
            const std::int64_t cols = p.shape.size() > 1 ? p.shape[1] : 1;
            for (const io::Hyperslab& s : checkpoint::slabs_of(p, begin, end)) {
              const auto c0 = s.start.size() > 1 ? static_cast<std::int64_t>(s.start[1]) : 0;
              const auto nc = s.count.size() > 1 ? static_cast<std::int64_t>(s.count[1]) : 1;
              for (std::int64_t r = 0; r < static_cast<std::int64_t>(s.count[0]); ++r)
                for (std::int64_t c = 0; c < nc; ++c)
                  got.push_back((static_cast<std::int64_t>(s.start[0]) + r) * cols + c0 + c);
            }
            INFO("shape [" << k.shape[0] << (k.shape.size() > 1 ? ", " + std::to_string(k.shape[1]) : "")
                           << "], split dim " << k.sharding.dim << " in " << k.sharding.blocks << " blocks, tp rank "
                           << tp_rank << " of " << tp_size << ", elements [" << begin << ", " << end << ")");
            REQUIRE(got == want);
          }
      }
    }
}

// Measured with Open MPI on 1, 2 and 4 ranks: bitwise equal (a reduce-scatter of two adds as an
// all-reduce does, and with data 4 this library adds in the same order too; the bucket holding a
// tied word embedding is all-reduced either way). A library whose reduce-scatter adds in another
// order than its all-reduce would show here first in elements driven by rounding noise alone (the
// K part of the QKV bias, whose exact gradient is zero: AdamW turns noise into steps of lr).
TEST_CASE("distributed optimizer: the weights and moments of plain data parallelism after 20 steps",
          "[train][zero][mpi]") {
  const int steps = 20;
  for (const auto& l : layouts_of_world())
    for (const std::string precision : {"fp32", "bf16"}) {
      INFO("tensor " << l.tensor << " x pipeline " << l.pipeline << " x data " << l.data << ", shard group " << l.shard_group << ", " << precision);
      const auto run_state = [&](bool distributed, std::vector<double>& losses) {
        const io::Deck deck = deck_of(l, distributed, precision, steps);
        parallel::Topology topo(MPI_COMM_WORLD, layout_of(deck));
        const auto train = [&](auto& run) {
          for (int s = 0; s < steps; ++s) losses.push_back(run.step(s).loss);
          State state = logical_state(run.model());
          check_values_are_rounded_masters(run.model(), state);
          // The tied copies of the word embedding (first and last stage) stay bit-identical.
          if (l.pipeline > 1 && topo.in_embedding_group()) {
            auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), run.model().word()->value);
            std::vector<double> lo(h.extent(0)), hi;
            for (std::size_t i = 0; i < lo.size(); ++i) lo[i] = static_cast<double>(static_cast<float>(h(i)));
            hi = lo;
            MPI_Allreduce(MPI_IN_PLACE, lo.data(), static_cast<int>(lo.size()), MPI_DOUBLE, MPI_MIN,
                          topo.embedding().mpi_comm());
            MPI_Allreduce(MPI_IN_PLACE, hi.data(), static_cast<int>(hi.size()), MPI_DOUBLE, MPI_MAX,
                          topo.embedding().mpi_comm());
            CHECK(lo == hi);
          }
          return state;
        };
        if (precision == "bf16") {
          train::TrainingRun<kx::bf16> run(deck, topo);
          return train(run);
        }
        train::TrainingRun<float> run(deck, topo);
        return train(run);
      };
      std::vector<double> plain_losses, zero_losses;
      const State plain = run_state(false, plain_losses);
      const State zero = run_state(true, zero_losses);
      for (int s = 0; s < steps; ++s) {
        INFO("step " << s + 1);
        CHECK(std::fabs(zero_losses[static_cast<std::size_t>(s)] - plain_losses[static_cast<std::size_t>(s)]) <=
              1e-6 * plain_losses[static_cast<std::size_t>(s)]);
      }
      check_state(zero, plain, 1e-6);
    }
}

TEST_CASE("distributed optimizer: bytes per parameter 8 + 8/d (fp32) and 6 + 12/d (bf16)", "[train][zero][mpi]") {
  const int n = test::world_size();
  std::vector<LayoutCase> layouts{{1, 1, n}};
  if (n == 4) layouts.push_back({2, 1, 2});  // data = 2 with tensor parallelism
  for (const auto& l : layouts)
    for (const std::string precision : {"fp32", "bf16"}) {
      const double d = l.data;
      INFO("tensor " << l.tensor << " x data " << l.data << ", shard group " << l.shard_group << ", " << precision);
      const auto check = [&](auto& plain, auto& zero) {
        const train::ParameterMemory a = plain.parameter_memory(), z = zero.parameter_memory();
        REQUIRE(a.parameters == z.parameters);
        const bool fp32 = precision == "fp32";
        CHECK(a.per_parameter() == (fp32 ? 16.0 : 18.0));
        // The shards' padding: fewer than d elements per bucket, each at most 16 bytes (weights,
        // gradients, and its share of the master and moments).
        const double padding = 16.0 * (d - 1) * static_cast<double>(zero.model().buckets().size()) /
                               static_cast<double>(z.parameters);
        const double expected = fp32 ? 8 + 8 / d : 6 + 12 / d;
        INFO(z.per_parameter() << " bytes per parameter, expected " << expected << " + padding up to " << padding);
        CHECK(z.per_parameter() >= expected);
        CHECK(z.per_parameter() <= expected + padding);
        CHECK(z.optimizer_shards == l.data);
        // Measured from the buffers: weights and gradients whole, master and moments 1/d.
        CHECK(z.gradient >= a.gradient);
        CHECK(z.optimizer * static_cast<std::size_t>(l.data) == z.gradient * 2);
        CHECK(z.master * static_cast<std::size_t>(l.data) == (fp32 ? 0 : z.gradient));
        // The per-parameter reference AdamW has no whole state to work on: refused by name.
        if (l.data > 1)
          CHECK_THROWS_WITH(test::adamw_step(kx::ExecSpace(), zero.model().parameters(), train::AdamWConfig{}, 1e-3, 1),
                            test::contains("distributed optimizer"));
        // The start-up line says so (with data = 1 there is one shard: nothing to say).
        CHECK((zero.memory_report().find("sharded over " + std::to_string(l.data)) != std::string::npos) ==
              (l.data > 1));
      };
      const io::Deck plain_deck = deck_of(l, false, precision, 2), zero_deck = deck_of(l, true, precision, 2);
      parallel::Topology topo(MPI_COMM_WORLD, layout_of(plain_deck));
      if (precision == "bf16") {
        train::TrainingRun<kx::bf16> plain(plain_deck, topo), zero(zero_deck, topo);
        check(plain, zero);
      } else {
        train::TrainingRun<float> plain(plain_deck, topo), zero(zero_deck, topo);
        check(plain, zero);
      }
    }
}

TEST_CASE("distributed optimizer: its checkpoints load without it, and plain ones load with it",
          "[train][zero][checkpoint][mpi]") {
  const int k = 3;
  test::SharedTempDir dir;
  const std::string extra = "[checkpoint]\ndir = \"" + dir.path() + "\"\nkeep = 10\n";
  int id = 0;
  for (const auto& l : layouts_of_world())
    for (const std::string precision : {"fp32", "bf16"})
      for (const bool save_distributed : {true, false}) {
        if (precision == "bf16" && l.data != test::world_size()) continue;  // bf16: data = world only (time)
        INFO("tensor " << l.tensor << " x pipeline " << l.pipeline << " x data " << l.data << ", shard group " << l.shard_group << ", " << precision
                       << ", saved " << (save_distributed ? "with" : "without") << " the distributed optimizer");
        const int file_step = 100 * ++id + k;
        const std::string file = checkpoint::checkpoint_path(dir.path(), file_step);
        const auto exercise = [&](auto tag) {
          using T = decltype(tag);
          State saved;
          {
            const io::Deck deck = deck_of(l, save_distributed, precision, k, extra);
            parallel::Topology topo(MPI_COMM_WORLD, layout_of(deck));
            train::TrainingRun<T> run(deck, topo);
            for (int s = 0; s < k; ++s) run.step(s);
            saved = logical_state(run.model());
            checkpoint::save_checkpoint(run.model(), deck, topo, file_step, 0);
          }
          // The file holds exactly the state of the run that wrote it, every element: read on
          // one rank as a whole plain model.
          {
            const io::Deck deck = deck_of({1, 1, 1}, false, precision, k, extra);
            parallel::Topology self(MPI_COMM_SELF, parallel::Layout{});
            train::TrainingRun<T> whole(deck, self);
            checkpoint::load_weights(whole.model(), self, file, true);
            State file_state;  // this rank's whole model, element by element (no MPI over the world)
            for (const auto& b : whole.model().buckets()) {
              auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b.master);
              auto m1 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b.exp_avg);
              auto m2 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b.exp_avg_sq);
              std::int64_t offset = 0;
              for (const auto* p : b.params) {
                auto& t = file_state[p->name];
                t.assign(3, std::vector<double>(static_cast<std::size_t>(p->saved_rows * (p->shape.size() > 1 ? p->shape[1] : 1))));
                for (std::int64_t i = 0; i < p->local_size(); ++i) {
                  const std::int64_t l2 = logical_element(*p, i);
                  if (l2 < 0) continue;
                  const auto f = static_cast<std::size_t>(offset + i);
                  t[0][static_cast<std::size_t>(l2)] = h(f);
                  t[1][static_cast<std::size_t>(l2)] = m1(f);
                  t[2][static_cast<std::size_t>(l2)] = m2(f);
                }
                offset += p->local_size();
              }
            }
            check_state(file_state, saved, 0.0);
          }
          // Loaded the other way (with the option if it was saved without, and the reverse), the
          // run holds exactly that state, and its compute copy is the master rounded.
          const io::Deck deck = deck_of(l, !save_distributed, precision, k, extra);
          parallel::Topology topo(MPI_COMM_WORLD, layout_of(deck));
          train::TrainingRun<T> run(deck, topo);
          checkpoint::load_weights(run.model(), topo, file, true);
          const State loaded = logical_state(run.model());
          check_state(loaded, saved, 0.0);
          check_values_are_rounded_masters(run.model(), loaded);
        };
        if (precision == "bf16")
          exercise(kx::bf16{});
        else
          exercise(float{});
      }
}
