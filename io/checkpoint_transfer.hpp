// Collective data movement of checkpoint tensors with parallel HDF5: property lists of the one
// handler (MPI-IO file access, collective transfers), each rank's slabs to or from the file, and
// the full re-read that verifies a dataset's checksum. Every function makes the same number of
// collective calls on every rank, even after an error (with empty selections then), so that
// nobody is left waiting in a collective; errors go to `st`.
#pragma once

#include <hdf5.h>
#include <mpi.h>

#include <cstdint>
#include <vector>

#include "io/checkpoint_file.hpp"
#include "io/checkpoint_slabs.hpp"
#include "io/hdf5_check.hpp"

namespace tptrain::io::detail {

struct PropertyLists {
  h5::Handle fapl, dxpl;
};
PropertyLists parallel_plists(MPI_Comm comm, h5::Status& st);

// `rounds` collective transfers of one dataset: the rank's slab groups, then empty selections.
void transfer(hid_t dset, const TensorShard& t, const SlabPlan& plan, int rounds, hid_t dxpl,
              bool writing, h5::Status& st);

// This rank's share of the checksum of the whole dataset: rank r of n reads the r-th of n
// disjoint row blocks, in chunks of at most 4 Mi elements (the same number of collective reads
// on every rank). Sum over the ranks for the dataset's checksum.
std::uint64_t checksum_share(hid_t dset, const TensorShard& t, MPI_Comm comm, hid_t dxpl,
                             std::vector<float>& buf, h5::Status& st);

}  // namespace tptrain::io::detail
