#include "src/checkpoint/hf_format.hpp"

#include <fmt/format.h>

#include "src/model/spec/model_parameters.hpp"
#include "src/model/spec/sublayer_kinds.hpp"
#include "src/checkpoint/hf_deepseek.hpp"
#include "src/checkpoint/hf_gpt2.hpp"
#include "src/checkpoint/hf_llama.hpp"

namespace tptrain::checkpoint {

namespace {

std::string gpt2_shape_keys(const std::string& checkpoint_name) {
  std::string keys = "model.hidden / n_embd";
  if (checkpoint_name == "embedding/word" || checkpoint_name == "lm_head/weight")
    keys = "model.vocab_size / vocab_size, " + keys;
  if (checkpoint_name == "embedding/position") keys = "model.seq_length / n_positions, " + keys;
  if (checkpoint_name.find("/mlp/") != std::string::npos) keys += ", model.ffn_hidden / n_inner";
  return keys;
}

std::string llama_shape_keys(const std::string& checkpoint_name) {
  std::string keys = "model.hidden / hidden_size";
  if (checkpoint_name == "embedding/word" || checkpoint_name == "lm_head/weight")
    keys = "model.vocab_size / vocab_size, " + keys;
  if (checkpoint_name.find("/attn/") != std::string::npos)
    keys += ", model.heads / num_attention_heads, model.kv_heads / num_key_value_heads";
  if (checkpoint_name.find("/mlp/") != std::string::npos) keys += ", model.ffn_hidden / intermediate_size";
  return keys;
}

// Mixtral's: Llama's, the router's rows are the experts, and only the experts' tensors are ffn wide.
std::string mixtral_shape_keys(const std::string& checkpoint_name) {
  if (checkpoint_name.find("/mlp/router/") != std::string::npos)
    return "model.experts / num_local_experts, model.hidden / hidden_size";
  if (checkpoint_name.find("/mlp/experts/") != std::string::npos)
    return "model.hidden / hidden_size, model.ffn_hidden / intermediate_size";
  return llama_shape_keys(checkpoint_name);
}

// A model trained with a capacity (model.moe_capacity_factor > 0) dropped tokens; Hugging Face's
// mixtures are dropless. "" when it had none.
std::string dropless_caveat(const model::GptShape& s, const std::string& architecture) {
  if (s.moe_capacity_factor <= 0) return {};
  return fmt::format("trained with model.moe_capacity_factor = {}: {} is dropless (every token reaches its {} experts), "
                     "as tptrain is without a capacity; the run that dropped tokens computed another function",
                     s.moe_capacity_factor, architecture, s.experts_per_token);
}

}  // namespace

HfTrainingChoices hf_training_choices(const model::GptShape& shape) {
  HfTrainingChoices training;
  if (model::holds_experts(shape)) training.moe_aux_loss_coeff = shape.moe_aux_loss_coeff;
  return training;
}

HfFormat hf_format(const model::GptShape& shape, const HfTrainingChoices& training) {
  const HfPreset& preset = hf_preset_of(shape);
  HfFormat f;
  f.architecture = preset.architecture;
  f.model_type = preset.model_type;
  f.prefix = preset.prefix;
  f.ignored_buffers = preset.ignored_buffers;
  // Tied, the output layer is the word embedding's HF tensor.
  if (shape.tie_embeddings) f.tied_to = model::hf_name(model::kEmbeddingParameters[0], preset.naming).pattern;
  switch (preset.config) {
    case HfConfigFamily::gpt2:
      // GPT-2's tokenizer (a vocabulary of 50257 or its padding): <|endoftext|> is bos and eos.
      f.config_json = hf_gpt2_config(shape, shape.vocab_size >= 50257);
      f.read_config = [](const std::string& path, const model::GptShape& s) {
        return HfConfigReading{hf_config_mismatch(read_hf_gpt2_config(path), s)};
      };
      f.shape_keys = gpt2_shape_keys;
      break;
    case HfConfigFamily::llama:
      f.config_json = hf_llama_config(shape, preset);
      f.read_config = [&preset](const std::string& path, const model::GptShape& s) {
        return HfConfigReading{hf_config_mismatch(read_hf_llama_config(path, preset), s)};
      };
      f.shape_keys = llama_shape_keys;
      break;
    case HfConfigFamily::mixtral:
      f.config_json = hf_llama_config(shape, preset, training.moe_aux_loss_coeff);
      f.export_caveat = dropless_caveat(shape, f.architecture);
      f.read_config = [&preset](const std::string& path, const model::GptShape& s) {
        return HfConfigReading{hf_config_mismatch(read_hf_llama_config(path, preset), s)};
      };
      f.shape_keys = mixtral_shape_keys;
      break;
    case HfConfigFamily::deepseek:
      f.config_json = hf_deepseek_config(shape, preset);
      f.export_caveat = dropless_caveat(shape, f.architecture);
      f.read_config = [&preset](const std::string& path, const model::GptShape& s) {
        const HfDeepseekConfig c = read_hf_deepseek_config(path, preset);
        return HfConfigReading{hf_config_mismatch(c, s), c.prediction_layers, c.rope_interleave};
      };
      f.shape_keys = deepseek_shape_keys;
      break;
  }
  // After the config: a model the config cannot describe is refused by its keys first.
  f.tensors = hf_tensors(shape, preset.naming);
  if (preset.config == HfConfigFamily::deepseek) interleave_rotary_rows(f.tensors, shape);
  return f;
}

}  // namespace tptrain::checkpoint
