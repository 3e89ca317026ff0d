// A model tensor described as plain data: the rows of the descriptor tables
// (src/model/spec/block_descriptor.hpp, src/model/spec/model_parameters.hpp) and what a row becomes for one
// shape (ParameterSpec), from which the layers make their Parameters, the checkpoint lists its
// datasets and the planner counts a rank's elements. No Kokkos, no MPI: the planner reads it too.
#pragma once

#include <cmath>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "src/model/spec/gpt_shape.hpp"

namespace tptrain::model {

// A logical dimension of a parameter, by symbol, so that one table gives both the sizes of a
// shape and the formulas the docs print.
enum class ParameterDim {
  none,    // (the unused second dimension of a vector)
  hidden,  // H
  hidden2, // 2H: multi-token prediction's projection of [embedding; hidden state]
  qkv,     // (nh + 2·nkv)·d: Q, K and V stacked (3H without grouped-query attention)
  kv,      // nkv·d: the K (or V) rows of the QKV weight
  ffn,     // F
  ffn2,    // 2F: SwiGLU's gate and up stacked
  vocab,   // V, allocated padded to a multiple of vocab_pad_multiple * tensor (GptShape::padded_vocab)
  seq,     // S
  experts, // E: the router's rows (model.mlp = moe)
  expert_ffn,   // F_e: a routed expert's width (model.moe_ffn_hidden)
  expert_ffn2,  // 2F_e: its gate and up stacked
  shared_ffn,   // n_s·F_e: the shared experts' width (model.moe_shared_experts)
  shared_ffn2,  // 2n_s·F_e
  // Multi-head latent attention's (model.attention = "mla"), d_q = d_nope + d_R:
  q_lora,     // r_q: the queries' latent (model.q_lora_rank)
  kv_lora,    // r_kv: the keys' and values' latent (model.kv_lora_rank)
  kv_latent,  // r_kv + d_R: the latent and the shared rotary key, projected together
  mla_q,      // nh·d_q: every head's query
  mla_kv,     // nh·(d_nope + d_v): every head's key (without its rotary part) and value
  mla_o,      // nh·d_v: every head's value, the output projection's input
};

// How a tensor is split over the tensor-parallel group (Megatron-LM section 3).
enum class TensorSplit {
  replicated,  // every rank holds all of it
  column,      // dimension 0 (a weight's output features, a bias's elements, vocabulary rows)
  row,         // dimension 1 (a weight's input features)
};

// The initial value of every element (docs/design.md, "Initialisation").
struct Init {
  enum Kind { normal, residual_normal, constant };
  Kind kind = constant;
  float value = 0.0f;  // normal: the standard deviation; residual_normal: the same before ÷ √(2L); constant: it
};

// Which block specifications hold a row (src/model/spec/block_spec.hpp): every flag set must hold.
enum Needs : unsigned {
  always = 0,
  needs_qkv_bias = 1u << 0,     // model.qkv_bias
  needs_linear_bias = 1u << 1,  // model.linear_bias: the other projections' biases
  needs_untied = 1u << 2,       // model.tie_embeddings = false
  needs_grouped = 1u << 3,      // kv_heads < heads (buffers)
  needs_flash = 1u << 4,        // training.attention = flash (buffers)
  needs_batched = 1u << 5,      // training.attention = batched (buffers)
  needs_context = 1u << 6,      // parallel.context > 1: ring attention (buffers)
  // A router that chooses with a per-expert bias (DeepSeek-V3): sigmoid scores, or the bias's
  // balancing on (training.moe_bias_update_rate > 0).
  needs_expert_bias = 1u << 7,
  needs_shared_experts = 1u << 8,  // model.moe_shared_experts > 0
  needs_q_lora = 1u << 9,          // model.q_lora_rank > 0: queries through a latent (MLA)
  needs_direct_q = 1u << 10,       // model.q_lora_rank = 0: queries projected at once (MLA)
  needs_split_sequence = 1u << 11, // sequence parallelism on (buffers)
};
// Whether shape s's router chooses with a per-expert bias (needs_expert_bias).
inline bool has_expert_bias(const GptShape& s) {
  return s.moe_score_function == "sigmoid" || s.moe_bias_update_rate > 0;
}
inline bool holds(unsigned needs, const GptShape& s) {
  const unsigned have = (s.qkv_bias ? needs_qkv_bias : 0u) | (s.linear_bias ? needs_linear_bias : 0u) |
                        (s.tie_embeddings ? 0u : needs_untied) | (s.kv_head_count() != s.heads ? needs_grouped : 0u) |
                        (s.flash_attention ? needs_flash : needs_batched) | (s.context > 1 ? needs_context : 0u) |
                        (has_expert_bias(s) ? needs_expert_bias : 0u) |
                        (s.moe_shared_experts > 0 ? needs_shared_experts : 0u) |
                        (s.q_lora_rank > 0 ? needs_q_lora : needs_direct_q) |
                        (s.splits_sequence() ? needs_split_sequence : 0u);
  return (needs & have) == needs;
}

// The choices `needs` asks for, as deck settings ("qkv_bias and kv_heads < heads"); "" for always.
// The docs' tables and messages print it.
inline std::string needs_text(unsigned needs) {
  static const std::pair<unsigned, const char*> words[] = {
      {needs_qkv_bias, "qkv_bias"},              {needs_linear_bias, "linear_bias"},
      {needs_untied, "tie_embeddings = false"},  {needs_grouped, "kv_heads < heads"},
      {needs_flash, "attention = \"flash\""},    {needs_batched, "attention = \"batched\""},
      {needs_context, "parallel.context > 1"},
      {needs_expert_bias, "(moe_score_function = \"sigmoid\" or training.moe_bias_update_rate > 0)"},
      {needs_shared_experts, "moe_shared_experts > 0"},
      {needs_q_lora, "q_lora_rank > 0"},        {needs_direct_q, "q_lora_rank = 0"},
      {needs_split_sequence, "sequence_parallel"},
  };
  std::string out;
  for (const auto& [flag, word] : words)
    if ((needs & flag) != 0 && out.find(word) == std::string::npos) out += (out.empty() ? "" : " and ") + std::string(word);
  return out;
}

// A row's Hugging Face tensor names are one text of entries "family=pattern", separated by
// spaces, for each naming family the Hugging Face presets use (src/checkpoint/hf_presets.cpp:
// GPT2LMHeadModel's "gpt2", LlamaForCausalLM's "llama", DeepseekV3ForCausalLM's "deepseek") that
// has the tensor: a family without an entry has none (the export refuses the model), and adding a
// family is adding entries.
// "family^=pattern": Hugging Face holds it [in, out] (GPT-2's Conv1D). In a pattern "{i}" stands
// for the layer, "{e}" for an expert, "{module}" for the module of a kind's place (a norm's:
// sublayer_kind.hpp, placed_row), and '|' separates the tensors Hugging Face keeps apart of a
// row of stacked blocks (q|k|v, gate|up).
enum class HfNaming { gpt2, llama, deepseek };
inline constexpr HfNaming kHfNamings[] = {HfNaming::gpt2, HfNaming::llama, HfNaming::deepseek};
inline const char* hf_naming_name(HfNaming n) {
  switch (n) {
    case HfNaming::gpt2: return "gpt2";
    case HfNaming::llama: return "llama";
    case HfNaming::deepseek: break;
  }
  return "deepseek";
}
struct HfName {
  const char* pattern = nullptr;  // nullptr: the family has no such tensor
  bool transposed = false;
};

// One row of a descriptor table.
struct ParameterRow {
  const char* name;           // its checkpoint path under /model; a block's row: under layers/<i>/
  ParameterDim shape[2];      // logical, [out, in] for a weight; a vector leaves the second none
  TensorSplit split;
  int blocks;                 // a column split of stacked blocks splits each block (QKV: 3, gate|up: 2)
  bool sequence_parallel_sum; // with sequence parallelism each rank holds the gradient of its own tokens,
                              // summed over the group (LayerNorms, row-parallel biases)
  bool weight_decay;          // AdamW decays matrices, not biases or LayerNorms
  Init init;
  // The last pipeline stage holds a copy too (the output layer tied to the word embedding), not
  // written to checkpoints: it has the same name, hence the same initial values.
  bool tied_output_copy = false;
  // The blocks' logical extents along the split dimension when they differ (llama's QKV with
  // grouped-query attention: Q, K, V); none: `blocks` equal blocks.
  ParameterDim block_dims[3] = {ParameterDim::none, ParameterDim::none, ParameterDim::none};
  unsigned needs = always;             // the specifications that hold it (Needs)
  const char* hf = "";                // Hugging Face names by naming family (above)
  // A row of each expert of a mixture: "{e}" in its name (and Hugging Face names) stands for the
  // expert, 0 .. E − 1 (block_parameter_rows expands it, expert by expert).
  bool per_expert = false;
};

// A name expanded from a row's pattern, kept for the program's life (a ParameterRow holds C
// strings): one copy per distinct name, whatever the number of models built.
inline const char* interned_name(const std::string& name) {
  static std::mutex mutex;
  static std::set<std::string> names;
  const std::lock_guard<std::mutex> lock(mutex);
  return names.insert(name).first->c_str();
}
// `text` with every `from` replaced by `to`.
inline std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  return text;
}
// Row r (per_expert) of expert e: "{e}" replaced in its name and Hugging Face names.
inline ParameterRow expert_row(const ParameterRow& r, int e) {
  const auto expand = [e](const char* pattern) -> const char* {
    return pattern == nullptr ? nullptr : interned_name(replace_all(pattern, "{e}", std::to_string(e)));
  };
  ParameterRow out = r;
  out.name = expand(r.name);
  out.hf = expand(r.hf);
  return out;
}

