// The rules a parallel layout must meet, each stated once, as data (base/rules.hpp): heads of
// whole features, tensor parallelism's whole heads, MLP slices and key/value heads per rank, the
// pipeline's equal stages and the interleaved schedule's chunks and micro-batch groups, context
// and sequence parallelism's token splits, and expert parallelism's ranks and whole experts. A rule returns its
// problems, each naming the keys it involves; the readers word them for their place:
//   the deck (io/deck.cpp)               at the file:line of the key to blame, with "did you
//                                        mean"-grade detail (the nearest valid layouts);
//   the model (GptShape::validate,       as std::invalid_argument text for a shape or a stage
//     GptModel's pipeline stage)         built in code;
//   the planner (src/plan/plan_config)   as the reason a candidate layout is skipped;
//   the schedule (schedule_problem)      as the reason it refuses counts.
// Plain data, no Kokkos, no MPI: io/ and src/ both read it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "base/rules.hpp"

namespace tptrain::rules {

// Attention heads: model.hidden features in model.heads heads of hidden / heads each.
inline std::vector<Problem> head_problems(std::int64_t hidden, std::int64_t heads) {
  if (hidden < 1 || heads < 1 || hidden % heads == 0) return {};
  return {Problem::divisible({"model.hidden", hidden}, {"model.heads", heads},
                             "each head has model.hidden / model.heads features")};
}

// Tensor parallelism (Megatron-LM section 3) gives each rank whole heads and an equal slice of
// the MLP's width.
inline std::vector<Problem> tensor_split_problems(std::int64_t heads, std::int64_t ffn_hidden, std::int64_t tensor,
                                                  std::int64_t moe_ffn_hidden = 0) {
  if (tensor < 1) return {};
  std::vector<Problem> out;
  if (heads > 0 && heads % tensor != 0)
    out.push_back(Problem::divisible({"model.heads", heads}, {"parallel.tensor", tensor},
                                     "tensor parallelism gives each rank whole heads"));
  if (ffn_hidden > 0 && ffn_hidden % tensor != 0)
    out.push_back(Problem::divisible({"model.ffn_hidden", ffn_hidden}, {"parallel.tensor", tensor},
                                     "tensor parallelism splits the MLP width evenly across ranks"));
  if (moe_ffn_hidden > 0 && moe_ffn_hidden % tensor != 0)
    out.push_back(Problem::divisible({"model.moe_ffn_hidden", moe_ffn_hidden}, {"parallel.tensor", tensor},
                                     "tensor parallelism splits each expert's width evenly across ranks"));
  return out;
}

// Pipeline parallelism: every stage holds the same number of layers.
inline std::vector<Problem> pipeline_problems(std::int64_t layers, std::int64_t pipeline) {
  if (layers < 1 || pipeline < 1 || layers % pipeline == 0) return {};
  return {Problem::divisible({"model.layers", layers}, {"parallel.pipeline", pipeline},
                             "each pipeline stage holds the same number of layers")};
}

// Context parallelism (parallel.context = C; base/context_chunks.hpp) cuts every sequence into 2C
// chunks, two per rank (the causal mask's load balance).
inline std::vector<Problem> context_problems(std::int64_t seq_length, std::int64_t context) {
  if (seq_length < 1 || context <= 1 || seq_length % (2 * context) == 0) return {};
  return {Problem::statement({"model.seq_length", seq_length},
                             fmt::format("a multiple of 2 * parallel.context = {} with {{parallel.context}}: context "
                                         "parallelism cuts every sequence into 2 * parallel.context chunks",
                                         2 * context),
                             {{"parallel.context", context}})};
}

// Sequence parallelism (parallel.sequence_parallel, Korthikanti et al. 2022) splits a rank's
// tokens of every sequence (seq_length / context of them) evenly over the tensor-parallel ranks.
// Not judged while the context rule is broken.
inline std::vector<Problem> sequence_parallel_problems(std::int64_t seq_length, std::int64_t context,
                                                       std::int64_t tensor, bool sequence_parallel) {
  if (!sequence_parallel || seq_length < 1 || context < 1 || tensor < 1) return {};
  if (context == 1) {
    if (seq_length % tensor == 0) return {};
    return {Problem::divisible({"model.seq_length", seq_length}, {"parallel.tensor", tensor},
                               "parallel.sequence_parallel = true splits every sequence evenly over the "
                               "tensor-parallel ranks")};
  }
  if (!context_problems(seq_length, context).empty() || (seq_length / context) % tensor == 0) return {};
  return {Problem::statement({"model.seq_length", seq_length},
                             fmt::format("a multiple of parallel.context * parallel.tensor = {} with {{parallel.context}}, "
                                         "{{parallel.tensor}} and parallel.sequence_parallel = true: each context "
                                         "rank's tokens are split over the tensor ranks",
                                         context * tensor),
                             {{"parallel.context", context}, {"parallel.tensor", tensor}})};
}

// Grouped-query attention's key/value heads (model.kv_heads, kv <= heads): each serves heads / kv
// query heads, and tensor parallelism gives each rank whole ones, so kv divides heads and is a
// multiple of the tensor size. With kv = heads the second is the heads' own rule (heads a
// multiple of parallel.tensor), not stated here.
inline std::vector<Problem> kv_head_problems(std::int64_t heads, std::int64_t kv_heads, std::int64_t tensor) {
  if (heads < 1 || kv_heads < 1 || tensor < 1) return {};
  if (heads % kv_heads != 0)
    return {Problem::divisible({"model.heads", heads}, {"model.kv_heads", kv_heads},
                               "grouped-query attention shares each key/value head among model.heads / "
                               "model.kv_heads query heads")};
  if (kv_heads == heads || kv_heads % tensor == 0) return {};
  std::int64_t below = 1, above = 0;  // the tensor sizes nearest to `tensor` that divide kv_heads
  for (std::int64_t c = 1; c <= kv_heads; ++c)
    if (kv_heads % c == 0) {
      if (c < tensor) below = c;
      if (c > tensor && above == 0) above = c;
    }
  const std::string nearest = above > 0 ? fmt::format("parallel.tensor = {} or {}", below, above)
                                        : fmt::format("parallel.tensor = {}", below);
  return {Problem::divisible({"model.kv_heads", kv_heads}, {"parallel.tensor", tensor},
                             fmt::format("tensor parallelism gives each rank whole key/value heads; the nearest "
                                         "valid layouts are {} (a divisor of model.kv_heads)",
                                         nearest))};
}

// The interleaved 1F1B schedule (parallel.virtual_stages = v > 1; src/schedule/pipeline_schedule.hpp,
// Narayanan et al. 2021, section 2.2): a pipeline to interleave over, v chunks of whole layers on
// every rank, and the step's micro-batches in groups of parallel.pipeline (micro_batches < 1:
// not known yet). Reported on parallel.virtual_stages, the key that asks for it.
inline std::vector<Problem> interleave_problems(std::int64_t layers, std::int64_t pipeline, std::int64_t virtual_stages,
                                                std::int64_t micro_batches) {
  if (virtual_stages <= 1 || pipeline < 1) return {};
  const KeyValue v{"parallel.virtual_stages", virtual_stages};
  if (pipeline == 1)
    return {Problem::statement(v, "1 with parallel.pipeline = 1: model chunks interleave over the ranks of a pipeline "
                                  "(set parallel.pipeline > 1, or leave parallel.virtual_stages out)")};
  std::vector<Problem> out;
  if (layers > 0 && layers % (pipeline * virtual_stages) != 0)
    out.push_back(Problem::statement(
        v, fmt::format("a divisor of model.layers / parallel.pipeline: model.layers = {} must be a multiple of "
                       "parallel.pipeline * parallel.virtual_stages = {} * {} = {}, each chunk holding the same "
                       "number of layers",
                       layers, pipeline, virtual_stages, pipeline * virtual_stages)));
  if (micro_batches > 0 && micro_batches % pipeline != 0)
    out.push_back(Problem::statement(
        v, fmt::format("1 with {} micro-batches per step (training.global_batch / (training.micro_batch * "
                       "parallel.data)): the interleaved schedule runs micro-batches in groups of "
                       "parallel.pipeline = {}, so they must be a multiple of it",
                       micro_batches, pipeline)));
  return out;
}

// Expert parallelism (parallel.expert = ep; src/parallel/topology.hpp): it splits a mixture of
// experts' model.experts experts (moe: model.mlp = "moe") over ep ranks taken from the
// data-parallel ones (Megatron), so ep > 1 needs a mixture of experts, ep divides parallel.data
// and each rank holds model.experts / ep whole experts. experts, data < 1: not known yet (that
// half is not checked).
inline std::vector<Problem> expert_problems(bool moe, std::int64_t experts, std::int64_t expert, std::int64_t data) {
  if (expert < 1) return {};
  if (!moe) {
    if (expert == 1) return {};
    return {Problem::statement({"parallel.expert", expert},
                               "1 without a mixture of experts: expert parallelism splits the experts of model.mlp "
                               "= \"moe\" over ranks (set model.mlp = \"moe\", or leave parallel.expert out)")};
  }
  std::vector<Problem> out;
  if (data > 0 && data % expert != 0)
    out.push_back(Problem::divisible({"parallel.data", data}, {"parallel.expert", expert},
                                     "expert parallelism takes its ranks from the data-parallel ones: each "
                                     "expert-parallel group is parallel.expert consecutive data-parallel ranks"));
  if (experts > 0 && experts % expert != 0)
    out.push_back(Problem::divisible({"model.experts", experts}, {"parallel.expert", expert},
                                     "expert parallelism gives each rank model.experts / parallel.expert whole "
                                     "experts"));
  return out;
}

}  // namespace tptrain::rules
