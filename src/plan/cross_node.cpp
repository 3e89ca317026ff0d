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

// A lattice axis: first ranks step·i, i < count.
struct Axis {
  std::int64_t step = 0, count = 1;
};

// The lattice's axes with more than one point, those that continue one another merged (a·n_a = b:
// {a·i + b·j} = {a·k, k < n_a·n_b}), the longest first.
std::vector<Axis> axes_of(const GroupLattice& l) {
  std::vector<Axis> axes;
  for (const Axis a : {Axis{l.e1, l.n1}, Axis{l.e2, l.n2}, Axis{l.e3, l.n3}})
    if (a.count > 1) axes.push_back(a);
  std::sort(axes.begin(), axes.end(), [](const Axis& a, const Axis& b) { return a.step < b.step; });
  for (std::size_t i = 0; i + 1 < axes.size();)
    if (Count(axes[i].step) * axes[i].count == Count(axes[i + 1].step)) {
      axes[i].count = Count(axes[i].count) * axes[i + 1].count;
      axes.erase(axes.begin() + std::ptrdiff_t(i) + 1);
    } else {
      ++i;
    }
  std::stable_sort(axes.begin(), axes.end(), [](const Axis& a, const Axis& b) { return a.count > b.count; });
  return axes;
}

// Σ over the groups' first ranks x of floor((x + c)/g): the longest axis a floor sum, a loop over
// the others.
Count lattice_floor_sum(const GroupLattice& l, std::int64_t c, std::int64_t g) {
  std::vector<Axis> axes = axes_of(l);
  axes.resize(3);  // absent axes: one point
  const Axis longest = axes[0], second = axes[1], third = axes[2];
  Count sum = 0;
  for (std::int64_t i = 0; i < second.count; ++i)
    for (std::int64_t w = 0; w < third.count; ++w)
      sum += floor_sum(longest.count, g, longest.step,
                       Count(l.base) + c + Count(second.step) * i + Count(third.step) * w);
  return sum;
}

// Σ over the groups of the node boundaries between its first and last member.
Count span_sum(const GroupLattice& l, std::int64_t g) {
  const Count last = Count(l.members - 1) * l.stride;
  return lattice_floor_sum(l, last, g) - lattice_floor_sum(l, 0, g);
}

bool empty(const GroupLattice& l) { return l.n1 <= 0 || l.n2 <= 0 || l.n3 <= 0; }
Count groups_of(const GroupLattice& l) { return empty(l) ? Count(0) : Count(l.n1) * l.n2 * l.n3; }

}  // namespace

Count ring_crossings(const GroupLattice& l, std::int64_t g) {
  if (l.members <= 1 || empty(l)) return 0;
  // A stride of a node or more: every member on its own node.
  if (l.stride >= g) return groups_of(l) * l.members;
  // Otherwise the members fill the nodes between the first and the last: n nodes, span n − 1.
  // A span under a node is 0 or 1 per group (2 crossings when 1); a longer one is never 0.
  const Count span = span_sum(l, g);
  if (Count(l.members - 1) * l.stride < g) return span * 2;
  return span + groups_of(l);
}

Count chain_crossings(const GroupLattice& l, std::int64_t g) {
  if (l.members <= 1 || empty(l)) return 0;
  if (l.stride >= g) return groups_of(l) * (l.members - 1);
  return span_sum(l, g);  // a stride under a node: a neighbour is on the same node or the next
}

