// NCCL backend of Communicator (built only when Kokkos has CUDA and NCCL is found).
// The NCCL communicator is created from the MPI group: rank 0 of the group draws the unique
// id, MPI_Bcast shares it, every rank calls ncclCommInitRank (as llm.c's zero.cuh does).
//
// Stream ordering: every operation runs on this communicator's own communication stream.
// Issued with the compute instance `exec`, it first makes the communication stream wait on an
// event recorded on exec's stream (the producer kernels are done), then enqueues the NCCL call,
// then records a completion event. Request::wait_on(consumer) makes the consumer's stream wait
// on that event: nothing blocks the host, and kernels queued on exec between the issue and the
// wait_on (e.g. the weight-gradient GEMM, the backward of the next bucket) overlap the transfer.
#pragma once

#if defined(TPTRAIN_HAVE_NCCL)

#include <cuda_runtime.h>
#include <nccl.h>

#include "src/parallel/communicator.hpp"

namespace tptrain::parallel {

class NcclCommunicator final : public Communicator {
 public:
  explicit NcclCommunicator(MPI_Comm comm);
  ~NcclCommunicator() override;

  bool needs_host_memory() const override { return false; }
  const char* backend_name() const override { return "nccl"; }
  const void* communication_stream() const override { return stream_; }

  Request start(const kx::ExecSpace& exec, const Operation& op) override;
  void group_start(const kx::ExecSpace& exec) override;
  Request group_end() override;

 private:
  // The communication stream waits for the work queued so far on exec.
  void after(const kx::ExecSpace& exec);
  // A Request completed by an event recorded now on the communication stream.
  Request completion();
  // Issues one NCCL call: ordered after exec, completed by its own event (outside a group) or
  // by group_end's (inside one).
  template <class Call>
  Request issue(const kx::ExecSpace& exec, Call call);

  ncclComm_t nccl_ = nullptr;
  cudaStream_t stream_ = nullptr;
  int group_depth_ = 0;
};

}  // namespace tptrain::parallel

#endif
