#include "src/plan/parameter_count.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "src/model/spec/model_parameters.hpp"
#include "src/plan/count.hpp"

namespace tptrain::plan {

namespace {

Count elements(const std::vector<std::int64_t>& shape) {
  Count n = 1;
  for (const std::int64_t d : shape) n *= d;
  return n;
}

Count logical_elements(const model::ParameterSpec& p) { return elements(p.logical_shape()); }

// model::ParameterSpec::local_elements, overflow-checked.
Count local_elements(const model::ParameterSpec& p, int tensor) {
  const Count n = elements(p.shape);
  return p.split == model::TensorSplit::replicated ? n : n / tensor;
}

// The elements of every table row for shape s, counted by `count`.
template <class Counter>
Count sum(const std::vector<model::ParameterRow>& table, const model::GptShape& s, Counter count) {
  Count n = 0;
  for (const model::ParameterRow& r : table) n += count(model::spec_of(r, s));
  return n;
}

// One block's elements, counted by `count`: its dense rows, and the rows of one expert (0 without
// a mixture of experts). Every expert's rows have the same shapes, so n experts hold n times
// one's: counted from the table's rows (block_parameter_kinds), never from E expanded copies,
// plan time and memory do not grow with model.experts.
struct BlockElements {
  Count dense = 0, expert = 0;
  Count with_experts(Count experts) const { return dense + experts * expert; }
};
template <class Counter>
BlockElements block_elements(const model::GptShape& s, Counter count) {
  BlockElements n;
  for (const model::ParameterRow& r : model::block_parameter_kinds(s))
    (r.per_expert ? n.expert : n.dense) += count(model::spec_of(r, s));
  return n;
}

// The experts of a block a count takes: all E, or none without a mixture of experts.
Count all_experts(const model::GptShape& s) { return model::holds_experts(s) ? s.experts : 0; }

}  // namespace

double narayanan_parameters(double l, double h, double V, double s) {
  return 12.0 * l * h * h * (1.0 + 13.0 / (12.0 * h) + (V + s) / (12.0 * l * h));
}

double llama_parameters(double l, double h, double a, double k, double f, double V, bool tied) {
  const double d = h / a;
  const double block = 2 * h + h * (a + 2 * k) * d + a * d * h + 3 * h * f;
  return V * h * (tied ? 1 : 2) + l * block + h;
}

double moe_parameters(double l, double h, double a, double k, double f, double E, double K, double V, bool tied) {
  const double d = h / a;
  const double block = 2 * h + h * (a + 2 * k) * d + a * d * h + K * 3 * h * f + E * h;
  return V * h * (tied ? 1 : 2) + l * block + h;
}

// The embedding, `layers` blocks and the head, without enumerating the blocks or the experts:
// plan time does not grow with the depth or model.experts.
std::int64_t exact_parameters(const model::GptShape& s) {
  return sum(model::embedding_parameter_rows(s), s, logical_elements) +
         Count(s.layers) * block_elements(s, logical_elements).with_experts(all_experts(s)) +
         sum(model::head_parameter_rows(s), s, logical_elements);
}

std::int64_t active_parameters(const model::GptShape& s) {
  if (!model::holds_experts(s)) return exact_parameters(s);
  // Every row but those of the experts K, K + 1, ..., E − 1.
  const Count routed = std::min(s.experts_per_token, s.experts);
  return sum(model::embedding_parameter_rows(s), s, logical_elements) +
         Count(s.layers) * block_elements(s, logical_elements).with_experts(routed) +
         sum(model::head_parameter_rows(s), s, logical_elements);
}

std::int64_t expert_parameters(const model::GptShape& s) {
  if (!model::holds_experts(s)) return 0;
  return block_elements(s, logical_elements).expert;
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
  const auto local = [&](const model::ParameterSpec& p) { return local_elements(p, s.tensor); };
  const auto tied_copy = [&](const model::ParameterSpec& p) { return p.tied_output_copy ? local(p) : Count(0); };
  const std::vector<model::ParameterRow> embedding_rows = model::embedding_parameter_rows(s);
  // The rows an expert-parallel rank holds: every dense row and its E / ep experts (every rank as many).
  const BlockElements block = block_elements(s, local);
  const Count experts_per_block = Count(model::local_experts(s)) * block.expert;
  const Count blocks = Count(s.layers / stages) * (block.dense + experts_per_block);
  const Count embeddings = sum(embedding_rows, s, local);
  const Count head = sum(model::head_parameter_rows(s), s, local);
  StageParameters n;
  n.stages = stages;
  n.experts = Count(s.layers / stages) * experts_per_block;
  n.middle = blocks;
  if (stages == 1) {
    n.first = n.last = embeddings + blocks + head;
  } else {
    n.first = embeddings + blocks;
    // The last stage: ln_f, the output layer (untied: lm_head/weight, among the head's rows) and
    // the tied output layer's copy of the word embedding.
    n.last = blocks + head + sum(embedding_rows, s, tied_copy);
  }
  return n;
}

}  // namespace tptrain::plan
