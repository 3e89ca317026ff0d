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
// gradient), P_e the mean router probability — or DeepSeek-V3's sequence-wise balance loss
// (§2.1.2, eqs. 17-20; training.moe_aux_loss_per_sequence) Σ_e f_e · P_e per sequence of T tokens,
// f_e = E/(k·T) · (its tokens routed to e), P_e the sequence's mean normalised score, averaged over
// the micro-batch's sequences; and the router z-loss mean_t (log Σ_e exp logit)²
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
    // [G·E] host: the load-balancing loss's dL/dp_e (unweighted) of each group's tokens: E · f_e / N
    // (one group), or per sequence g: E/(k·T) · f_{g,e} / T / G (T a sequence's tokens, f its count)
    std::vector<double> aux;
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
  // The sequence-wise balance loss's rows of a sequence on this rank (its local_seq_length); 0: the
  // loss is the micro-batch's.
  std::int64_t sequence_rows = 0;

  TopKRouter(const ParameterSpec& spec, const GptShape& s, const Communicator& tp,
             const std::optional<ParameterSpec>& bias_spec = std::nullopt)
      : weight(make_parameter<T>(with_split(spec, TensorSplit::replicated, "the MoE router"), tp)),
        experts(s.experts), top_k(s.experts_per_token), routing(routing_of(s)),
        sequence_rows(s.moe_aux_loss_per_sequence ? s.local_seq_length() : 0) {
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

  // The rows of each group the load-balancing loss of n routed rows is computed over: a
  // sequence's (sequence_rows), or all n (the micro-batch; also generation's new tokens, which
  // are no whole sequences); and the groups, G.
  std::int64_t group_rows(std::int64_t n) const {
    return sequence_rows > 0 && n > 0 && n % sequence_rows == 0 ? sequence_rows : n;
  }
  std::int64_t groups(std::int64_t n) const { return group_rows(n) > 0 ? n / group_rows(n) : 1; }

  // The probabilities, lse, chosen experts and weights of x's tokens, and the column sums
  // [Σ_{t of g} p(t, e) / group_rows for each group g and expert e | Σ_t lse²] in router_sums
  // [G·E + 1, or more].
  template <class XV>
  void forward(const Exec& exec, const XV& x, const Routing& r, const kernels::Vector<Acc>& router_sums) const {
    PhaseScope phase(Phase::norms_elementwise);
    kernels::moe_route(exec, x, weight.value_matrix(), expert_bias, r.probs, r.lse, r.expert, r.weight, routing);
    const std::int64_t n = r.probs.extent(0);
    kernels::moe_router_statistics(exec, r.probs, r.lse, first_rows(router_sums, groups(n) * experts + 1),
                                   routing.sigmoid, group_rows(n));
  }

  // The losses and their gradients' factors from the copies routed to each expert by each group
  // on this rank (routed [G·E]) and the router's column sums (router_sums, on the host) over n
  // tokens, summed over the context group first (a sequence's chunks on the context ranks).
  template <class SumsV>
  Losses losses(const std::vector<std::int64_t>& routed, const SumsV& router_sums, std::int64_t n,
                LossGradients& g) const {
    const std::int64_t G = groups(n), GE = G * experts;
    // [copies routed to each (group, expert) | probability sums | lse² sum | tokens]
    std::vector<double> sums(2 * static_cast<std::size_t>(GE) + 2);
    for (std::int64_t i = 0; i < GE; ++i) {
      sums[i] = double(routed[i]);
      sums[GE + i] = double(router_sums(i)) * double(group_rows(n));
    }
    sums[2 * GE] = double(router_sums(GE));
    sums[2 * GE + 1] = double(n);
    if (cp_) parallel::all_reduce_host(*cp_, sums, parallel::ReduceOp::sum);
    const double N = sums[2 * GE + 1], tokens_per_group = N / double(G);
    // Switch's E · Σ f P with Σ f = k; DeepSeek-V3's f_e normalised by E/(k·T) instead of 1/T.
    const double factor = sequence_rows > 0 ? double(experts) / double(top_k) : double(experts);
    g.tokens = N;
    g.aux.assign(static_cast<std::size_t>(GE), 0.0);
    Losses out;
    for (std::int64_t i = 0; i < GE; ++i) {
      out.aux += factor * (sums[i] / tokens_per_group) * (sums[GE + i] / tokens_per_group) / double(G);
      g.aux[i] = factor * sums[i] / tokens_per_group / tokens_per_group / double(G);
    }
    out.z = sums[2 * GE] / N;
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
                                 routing, group_rows(r.probs.extent(0)));
    kernels::moe_router_linear_backward(exec, dlogits, x, weight.value_matrix(), weight.grad_matrix(), dx,
                                        tp.rank() == 0);
  }
};

}  // namespace tptrain::model
