// A model parameter as one tensor-parallel rank holds it: a flat local buffer (value, gradient,
// AdamW moments) plus how it maps into the full logical tensor. The mapping drives
// initialisation (every element is drawn from the seed and its LOGICAL index, so 1-way and
// N-way runs start identical — Megatron's _initialize_affine_weight_cpu idea), checkpoint
// hyperslabs and the gradient-norm bookkeeping.
//
// Mixed precision (Megatron's recipe): the model computes with `value` in the storage type T
// (bf16/fp16); the optimizer owns an fp32 `master` copy and fp32 moments, and gradients
// accumulate in fp32 (Acc = kx::acc_t<T>). After each step the optimizer rounds master into
// value. With T = float (or double) master IS value: one buffer, no copy.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kokkos_kernels/precision.hpp"
#include "kokkos_kernels/views.hpp"

namespace tptrain::model {

// How a logical tensor is split over the TP group. The split dimension is seen as `blocks`
// consecutive blocks, each divided evenly over the ranks; a rank's local tensor is its part of
// every block, block after block. GPT-2's QKV has 3 equal blocks (its Q, K and V rows for the
// rank's heads); llama's QKV 3 unequal ones with grouped-query attention ([Q nh·d | K nkv·d |
// V nkv·d]) and its fc 2 ([gate F | up F]: each rank the same column slice of both).
struct Sharding {
  static constexpr int max_blocks = 3;
  int dim = -1;     // -1: replicated on every TP rank
  int blocks = 1;
  std::int64_t extent[max_blocks] = {0, 0, 0};  // logical extent of each block along dim

  // `extents` empty: `blocks` equal blocks of `global` (the logical extent of dim).
  static Sharding of(int dim, int blocks, const std::vector<std::int64_t>& extents, std::int64_t global) {
    Sharding s;
    s.dim = dim;
    s.blocks = blocks;
    if (blocks < 1 || blocks > max_blocks || (!extents.empty() && extents.size() != std::size_t(blocks)))
      throw std::logic_error("tptrain: a tensor split into " + std::to_string(blocks) + " blocks (at most " +
                             std::to_string(max_blocks) + ")");
    for (int b = 0; b < blocks; ++b) s.extent[b] = extents.empty() ? global / blocks : extents[std::size_t(b)];
    return s;
  }
  // A rank's index `local` along dim (of tp_size ranks) → the logical index.
  KOKKOS_INLINE_FUNCTION std::int64_t logical_index(std::int64_t local, std::int64_t tp_rank,
                                                    std::int64_t tp_size) const {
    std::int64_t start = 0;
    for (int b = 0; b < blocks && b < max_blocks; ++b) {
      const std::int64_t here = extent[b] / tp_size;
      if (local < here || b == blocks - 1) return start + tp_rank * here + local;
      local -= here;
      start += extent[b];
    }
    return start + local;
  }
  // The local index one past the end of the block that holds local index `local`.
  KOKKOS_INLINE_FUNCTION std::int64_t local_block_end(std::int64_t local, std::int64_t tp_size) const {
    std::int64_t end = 0;
    for (int b = 0; b < blocks && b < max_blocks; ++b) {
      end += extent[b] / tp_size;
      if (local < end) return end;
    }
    return end;
  }
};

template <class T>
struct Parameter {
  using Acc = kx::acc_t<T>;
  std::string name;                    // checkpoint path under /model, e.g. "layers/0/ln_1/weight"
  std::vector<std::int64_t> shape;     // full logical shape; 1-D or 2-D
  std::int64_t saved_rows = 0;         // rows that exist logically (< shape[0] for padded vocab)
  Sharding sharding;
  int tp_rank = 0;
  int tp_size = 1;
  bool weight_decay = false;           // AdamW decays 2-D weights, not biases or LayerNorm
  float init_std = 0.0f;               // 0: constant init_const
  float init_const = 0.0f;
  // Sequence parallelism: a replicated parameter that acts on this rank's tokens only
  // (LayerNorm, row-parallel bias): its gradient is summed over the TP group once the
  // micro-batches are done (Megatron's `sequence_parallel` parameter attribute).
  bool sequence_parallel_gradient = false;

  kernels::Vector<T> value;                               // flat local storage, compute copy
  kernels::Vector<Acc> master, grad, exp_avg, exp_avg_sq;  // fp32 (master: value itself if T == Acc)
  // (with a distributed optimizer a separate master and the moments are empty here: the
  // optimizer state is a shard of the bucket's, model::GradBucket)
  static constexpr bool has_master_copy = !std::is_same<T, Acc>::value;

  bool replicated() const { return sharding.dim < 0; }
  std::int64_t rows() const { return local_shape()[0]; }
  std::int64_t cols() const { return shape.size() > 1 ? local_shape()[1] : 1; }
  std::int64_t local_size() const { return rows() * cols(); }
  std::vector<std::int64_t> local_shape() const {
    std::vector<std::int64_t> s = shape;
    if (!replicated()) s[static_cast<std::size_t>(sharding.dim)] /= tp_size;
    return s;
  }
  // Local row r (or column for a column split) → logical index along the split dimension.
  std::int64_t logical_index(std::int64_t local) const { return sharding.logical_index(local, tp_rank, tp_size); }

  template <class U>
  kernels::MatrixUnmanaged<U> matrix(const kernels::Vector<U>& v) const {
    return kernels::MatrixUnmanaged<U>(v.data(), rows(), cols());
  }
  // The local value, gradient and master weights as a [rows, cols] matrix or a flat vector.
  kernels::MatrixUnmanaged<T> value_matrix() const { return matrix(value); }
  kernels::MatrixUnmanaged<Acc> grad_matrix() const { return matrix(grad); }
  kernels::VectorUnmanaged<T> value_vector() const { return kernels::VectorUnmanaged<T>(value.data(), local_size()); }
  kernels::VectorUnmanaged<Acc> grad_vector() const { return kernels::VectorUnmanaged<Acc>(grad.data(), local_size()); }
  kernels::VectorUnmanaged<Acc> master_vector() const { return kernels::VectorUnmanaged<Acc>(master.data(), local_size()); }
};

// Draws the initial value into the allocated p.value; allocate_and_initialise allocates
// value/grad/moments (zeroed) first.
template <class T>
void initialise(Parameter<T>& p, std::uint64_t seed);
template <class T>
void allocate_and_initialise(Parameter<T>& p, std::uint64_t seed);

}  // namespace tptrain::model

#include "src/model/parameter_init.hpp"
