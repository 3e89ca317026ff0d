// The Hugging Face architectures tptrain exports to and imports from, as data (docs/checkpoints.md,
// "Hugging Face export and import"). Each is a block preset (src/model/spec/block_spec.hpp) under one of the
// descriptor rows' naming families (model::ParameterRow::hf) with one of its config.json families;
// adding an architecture Hugging Face knows is a row of hf_presets() (src/checkpoint/hf_presets.cpp).
#pragma once

#include <string>
#include <vector>

#include "src/model/spec/gpt_shape.hpp"
#include "src/model/spec/parameter_spec.hpp"

namespace tptrain::checkpoint {

// Whose config.json fields: GPT2Config's (io/hf_gpt2_config.hpp), LlamaConfig's
// (io/hf_llama_config.hpp; Qwen2Config has the same ones for what tptrain computes),
// MixtralConfig's (LlamaConfig's for attention, norms and positions, plus the mixture of experts:
// io/hf_llama_config.hpp too) or DeepseekV3Config's (io/hf_deepseek_config.hpp).
enum class HfConfigFamily { gpt2, llama, mixtral, deepseek };

struct HfPreset {
  const char* architecture;  // config.json's architectures[0], "LlamaForCausalLM"
  const char* model_type;    // "llama"
  const char* block_preset;  // the block specification it computes (model.architecture), "llama"
  model::HfNaming naming;    // the rows' Hugging Face names
  HfConfigFamily config;
  // The base model's prefix of every key but lm_head's ("transformer.", "model."): Hugging Face's
  // own files of a base model leave it out, save_pretrained writes it; import takes both.
  const char* prefix;
  // Keys (after the prefix) of buffers a file may hold besides the weights, which import skips
  // (an ECMAScript regex): GPT-2's causal masks, old Llama files' rotary inv_freq.
  const char* ignored_buffers;
};

const std::vector<HfPreset>& hf_presets();

// The preset whose block preset the shape's specification is: the same norm, attention, MLP,
// positions and biases (key/value heads, the tied head, ε and θ are config fields). Throws std::runtime_error
// naming the shape's choices and the presets when none is.
const HfPreset& hf_preset_of(const model::GptShape& shape);

}  // namespace tptrain::checkpoint
