#include "src/checkpoint/hf_tensors.hpp"

#include <algorithm>
#include <optional>
#include <stdexcept>

#include "src/model/spec/model_parameters.hpp"

namespace tptrain::checkpoint {

namespace {

// Elements of one row: the product of every dimension but the first.
std::uint64_t row_elements(const std::vector<std::uint64_t>& shape) {
  std::uint64_t n = 1;
  for (std::size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

// The names of a pattern ("model.layers.{i}.self_attn.q_proj.weight|..."): one per '|' piece,
// "{i}" the layer.
std::vector<std::string> hf_names(const std::string& pattern, int layer) {
  std::vector<std::string> names;
  for (std::size_t at = 0;;) {
    const std::size_t bar = pattern.find('|', at);
    std::string name = pattern.substr(at, bar == std::string::npos ? std::string::npos : bar - at);
    if (const std::size_t i = name.find("{i}"); i != std::string::npos) name.replace(i, 3, std::to_string(layer));
    names.push_back(std::move(name));
    if (bar == std::string::npos) return names;
    at = bar + 1;
  }
}

// HF's row of the tensor's row r (both counted from row_begin): r itself unless interleaved.
std::uint64_t hf_row(const HfTensor& t, std::uint64_t r) {
  const HfTensor::InterleavedRows& in = t.interleaved;
  if (in.period == 0) return r;
  const std::uint64_t first = r - r % in.period, i = r % in.period;
  if (i < in.offset || i >= in.offset + in.width) return r;
  const std::uint64_t j = i - in.offset, half = in.width / 2;
  return first + in.offset + (j < half ? 2 * j : 2 * (j - half) + 1);
}

}  // namespace

std::vector<std::uint64_t> HfTensor::hf_shape() const {
  std::vector<std::uint64_t> shape = checkpoint_shape;
  if (!shape.empty()) shape[0] = rows;
  if (transposed) return {shape.at(1), shape.at(0)};
  return shape;
}

std::uint64_t HfTensor::elements() const { return rows * row_elements(checkpoint_shape); }

BlockName split_block_name(const std::string& name) {
  if (name.rfind("layers/", 0) != 0) return {-1, name};
  const std::size_t slash = name.find('/', 7);
  if (slash == std::string::npos) return {-1, name};
  return {std::stoi(name.substr(7, slash - 7)), name.substr(slash + 1)};
}

std::vector<HfTensor> hf_tensors(const model::GptShape& shape, model::HfNaming naming) {
  std::vector<HfTensor> out;
  for (const model::LogicalTensor& t : model::logical_tensors(shape)) {
    std::vector<std::uint64_t> checkpoint_shape;
    for (const auto d : t.shape) checkpoint_shape.push_back(static_cast<std::uint64_t>(d));
    const std::optional<model::ParameterRow> row = model::model_parameter_row(shape, t.name);
    const model::HfName hf = row ? model::hf_name(*row, naming) : model::HfName{};
    const char* pattern = hf.pattern;
    if (pattern == nullptr)
      throw std::logic_error("tptrain: the model tensor " + t.name +
                             " has no Hugging Face name in this family (its row's hf, src/model/spec/block_descriptor.hpp)");
    const std::vector<std::string> names = hf_names(pattern, split_block_name(t.name).layer);
    const bool transposed = hf.transposed;
    if (transposed && (checkpoint_shape.size() != 2 || names.size() != 1))
      throw std::logic_error("tptrain: " + t.name + " is transposed for Hugging Face but is not one whole matrix");
    if (names.size() != 1 && names.size() != static_cast<std::size_t>(row->blocks))
      throw std::logic_error("tptrain: " + t.name + " has " + std::to_string(row->blocks) + " blocks but " +
                             std::to_string(names.size()) + " Hugging Face names");
    // A stacked row's blocks: their extents when they differ (Q, K, V), else equal parts.
    const model::ParameterSpec spec = model::spec_of(*row, shape);
    std::uint64_t begin = 0;
    for (std::size_t b = 0; b < names.size(); ++b) {
      HfTensor h;
      h.hf_name = names[b];
      h.checkpoint_name = t.name;
      h.checkpoint_shape = checkpoint_shape;
      h.row_begin = begin;
      h.rows = names.size() == 1                ? checkpoint_shape.at(0)
               : spec.block_extents.empty() ? checkpoint_shape.at(0) / names.size()
                                            : static_cast<std::uint64_t>(spec.block_extents[b]);
      h.transposed = transposed;
      begin += h.rows;
      out.push_back(std::move(h));
    }
  }
  return out;
}

std::vector<float> to_hf(const HfTensor& t, const std::vector<float>& checkpoint_values) {
  const std::uint64_t width = row_elements(t.checkpoint_shape);
  const float* first = checkpoint_values.data() + t.row_begin * width;
  std::vector<float> rows(t.rows * width);
  for (std::uint64_t r = 0; r < t.rows; ++r)
    std::copy(first + r * width, first + (r + 1) * width, rows.begin() + static_cast<std::ptrdiff_t>(hf_row(t, r) * width));
  if (!t.transposed) return rows;
  std::vector<float> y(rows.size());  // [rows, width] -> [width, rows]
  for (std::uint64_t r = 0; r < t.rows; ++r)
    for (std::uint64_t c = 0; c < width; ++c) y[c * t.rows + r] = rows[r * width + c];
  return y;
}

void from_hf(const HfTensor& t, const std::vector<float>& hf_values, std::vector<float>& checkpoint_values) {
  const std::uint64_t width = row_elements(t.checkpoint_shape);
  float* rows = checkpoint_values.data() + t.row_begin * width;
  if (!t.transposed) {
    for (std::uint64_t r = 0; r < t.rows; ++r)
      std::copy(hf_values.begin() + static_cast<std::ptrdiff_t>(hf_row(t, r) * width),
                hf_values.begin() + static_cast<std::ptrdiff_t>((hf_row(t, r) + 1) * width), rows + r * width);
    return;
  }
  for (std::uint64_t c = 0; c < width; ++c)  // [width, rows] -> [rows, width]
    for (std::uint64_t r = 0; r < t.rows; ++r) rows[r * width + c] = hf_values[c * t.rows + hf_row(t, r)];
}

}  // namespace tptrain::checkpoint
