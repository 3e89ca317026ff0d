#include "src/driver/bench.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>

#include "base/agreement.hpp"
#include "base/mpi_check.hpp"
#include "base/test_hooks.hpp"
#include "io/deck_text.hpp"
#include "io/json_line.hpp"
#include "io/path_text.hpp"
#include "kokkos_kernels/attention_path.hpp"
#include "kokkos_kernels/launch_count.hpp"
#include "src/util/log.hpp"
#include "src/parallel/collectives.hpp"
#include "src/driver/bench_trace.hpp"
#include "src/driver/calibrate.hpp"
#include "src/driver/gemm_peak.hpp"
#include "src/train/memory_metrics.hpp"
#include "src/model/model_flops.hpp"
#include "src/driver/precision_dispatch.hpp"
#include "src/driver/rank_mean.hpp"
#include "src/train/training_run.hpp"
#include "src/util/blas_info.hpp"
#include "src/util/host_waits.hpp"
#include "src/util/phases.hpp"

namespace tptrain::driver {

namespace {

using util::Phase;

double reduce_over(MPI_Comm world, double x, MPI_Op op) {
  TPTRAIN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, op, world));
  return x;
}
void barrier(MPI_Comm world) { TPTRAIN_MPI_CHECK(MPI_Barrier(world)); }

// Kokkos host threads of a rank (1 on Serial, OMP_NUM_THREADS on OpenMP; on a GPU those of the
// host space, not the device's concurrency).
int threads_per_rank() { return static_cast<int>(Kokkos::DefaultHostExecutionSpace().concurrency()); }

// GEMMs run on the host BLAS only when the execution space is a host one.
constexpr bool gemms_on_host() {
  return Kokkos::SpaceAccessibility<Kokkos::HostSpace, kx::MemSpace>::accessible;
}

// How far a run of `total` steps is, said by rank 0: with `pace`, after the first step what the
// rest will take at its pace; then a line every 10 s, so that a long warm-up (up to
// BenchOptions::max_warmup steps of a large model) is not minutes of silence.
class StepProgress {
 public:
  StepProgress(const char* what, std::int64_t total, bool pace) : what_(what), total_(total), pace_(pace) {}
  void step_done(std::int64_t done) {
    const auto now = Clock::now();
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const double left = elapsed / static_cast<double>(done) * static_cast<double>(total_ - done);
    if (pace_ && done == 1 && total_ > 1) {
      log::infof("bench: {} step 1/{} took {:.3g} s: about {} more for the {}", what_, total_, elapsed,
                 format_seconds(left), what_);
    } else if (done < total_ && now - last_ >= std::chrono::seconds(10)) {
      log::infof("bench: {} step {}/{} after {}, about {} left", what_, done, total_, format_seconds(elapsed),
                 format_seconds(left));
    } else {
      return;
    }
    last_ = now;
  }

 private:
  using Clock = std::chrono::steady_clock;
  static std::string format_seconds(double s) {
    if (s >= 3600) return fmt::format("{:.1f} h", s / 3600);
    if (s >= 60) return fmt::format("{:.1f} min", s / 60);
    return fmt::format("{:.3g} s", s);
  }
  const char* what_;
  std::int64_t total_;
  bool pace_;
  Clock::time_point start_ = Clock::now(), last_ = start_;
};

// Launches of the counted step: the whole step, and per layer forward and backward (the layer's
// sites divided by how often they were entered; recompute = full enters the forward again in
// the backward, so its forward mean covers those too).
struct LayerLaunches {
  double kernels = 0, blas = 0, collectives = 0;
  double compute() const { return kernels + blas; }
};
struct LaunchReport {
  kernels::LaunchCounts step;
  LayerLaunches forward, backward;
};

LayerLaunches per_entry(int site) {
  namespace lc = kernels::launch_count;
  const kernels::LaunchCounts c = lc::at(site);
  const double n = static_cast<double>(std::max<std::int64_t>(lc::entries(site), 1));
  return {c.kernels / n, c.blas / n, c.collectives / n};
}

