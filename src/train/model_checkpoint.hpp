// The model's side of the checkpoint schema (DESIGN.md): which hyperslab of each logical tensor
// this rank holds. /model/<name> holds weights, /optimizer/exp_avg/<name> and
// /optimizer/exp_avg_sq/<name> the AdamW moments. Replicated tensors are written by TP rank 0
// only; a vocabulary-padded embedding writes only its real rows.
#pragma once

#include <string>
#include <vector>

#include "io/checkpoint_file.hpp"
#include "src/model/parameter.hpp"

namespace tptrain::train {

// Rank-local slabs of `p` in the full logical tensor, in local storage order.
template <class T>
std::vector<io::Hyperslab> slabs_of(const model::Parameter<T>& p) {
  const std::vector<std::int64_t> local = p.local_shape();
  auto u = [](std::int64_t x) { return static_cast<std::uint64_t>(x); };
  std::vector<io::Hyperslab> slabs;
  if (p.replicated()) {
    io::Hyperslab s;
    s.start.assign(p.shape.size(), 0);
    for (std::size_t d = 0; d < p.shape.size(); ++d) s.count.push_back(u(d == 0 ? p.saved_rows : p.shape[d]));
    slabs.push_back(s);
    return slabs;
  }
  const std::size_t dim = static_cast<std::size_t>(p.sharding.dim);
  const std::int64_t block_local = local[dim] / p.sharding.blocks;
  for (int b = 0; b < p.sharding.blocks; ++b) {
    io::Hyperslab s;
    s.start.assign(p.shape.size(), 0);
    s.count.resize(p.shape.size());
    for (std::size_t d = 0; d < p.shape.size(); ++d) s.count[d] = u(d == 0 ? p.saved_rows : p.shape[d]);
    const std::int64_t start = p.logical_index(b * block_local);
    std::int64_t count = block_local;
    if (dim == 0 && start + count > p.saved_rows) count = std::max<std::int64_t>(0, p.saved_rows - start);
    if (count == 0) continue;  // a rank holding only vocabulary padding
    s.start[dim] = u(start);
    s.count[dim] = u(count);
    slabs.push_back(s);
  }
  return slabs;
}

}  // namespace tptrain::train
