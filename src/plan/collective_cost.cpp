#include "src/plan/collective_cost.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tptrain::plan {

namespace {
constexpr double kGB = 1e9, kUs = 1e-6;

// Bytes/s of a collective's steps inside the node: the library's bus bandwidth where the machine
// file measured it (MPI's collectives reduce on the host and copy through shared memory twice:
// a third of the ping-pong's rate on a CPU node), else the link's.
double collective_link(const Machine& m) {
  return (m.collective_bandwidth_gbs > 0 ? m.collective_bandwidth_gbs : m.link_bandwidth_gbs) * kGB;
}
}

GroupSpan span_of(const std::vector<std::int64_t>& ranks, int devices_per_node) {
  // The members' nodes in order, counted run by run (a data group of tens of thousands of
  // ranks is listed for every stage of every layout a search simulates).
  std::vector<std::int64_t> nodes;
  nodes.reserve(ranks.size());
  for (const std::int64_t r : ranks) nodes.push_back(r / std::max(1, devices_per_node));
  if (!std::is_sorted(nodes.begin(), nodes.end())) std::sort(nodes.begin(), nodes.end());
  GroupSpan g;
  g.members = std::max<std::int64_t>(1, static_cast<std::int64_t>(ranks.size()));
  std::int64_t distinct = 0, run = 0;
  g.most_on_a_node = 1;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (i == 0 || nodes[i] != nodes[i - 1]) {
      ++distinct;
      run = 0;
    }
    g.most_on_a_node = std::max(g.most_on_a_node, ++run);
  }
  g.nodes = std::max<std::int64_t>(1, distinct);
  return g;
}

double ring_all_reduce_bytes(double bytes, std::int64_t k) { return k <= 1 ? 0.0 : 2.0 * double(k - 1) / double(k) * bytes; }

namespace {

// Seconds to send `sent` bytes per rank around a ring of the group, with `steps` latencies.
double ring_seconds(const Machine& m, const GroupSpan& g, double sent, double steps) {
  if (g.members <= 1) return 0;
  if (g.nodes <= 1) return sent / collective_link(m) + steps * m.link_latency_us * kUs;
  const double over_link = sent / collective_link(m);
  const double over_network = sent / (double(g.most_on_a_node) * m.network_bandwidth_gbs * kGB);
  return std::max(over_link, over_network) + steps * m.network_latency_us * kUs;
}

}  // namespace

double ring_all_reduce_seconds(const Machine& m, const GroupSpan& g, double bytes) {
  return ring_seconds(m, g, ring_all_reduce_bytes(bytes, g.members), 2.0 * double(g.members - 1));
}

double tree_all_reduce_seconds(const Machine& m, const GroupSpan& g, double bytes) {
  if (g.members <= 1) return 0;
  if (g.nodes <= 1) return ring_all_reduce_seconds(m, g, bytes);
  const double sent = ring_all_reduce_bytes(bytes, g.members);
  const double bandwidth =
      std::max(sent / collective_link(m), sent / (double(g.most_on_a_node) * m.network_bandwidth_gbs * kGB));
  const double latency = 2.0 * std::ceil(std::log2(double(g.nodes))) * m.network_latency_us * kUs +
                         2.0 * double(g.most_on_a_node - 1) * m.link_latency_us * kUs;
  return bandwidth + latency;
}

double all_reduce_seconds(const Machine& m, const GroupSpan& g, double bytes) {
  return std::min(ring_all_reduce_seconds(m, g, bytes), tree_all_reduce_seconds(m, g, bytes));
}

double all_gather_seconds(const Machine& m, const GroupSpan& g, double bytes) {
  if (g.members <= 1) return 0;
  return ring_seconds(m, g, double(g.members - 1) / double(g.members) * bytes, double(g.members - 1));
}

double all_to_all_seconds(const Machine& m, const GroupSpan& g, double bytes) {
  if (g.members <= 1) return 0;
  const double k = double(g.members), local = double(g.most_on_a_node);
  const double inside = bytes * (local - 1) / k / collective_link(m);
  if (g.nodes <= 1) return inside + m.link_latency_us * kUs;
  const double across = bytes * (k - local) / k / (m.network_bandwidth_gbs * kGB);
  return std::max(inside, across) + m.network_latency_us * kUs;
}

double point_to_point_seconds(const Machine& m, bool across_nodes, double bytes) {
  if (bytes <= 0) return 0;
  return across_nodes ? bytes / (m.network_bandwidth_gbs * kGB) + m.network_latency_us * kUs
                      : bytes / (m.link_bandwidth_gbs * kGB) + m.link_latency_us * kUs;
}

}  // namespace tptrain::plan
