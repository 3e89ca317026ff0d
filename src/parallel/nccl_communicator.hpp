// NCCL backend of Communicator (built only when Kokkos has CUDA and NCCL is found).
// The NCCL communicator is created from the MPI group: rank 0 of the group draws the unique
// id, MPI_Bcast shares it, every rank calls ncclCommInitRank (as llm.c's zero.cuh does).
// Operations are enqueued on the CUDA stream of the execution-space instance passed in.
#pragma once

#if defined(TPTRAIN_HAVE_NCCL)

#include <nccl.h>

#include "src/parallel/communicator.hpp"

namespace tptrain::parallel {

class NcclCommunicator final : public Communicator {
 public:
  explicit NcclCommunicator(MPI_Comm comm);
  ~NcclCommunicator() override;

  bool needs_host_memory() const override { return false; }
  const char* backend_name() const override { return "nccl"; }

  Request iall_reduce(const kx::ExecSpace& exec, void* buf, std::size_t count, DataType type,
                      ReduceOp op) override;
  Request iall_gather(const kx::ExecSpace& exec, const void* send, void* recv, std::size_t count,
                      DataType type) override;
  Request ireduce_scatter(const kx::ExecSpace& exec, const void* send, void* recv, std::size_t count,
                          DataType type, ReduceOp op) override;
  Request ibroadcast(const kx::ExecSpace& exec, void* buf, std::size_t count, DataType type,
                     int root) override;
  Request isend(const kx::ExecSpace& exec, const void* buf, std::size_t count, DataType type, int peer,
                int tag) override;
  Request irecv(const kx::ExecSpace& exec, void* buf, std::size_t count, DataType type, int peer,
                int tag) override;

 private:
  ncclComm_t nccl_ = nullptr;
};

}  // namespace tptrain::parallel

#endif
