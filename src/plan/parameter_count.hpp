// How many parameters a model has, and how many one rank holds (docs/planning.md, "Parameters").
//
// Counts of the whole model by formula — Narayanan et al. 2021 eq. 2 (the closed form the
// Megatron-LM paper reports for GPT, which assumes ffn_hidden = 4·hidden), Llama's (llama decks) —
// and the exact count of the tensors tptrain
// builds, from the model's descriptor tables (src/model/spec/model_parameters.hpp and the block
// descriptor, src/model/spec/block_descriptor.hpp), which the checkpoints are written from too. Per
// rank: the tensors of one pipeline stage, each split over the tensor-parallel group as its
// descriptor row states.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/model/spec/gpt_shape.hpp"
#include "src/model/spec/gradient_buckets.hpp"

namespace tptrain::plan {

// Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using
// Megatron-LM", eq. 2: P = 12·l·h²·(1 + 13/(12h) + (V + s)/(12·l·h)).
double narayanan_parameters(double layers, double hidden, double vocab, double seq_length);

// A Llama's parameters by formula (Touvron et al. 2023; Hugging Face's LlamaForCausalLM): l layers
// of h·(a + 2k)·d (q, k, v projections; k key/value heads, d = h/a), a·d·h (o_proj), 3·h·f (gate,
// up, down) and 2h (two RMSNorm weights); the V×h embedding, the V×h lm_head unless tied, the
// final RMSNorm's h. No biases, no position embedding. Llama-2-7B: 6,738,415,616; Llama-3-8B:
// 8,030,261,248.
double llama_parameters(double layers, double hidden, double heads, double kv_heads, double ffn_hidden, double vocab,
                        bool tied);

// A mixture of experts' parameters by formula (Mixtral, Jiang et al. 2024; Hugging Face's
// MixtralForCausalLM): llama's block with E SwiGLU experts of f each (3·h·f apiece) and the router's
// E·h in place of its MLP, of which `routed` (K) experts count:
// l·(h·(a + 2k)·d + a·d·h + K·3·h·f + E·h + 2h) + 2·V·h + h (V·h tied). K = E: every parameter;
// K = experts_per_token: the active ones (below). Mixtral-8x7B (l 32, h 4096, a 32, k 8, f 14336,
// E 8, V 32000): 46,702,792,704, and 12,879,925,248 active with K = 2.
double moe_parameters(double layers, double hidden, double heads, double kv_heads, double ffn_hidden, double experts,
                      double routed, double vocab, bool tied);

// Every element of model::logical_tensors(s): the unpadded vocabulary, the word embedding once.
// For GPT-2 with ffn_hidden = 4·hidden this is eq. 2 plus the 2·h of the final LayerNorm; for
// llama it is llama_parameters. Like every count of src/plan/, throws plan::Overflow beyond
// 2^63 − 1 (src/plan/count.hpp).
std::int64_t exact_parameters(const model::GptShape& s);

// The parameters one token's forward reads (a mixture of experts' "active parameters"): every
// tensor of exact_parameters but, in each block, the experts beyond the K = experts_per_token a
// token is routed to (all experts are alike, so which K does not matter); the router counts. For a
// dense MLP, exact_parameters.
std::int64_t active_parameters(const model::GptShape& s);

// One block's parameters of one expert (its gate|up and down: 3·h·f for SwiGLU experts); 0 without
// a mixture of experts.
std::int64_t expert_parameters(const model::GptShape& s);

// Elements one tensor-parallel rank of each pipeline stage holds: its blocks; the first stage
// the embeddings; the last stage ln_f, an untied lm_head and, when it is not also the first, the
// tied copy of the word embedding (src/model/gpt_model.hpp). A split tensor counts its allocated elements: the
// word embedding's padded vocabulary rows. With a mixture of experts a rank holds the experts of
// its expert-parallel rank only, model.experts / parallel.expert per block (every expert-parallel
// rank as many): `experts` of each stage's counts are theirs, the same on every stage but those
// that hold DeepSeek-V3's dense first blocks; their gradients are summed and their optimizer
// state sharded over the expert-data group instead of data x context
// (src/plan/parameter_memory.hpp).
struct StageParameters {
  std::vector<std::int64_t> held;     // per stage: the elements each of its ranks holds
  std::vector<std::int64_t> experts;  // of them the experts' (0 without a mixture of experts)
  std::vector<std::vector<model::BucketExtent>> buckets;  // per stage: stage_buckets, which held sums
  int stages() const { return static_cast<int>(held.size()); }
  std::int64_t of(int stage) const;  // these throw std::out_of_range for a stage that does not exist
  std::int64_t experts_of(int stage) const;
  const std::vector<model::BucketExtent>& buckets_of(int stage) const;
  std::int64_t dense_of(int stage) const { return of(stage) - experts_of(stage); }
  std::int64_t most_experts() const;  // the largest stage's experts

 private:
  std::size_t checked(int stage) const;
};
// The stages' counts of `stages` pipeline stages of `virtual_stages` model chunks each (the
// chunks decide which stages hold DeepSeek-V3's dense first blocks): stage_buckets' sums.
StageParameters stage_parameters(const model::GptShape& s, int stages, int virtual_stages = 1);

// The gradient buckets one tensor-parallel rank of stage `stage` holds, as GptModel makes them
// (src/model/spec/gradient_buckets.hpp): the head's, multi-token prediction's, each block's dense
// and, on a stage with experts, expert bucket, the embedding's; each with the backward step that
// writes it, not yet split (shards 1).
std::vector<model::BucketExtent> stage_buckets(const model::GptShape& s, int stages, int virtual_stages, int stage);

}  // namespace tptrain::plan
