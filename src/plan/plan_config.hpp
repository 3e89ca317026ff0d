// The numbers of a deck that planning needs, as one plain value: what the planning formulas
// (src/plan/*.hpp) take, what tests state published configurations in, and what the search for
// layouts that fit varies. No MPI, no Kokkos: pure data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/deck.hpp"
#include "src/model/spec/gpt_shape.hpp"
#include "src/model/spec/sublayer_kinds.hpp"
#include "src/model/spec/recompute.hpp"
#include "src/parallel/topology_rank_map.hpp"

namespace tptrain::plan {

// training.recompute (src/model/spec/recompute.hpp): what the backward recomputes instead of keeping.
using model::Recompute;
using model::recompute_name;

struct Config {
  model::GptShape shape;  // [model], parallel.tensor, parallel.context and parallel.expert (shape.context,
                          // shape.expert)
  int pipeline = 1;
  int virtual_stages = 1;  // model chunks per pipeline rank (interleaved 1F1B)
  int data = 1;
  bool sequence_parallel = false;
  int global_batch = 1;
  int micro_batch = 1;
  std::string precision = "fp32";  // "fp32", "bf16", "fp16"
  Recompute recompute = Recompute::none;
  bool distributed_optimizer = false;  // optimizer.shard = "optimizer", "gradients" or "parameters"
  bool shard_gradients = false;        // optimizer.shard = "gradients" (ZeRO-2) or "parameters"
  bool async_checkpoint = false;  // checkpoint.async: the host copy is kept from the first checkpoint on
  parallel::RankOrder order = parallel::RankOrder::tp_pp_dp;  // parallel.order
  // What the layout search may do with parallel.context (ring attention runs flash attention and
  // no multiple-choice tasks): whether > 1 is allowed (training.attention is not "batched", no
  // training.tasks); and training.attention, which with parallel.context gives the attention core
  // (model::flash_attention_of).
  bool context_allowed = true;
  std::string attention = "default";
  // optimizer.shard = "parameters" (FSDP / ZeRO-3 over data x context): the weights and gradients
  // are sharded as the optimizer state is, every block's weights all-gathered before its forward
  // and again before its backward (optimizer.reshard_after_forward; prefetched one block ahead),
  // its gradients reduce-scattered after its backward. Also torchtitan's FSDP in the simulations
  // of its published runs (docs/planning.md, "Validation").
  bool shard_parameters = false;
  bool reshard_after_forward = true;
  // parallel.shard_group (hybrid sharding): the dense parameters' shards over this many data x
  // context ranks, replicated across the groups; 0: over all of them.
  int shard_group = 0;
  // The routing's imbalance over the expert-parallel ranks (`plan --expert-imbalance`; what
  // `tptrain bench` reports: the busiest rank's received rows over the mean; 1: balanced). Every
  // all-to-all waits for the busiest rank's experts, so with parallel.expert > 1 a block's expert
  // GEMMs, activation and all-to-alls are costed at that rank's rows. No deck key: it is the
  // router's state (its training, its balancing), not the layout's.
  double expert_imbalance = 1.0;
  // Modes of other trainers that tptrain does not have, for simulating their published runs
  // (docs/planning.md, "Validation"); no deck key sets them.
  // torchtitan's op-level selective activation checkpointing: the outputs of the attention core
  // and of every other GEMM of a block are kept; the backward runs the other GEMMs (the 2nd, 4th
  // and 6th of wq, wk, wv, wo, w1, w3, w2: wk, wo, w3) and every memory-bound kernel again.
  bool recompute_alternate_gemms = false;
  // Megatron-Core's --tp-comm-overlap (Transformer Engine's userbuffers): each sequence-parallel
  // all-gather and reduce-scatter is split into tensor-size chunks and run beside the GEMM that
  // consumes or produces it; the compute stream waits only for what the GEMM does not cover, and
  // for one chunk that cannot overlap (the first gathered, the last scattered).
  bool overlap_tensor_communication = false;
  // Megatron-Core's --overlap-param-gather (with the distributed optimizer and its default
  // --align-param-gather): the updated parameters' all-gathers are not waited for after the
  // optimizer; all of them start with the next step, and its first forward waits for each
  // bucket in its module's pre-hook.
  bool overlap_parameter_gather = false;
  // Whose memory-bound kernels the step runs: tptrain's fused ones; Megatron-Core's (its
  // vocabulary-parallel cross-entropy in fp32, unfused: megatron/core/tensor_parallel/
  // cross_entropy.py; and its selective recomputation runs the core attention's forward again
  // in the backward, where tptrain's flash backward needs none); or eager PyTorch's (torchtitan
  // without torch.compile: each elementwise op of the Llama block its own kernel, RMSNorm upcast
  // to fp32, rotary through complex views).
  enum class Kernels { tptrain, megatron_core, eager };
  Kernels kernels = Kernels::tptrain;

