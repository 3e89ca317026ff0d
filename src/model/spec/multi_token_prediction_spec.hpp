// Multi-token prediction's parameters (model.mtp_depth = D; DeepSeek-V3 §2.2, the layout of its
// published checkpoint): module k (0-based) is layer L + k of the checkpoint, "layers/<L + k>/",
// after the L blocks of the model: its norms of the embedding and of the hidden state (enorm,
// hnorm: the model's norm kind), the projection of their concatenation [enorm(e); hnorm(h)]
// (eh_proj, [H, 2H]), one block of the model's last block's shape, and the norm before the shared
// output layer (final_norm, Hugging Face's shared_head.norm). Its forward and backward:
// src/model/multi_token_prediction.hpp. No Kokkos, no MPI: the checkpoint and the planner read it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "src/model/spec/block_descriptor.hpp"

namespace tptrain::model {

// Hugging Face names as DeepSeek's checkpoint holds them (model.layers.<L + k>.enorm, ...).
inline constexpr SublayerPlace kMtpEmbeddingNormPlace{SublayerSlot::norm, "enorm", "deepseek=model.layers.{i}.enorm"};
inline constexpr SublayerPlace kMtpHiddenNormPlace{SublayerSlot::norm, "hnorm", "deepseek=model.layers.{i}.hnorm"};
inline constexpr SublayerPlace kMtpFinalNormPlace{SublayerSlot::norm, "final_norm",
                                                  "deepseek=model.layers.{i}.shared_head.norm"};
// Replicated over the tensor ranks (each computes the module's rows whole: the module runs
// without sequence parallelism), as the latent attention's down-projections are.
inline constexpr ParameterRow kMtpProjection{
    "eh_proj/weight", {ParameterDim::hidden, ParameterDim::hidden2}, TensorSplit::replicated, 1, false, true,
    {Init::normal, 0.02f}, false, {ParameterDim::none, ParameterDim::none, ParameterDim::none}, always,
    "deepseek=model.layers.{i}.eh_proj.weight"};

// The checkpoint layer of module k.
inline int mtp_layer(const ModelShape& s, int k) { return s.layers + k; }
inline std::string mtp_prefix(const ModelShape& s, int k) { return "layers/" + std::to_string(mtp_layer(s, k)) + "/"; }

// A module's own rows (without its block's), named after its layer prefix: before the block
// (enorm, hnorm, eh_proj), and after it (final_norm).
inline std::vector<ParameterRow> mtp_input_rows(const ModelShape& s) {
  std::vector<ParameterRow> rows = kind_parameter_rows(s, kMtpEmbeddingNormPlace);
  for (const ParameterRow& r : kind_parameter_rows(s, kMtpHiddenNormPlace)) rows.push_back(r);
  rows.push_back(kMtpProjection);
  return rows;
}
inline std::vector<ParameterRow> mtp_output_rows(const ModelShape& s) { return kind_parameter_rows(s, kMtpFinalNormPlace); }

// Module k's parameters in checkpoint order, each of shape s.
inline std::vector<ParameterSpec> mtp_parameters(const GptShape& s, int k) {
  std::vector<ParameterSpec> out;
  const std::string prefix = mtp_prefix(s, k);
  for (const ParameterRow& r : mtp_input_rows(s)) out.push_back(spec_of(r, s, prefix));
  for (const ParameterSpec& p : block_parameters(s, mtp_layer(s, k))) out.push_back(p);
  for (const ParameterRow& r : mtp_output_rows(s)) out.push_back(spec_of(r, s, prefix));
  return out;
}

// The row of a module's parameter `name` ("layers/<L + k>/eh_proj/weight", or of its block), or
// nothing (not a module's).
inline std::optional<ParameterRow> mtp_parameter_row(const GptShape& s, const std::string& name) {
  const int layer = layer_of(name);
  if (layer < s.layers || layer >= s.layers + s.mtp_depth) return std::nullopt;
  const std::string row = name.substr(name.find('/', 7) + 1);
  std::vector<ParameterRow> rows = mtp_input_rows(s);
  for (const ParameterRow& r : mtp_output_rows(s)) rows.push_back(r);
  for (const ParameterRow& r : block_parameter_rows(block_shape(s, layer))) rows.push_back(r);
  for (const ParameterRow& r : rows)
    if (row == r.name) return r;
  return std::nullopt;
}

}  // namespace tptrain::model
