#include "src/plan/parameter_count.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

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

namespace {
// The embedding, `layers` blocks (of each of their shapes, model::block_shapes; a dense block has
// no expert rows) with `experts` experts each, the head, and the multi-token prediction modules
// (a block of the last one's shape each, with their norms and projection), without enumerating
// the blocks or the experts: plan time does not grow with the depth or model.experts.
Count logical_model_elements(const model::GptShape& s, Count experts) {
  Count blocks = 0;
  for (const model::BlockShapeCount& b : model::block_shapes(s))
    blocks += Count(b.blocks) * block_elements(b.shape, logical_elements).with_experts(experts);
  const model::GptShape last = model::block_shape(s, s.layers - 1);
  const Count module = block_elements(last, logical_elements).with_experts(experts) +
                       sum(model::mtp_input_rows(s), s, logical_elements) +
                       sum(model::mtp_output_rows(s), s, logical_elements);
  return sum(model::embedding_parameter_rows(s), s, logical_elements) + blocks +
         sum(model::head_parameter_rows(s), s, logical_elements) + Count(s.mtp_depth) * module;
}
}  // namespace

std::int64_t exact_parameters(const model::GptShape& s) { return logical_model_elements(s, all_experts(s)); }

std::int64_t active_parameters(const model::GptShape& s) {
  // Every row but those of the experts K, K + 1, ..., E − 1.
  return logical_model_elements(s, std::min<Count>(Count(s.experts_per_token), all_experts(s)));
}

std::int64_t expert_parameters(const model::GptShape& s) {
  if (!model::holds_experts(s)) return 0;
  return block_elements(s, logical_elements).expert;
}

std::int64_t StageParameters::of(int stage) const { return held.at(checked(stage)); }
std::int64_t StageParameters::experts_of(int stage) const { return experts.at(checked(stage)); }
const std::vector<model::BucketExtent>& StageParameters::buckets_of(int stage) const {
  return buckets.at(checked(stage));
}
std::size_t StageParameters::checked(int stage) const {
  if (stage < 0 || stage >= stages())
    throw std::out_of_range("tptrain: plan: no pipeline stage " + std::to_string(stage) + " of " +
                            std::to_string(stages()));
  return static_cast<std::size_t>(stage);
}
std::int64_t StageParameters::most_experts() const {
  return experts.empty() ? 0 : *std::max_element(experts.begin(), experts.end());
}