// The entries "family=pattern" of a Hugging Face names text, and family's entry of it.
inline std::vector<std::string> hf_entries(const char* names) {
  std::vector<std::string> out;
  const std::string text = names == nullptr ? "" : names;
  for (std::size_t at = 0; at < text.size();) {
    std::size_t end = text.find(' ', at);
    if (end == std::string::npos) end = text.size();
    if (end > at) out.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  return out;
}
inline HfName hf_entry(const char* names, const std::string& family) {
  for (const std::string& entry : hf_entries(names)) {
    const std::size_t eq = entry.find('=');
    if (eq == std::string::npos) continue;
    const bool transposed = eq > 0 && entry[eq - 1] == '^';
    if (entry.substr(0, transposed ? eq - 1 : eq) == family) return {interned_name(entry.substr(eq + 1)), transposed};
  }
  return {};
}

// Row r's Hugging Face name in family n (its entry of r.hf).
inline HfName hf_name(const ParameterRow& r, HfNaming n) { return hf_entry(r.hf, hf_naming_name(n)); }

// A row for one shape: everything a layer needs to make the Parameter.
struct ParameterSpec {
  std::string name;                   // checkpoint path under /model
  std::vector<std::int64_t> shape;    // allocated logical shape (the vocabulary padded)
  std::int64_t saved_rows = 0;        // rows that exist logically, and in checkpoints (< shape[0] when padded)
  TensorSplit split = TensorSplit::replicated;
  int blocks = 1;
  std::vector<std::int64_t> block_extents;  // logical extent of each block along the split; empty: equal blocks
  bool sequence_parallel_gradient = false;  // the row's sequence_parallel_sum, when the shape splits sequences
  bool weight_decay = false;
  float init_std = 0.0f;  // 0: the constant init_const
  float init_const = 0.0f;
  bool tied_output_copy = false;

  int split_dim() const { return split == TensorSplit::replicated ? -1 : split == TensorSplit::column ? 0 : 1; }
  // The shape of the checkpoint's dataset: shape with saved_rows rows.
  std::vector<std::int64_t> logical_shape() const {
    std::vector<std::int64_t> s = shape;
    s[0] = saved_rows;
    return s;
  }
  // Elements one of `tensor` ranks allocates.
  std::int64_t local_elements(int tensor) const {
    std::int64_t n = 1;
    for (const std::int64_t d : shape) n *= d;
    return split == TensorSplit::replicated ? n : n / tensor;
  }
};

inline std::int64_t extent(ParameterDim d, const GptShape& s) {
  switch (d) {
    case ParameterDim::hidden: return s.hidden;
    case ParameterDim::hidden2: return 2 * std::int64_t(s.hidden);
    case ParameterDim::qkv: return s.qkv_width();
    case ParameterDim::kv: return s.kv_width();
    case ParameterDim::ffn: return s.ffn_hidden;
    case ParameterDim::ffn2: return 2 * std::int64_t(s.ffn_hidden);
    case ParameterDim::vocab: return s.padded_vocab();
    case ParameterDim::seq: return s.seq_length;
    case ParameterDim::experts: return s.experts;
    case ParameterDim::expert_ffn: return s.expert_ffn();
    case ParameterDim::expert_ffn2: return 2 * std::int64_t(s.expert_ffn());
    case ParameterDim::shared_ffn: return s.shared_ffn();
    case ParameterDim::shared_ffn2: return 2 * s.shared_ffn();
    case ParameterDim::q_lora: return s.q_lora_rank;
    case ParameterDim::kv_lora: return s.kv_lora_rank;
    case ParameterDim::kv_latent: return std::int64_t(s.kv_lora_rank) + s.qk_rope_head_dim;
    case ParameterDim::mla_q: return std::int64_t(s.heads) * s.qk_head_dim();
    case ParameterDim::mla_kv: return std::int64_t(s.heads) * (s.qk_nope_head_dim + s.v_head_dim);
    case ParameterDim::mla_o: return std::int64_t(s.heads) * s.v_head_dim;
    case ParameterDim::none: break;
  }
  return 1;
}

// Row `r` for shape `s`, named `prefix` + its name.
inline ParameterSpec spec_of(const ParameterRow& r, const GptShape& s, const std::string& prefix = "") {
  ParameterSpec p;
  p.name = prefix + r.name;
  for (const ParameterDim d : r.shape)
    if (d != ParameterDim::none) p.shape.push_back(extent(d, s));
  p.saved_rows = r.shape[0] == ParameterDim::vocab ? s.vocab_size : p.shape[0];
  p.split = r.split;
  p.blocks = r.blocks;
  if (r.block_dims[0] != ParameterDim::none)
    for (int b = 0; b < r.blocks; ++b) p.block_extents.push_back(extent(r.block_dims[b], s));
  p.sequence_parallel_gradient = r.sequence_parallel_sum && s.splits_sequence();
  p.weight_decay = r.weight_decay;
  // In float, as GPT-2's recipe was always computed here: the same bits as before the table.
  if (r.init.kind == Init::normal) p.init_std = r.init.value;
  if (r.init.kind == Init::residual_normal)
    p.init_std = s.scaled_residual_init ? r.init.value / std::sqrt(2.0f * s.layers) : r.init.value;
  if (r.init.kind == Init::constant) p.init_const = r.init.value;
  p.tied_output_copy = r.tied_output_copy;
  return p;
}

}  // namespace tptrain::model
