// A communicator of one process group (TP, PP, DP or embedding group), over contiguous buffers.
//
// Two backends sit behind this interface: MpiCommunicator (host memory, every build) and
// NcclCommunicator (device memory, only when Kokkos has CUDA). Layers never call either
// directly: they use the View wrappers in collectives.hpp and the conjugate operators in
// mappings.hpp. Every operation is one row of the table below (Collective, Operation) and runs
// through the backend's one entry point, start(), which returns a Request; the plain forms of
// collectives.hpp are the non-blocking one followed by Request::wait_on(exec). A new collective
// is a row here, a case in each backend's start() (mpi_communicator.cpp, nccl_communicator.cpp)
// and its View wrapper in collectives.hpp.
//
// Ordering: an operation reads its buffers only after the work already queued on `exec` is
// done (MPI fences the instance; NCCL makes its communication stream wait on an event of exec's
// stream). After wait_on(exec) the result is visible to later work on exec; after wait(), to the
// host and every instance.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mpi.h>

#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/precision.hpp"
#include "src/parallel/staging_pool.hpp"

namespace tptrain::parallel {

enum class ReduceOp { sum, max };
// bfloat16 / float16: the 16-bit storage types of mixed precision (kx::bf16, kx::fp16). MPI has no
// portable type for them: the MPI backend moves their bits and reduces them with its own
// operations (mpi_communicator.hpp); NCCL reduces them natively (ncclBfloat16, ncclFloat16).
enum class DataType { float32, float64, int32, int64, uint8, bfloat16, float16 };

template <class T> constexpr DataType data_type_of();
template <> constexpr DataType data_type_of<float>() { return DataType::float32; }
template <> constexpr DataType data_type_of<double>() { return DataType::float64; }
template <> constexpr DataType data_type_of<std::int32_t>() { return DataType::int32; }
template <> constexpr DataType data_type_of<std::int64_t>() { return DataType::int64; }
template <> constexpr DataType data_type_of<std::uint8_t>() { return DataType::uint8; }
template <> constexpr DataType data_type_of<kx::bf16>() { return DataType::bfloat16; }
template <> constexpr DataType data_type_of<kx::fp16>() { return DataType::float16; }

std::size_t size_of(DataType type);

// Handle of a non-blocking operation. Two ways to complete it:
//  - wait_on(consumer): later work queued on the execution-space instance `consumer` sees the
//    result. On NCCL the consumer's stream waits on an event recorded after the operation on the
//    communication stream: the host does not block, and only the kernels queued after this call
//    wait. On MPI it is wait() (MPI needs the host to complete a request).
//  - wait(): the host blocks until the operation is complete (for host-side readers).
// Both are idempotent. A Request that goes out of scope while pending is wait()ed on, so buffers
// are never released under a live operation. Move-only.
class Request {
 public:
  using HostWait = std::function<void()>;
  using DeviceWait = std::function<void(const kx::ExecSpace&)>;
  Request() = default;
  explicit Request(HostWait wait, DeviceWait wait_on = nullptr)
      : wait_(std::move(wait)), wait_on_(std::move(wait_on)) {}
  Request(Request&& other) noexcept;
  Request& operator=(Request&& other) noexcept;
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;
  ~Request() { wait(); }

  void wait();
  void wait_on(const kx::ExecSpace& consumer);
  bool pending() const { return static_cast<bool>(wait_); }
  // Runs `then` on the host after the operation completes, whichever way it is completed (e.g.
  // copy a staged host buffer back, release a staging buffer).
  Request then(std::function<void()> then) &&;

