// MPI backend of Communicator: non-blocking MPI collectives on host-accessible buffers.
#pragma once

#include "src/parallel/communicator.hpp"

namespace tptrain::parallel {

MPI_Datatype mpi_type(DataType type);
MPI_Op mpi_op(ReduceOp op);

// Whether the MPI library takes device pointers (CUDA-aware MPI), as the library reports it
// (Open MPI: MPIX_Query_cuda_support; MPICH: MPIX_GPU_query_support). TPTRAIN_MPI_DEVICE_MEMORY=0
// or 1 overrides the answer (e.g. a library that reports support but crashes on it).
bool mpi_supports_device_memory();

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm);

  // Host buffers only, unless the data lives in host-accessible memory anyway or the library
  // is CUDA-aware.
  bool needs_host_memory() const override { return !device_memory_; }
  const char* backend_name() const override { return "mpi"; }

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
  bool device_memory_ = false;
};

}  // namespace tptrain::parallel
