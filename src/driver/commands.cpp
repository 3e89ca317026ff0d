#include "src/driver/commands.hpp"
#include "src/driver/mpi_session.hpp"

#include <Kokkos_Core.hpp>
#include <fmt/format.h>
#include <mpi.h>
#include <iostream>
#include <optional>
#include <sstream>

#include "base/agreement.hpp"
#include "base/mpi_check.hpp"
#include "io/deck.hpp"
#include "io/path_text.hpp"
#include "io/read_watchdog.hpp"
#include "io/writable_directory.hpp"
#include "src/driver/inspect.hpp"
#include "src/util/log.hpp"
#include "src/parallel/collectives.hpp"
#include "src/parallel/device_binding.hpp"
#include "src/parallel/topology.hpp"
#include "src/parallel/topology_of_deck.hpp"
#include "io/chrome_trace.hpp"
#include "src/plan/layout_search.hpp"
#include "src/plan/plan.hpp"
#include "src/plan/step_simulation.hpp"
#include "src/driver/bench.hpp"
#include "src/checkpoint/model_checkpoint.hpp"
#include "src/driver/eval_command.hpp"
#include "src/driver/generate_command.hpp"
#include "src/driver/train_command.hpp"
#include "src/util/memory_ledger.hpp"
#include "src/util/stop_signal.hpp"

namespace tptrain::driver {

namespace {

std::vector<std::string>& kokkos_arguments() {
  static std::vector<std::string> args;
  return args;
}

bool chooses_device(const std::vector<std::string>& args) {
  for (const auto& a : args)
    for (const char* flag : {"--kokkos-device-id", "--kokkos-map-device-id-by", "--kokkos-num-devices"})
      if (a.rfind(flag, 0) == 0) return true;
  return false;
}

// This process's node and device, fixed at start-up (JobSession).
struct Placement {
  parallel::NodePlacement node;
  int devices = 0;  // visible GPUs
  int device = -1;  // the one this rank drives, -1 without GPUs
};
Placement& placement() {
  static Placement p;
  return p;
}

// MPI first (the member), then Kokkos on this rank's device; torn down in reverse order.
class JobSession {
  MpiSession mpi_{MPI_THREAD_MULTIPLE};

