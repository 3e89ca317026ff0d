#include "src/parallel/nccl_communicator.hpp"

#if defined(TPTRAIN_HAVE_NCCL)

#include <cuda_runtime.h>

#include "src/parallel/mpi_check.hpp"

#define TPTRAIN_NCCL_CHECK(call)                                                          \
  do {                                                                                    \
    const ncclResult_t tptrain_nccl_rc_ = (call);                                         \
    if (tptrain_nccl_rc_ != ncclSuccess)                                                  \
      ::tptrain::parallel::abort_job(#call, __FILE__, __LINE__,                           \
                                     ncclGetErrorString(tptrain_nccl_rc_));               \
  } while (0)

#define TPTRAIN_CUDA_CHECK(call)                                                          \
  do {                                                                                    \
    const cudaError_t tptrain_cuda_rc_ = (call);                                          \
    if (tptrain_cuda_rc_ != cudaSuccess)                                                  \
      ::tptrain::parallel::abort_job(#call, __FILE__, __LINE__,                           \
                                     cudaGetErrorString(tptrain_cuda_rc_));               \
  } while (0)

namespace tptrain::parallel {

namespace {

ncclDataType_t nccl_type(DataType type) {
  switch (type) {
    case DataType::float32: return ncclFloat32;
    case DataType::float64: return ncclFloat64;
    case DataType::int32: return ncclInt32;
    case DataType::int64: return ncclInt64;
    case DataType::uint8: return ncclUint8;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::sum ? ncclSum : ncclMax; }

// The operation is queued on the stream; the handle waits on an event recorded after it.
Request pending_on(cudaStream_t stream) {
  cudaEvent_t done;
  TPTRAIN_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  TPTRAIN_CUDA_CHECK(cudaEventRecord(done, stream));
  return Request([done]() {
    TPTRAIN_CUDA_CHECK(cudaEventSynchronize(done));
    TPTRAIN_CUDA_CHECK(cudaEventDestroy(done));
  });
}

}  // namespace

NcclCommunicator::NcclCommunicator(MPI_Comm comm) : Communicator(comm) {
  ncclUniqueId id;
  if (rank_ == 0) TPTRAIN_NCCL_CHECK(ncclGetUniqueId(&id));
  TPTRAIN_MPI_CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, comm_));
  TPTRAIN_NCCL_CHECK(ncclCommInitRank(&nccl_, size_, id, rank_));
}

NcclCommunicator::~NcclCommunicator() {
  if (nccl_) ncclCommDestroy(nccl_);
}

Request NcclCommunicator::iall_reduce(const kx::ExecSpace& exec, void* buf, std::size_t count,
                                      DataType type, ReduceOp op) {
  TPTRAIN_NCCL_CHECK(
      ncclAllReduce(buf, buf, count, nccl_type(type), nccl_op(op), nccl_, exec.cuda_stream()));
  return pending_on(exec.cuda_stream());
}

Request NcclCommunicator::iall_gather(const kx::ExecSpace& exec, const void* send, void* recv,
                                      std::size_t count, DataType type) {
  TPTRAIN_NCCL_CHECK(ncclAllGather(send, recv, count, nccl_type(type), nccl_, exec.cuda_stream()));
  return pending_on(exec.cuda_stream());
}

Request NcclCommunicator::ireduce_scatter(const kx::ExecSpace& exec, const void* send, void* recv,
                                          std::size_t count, DataType type, ReduceOp op) {
  TPTRAIN_NCCL_CHECK(ncclReduceScatter(send, recv, count, nccl_type(type), nccl_op(op), nccl_,
                                       exec.cuda_stream()));
  return pending_on(exec.cuda_stream());
}

Request NcclCommunicator::ibroadcast(const kx::ExecSpace& exec, void* buf, std::size_t count,
                                     DataType type, int root) {
  TPTRAIN_NCCL_CHECK(
      ncclBroadcast(buf, buf, count, nccl_type(type), root, nccl_, exec.cuda_stream()));
  return pending_on(exec.cuda_stream());
}

// NCCL point-to-point has no tags: messages between a pair are matched in issue order, which
// the pipeline schedule guarantees.
Request NcclCommunicator::isend(const kx::ExecSpace& exec, const void* buf, std::size_t count,
                                DataType type, int peer, int /*tag*/) {
  TPTRAIN_NCCL_CHECK(ncclSend(buf, count, nccl_type(type), peer, nccl_, exec.cuda_stream()));
  return pending_on(exec.cuda_stream());
}

Request NcclCommunicator::irecv(const kx::ExecSpace& exec, void* buf, std::size_t count, DataType type,
                                int peer, int /*tag*/) {
  TPTRAIN_NCCL_CHECK(ncclRecv(buf, count, nccl_type(type), peer, nccl_, exec.cuda_stream()));
  return pending_on(exec.cuda_stream());
}

}  // namespace tptrain::parallel

#endif
