#include "src/parallel/communicator.hpp"

#include "base/mpi_check.hpp"
#include "src/parallel/mpi_communicator.hpp"
#include "src/util/host_waits.hpp"
// NCCL serves the CUDA execution space; a build of the core on a host backend of a CUDA Kokkos
// (TPTRAIN_EXEC_SPACE, the per-backend tests) talks MPI.
#if defined(TPTRAIN_HAVE_NCCL) && defined(KOKKOS_ENABLE_CUDA) && !defined(TPTRAIN_EXEC_SPACE)
#define TPTRAIN_NCCL_BACKEND 1
#include "src/parallel/nccl_communicator.hpp"
#endif

namespace tptrain::parallel {

std::size_t size_of(DataType type) {
  switch (type) {
    case DataType::float32: return 4;
    case DataType::float64: return 8;
    case DataType::int32: return 4;
    case DataType::int64: return 8;
    case DataType::uint8: return 1;
    case DataType::bfloat16: return 2;
    case DataType::float16: return 2;
  }
  return 0;
}

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::all_reduce: return "all_reduce";
    case Collective::all_gather: return "all_gather";
    case Collective::reduce_scatter: return "reduce_scatter";
    case Collective::broadcast: return "broadcast";
    case Collective::send: return "send";
    case Collective::recv: return "recv";
    case Collective::all_to_all: return "all_to_all";
  }
  return "collective";
}

Request::Request(Request&& other) noexcept
    : wait_(std::move(other.wait_)), wait_on_(std::move(other.wait_on_)) {
  other.wait_ = nullptr;
  other.wait_on_ = nullptr;
}

Request& Request::operator=(Request&& other) noexcept {
  if (this != &other) {
    wait();
    wait_ = std::move(other.wait_);
    wait_on_ = std::move(other.wait_on_);
    other.wait_ = nullptr;
    other.wait_on_ = nullptr;
  }
  return *this;
}

void Request::wait() {
  if (!wait_) return;
  const util::CommunicationWait timed(util::HostWait::request_wait);
  auto wait = std::move(wait_);
  wait_ = nullptr;
  wait_on_ = nullptr;
  wait();
}

void Request::wait_on(const kx::ExecSpace& consumer) {
  if (!wait_on_) return wait();
  auto wait_on = std::move(wait_on_);
  wait_ = nullptr;
  wait_on_ = nullptr;
  wait_on(consumer);
}

Request Request::then(std::function<void()> then) && {
  auto first = std::move(wait_);
  auto first_on = std::move(wait_on_);
  wait_ = nullptr;
  wait_on_ = nullptr;
  auto shared_then = std::make_shared<std::function<void()>>(std::move(then));
  HostWait wait = [first, shared_then]() {
    if (first) first();
    (*shared_then)();
  };
  DeviceWait wait_on;
  if (first_on)
    wait_on = [first_on, shared_then](const kx::ExecSpace& consumer) {
      first_on(consumer);
      (*shared_then)();
    };
  return Request(std::move(wait), std::move(wait_on));
}

void wait_all(Request* requests, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) requests[i].wait();
}

void wait_all_on(Request* requests, std::size_t count, const kx::ExecSpace& consumer) {
  for (std::size_t i = 0; i < count; ++i) requests[i].wait_on(consumer);
}

Communicator::Communicator(MPI_Comm comm) : comm_(comm) {
  TPTRAIN_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  TPTRAIN_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  TPTRAIN_MPI_CHECK(MPI_Comm_size(comm_, &size_));
}

Communicator::~Communicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL && comm_ != MPI_COMM_WORLD && comm_ != MPI_COMM_SELF)
    MPI_Comm_free(&comm_);
}

void Communicator::barrier() const { TPTRAIN_MPI_CHECK(MPI_Barrier(comm_)); }

std::unique_ptr<Communicator> make_communicator(MPI_Comm comm, const CommunicatorOptions& options) {
#if defined(TPTRAIN_NCCL_BACKEND)
  if (std::is_same<kx::ExecSpace, Kokkos::Cuda>::value)
    return std::make_unique<NcclCommunicator>(comm, options.lanes);
#endif
  return std::make_unique<MpiCommunicator>(comm, options.mpi_device_memory);
}

}  // namespace tptrain::parallel
