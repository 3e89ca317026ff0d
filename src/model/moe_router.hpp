// The router of a mixture of experts (Megatron-Core's TopKRouter; Mixtral's gate; DeepSeek-V3's
// DeepseekV3TopkRouter): logits = x · Wrᵀ in fp32, scores p = softmax over the E experts (or
// sigmoid, model.moe_score_function), the top k (of the groups that compete, model.moe_groups;
// chosen by p plus the expert bias, which only chooses) renormalised to weights that sum to 1 and
// scaled (kernels::MoeRouting, kokkos_kernels/moe_routing.hpp). Replicated over the tensor ranks:
// every one routes the same (gathered) tokens.
//
// Its losses, added to the router's gradient only: the load-balancing loss (Switch Transformers,
// Fedus et al. 2021, eq. 4; Mixtral's router_aux_loss_coef) E · Σ_e f_e · P_e, f_e the fraction of
// the micro-batch's tokens routed to e (Σ_e f_e = k, as Hugging Face counts it; f carries no
// gradient), P_e the mean router probability; and the router z-loss mean_t (log Σ_e exp logit)²
// (ST-MoE, Zoph et al. 2022). Both are the micro-batch's: under context parallelism a rank routes
// only its chunks of the sequences, so the counts, probability sums and lse² sum are summed over
// the context group first (as Megatron-Core reduces them over tensor × context), and f, P and both
// losses equal the one-rank run's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kokkos_kernels/moe_routing.hpp"
#include "src/model/linear.hpp"
#include "src/parallel/collectives.hpp"

namespace tptrain::model {

// The MoE losses' coefficients.
struct MoeLossWeights {
  double aux = 0.0;  // training.moe_aux_loss_coeff
  double z = 0.0;    // training.moe_z_loss_coeff
};

// What the blocks' routers saw since the last reset (MixtureOfExperts::take_statistics): summed
// over micro-batches and blocks on this rank; the trainer reduces them over the ranks for metrics.
struct MoeStatistics {
  double aux_loss_sum = 0.0;  // Σ over (micro-batch, block) of E · Σ_e f_e P_e
  double z_loss_sum = 0.0;    // Σ of mean_t lse²
  std::int64_t samples = 0;   // (micro-batch, block) pairs
  std::vector<std::int64_t> tokens_per_expert;  // [E]: copies routed, summed
  std::int64_t dropped = 0;   // copies dropped by a capacity
  void add(const MoeStatistics& o) {
    aux_loss_sum += o.aux_loss_sum;
    z_loss_sum += o.z_loss_sum;
    samples += o.samples;
    dropped += o.dropped;
    if (tokens_per_expert.size() < o.tokens_per_expert.size()) tokens_per_expert.resize(o.tokens_per_expert.size(), 0);
    for (std::size_t e = 0; e < o.tokens_per_expert.size(); ++e) tokens_per_expert[e] += o.tokens_per_expert[e];
  }
};

template <class T>
struct TopKRouter {
  using Acc = kx::acc_t<T>;
  using Index = Kokkos::View<int**, Kokkos::LayoutRight, kx::MemSpace>;

  // One micro-batch's routing (of its first n tokens: all of them in training, generation's new ones).
  struct Routing {
    kernels::Matrix<Acc> probs;   // [n, E]
    kernels::Vector<Acc> lse;     // [n]: log Σ_e exp logit
    Index expert;                 // [n, k]: the experts chosen
    kernels::Matrix<Acc> weight;  // [n, k]: their renormalised probabilities
  };
  // What the losses' backward needs of a micro-batch's forward (one set per micro-batch in flight).
  struct LossGradients {
    std::vector<double> aux;  // [E] host: E · f_e / N, the load-balancing loss's dL/dp_e (unweighted)
    double tokens = 0;        // N of the losses' means: the micro-batch's tokens over the context group
  };
  // The losses of one micro-batch's routing.
  struct Losses {
    double aux = 0;  // E · Σ_e f_e P_e
    double z = 0;    // mean_t lse²
  };

  Parameter<T> weight;  // [E, H], replicated
  int experts = 0, top_k = 0;
  kernels::MoeRouting routing;
  // The per-expert bias added to the scores to choose, never to weigh (DeepSeek-V3's
  // auxiliary-loss-free balancing, e_score_correction_bias; has_expert_bias): in fp32, the same on
  // every rank, [E] or empty (none). Its parameter `bias` carries it in the checkpoint: no
  // gradient, so AdamW leaves it as it is; the balancing sets both (MixtureOfExperts).
  kernels::Vector<Acc> expert_bias;
  std::optional<Parameter<T>> bias;
  Communicator* cp_ = nullptr;  // the context group (null: parallel.context = 1)

