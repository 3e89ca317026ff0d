#include "src/plan/parameter_count.hpp"

#include <stdexcept>

#include "src/model/gpt_model.hpp"

namespace tptrain::plan {

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

double narayanan_parameters(double l, double h, double V, double s) {
  return 12.0 * l * h * h * (1.0 + 13.0 / (12.0 * h) + (V + s) / (12.0 * l * h));
}

std::int64_t exact_parameters(const model::GptShape& s) {
  std::int64_t n = 0;
  for (const model::LogicalTensor& t : model::logical_tensors(s)) {
    std::int64_t size = 1;
    for (const std::int64_t d : t.shape) size *= d;
    n += size;
  }
  return n;
}

std::int64_t local_elements(const std::string& name, const std::vector<std::int64_t>& logical,
                            const model::GptShape& s) {
  const std::int64_t t = s.tensor;
  std::int64_t size = 1;
  for (const std::int64_t d : logical) size *= d;
  if (name == "embedding/word") return std::int64_t(s.local_vocab()) * logical.at(1);  // padded rows
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

std::vector<std::int64_t> stage_parameters(const model::GptShape& s, int stages) {
  if (stages < 1 || s.layers % stages != 0)
    throw std::invalid_argument("tptrain: plan: " + std::to_string(s.layers) + " layers do not split over " +
                                std::to_string(stages) + " pipeline stages");
  const int per_stage = s.layers / stages;
  std::vector<std::int64_t> n(static_cast<std::size_t>(stages), 0);
  const auto add = [&](int stage, std::int64_t elements) { n[static_cast<std::size_t>(stage)] += elements; };
  for (const model::LogicalTensor& t : model::logical_tensors(s)) {
    const std::int64_t local = local_elements(t.name, t.shape, s);
    if (t.name.rfind("embedding/", 0) == 0) {
      add(0, local);
      if (t.name == "embedding/word" && stages > 1) add(stages - 1, local);  // the tied output layer's copy
    } else if (t.name.rfind("ln_f/", 0) == 0) {
      add(stages - 1, local);
    } else {
      // "layers/<i>/...": the stage holding block i.
      const int layer = std::stoi(t.name.substr(7));
      add(layer / per_stage, local);
    }
  }
  return n;
}

}  // namespace tptrain::plan
