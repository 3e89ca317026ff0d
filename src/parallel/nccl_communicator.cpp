#include "src/parallel/nccl_communicator.hpp"

#if defined(TPTRAIN_HAVE_NCCL)

#include <stdexcept>

#include "base/mpi_check.hpp"

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
    case DataType::float16: return ncclFloat16;
    case DataType::bfloat16:
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= NCCL_VERSION(2, 10, 0)
      // Same bit layout as kx::bf16; NCCL reduces in float and rounds to nearest even.
      return ncclBfloat16;
#else
      throw std::runtime_error("tptrain: bf16 collectives need NCCL >= 2.10 (ncclBfloat16)");
#endif
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::sum ? ncclSum : ncclMax; }

cudaEvent_t record_event(cudaStream_t stream) {
  cudaEvent_t event;
  TPTRAIN_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  TPTRAIN_CUDA_CHECK(cudaEventRecord(event, stream));
  return event;
}

}  // namespace

NcclCommunicator::NcclCommunicator(MPI_Comm comm) : Communicator(comm) {
  ncclUniqueId id;
  if (rank_ == 0) TPTRAIN_NCCL_CHECK(ncclGetUniqueId(&id));
  TPTRAIN_MPI_CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, comm_));
  TPTRAIN_NCCL_CHECK(ncclCommInitRank(&nccl_, size_, id, rank_));
  // Non-blocking: no implicit ordering with the legacy default stream either.
  TPTRAIN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

NcclCommunicator::~NcclCommunicator() {
  if (stream_) {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
  if (nccl_) ncclCommDestroy(nccl_);
}

void NcclCommunicator::after(const kx::ExecSpace& exec) {
  cudaEvent_t ready = record_event(exec.cuda_stream());
  TPTRAIN_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready, 0));
  TPTRAIN_CUDA_CHECK(cudaEventDestroy(ready));  // released once it has fired
}

Request NcclCommunicator::completion() {
  const cudaEvent_t done = record_event(stream_);
  // Shared by both completions: whichever runs first destroys the event.
  return Request(
      [done]() {
        TPTRAIN_CUDA_CHECK(cudaEventSynchronize(done));
        TPTRAIN_CUDA_CHECK(cudaEventDestroy(done));
      },
      [done](const kx::ExecSpace& consumer) {
        TPTRAIN_CUDA_CHECK(cudaStreamWaitEvent(consumer.cuda_stream(), done, 0));
        TPTRAIN_CUDA_CHECK(cudaEventDestroy(done));
      });
}

template <class Call>
Request NcclCommunicator::issue(const kx::ExecSpace& exec, Call call) {
  if (group_depth_ > 0) {  // ordered by group_start, completed by group_end
    TPTRAIN_NCCL_CHECK(call());
    return Request();
  }
  after(exec);
  TPTRAIN_NCCL_CHECK(call());
  return completion();
}

void NcclCommunicator::group_start(const kx::ExecSpace& exec) {
  if (group_depth_++ > 0) return;
  after(exec);
  TPTRAIN_NCCL_CHECK(ncclGroupStart());
}

Request NcclCommunicator::group_end() {
  if (group_depth_ == 0) throw std::logic_error("tptrain: NcclCommunicator::group_end without group_start");
  if (--group_depth_ > 0) return Request();
  // The grouped calls are enqueued on the stream by ncclGroupEnd: record the event after it.
  TPTRAIN_NCCL_CHECK(ncclGroupEnd());
  return completion();
}

Request NcclCommunicator::start(const kx::ExecSpace& exec, const Operation& o) {
  return issue(exec, [&]() -> ncclResult_t {
    switch (o.kind) {
      case Collective::all_reduce:
        return ncclAllReduce(o.recv, o.recv, o.count, nccl_type(o.type), nccl_op(o.op), nccl_, stream_);
      case Collective::all_gather:
        return ncclAllGather(o.send, o.recv, o.count, nccl_type(o.type), nccl_, stream_);
      case Collective::reduce_scatter:
        return ncclReduceScatter(o.send, o.recv, o.count, nccl_type(o.type), nccl_op(o.op), nccl_, stream_);
      case Collective::broadcast:
        return ncclBroadcast(o.recv, o.recv, o.count, nccl_type(o.type), o.peer, nccl_, stream_);
      // NCCL point-to-point has no tags: messages between a pair are matched in issue order,
      // which the pipeline schedule guarantees.
      case Collective::send:
        return ncclSend(o.send, o.count, nccl_type(o.type), o.peer, nccl_, stream_);
      case Collective::recv:
        return ncclRecv(o.recv, o.count, nccl_type(o.type), o.peer, nccl_, stream_);
    }
    return ncclInvalidArgument;
  });
}

}  // namespace tptrain::parallel

#endif
