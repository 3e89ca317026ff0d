#include "src/parallel/topology_rank_map.hpp"

namespace tptrain::parallel {

std::string_view rank_order_name(RankOrder order) {
  return order == RankOrder::tp_dp_pp ? "tp-dp-pp" : "tp-pp-dp";
}

std::string_view rank_order_name_with_context(RankOrder order) {
  return order == RankOrder::tp_dp_pp ? "tp-cp-dp-pp" : "tp-cp-pp-dp";
}

RankOrder rank_order_from_name(std::string_view name) {
  if (name == "tp-pp-dp" || name == "tp-cp-pp-dp") return RankOrder::tp_pp_dp;
  if (name == "tp-dp-pp" || name == "tp-cp-dp-pp") return RankOrder::tp_dp_pp;
  throw std::invalid_argument("parallel.order = \"" + std::string(name) +
                              "\": expected \"tp-pp-dp\" or \"tp-dp-pp\" (also spelled \"tp-cp-pp-dp\", \"tp-cp-dp-pp\")");
}

Strides strides_of(const Layout& layout) {
  const long long TC = static_cast<long long>(layout.tensor) * layout.context, P = layout.pipeline, D = layout.data;
  if (layout.order == RankOrder::tp_dp_pp) return {1, TC * D, TC, layout.tensor};
  return {1, TC, TC * P, layout.tensor};
}

Coordinates coordinates_of(int world_rank, const Layout& layout) {
  Coordinates c;
  c.tp = world_rank % layout.tensor;
  c.cp = (world_rank / layout.tensor) % layout.context;
  const int rest = world_rank / (layout.tensor * layout.context);
  if (layout.order == RankOrder::tp_dp_pp) {
    c.dp = rest % layout.data;
    c.pp = rest / layout.data;
  } else {
    c.pp = rest % layout.pipeline;
    c.dp = rest / layout.pipeline;
  }
  const int E = layout.expert > 0 ? layout.expert : 1;
  c.ep = c.dp % E;
  c.edp = c.dp / E;
  return c;
}

int world_rank_of(const Coordinates& c, const Layout& layout) {
  const int outer = layout.order == RankOrder::tp_dp_pp ? c.dp + layout.data * c.pp : c.pp + layout.pipeline * c.dp;
  return c.tp + layout.tensor * (c.cp + layout.context * outer);
}

}  // namespace tptrain::parallel