 private:
  HostWait wait_;
  DeviceWait wait_on_;
};

void wait_all(Request* requests, std::size_t count);
// Every request, completed for `consumer` (Request::wait_on).
void wait_all_on(Request* requests, std::size_t count, const kx::ExecSpace& consumer);

// The operations, what each does with its buffers, and the fields it reads (count: elements of
// one rank's contribution; all ranks of the group call it with the same count and type):
//
//   all_reduce      recv, in place: every rank ends with `op` over all ranks' recv
//   all_gather      recv[r*count .. (r+1)*count) = send of rank r. In place (NCCL's convention)
//                   when send == recv + rank*count: the rank's own block is already where it
//                   belongs
//   reduce_scatter  recv (count elements) = `op` over ranks of send[rank*count .. (rank+1)*count).
//                   In place (NCCL's convention) when recv == send + rank*count: the rank's block
//                   of send receives its result, the other blocks are left unspecified. Any other
//                   overlap of send and recv is not allowed
//   broadcast       recv, in place: every rank ends with rank `peer`'s recv
//   send            send to rank `peer` with `tag`
//   recv            recv from rank `peer` with `tag`
//   all_to_all      every rank r sends send[send_offsets[r] ..+ send_counts[r]) to rank r, which
//                   receives it in recv[recv_offsets[q] ..+ recv_counts[q]) (q the sender): the
//                   expert dispatch and combine of a mixture of experts (MPI_Ialltoallv; NCCL a
//                   group of ncclSend/ncclRecv, one pair per peer). The four host arrays of size()
//                   elements (counts and offsets in elements) are read during the call only; the
//                   counts must agree pairwise (all_to_all_counts exchanges them first)
//
// NCCL has no tags: messages between a pair are matched in issue order.
enum class Collective { all_reduce, all_gather, reduce_scatter, broadcast, send, recv, all_to_all };
// "all_reduce", "all_gather", ... (for messages).
const char* collective_name(Collective c);

struct Operation {
  Collective kind = Collective::all_reduce;
  const void* send = nullptr;
  void* recv = nullptr;
  std::size_t count = 0;
  DataType type = DataType::float32;
  ReduceOp op = ReduceOp::sum;  // all_reduce, reduce_scatter
  int peer = 0;                 // broadcast: the root; send, recv: the other rank
  int tag = 0;                  // send, recv
  int lane = -1;                // send, recv: a lane of open_lanes(), -1: none (the group's queue)
  // all_to_all: per peer, in elements
  const std::size_t* send_counts = nullptr;
  const std::size_t* send_offsets = nullptr;
  const std::size_t* recv_counts = nullptr;
  const std::size_t* recv_offsets = nullptr;
};

class Communicator {
 public:
  virtual ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // The MPI communicator of this group (also used to bootstrap NCCL, and for host-side
  // control messages such as agreeing on an error).
  MPI_Comm mpi_comm() const { return comm_; }
  // True when buffers must be host-accessible (MPI backend); the View wrappers stage device
  // data through host mirrors for such a backend.
  virtual bool needs_host_memory() const = 0;
  // True when a reduction (all-reduce, reduce-scatter) of `type` must see host buffers even if
  // needs_host_memory() is false: the MPI backend reduces 16-bit floats in its own operation,
  // which runs on the host and reads the buffers directly, also under a CUDA-aware MPI.
  virtual bool reduces_on_host(DataType type) const { (void)type; return needs_host_memory(); }
  virtual const char* backend_name() const = 0;

  // Starts `op` (see the table above Collective) after the work queued on `exec` so far.
  virtual Request start(const kx::ExecSpace& exec, const Operation& op) = 0;

  // Point-to-point transfers issued between group_start and group_end are one operation (NCCL:
  // ncclGroupStart/End, so that a stage's sends and receives of one pipeline step progress
  // together instead of one after the other). Inside a group the backend may return empty
  // Requests from send/recv operations; the Request of group_end completes them all. On MPI every
  // transfer keeps its own Request and group_end returns an empty one. `exec` is the instance
  // whose queued work produces the send buffers and may still read the receive buffers.
  virtual void group_start(const kx::ExecSpace& exec) { (void)exec; }
  virtual Request group_end() { return Request(); }

  // Lanes: `count` independent queues of point-to-point transfers (lane 0 .. count - 1), for
  // flows of transfers that must not wait for each other's progress. A transfer issued with
  // Operation::lane = l is ordered after exec's work like any other, then waits only for the
  // transfers issued before it on lane l, and is matched with the peer's transfer on the same
  // lane by their order there; it may not be issued inside a group. Collective over the group
  // (every rank opens the same count). Returns the lanes opened: 0 on a backend that needs none
  // (MPI: every transfer is its own request, matched by tag), which then ignores
  // Operation::lane; NCCL: a communicator and a stream per lane (nccl_communicator.hpp).
  virtual int open_lanes(int count) { (void)count; return 0; }

  // The stream device collectives run on, or null (host backends): a different stream than
  // the compute instance's, so that a collective overlaps the kernels that do not need it.
  virtual const void* communication_stream() const { return nullptr; }

  // Host-side barrier of the group (MPI), e.g. before renaming a finished checkpoint.
  void barrier() const;

  // Reused host buffers for staging device data (collectives.hpp), when needs_host_memory().
  StagingPool& staging() { return staging_; }

 protected:
  // Takes ownership of `comm` (freed in the destructor).
  explicit Communicator(MPI_Comm comm);
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  StagingPool staging_;
};

// The deck's choices for the backends (parallel.nccl_pipeline_lanes, parallel.mpi_device_memory;
// topology_of_deck.hpp reads them), passed down rather than read from the environment. The
// defaults are the deck's defaults.
struct CommunicatorOptions {
  // NCCL: whether open_lanes opens lanes. false: it opens none, and the pipeline keeps its one
  // in-order queue (a fallback for a system where concurrent NCCL communicators misbehave).
  bool lanes = true;
  // MPI with device memory: whether MPI is handed device pointers. ask: as the library reports
  // it (mpi_communicator.hpp); yes/no: the deck overrides that answer (e.g. a library that
  // reports support but crashes on it).
  enum class DeviceMemory { ask, yes, no };
  DeviceMemory mpi_device_memory = DeviceMemory::ask;
};

// The backend for a group: NCCL when built with it and Kokkos runs on CUDA, MPI otherwise.
// Takes ownership of `comm`.
std::unique_ptr<Communicator> make_communicator(MPI_Comm comm, const CommunicatorOptions& options = {});

}  // namespace tptrain::parallel
