#include "src/parallel/topology_rank_map.hpp"

namespace tptrain::parallel {

std::string_view rank_order_name(RankOrder order) {
  return order == RankOrder::tp_dp_pp ? "tp-dp-pp" : "tp-pp-dp";
}

RankOrder rank_order_from_name(std::string_view name) {
  if (name == "tp-pp-dp") return RankOrder::tp_pp_dp;
  if (name == "tp-dp-pp") return RankOrder::tp_dp_pp;
  throw std::invalid_argument("parallel.order = \"" + std::string(name) +
                              "\": expected \"tp-pp-dp\" or \"tp-dp-pp\"");
}

Strides strides_of(const Layout& layout) {
  const long long T = layout.tensor, P = layout.pipeline, D = layout.data;
  if (layout.order == RankOrder::tp_dp_pp) return {1, T * D, T};
  return {1, T, T * P};
}

Coordinates coordinates_of(int world_rank, const Layout& layout) {
  Coordinates c;
  c.tp = world_rank % layout.tensor;
  const int rest = world_rank / layout.tensor;
  if (layout.order == RankOrder::tp_dp_pp) {
    c.dp = rest % layout.data;
    c.pp = rest / layout.data;
  } else {
    c.pp = rest % layout.pipeline;
    c.dp = rest / layout.pipeline;
  }
  return c;
}

int world_rank_of(const Coordinates& c, const Layout& layout) {
  if (layout.order == RankOrder::tp_dp_pp) return c.tp + layout.tensor * (c.dp + layout.data * c.pp);
  return c.tp + layout.tensor * (c.pp + layout.pipeline * c.dp);
}

}  // namespace tptrain::parallel
