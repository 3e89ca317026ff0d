// Test main: MPI first, then Kokkos, once for the whole suite (Cabana/ArborX harness style).
// Floating-point exceptions are trapped so that a NaN produced anywhere fails loudly.
// Ranks other than 0 write their report to tptrain_tests.rank<r>.log so the console shows one
// report; any rank's failure still makes the exit code non-zero.
#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_session.hpp>
#else
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#endif

#include <Kokkos_Core.hpp>
#include <cfenv>
#include <cstdio>
#include <mpi.h>
#include <string>
#include <vector>

#include "base/agreement.hpp"
#include "src/util/memory_ledger.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  Kokkos::initialize(argc, argv);
  tptrain::util::memory_ledger().install();
  int result = 0;
  {
    std::vector<char*> args(argv, argv + argc);
    std::string out_flag = "--out";
    std::string out_file = "tptrain_tests.rank" + std::to_string(rank) + ".log";
    if (rank != 0) {
      args.push_back(out_flag.data());
      args.push_back(out_file.data());
    }
#if defined(__GLIBC__)
    feenableexcept(FE_INVALID | FE_DIVBYZERO);
#endif
    Catch::Session session;
    result = session.run(static_cast<int>(args.size()), args.data());
#if defined(__GLIBC__)
    fedisableexcept(FE_INVALID | FE_DIVBYZERO);
#endif
  }
  // Every rank must agree on success, or mpiexec would report only the first failure.
  const std::string failed = tptrain::parallel::agree_on_error(
      MPI_COMM_WORLD, result == 0 ? "" : "tests failed (see tptrain_tests.rank<r>.log of ranks other than 0)");
  if (!failed.empty() && rank == 0) std::fprintf(stderr, "tptrain_tests: %s\n", failed.c_str());
  Kokkos::finalize();
  MPI_Finalize();
  return failed.empty() ? 0 : 1;
}
