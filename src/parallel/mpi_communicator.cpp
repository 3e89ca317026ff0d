#include "src/parallel/mpi_communicator.hpp"

#include <climits>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(OPEN_MPI) && defined(__has_include)
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // MPIX_CUDA_AWARE_SUPPORT, MPIX_Query_cuda_support
#endif
#endif

#include "base/mpi_check.hpp"
#include "src/util/host_waits.hpp"

namespace tptrain::parallel {

namespace {

// out[i] = in[i] (op) out[i] over `len` elements of a 16-bit storage type T, computed in float and
// rounded once (T's constructor rounds to nearest even). Max propagates NaN, so that an overflow
// check over a max-reduced buffer still sees it; its comparisons are the quiet ones (isnan,
// isgreater), which raise no FE_INVALID on a NaN operand.
template <class T, ReduceOp Op>
void reduce_half(void* in, void* inout, int* len, MPI_Datatype* /*type*/) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = a[i], y = b[i];
    if (Op == ReduceOp::sum)
      b[i] = T(x + y);
    else if (!std::isnan(y) && (std::isnan(x) || std::isgreater(x, y)))
      b[i] = a[i];  // the larger operand's bits: exact
  }
}

// The MPI handles of the 16-bit types, created on first use and freed inside MPI_Finalize.
struct HalfHandles {
  MPI_Datatype bf16 = MPI_DATATYPE_NULL, fp16 = MPI_DATATYPE_NULL;
  MPI_Op bf16_sum = MPI_OP_NULL, bf16_max = MPI_OP_NULL, fp16_sum = MPI_OP_NULL, fp16_max = MPI_OP_NULL;
  int keyval = MPI_KEYVAL_INVALID;
  bool created = false;
};

HalfHandles& half_handles_storage() {
  static HalfHandles h;
  return h;
}

int free_half_handles(MPI_Comm, int, void*, void*) {
  HalfHandles& h = half_handles_storage();
  for (MPI_Op* op : {&h.bf16_sum, &h.bf16_max, &h.fp16_sum, &h.fp16_max})
    if (*op != MPI_OP_NULL) MPI_Op_free(op);
  for (MPI_Datatype* t : {&h.bf16, &h.fp16})
    if (*t != MPI_DATATYPE_NULL) MPI_Type_free(t);
  if (h.keyval != MPI_KEYVAL_INVALID) MPI_Comm_free_keyval(&h.keyval);
  h = HalfHandles{};
  return MPI_SUCCESS;
}

const HalfHandles& half_handles() {
  static std::mutex mutex;  // MPI_THREAD_MULTIPLE callers: create the handles once
  const std::lock_guard<std::mutex> lock(mutex);
  HalfHandles& h = half_handles_storage();
  if (h.created) return h;
  // Two distinct types of the same 2-byte layout: a type names the storage format it carries.
  for (MPI_Datatype* t : {&h.bf16, &h.fp16}) {
    TPTRAIN_MPI_CHECK(MPI_Type_contiguous(2, MPI_BYTE, t));
    TPTRAIN_MPI_CHECK(MPI_Type_commit(t));
  }
  TPTRAIN_MPI_CHECK(MPI_Op_create(&reduce_half<kx::bf16, ReduceOp::sum>, 1, &h.bf16_sum));
  TPTRAIN_MPI_CHECK(MPI_Op_create(&reduce_half<kx::bf16, ReduceOp::max>, 1, &h.bf16_max));
  TPTRAIN_MPI_CHECK(MPI_Op_create(&reduce_half<kx::fp16, ReduceOp::sum>, 1, &h.fp16_sum));
  TPTRAIN_MPI_CHECK(MPI_Op_create(&reduce_half<kx::fp16, ReduceOp::max>, 1, &h.fp16_max));
  TPTRAIN_MPI_CHECK(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, &free_half_handles, &h.keyval, nullptr));
  TPTRAIN_MPI_CHECK(MPI_Comm_set_attr(MPI_COMM_SELF, h.keyval, nullptr));
  h.created = true;
  return h;
}

}  // namespace

