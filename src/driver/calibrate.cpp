#include "src/driver/calibrate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <tuple>

#include "base/agreement.hpp"
#include "base/mpi_check.hpp"
#include "io/json_line.hpp"
#include "io/machine_file.hpp"
#include "io/path_text.hpp"
#include "kokkos_kernels/precision.hpp"
#include "src/driver/attention_rate.hpp"
#include "src/driver/device_facts.hpp"
#include "src/driver/gemm_peak.hpp"
#include "src/driver/kernel_overhead.hpp"
#include "src/driver/ping_pong.hpp"
#include "src/driver/precision_dispatch.hpp"
#include "src/driver/stream_triad.hpp"
#include "src/model/shape_of_deck.hpp"
#include "src/util/log.hpp"

namespace tptrain::driver {

namespace {

double mean_over(MPI_Comm comm, double x) {
  int size = 1;
  TPTRAIN_MPI_CHECK(MPI_Comm_size(comm, &size));
  TPTRAIN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_SUM, comm));
  return x / size;
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
  for (const StandardModel& s : kStandardModels)
    for (const GemmShape& g : model_gemms(standard_shape(s), s.micro_batch)) add(g, fmt::format("{}: {}", s.name, g.what));
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

template <class T>
double rate_of(MPI_Comm world, const GemmShape& g) {
  TPTRAIN_MPI_CHECK(MPI_Barrier(world));  // every rank measures at once, as in training
  return mean_over(world, measure_gemm_flops<T>(g, 0.05, 2));
}

template <class T>
double attention_rate_of(MPI_Comm world, const model::GptShape& shape, int micro_batch) {
  TPTRAIN_MPI_CHECK(MPI_Barrier(world));
  return mean_over(world, measure_attention_flops<T>(shape, micro_batch));
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

  // GEMMs: the deck's precision on every shape, the others on the square 2048.
  const std::string precision = deck.training.precision;
  const std::vector<Shape> shapes = calibration_shapes(deck);
  std::vector<double> rates;
  for (const Shape& s : shapes)
    rates.push_back(with_precision(precision, [&](auto t) { return rate_of<decltype(t)>(world, s.gemm); }));
  const double peak = *std::max_element(rates.begin(), rates.end());
  const GemmShape square{2048, 2048, 2048, "square 2048"};
  std::map<std::string, double> peaks{{precision, peak}};
  for (const char* other : {"fp32", "bf16", "fp16"})
    if (other != precision)
      peaks[other] = with_precision(other, [&](auto t) { return rate_of<decltype(t)>(world, square); });

  // The attention core: the deck's (its flash core at its micro-batch and tensor degree) gives
  // attention_efficiency; the standard models' rates go into the file's comments.
  const model::GptShape own = model::shape_of(deck);
  const double deck_attention =
      own.flash_attention ? with_precision(precision, [&](auto t) {
        return attention_rate_of<decltype(t)>(world, own, deck.training.micro_batch);
      })
                          : 0.0;
  std::vector<double> standard_attention;
  for (const StandardModel& m : kStandardModels)
    standard_attention.push_back(with_precision(precision, [&](auto t) {
      return attention_rate_of<decltype(t)>(world, standard_shape(m), m.micro_batch);
    }));

  TPTRAIN_MPI_CHECK(MPI_Barrier(world));
  const double kernel_us = mean_over(world, measure_kernel_overhead_us());
  TPTRAIN_MPI_CHECK(MPI_Barrier(world));
  const double triad = mean_over(world, measure_triad_bytes_per_s());
  const PingPong link = measure_ping_pong(node);
  MPI_Comm_free(&node);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  parallel::on_every_rank(world, [&] {
    if (rank != 0) return;
    io::MachineFile m;
    constexpr bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, kx::MemSpace>::accessible;
    m.name = facts.cpu_model.empty() ? std::string("unknown CPU") : facts.cpu_model;
    if (!host) m.name = facts.name + " (host " + m.name + ")";
    m.source = fmt::format("measured by tptrain bench --calibrate on {} ({} ranks, {} per node; deck {}, {}; Kokkos {})",
                           today_utc(), topo.world_size(), node_ranks, io::display_path(deck.source), precision,
                           kx::ExecSpace::name());
    m.device_name = facts.name;
    m.peak_tflops_fp32 = peaks["fp32"] / 1e12;
    m.peak_tflops_bf16 = peaks["bf16"] / 1e12;
    m.peak_tflops_fp16 = peaks["fp16"] / 1e12;
    m.memory_gib = facts.memory_bytes / double(1 << 30);
    m.memory_bandwidth_gbs = triad / 1e9;
    m.compute_units = facts.compute_units;
    m.kernel_overhead_us = kernel_us;
    m.device_note = fmt::format(
        "device: {} (peaks: the best GEMM rate per rank through tptrain's GEMM seam, all {} ranks measuring at once; "
        "{} on every shape below, the other precisions on a square 2048 GEMM)\n"
        "memory_bandwidth_gbs: STREAM triad on Kokkos Views, every rank at once, per rank\n"
        "kernel_overhead_us: a one-element Kokkos kernel launched 2000 times back to back, fenced once, per launch",
        host ? "one MPI rank (a CPU core's share of the node; memory_gib: the node's MemTotal over its ranks)"
             : "one GPU (cudaGetDeviceProperties)",
        topo.world_size(), precision);
    m.devices = node_ranks;
    if (link.measured) {
      m.link_latency_us = link.latency_us;
      m.link_bandwidth_gbs = link.bandwidth_gbs;
      m.node_note = "node: the ranks of this node (MPI_Comm_split_type shared); link: MPI ping-pong between its ranks 0 "
                    "and 1 in host memory (latency: 8-byte messages, bandwidth: 4 MiB messages, half a round trip "
                    "each)";
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
    json.integer("gemm_shapes", static_cast<std::int64_t>(m.measured.size()));
    json.number("attention_efficiency", m.attention_efficiency, io::digits(6));
    json.number("kernel_overhead_us", m.kernel_overhead_us, io::digits(6));
    log::info(json.text());
  });
  return 0;
}

}  // namespace tptrain::driver
