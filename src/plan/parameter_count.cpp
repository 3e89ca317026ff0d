#include "src/plan/parameter_count.hpp"

#include <stdexcept>

#include "src/model/model_parameters.hpp"

namespace tptrain::plan {

namespace {

std::int64_t logical_elements(const model::ParameterSpec& p) {
  std::int64_t n = 1;
  for (const std::int64_t d : p.logical_shape()) n *= d;
  return n;
}

// The elements of every table row for shape s, counted by `count`.
template <std::size_t rows, class Count>
std::int64_t sum(const model::ParameterRow (&table)[rows], const model::GptShape& s, Count count) {
  std::int64_t n = 0;
  for (const model::ParameterRow& r : table) n += count(model::spec_of(r, s));
  return n;
}

}  // namespace

double narayanan_parameters(double l, double h, double V, double s) {
  return 12.0 * l * h * h * (1.0 + 13.0 / (12.0 * h) + (V + s) / (12.0 * l * h));
}

// The embedding, `layers` blocks and the head, without enumerating the blocks: plan time does
// not grow with the depth.
std::int64_t exact_parameters(const model::GptShape& s) {
  return sum(model::kEmbeddingParameters, s, logical_elements) +
         std::int64_t(s.layers) * sum(model::kBlockParameters, s, logical_elements) +
         sum(model::kHeadParameters, s, logical_elements);
}

std::vector<std::int64_t> stage_parameters(const model::GptShape& s, int stages) {
  if (stages < 1 || s.layers % stages != 0)
    throw std::invalid_argument("tptrain: plan: " + std::to_string(s.layers) + " layers do not split over " +
                                std::to_string(stages) + " pipeline stages");
  const auto local = [&](const model::ParameterSpec& p) { return p.local_elements(s.tensor); };
  const auto tied_copy = [&](const model::ParameterSpec& p) { return p.tied_output_copy ? local(p) : 0; };
  const std::int64_t blocks = std::int64_t(s.layers / stages) * sum(model::kBlockParameters, s, local);
  std::vector<std::int64_t> n(static_cast<std::size_t>(stages), blocks);
  n.front() += sum(model::kEmbeddingParameters, s, local);
  n.back() += sum(model::kHeadParameters, s, local);
  if (stages > 1) n.back() += sum(model::kEmbeddingParameters, s, tied_copy);  // the tied output layer's copy
  return n;
}

}  // namespace tptrain::plan
