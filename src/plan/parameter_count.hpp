// How many parameters a model has, and how many one rank holds (docs/planning.md, "Parameters").
//
// Two counts of the whole model: Narayanan et al. 2021 eq. 2 (the closed form the Megatron-LM
// paper reports, which assumes ffn_hidden = 4·hidden) and the exact count of the tensors tptrain
// builds, from model::logical_tensors, the list the checkpoints are written from. Per rank: the
// tensors of one pipeline stage, each split over the tensor-parallel group as the layers split
// it (src/model/linear.hpp, vocab_parallel_embedding.hpp; Sharding in src/model/parameter.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/model/gpt_shape.hpp"

namespace tptrain::plan {

// Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using
// Megatron-LM", eq. 2: P = 12·l·h²·(1 + 13/(12h) + (V + s)/(12·l·h)).
double narayanan_parameters(double layers, double hidden, double vocab, double seq_length);

// Every element of model::logical_tensors(s): the unpadded vocabulary, the word embedding once.
// For ffn_hidden = 4·hidden this is eq. 2 plus the 2·h of the final LayerNorm. Like every count
// of src/plan/, throws plan::Overflow beyond 2^63 − 1 (src/plan/count.hpp).
std::int64_t exact_parameters(const model::GptShape& s);

// Elements of the logical tensor `name` [logical shape] on one tensor-parallel rank of s.tensor:
// column-parallel weights and biases (QKV, fc) split their rows, row-parallel weights (the two
// projections) their columns, the word embedding its padded vocabulary rows; LayerNorms, the
// row-parallel biases and the position embedding are replicated. Throws std::logic_error for a
// name it does not know, so that a tensor added to the model cannot be counted wrong silently.
std::int64_t local_elements(const std::string& name, const std::vector<std::int64_t>& logical,
                            const model::GptShape& s);

// Elements one tensor-parallel rank of each pipeline stage holds: its blocks; the first stage
// the embeddings; the last stage ln_f and, when it is not also the first, the tied copy of the
// word embedding (src/model/gpt_model.hpp). Every stage between them holds the same, so three
// numbers say it for any pipeline size.
struct StageParameters {
  int stages = 1;
  std::int64_t first = 0, middle = 0, last = 0;
  std::int64_t of(int stage) const;  // throws std::out_of_range for a stage that does not exist
};
StageParameters stage_parameters(const model::GptShape& s, int stages);

}  // namespace tptrain::plan