  TopKRouter(const ParameterSpec& spec, const GptShape& s, const Communicator& tp,
             const std::optional<ParameterSpec>& bias_spec = std::nullopt)
      : weight(make_parameter<T>(with_split(spec, TensorSplit::replicated, "the MoE router"), tp)),
        experts(s.experts), top_k(s.experts_per_token), routing(routing_of(s)) {
    if (!bias_spec) return;
    bias.emplace(make_parameter<T>(with_split(*bias_spec, TensorSplit::replicated, "the MoE router"), tp));
    expert_bias = kernels::Vector<Acc>("moe.expert_bias", s.experts);  // zeros, as the parameter starts
  }

  static kernels::MoeRouting routing_of(const GptShape& s) {
    kernels::MoeRouting r;
    r.sigmoid = s.moe_score_function == "sigmoid";
    r.groups = s.moe_groups;
    r.groups_per_token = s.moe_groups_per_token;
    r.normalize = s.moe_norm_topk_prob;
    r.scale = s.moe_routed_scaling;
    return r;
  }

  // The probabilities, lse, chosen experts and weights of x's tokens, and the column sums
  // [Σ_t p(t, e) / n for each e | Σ_t lse²] in router_sums [E + 1].
  template <class XV>
  void forward(const Exec& exec, const XV& x, const Routing& r, const kernels::Vector<Acc>& router_sums) const {
    PhaseScope phase(Phase::norms_elementwise);
    kernels::moe_route(exec, x, weight.value_matrix(), expert_bias, r.probs, r.lse, r.expert, r.weight, routing);
    kernels::moe_router_statistics(exec, r.probs, r.lse, router_sums, routing.sigmoid);
  }

  // The losses and their gradients' factors from the copies routed to each expert on this rank
  // (routed [E]) and the router's column sums (router_sums, on the host) over n tokens, summed
  // over the context group first.
  template <class SumsV>
  Losses losses(const std::vector<std::int64_t>& routed, const SumsV& router_sums, std::int64_t n,
                LossGradients& g) const {
    const int E = experts;
    // [copies routed to each expert | probability sums | lse² sum | tokens]
    std::vector<double> sums(2 * static_cast<std::size_t>(E) + 2);
    for (int e = 0; e < E; ++e) {
      sums[e] = double(routed[e]);
      sums[E + e] = double(router_sums(e)) * double(n);
    }
    sums[2 * E] = double(router_sums(E));
    sums[2 * E + 1] = double(n);
    if (cp_) parallel::all_reduce_host(*cp_, sums, parallel::ReduceOp::sum);
    const double N = sums[2 * E + 1];
    g.tokens = N;
    g.aux.assign(static_cast<std::size_t>(E), 0.0);
    Losses out;
    for (int e = 0; e < E; ++e) {
      out.aux += double(E) * (sums[e] / N) * (sums[E + e] / N);
      g.aux[e] = double(E) * sums[e] / N / N;
    }
    out.z = sums[2 * E] / N;
    return out;
  }

  // Through the router: dweight [n, k] the gradient of the weights (summed over the tensor group),
  // the losses' gradients weighted by `loss` and `scale` (the micro-batch's and the block
  // average's), into the logits' gradient dlogits [n, E] and from there into the router's weight
  // gradient and dx (added on tensor rank 0 only: every tensor rank computes the same, and dx is
  // summed over the group after).
  template <class XV, class DXV>
  void backward(const Exec& exec, const Communicator& tp, const Routing& r, const kernels::Matrix<Acc>& dweight,
                const LossGradients& g, const MoeLossWeights& loss, Acc scale,
                const kernels::Vector<Acc>& aux_gradient, const kernels::Matrix<Acc>& dlogits, const XV& x,
                const DXV& dx) {
    std::vector<Acc> aux(g.aux.size());
    for (std::size_t e = 0; e < aux.size(); ++e) aux[e] = Acc(loss.aux * g.aux[e]) * scale;
    Kokkos::deep_copy(exec, aux_gradient,
                      Kokkos::View<const Acc*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(aux.data(),
                                                                                                      aux.size()));
    exec.fence();  // `aux` is a temporary
    const Acc z = Acc(loss.z * 2.0 / g.tokens) * scale;
    PhaseScope phase(Phase::norms_elementwise);
    kernels::moe_router_backward(exec, r.probs, r.lse, r.expert, r.weight, dweight, aux_gradient, z, dlogits,
                                 routing);
    kernels::moe_router_linear_backward(exec, dlogits, x, weight.value_matrix(), weight.grad_matrix(), dx,
                                        tp.rank() == 0);
  }
};

}  // namespace tptrain::model
