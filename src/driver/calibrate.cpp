#include "src/driver/calibrate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#ifdef __linux__
#include <sched.h>
#endif
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>
#include <tuple>

#include "base/agreement.hpp"
#include "base/mpi_check.hpp"
#include "io/json_line.hpp"
#include "io/machine_file.hpp"
#include "io/path_text.hpp"
#include "kokkos_kernels/precision.hpp"
#include "src/driver/attention_rate.hpp"
#include "src/driver/collective_latency.hpp"
#include "src/driver/collective_rate.hpp"
#include "src/driver/device_facts.hpp"
#include "src/driver/gemm_peak.hpp"
#include "src/driver/kernel_overhead.hpp"
#include "src/driver/memory_kernel_rate.hpp"
#include "src/driver/optimizer_rate.hpp"
#include "src/driver/ping_pong.hpp"
#include "src/driver/precision_dispatch.hpp"
#include "src/driver/rank_mean.hpp"
#include "src/driver/stream_triad.hpp"
#include "src/model/shape_of_deck.hpp"
#include "src/model/spec/sublayer_kinds.hpp"
#include "src/plan/parameter_count.hpp"
#include "src/util/log.hpp"

namespace tptrain::driver {

namespace {

// The cores the node's ranks may run on: the union of their affinity masks (hardware_concurrency
// where there is none). One rank's own mask is not it: mpiexec and srun bind each rank to its own
// core by default, and 2 ranks bound to 2 cores do not share one.
int usable_cores(MPI_Comm node) {
#ifdef __linux__
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0)  // every rank joins the union all the same
    for (unsigned c = 0; c < std::thread::hardware_concurrency() && c < CPU_SETSIZE; ++c) CPU_SET(c, &set);
  static_assert(sizeof set % sizeof(unsigned long) == 0, "cpu_set_t is whole words");
  TPTRAIN_MPI_CHECK(
      MPI_Allreduce(MPI_IN_PLACE, &set, int(sizeof set / sizeof(unsigned long)), MPI_UNSIGNED_LONG, MPI_BOR, node));
  return std::max(1, CPU_COUNT(&set));
#else
  (void)node;
  return std::max(1u, std::thread::hardware_concurrency());
#endif
}

// The standard bench models' forwards (input/bench/tiny.toml, small.toml, gpt2-124m.toml: their
// [model] and micro-batch, tensor = 1), so that one calibration covers the validation decks of
// docs/measurements.md whichever deck it was run with.
struct StandardModel {
  const char* name;
  int hidden, heads, ffn, seq, vocab, micro_batch;
};
constexpr StandardModel kStandardModels[] = {
    {"tiny", 128, 4, 512, 128, 256, 16},
    {"small", 384, 6, 1536, 256, 256, 8},
    {"124M", 768, 12, 3072, 1024, 50257, 1},
};
// A GEMM above this many FLOPs is measured with its largest dimension cut to fit (GPT-2's
// 50257-wide logits: 79 GFLOP, seconds per run on a CPU core); its row says the shape it was
// measured at.
constexpr double kMaxGemmFlops = 2e10;
// Written before each timed GEMM so that its operands come from memory, as in a training step
// (other kernels ran since they were last touched): well beyond a core's L2 (2 MiB on this
// machine's Xeon, 1-2 MiB on current server cores).
constexpr std::int64_t kEvictBytes = std::int64_t(16) << 20;

model::GptShape standard_shape(const StandardModel& s) {
  model::GptShape shape;
  shape.hidden = s.hidden;
  shape.heads = s.heads;
  shape.ffn_hidden = s.ffn;
  shape.seq_length = s.seq;
  shape.vocab_size = s.vocab;
  shape.flash_attention = true;  // the CPU default
  return shape;
}

struct Shape {
  GemmShape gemm;
  std::string label;  // "tiny: MLP fc"
};

std::vector<Shape> calibration_shapes(const io::Deck& deck) {
  std::vector<Shape> shapes;
  std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t>, std::size_t> seen;
  const auto add_one = [&](GemmShape g, const std::string& label) {
    if (g.flops() > kMaxGemmFlops) {  // the largest dimension cut (the vocabulary's)
      std::int64_t& big = g.m >= g.n && g.m >= g.k ? g.m : g.n >= g.k ? g.n : g.k;
      big = std::max<std::int64_t>(1, std::int64_t(double(big) * kMaxGemmFlops / g.flops()));
    }
    const auto key = std::make_tuple(g.m, g.n, g.k);
    if (auto it = seen.find(key); it != seen.end()) {
      shapes[it->second].label += ", " + label;
      return;
    }
    seen[key] = shapes.size();
    shapes.push_back({g, label});
  };
  // A linear layer: its forward and its two backward GEMMs (dx, dW), shapes as the planner times them.
  const auto add = [&](const GemmShape& g, const std::string& label) {
    add_one(g, label);
    add_one(backward_input_of(g), label + " (backward dx)");
    add_one(backward_weight_of(g), label + " (backward dW)");
  };
  const model::GptShape own = model::shape_of(deck);
  for (const GemmShape& g : model_gemms(own, deck.training.micro_batch)) add(g, std::string("the deck: ") + g.what);
  if (model::holds_experts(own)) {
    // A mixture's experts each compute their share of the rank's N·K routed rows at balanced load
    // (src/plan/block_time.cpp), not the N rows of a dense MLP.
    const std::int64_t rows = std::max<std::int64_t>(
        1, std::int64_t(deck.training.micro_batch) * own.local_seq_length() * own.experts_per_token /
               model::local_experts(own));
    add({rows, model::mlp_fc_rows(own) / own.tensor, own.hidden, "expert gate|up"}, "the deck: expert gate|up");
    add({rows, own.hidden, model::mlp_width(own) / own.tensor, "expert down"}, "the deck: expert down");
  }
  // Each standard model also at tensor 2 and at a half and a quarter of its micro-batch (the
  // layouts docs/measurements.md validates: tensor, pipeline and data parallelism split the rows
  // or the columns, and a CPU GEMM's rate falls with them).
  for (const StandardModel& s : kStandardModels)
    for (const int tensor : {1, 2})
      for (const int split : {1, 2, 4}) {
        if (s.micro_batch % split != 0) continue;
        model::GptShape shape = standard_shape(s);
        shape.tensor = tensor;
        const int mb = s.micro_batch / split;
        for (const GemmShape& g : model_gemms(shape, mb))
          add(g, fmt::format("{} (tensor {}, micro-batch {}): {}", s.name, tensor, mb, g.what));
      }
  add_one({2048, 2048, 2048, "square 2048"}, "square 2048");
  return shapes;
}

std::string today_utc() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[16];
  std::strftime(text, sizeof text, "%Y-%m-%d", &tm);
  return text;
}