namespace {

// What stage_buckets counts of shape s that is the same on every stage, counted once for all of
// them (the rows' specs are string work; a search asks for thousands of layouts' stages).
struct ShapeElements {
  Count dense_per_block = 0;  // a dense block's (DeepSeek-V3's first blocks') rows and its local experts
  Count mixture_dense = 0;    // a mixture block's dense rows
  Count expert_part = 0;      // a mixture block's local experts
  Count head = 0;             // ln_f and an untied lm_head
  Count tied_copies = 0;      // the embedding's rows copied to the last stage (the tied output layer)
  Count untied_word = 0;      // the untied word embedding (multi-token prediction's copy)
  Count embedding = 0;        // the first stage's embedding rows
  Count mtp_own = 0;          // a prediction module's norms and projection
};

ShapeElements shape_elements(const model::GptShape& s) {
  const auto local = [&](const model::ParameterSpec& p) { return local_elements(p, s.tensor); };
  const auto tied_copy = [&](const model::ParameterSpec& p) { return p.tied_output_copy ? local(p) : Count(0); };
  const std::vector<model::ParameterRow> embedding_rows = model::embedding_parameter_rows(s);
  // The rows an expert-parallel rank holds of a block of each shape: every dense row and its
  // E / ep experts (every rank as many).
  const model::GptShape dense_block = model::block_shape(s, 0), mixture_block = model::block_shape(s, s.layers - 1);
  const BlockElements dense = block_elements(dense_block, local), mixture = block_elements(mixture_block, local);
  ShapeElements e;
  e.dense_per_block = dense.with_experts(model::local_experts(dense_block));
  e.mixture_dense = mixture.dense;
  e.expert_part = Count(model::local_experts(mixture_block)) * mixture.expert;
  e.head = sum(model::head_parameter_rows(s), s, local);
  e.tied_copies = sum(embedding_rows, s, tied_copy);
  for (const model::ParameterRow& r : embedding_rows)
    if (std::string(r.name) == "embedding/word") e.untied_word += local(model::spec_of(r, s));
  e.embedding = sum(embedding_rows, s, local);
  if (s.mtp_depth > 0) e.mtp_own = sum(model::mtp_input_rows(s), s, local) + sum(model::mtp_output_rows(s), s, local);
  return e;
}

void check_stage(const model::GptShape& s, int stages, int virtual_stages, int stage) {
  const int chunks = stages * std::max(1, virtual_stages);
  if (stages < 1 || s.layers % chunks != 0)
    throw std::invalid_argument("tptrain: plan: " + std::to_string(s.layers) + " layers do not split over " +
                                std::to_string(stages) + " pipeline stages of " + std::to_string(chunks / stages) +
                                " model chunks");
  if (stage < 0 || stage >= stages)
    throw std::out_of_range("tptrain: plan: no pipeline stage " + std::to_string(stage) + " of " +
                            std::to_string(stages));
}

std::vector<model::BucketExtent> stage_buckets(const model::GptShape& s, const ShapeElements& e, int stages,
                                               int virtual_stages, int stage) {
  check_stage(s, stages, virtual_stages, stage);
  const int chunks = stages * std::max(1, virtual_stages);
  // The dense blocks of DeepSeek-V3 (block_shape) lead the model: stage r holds chunks r, r + p,
  // ... (schedule/), and chunk c the dense ones of [c·L/chunks, (c+1)·L/chunks).
  const int per_chunk = s.layers / chunks;
  const bool first = stage == 0, last = stage == stages - 1, mtp = last && s.mtp_depth > 0;
  int dense_blocks = 0;
  for (int c = stage; c < chunks; c += stages) dense_blocks += model::dense_blocks_in(s, c * per_chunk, per_chunk);
  const int mixture_blocks = s.layers / stages - dense_blocks;
  // As GptModel::make_buckets, in backward order, one step of the backward after the other; a
  // stage with experts (its blocks' or its prediction modules') gives every block an expert bucket.
  const bool experts = e.expert_part > 0 && (mixture_blocks > 0 || mtp);
  const bool head_writes_word = s.tie_embeddings || s.mtp_depth > 0;
  std::vector<model::BucketExtent> out;
  int step = 0;
  const auto add = [&](Count elements, bool expert, bool keeps_whole, Count count = 1) {
    model::BucketExtent b;
    b.elements = elements;
    b.expert = expert;
    b.keeps_whole = keeps_whole;
    b.step = step;
    b.count = count;
    out.push_back(b);
  };
  if (last) {
    // ln_f and an untied lm_head; the word embedding's copy off the first stage (the tied output
    // layer's, or multi-token prediction's embedding's).
    Count head = e.head;
    if (stages > 1) head += e.tied_copies;
    if (stages > 1 && mtp && !s.tie_embeddings) head += e.untied_word;
    add(head, false, stages > 1 && head_writes_word);
    // Multi-token prediction's modules (model.mtp_depth): a block of the last one's shape each,
    // with its norms and projection.
    if (mtp) {
      add(Count(s.mtp_depth) * (e.mixture_dense + e.mtp_own), false, false);
      if (experts) add(Count(s.mtp_depth) * e.expert_part, true, false);
    }
    ++step;
  }
  // The blocks of each shape, one entry for all of them (plan time does not grow with the layers);
  // their order changes no count.
  for (const auto& [blocks, dense_part, expert_elements] :
       {std::tuple{dense_blocks, e.dense_per_block, Count(0)}, std::tuple{mixture_blocks, e.mixture_dense, e.expert_part}}) {
    if (blocks == 0) continue;
    add(dense_part, false, false, blocks);
    if (experts) add(expert_elements, true, false, blocks);
    ++step;
  }
  if (first) add(e.embedding, false, head_writes_word);
  return out;
}

}  // namespace

std::vector<model::BucketExtent> stage_buckets(const model::GptShape& s, int stages, int virtual_stages, int stage) {
  check_stage(s, stages, virtual_stages, stage);
  return stage_buckets(s, shape_elements(s), stages, virtual_stages, stage);
}

StageParameters stage_parameters(const model::GptShape& s, int stages, int virtual_stages) {
  StageParameters n;
  check_stage(s, stages, virtual_stages, 0);
  const ShapeElements e = shape_elements(s);
  for (int stage = 0; stage < stages || stage == 0; ++stage) {
    Count held = 0, experts = 0;
    std::vector<model::BucketExtent> buckets = stage_buckets(s, e, stages, virtual_stages, stage);
    for (const model::BucketExtent& b : buckets) {
      held += b.elements * Count(b.count);
      if (b.expert) experts += b.elements * Count(b.count);
    }
    n.held.push_back(held);
    n.experts.push_back(experts);
    n.buckets.push_back(std::move(buckets));
  }
  return n;
}

}  // namespace tptrain::plan
