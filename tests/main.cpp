// Test main: MPI first, then Kokkos, once for the whole suite (Cabana/ArborX harness style).
// Floating-point exceptions are trapped so that a NaN produced anywhere fails loudly.
//
// Under mpiexec every rank runs the suite. Rank 0 reports where the command line says (the
// console, or -o/--out FILE); ranks r > 0 write theirs to FILE with ".rank<r>" before its
// extension, or to tptrain_tests.rank<r>.log, so the console shows one report. Every rank reads
// the command line and opens its report file before any test runs, and the ranks agree on the
// outcome: a rank that cannot start (a bad option, a file it cannot write) ends the run on every
// rank with its reason, instead of leaving the others waiting in a test's collective forever.
// Any rank's failure makes the exit code non-zero.
#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_session.hpp>
#define TPTRAIN_CATCH3 1
#else
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#define TPTRAIN_CATCH3 0
#endif

#include <Kokkos_Core.hpp>
#include <cerrno>
#include <cfenv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mpi.h>
#include <string>

#include "base/agreement.hpp"
#include "src/util/memory_ledger.hpp"

namespace {

// The console as Catch2 names it: "" (no -o), "-", "%stdout", "%stderr", "%debug".
bool is_console(const std::string& name) { return name.empty() || name == "-" || name.front() == '%'; }

// Where rank r > 0 reports instead of `name`.
std::string rank_report(const std::string& name, int rank) {
  const std::string suffix = ".rank" + std::to_string(rank);
  if (is_console(name)) return "tptrain_tests" + suffix + ".log";
  std::filesystem::path p(name);
  return (p.parent_path() / (p.stem().string() + suffix + p.extension().string())).string();
}

// Can this rank write its report? "" or why not (Catch2 would fail inside Session::run, on
// this rank only).
std::string report_problem(const std::string& name) {
  if (is_console(name)) return {};
  std::FILE* f = std::fopen(name.c_str(), "a");
  if (f == nullptr) return "cannot write the report file " + name + ": " + std::strerror(errno);
  std::fclose(f);
  return {};
}

// Sends this rank's reports where they belong; "" or why it cannot report.
std::string route_reports(Catch::ConfigData& config, int rank) {
#if TPTRAIN_CATCH3
  if (rank > 0) {
    config.defaultOutputFilename = rank_report(config.defaultOutputFilename, rank);
    for (auto& spec : config.reporterSpecifications)
      if (spec.outputFile())
        spec = Catch::ReporterSpec(spec.name(), rank_report(*spec.outputFile(), rank), spec.colourMode(),
                                   spec.customOptions());
  }
  std::string problem = report_problem(config.defaultOutputFilename);
  for (const auto& spec : config.reporterSpecifications)
    if (problem.empty() && spec.outputFile()) problem = report_problem(*spec.outputFile());
  return problem;
#else
  if (rank > 0) config.outputFilename = rank_report(config.outputFilename, rank);
  return report_problem(config.outputFilename);
#endif
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  Kokkos::initialize(argc, argv);
  tptrain::util::memory_ledger().install();
  int result = 0;
  std::string failed;
  {
    Catch::Session session;
    // Catch2 prints why a command line is wrong; the ranks then agree that the run cannot start.
    std::string problem = session.applyCommandLine(argc, argv) != 0 ? "the command line was refused (above)" : "";
    if (problem.empty()) problem = route_reports(session.configData(), rank);
    failed = tptrain::parallel::agree_on_error(MPI_COMM_WORLD, problem);
    if (failed.empty()) {
#if defined(__GLIBC__)
      feenableexcept(FE_INVALID | FE_DIVBYZERO);
#endif
      result = session.run();
#if defined(__GLIBC__)
      fedisableexcept(FE_INVALID | FE_DIVBYZERO);
#endif
      // Every rank must agree on success, or mpiexec would report only the first failure.
      failed = tptrain::parallel::agree_on_error(
          MPI_COMM_WORLD, result == 0 ? "" : "tests failed (ranks other than 0 report to *.rank<r>.*)");
    } else {
      failed = "cannot start: " + failed;
    }
  }
  if (!failed.empty() && rank == 0) std::fprintf(stderr, "tptrain_tests: %s\n", failed.c_str());
  Kokkos::finalize();
  MPI_Finalize();
  return failed.empty() ? 0 : 1;
}
