// Slab planning for checkpoint transfers: checks a rank's slabs against the tensor and cuts them
// into groups that HDF5 can move in one collective transfer each, and checks that the ranks
// agree on the list of tensors and write every element exactly once.
//
// Why groups: HDF5 pairs the elements of the memory selection and the file selection in the
// order it iterates them, and it iterates a file selection (the union of OR'ed hyperslabs) in
// row-major order of the whole dataset, not slab by slab, while the local buffer is slab after
// slab. The two orders agree when each slab lies entirely after the previous one in row-major
// order (true for row blocks given top to bottom, e.g. the Q, K, V rows of a tensor-parallel
// QKV weight, or a single slab of any shape). So consecutive slabs with that property form one
// group; column blocks of the same rows, or slabs given bottom to top, take one group each.
#pragma once

#include <hdf5.h>
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "io/checkpoint_file.hpp"

namespace tptrain::io::detail {

std::string shape_str(const std::vector<std::uint64_t>& v);
std::vector<hsize_t> to_hsize(const std::vector<std::uint64_t>& v);

// One collective transfer's worth of a rank's slabs and their contiguous part of the buffer.
struct SlabGroup {
  std::vector<std::size_t> slabs;
  std::uint64_t offset = 0;    // first element in TensorShard::data
  std::uint64_t elements = 0;  // elements in all its slabs
};

struct SlabPlan {
  std::vector<SlabGroup> groups;
  std::uint64_t elements = 0;  // in all the slabs this rank moves
};

// Checks one shard and cuts its slabs into groups. `moving`: this rank transfers its slabs
// (false for a replica that another rank writes); `writing`: slabs must not overlap. Returns ""
// or what is wrong.
std::string make_plan(const TensorShard& t, bool moving, bool writing, SlabPlan& plan);

// Collective over comm. Plans every shard, checks that all ranks pass the same path and tensor
// list (names and global shapes, in order), agrees on the number of transfers per tensor
// (`rounds`, the maximum over ranks) and, when writing, that the written element counts add up
// to each tensor's size. Returns this rank's error ("" if none), starting from `error`;
// `rounds` is only meaningful when no rank reports an error.
std::string plan_transfers(MPI_Comm comm, const std::string& path,
                           const std::vector<TensorShard>& tensors, bool writing,
                           std::vector<SlabPlan>& plans, std::vector<int>& rounds,
                           std::string error);

// Calls f(first, n) for each run of consecutive elements (along the last dimension) of slab s of
// a tensor of the given shape, in row-major order: first is the row-major index of the run's
// first element in the full tensor.
template <class F>
void for_each_run(const std::vector<std::uint64_t>& shape, const Hyperslab& s, F&& f) {
  const std::size_t rank = shape.size();
  for (std::size_t d = 0; d < rank; ++d)
    if (s.count[d] == 0) return;
  std::vector<std::uint64_t> stride(rank, 1);
  for (std::size_t d = rank - 1; d > 0; --d) stride[d - 1] = stride[d] * shape[d];
  std::vector<std::uint64_t> idx(rank, 0);  // position within the slab; last dim stays 0
  for (;;) {
    std::uint64_t first = 0;
    for (std::size_t d = 0; d < rank; ++d) first += (s.start[d] + idx[d]) * stride[d];
    f(first, s.count[rank - 1]);
    std::size_t d = rank - 1;
    for (;;) {
      if (d == 0) return;
      --d;
      if (++idx[d] < s.count[d]) break;
      idx[d] = 0;
    }
  }
}

}  // namespace tptrain::io::detail