  int tensor() const { return shape.tensor; }
  int context() const { return shape.context; }
  // parallel.expert (model.mlp = "moe"): ranks taken from the data-parallel ones, consecutive data
  // ranks (ep rank = dp % expert), that split every block's experts and exchange tokens by all-to-all.
  int expert() const { return shape.expert; }
  bool holds_experts() const { return model::holds_experts(shape); }  // a mixture's (expert groups)
  // tensor x context x pipeline x data.
  std::int64_t world() const { return std::int64_t(shape.tensor) * shape.context * pipeline * data; }
  // The ranks gradients are summed over and the distributed optimizer is sharded over: data x
  // context (Megatron's data-parallel group with context parallelism).
  std::int64_t data_context() const { return std::int64_t(data) * shape.context; }
  // The ranks an expert's gradients are summed over and its optimizer state is sharded over: the
  // data ranks that hold the same experts (data / expert of them) x context. data_context() without
  // expert parallelism.
  std::int64_t expert_data_context() const { return std::int64_t(data / expert()) * shape.context; }
  // The ranks a dense parameter's state is sharded over: parallel.shard_group, or data x context;
  // and how many such groups replicate it (1 without hybrid sharding).
  std::int64_t shard_ranks() const { return shard_group > 0 ? shard_group : data_context(); }
  std::int64_t shard_replicas() const { return shard_group > 0 ? data_context() / shard_group : 1; }
  // Sets parallel.context and the attention core it implies (model::flash_attention_of, as
  // model::shape_of: flash with C > 1).
  void set_context(int cp);
  // M: micro-batches per step on one data-parallel rank (gradient accumulation). The ranks of a
  // context group share their micro-batches (each holds 2 of the 2C chunks of every sequence).
  int micro_batches() const { return global_batch / (micro_batch * data); }
  // Bytes of one activation element: 4 (fp32) or 2 (bf16, fp16). Statistics are fp32 always.
  int element_bytes() const { return precision == "fp32" ? 4 : 2; }
  // What the deck loader checks between these keys (divisibility), for layouts made up by the
  // planner: "" when valid, else the first rule broken, in words.
  std::string layout_problem() const;
  // Expert parallelism's rules (parallel.expert = ep; rules::expert_problems, base/layout_rules.hpp):
  // ep > 1 needs a mixture of experts, divides parallel.data, and model.experts is a multiple of
  // it. Empty when they hold.
  std::vector<std::string> expert_problems() const;
  // optimizer.shard: "none", "optimizer" (distributed_optimizer), "gradients" (shard_gradients too)
  // or "parameters" (shard_parameters too).
  std::string shard() const {
    return shard_parameters ? "parameters" : shard_gradients ? "gradients" : distributed_optimizer ? "optimizer" : "none";
  }
  void set_shard(const std::string& mode) {
    distributed_optimizer = mode != "none";
    shard_gradients = mode == "gradients" || mode == "parameters";
    shard_parameters = mode == "parameters";
  }
};

Config config_of(const io::Deck& deck);

}  // namespace tptrain::plan
