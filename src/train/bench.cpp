#include "src/train/bench.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>

#include "base/agreement.hpp"
#include "base/mpi_check.hpp"
#include "io/deck_text.hpp"
#include "src/log.hpp"
#include "src/parallel/collectives.hpp"
#include "src/train/gemm_peak.hpp"
#include "src/train/memory_metrics.hpp"
#include "src/train/model_flops.hpp"
#include "src/train/precision_dispatch.hpp"
#include "src/train/training_run.hpp"
#include "src/util/blas_info.hpp"
#include "src/util/phases.hpp"

namespace tptrain::train {

namespace {

using util::Phase;

double reduce_over(MPI_Comm world, double x, MPI_Op op) {
  TPTRAIN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, op, world));
  return x;
}
double mean_over(MPI_Comm world, double x) {
  int size = 1;
  TPTRAIN_MPI_CHECK(MPI_Comm_size(world, &size));
  return reduce_over(world, x, MPI_SUM) / size;
}
void barrier(MPI_Comm world) { TPTRAIN_MPI_CHECK(MPI_Barrier(world)); }

// Kokkos host threads of a rank (1 on Serial, OMP_NUM_THREADS on OpenMP; on a GPU those of the
// host space, not the device's concurrency).
int threads_per_rank() { return static_cast<int>(Kokkos::DefaultHostExecutionSpace().concurrency()); }

// GEMMs run on the host BLAS only when the execution space is a host one.
constexpr bool gemms_on_host() {
  return Kokkos::SpaceAccessibility<Kokkos::HostSpace, kx::MemSpace>::accessible;
}


