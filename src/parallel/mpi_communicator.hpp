// MPI backend of Communicator: non-blocking MPI collectives on host-accessible buffers.
#pragma once

#include "src/parallel/communicator.hpp"

namespace tptrain::parallel {

MPI_Datatype mpi_type(DataType type);
MPI_Op mpi_op(ReduceOp op);

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm) : Communicator(comm) {}

  bool needs_host_memory() const override { return true; }
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
};

}  // namespace tptrain::parallel
