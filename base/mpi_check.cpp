#include "base/mpi_check.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tptrain::parallel {

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<std::size_t>(len));
}

void abort_job(const std::string& message) {
  int initialized = 0, finalized = 0, rank = -1;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  const bool mpi = initialized && !finalized;
  if (mpi) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  // log::error's form; this library sits below src/log.
  std::string line = "tptrain: error";
  if (rank >= 0) line += " (rank " + std::to_string(rank) + ")";
  line += ": " + message + (mpi ? "; ending the job\n" : "\n");
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
  if (mpi) MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();
}

void abort_job(const char* call, const char* file, int line, const std::string& reason) {
  // "MPI_Allreduce(MPI_IN_PLACE, &x, ...)" -> "MPI_Allreduce"; "src/x/y.cpp" -> "y.cpp".
  const std::string name(call, std::strcspn(call, "( "));
  const char* base = std::strrchr(file, '/');
  abort_job(name + " failed: " + reason + " (call at " + (base != nullptr ? base + 1 : file) + ":" +
            std::to_string(line) + ")");
}

}  // namespace tptrain::parallel
