#include "io/checkpoint_transfer.hpp"

#include "base/mpi_check.hpp"
#include "io/checkpoint_checksum.hpp"

namespace tptrain::io::detail {

using h5::Handle;
using h5::Status;

constexpr std::uint64_t kVerifyChunkElements = std::uint64_t{1} << 22;  // 16 MiB of float32

PropertyLists parallel_plists(MPI_Comm comm, Status& st) {
  PropertyLists p;
  p.fapl = Handle(TPTRAIN_H5(st, H5Pcreate(H5P_FILE_ACCESS), "file access properties"), H5Pclose);
  if (st.ok())
    TPTRAIN_H5(st, H5Pset_fapl_mpio(p.fapl.get(), comm, MPI_INFO_NULL), "file access properties");
  p.dxpl = Handle(TPTRAIN_H5(st, H5Pcreate(H5P_DATASET_XFER), "transfer properties"), H5Pclose);
  if (st.ok())
    TPTRAIN_H5(st, H5Pset_dxpl_mpio(p.dxpl.get(), H5FD_MPIO_COLLECTIVE), "transfer properties");
  return p;
}

void transfer(hid_t dset, const TensorShard& t, const SlabPlan& plan, int rounds, hid_t dxpl,
              bool writing, Status& st) {
  if (rounds == 0) return;
  Handle fspace(TPTRAIN_H5(st, H5Dget_space(dset), t.name), H5Sclose);
  if (!fspace.valid()) return;
  for (int r = 0; r < rounds; ++r) {
    const SlabGroup* g = st.ok() && static_cast<std::size_t>(r) < plan.groups.size()
                             ? &plan.groups[static_cast<std::size_t>(r)]
                             : nullptr;
    if (g != nullptr) {
      H5S_seloper_t op = H5S_SELECT_SET;
      for (std::size_t k : g->slabs) {
        const auto start = to_hsize(t.slabs[k].start);
        const auto count = to_hsize(t.slabs[k].count);
        if (TPTRAIN_H5(
                st,
                H5Sselect_hyperslab(fspace.get(), op, start.data(), nullptr, count.data(), nullptr),
                t.name) < 0) {
          g = nullptr;
          break;
        }
        op = H5S_SELECT_OR;
      }
    }
    if (g == nullptr) TPTRAIN_H5(st, H5Sselect_none(fspace.get()), t.name);
    const hsize_t n = g != nullptr ? static_cast<hsize_t>(g->elements) : 0;
    Handle mspace(TPTRAIN_H5(st, H5Screate_simple(1, &n, nullptr), t.name), H5Sclose);
    if (g == nullptr && mspace.valid()) TPTRAIN_H5(st, H5Sselect_none(mspace.get()), t.name);
    float dummy = 0.0f;
    float* buf = g != nullptr ? t.data + g->offset : &dummy;
    if (writing)
      TPTRAIN_H5(st, H5Dwrite(dset, H5T_NATIVE_FLOAT, mspace.get(), fspace.get(), dxpl, buf),
                 t.name);
    else
      TPTRAIN_H5(st, H5Dread(dset, H5T_NATIVE_FLOAT, mspace.get(), fspace.get(), dxpl, buf),
                 t.name);
  }
}

std::uint64_t checksum_share(hid_t dset, const TensorShard& t, MPI_Comm comm, hid_t dxpl,
                             std::vector<float>& buf, Status& st) {
  int rank = 0, size = 1;
  TPTRAIN_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  TPTRAIN_MPI_CHECK(MPI_Comm_size(comm, &size));
  const RowBlocks b = row_blocks(t.global_shape, static_cast<std::uint64_t>(rank),
                                 static_cast<std::uint64_t>(size), kVerifyChunkElements);
  std::uint64_t sum = 0;
  for (std::uint64_t k = 0; k < b.rounds; ++k) {
    std::uint64_t first = 0;
    const std::uint64_t n =
        read_row_block(dset, b, k, H5T_NATIVE_FLOAT, dxpl, t.name, buf, first, st);
    if (n > 0) sum += checksum_run(buf.data(), n, first);
  }
  return sum;
}

}  // namespace tptrain::io::detail
