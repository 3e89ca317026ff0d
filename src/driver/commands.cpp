#include "src/driver/commands.hpp"

#include <Kokkos_Core.hpp>
#include <fmt/format.h>
#include <mpi.h>
#include <iostream>
#include <optional>
#include <sstream>
#include <unistd.h>

#include "io/deck.hpp"
#include "io/inspect.hpp"
#include "src/log.hpp"
#include "src/parallel/collectives.hpp"
#include "src/parallel/topology.hpp"
#include "src/train/trainer.hpp"

namespace tptrain::driver {

namespace {

// MPI first, then Kokkos; torn down in reverse order.
class JobSession {
 public:
  JobSession(int& argc, char**& argv) {
    MPI_Init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    log::set_rank(rank);
    Kokkos::initialize(argc, argv);
  }
  ~JobSession() {
    Kokkos::finalize();
    MPI_Finalize();
  }
  JobSession(const JobSession&) = delete;
  JobSession& operator=(const JobSession&) = delete;
};

// Every rank loads the deck; all agree before anyone proceeds, so a deck readable on one node
// but not another ends the job everywhere instead of leaving ranks in a collective.
// Rank 0 reports its problems; other ranks report only problems rank 0 did not see.
std::optional<io::Deck> load_deck_on_every_rank(const DeckOptions& o) {
  std::optional<io::Deck> deck;
  std::string problem;
  try {
    deck = io::load_deck(o.deck, o.overrides);
  } catch (const std::exception& e) {
    problem = e.what();
  }
  int bad = problem.empty() ? 0 : 1;
  int rank0_bad = bad;
  MPI_Bcast(&rank0_bad, 1, MPI_INT, 0, MPI_COMM_WORLD);
  int any_bad = bad;
  MPI_Allreduce(MPI_IN_PLACE, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (bad && (log::rank() == 0 || !rank0_bad)) log::error("invalid deck " + o.deck + ":\n" + problem);
  if (any_bad) return std::nullopt;
  return deck;
}

// Builds the rank grid, or reports (once, on rank 0) why the world cannot hold the layout.
std::optional<parallel::Topology> make_topology(const io::Deck& deck) {
  const parallel::Layout layout{deck.parallel.tensor, deck.parallel.pipeline, deck.parallel.data};
  try {
    return std::optional<parallel::Topology>(std::in_place, MPI_COMM_WORLD, layout);
  } catch (const parallel::TopologyError& e) {
    if (log::rank() == 0) log::error(e.what());
    return std::nullopt;
  }
}

// Rank 0 prints the rank map: every rank's coordinates and host.
void print_rank_map(const parallel::Topology& topo) {
  char host[64] = {};
  gethostname(host, sizeof(host) - 1);
  std::vector<char> hosts(static_cast<std::size_t>(topo.world_size()) * sizeof(host));
  MPI_Gather(host, sizeof(host), MPI_CHAR, hosts.data(), sizeof(host), MPI_CHAR, 0, topo.world());
  if (topo.world_rank() != 0) return;
  const auto& L = topo.layout();
  log::infof("ranks: {} = tensor {} x pipeline {} x data {} (backend {})", topo.world_size(),
             L.tensor, L.pipeline, L.data, topo.tp().backend_name());
  for (int r = 0; r < topo.world_size(); ++r) {
    const auto c = parallel::coordinates_of(r, L);
    log::infof("  rank {:>4}  tp {:>3}  pp {:>3}  dp {:>4}  on {}", r, c.tp, c.pp, c.dp,
               &hosts[static_cast<std::size_t>(r) * sizeof(host)]);
  }
}

}  // namespace

std::string version_string() {
  return fmt::format("tptrain {} (Kokkos {}.{}.{}, {}, MPI {}.{})", TPTRAIN_VERSION,
                     KOKKOS_VERSION / 10000, KOKKOS_VERSION / 100 % 100, KOKKOS_VERSION % 100,
                     Kokkos::DefaultExecutionSpace::name(), MPI_VERSION, MPI_SUBVERSION);
}

int check(const DeckOptions& o) {
  try {
    const io::Deck deck = io::load_deck(o.deck, o.overrides);
    std::printf("# %s: valid (needs %d MPI ranks: tensor %d x pipeline %d x data %d)\n",
                o.deck.c_str(), deck.parallel.world_size(), deck.parallel.tensor,
                deck.parallel.pipeline, deck.parallel.data);
    std::fputs(deck.to_toml().c_str(), stdout);
    return 0;
  } catch (const std::exception& e) {
    log::error("invalid deck " + o.deck + ":\n" + e.what());
    return 1;
  }
}

int inspect(const std::string& file) {
  std::ostringstream err;
  const int rc = io::inspect_checkpoint(file, std::cout, err);
  std::cout.flush();
  std::string message = err.str();
  while (!message.empty() && message.back() == '\n') message.pop_back();
  if (!message.empty()) log::error(message);
  return rc;
}

namespace {

// MPI + Kokkos up, the deck loaded and agreed on every rank, the rank grid built; then `job`.
// Any failure before `job` is reported once and every rank returns 1.
template <class Job>
int run_job(const DeckOptions& o, Job&& job) {
  int argc = 0;
  char** argv = nullptr;
  JobSession session(argc, argv);
  const auto deck = load_deck_on_every_rank(o);
  if (!deck) return 1;
  const auto topo = make_topology(*deck);
  if (!topo) return 1;
  return job(*deck, *topo);
}

}  // namespace

int train(const DeckOptions& o) {
  return run_job(o, [](const io::Deck& deck, const parallel::Topology& topo) {
    log::info("# resolved deck\n" + deck.to_toml());
    print_rank_map(topo);
    return train::run_training(deck, topo);
  });
}

int eval(const DeckOptions& o, const EvalOptions& e) {
  return run_job(o, [&](const io::Deck& deck, const parallel::Topology& topo) {
    return train::run_eval(deck, topo, e.checkpoint, e.data, e.windows);
  });
}

int generate(const DeckOptions& o, const GenerateOptions& g) {
  return run_job(o, [&](const io::Deck& deck, const parallel::Topology& topo) {
    return train::run_generate(deck, topo, g.checkpoint,
                               train::SampleOptions{g.prompt, g.tokens, g.temperature, g.top_k, g.seed});
  });
}

}  // namespace tptrain::driver