// A barrier the waiting ranks sleep in (MPI_Barrier polls: a waiting rank would hold a core).
void sleeping_barrier(MPI_Comm comm) {
  MPI_Request request = MPI_REQUEST_NULL;
  TPTRAIN_MPI_CHECK(MPI_Ibarrier(comm, &request));
  for (int done = 0;;) {
    TPTRAIN_MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) return;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

// Where each rank measures: a rank's own rate, its mean over the ranks. Every rank of a node
// measures at once, as in training, while the node has a core for each; with more ranks than
// cores (4 ranks on 2 cores) they take turns, as many at once as there are cores, the others
// asleep, so that each measures a whole core (the file scales it by the rank's share of a core).
// Taking turns only where the ranks outnumber the cores keeps the contention of real cores
// (caches, memory) in the figures and leaves out the time slices' lottery.
struct Measuring {
  MPI_Comm world = MPI_COMM_NULL, node = MPI_COMM_NULL;
  int node_rank = 0, node_ranks = 1, cores = 1;
  int turns() const { return (node_ranks + cores - 1) / cores; }
  template <class Measure>
  double mean(Measure&& measure) const {
    TPTRAIN_MPI_CHECK(MPI_Barrier(world));
    double x = 0;
    for (int turn = 0; turn < turns(); ++turn) {
      if (node_rank / cores == turn) x = measure();
      if (turns() > 1) sleeping_barrier(node);
    }
    return mean_over(world, x);
  }
};

template <class T>
double rate_of(const Measuring& at, const GemmShape& g) {
  // Cold operands: a buffer of kEvictBytes written before each run (gemm_peak.hpp).
  return at.mean([&] { return measure_gemm_flops<T>(g, 0.05, 3, kEvictBytes, RunStatistic::median); });
}

template <class T>
double attention_rate_of(const Measuring& at, const model::GptShape& shape, int micro_batch) {
  return at.mean([&] { return measure_attention_flops<T>(shape, micro_batch); });
}

}  // namespace