Count blocked_ring_crossings(const GroupLattice& l, std::int64_t block_stride, std::int64_t blocks, std::int64_t g) {
  if (empty(l) || blocks <= 0) return 0;
  if (blocks == 1) return ring_crossings(l, g);
  if (l.members == 1 || Count(l.members) * l.stride == Count(block_stride)) {  // evenly spaced
    GroupLattice even = l;
    even.stride = l.members == 1 ? block_stride : l.stride;
    even.members = Count(l.members) * blocks;
    return ring_crossings(even, g);
  }
  if (l.n3 > 1 || Count(l.members - 1) * l.stride >= Count(block_stride))
    throw std::logic_error("tptrain: plan: blocked_ring_crossings needs a free third axis and blocks in order");
  // The members in increasing order: the nodes a group visits are one more than the changes of
  // node between its consecutive members, within a block (a chain over the blocks' lattice) and
  // from the last member of a block to the first of the next (a chain of two).
  GroupLattice within = l;
  within.e3 = block_stride;
  within.n3 = blocks;
  GroupLattice between = l;
  between.base = Count(l.base) + Count(l.members - 1) * l.stride;
  between.e3 = block_stride;
  between.n3 = blocks - 1;
  between.stride = Count(block_stride) - Count(l.members - 1) * l.stride;
  between.members = 2;
  const Count changes = chain_crossings(within, g) + chain_crossings(between, g);
  // As in ring_crossings: a group spanning less than a node changes node at most once (2 ring
  // crossings then), a longer one at least once (a crossing per node).
  const Count span = Count(l.members - 1) * l.stride + Count(blocks - 1) * block_stride;
  return span < g ? changes * 2 : changes + groups_of(l);
}

CrossNodeBytes cross_node_bytes(const Config& c, const StageParameters& stage_parameters, parallel::RankOrder order,
                                std::int64_t g) {
  if (g < 1) throw std::invalid_argument("tptrain: plan: gpus per node must be >= 1");
  CrossNodeBytes out;
  out.order = order;
  const std::int64_t T = c.tensor(), C = c.context(), P = c.pipeline, D = c.data;
  if (c.world() <= g) return out;  // one node
  const parallel::Strides s = strides_of(parallel::Layout{c.tensor(), c.pipeline, c.data, order, c.context()});

  // Tensor and data groups belong to one stage, whose bytes they send: the first, the middle ones
  // (all alike) and the last.
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
    const std::int64_t base = st.first * s.pipeline;
    // Tensor groups: first ranks cp·σc + pp·σp + dp·σd, members 1 apart.
    const GroupLattice tensor{base, s.context, C, s.pipeline, st.count, 1, T, s.data, D};
    // Data x context groups: first ranks tp + pp·σp; members cp·σc + dp·σd, in the order
    // cp + C·dp (src/parallel/topology.cpp): D blocks of C.
    const GroupLattice data_blocks{base, 1, T, s.pipeline, st.count, s.context, C};
    out.tensor += double(ring_crossings(tensor, g)) * per_rank.tensor;
    out.data += double(blocked_ring_crossings(data_blocks, s.data, D, g)) * per_rank.data;
  }
  // Context groups: first ranks tp + pp·σp + dp·σd, members σc = T apart, every stage at once (a
  // rank of any stage sends the same around its ring: the stages hold as many layers).
  const GroupLattice context{0, 1, T, s.pipeline, P, s.context, C, s.data, D};
  out.context = double(ring_crossings(context, g)) * stage_communication(c, 0, stage_parameters.of(0)).context;
  // Pipeline groups: first ranks tp + cp·σc + dp·σd (stage 0), members σp apart; the embedding
  // group pairs the first stage with the last, (P − 1)·σp on. With v chunks per rank
  // (interleaved 1F1B) each neighbouring pair carries a link's bytes v times, and the last stage
  // passes chunk c's output to the first stage's chunk c + 1, v − 1 times over the pair the
  // embedding group also joins.
  const GroupLattice pipeline{0, 1, T, s.data, D, s.pipeline, P, s.context, C};
  const double v = c.virtual_stages;
  out.pipeline = v * double(chain_crossings(pipeline, g)) * pipeline_link_bytes(c);
  if (P > 1) {
    const GroupLattice embedding{0, 1, T, s.data, D, (P - 1) * s.pipeline, 2, s.context, C};
    out.pipeline += (v - 1) * double(chain_crossings(embedding, g)) * pipeline_link_bytes(c);
    out.embedding = double(ring_crossings(embedding, g)) * stage_communication(c, 0, stage_parameters.of(0)).embedding;
  }
  return out;
}

}  // namespace tptrain::plan
