// The mixture of experts (model.mlp = "moe"; Mixtral): a router and E SwiGLU experts, k of them
// per token. Its rows of the block descriptor and its metrics; its forward and backward:
// mixture_of_experts.hpp, with the router (moe_router.hpp) and the token dispatcher
// (moe_token_dispatcher.hpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include <fmt/format.h>

#include "src/model/spec/sublayer_kind.hpp"

namespace tptrain::model {

// The router, replicated over the tensor ranks (every rank routes the same tokens), and each
// expert's SwiGLU split over them as the dense one is (swiglu_mlp_kind.hpp). An expert-parallel
// rank holds the experts of its share only (held_by_expert_rank, block_descriptor.hpp).
inline constexpr ParameterRow kMoeParameters[] = {
    {"{place}/router/weight", {ParameterDim::experts, ParameterDim::hidden}, TensorSplit::replicated, 1, false, true,
     {Init::normal, 0.02f}, false, {ParameterDim::none, ParameterDim::none, ParameterDim::none}, always,
     "llama=model.layers.{i}.block_sparse_moe.gate.weight deepseek=model.layers.{i}.mlp.gate.weight"},
    // The per-expert bias the router chooses with (DeepSeek-V3's e_score_correction_bias): no
    // gradient; moved by the balancing after each step (MixtureOfExperts::set_expert_bias).
    {"{place}/router/expert_bias", {ParameterDim::experts, ParameterDim::none}, TensorSplit::replicated, 1, false,
     false, {Init::constant, 0.0f}, false, {ParameterDim::none, ParameterDim::none, ParameterDim::none},
     needs_expert_bias, "deepseek=model.layers.{i}.mlp.gate.e_score_correction_bias"},
    // The shared experts (DeepSeekMoE): one SwiGLU of n_s·F_e on every token, split over the
    // tensor ranks as the dense one is; not an expert of expert parallelism (every rank holds it).
    {"{place}/shared_experts/fc/weight", {ParameterDim::shared_ffn2, ParameterDim::hidden}, TensorSplit::column, 2,
     false, true, {Init::normal, 0.02f}, false,
     {ParameterDim::shared_ffn, ParameterDim::shared_ffn, ParameterDim::none}, needs_shared_experts,
     "deepseek=model.layers.{i}.mlp.shared_experts.gate_proj.weight|"
     "model.layers.{i}.mlp.shared_experts.up_proj.weight"},
    {"{place}/shared_experts/proj/weight", {ParameterDim::hidden, ParameterDim::shared_ffn}, TensorSplit::row, 1,
     false, true, {Init::residual_normal, 0.02f}, false, {ParameterDim::none, ParameterDim::none, ParameterDim::none},
     needs_shared_experts, "deepseek=model.layers.{i}.mlp.shared_experts.down_proj.weight"},
    {"{place}/experts/{e}/fc/weight", {ParameterDim::expert_ffn2, ParameterDim::hidden}, TensorSplit::column, 2, false,
     true, {Init::normal, 0.02f}, false, {ParameterDim::expert_ffn, ParameterDim::expert_ffn, ParameterDim::none}, always,
     "llama=model.layers.{i}.block_sparse_moe.experts.{e}.w1.weight|"
     "model.layers.{i}.block_sparse_moe.experts.{e}.w3.weight "
     "deepseek=model.layers.{i}.mlp.experts.{e}.gate_proj.weight|"
     "model.layers.{i}.mlp.experts.{e}.up_proj.weight",
     true},
    {"{place}/experts/{e}/proj/weight", {ParameterDim::hidden, ParameterDim::expert_ffn}, TensorSplit::row, 1, false, true,
     {Init::residual_normal, 0.02f}, false, {ParameterDim::none, ParameterDim::none, ParameterDim::none}, always,
     "llama=model.layers.{i}.block_sparse_moe.experts.{e}.w2.weight "
     "deepseek=model.layers.{i}.mlp.experts.{e}.down_proj.weight",
     true},
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

inline constexpr const char* kMoeScoreFunctions[] = {"softmax", "sigmoid"};

// Its keys. The losses' weights are [training] keys: they weigh terms of the training loss.
inline constexpr KindKey kMoeKeys[] = {
    {"model", "experts", 8, 1, true, "",
     "model.mlp = \"moe\": routed experts E per block, each a SwiGLU of model.moe_ffn_hidden (Mixtral: 8)",
     "it is the mixture of experts'", &ModelShape::experts},
    {"model", "moe_ffn_hidden", 0, 0, true, "(0 = model.ffn_hidden)",
     "model.mlp = \"moe\": each routed expert's SwiGLU width F_e (DeepSeek-V3's moe_intermediate_size: 2048; "
     "Mixtral's experts are model.ffn_hidden wide)",
     "it is the mixture of experts'", &ModelShape::moe_ffn_hidden},
    {"model", "moe_shared_experts", 0, 0, true, "",
     "model.mlp = \"moe\": shared experts n_s every token goes through besides its routed ones, computed as one "
     "SwiGLU of n_s * model.moe_ffn_hidden whose output is added unweighted (DeepSeek-V3's n_shared_experts: 1)",
     "it is the mixture of experts'", &ModelShape::moe_shared_experts},
    {"model", "moe_dense_layers", 0, 0, true, "",
     "model.mlp = \"moe\": the first k blocks have a dense SwiGLU of model.ffn_hidden instead of the mixture "
     "(DeepSeek-V3's first_k_dense_replace: 3)",
     "it is the mixture of experts'", &ModelShape::moe_dense_layers},
    {"model", "experts_per_token", 2, 1, true, "",
     "model.mlp = \"moe\": experts k each token goes through (top k of the router's softmax, their "
     "probabilities renormalised to sum to 1; Mixtral: 2)",
     "it is the mixture of experts'", &ModelShape::experts_per_token},
    {"model", "moe_capacity_factor", 0.0, 0.0, true, "(0 = dropless)",
     "model.mlp = \"moe\": 0 runs dropless (every token reaches its k experts); c > 0 caps each expert at "
     "ceil(c * k * tokens / experts) of a micro-batch's tokens and drops the rest (counted in metrics)",
     "it is the mixture of experts'", nullptr, &ModelShape::moe_capacity_factor},
    text_key("model", "moe_score_function", "softmax", kMoeScoreFunctions,
             "model.mlp = \"moe\": the router's scores, \"softmax\" over the experts (Mixtral) or \"sigmoid\" "
             "per expert (DeepSeek-V3)",
             "it is the mixture of experts'", &ModelShape::moe_score_function),
    {"model", "moe_groups", 1, 1, true, "",
     "model.mlp = \"moe\": the experts in this many groups, of which model.moe_groups_per_token (those whose "
     "two best scores sum highest) compete for each token (DeepSeek-V3's n_group: 8)",
     "it is the mixture of experts'", &ModelShape::moe_groups, nullptr, 65},
    {"model", "moe_groups_per_token", 1, 1, true, "",
     "model.mlp = \"moe\": the groups whose experts compete for each token (DeepSeek-V3's topk_group: 4)",
     "it is the mixture of experts'", &ModelShape::moe_groups_per_token},
    flag_key("model", "moe_norm_topk_prob", true,
             "model.mlp = \"moe\": the chosen experts' scores renormalised to sum to 1 (Mixtral, DeepSeek-V3)",
             "it is the mixture of experts'", &ModelShape::moe_norm_topk_prob),
    {"model", "moe_routed_scaling", 1.0, 0.0, false, "",
     "model.mlp = \"moe\": the routed experts' weights scaled by it (DeepSeek-V3's routed_scaling_factor: 2.5)",
     "it is the mixture of experts'", nullptr, &ModelShape::moe_routed_scaling},
    {"training", "moe_bias_update_rate", 0.0, 0.0, true, "(0 = off)",
     "model.mlp = \"moe\": auxiliary-loss-free balancing (DeepSeek-V3): after each step every expert's bias "
     "(which only chooses) moves by this much towards balance, b_e += rate * sign(mean load - load_e), the "
     "step's loads summed over the ranks (DeepSeek-V3: 0.001)",
     "it balances the mixture of experts' router", nullptr, &ModelShape::moe_bias_update_rate},
    {"training", "moe_aux_loss_coeff", 0.02, 0.0, true, "",
     "model.mlp = \"moe\": weight of the load-balancing loss E * sum_e f_e * P_e (Switch, Mixtral), averaged "
     "over the blocks, added to the training loss (logged apart as moe_aux_loss)",
     "it weights the mixture of experts' load-balancing loss", nullptr, &ModelShape::moe_aux_loss_coeff},
    flag_key("training", "moe_aux_loss_per_sequence", false,
             "model.mlp = \"moe\": the load-balancing loss is DeepSeek-V3's sequence-wise one, sum_e f_e * P_e per "
             "sequence with f_e = E / (k * T) * (the sequence's T tokens routed to e), averaged over the sequences "
             "(its alpha is training.moe_aux_loss_coeff: 0.0001), instead of Switch's over the micro-batch",
             "it chooses the mixture of experts' load-balancing loss", &ModelShape::moe_aux_loss_per_sequence),
    {"training", "moe_z_loss_coeff", 0.0, 0.0, true, "",
     "model.mlp = \"moe\": weight of the router z-loss mean((log sum exp logits)^2) (ST-MoE), averaged over "
     "the blocks (0 = off; logged as moe_z_loss)",
     "it weights the mixture of experts' router z-loss", nullptr, &ModelShape::moe_z_loss_coeff},
};

// Its rules: k of E experts per token (1 <= k <= E), from the groups that compete for it; its
// experts have no biases (Mixtral's); the z-loss is of softmax scores.
inline std::vector<rules::Problem> moe_problems(const ModelShape& s) {
  std::vector<rules::Problem> out;
  if (s.experts_per_token > s.experts)
    out.push_back(rules::Problem::statement({"model.experts_per_token", s.experts_per_token},
                                            fmt::format("at most model.experts = {}: each token goes to k "
                                                        "different experts",
                                                        s.experts)));
  if (s.linear_bias)
    out.push_back(rules::Problem::statement({"model.linear_bias", 0, "true"},
                                            "false with {model.mlp}: the experts have no biases (Mixtral)",
                                            {{"model.mlp", 0, "\"moe\""}}));
  // Groups: whole groups of at least two experts (a group scores by its best two), g of G.
  const int G = s.moe_groups;
  if (G > 1 && (s.experts % G != 0 || s.experts / G < 2))
    out.push_back(rules::Problem::statement(
        {"model.moe_groups", G},
        fmt::format("a divisor of model.experts = {} leaving at least 2 experts per group: a group is scored by "
                    "its two best experts",
                    s.experts)));
  else if (s.moe_groups_per_token > G)
    out.push_back(rules::Problem::statement({"model.moe_groups_per_token", s.moe_groups_per_token},
                                            fmt::format("at most model.moe_groups = {}", G)));
  else if (G > 1 && s.experts_per_token > s.moe_groups_per_token * (s.experts / G))
    out.push_back(rules::Problem::statement(
        {"model.experts_per_token", s.experts_per_token},
        fmt::format("at most the experts of model.moe_groups_per_token = {} groups of {}: each token's k experts "
                    "come from its groups",
                    s.moe_groups_per_token, s.experts / G)));
  if (s.moe_dense_layers >= s.layers)
    out.push_back(rules::Problem::statement({"model.moe_dense_layers", s.moe_dense_layers},
                                            fmt::format("below model.layers = {}: at least one block has the mixture",
                                                        s.layers)));
  if (s.moe_score_function == "sigmoid" && s.moe_z_loss_coeff != 0)
    out.push_back(rules::Problem::statement(
        {"training.moe_z_loss_coeff", 0, fmt::format("{}", s.moe_z_loss_coeff)},
        "0 with {model.moe_score_function}: the router z-loss is of softmax scores",
        {{"model.moe_score_function", 0, "\"sigmoid\""}}));
  return out;
}
inline constexpr const char* kMoeBinds[] = {"linear_bias", "layers"};

// No buffer of the workspace: its routes and routed rows depend on the routing and grow with the
// load (mixture_of_experts.hpp); the planner counts them at balanced load
// (src/plan/activation_memory.cpp).
inline constexpr SublayerKind kMoeMlp{SublayerSlot::mlp,
                                      "moe",
                                      "a mixture of model.experts SwiGLU experts, each token through "
                                      "model.experts_per_token of them (Mixtral) and the model.moe_shared_experts "
                                      "(DeepSeekMoE)",
                                      kMoeParameters,
                                      {},
                                      moe_metrics,
                                      kMoeKeys,
                                      moe_problems,
                                      kMoeBinds,
                                      [](const ModelShape& s) {
                                        std::string routing;
                                        if (s.moe_score_function != "softmax") routing += ", " + s.moe_score_function;
                                        if (s.moe_groups > 1)
                                          routing += fmt::format(", {} of {} groups", s.moe_groups_per_token,
                                                                 s.moe_groups);
                                        if (!s.moe_norm_topk_prob) routing += ", unnormalised";
                                        if (s.moe_routed_scaling != 1.0)
                                          routing += fmt::format(", scaled {:g}", s.moe_routed_scaling);
                                        std::string more;
                                        if (s.moe_ffn_hidden > 0) more += fmt::format(" of {}", s.moe_ffn_hidden);
                                        more += fmt::format(", {} per token", s.experts_per_token);
                                        if (s.moe_shared_experts > 0)
                                          more += fmt::format(", {} shared", s.moe_shared_experts);
                                        if (s.moe_dense_layers > 0)
                                          more += fmt::format(", first {} blocks dense", s.moe_dense_layers);
                                        return fmt::format("MoE: {} SwiGLU experts{}{}", s.experts, more, routing);
                                      },
                                      false,
                                      {"swiglu", true, true}};

}  // namespace tptrain::model