int run_calibrate(const io::Deck& deck, const parallel::Topology& topo, const std::string& path) {
  const MPI_Comm world = topo.world();
  const int rank = topo.world_rank();
  const auto t0 = std::chrono::steady_clock::now();
  // Before minutes of measuring: the file can be written (rank 0 writes it).
  parallel::on_every_rank(world, [&] {
    if (rank != 0) return;
    std::ofstream probe(path, std::ios::app);
    if (!probe)
      throw std::runtime_error(fmt::format("bench --calibrate: cannot write the machine file {}: {}",
                                           io::display_path(path), std::strerror(errno)));
  });

  MPI_Comm node = MPI_COMM_NULL;
  TPTRAIN_MPI_CHECK(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
  int node_ranks = 1;
  TPTRAIN_MPI_CHECK(MPI_Comm_size(node, &node_ranks));
  int nodes = node_ranks > 0 ? topo.world_size() / node_ranks : 1;
  const DeviceFacts facts = device_facts(node_ranks);
  const int cores = usable_cores(node);
  constexpr bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, kx::MemSpace>::accessible;
  Measuring at{world, node, 0, node_ranks, host ? cores : node_ranks};  // a GPU's rank has its device
  TPTRAIN_MPI_CHECK(MPI_Comm_rank(node, &at.node_rank));

  // GEMMs: the deck's precision on every shape, the others on the square 2048.
  const std::string precision = deck.training.precision;
  const std::vector<Shape> shapes = calibration_shapes(deck);
  std::vector<double> rates;
  for (const Shape& s : shapes)
    rates.push_back(with_precision(precision, [&](auto t) { return rate_of<decltype(t)>(at, s.gemm); }));
  const double peak = *std::max_element(rates.begin(), rates.end());
  const GemmShape square{2048, 2048, 2048, "square 2048"};
  std::map<std::string, double> peaks{{precision, peak}};
  for (const char* other : {"fp32", "bf16", "fp16"})
    if (other != precision)
      peaks[other] = with_precision(other, [&](auto t) { return rate_of<decltype(t)>(at, square); });

  // The attention core: the deck's (its flash core at its micro-batch and tensor degree) gives
  // attention_efficiency; the standard models' rates go into the file's comments.
  const model::GptShape own = model::shape_of(deck);
  const double deck_attention =
      own.flash_attention ? with_precision(precision, [&](auto t) {
        return attention_rate_of<decltype(t)>(at, own, deck.training.micro_batch);
      })
                          : 0.0;
  // Ring attention's flash calls are chunk pairs of c = S/(2C) queries and keys (C = 2, 4, 8 while
  // c is at least 16): the core at those lengths too, [[gemm.measured_attention]] with the deck's.
  std::vector<std::pair<int, double>> chunk_attention;  // c, FLOP/s
  for (int C = 2; own.flash_attention && C <= 8 && own.seq_length % (2 * C) == 0 && own.seq_length / (2 * C) >= 16;
       C *= 2) {
    model::GptShape chunk = own;
    chunk.seq_length = own.seq_length / (2 * C);
    chunk.context = 1;
    chunk_attention.emplace_back(chunk.seq_length, with_precision(precision, [&](auto t) {
                                   return attention_rate_of<decltype(t)>(at, chunk, deck.training.micro_batch);
                                 }));
  }
  std::vector<double> standard_attention;
  for (const StandardModel& m : kStandardModels)
    standard_attention.push_back(with_precision(precision, [&](auto t) {
      return attention_rate_of<decltype(t)>(at, standard_shape(m), m.micro_batch);
    }));

  const double kernel_us = at.mean([] { return measure_kernel_overhead_us(); });
  const double triad = at.mean([] { return measure_triad_bytes_per_s(); });
  // tptrain's norm and GELU kernels at the deck's micro-batch and at each standard model's:
  // the deck's rate is the key, the others go into the comments.
  const auto kernel_rate = [&](const model::GptShape& sh, int micro_batch) {
    const std::int64_t rows = std::int64_t(micro_batch) * sh.seq_length;
    return at.mean([&] {
      return with_precision(precision, [&](auto t) {
        return measure_memory_kernel_bytes_per_s<decltype(t)>(rows, sh.hidden, sh.ffn_hidden / sh.tensor);
      });
    });
  };
  const double deck_kernel_rate = kernel_rate(own, deck.training.micro_batch);
  // The optimizer step's kernels on a bucket of the rank's parameters (the deck's over tensor x
  // pipeline; at most 2^24, far beyond any cache).
  const std::int64_t rank_parameters = std::clamp<std::int64_t>(
      plan::exact_parameters(own) / (std::int64_t(own.tensor) * deck.parallel.pipeline), 1, std::int64_t(1) << 24);
  const double optimizer_rate = at.mean([&] { return measure_optimizer_bytes_per_s(rank_parameters); });
  std::vector<double> standard_kernel_rates;
  for (const StandardModel& sm : kStandardModels) standard_kernel_rates.push_back(kernel_rate(standard_shape(sm), sm.micro_batch));
  // The share of a core a rank holds in training, with more ranks than cores: measured, as the
  // square GEMM's rate with every rank of the node running it at once (one run of many scheduler
  // time slices, so the switches between the ranks and their caches' eviction are in it) over its
  // rate alone. cores/ranks is its upper bound.
  double share = host ? std::min(1.0, double(cores) / double(node_ranks)) : 1.0, square_alone = 0, square_together = 0;
  if (host && at.turns() > 1) {
    const auto alone = std::find_if(shapes.begin(), shapes.end(), [&](const Shape& s) {
      return s.gemm.m == square.m && s.gemm.n == square.n && s.gemm.k == square.k;
    });
    square_alone = rates[std::size_t(alone - shapes.begin())];  // calibration_shapes always has it
    TPTRAIN_MPI_CHECK(MPI_Barrier(world));
    square_together = mean_over(world, with_precision(precision, [&](auto t) {
                                  return measure_gemm_flops<decltype(t)>(square, 0.0, 1, kEvictBytes);
                                }));
    share = std::min(share, square_together / square_alone);
  }
  const PingPong link = measure_ping_pong(node);
  const double all_reduce_s = measure_all_reduce_latency_s(node);
  // The ring's latency per step as an all-reduce over every rank of the node meets it, where
  // that is more than the ping-pong's (oversubscribed cores, MPI's collective algorithm).
  const double per_step_us = node_ranks > 1 ? all_reduce_s / (2.0 * double(node_ranks - 1)) * 1e6 : 0.0;
  const double step_latency_us = std::max(link.latency_us, per_step_us);
  // The collectives at the deck's tensor-parallel all-reduce, [micro_batch·S/C, hidden].
  const std::int64_t activation_elements = std::int64_t(deck.training.micro_batch) * (own.seq_length / own.context) *
                                           own.hidden;
  const CollectiveRate collective = with_precision(precision, [&](auto t) {
    return measure_collective_rate<decltype(t)>(node, activation_elements, step_latency_us * 1e-6);
  });
  MPI_Comm_free(&node);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  parallel::on_every_rank(world, [&] {
    if (rank != 0) return;
    io::MachineFile m;
    m.name = facts.cpu_model.empty() ? std::string("unknown CPU") : facts.cpu_model;
    if (!host) m.name = facts.name + " (host " + m.name + ")";
    m.source = fmt::format("measured by tptrain bench --calibrate on {} ({} ranks, {} per node; deck {}, {}; Kokkos {})",
                           today_utc(), topo.world_size(), node_ranks, io::display_path(deck.source), precision,
                           kx::ExecSpace::name());
    m.device_name = facts.name;
    // More ranks than cores on the node (4 ranks on 2 cores): every rate above is a whole core's
    // (Measuring: the ranks took turns); the per-rank rates are scaled by the share measured above.
    m.peak_tflops_fp32 = share * peaks["fp32"] / 1e12;
    m.peak_tflops_bf16 = share * peaks["bf16"] / 1e12;
    m.peak_tflops_fp16 = share * peaks["fp16"] / 1e12;
    m.memory_gib = facts.memory_bytes / double(1 << 30);
    m.memory_bandwidth_gbs = share * triad / 1e9;
    m.compute_units = facts.compute_units;
    m.kernel_overhead_us = kernel_us / share;
    m.kernel_bandwidth_gbs = share * deck_kernel_rate / 1e9;
    m.optimizer_bandwidth_gbs = share * optimizer_rate / 1e9;
    m.rank_time_share = share;  // a rank computing while others wait runs faster (processor sharing)
    std::string kernel_rates;
    for (std::size_t i = 0; i < standard_kernel_rates.size(); ++i)
      kernel_rates += fmt::format("{}{} {:.4g} GB/s", i ? ", " : "", kStandardModels[i].name, standard_kernel_rates[i] / 1e9);
    m.device_note = fmt::format(
        "device: {} (peaks: the best of the GEMM rates per rank (each its median run's) through tptrain's GEMM seam, {}; "
        "{} on every shape below, the other precisions on a square 2048 GEMM)\n"
        "memory_bandwidth_gbs: STREAM triad on Kokkos Views, per rank, measured as the GEMMs\n"
        "kernel_overhead_us: a one-element Kokkos kernel launched 2000 times back to back, fenced once, per launch\n"
        "kernel_bandwidth_gbs: tptrain's LayerNorm and bias-GELU kernels, forward and backward, at the deck's "
        "micro-batch, over the bytes the planner counts for them (6 x rows x (hidden + ffn) x element bytes); "
        "the standard models: {}\n"
        "optimizer_bandwidth_gbs: tptrain's bucket_adamw_update, bucket_squared_norms and a zero fill on {} fp32 "
        "parameters (the deck's over tensor x pipeline), over the bytes the planner counts for them (36 per parameter)\n"
        "time share: {} ranks on {} usable cores: every per-rank rate above multiplied by {:.3g} (the kernel overhead "
        "divided by it), a rank holding a core that share of the time{}",
        host ? "one MPI rank (a CPU core's share of the node; memory_gib: the node's MemTotal over its ranks)"
             : "one GPU (cudaGetDeviceProperties)",
        at.turns() == 1 ? fmt::format("all {} ranks measuring at once", topo.world_size())
                        : fmt::format("the {} ranks of a node measuring {} at a time, in {} turns, the others asleep",
                                      node_ranks, cores, at.turns()),
        precision, kernel_rates, rank_parameters, node_ranks, cores, share,
        square_together > 0
            ? fmt::format(" (measured: the square 2048 GEMM at {:.4g} GFLOP/s per rank with every rank at once, {:.4g} "
                          "alone; {} ranks on {} cores would give {:.3g})",
                          square_together / 1e9, square_alone / 1e9, node_ranks, cores,
                          double(cores) / double(node_ranks))
            : std::string());
    m.devices = node_ranks;
    if (link.measured) {
      m.link_latency_us = step_latency_us;
      m.link_bandwidth_gbs = link.bandwidth_gbs;
      m.collective_bandwidth_gbs = collective.bus_bandwidth_gbs;
      m.communication_host_share = collective.host_share;
      const double mib = double(activation_elements) * (precision == "fp32" ? 4.0 : 2.0) / double(1 << 20);
      m.node_note = fmt::format(
          "node: the ranks of this node (MPI_Comm_split_type shared); link: MPI ping-pong between its ranks 0 and 1 in "
          "host memory (latency: 8-byte messages, bandwidth: 4 MiB messages, half a round trip each)\n"
          "link_latency_us: the larger of the ping-pong's {:.3g} us and an 8-byte MPI_Allreduce over the node's {} "
          "ranks, {:.3g} us mean, over the ring's 2(k - 1) = {} latencies: {:.3g} us\n"
          "collective_bandwidth_gbs: nccl-tests' bus bandwidth of a {:.3g} MiB {} all-reduce (the deck's "
          "tensor-parallel one) through tptrain's {} communicator over the node's ranks: {:.4g} ms (median)\n"
          "communication_host_share: that all-reduce started, a kernel of {:.4g} ms alone queued behind it, then "
          "waited for: {:.4g} ms, (together - kernel) / all-reduce",
          link.latency_us, node_ranks, all_reduce_s * 1e6, 2 * (node_ranks - 1), per_step_us, mib, precision,
          collective.backend, collective.all_reduce_s * 1e3, collective.kernel_s * 1e3,
          collective.together_s * 1e3);
    } else {
      m.link_latency_us = kDefaultLinkLatencyUs;
      m.link_bandwidth_gbs = kDefaultLinkBandwidthGbs;
      m.node_note = fmt::format(
          "node: one rank in the node, so the link was NOT measured: defaults {} us and {} GB/s (MPI over shared "
          "memory, order of magnitude; run --calibrate on 2 or more ranks to measure them)",
          kDefaultLinkLatencyUs, kDefaultLinkBandwidthGbs);
    }
    m.network_bandwidth_gbs = m.link_bandwidth_gbs;
    m.network_latency_us = m.link_latency_us;
    m.network_note = fmt::format("network: not measured ({} node{}): the node's link figures", nodes,
                                 nodes == 1 ? "" : "s");
    m.max_efficiency = 1.0;
    if (host) {
      m.tile_m = m.tile_n = 1;
      m.gemm_note = "gemm: the peak is the best measured rate, so max_efficiency = 1; one compute unit per rank, so no "
                    "wave quantisation, and no tile quantisation (tile 1 x 1): the rows below carry the shape effects";
    } else {
      m.tile_m = 128;
      m.tile_n = 128;
      m.gemm_note = "gemm: the peak is the best measured rate, so max_efficiency = 1; tile 128 x 128: not measured, a "
                    "typical cuBLAS output tile";
    }
    // The attention core's rate over the peak (at most 1: a faster core than the best GEMM would
    // be a measurement out of its regime).
    std::string attention_note;
    if (deck_attention > 0) {
      m.attention_efficiency = std::min(1.0, deck_attention / peak);
      attention_note = fmt::format(
          "\nattention_efficiency: the flash attention core, forward + backward, of the deck ({} heads of {}, "
          "sequence {}, micro-batch {}): {:.4g} GFLOP/s per rank (FLOPs as model::attention_flops_per_sequence "
          "counts them)",
          own.local_heads(), own.head_dim(), own.seq_length, deck.training.micro_batch, deck_attention / 1e9);
    } else {
      attention_note = "\nattention_efficiency: not measured (the deck's attention core is not flash)";
    }
    for (std::size_t i = 0; i < standard_attention.size(); ++i) {
      const model::GptShape sm = standard_shape(kStandardModels[i]);
      attention_note += fmt::format("\n  {} ({} heads of {}, sequence {}, micro-batch {}): {:.4g} GFLOP/s, {:.3g} of the peak",
                                    kStandardModels[i].name, sm.heads, sm.head_dim(), sm.seq_length,
                                    kStandardModels[i].micro_batch, standard_attention[i] / 1e9,
                                    standard_attention[i] / peak);
    }
    m.gemm_note += attention_note;
    if (deck_attention > 0) {
      m.measured_attention.push_back({precision, double(own.seq_length), m.attention_efficiency,
                                      fmt::format("the deck's sequence: {:.4g} GFLOP/s per rank", deck_attention / 1e9)});
      for (const auto& [length, rate] : chunk_attention)
        m.measured_attention.push_back(
            {precision, double(length), std::min(1.0, rate / peak),
             fmt::format("ring attention's chunk pairs at context {}: {:.4g} GFLOP/s per rank",
                         own.seq_length / (2 * length), rate / 1e9)});
    }
    for (std::size_t i = 0; i < shapes.size(); ++i)
      m.measured.push_back({precision, double(shapes[i].gemm.m), double(shapes[i].gemm.n), double(shapes[i].gemm.k),
                            rates[i] / peak,
                            fmt::format("{}: {:.4g} GFLOP/s per rank", shapes[i].label, rates[i] / 1e9)});
    for (const auto& [p, rate] : peaks)
      if (p != precision)
        m.measured.push_back({p, double(square.m), double(square.n), double(square.k), 1.0,
                              fmt::format("square 2048 in {}: {:.4g} GFLOP/s per rank", p, rate / 1e9)});
    const std::string text = io::machine_file_toml(m);
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    if (f) f.write(text.data(), std::streamsize(text.size()));
    if (f) f.close();
    if (!f)
      throw std::runtime_error(fmt::format("bench --calibrate: cannot write the machine file {}: {}",
                                           io::display_path(path), std::strerror(errno)));
    log::infof("bench --calibrate: wrote {} in {:.1f} s: GEMM peak {:.4g} GFLOP/s per rank ({}), triad {:.4g} GB/s per "
               "rank, link {} us / {} GB/s ({}), {} rank{} per node",
               io::display_path(path), seconds, peak / 1e9, precision, triad / 1e9, fmt::format("{:.3g}", m.link_latency_us),
               fmt::format("{:.3g}", m.link_bandwidth_gbs), link.measured ? "measured" : "default, one rank",
               node_ranks, node_ranks == 1 ? "" : "s");
    io::JsonObject json;
    json.string("calibrate", path).number("seconds", seconds, io::digits(4));
    json.number("peak_tflops_fp32", m.peak_tflops_fp32, io::digits(6));
    json.number("peak_tflops_bf16", m.peak_tflops_bf16, io::digits(6));
    json.number("peak_tflops_fp16", m.peak_tflops_fp16, io::digits(6));
    json.number("memory_bandwidth_gbs", m.memory_bandwidth_gbs, io::digits(6));
    json.integer("node_devices", node_ranks).boolean("link_measured", link.measured);
    json.number("link_latency_us", m.link_latency_us, io::digits(6));
    json.number("link_bandwidth_gbs", m.link_bandwidth_gbs, io::digits(6));
    json.number("collective_bandwidth_gbs", m.collective_bandwidth_gbs, io::digits(6));
    json.number("communication_host_share", m.communication_host_share, io::digits(4));
    json.number("rank_time_share", m.rank_time_share, io::digits(4));
    json.integer("gemm_shapes", static_cast<std::int64_t>(m.measured.size()));
    json.number("attention_efficiency", m.attention_efficiency, io::digits(6));
    json.number("kernel_overhead_us", m.kernel_overhead_us, io::digits(6));
    json.number("kernel_bandwidth_gbs", m.kernel_bandwidth_gbs, io::digits(6));
    json.number("optimizer_bandwidth_gbs", m.optimizer_bandwidth_gbs, io::digits(6));
    log::info(json.text());
  });
  return 0;
}

}  // namespace tptrain::driver
