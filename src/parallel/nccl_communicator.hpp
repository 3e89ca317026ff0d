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
// The events come from a pool (cuda_event_pool.hpp): none is created per operation once the
// first step has run.
//
// Lanes (open_lanes): further NCCL communicators over the same ranks, each with its own stream,
// for point-to-point transfers that must not queue behind each other (the pipeline's flows,
// schedule::Matching::per_flow). A transfer on a lane is one NCCL call on that lane's stream,
// never inside a group: NCCL joins every stream of a group ("Mixing multiple streams within the
// same ncclGroupStart/End() group"), which would serialise the lanes again.
#pragma once

#if defined(TPTRAIN_HAVE_NCCL)

#include <cuda_runtime.h>
#include <nccl.h>

#include <memory>
#include <vector>

#include "src/parallel/communicator.hpp"
#include "src/parallel/cuda_event_pool.hpp"

namespace tptrain::parallel {

class NcclCommunicator final : public Communicator {
 public:
  // lanes = false: open_lanes opens none (CommunicatorOptions::lanes).
  explicit NcclCommunicator(MPI_Comm comm, bool lanes = true);
  ~NcclCommunicator() override;

  bool needs_host_memory() const override { return false; }
  const char* backend_name() const override { return "nccl"; }
  const void* communication_stream() const override { return stream_; }

  Request start(const kx::ExecSpace& exec, const Operation& op) override;
  void group_start(const kx::ExecSpace& exec) override;
  Request group_end() override;
  int open_lanes(int count) override;

  // CUDA events created so far by this communicator (tests on a GPU: no more after a step).
  std::size_t events_created() const { return events_->created(); }

 private:
  struct Lane {
    ncclComm_t nccl = nullptr;
    cudaStream_t stream = nullptr;
  };
  // `stream` waits for the work queued so far on exec.
  void after(const kx::ExecSpace& exec, cudaStream_t stream);
  // A Request completed by an event recorded now on `stream`.
  Request completion(cudaStream_t stream);
  // Issues one NCCL call: ordered after exec, completed by its own event (outside a group) or
  // by group_end's (inside one).
  template <class Call>
  Request issue(const kx::ExecSpace& exec, Call call);
  // A send or receive on lane `o.lane`.
  Request start_on_lane(const kx::ExecSpace& exec, const Operation& o);

  ncclComm_t nccl_ = nullptr;
  cudaStream_t stream_ = nullptr;
  int group_depth_ = 0;
  std::vector<Lane> lanes_;
  bool lanes_allowed_ = true;  // parallel.nccl_pipeline_lanes
  // Shared with the completions of pending Requests, which give their events back.
  std::shared_ptr<CudaEventPool> events_ = std::make_shared<CudaEventPool>();
};

}  // namespace tptrain::parallel

#endif
