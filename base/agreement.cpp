#include "base/agreement.hpp"

#include <algorithm>
#include <climits>

#include "base/mpi_check.hpp"

namespace tptrain::parallel {

std::string agree_on_error(MPI_Comm comm, const std::string& local_error) {
  int rank = 0, size = 1;
  TPTRAIN_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  TPTRAIN_MPI_CHECK(MPI_Comm_size(comm, &size));
  const int mine = local_error.empty() ? size : rank;
  int first = size;
  TPTRAIN_MPI_CHECK(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm));
  if (first == size) return {};
  // The failing rank's message, cut to a sane length (a message is for people, not data).
  std::string message = rank == first ? local_error.substr(0, 1 << 16) : std::string();
  int length = static_cast<int>(message.size());
  TPTRAIN_MPI_CHECK(MPI_Bcast(&length, 1, MPI_INT, first, comm));
  message.resize(static_cast<std::size_t>(length));
  TPTRAIN_MPI_CHECK(MPI_Bcast(message.data(), length, MPI_CHAR, first, comm));
  if (first != 0) message += " [rank " + std::to_string(first) + "]";
  return message;
}

int agree_on_stop_signal(MPI_Comm comm, int local_signal) {
  int agreed = 0;
  TPTRAIN_MPI_CHECK(MPI_Allreduce(&local_signal, &agreed, 1, MPI_INT, MPI_MAX, comm));
  return agreed;
}

}  // namespace tptrain::parallel
