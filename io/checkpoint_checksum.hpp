// Checkpoint checksums (docs/checkpoints.md, "Checksums") and the one reader of whole datasets
// in bounded row blocks, shared by read_checkpoint's verification (each rank its block of rows,
// collective transfers) and by tptrain inspect (serial, every row).
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

#include "io/checkpoint_file.hpp"
#include "io/hdf5_check.hpp"

namespace tptrain::io::detail {

// Sum of the checksum terms of the elements this rank writes of tensor t, slab after slab.
std::uint64_t shard_checksum(const TensorShard& t);

std::string hex64(std::uint64_t v);

// Rows [begin, end) of dimension 0 of a dataset, read in `rounds` transfers of at most
// chunk_rows rows. A scalar dataset (empty shape) is one row of one element.
struct RowBlocks {
  std::vector<std::uint64_t> shape;
  std::uint64_t begin = 0, end = 0, row_elements = 1, chunk_rows = 1, rounds = 0;
};

// Block `part` of `parts` nearly equal blocks of rows; rounds is the same for every part (that
// of the largest block), so that collective readers make the same number of transfers.
RowBlocks row_blocks(const std::vector<std::uint64_t>& shape, std::uint64_t part,
                     std::uint64_t parts, std::uint64_t max_chunk_elements);

// One transfer of row_blocks: rows [lo, hi) of the block into buf (resized), or an empty
// selection when the block has no rows left for this round (or st already failed), so that a
// collective transfer (dxpl with H5FD_MPIO_COLLECTIVE) is still made. mem_type is
// H5T_NATIVE_FLOAT or H5T_NATIVE_DOUBLE matching T. Returns the number of elements read and
// sets `first` to the row-major index of the first.
template <class T>
std::uint64_t read_row_block(hid_t dset, const RowBlocks& b, std::uint64_t round, hid_t mem_type,
                             hid_t dxpl, const std::string& name, std::vector<T>& buf,
                             std::uint64_t& first, h5::Status& st);

}  // namespace tptrain::io::detail
