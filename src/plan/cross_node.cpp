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

namespace {

// Σ_b c_b² over the residues b mod `stride` of L consecutive ranks: L mod stride residues appear
// ⌊L/stride⌋ + 1 times, the others ⌊L/stride⌋ times.
Count residue_squares(Count length, Count stride) {
  const Count q = length / stride, r = Count(length % stride);
  return r * (q + 1) * (q + 1) + (stride - r) * q * q;
}

// The same over the pieces of [s, s + length) cut by the multiples of `small` (o = s mod small).
Count block_squares(Count offset, Count length, Count small, Count stride) {
  const Count first = offset == 0 ? small : small - offset;  // the distance to the first cut
  if (first >= length) return residue_squares(length, stride);
  const Count rest = length - first;
  return residue_squares(first, stride) + (rest / small) * residue_squares(small, stride) +
         residue_squares(Count(rest % small), stride);
}

std::int64_t gcd(std::int64_t a, std::int64_t b) {
  while (b != 0) a = std::exchange(b, a % b);
  return a;
}

// Groups of blocks (blocked_ring_crossings) over a lattice of three axes: a loop over the
// shortest, the other two left to blocked_ring_crossings.
Count blocked_ring_crossings_3(GroupLattice l, std::int64_t block_stride, std::int64_t blocks, std::int64_t g) {
  if (l.n1 <= l.n2 && l.n1 <= l.n3) {
    std::swap(l.e1, l.e3);
    std::swap(l.n1, l.n3);
  } else if (l.n2 <= l.n3) {
    std::swap(l.e2, l.e3);
    std::swap(l.n2, l.n3);
  }
  Count sum = 0;
  GroupLattice one = l;
  one.e3 = 0;
  one.n3 = 1;
  for (std::int64_t w = 0; w < l.n3; ++w) {
    one.base = Count(l.base) + Count(l.e3) * w;
    sum += blocked_ring_crossings(one, block_stride, blocks, g);
  }
  return sum;
}

}  // namespace

Count all_to_all_crossings(std::int64_t world, std::int64_t stride, std::int64_t members, std::int64_t g) {
  if (g < 1 || stride < 1 || members < 1) throw std::invalid_argument("tptrain: plan: all_to_all_crossings of an empty group");
  const Count A = Count(stride) * members;
  if (members == 1 || world <= 0) return 0;
  if (world % A != 0) throw std::logic_error("tptrain: plan: expert groups do not tile the ranks");
  // Ordered pairs in all groups, less those on one node (each member with itself included).
  const Count all = Count(world) * members;
  const Count big = std::max<std::int64_t>(A, g), small = std::min<std::int64_t>(A, g);
  const Count full = Count(world) / big, last = Count(world % big);
  const Count period = small / gcd(big, small);
  const Count step = Count(big % small);
  Count same = 0, offset = 0;
  for (Count k = 0; k < std::min<std::int64_t>(full, period); k = k + 1) {
    const Count repeats = (full - 1 - k) / period + 1;
    same += repeats * block_squares(offset, big, small, stride);
    offset = Count((offset + step) % small);
  }
  if (last > 0) {
    // A last, shorter block: world is a multiple of A, so the coarser cut is the node's (big = g)
    // and the block starts at full·g <= world.
    const Count start = Count((full * big) % small);
    same += block_squares(start, last, small, stride);
  }
  return all - same;
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
  const std::int64_t ep = c.expert();
  for (const Stages& st : stages) {
    const StepCommunication per_rank =
        stage_communication(c, st.representative, stage_parameters.of(st.representative),
                            stage_parameters.experts_of(st.representative));
    const std::int64_t base = st.first * s.pipeline;
    // Tensor groups: first ranks cp·σc + pp·σp + dp·σd, members 1 apart.
    const GroupLattice tensor{base, s.context, C, s.pipeline, st.count, 1, T, s.data, D};
    // Data x context groups: first ranks tp + pp·σp; members cp·σc + dp·σd, in the order
    // cp + C·dp (src/parallel/topology.cpp): D blocks of C.
    const GroupLattice data_blocks{base, 1, T, s.pipeline, st.count, s.context, C};
    out.tensor += double(ring_crossings(tensor, g)) * per_rank.tensor;
    out.data += double(blocked_ring_crossings(data_blocks, s.data, D, g)) * per_rank.data;
    // Expert-data groups: first ranks tp + pp·σp + e·σd (e < ep, the expert rank); members
    // cp·σc + q·ep·σd: D / ep blocks of C.
    if (per_rank.expert_data > 0) {
      const GroupLattice expert_blocks{base, 1, T, s.pipeline, st.count, s.context, C, s.data, ep};
      out.expert_data +=
          double(blocked_ring_crossings_3(expert_blocks, Count(s.data) * ep, D / ep, g)) * per_rank.expert_data;
    }
  }
  // Expert groups' all-to-alls: every rank of every stage sends the same; a member's bytes go to
  // the ep − 1 others in equal parts.
  if (ep > 1) {
    const double per_rank = stage_communication(c, 0, stage_parameters.of(0), stage_parameters.most_experts()).expert;
    out.expert = double(all_to_all_crossings(c.world(), s.data, ep, g)) * per_rank / double(ep - 1);
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
