#include "src/checkpoint/hf_presets.hpp"

#include <fmt/format.h>

#include <stdexcept>

#include "src/model/spec/block_spec.hpp"
#include "src/model/spec/sublayer_kinds.hpp"

namespace tptrain::checkpoint {

const std::vector<HfPreset>& hf_presets() {
  static const std::vector<HfPreset> presets = {
      {"GPT2LMHeadModel", "gpt2", "gpt2", model::HfNaming::gpt2, HfConfigFamily::gpt2, "transformer.",
       R"(h\.[0-9]+\.attn\.(bias|masked_bias))"},
      {"LlamaForCausalLM", "llama", "llama", model::HfNaming::llama, HfConfigFamily::llama, "model.",
       R"(layers\.[0-9]+\.self_attn\.rotary_emb\.inv_freq)"},  // older transformers saved it
      // Qwen2Config has LlamaConfig's fields for what tptrain computes; q, k and v carry biases.
      {"Qwen2ForCausalLM", "qwen2", "qwen2", model::HfNaming::llama, HfConfigFamily::llama, "model.",
       R"(layers\.[0-9]+\.self_attn\.rotary_emb\.inv_freq)"},
      // Llama's attention with a mixture of SwiGLU experts as the MLP: the router is
      // block_sparse_moe.gate, expert e's gate|up and down are experts.e.w1|w3 and w2.
      {"MixtralForCausalLM", "mixtral", "mixtral", model::HfNaming::llama, HfConfigFamily::mixtral, "model.",
       R"(layers\.[0-9]+\.self_attn\.rotary_emb\.inv_freq)"},
      // Multi-head latent attention and DeepSeekMoE under DeepSeek's own names (self_attn.q_a_proj,
      // mlp.gate, mlp.shared_experts, mlp.experts.e.gate_proj, ...); it saves no buffers (its
      // multi-token prediction layers are skipped by their index: src/checkpoint/hf_deepseek.hpp).
      {"DeepseekV3ForCausalLM", "deepseek_v3", "deepseek_v3", model::HfNaming::deepseek, HfConfigFamily::deepseek,
       "model.", ""},
  };
  return presets;
}

namespace {

// A preset's rotary positions stand for every rotary kind: Hugging Face's config gives the
// scaling (rope_scaling; src/checkpoint/hf_llama.hpp).
bool same_position(const model::BlockSpec& a, const model::BlockSpec& b) {
  const auto rotary = [](const std::string& name) {
    const model::SublayerKind* k = model::kind_named(model::SublayerSlot::position, name);
    return k != nullptr && k->rotary.inverse != nullptr;
  };
  return a.position == b.position || (rotary(a.position) && rotary(b.position));
}

bool same_choices(const model::BlockSpec& a, const model::BlockSpec& b) {
  return a.norm == b.norm && a.attention == b.attention && a.mlp == b.mlp && same_position(a, b) &&
         a.qkv_bias == b.qkv_bias && a.linear_bias == b.linear_bias;
}

std::string choices_text(const model::BlockSpec& s) {
  return fmt::format("model.norm = \"{}\", model.attention = \"{}\", model.mlp = \"{}\", model.position = \"{}\", "
                     "model.qkv_bias = {}, model.linear_bias = {}",
                     s.norm, s.attention, s.mlp, s.position, s.qkv_bias, s.linear_bias);
}

}  // namespace

const HfPreset& hf_preset_of(const model::GptShape& shape) {
  std::string known;
  for (const HfPreset& p : hf_presets()) {
    const model::BlockPreset* block = model::block_preset(p.block_preset);
    if (block != nullptr && same_choices(shape, block->spec)) return p;
    known += fmt::format("{}{} (model.architecture = \"{}\")", known.empty() ? "" : ", ", p.architecture,
                         p.block_preset);
  }
  throw std::runtime_error(fmt::format("no Hugging Face architecture computes the block {}; those tptrain knows: {}",
                                       choices_text(shape), known));
}

}  // namespace tptrain::checkpoint
