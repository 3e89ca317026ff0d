#include "src/train/hf_tensors.hpp"

#include <stdexcept>

#include "src/model/model_parameters.hpp"

namespace tptrain::train {

namespace {

// Elements of one row: the product of every dimension but the first.
std::uint64_t row_elements(const std::vector<std::uint64_t>& shape) {
  std::uint64_t n = 1;
  for (std::size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
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

std::vector<HfTensor> hf_tensors(const model::GptShape& shape, HfPieces pieces, const char* table) {
  std::vector<HfTensor> out;
  for (const model::LogicalTensor& t : model::logical_tensors(shape)) {
    std::vector<std::uint64_t> checkpoint_shape;
    for (const auto d : t.shape) checkpoint_shape.push_back(static_cast<std::uint64_t>(d));
    const std::uint64_t all_rows = checkpoint_shape.empty() ? 1 : checkpoint_shape[0];
    const std::vector<HfPiece> parts = pieces(shape, t.name);
    if (parts.empty())
      throw std::logic_error("tptrain: the model tensor " + t.name + " has no Hugging Face name (" + table + ")");
    std::uint64_t row = 0;
    for (const HfPiece& p : parts) {
      HfTensor h;
      h.hf_name = p.hf_name;
      h.checkpoint_name = t.name;
      h.checkpoint_shape = checkpoint_shape;
      h.row_begin = row;
      h.rows = p.rows == 0 ? all_rows : p.rows;
      h.transposed = p.transposed;
      if (h.transposed && (checkpoint_shape.size() != 2 || parts.size() != 1))
        throw std::logic_error("tptrain: " + t.name + " is transposed for Hugging Face but is not one whole matrix (" +
                               table + ")");
      row += h.rows;
      out.push_back(std::move(h));
    }
    if (row != all_rows)
      throw std::logic_error("tptrain: the Hugging Face pieces of " + t.name + " hold " + std::to_string(row) +
                             " of its " + std::to_string(all_rows) + " rows (" + table + ")");
  }
  return out;
}

std::vector<float> to_hf(const HfTensor& t, const std::vector<float>& checkpoint_values) {
  const std::uint64_t width = row_elements(t.checkpoint_shape);
  const auto first = checkpoint_values.begin() + static_cast<std::ptrdiff_t>(t.row_begin * width);
  std::vector<float> rows(first, first + static_cast<std::ptrdiff_t>(t.rows * width));
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
    for (std::uint64_t i = 0; i < t.rows * width; ++i) rows[i] = hf_values[i];
    return;
  }
  for (std::uint64_t c = 0; c < width; ++c)  // [width, rows] -> [rows, width]
    for (std::uint64_t r = 0; r < t.rows; ++r) rows[r * width + c] = hf_values[c * t.rows + r];
}

}  // namespace tptrain::train
