#include "src/parallel/topology.hpp"

#include "base/mpi_check.hpp"

namespace tptrain::parallel {

std::string world_size_problem(int world_size, const Layout& layout) {
  if (world_size == layout.world_size()) return "";
  const bool cp = layout.context > 1;
  return "mpiexec started " + std::to_string(world_size) + " rank" + (world_size == 1 ? "" : "s") +
         " but the deck's [parallel] layout needs tensor x " + (cp ? "context x " : "") + "pipeline x data = " +
         std::to_string(layout.tensor) + " x " + (cp ? std::to_string(layout.context) + " x " : "") +
         std::to_string(layout.pipeline) + " x " + std::to_string(layout.data) + " = " +
         std::to_string(layout.world_size()) +
         " ranks; run with `mpiexec -n " + std::to_string(layout.world_size()) +
         "` or change [parallel]";
}

namespace {

// Ranks with the same `color` form a group, ordered by `key`.
std::unique_ptr<Communicator> split(MPI_Comm world, int color, int key, const CommunicatorOptions& options) {
  MPI_Comm comm = MPI_COMM_NULL;
  TPTRAIN_MPI_CHECK(MPI_Comm_split(world, color, key, &comm));
  if (comm == MPI_COMM_NULL) return nullptr;
  return make_communicator(comm, options);
}

}  // namespace

Topology::Topology(MPI_Comm world, const Layout& layout, const CommunicatorOptions& options)
    : world_(world), layout_(layout) {
  if (layout.tensor < 1 || layout.pipeline < 1 || layout.data < 1 || layout.context < 1)
    throw TopologyError("tensor, context, pipeline and data must all be >= 1");
  const int DC = layout.data * layout.context;
  if (layout.shard_group < 0 || (layout.shard_group > 0 && DC % layout.shard_group != 0))
    throw TopologyError("parallel.shard_group = " + std::to_string(layout.shard_group) +
                        " must be a divisor of parallel.data x parallel.context = " + std::to_string(DC));
  if (layout.expert < 1 || layout.data % layout.expert != 0)
    throw TopologyError("parallel.expert = " + std::to_string(layout.expert) +
                        " must be a divisor of parallel.data = " + std::to_string(layout.data) +
                        ": expert parallelism takes its ranks from the data-parallel ones");
  int size = 0;
  TPTRAIN_MPI_CHECK(MPI_Comm_rank(world, &world_rank_));
  TPTRAIN_MPI_CHECK(MPI_Comm_size(world, &size));
  const std::string problem = world_size_problem(size, layout);
  if (!problem.empty()) throw TopologyError(problem);

  coords_ = coordinates_of(world_rank_, layout);
  const int T = layout.tensor, P = layout.pipeline, C = layout.context;
  const Coordinates& c = coords_;
  // Colour = the coordinates the group does not vary over; key = the one it does.
  tp_ = split(world, c.cp + C * (c.pp + P * c.dp), c.tp, options);
  pp_ = split(world, c.tp + T * (c.cp + C * c.dp), c.pp, options);
  dp_ = split(world, c.tp + T * (c.cp + C * c.pp), c.dp, options);
  if (C > 1) {
    cp_ = split(world, c.tp + T * (c.pp + P * c.dp), c.cp, options);
    dp_cp_ = split(world, c.tp + T * c.pp, c.cp + C * c.dp, options);
  }
  // Expert parallelism: ep = dp % E, edp = dp / E. The expert group is built with E = 1 too (each
  // rank alone, as the tensor group is with tensor = 1); the expert-data group is then dp_cp().
  ep_ = split(world, c.tp + T * (c.cp + C * (c.pp + P * c.edp)), c.ep, options);
  if (layout.expert > 1) expert_dp_ = split(world, c.tp + T * (c.pp + P * c.ep), c.cp + C * c.edp, options);
  if (const int G = layout.shard_group; G > 0 && G < DC) {
    const int at = c.cp + C * c.dp;  // the rank in dp_cp()
    shard_ = split(world, c.tp + T * (c.pp + P * (at / G)), at % G, options);
    replica_ = split(world, c.tp + T * (c.pp + P * (at % G)), at / G, options);
  }
  const bool on_edge = is_first_stage() || is_last_stage();
  embedding_ = split(world, on_edge ? c.tp + T * (c.cp + C * c.dp) : MPI_UNDEFINED, c.pp, options);
}

Communicator& Topology::embedding() const {
  if (!embedding_)
    throw std::logic_error("tptrain: " + describe() +
                           " is a middle pipeline stage and has no embedding group");
  return *embedding_;
}

std::string Topology::describe() const {
  return "rank " + std::to_string(world_rank_) + " (tp " + std::to_string(coords_.tp) +
         (layout_.context > 1 ? ", cp " + std::to_string(coords_.cp) : std::string()) + ", pp " +
         std::to_string(coords_.pp) + ", dp " + std::to_string(coords_.dp) +
         (layout_.expert > 1 ? ", ep " + std::to_string(coords_.ep) : std::string()) + ")";
}

}  // namespace tptrain::parallel