LaunchReport launch_report() {
  using Layer = model::TransformerLayer<float>;
  return {kernels::launch_count::total(), per_entry(Layer::forward_site), per_entry(Layer::backward_site)};
}

template <class C>
io::JsonObject launch_json(const C& c) {
  io::JsonObject j;
  j.number("kernels", static_cast<double>(c.kernels), io::digits(6));
  j.number("blas", static_cast<double>(c.blas), io::digits(6));
  j.number("kernels_and_blas", static_cast<double>(c.kernels + c.blas), io::digits(6));
  j.number("collectives", static_cast<double>(c.collectives), io::digits(6));
  return j;
}

template <class T>
int bench_as(const io::Deck& deck_in, const parallel::Topology& topo, const BenchOptions& o) {
  // The deck's run, cut to the benchmark's steps: the LR schedule spans them (warmup included).
  io::Deck deck = deck_in;
  // + 1: the counted step; + 1: the traced one
  deck.training.steps = o.warmup + (o.phases ? 2 : 1) * o.steps + 1 + (o.trace.empty() ? 0 : 1);
  deck.optimizer.warmup_steps = std::min(deck.optimizer.warmup_steps, deck.training.steps);
  // --attention: the deck's training.attention, or the batched core in its causal-tile GEMM form
  // (the former CPU path, kept as a reference to measure against).
  if (o.attention != "default") deck.training.attention = o.attention == "flash" ? "flash" : "batched";
  const model::GptShape shape = model::shape_of(deck);
  const MPI_Comm world = topo.world();
  std::optional<kernels::AttentionPath> attention_choice;
  if (o.attention == "batched") attention_choice = kernels::AttentionPath::batched;
  else if (o.attention == "causal_tiles") attention_choice = kernels::AttentionPath::causal_tiles;
  const kernels::AttentionPathScope attention_path(attention_choice);
  const char* attention_name =
      shape.flash_attention ? "flash" : kernels::attention_path_name(kernels::attention_path<kx::ExecSpace>());

  // Before the run is built and stepped: the trace can be written (rank 0 writes it).
  if (!o.trace.empty())
    parallel::on_every_rank(world, [&] {
      if (topo.world_rank() != 0) return;
      std::ofstream probe(o.trace, std::ios::app);
      if (!probe)
        throw std::runtime_error(fmt::format("bench --trace: cannot write the trace {}: {}", io::display_path(o.trace),
                                             std::strerror(errno)));
    });

  // Enough synthetic tokens that sequences rarely repeat within a step.
  train::RunOptions options;
  options.synthetic_tokens =
      std::max<std::int64_t>(std::int64_t(1) << 20, 4 * std::int64_t(deck.training.global_batch) * (shape.seq_length + 1));
  std::unique_ptr<train::TrainingRun<T>> run;
  parallel::on_every_rank(topo.world(), [&] { run = std::make_unique<train::TrainingRun<T>>(deck, topo, options); });

  util::BlasInfo blas = util::blas_info();
  if (!gemms_on_host()) blas.warning.clear();  // cuBLAS does the GEMMs: the host BLAS does not matter
  const GemmShape model_gemm = largest_model_gemm(shape, deck.training.micro_batch);
  log::infof("bench: {} {} layers, hidden {}, heads {}{}, ffn {}, seq {}, vocab {}; batch {} (micro-batch {}); "
             "tensor {}{} x pipeline {} x data {}; {} threads per rank; {} warm-up + {} timed steps{}",
             shape.architecture, shape.layers, shape.hidden, shape.heads,
             shape.kv_head_count() != shape.heads ? fmt::format(" ({} key/value)", shape.kv_head_count()) : "",
             shape.ffn_hidden, shape.seq_length, shape.vocab_size,
             deck.training.global_batch, deck.training.micro_batch, topo.layout().tensor,
             topo.layout().context > 1 ? fmt::format(" x context {}", topo.layout().context) : std::string(),
             topo.layout().pipeline,
             topo.layout().data, threads_per_rank(), o.warmup, o.steps,
             o.phases ? fmt::format(" + {} steps timed by phase", o.steps) : std::string());
  log::infof("bench: BLAS {}{}{}, CPU {}; Kokkos {}", blas.library, blas.core.empty() ? "" : " (kernels " + blas.core + ")",
             blas.threads > 0 ? fmt::format(", {} BLAS threads", blas.threads) : "", blas.cpu.empty() ? "unknown" : blas.cpu,
             kx::ExecSpace::name());
  if (!blas.warning.empty()) log::warning(blas.warning);
  log::info("bench: " + run->memory_report());

  std::int64_t step = 0;
  StepProgress warmup("warm-up", o.warmup, true);
  for (; step < o.warmup; ++step) {
    run->step(step);
    warmup.step_done(step + 1);
  }
  auto& clock = util::PhaseClock::instance();
  auto& m = run->model();
  const std::int64_t blocks_before = m.recomputed_blocks(), heads_before = m.recomputed_heads(),
                     scores_before = m.recomputed_scores();
  // tokens/s: the device is fenced at step boundaries only (the phases' timing is off, so they
  // are bare Kokkos Tools regions).
  clock.set_timing(false);
  // The rows each rank's experts receive in the timed steps: the routing's imbalance over the
  // expert-parallel ranks, which the step waits for at every all-to-all.
  const bool experts_exchanged = topo.layout().expert > 1;
  if (experts_exchanged) m.keep_expert_rows(true);
  barrier(world);
  const util::HostWaits::Counts waits_before = util::HostWaits::instance().counts();  // docs/design.md, "Host waits"
  const auto t0 = std::chrono::steady_clock::now();
  StepProgress timed("timed", o.steps, false);
  for (; step < o.warmup + o.steps; ++step) {
    run->step(step);
    Kokkos::fence();
    timed.step_done(step + 1 - o.warmup);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  util::HostWaits::Counts waits_per_step{};
  for (int k = 0; k < util::kHostWaitCount; ++k)
    waits_per_step[static_cast<std::size_t>(k)] =
        util::HostWaits::instance().counts()[static_cast<std::size_t>(k)] - waits_before[static_cast<std::size_t>(k)];
  const double step_s = reduce_over(world, seconds, MPI_MAX) / o.steps;
  double expert_imbalance = 1.0;  // of the expert group whose routing is the least balanced
  if (experts_exchanged) {
    expert_imbalance = reduce_over(world, m.take_expert_imbalance(topo.ep()), MPI_MAX);
    m.keep_expert_rows(false);
  }
  const auto per_step = [&](std::int64_t now, std::int64_t before) { return static_cast<double>(now - before) / o.steps; };
  const model::Recomputed recomputed{per_step(m.recomputed_blocks(), blocks_before),
                                     per_step(m.recomputed_heads(), heads_before),
                                     per_step(m.recomputed_scores(), scores_before)};
  // Before the GEMM peak's own matrices are allocated: the memory of training steps only.
  const train::NamedBytes measured = train::measured_memory_fields(world, true);

  // --phases: as many steps again, each phase boundary fenced and timed.
  double phases_step_s = 0.0;
  if (o.phases) {
    barrier(world);
    clock.reset();
    clock.set_timing(true);
    const auto p0 = std::chrono::steady_clock::now();
    StepProgress by_phase("phase-timed", o.steps, false);
    for (; step < o.warmup + 2 * o.steps; ++step) {
      run->step(step);
      by_phase.step_done(step + 1 - o.warmup - o.steps);
    }
    Kokkos::fence();
    phases_step_s =
        reduce_over(world, std::chrono::duration<double>(std::chrono::steady_clock::now() - p0).count(), MPI_MAX) /
        o.steps;
    clock.set_timing(false);
  }
  const util::PhaseClock::Seconds phase_seconds = clock.seconds();  // before --trace's step adds to them

  // One more step with launch counting on (not timed: counting calls a Kokkos Tools callback per
  // kernel, and Kokkos 4 fences before each such callback). This rank's counts; every rank of a layout issues alike up to its pipeline stage.
  barrier(world);
  LaunchReport launches;
  {
    kernels::LaunchCounting counting;
    run->step(step++);
    Kokkos::fence();
    launches = launch_report();
  }

  // --trace: one more step, every phase boundary fenced and kept as an interval.
  std::size_t traced_spans = 0;
  if (!o.trace.empty()) {
    std::vector<util::PhaseInterval> intervals;
    barrier(world);
    clock.record(&intervals);
    clock.set_timing(true);
    const double step_start =
        std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    run->step(step++);
    Kokkos::fence();
    clock.set_timing(false);
    clock.record(nullptr);
    traced_spans = intervals.size();
    write_step_trace(world, topo.layout(), intervals, step_start, o.trace);
  }

  // Model FLOPs per step, over all ranks: the formula for every token. What recomputation runs
  // again (training.recompute = full: every block's forward; selective and full: Q Kᵀ in every
  // block's backward; a last pipeline stage whose head another micro-batch overwrote: the head)
  // is not model FLOPs: it counts in the hardware FLOPs (HFU, Korthikanti et al. 2022 section 6.3).
  const double tokens_per_step = static_cast<double>(run->tokens_per_step());
  const double flops_per_token = model::training_flops_per_token(shape);
  const double recompute_flops = reduce_over(world, model::recomputed_flops(shape, m.tokens(), recomputed), MPI_SUM);
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
  if (o.phases)
    for (int p = 0; p < util::kPhaseCount; ++p) {
      phases[static_cast<std::size_t>(p)] = mean_over(world, phase_seconds[static_cast<std::size_t>(p)] / o.steps);
      phase_total += phases[static_cast<std::size_t>(p)];
    }

  const double tokens_per_s = tokens_per_step / step_s;
  std::string table =
      fmt::format("bench: step {:.4f} s, {:.0f} tokens/s (fenced at step boundaries only)\n", step_s, tokens_per_s);
  table += fmt::format("  model FLOPs: {} = {:.4g} GFLOP/token{}\n", model::kModelFlopsFormula, flops_per_token / 1e9,
                       recompute_flops > 0 ? fmt::format(" + {:.4g} GFLOP/step recomputed", recompute_flops / 1e9) : "");
  table += fmt::format("  model FLOP/s per rank: {:.2f} GFLOP/s\n", flops_per_s_per_rank / 1e9);
  {  // what the attention core runs, against the full square the model FLOPs count for it
    const double sequences = double(m.micro_batch()) * run->micro_batches() * m.local_layers();
    const double executed = sequences * (shape.context > 1 ? model::ring_attention_step_flops(shape).total()
                                                           : model::attention_flops_per_sequence(
                                                                 shape, deck.training.recompute == "none"));
    const double counted = sequences * 12.0 * double(shape.seq_length) * shape.seq_length * shape.hidden /
                           (double(shape.tensor) * shape.context);
    table += fmt::format("  attention ({}) executes {:.4g} GFLOP per step on rank 0, {:.0f} % of the S x S square the "
                         "model FLOPs count\n",
                         attention_name, executed / 1e9, 100.0 * executed / counted);
  }
  table += fmt::format("  GEMM peak per rank: {:.2f} GFLOP/s ({} [{}x{}x{}]: {:.2f}; square 2048: {:.2f})\n", peak / 1e9,
                       model_gemm.what, model_gemm.m, model_gemm.n, model_gemm.k, model_gemm_rate / 1e9, square_rate / 1e9);
  table += fmt::format("  MFU: {:.1f} % of the GEMM peak{}\n", 100.0 * mfu,
                       recompute_flops > 0 ? fmt::format(" (with the recomputed forwards, HFU: {:.1f} %)", 100.0 * hfu)
                                           : std::string());
  {
    std::string waits;  // rank 0's
    for (int k = 0; k < util::kHostWaitCount; ++k)
      if (const auto n = waits_per_step[static_cast<std::size_t>(k)]; n > 0)
        waits += fmt::format("{}{} {:g}", waits.empty() ? "" : ", ", util::host_wait_name(static_cast<util::HostWait>(k)),
                             static_cast<double>(n) / o.steps);
    table += fmt::format("  host waits per step (rank 0; docs/design.md, \"Host waits\"): {}\n", waits.empty() ? "none" : waits);
  }
  if (experts_exchanged)
    table += fmt::format("  expert routing: the busiest of the {} expert-parallel ranks received {:.3f} x the mean "
                         "rows (timed steps; `plan --expert-imbalance {:.3f}` costs the step at it)\n",
                         topo.layout().expert, expert_imbalance, expert_imbalance);
  if (o.phases) {
    table += fmt::format("  step time by phase (--phases: {} more steps, every phase boundary fenced: {:.4f} s per "
                         "step; mean over ranks, per step):\n",
                         o.steps, phases_step_s);
    for (int p = 0; p < util::kPhaseCount; ++p) {
      const double s = phases[static_cast<std::size_t>(p)];
      table += fmt::format("    {:<18} {:>10.4f} s {:>6.1f} %\n", util::phase_name(static_cast<Phase>(p)), s,
                           phase_total > 0 ? 100.0 * s / phase_total : 0.0);
    }
  } else {
    table += "  step time by phase: not measured (--phases times it in steps of its own)\n";
  }
  if (const int P = topo.layout().pipeline; P > 1) {
    const int v = m.chunks(), M = run->micro_batches();
    const double bubble = double(P - 1) / (double(v) * M);
    table += fmt::format("  pipeline: {} stages x {} virtual stage{}, {} micro-batches: bubble (p - 1)/(v m) = {:.1f} %",
                         P, v, v == 1 ? "" : "s", M, 100 * bubble);
    if (const double t = test_hooks().layer_seconds; t > 0) {
      // The test hook's compute alone: every layer 1 t forward + 2 t backward per micro-batch.
      const double ideal = double(M) * (shape.layers / P) * 3 * t;
      table += fmt::format("; with the test hook layer_seconds = {:g}: predicted step {:.4f} s = {:.4f} s x (1 + "
                           "bubble), measured {:.4f} s, bubble measured {:.1f} %",
                           t, ideal * (1 + bubble), ideal, step_s, 100 * (step_s / ideal - 1));
    }
    table += "\n";
  }
  if (!o.trace.empty())
    table += fmt::format("  trace of one more step (every phase boundary fenced): {} ({} intervals on rank 0)\n",
                         io::display_path(o.trace), traced_spans);
  table += fmt::format("  attention path: {}\n", attention_name);
  table += fmt::format("  launches per optimizer step (rank 0, one counted step): {} kernels + {} BLAS = {}; {} "
                       "collectives\n",
                       launches.step.kernels, launches.step.blas, launches.step.compute(), launches.step.collectives);
  table += fmt::format("  launches per layer: forward {:.4g} + {:.4g} BLAS, backward {:.4g} + {:.4g} BLAS = {:.4g} "
                       "kernels and BLAS (budget 40); collectives {:.4g} forward, {:.4g} backward\n",
                       launches.forward.kernels, launches.forward.blas, launches.backward.kernels,
                       launches.backward.blas, launches.forward.compute() + launches.backward.compute(),
                       launches.forward.collectives, launches.backward.collectives);
  log::info(table);

  io::JsonObject launches_json;
  launches_json.string("attention_path", attention_name);
  launches_json.object("per_step", launch_json(launches.step));
  launches_json.object("per_layer_forward", launch_json(launches.forward));
  launches_json.object("per_layer_backward", launch_json(launches.backward));

  io::JsonObject phases_json;
  for (int p = 0; p < util::kPhaseCount; ++p)
    phases_json.number(util::phase_name(static_cast<Phase>(p)), phases[static_cast<std::size_t>(p)], io::digits(6));
  const std::string stem = std::filesystem::path(deck.source).stem().string();
  // Bytes of this rank by category (rank 0's view; every rank of a layout is alike up to its stage).
  const train::ParameterMemory pm = run->parameter_memory();
  io::JsonObject memory_json;
  memory_json.integer("weights", pm.weight).integer("master_weights", pm.master).integer("gradients", pm.gradient);
  memory_json.integer("optimizer_state", pm.optimizer).integer("activations", m.activation_bytes());
  memory_json.number("bytes_per_parameter", pm.per_parameter(), io::digits(6));
  for (const auto& [name, bytes] : measured) memory_json.integer(name, bytes);  // train/memory_metrics.hpp
  io::JsonObject json;
  json.string("bench", stem).integer("ranks", topo.world_size()).integer("tensor", topo.layout().tensor);
  json.integer("context", topo.layout().context);
  json.integer("pipeline", topo.layout().pipeline).integer("data", topo.layout().data);
  json.integer("virtual_stages", m.chunks())
      .number("pipeline_bubble",
              double(topo.layout().pipeline - 1) / (double(m.chunks()) * run->micro_batches()), io::digits(6));
  json.integer("threads", threads_per_rank()).integer("steps", o.steps).integer("warmup", o.warmup);
  json.string("architecture", shape.architecture);
  json.integer("layers", shape.layers).integer("hidden", shape.hidden).integer("heads", shape.heads);
  json.integer("kv_heads", shape.kv_head_count()).integer("ffn_hidden", shape.ffn_hidden);
  json.integer("seq_length", shape.seq_length).integer("vocab_size", shape.vocab_size);
  json.integer("global_batch", deck.training.global_batch).integer("micro_batch", deck.training.micro_batch);
  json.number("parameters", model::flops_parameters(shape), io::fixed(0));
  json.number("tokens_per_s", tokens_per_s, io::digits(6)).number("step_s", step_s, io::digits(6));
  json.number("model_flops_per_token", flops_per_token, io::digits(6))
      .string("flops_formula", model::kModelFlopsFormula);
  json.number("recompute_flops_per_step", recompute_flops, io::digits(6));
  json.number("model_flops_per_s_per_rank", flops_per_s_per_rank, io::digits(6));
  json.number("gemm_peak_flops_per_rank", peak, io::digits(6));
  json.string("gemm_model_shape", fmt::format("{} {}x{}x{}", model_gemm.what, model_gemm.m, model_gemm.n, model_gemm.k));
  json.number("gemm_model_shape_flops", model_gemm_rate, io::digits(6));
  json.number("gemm_square_2048_flops", square_rate, io::digits(6));
  json.number("mfu", mfu, io::fixed(4)).number("hfu", hfu, io::fixed(4)).string("kokkos", kx::ExecSpace::name());
  json.string("blas", gemms_on_host() ? blas.library : std::string("cuBLAS (device)")).string("blas_core", blas.core);
  json.string("blas_warning", blas.warning).string("precision", kx::precision_name<T>());
  json.string("recompute", deck.training.recompute).boolean("sequence_parallel", shape.splits_sequence());
  io::JsonObject waits_json;  // rank 0's, per timed step
  for (int k = 0; k < util::kHostWaitCount; ++k)
    waits_json.number(util::host_wait_name(static_cast<util::HostWait>(k)),
                      static_cast<double>(waits_per_step[static_cast<std::size_t>(k)]) / o.steps, io::digits(6));
  json.object("memory", memory_json).object("launches", launches_json).object("host_waits_per_step", waits_json);
  json.number("expert_imbalance", expert_imbalance, io::fixed(4));
  json.boolean("phases", o.phases);
  // Only with --phases: the phase times and the step time of those fenced steps.
  if (o.phases) json.object("phases_s", phases_json).number("phases_step_s", phases_step_s, io::digits(6));
  if (!o.trace.empty()) json.string("trace", o.trace);
  // A rate of a step or GEMM too short for the clock: null in the JSON (it has no infinity), said here.
  if (!json.non_finite().empty())
    log::info(fmt::format("bench: {} not finite (a time of 0 s measured?): null in the JSON line",
                          io::describe_non_finite(json)));
  log::info(json.text());
  return 0;
}

}  // namespace

int run_bench(const io::Deck& deck, const parallel::Topology& topo, const BenchOptions& o) {
  if (!o.calibrate.empty()) return run_calibrate(deck, topo, o.calibrate);
  return with_precision(deck.training.precision, [&](auto t) { return bench_as<decltype(t)>(deck, topo, o); });
}

}  // namespace tptrain::driver
