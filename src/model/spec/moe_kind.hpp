// The mixture of experts (model.mlp = "moe"; Mixtral): a router and E SwiGLU experts, k of them
// per token. Its rows of the block descriptor and its metrics; its forward and backward:
// mixture_of_experts.hpp, with the router (moe_router.hpp) and the token dispatcher
// (moe_token_dispatcher.hpp).
#pragma once

#include <algorithm>
#include <cstdint>

#include <fmt/format.h>

#include "src/model/spec/sublayer_kind.hpp"

namespace tptrain::model {

// The router, replicated over the tensor ranks (every rank routes the same tokens), and each
// expert's SwiGLU split over them as the dense one is (swiglu_mlp_kind.hpp). An expert-parallel
// rank holds the experts of its share only (held_by_expert_rank, block_descriptor.hpp).
inline constexpr ParameterRow kMoeParameters[] = {
    {"mlp/router/weight", {ParameterDim::experts, ParameterDim::hidden}, TensorSplit::replicated, 1, false, true,
     {Init::normal, 0.02f}, false, {ParameterDim::none, ParameterDim::none, ParameterDim::none}, always,
     "llama=model.layers.{i}.block_sparse_moe.gate.weight"},
    {"mlp/experts/{e}/fc/weight", {ParameterDim::ffn2, ParameterDim::hidden}, TensorSplit::column, 2, false, true,
     {Init::normal, 0.02f}, false, {ParameterDim::ffn, ParameterDim::ffn, ParameterDim::none}, always,
     "llama=model.layers.{i}.block_sparse_moe.experts.{e}.w1.weight|"
     "model.layers.{i}.block_sparse_moe.experts.{e}.w3.weight",
     true},
    {"mlp/experts/{e}/proj/weight", {ParameterDim::hidden, ParameterDim::ffn}, TensorSplit::row, 1, false, true,
     {Init::residual_normal, 0.02f}, false, {ParameterDim::none, ParameterDim::none, ParameterDim::none}, always,
     "llama=model.layers.{i}.block_sparse_moe.experts.{e}.w2.weight", true},
};

// The routing statistics a mixture sums (MixtureOfExperts::take_statistics): the load-balancing
// and z losses, the (micro-batch, block) pairs they were summed over, the copies a capacity
// dropped and the copies each expert received. Over the interval and every rank they become the
// losses' means, the load's largest over its mean (1: balanced), the drops and the loads.
inline SublayerMetrics moe_metrics(const GptShape& s, const StatisticSums& sums) {
  const double samples = std::max(1.0, sums.get("moe.samples").at(0));
  const double aux = sums.get("moe.aux_loss_sum").at(0) / samples, z = sums.get("moe.z_loss_sum").at(0) / samples;
  const double dropped = sums.get("moe.dropped").at(0);
  const std::vector<double>& load = sums.get("moe.tokens_per_expert");
  double total = 0, most = 0;
  for (const double n : load) {
    total += n;
    most = std::max(most, n);
  }
  const double mean = total / std::max<double>(1.0, double(load.size()));
  const double max_over_mean = mean > 0 ? most / mean : 0.0;
  using Field = model::MetricField;
  SublayerMetrics m;
  m.fields = {{"moe_aux_loss", {aux}, Field::number, 9},
              {"moe_z_loss", {z}, Field::number, 9},
              {"moe_load_max_over_mean", {max_over_mean}, Field::number, 6},
              {"moe_dropped", {dropped}, Field::integer},
              {"moe_tokens_per_expert", load, Field::integers}};
  m.summary = fmt::format("moe aux {:.4f}, load max/mean {:.2f}", aux, max_over_mean);
  if (s.moe_capacity_factor > 0) m.summary += fmt::format(", dropped {}", static_cast<std::int64_t>(dropped));
  return m;
}

// No buffer of the workspace: its routes and routed rows depend on the routing and grow with the
// load (mixture_of_experts.hpp); the planner counts them at balanced load
// (src/plan/activation_memory.cpp).
inline constexpr SublayerKind kMoeMlp{SublayerSlot::mlp, "moe",
                                      "a mixture of SwiGLU experts, each token through k of E (Mixtral)",
                                      kMoeParameters, {}, moe_metrics};

}  // namespace tptrain::model