template <class T>
int bench_as(const io::Deck& deck_in, const parallel::Topology& topo, const BenchOptions& o) {
  // The deck's run, cut to the benchmark's steps: the LR schedule spans them (warmup included).
  io::Deck deck = deck_in;
  deck.training.steps = o.warmup + o.steps;
  deck.optimizer.warmup_steps = std::min(deck.optimizer.warmup_steps, deck.training.steps);
  const model::GptShape shape = shape_of(deck);
  const MPI_Comm world = topo.world();

  // Enough synthetic tokens that sequences rarely repeat within a step.
  RunOptions options;
  options.synthetic_tokens =
      std::max<std::int64_t>(std::int64_t(1) << 20, 4 * std::int64_t(deck.training.global_batch) * (shape.seq_length + 1));
  std::unique_ptr<TrainingRun<T>> run;
  parallel::on_every_rank(topo.world(), [&] { run = std::make_unique<TrainingRun<T>>(deck, topo, options); });

  util::BlasInfo blas = util::blas_info();
  if (!gemms_on_host()) blas.warning.clear();  // cuBLAS does the GEMMs: the host BLAS does not matter
  const GemmShape model_gemm = largest_model_gemm(shape, deck.training.micro_batch);
  log::infof("bench: {} layers, hidden {}, heads {}, ffn {}, seq {}, vocab {}; batch {} (micro-batch {}); "
             "tensor {} x pipeline {} x data {}; {} threads per rank; {} warm-up + {} timed steps",
             shape.layers, shape.hidden, shape.heads, shape.ffn_hidden, shape.seq_length, shape.vocab_size,
             deck.training.global_batch, deck.training.micro_batch, topo.layout().tensor, topo.layout().pipeline,
             topo.layout().data, threads_per_rank(), o.warmup, o.steps);
  log::infof("bench: BLAS {}{}{}, CPU {}; Kokkos {}", blas.library, blas.core.empty() ? "" : " (kernels " + blas.core + ")",
             blas.threads > 0 ? fmt::format(", {} BLAS threads", blas.threads) : "", blas.cpu.empty() ? "unknown" : blas.cpu,
             kx::ExecSpace::name());
  if (!blas.warning.empty()) log::warning(blas.warning);
  log::info("bench: " + run->memory_report());

  std::int64_t step = 0;
  for (; step < o.warmup; ++step) run->step(step);
  auto& clock = util::PhaseClock::instance();
  const std::int64_t blocks_before = run->model().recomputed_blocks(), heads_before = run->model().recomputed_heads();
  barrier(world);
  clock.reset();
  clock.set_timing(true);
  const auto t0 = std::chrono::steady_clock::now();
  for (; step < o.warmup + o.steps; ++step) run->step(step);
  Kokkos::fence();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  clock.set_timing(false);
  const double step_s = reduce_over(world, seconds, MPI_MAX) / o.steps;
  // Before the GEMM peak's own matrices are allocated: the memory of training steps only.
  const NamedBytes measured = measured_memory_fields(world, true);

  // Model FLOPs per step, over all ranks: the formula for every token. The forwards that
  // recomputation runs again (training.recompute = full: every block; a last pipeline stage whose
  // head another micro-batch overwrote: the head) are not model FLOPs: they count in the hardware
  // FLOPs (HFU, Korthikanti et al. 2022 section 6.3), as does nothing of selective recomputation's
  // Q Kᵀ (the formula's attention term already counts the full S×S products).
  const double tokens_per_step = static_cast<double>(run->tokens_per_step());
  const double flops_per_token = training_flops_per_token(shape);
  auto& m = run->model();
  const double blocks = static_cast<double>(m.recomputed_blocks() - blocks_before) / o.steps;
  const double heads = static_cast<double>(m.recomputed_heads() - heads_before) / o.steps;
  const double recompute_flops = reduce_over(
      world,
      static_cast<double>(m.tokens()) *
          (blocks * forward_flops_per_token(shape, 1, false) + heads * forward_flops_per_token(shape, 0, true)) /
          topo.layout().tensor,
      MPI_SUM);
  const double flops_per_s_per_rank = tokens_per_step * flops_per_token / step_s / topo.world_size();
  const double hardware_flops_per_s_per_rank =
      (tokens_per_step * flops_per_token + recompute_flops) / step_s / topo.world_size();

  // The GEMM peak of the same ranks, all measuring at once.
  barrier(world);
  const double model_gemm_rate = mean_over(world, measure_gemm_flops<T>(model_gemm));
  barrier(world);
  const double square_rate = mean_over(world, measure_gemm_flops<T>(GemmShape{2048, 2048, 2048, "square 2048"}));
  const double peak = std::max(model_gemm_rate, square_rate);
  const double mfu = flops_per_s_per_rank / peak;
  const double hfu = hardware_flops_per_s_per_rank / peak;

  util::PhaseClock::Seconds phases{};
  double phase_total = 0.0;
  for (int p = 0; p < util::kPhaseCount; ++p) {
    phases[static_cast<std::size_t>(p)] = mean_over(world, clock.seconds()[static_cast<std::size_t>(p)] / o.steps);
    phase_total += phases[static_cast<std::size_t>(p)];
  }

  const double tokens_per_s = tokens_per_step / step_s;
  std::string table = fmt::format("bench: step {:.4f} s, {:.0f} tokens/s\n", step_s, tokens_per_s);
  table += fmt::format("  model FLOPs: {} = {:.4g} GFLOP/token{}\n", kModelFlopsFormula, flops_per_token / 1e9,
                       recompute_flops > 0 ? fmt::format(" + {:.4g} GFLOP/step recomputed", recompute_flops / 1e9) : "");
  table += fmt::format("  model FLOP/s per rank: {:.2f} GFLOP/s\n", flops_per_s_per_rank / 1e9);
  table += fmt::format("  GEMM peak per rank: {:.2f} GFLOP/s ({} [{}x{}x{}]: {:.2f}; square 2048: {:.2f})\n", peak / 1e9,
                       model_gemm.what, model_gemm.m, model_gemm.n, model_gemm.k, model_gemm_rate / 1e9, square_rate / 1e9);
  table += fmt::format("  MFU: {:.1f} % of the GEMM peak{}\n", 100.0 * mfu,
                       recompute_flops > 0 ? fmt::format(" (with the recomputed forwards, HFU: {:.1f} %)", 100.0 * hfu)
                                           : std::string());
  table += "  step time by phase (mean over ranks, per step):\n";
  for (int p = 0; p < util::kPhaseCount; ++p) {
    const double s = phases[static_cast<std::size_t>(p)];
    table += fmt::format("    {:<18} {:>10.4f} s {:>6.1f} %\n", util::phase_name(static_cast<Phase>(p)), s,
                         phase_total > 0 ? 100.0 * s / phase_total : 0.0);
  }
  log::info(table);

  std::string phases_json;
  for (int p = 0; p < util::kPhaseCount; ++p)
    phases_json += fmt::format("{}\"{}\": {:.6g}", p ? ", " : "", util::phase_name(static_cast<Phase>(p)),
                               phases[static_cast<std::size_t>(p)]);
  const std::string stem = std::filesystem::path(deck.source).stem().string();
  // Bytes of this rank by category (rank 0's view; every rank of a layout is alike up to its stage).
  const ParameterMemory pm = run->parameter_memory();
  std::string measured_json;  // what the memory ledger measured (train/memory_metrics.hpp)
  for (const auto& [name, bytes] : measured) measured_json += fmt::format(", {}: {}", io::json_string(name), bytes);
  const std::string memory_json = fmt::format(
      "{{\"weights\": {}, \"master_weights\": {}, \"gradients\": {}, \"optimizer_state\": {}, "
      "\"activations\": {}, \"bytes_per_parameter\": {:.6g}{}}}",
      pm.weight, pm.master, pm.gradient, pm.optimizer, m.activation_bytes(), pm.per_parameter(), measured_json);
  log::info(fmt::format(
      "{{\"bench\": {}, \"ranks\": {}, \"tensor\": {}, \"pipeline\": {}, \"data\": {}, \"threads\": {}, "
      "\"steps\": {}, \"warmup\": {}, \"layers\": {}, \"hidden\": {}, \"heads\": {}, \"seq_length\": {}, "
      "\"vocab_size\": {}, \"global_batch\": {}, \"micro_batch\": {}, \"parameters\": {:.0f}, "
      "\"tokens_per_s\": {:.6g}, \"step_s\": {:.6g}, \"model_flops_per_token\": {:.6g}, \"flops_formula\": {}, "
      "\"recompute_flops_per_step\": {:.6g}, \"model_flops_per_s_per_rank\": {:.6g}, "
      "\"gemm_peak_flops_per_rank\": {:.6g}, \"gemm_model_shape\": {}, \"gemm_model_shape_flops\": {:.6g}, "
      "\"gemm_square_2048_flops\": {:.6g}, \"mfu\": {:.4f}, \"hfu\": {:.4f}, \"kokkos\": {}, \"blas\": {}, \"blas_core\": {}, "
      "\"blas_warning\": {}, \"precision\": {}, \"recompute\": {}, \"sequence_parallel\": {}, \"memory\": {}, "
      "\"phases_s\": {{{}}}}}",
      io::json_string(stem), topo.world_size(), topo.layout().tensor, topo.layout().pipeline, topo.layout().data,
      threads_per_rank(), o.steps, o.warmup, shape.layers, shape.hidden, shape.heads, shape.seq_length,
      shape.vocab_size, deck.training.global_batch, deck.training.micro_batch, flops_parameters(shape),
      tokens_per_s, step_s, flops_per_token, io::json_string(kModelFlopsFormula), recompute_flops,
      flops_per_s_per_rank, peak,
      io::json_string(fmt::format("{} {}x{}x{}", model_gemm.what, model_gemm.m, model_gemm.n, model_gemm.k)),
      model_gemm_rate, square_rate, mfu, hfu, io::json_string(kx::ExecSpace::name()),
      io::json_string(gemms_on_host() ? blas.library : std::string("cuBLAS (device)")), io::json_string(blas.core), io::json_string(blas.warning),
      io::json_string(kx::precision_name<T>()), io::json_string(deck.training.recompute),
      shape.splits_sequence() ? "true" : "false", memory_json, phases_json));
  return 0;
}

}  // namespace

int run_bench(const io::Deck& deck, const parallel::Topology& topo, const BenchOptions& o) {
  return with_precision(deck.training.precision, [&](auto t) { return bench_as<decltype(t)>(deck, topo, o); });
}

}  // namespace tptrain::train
