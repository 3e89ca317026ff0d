// Collectives over Kokkos Views: the only way layers move data between ranks (through
// mappings.hpp for the tensor-parallel operators). Views must be contiguous (LayoutRight /
// LayoutLeft, no strided subviews). When the backend needs host memory (MPI) but the View lives
// in device memory, the data is staged through a reused host buffer and copied back on completion, so
// the same call works on every backend.
//
// Ordering (communicator.hpp): an operation starts after the work already queued on `exec`; its
// Request completes it on the host (wait) or for an instance (wait_on).
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "base/mpi_check.hpp"
#include "kokkos_kernels/launch_count.hpp"
#include "src/parallel/communicator.hpp"
#include "src/parallel/mpi_communicator.hpp"
#include "src/util/host_waits.hpp"

namespace tptrain::parallel {

namespace detail {

// Every operation starts here: one collective for the launch count (kernels/launch_count.hpp).
inline Request start_counted(Communicator& comm, const kx::ExecSpace& exec, const Operation& op) {
  kernels::launch_count::record(kernels::launch_count::Kind::collective);
  return comm.start(exec, op);
}

template <class View>
void require_contiguous(const View& v, const char* what) {
  if (!v.span_is_contiguous())
    throw std::invalid_argument(std::string("tptrain: ") + what + " needs a contiguous View, got '" +
                                v.label() + "'");
}

template <class View>
constexpr bool host_accessible() {
  return Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename View::memory_space>::accessible;
}

template <class View>
using value_t = typename View::non_const_value_type;

// Runs `op(pointer)` on v's data, staging through a reused host buffer (comm.staging()) if the
// backend needs host memory (`needs_host`, by default comm.needs_host_memory()) and v lives on the
// device. `copy_in`: the op reads the buffer; `copy_out`: the op writes it (copied back when the
// request completes).
template <class View, class Op>
Request with_buffer(Communicator& comm, const kx::ExecSpace& exec, const View& v, bool copy_in,
                    bool copy_out, Op op, bool needs_host) {
  if (host_accessible<View>() || !needs_host) return op(v.data());
  using T = value_t<View>;
  using Flat = Kokkos::View<T*, typename View::memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  using Host = Kokkos::View<T*, kx::StagingSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  const Flat flat(v.data(), v.span());
  std::shared_ptr<void> staging = comm.staging().acquire(v.span() * sizeof(T));
  const Host host(static_cast<T*>(staging.get()), v.span());
  if (copy_in) Kokkos::deep_copy(exec, host, flat);  // the backend fences exec before reading
  Request r = op(host.data());
  return std::move(r).then([exec, host, flat, staging, copy_out]() {
    if (!copy_out) return;
    Kokkos::deep_copy(exec, flat, host);
    // The consumer may be another instance; the staged path is the slow one anyway.
    util::note_host_wait(util::HostWait::staged_copy_back);
    kx::fence(exec, "tptrain::collectives: staged copy back");
  });
}

template <class View, class Op>
Request with_buffer(Communicator& comm, const kx::ExecSpace& exec, const View& v, bool copy_in,
                    bool copy_out, Op op) {
  return with_buffer(comm, exec, v, copy_in, copy_out, op, comm.needs_host_memory());
}

}  // namespace detail

template <class View>
Request iall_reduce(Communicator& comm, const kx::ExecSpace& exec, const View& v, ReduceOp op) {
  detail::require_contiguous(v, "all_reduce");
  if (comm.size() == 1) return Request();
  const DataType type = data_type_of<detail::value_t<View>>();
  return detail::with_buffer(
      comm, exec, v, true, true, [&](auto* p) { return detail::start_counted(comm, exec, Operation{Collective::all_reduce, nullptr, p, v.size(), type, op}); },
      comm.reduces_on_host(type));
}

// recv holds comm.size() blocks of send.size() elements, block r from rank r.
template <class SendView, class RecvView>
Request iall_gather(Communicator& comm, const kx::ExecSpace& exec, const SendView& send,
                    const RecvView& recv) {
  detail::require_contiguous(send, "all_gather");
  detail::require_contiguous(recv, "all_gather");
  if (recv.size() != send.size() * static_cast<std::size_t>(comm.size()))
    throw std::invalid_argument("tptrain: all_gather: receive view '" + recv.label() + "' has " +
                                std::to_string(recv.size()) + " elements, expected " +
                                std::to_string(send.size() * comm.size()));
  return detail::with_buffer(comm, exec, recv, false, true, [&](auto* precv) {
    return detail::with_buffer(comm, exec, send, true, false, [&](auto* psend) {
      return detail::start_counted(comm, exec, Operation{Collective::all_gather, psend, precv, send.size(),
                                        data_type_of<detail::value_t<SendView>>()});
    });
  });
}

// recv = op over ranks of block comm.rank() of send (send holds comm.size() blocks).
template <class SendView, class RecvView>
Request ireduce_scatter(Communicator& comm, const kx::ExecSpace& exec, const SendView& send,
                        const RecvView& recv, ReduceOp op) {
  detail::require_contiguous(send, "reduce_scatter");
  detail::require_contiguous(recv, "reduce_scatter");
  if (send.size() != recv.size() * static_cast<std::size_t>(comm.size()))
    throw std::invalid_argument("tptrain: reduce_scatter: send view '" + send.label() + "' has " +
                                std::to_string(send.size()) + " elements, expected " +
                                std::to_string(recv.size() * comm.size()));
  const DataType type = data_type_of<detail::value_t<SendView>>();
  const bool needs_host = comm.reduces_on_host(type);
  return detail::with_buffer(
      comm, exec, recv, false, true,
      [&](auto* precv) {
        return detail::with_buffer(
            comm, exec, send, true, false,
            [&](auto* psend) {
              return detail::start_counted(comm, exec, Operation{Collective::reduce_scatter, psend, precv, recv.size(), type, op});
            },
            needs_host);
      },
      needs_host);
}

// The in-place forms over one buffer of comm.size() equal blocks (the distributed optimizer's
// flat buckets: block r is rank r's shard), without a second buffer of either size.
// ireduce_scatter_in_place: block comm.rank() of `v` receives op over the ranks of that block;
// the other blocks are left unspecified. iall_gather_in_place: block r of `v` receives rank r's
// block r. Both pass the backend the rank's block as a subview of `v` (communicator.hpp: NCCL's
// in-place convention, MPI_IN_PLACE on MPI).
namespace detail {
template <class View>
auto own_block(const Communicator& comm, const View& v, const char* what) {
  static_assert(static_cast<int>(View::rank) == 1, "tptrain: the in-place collectives take a rank-1 View");
  const auto n = static_cast<std::size_t>(comm.size());
  if (v.size() % n != 0)
    throw std::invalid_argument(std::string("tptrain: ") + what + ": '" + v.label() + "' has " +
                                std::to_string(v.size()) + " elements, not a multiple of the group size " +
                                std::to_string(n));
  const std::size_t block = v.size() / n, r = static_cast<std::size_t>(comm.rank());
  return Kokkos::subview(v, std::make_pair(r * block, (r + 1) * block));
}
}  // namespace detail

template <class View>
Request ireduce_scatter_in_place(Communicator& comm, const kx::ExecSpace& exec, const View& v, ReduceOp op) {
  return ireduce_scatter(comm, exec, v, detail::own_block(comm, v, "reduce_scatter_in_place"), op);
}

template <class View>
Request iall_gather_in_place(Communicator& comm, const kx::ExecSpace& exec, const View& v) {
  return iall_gather(comm, exec, detail::own_block(comm, v, "all_gather_in_place"), v);
}

template <class View>
Request ibroadcast(Communicator& comm, const kx::ExecSpace& exec, const View& v, int root) {
  detail::require_contiguous(v, "broadcast");
  if (comm.size() == 1) return Request();
  const bool is_root = comm.rank() == root;
  return detail::with_buffer(comm, exec, v, is_root, !is_root, [&](auto* p) {
    return detail::start_counted(comm, exec, Operation{Collective::broadcast, nullptr, p, v.size(), data_type_of<detail::value_t<View>>(),
                                      ReduceOp::sum, root});
  });
}

// `lane`: a lane of comm.open_lanes() (communicator.hpp), -1 for none.
template <class View>
Request isend(Communicator& comm, const kx::ExecSpace& exec, const View& v, int peer, int tag, int lane = -1) {
  detail::require_contiguous(v, "send");
  return detail::with_buffer(comm, exec, v, true, false, [&](auto* p) {
    return detail::start_counted(comm, exec, Operation{Collective::send, p, nullptr, v.size(), data_type_of<detail::value_t<View>>(),
                                      ReduceOp::sum, peer, tag, lane});
  });
}

template <class View>
Request irecv(Communicator& comm, const kx::ExecSpace& exec, const View& v, int peer, int tag, int lane = -1) {
  detail::require_contiguous(v, "recv");
  return detail::with_buffer(comm, exec, v, false, true, [&](auto* p) {
    return detail::start_counted(comm, exec, Operation{Collective::recv, nullptr, p, v.size(), data_type_of<detail::value_t<View>>(),
                                      ReduceOp::sum, peer, tag, lane});
  });
}

// All-to-all of contiguous blocks (communicator.hpp, Collective::all_to_all): send holds, in rank
// order, send_counts[r] elements for rank r; recv receives, in rank order, recv_counts[q] elements
// from rank q. The counts (elements) must agree pairwise: exchange them with all_to_all_counts.
template <class SendView, class RecvView>
Request iall_to_all(Communicator& comm, const kx::ExecSpace& exec, const SendView& send,
                    const std::vector<std::size_t>& send_counts, const RecvView& recv,
                    const std::vector<std::size_t>& recv_counts) {
  detail::require_contiguous(send, "all_to_all");
  detail::require_contiguous(recv, "all_to_all");
  const auto n = static_cast<std::size_t>(comm.size());
  if (send_counts.size() != n || recv_counts.size() != n)
    throw std::invalid_argument("tptrain: all_to_all: " + std::to_string(send_counts.size()) + " send and " +
                                std::to_string(recv_counts.size()) + " receive counts for a group of " +
                                std::to_string(n));
  std::vector<std::size_t> send_offsets(n, 0), recv_offsets(n, 0);
  for (std::size_t r = 1; r < n; ++r) {
    send_offsets[r] = send_offsets[r - 1] + send_counts[r - 1];
    recv_offsets[r] = recv_offsets[r - 1] + recv_counts[r - 1];
  }
  if (send_offsets[n - 1] + send_counts[n - 1] > send.span() || recv_offsets[n - 1] + recv_counts[n - 1] > recv.span())
    throw std::invalid_argument("tptrain: all_to_all: the counts exceed the buffers '" + send.label() + "' or '" +
                                recv.label() + "'");
  using V = detail::value_t<SendView>;
  static_assert(std::is_same<V, detail::value_t<RecvView>>::value, "tptrain: all_to_all moves one element type");
  return detail::with_buffer(comm, exec, recv, false, true, [&](auto* precv) {
    return detail::with_buffer(comm, exec, send, true, false, [&](auto* psend) {
      Operation op{Collective::all_to_all, psend, precv, 0, data_type_of<V>()};
      op.send_counts = send_counts.data();
      op.send_offsets = send_offsets.data();
      op.recv_counts = recv_counts.data();
      op.recv_offsets = recv_offsets.data();
      return detail::start_counted(comm, exec, op);
    });
  });
}

// Host counts of an all-to-all: `send` holds size() blocks of `block` values, block r for rank r;
// the result holds size() blocks, block q from rank q. Blocking (MPI_Alltoall over the group's MPI
// communicator, whatever the device backend), as the sizes of the payload that follows must be
// known on the host.
inline std::vector<std::int64_t> all_to_all_counts(const Communicator& comm, const std::vector<std::int64_t>& send) {
  if (comm.size() == 1) return send;
  const std::size_t block = send.size() / static_cast<std::size_t>(comm.size());
  if (block * static_cast<std::size_t>(comm.size()) != send.size())
    throw std::invalid_argument("tptrain: all_to_all_counts: " + std::to_string(send.size()) +
                                " counts are not blocks for a group of " + std::to_string(comm.size()));
  std::vector<std::int64_t> recv(send.size());
  const util::CommunicationWait timed(util::HostWait::host_scalar_reduce);
  TPTRAIN_MPI_CHECK(MPI_Alltoall(send.data(), static_cast<int>(block), MPI_INT64_T, recv.data(),
                                 static_cast<int>(block), MPI_INT64_T, comm.mpi_comm()));
  return recv;
}

// Forms that complete the operation for `exec` (Request::wait_on): work queued on exec after the
// call sees the result. On NCCL the host does not wait; on MPI it does.
template <class View>
void all_reduce(Communicator& comm, const kx::ExecSpace& exec, const View& v, ReduceOp op) {
  iall_reduce(comm, exec, v, op).wait_on(exec);
}
template <class SendView, class RecvView>
void all_gather(Communicator& comm, const kx::ExecSpace& exec, const SendView& send, const RecvView& recv) {
  iall_gather(comm, exec, send, recv).wait_on(exec);
}
template <class SendView, class RecvView>
void reduce_scatter(Communicator& comm, const kx::ExecSpace& exec, const SendView& send,
                    const RecvView& recv, ReduceOp op) {
  ireduce_scatter(comm, exec, send, recv, op).wait_on(exec);
}
template <class View>
void broadcast(Communicator& comm, const kx::ExecSpace& exec, const View& v, int root) {
  ibroadcast(comm, exec, v, root).wait_on(exec);
}
template <class View>
void send(Communicator& comm, const kx::ExecSpace& exec, const View& v, int peer, int tag) {
  isend(comm, exec, v, peer, tag).wait_on(exec);
}
template <class View>
void recv(Communicator& comm, const kx::ExecSpace& exec, const View& v, int peer, int tag) {
  irecv(comm, exec, v, peer, tag).wait_on(exec);
}

// Host scalars (loss, norms, agreement flags): a blocking all-reduce over the group's MPI
// communicator, whatever the device backend.
template <class T>
T all_reduce_scalar(const Communicator& comm, T value, ReduceOp op) {
  if (comm.size() == 1) return value;
  const util::CommunicationWait timed(util::HostWait::host_scalar_reduce);
  TPTRAIN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &value, 1, mpi_type(data_type_of<T>()),
                                  mpi_op(op, data_type_of<T>()), comm.mpi_comm()));
  return value;
}

// Host vectors (statistics of a few values per rank): the element-wise all-reduce of
// all_reduce_scalar, in place.
template <class T>
void all_reduce_host(const Communicator& comm, std::vector<T>& values, ReduceOp op) {
  if (comm.size() == 1 || values.empty()) return;
  const util::CommunicationWait timed(util::HostWait::host_scalar_reduce);
  TPTRAIN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()),
                                  mpi_type(data_type_of<T>()), mpi_op(op, data_type_of<T>()), comm.mpi_comm()));
}

// Lets the MPI library advance pending non-blocking operations of the group (MPI progresses
// e.g. a large MPI_Iallreduce only inside MPI calls; call this between compute phases so that
// communication overlaps them). No effect on a device backend's own streams.
inline void progress(const Communicator& comm) {
  int flag = 0;
  TPTRAIN_MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm.mpi_comm(), &flag, MPI_STATUS_IGNORE));
}

}  // namespace tptrain::parallel
