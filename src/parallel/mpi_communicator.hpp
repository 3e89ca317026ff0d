// MPI backend of Communicator: non-blocking MPI collectives on host-accessible buffers.
#pragma once

#include "src/parallel/communicator.hpp"

namespace tptrain::parallel {

// The MPI datatype and reduction operation of (type, op). The 16-bit floats (bfloat16, float16)
// map to a committed derived type of 2 bytes, one per storage type, so that send, receive,
// broadcast and gather move their bits; their reductions are user-defined, commutative MPI_Ops
// that widen every element to float, combine, and round back to nearest even (as NCCL does), one
// per (type, op): MPI's predefined MPI_SUM would add the bit patterns as integers (and refuses
// the derived type, so a missed case fails loudly instead). These handles are created on first
// use (MPI_Type_contiguous and MPI_Op_create are local calls, no rank waits for another) and freed
// inside MPI_Finalize, by the delete callback of an attribute on MPI_COMM_SELF (MPI-2.2 §8.7.1:
// MPI_Finalize frees MPI_COMM_SELF first, while MPI calls are still allowed), so that no MPI
// object outlives MPI.
MPI_Datatype mpi_type(DataType type);
MPI_Op mpi_op(ReduceOp op, DataType type);

// Whether the MPI library takes device pointers (CUDA-aware MPI), as the library reports it
// (Open MPI: MPIX_Query_cuda_support; MPICH: MPIX_GPU_query_support). The deck's
// parallel.mpi_device_memory may override the answer (CommunicatorOptions::DeviceMemory).
bool mpi_supports_device_memory();

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm,
                           CommunicatorOptions::DeviceMemory device_memory = CommunicatorOptions::DeviceMemory::ask);

  // Host buffers only, unless the data lives in host-accessible memory anyway or the library
  // is CUDA-aware.
  bool needs_host_memory() const override { return !device_memory_; }
  // The 16-bit reductions run on the host (mpi_op), even when MPI itself takes device pointers.
  bool reduces_on_host(DataType type) const override {
    return needs_host_memory() || type == DataType::bfloat16 || type == DataType::float16;
  }
  const char* backend_name() const override { return "mpi"; }

  Request start(const kx::ExecSpace& exec, const Operation& op) override;

 private:
  bool device_memory_ = false;
};

}  // namespace tptrain::parallel