 public:
  JobSession() {
    Placement& p = placement();
    p.node = parallel::node_placement(MPI_COMM_WORLD);
    p.devices = parallel::visible_devices();
    p.device = parallel::device_for(p.node.local_rank, p.devices);
    // The --kokkos-* flags of the command line go to Kokkos; unless they choose the device
    // themselves, this rank's device is added.
    std::vector<std::string> args{"tptrain"};
    args.insert(args.end(), kokkos_arguments().begin(), kokkos_arguments().end());
    if (p.device >= 0 && !chooses_device(kokkos_arguments()))
      args.push_back("--kokkos-device-id=" + std::to_string(p.device));
    std::vector<char*> pointers;
    for (auto& a : args) pointers.push_back(a.data());
    pointers.push_back(nullptr);
    int kargc = static_cast<int>(args.size());
    char** kargv = pointers.data();
    Kokkos::initialize(kargc, kargv);
    util::memory_ledger().install();  // after Kokkos: it chains to a Kokkos Tools library loaded by initialize
  }
  ~JobSession() { Kokkos::finalize(); }
  JobSession(const JobSession&) = delete;
  JobSession& operator=(const JobSession&) = delete;
};

// Every rank loads the deck; all agree before anyone proceeds, so a deck readable on one node
// but not another ends the job everywhere instead of leaving ranks in a collective.
io::Deck load_deck_on_every_rank(const DeckOptions& o) {
  std::optional<io::Deck> deck;
  try {
    parallel::on_every_rank(MPI_COMM_WORLD, [&] { deck = io::load_deck(o.deck, o.overrides, o.data_files);
    });
  } catch (const parallel::AgreedError& e) {
    throw parallel::AgreedError("invalid deck " + o.deck + ":\n" + e.what());
  }
  return *deck;
}

// Builds the rank grid, or reports (once, on rank 0) why the world cannot hold the layout.
std::optional<parallel::Topology> make_topology(const io::Deck& deck) {
  const parallel::Layout layout = parallel::layout_of(deck);
  try {
    return std::optional<parallel::Topology>(std::in_place, MPI_COMM_WORLD, layout,
                                             parallel::communicator_options_of(deck));
  } catch (const parallel::TopologyError& e) {
    if (log::rank() == 0) log::error(e.what());
    return std::nullopt;
  }
}

// Rank 0 prints the rank map: every rank's coordinates, host and device; and warns when a
// tensor-parallel group spans nodes or ranks share a GPU.
void print_rank_map(const parallel::Topology& topo) {
  const std::vector<std::string> hosts = parallel::host_names(topo.world());
  const Placement& p = placement();
  std::vector<int> devices(static_cast<std::size_t>(topo.world_size()));
  TPTRAIN_MPI_CHECK(MPI_Gather(&p.device, 1, MPI_INT, devices.data(), 1, MPI_INT, 0, topo.world()));
  if (topo.world_rank() != 0) return;
  const auto& L = topo.layout();
  const bool cp = L.context > 1;
  log::infof("ranks: {} = tensor {} x {}pipeline {} x data {}, order {}, on {} node{} (backend {}, Kokkos {})",
             topo.world_size(), L.tensor, cp ? fmt::format("context {} x ", L.context) : std::string(), L.pipeline,
             L.data, cp ? parallel::rank_order_name_with_context(L.order) : parallel::rank_order_name(L.order),
             p.node.nodes, p.node.nodes == 1 ? "" : "s", topo.tp().backend_name(), kx::ExecSpace::name());
  for (int r = 0; r < topo.world_size(); ++r) {
    const auto c = parallel::coordinates_of(r, L);
    const int d = devices[static_cast<std::size_t>(r)];
    log::infof("  rank {:>4}  tp {:>3}{}  pp {:>3}  dp {:>4}  on {} node {}{}", r, c.tp,
               cp ? fmt::format("  cp {:>3}", c.cp) : std::string(), c.pp, c.dp,
               hosts[static_cast<std::size_t>(r)], p.node.node_of_rank[static_cast<std::size_t>(r)],
               d >= 0 ? fmt::format(" gpu {}", d) : std::string());
  }
  if (const std::string spans = parallel::tensor_groups_spanning_nodes(L, p.node.node_of_rank); !spans.empty())
    log::warning(spans);
  if (p.devices > 0 && p.node.local_size > p.devices)
    log::warning(fmt::format("{} ranks on a node with {} visible GPU{}: ranks share a device (NCCL refuses two "
                             "ranks of one communicator on the same GPU); start one rank per GPU",
                             p.node.local_size, p.devices, p.devices == 1 ? "" : "s"));
}

}  // namespace

void set_kokkos_arguments(std::vector<std::string> args) { kokkos_arguments() = std::move(args); }

int rank_device() { return placement().device; }

std::string version_string() {
  return fmt::format("tptrain {} (Kokkos {}.{}.{}, {}, MPI {}.{})", TPTRAIN_VERSION,
                     KOKKOS_VERSION / 10000, KOKKOS_VERSION / 100 % 100, KOKKOS_VERSION % 100,
                     Kokkos::DefaultExecutionSpace::name(), MPI_VERSION, MPI_SUBVERSION);
}

namespace {

// check and plan read cluster decks on machines that do not hold the cluster's data: a data file
// that does not exist is a warning for them (train and eval still refuse it).
io::Deck load_deck_data_may_be_absent(const DeckOptions& o) {
  std::vector<std::string> warnings;
  io::Deck deck = io::load_deck(o.deck, o.overrides, io::DataFiles::may_be_absent, &warnings);
  for (const std::string& w : warnings) log::warning(w);
  return deck;
}

}  // namespace

int plan(const DeckOptions& o, const PlanOptions& options) {
  io::Deck deck;
  try {
    deck = load_deck_data_may_be_absent(o);
  } catch (const std::exception& e) {
    log::error("invalid deck " + io::display_path(o.deck) + ":\n" + e.what());
    return 1;
  }
  plan::Hardware hw;
  try {
    if (!options.machine.empty()) hw.machine = plan::load_machine(options.machine);
  } catch (const std::exception& e) {
    log::error(std::string("invalid machine file: ") + e.what());
    return 1;
  }
  try {
    hw.gpus = options.gpus;
    hw.gpus_per_node = options.gpus_per_node;
    hw.gpu_memory_gib = options.gpu_memory_gib;
    hw.peak_tflops = options.peak_tflops;
    hw.tokens = options.tokens;
    const plan::Plan p = plan::make_plan(deck, hw, options.expert_imbalance);
    if (!options.trace.empty()) {
      io::ChromeTrace trace;
      plan::simulate_step(p.config, p.hardware.machine, &trace);
      trace.write(options.trace);
      if (const std::string note = plan::trace_note(p.config); !note.empty())
        std::fprintf(stderr, "tptrain: note: %s\n", note.c_str());
    }
    if (options.search) {
      const plan::SearchResult found = plan::search_layouts(p.config, p.hardware.machine, p.gpus, 5);
      std::fputs(plan::search_report(found, p).c_str(), stdout);
      return found.best.empty() ? 1 : 0;
    }
    std::fputs(plan::report(p).c_str(), stdout);
    std::printf("%s\n", plan::report_json(p).c_str());
    return p.ok() ? 0 : 1;
  } catch (const std::exception& e) {
    log::error("cannot plan " + io::display_path(o.deck) + ": " + e.what());
    return 1;
  }
}

int check(const DeckOptions& o, CheckOutput output) {
  try {
    const io::Deck deck = load_deck_data_may_be_absent(o);
    std::string problems;
    for (const auto& [key, dir] : {std::pair{"run.dir", deck.run.dir}, std::pair{"checkpoint.dir", deck.checkpoint.dir}})
      if (std::string why = io::directory_problem(dir); !why.empty())
        problems += fmt::format("{}{} = {}: cannot write there: {}", problems.empty() ? "" : "\n", key,
                                io::display_path(dir), why);
    if (!problems.empty()) throw std::runtime_error(problems);
    if (output == CheckOutput::ranks) {
      std::printf("%d\n", deck.parallel.world_size());
    } else if (output == CheckOutput::json) {
      std::printf("%s\n", deck.to_json().c_str());
    } else {
      const std::string context =
          deck.parallel.context > 1 ? fmt::format(" x context {}", deck.parallel.context) : std::string();
      const std::string expert =
          deck.parallel.expert > 1 ? fmt::format(", of which expert {}", deck.parallel.expert) : std::string();
      std::printf("# %s: valid (needs %d MPI ranks: tensor %d%s x pipeline %d x data %d%s)\n",
                  io::display_path(o.deck).c_str(), deck.parallel.world_size(), deck.parallel.tensor, context.c_str(),
                  deck.parallel.pipeline, deck.parallel.data, expert.c_str());
      std::fputs(deck.to_toml().c_str(), stdout);
    }
    return 0;
  } catch (const std::exception& e) {
    log::error("invalid deck " + io::display_path(o.deck) + ":\n" + e.what());
    return 1;
  }
}

int inspect(const std::string& file) {
  std::ostringstream err;
  // The datasets the checkpoint's own deck implies, so that a missing, extra or reshaped layer
  // fails inspect as it would fail a load.
  const io::ExpectedDatasets expected = [](const std::string& deck) {
    return checkpoint::checkpoint_datasets(checkpoint::checkpoint_model_shape(deck));
  };
  const int rc = inspect_checkpoint(file, std::cout, err, expected);
  std::cout.flush();
  std::string message = err.str();
  while (!message.empty() && message.back() == '\n') message.pop_back();
  if (!message.empty()) log::error(message);
  return rc;
}

namespace {

// MPI + Kokkos up, the deck loaded and agreed on every rank, the rank grid built; then `job`.
// One rule for every failure of every job (train, eval, generate):
//  - an AgreedError is the same on every rank: rank 0 reports it once, every rank returns 1;
//  - any other exception happened on some ranks only, while the others may be waiting in a
//    collective: the rank reports it, named, and aborts the job, so nobody waits forever.
// Neither names a source location: where the exception was caught says nothing about its cause.
template <class Job>
int run_job(const DeckOptions& o, Job&& job) {
  JobSession session;
  return with_agreed_failures([&] {
    const io::Deck deck = load_deck_on_every_rank(o);
    // Before any checkpoint is read: the deck's limit for every metadata read of this process.
    io::ReadWatchdog::set_configured_seconds(deck.checkpoint.metadata_timeout_s);
    const auto topo = make_topology(deck);
    if (!topo) return 1;
    return job(deck, *topo);
  });
}

}  // namespace

int train(const DeckOptions& o) {
  // SIGUSR1 and SIGTERM have been recorded since the process started (src/driver/main.cpp).
  return run_job(o, [](const io::Deck& deck, const parallel::Topology& topo) {
    log::info("# resolved deck\n" + deck.to_toml());
    print_rank_map(topo);
    return driver::run_training(deck, topo);
  });
}

int bench(const DeckOptions& o, const BenchOptions& b) {
  DeckOptions deck = o;
  deck.data_files = io::DataFiles::ignored;  // synthetic tokens
  return run_job(deck, [&](const io::Deck& d, const parallel::Topology& topo) {
    print_rank_map(topo);
    return run_bench(d, topo, b);
  });
}

int eval(const DeckOptions& options, const EvalOptions& e) {
  DeckOptions o = options;  // reads data.valid, or --data or --tasks instead of it
  o.data_files = e.data.empty() && e.tasks.empty() ? io::DataFiles::validation : io::DataFiles::tokenizer_only;
  return run_job(o, [&](const io::Deck& deck, const parallel::Topology& topo) {
    if (!e.tasks.empty()) return driver::run_eval_tasks(deck, topo, e.checkpoint, {e.tasks, e.tasks_scores});
    return driver::run_eval(deck, topo, e.checkpoint, e.data, e.windows);
  });
}

int generate(const DeckOptions& options, const GenerateOptions& g) {
  log::keep_stdout_for_data();  // stdout is the sample: the checkpoint's and the ranks' lines go to stderr
  DeckOptions o = options;  // reads no data file
  o.data_files = io::DataFiles::tokenizer_only;
  return run_job(o, [&](const io::Deck& deck, const parallel::Topology& topo) {
    if (deck.parallel.context > 1)  // the same deck on every rank: the same verdict
      throw parallel::AgreedError(fmt::format(
          "generate runs without context parallelism (parallel.context = {} in the deck): its key/value cache and its "
          "new tokens are one sequence on one rank; run it with --set parallel.context=1 (checkpoints load under "
          "any layout)",
          deck.parallel.context));
    return driver::run_generate(deck, topo, g.checkpoint,
                               driver::SampleOptions{g.prompt, g.tokens, g.temperature, g.top_k, g.seed, !g.no_kv_cache,
                                                    g.ignore_eos});
  });
}

}  // namespace tptrain::driver
