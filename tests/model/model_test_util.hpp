// Helpers for model tests: TP groups carved out of the test's world, logical (unsharded) views
// of parameters for comparing layouts, deterministic test inputs.
#pragma once

#include <mpi.h>
#include <memory>
#include <random>
#include <vector>

#include "src/model/gpt_model.hpp"
#include "src/parallel/mpi_communicator.hpp"
#include "tests/mpi_test_util.hpp"

namespace tptrain::test {

// Groups of `tp` consecutive world ranks (tp must divide the world size).
inline std::unique_ptr<parallel::Communicator> tp_group(int tp) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm comm;
  MPI_Comm_split(MPI_COMM_WORLD, rank / tp, rank % tp, &comm);
  return parallel::make_communicator(comm);
}

inline model::GptShape tiny_shape(int tp) {
  model::GptShape s;
  s.layers = 2;
  s.hidden = 16;
  s.heads = 4;
  s.ffn_hidden = 32;
  s.seq_length = 5;
  s.vocab_size = 11;  // not a multiple of 2 or 4: exercises vocabulary padding
  s.tensor = tp;
  return s;
}

// Re-draws every parameter from N(0, stddev) (layout independent: by logical index), so that
// gradient checks see a well-conditioned, non-trivial network rather than GPT-2's small init.
template <class T>
void randomise(model::GptModel<T>& m, float stddev, std::uint64_t seed) {
  for (auto* p : m.parameters()) {  // drawn in place: the views stay slices of the model's buckets
    p->init_std = stddev;
    model::initialise(*p, seed);
  }
}

// The full logical tensor (saved rows only) of a parameter's value or gradient, on every rank
// of the TP group: each rank places its elements at their logical positions, replicated
// tensors come from TP rank 0 only, and a sum over the group assembles the whole. `v`: one of
// p's buffers (value, master, grad, a moment).
template <class T, class V>
std::vector<double> logical_of(const model::Parameter<T>& p, const V& v, parallel::Communicator& tp) {
  const std::int64_t cols_global = p.shape.size() > 1 ? p.shape[1] : 1;
  std::vector<double> full(static_cast<std::size_t>(p.saved_rows * cols_global), 0.0);
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  if (!p.replicated() || tp.rank() == 0) {
    for (std::int64_t r = 0; r < p.rows(); ++r)
      for (std::int64_t c = 0; c < p.cols(); ++c) {
        std::int64_t gr = r, gc = c;
        if (p.sharding.dim == 0) gr = p.logical_index(r);
        if (p.sharding.dim == 1) gc = p.logical_index(c);
        if (gr >= p.saved_rows) continue;
        full[static_cast<std::size_t>(gr * cols_global + gc)] = static_cast<double>(h(r * p.cols() + c));
      }
  }
  MPI_Allreduce(MPI_IN_PLACE, full.data(), static_cast<int>(full.size()), MPI_DOUBLE, MPI_SUM, tp.mpi_comm());
  return full;
}
template <class T>
std::vector<double> logical(const model::Parameter<T>& p, bool gradient, parallel::Communicator& tp) {
  return gradient ? logical_of(p, p.grad, tp) : logical_of(p, p.value, tp);
}

// Tokens and targets of a [B, S] batch drawn from `seed`.
inline std::pair<kernels::Tokens, kernels::Tokens> random_batch(int B, int S, int vocab, unsigned seed) {
  std::mt19937 gen(seed);
  kernels::Tokens x("x", B * S), y("y", B * S);
  auto hx = Kokkos::create_mirror_view(x);
  auto hy = Kokkos::create_mirror_view(y);
  for (int i = 0; i < B * S; ++i) {
    hx(i) = static_cast<int>(gen() % static_cast<unsigned>(vocab));
    hy(i) = static_cast<int>(gen() % static_cast<unsigned>(vocab));
  }
  Kokkos::deep_copy(x, hx);
  Kokkos::deep_copy(y, hy);
  return {x, y};
}

// The tokens grouped by id, as train::MicroBatchQueue groups a micro-batch's inputs for
// the word-embedding gradient.
inline kernels::TokenSegments segments_of(const kernels::Tokens& tokens) {
  const auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), tokens);
  const auto n = static_cast<std::int64_t>(tokens.extent(0));
  kernels::TokenSegments segments(n);
  segments.build(kx::ExecSpace(), host.data(), n);
  return segments;
}

}  // namespace tptrain::test
