#include "src/parallel/nccl_communicator.hpp"

#if defined(TPTRAIN_HAVE_NCCL)

#include <stdexcept>
#include <string>

#include "base/mpi_check.hpp"
#include "src/parallel/device_wait_clock.hpp"

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

// A communicator over the ranks of `comm` (collective): rank 0 draws the id, MPI_Bcast shares it.
ncclComm_t init_nccl(MPI_Comm comm, int rank, int size) {
  ncclUniqueId id;
  if (rank == 0) TPTRAIN_NCCL_CHECK(ncclGetUniqueId(&id));
  TPTRAIN_MPI_CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, comm));
  ncclComm_t nccl = nullptr;
  TPTRAIN_NCCL_CHECK(ncclCommInitRank(&nccl, size, id, rank));
  return nccl;
}

cudaStream_t new_stream() {
  cudaStream_t stream = nullptr;
  // Non-blocking: no implicit ordering with the legacy default stream either.
  TPTRAIN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return stream;
}

void destroy(ncclComm_t nccl, cudaStream_t stream) {
  if (stream) {
    cudaStreamSynchronize(stream);
    cudaStreamDestroy(stream);
  }
  if (nccl) ncclCommDestroy(nccl);
}

}  // namespace

NcclCommunicator::NcclCommunicator(MPI_Comm comm, bool lanes) : Communicator(comm), lanes_allowed_(lanes) {
  nccl_ = init_nccl(comm_, rank_, size_);
  stream_ = new_stream();
}

NcclCommunicator::~NcclCommunicator() {
  for (Lane& lane : lanes_) destroy(lane.nccl, lane.stream);
  destroy(nccl_, stream_);
}

int NcclCommunicator::open_lanes(int count) {
  if (!lanes_allowed_) return 0;  // the same deck on every rank: every rank opens none
  // Collective: every rank of the group opens the same lanes in the same order.
  while (static_cast<int>(lanes_.size()) < count) lanes_.push_back(Lane{init_nccl(comm_, rank_, size_), new_stream()});
  return count;
}

void NcclCommunicator::after(const kx::ExecSpace& exec, cudaStream_t stream) {
  const cudaEvent_t ready = events_->acquire();
  TPTRAIN_CUDA_CHECK(cudaEventRecord(ready, exec.cuda_stream()));
  TPTRAIN_CUDA_CHECK(cudaStreamWaitEvent(stream, ready, 0));
  events_->release(ready);  // the wait captured the record: the event may be recorded again
}

Request NcclCommunicator::completion(cudaStream_t stream) {
  const cudaEvent_t done = events_->acquire();
  TPTRAIN_CUDA_CHECK(cudaEventRecord(done, stream));
  // Whichever completion runs (once: Request) gives the event back after consuming it.
  const std::shared_ptr<CudaEventPool> events = events_;
  return Request(
      [done, events]() {
        TPTRAIN_CUDA_CHECK(cudaEventSynchronize(done));
        events->release(done);
      },
      [done, events](const kx::ExecSpace& consumer) {
        // The consumer's stream waits for the other ranks here: timed for the straggler report.
        DeviceWaitClock::instance().wait(consumer.cuda_stream(), done);
        events->release(done);
      });
}

template <class Call>
Request NcclCommunicator::issue(const kx::ExecSpace& exec, Call call) {
  if (group_depth_ > 0) {  // ordered by group_start, completed by group_end
    TPTRAIN_NCCL_CHECK(call());
    return Request();
  }
  after(exec, stream_);
  TPTRAIN_NCCL_CHECK(call());
  return completion(stream_);
}

void NcclCommunicator::group_start(const kx::ExecSpace& exec) {
  if (group_depth_++ > 0) return;
  after(exec, stream_);
  TPTRAIN_NCCL_CHECK(ncclGroupStart());
}

Request NcclCommunicator::group_end() {
  if (group_depth_ == 0) throw std::logic_error("tptrain: NcclCommunicator::group_end without group_start");
  if (--group_depth_ > 0) return Request();
  // The grouped calls are enqueued on the stream by ncclGroupEnd: record the event after it.
  TPTRAIN_NCCL_CHECK(ncclGroupEnd());
  return completion(stream_);
}

Request NcclCommunicator::start_on_lane(const kx::ExecSpace& exec, const Operation& o) {
  if (o.kind != Collective::send && o.kind != Collective::recv)
    throw std::logic_error(std::string("tptrain: NcclCommunicator: ") + collective_name(o.kind) +
                           " on a lane (lanes carry sends and receives only)");
  if (group_depth_ > 0)
    throw std::logic_error("tptrain: NcclCommunicator: a transfer on a lane inside a group (the group would join the "
                           "lane's stream with the others)");
  if (o.lane >= static_cast<int>(lanes_.size()))
    throw std::logic_error("tptrain: NcclCommunicator: lane " + std::to_string(o.lane) + " of " +
                           std::to_string(lanes_.size()) + " opened");
  const Lane& lane = lanes_[static_cast<std::size_t>(o.lane)];
  // A send reads what exec produced; a receive may overwrite a buffer that exec's queued kernels
  // still read (a slot freed by the backward before): both wait for exec's work so far.
  after(exec, lane.stream);
  if (o.kind == Collective::send)
    TPTRAIN_NCCL_CHECK(ncclSend(o.send, o.count, nccl_type(o.type), o.peer, lane.nccl, lane.stream));
  else
    TPTRAIN_NCCL_CHECK(ncclRecv(o.recv, o.count, nccl_type(o.type), o.peer, lane.nccl, lane.stream));
  return completion(lane.stream);
}

Request NcclCommunicator::start(const kx::ExecSpace& exec, const Operation& o) {
  if (o.lane >= 0) return start_on_lane(exec, o);
  if (o.kind == Collective::all_to_all) {
    // One send and one receive per peer in one group on the communication stream (NCCL has no
    // all-to-all-v of its own; this is how its documentation composes one).
    const std::size_t bytes = size_of(o.type);
    const auto* send = static_cast<const char*>(o.send);
    auto* recv = static_cast<char*>(o.recv);
    group_start(exec);
    for (int peer = 0; peer < size_; ++peer) {
      if (o.send_counts[peer] > 0)
        TPTRAIN_NCCL_CHECK(ncclSend(send + o.send_offsets[peer] * bytes, o.send_counts[peer], nccl_type(o.type), peer,
                                    nccl_, stream_));
      if (o.recv_counts[peer] > 0)
        TPTRAIN_NCCL_CHECK(ncclRecv(recv + o.recv_offsets[peer] * bytes, o.recv_counts[peer], nccl_type(o.type), peer,
                                    nccl_, stream_));
    }
    return group_end();
  }
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
      case Collective::all_to_all: break;  // above
    }
    return ncclInvalidArgument;
  });
}

}  // namespace tptrain::parallel

#endif