MPI_Datatype mpi_type(DataType type) {
  switch (type) {
    case DataType::float32: return MPI_FLOAT;
    case DataType::float64: return MPI_DOUBLE;
    case DataType::int32: return MPI_INT32_T;
    case DataType::int64: return MPI_INT64_T;
    case DataType::uint8: return MPI_UINT8_T;
    case DataType::bfloat16: return half_handles().bf16;
    case DataType::float16: return half_handles().fp16;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op mpi_op(ReduceOp op, DataType type) {
  const bool sum = op == ReduceOp::sum;
  switch (type) {
    case DataType::bfloat16: return sum ? half_handles().bf16_sum : half_handles().bf16_max;
    case DataType::float16: return sum ? half_handles().fp16_sum : half_handles().fp16_max;
    default: return sum ? MPI_SUM : MPI_MAX;
  }
}

bool mpi_supports_device_memory() {
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support() == 1;
#elif defined(MPIX_GPU_SUPPORT_CUDA)
  int supported = 0;
  return MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA, &supported) == MPI_SUCCESS && supported != 0;
#else
  return false;
#endif
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, CommunicatorOptions::DeviceMemory device_memory)
    : Communicator(comm) {
  // Only a device memory space makes the question matter; every rank of a job runs the same
  // library and reads the same deck, so the answer is the same on every rank of the group.
  using DeviceMemory = CommunicatorOptions::DeviceMemory;
  if (!Kokkos::SpaceAccessibility<Kokkos::HostSpace, kx::MemSpace>::accessible)
    device_memory_ = device_memory == DeviceMemory::ask ? mpi_supports_device_memory()
                                                        : device_memory == DeviceMemory::yes;
}

namespace {

// MPI counts are int; a larger buffer must be split by the caller (buckets do that).
int mpi_count(std::size_t count, const char* what) {
  if (count > static_cast<std::size_t>(INT_MAX))
    throw std::length_error(std::string("tptrain: ") + what + " of " + std::to_string(count) +
                            " elements exceeds MPI's int count limit");
  return static_cast<int>(count);
}

// The handle owns the MPI_Request on the heap so its address is stable while pending.
Request pending(std::shared_ptr<MPI_Request> req, const char* what) {
  return Request([req, what]() {
    const int rc = MPI_Wait(req.get(), MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) abort_job(what, __FILE__, __LINE__, mpi_error_string(rc));
  });
}

}  // namespace

// MPI forbids aliased send and receive buffers; the in-place forms (communicator.hpp: NCCL's
// convention, block `rank` of the whole buffer) map to MPI_IN_PLACE.
namespace {
bool block_of(const void* whole, const void* block, int rank, std::size_t count, DataType type) {
  return static_cast<const char*>(whole) + static_cast<std::size_t>(rank) * count * size_of(type) == block;
}
}  // namespace

Request MpiCommunicator::start(const kx::ExecSpace& exec, const Operation& o) {
  // MPI reads the buffers as soon as the call is made, so the producer kernels on `exec` must
  // have finished; a receive buffer may still be read by queued kernels before MPI overwrites
  // it: fence first.
  util::note_host_wait(util::HostWait::mpi_fence);
  kx::fence(exec, ("tptrain::MpiCommunicator::i" + std::string(collective_name(o.kind))).c_str());
  auto req = std::make_shared<MPI_Request>();
  const int n = mpi_count(o.count, collective_name(o.kind));
  const MPI_Datatype type = mpi_type(o.type);
  switch (o.kind) {
    case Collective::all_reduce:
      TPTRAIN_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, o.recv, n, type, mpi_op(o.op, o.type), comm_, req.get()));
      return pending(req, "MPI_Iallreduce");
    case Collective::all_gather: {
      // In place, MPI takes the rank's contribution from its block of recv: where it already is.
      const bool in_place = block_of(o.recv, o.send, rank_, o.count, o.type);
      TPTRAIN_MPI_CHECK(
          MPI_Iallgather(in_place ? MPI_IN_PLACE : o.send, n, type, o.recv, n, type, comm_, req.get()));
      return pending(req, "MPI_Iallgather");
    }
    case Collective::reduce_scatter: {
      if (!block_of(o.send, o.recv, rank_, o.count, o.type)) {
        TPTRAIN_MPI_CHECK(
            MPI_Ireduce_scatter_block(o.send, o.recv, n, type, mpi_op(o.op, o.type), comm_, req.get()));
        return pending(req, "MPI_Ireduce_scatter_block");
      }
      // In place, MPI leaves the result in the FIRST block of the buffer; it belongs in block
      // `rank`. The move is a send to self, because this backend may hold a device pointer (a
      // CUDA-aware MPI) that only MPI itself knows how to copy.
      void* whole = const_cast<void*>(o.send);
      void* recv = o.recv;
      TPTRAIN_MPI_CHECK(
          MPI_Ireduce_scatter_block(MPI_IN_PLACE, whole, n, type, mpi_op(o.op, o.type), comm_, req.get()));
      const MPI_Comm comm = comm_;
      const int rank = rank_;
      return Request([req, whole, recv, n, type, comm, rank]() {
        int rc = MPI_Wait(req.get(), MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) abort_job("MPI_Ireduce_scatter_block", __FILE__, __LINE__, mpi_error_string(rc));
        if (rank == 0) return;  // already in place
        rc = MPI_Sendrecv(whole, n, type, rank, 0, recv, n, type, rank, 0, comm, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) abort_job("MPI_Sendrecv", __FILE__, __LINE__, mpi_error_string(rc));
      });
    }
    case Collective::broadcast:
      TPTRAIN_MPI_CHECK(MPI_Ibcast(o.recv, n, type, o.peer, comm_, req.get()));
      return pending(req, "MPI_Ibcast");
    case Collective::send:
      TPTRAIN_MPI_CHECK(MPI_Isend(o.send, n, type, o.peer, o.tag, comm_, req.get()));
      return pending(req, "MPI_Isend");
    case Collective::recv:
      TPTRAIN_MPI_CHECK(MPI_Irecv(o.recv, n, type, o.peer, o.tag, comm_, req.get()));
      return pending(req, "MPI_Irecv");
    case Collective::all_to_all: {
      // MPI reads the count and offset arrays until the operation completes: the Request keeps
      // its own int copies (MPI_Ialltoallv takes int counts and displacements).
      auto table = std::make_shared<std::vector<int>>(4 * static_cast<std::size_t>(size_));
      const std::size_t* from[4] = {o.send_counts, o.send_offsets, o.recv_counts, o.recv_offsets};
      for (int part = 0; part < 4; ++part)
        for (int r = 0; r < size_; ++r)
          (*table)[static_cast<std::size_t>(part * size_ + r)] = mpi_count(from[part][r], "all_to_all");
      int* t = table->data();
      TPTRAIN_MPI_CHECK(MPI_Ialltoallv(o.send, t, t + size_, type, o.recv, t + 2 * size_, t + 3 * size_, type, comm_,
                                       req.get()));
      return Request([req, table]() {
        const int rc = MPI_Wait(req.get(), MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) abort_job("MPI_Ialltoallv", __FILE__, __LINE__, mpi_error_string(rc));
      });
    }
  }
  throw std::logic_error("tptrain: MpiCommunicator::start: unknown operation");
}

}  // namespace tptrain::parallel
