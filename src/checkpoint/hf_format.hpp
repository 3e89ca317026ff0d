// A model's Hugging Face form, whichever architecture it is (docs/checkpoints.md, "Hugging Face
// export and import"): what `tptrain export` and `tptrain import` (src/driver/hf_commands.cpp)
// need besides the file formats, gathered from the shape's Hugging Face preset
// (src/checkpoint/hf_presets.hpp), the rows' names and the config family's file (src/checkpoint/hf_gpt2.hpp,
// src/checkpoint/hf_llama.hpp, which has Mixtral's too, src/checkpoint/hf_deepseek.hpp).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "src/model/spec/gpt_shape.hpp"
#include "src/checkpoint/hf_tensors.hpp"

namespace tptrain::checkpoint {

// What import learns from a folder's config.json.
struct HfConfigReading {
  std::string mismatch;  // "" when it describes the deck's model, else one line per field that differs
  // Blocks the file holds after the model's num_hidden_layers: DeepSeek-V3's multi-token prediction
  // (num_nextn_predict_layers; model.layers.<L> ... <L + n - 1>). Import reads the deck's
  // model.mtp_depth of them but their copies of the embedding and the output layer (embed_tokens,
  // shared_head.head: the model's own), and skips the others.
  int skipped_layers = 0;
  // Whether the rows HfTensor::interleaved marks are in that order in the file (DeepseekV3Config's
  // rope_interleave); false: in the checkpoint's.
  bool interleaved_rows = true;
};

struct HfFormat {
  std::string architecture;  // "GPT2LMHeadModel": for messages
  std::string model_type;    // "gpt2"
  // The base model's prefix of every key but lm_head's ("transformer.", "model."): Hugging Face's
  // own files of a base model leave it out, save_pretrained writes it; import takes both.
  std::string prefix;
  // Keys (after the prefix) of buffers a file may hold besides the weights, which import skips
  // (an ECMAScript regex): GPT-2's causal masks, old Llama files' rotary inv_freq.
  std::string ignored_buffers;
  // The output layer is the word embedding: an lm_head.weight in the file must equal this HF
  // tensor bit for bit (it is not written). "" when lm_head is a tensor of its own.
  std::string tied_to;
  std::vector<HfTensor> tensors;  // in checkpoint order
  std::string config_json;        // what export writes as config.json
  // What export warns of: a choice of the checkpoint's training that the Hugging Face model does
  // not compute ("" for none).
  std::string export_caveat;
  // Reads and checks config.json at `path` against the deck's shape: throws std::runtime_error
  // for a config of a model tptrain does not compute (naming the file and the field).
  std::function<HfConfigReading(const std::string& path, const model::GptShape& shape)> read_config;
  // The deck keys and config fields a checkpoint tensor's shape comes from, for messages.
  std::string (*shape_keys)(const std::string& checkpoint_name) = nullptr;
};

// What a config.json records of the training besides the model's function: the deck's choices a
// Hugging Face config has a field for (Mixtral's router_aux_loss_coef, training.moe_aux_loss_coeff).
// Absent: the config class's default.
struct HfTrainingChoices {
  std::optional<double> moe_aux_loss_coeff;
};

// What config.json records of how shape's checkpoint was trained (a mixture's load-balancing
// weight, router_aux_loss_coef), from its kinds' keys.
HfTrainingChoices hf_training_choices(const model::GptShape& shape);

// The form of the shape's block specification; throws std::runtime_error when no Hugging Face
// preset computes it (hf_preset_of).
HfFormat hf_format(const model::GptShape& shape, const HfTrainingChoices& training = {});

}  // namespace tptrain::checkpoint
