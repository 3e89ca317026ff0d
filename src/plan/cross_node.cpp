#include "src/plan/cross_node.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>
#include <vector>

namespace tptrain::plan {

Count floor_sum(Count n, Count m, Count a, Count b) {
  if (n < 0 || m < 1 || a < 0 || b < 0) throw std::domain_error("tptrain: plan: floor_sum of a negative range");
  // Every term is non-negative, so each partial sum is at most the whole: no step overflows
  // unless the result does (and then Count throws).
  Count sum = 0;
  while (n > 0) {
    if (a >= m) {
      sum += (n * (n - 1) / 2) * (a / m);
      a = Count(a % m);
    }
    if (b >= m) {
      sum += n * (b / m);
      b = Count(b % m);
    }
    const Count y = a * n + b;  // a < m: y < m·(n + 1)
    if (y < m) break;
    n = y / m;
    b = Count(y % m);
    std::swap(m, a);
  }
  return sum;
}

namespace {

// Σ over the groups' first ranks x of floor((x + c)/g): the shorter side of the lattice in a loop,
// the longer one a floor sum.
Count lattice_floor_sum(const GroupLattice& l, std::int64_t c, std::int64_t g) {
  const bool loop_first = l.n1 <= l.n2;
  const std::int64_t loops = loop_first ? l.n1 : l.n2, step = loop_first ? l.e1 : l.e2;
  const std::int64_t n = loop_first ? l.n2 : l.n1, e = loop_first ? l.e2 : l.e1;
  Count sum = 0;
  for (std::int64_t k = 0; k < loops; ++k) sum += floor_sum(n, g, e, Count(l.base) + c + Count(step) * k);
  return sum;
}

// Σ over the groups of the node boundaries between its first and last member.
Count span_sum(const GroupLattice& l, std::int64_t g) {
  const Count last = Count(l.members - 1) * l.stride;
  return lattice_floor_sum(l, last, g) - lattice_floor_sum(l, 0, g);
}

Count groups_of(const GroupLattice& l) { return Count(std::max<std::int64_t>(l.n1, 0)) * std::max<std::int64_t>(l.n2, 0); }

}  // namespace

Count ring_crossings(const GroupLattice& l, std::int64_t g) {
  if (l.members <= 1 || l.n1 <= 0 || l.n2 <= 0) return 0;
  // A stride of a node or more: every member on its own node.
  if (l.stride >= g) return groups_of(l) * l.members;
  // Otherwise the members fill the nodes between the first and the last: n nodes, span n − 1.
  // A span under a node is 0 or 1 per group (2 crossings when 1); a longer one is never 0.
  const Count span = span_sum(l, g);
  if (Count(l.members - 1) * l.stride < g) return span * 2;
  return span + groups_of(l);
}

Count chain_crossings(const GroupLattice& l, std::int64_t g) {
  if (l.members <= 1 || l.n1 <= 0 || l.n2 <= 0) return 0;
  if (l.stride >= g) return groups_of(l) * (l.members - 1);
  return span_sum(l, g);  // a stride under a node: a neighbour is on the same node or the next
}

CrossNodeBytes cross_node_bytes(const Config& c, const StageParameters& stage_parameters, parallel::RankOrder order,
                                std::int64_t g) {
  if (g < 1) throw std::invalid_argument("tptrain: plan: gpus per node must be >= 1");
  CrossNodeBytes out;
  out.order = order;
  const std::int64_t T = c.tensor(), P = c.pipeline, D = c.data;
  if (c.world() <= g) return out;  // one node
  const parallel::Strides s = strides_of(parallel::Layout{c.tensor(), c.pipeline, c.data, order});

  // Tensor and data groups belong to one stage, whose bytes they send: the first, the middle
  // ones (all alike) and the last.
  struct Stages {
    std::int64_t first, count;
    int representative;
  };
  std::vector<Stages> stages{{0, 1, 0}};
  if (P > 2) stages.push_back({1, P - 2, 1});
  if (P > 1) stages.push_back({P - 1, 1, int(P - 1)});
  for (const Stages& st : stages) {
    const StepCommunication per_rank =
        stage_communication(c, st.representative, stage_parameters.of(st.representative));
    // Tensor groups: first ranks pp·σp + dp·σd, members 1 apart.
    const GroupLattice tensor{st.first * s.pipeline, s.pipeline, st.count, s.data, D, 1, T};
    // Data groups: first ranks tp + pp·σp, members σd apart.
    const GroupLattice data{st.first * s.pipeline, 1, T, s.pipeline, st.count, s.data, D};
    out.tensor += double(ring_crossings(tensor, g)) * per_rank.tensor;
    out.data += double(ring_crossings(data, g)) * per_rank.data;
  }
  // Pipeline groups: first ranks tp + dp·σd (stage 0), members σp apart; the embedding group pairs
  // the first stage with the last, (P − 1)·σp on. With v chunks per rank (interleaved 1F1B) each
  // neighbouring pair carries a link's bytes v times, and the last stage passes chunk c's output
  // to the first stage's chunk c + 1, v − 1 times over the pair the embedding group also joins.
  const GroupLattice pipeline{0, 1, T, s.data, D, s.pipeline, P};
  const double v = c.virtual_stages;
  out.pipeline = v * double(chain_crossings(pipeline, g)) * pipeline_link_bytes(c);
  if (P > 1) {
    const GroupLattice embedding{0, 1, T, s.data, D, (P - 1) * s.pipeline, 2};
    out.pipeline += (v - 1) * double(chain_crossings(embedding, g)) * pipeline_link_bytes(c);
    out.embedding = double(ring_crossings(embedding, g)) * stage_communication(c, 0, stage_parameters.of(0)).embedding;
  }
  return out;
}

}  // namespace tptrain::plan
