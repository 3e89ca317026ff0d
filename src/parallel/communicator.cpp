#include "src/parallel/communicator.hpp"

#include "src/parallel/mpi_check.hpp"
#include "src/parallel/mpi_communicator.hpp"
#if defined(TPTRAIN_HAVE_NCCL)
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
  }
  return 0;
}

Request& Request::operator=(Request&& other) noexcept {
  if (this != &other) {
    wait();
    complete_ = std::move(other.complete_);
    other.complete_ = nullptr;
  }
  return *this;
}

void Request::wait() {
  if (!complete_) return;
  auto complete = std::move(complete_);
  complete_ = nullptr;
  complete();
}

Request Request::then(std::function<void()> then) && {
  auto first = std::move(complete_);
  complete_ = nullptr;
  return Request([first = std::move(first), then = std::move(then)]() {
    if (first) first();
    then();
  });
}

void wait_all(Request* requests, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) requests[i].wait();
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

std::unique_ptr<Communicator> make_communicator(MPI_Comm comm) {
#if defined(TPTRAIN_HAVE_NCCL) && defined(KOKKOS_ENABLE_CUDA)
  if (std::is_same<kx::ExecSpace, Kokkos::Cuda>::value)
    return std::make_unique<NcclCommunicator>(comm);
#endif
  return std::make_unique<MpiCommunicator>(comm);
}

}  // namespace tptrain::parallel
