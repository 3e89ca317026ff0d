#include "src/plan/parameter_count.hpp"

#include <stdexcept>

#include "src/model/gpt_model.hpp"
#include "src/plan/count.hpp"

namespace tptrain::plan {

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

Count product(const std::vector<std::int64_t>& shape) {
  Count size = 1;
  for (const std::int64_t d : shape) size *= d;
  return size;
}

// The tensors of a model by where they live, each counted by `elements(name, shape)`: every block
// holds the same tensors, so one block is counted and the model's size follows without a pass
// over its layers (plan time does not grow with model.layers).
struct TensorGroups {
  Count embeddings;  // word and position
  Count word;        // the word embedding alone (the last stage's tied copy)
  Count block;       // one transformer block
  Count final_norm;  // ln_f
};
template <class Elements>
TensorGroups tensor_groups(const model::GptShape& s, Elements&& elements) {
  model::GptShape one_block = s;
  one_block.layers = 1;
  TensorGroups g;
  for (const model::LogicalTensor& t : model::logical_tensors(one_block)) {
    const Count n = elements(t.name, t.shape);
    if (t.name.rfind("embedding/", 0) == 0) {
      g.embeddings += n;
      if (t.name == "embedding/word") g.word = n;
    } else if (t.name.rfind("ln_f/", 0) == 0) {
      g.final_norm += n;
    } else {
      g.block += n;  // "layers/0/..."
    }
  }
  return g;
}

}  // namespace

double narayanan_parameters(double l, double h, double V, double s) {
  return 12.0 * l * h * h * (1.0 + 13.0 / (12.0 * h) + (V + s) / (12.0 * l * h));
}

std::int64_t exact_parameters(const model::GptShape& s) {
  const TensorGroups g =
      tensor_groups(s, [](const std::string&, const std::vector<std::int64_t>& shape) { return product(shape); });
  return g.embeddings + Count(s.layers) * g.block + g.final_norm;
}

std::int64_t local_elements(const std::string& name, const std::vector<std::int64_t>& logical,
                            const model::GptShape& s) {
  const std::int64_t t = s.tensor;
  const Count size = product(logical);
  if (name == "embedding/word") return Count(s.local_vocab()) * logical.at(1);  // padded rows
  if (name == "embedding/position") return size;
  for (const char* column : {"/attn/qkv/weight", "/attn/qkv/bias", "/mlp/fc/weight", "/mlp/fc/bias"})
    if (ends_with(name, column)) return size / t;
  for (const char* row : {"/attn/proj/weight", "/mlp/proj/weight"})
    if (ends_with(name, row)) return size / t;
  if (name == "ln_f/weight" || name == "ln_f/bias") return size;
  for (const char* replicated :
       {"/ln_1/weight", "/ln_1/bias", "/ln_2/weight", "/ln_2/bias", "/attn/proj/bias", "/mlp/proj/bias"})
    if (ends_with(name, replicated)) return size;
  throw std::logic_error("tptrain: plan: no tensor-parallel split known for the model tensor " + name +
                         " (src/plan/parameter_count.cpp)");
}

std::int64_t StageParameters::of(int stage) const {
  if (stage < 0 || stage >= stages)
    throw std::out_of_range("tptrain: plan: no pipeline stage " + std::to_string(stage) + " of " +
                            std::to_string(stages));
  return stage == 0 ? first : stage == stages - 1 ? last : middle;
}

StageParameters stage_parameters(const model::GptShape& s, int stages) {
  if (stages < 1 || s.layers % stages != 0)
    throw std::invalid_argument("tptrain: plan: " + std::to_string(s.layers) + " layers do not split over " +
                                std::to_string(stages) + " pipeline stages");
  const TensorGroups g = tensor_groups(s, [&](const std::string& name, const std::vector<std::int64_t>& shape) {
    return Count(local_elements(name, shape, s));
  });
  const Count blocks = Count(s.layers / stages) * g.block;
  StageParameters n;
  n.stages = stages;
  n.middle = blocks;
  n.first = g.embeddings + blocks;
  // The last stage: ln_f and, when it is not also the first, the tied copy of the word embedding.
  n.last = stages == 1 ? n.first + g.final_norm : blocks + g.final_norm + g.word;
  if (stages == 1) n.first = n.last;
  return n;
}

}  // namespace tptrain::plan
