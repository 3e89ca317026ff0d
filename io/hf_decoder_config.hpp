// What the config.json files of Hugging Face's decoder-only families share as a file format —
// LlamaConfig and Qwen2Config (io/hf_llama_config.hpp), MixtralConfig, DeepseekV3Config
// (io/hf_deepseek_config.hpp): the sizes, norms, rotary positions (rope_theta, rope_scaling) and
// token ids, with LlamaConfig's defaults, read and written once for them all through
// io/hf_config.hpp. Whether a config describes a model tptrain computes is the caller's question
// (src/checkpoint/hf_*.hpp).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tptrain::io {

class HfConfigFields;
class HfConfigWriter;

// rope_scaling: its type ("rope_type", or the older "type" of DeepSeek-V3's files), its numeric
// fields by name ("factor", "original_max_position_embeddings", ...), YaRN's truncate switch, and
// the names of any other fields (long_factor lists, ...).
struct RopeScalingFile {
  std::string rope_type;
  std::map<std::string, double> numbers;
  std::optional<bool> truncate;
  std::vector<std::string> others;
};

struct DecoderConfigFile {
  std::string architecture = "LlamaForCausalLM";  // written as architectures[0]
  std::string model_type;                          // "" when absent
  // 0 when absent (each config class has defaults for them, one published model's, but a file
  // that leaves the model's shape out describes no particular model).
  int num_hidden_layers = 0, hidden_size = 0, num_attention_heads = 0, intermediate_size = 0, vocab_size = 0;
  int max_position_embeddings = 0;
  std::optional<int> num_key_value_heads;  // null or absent: num_attention_heads (multi-head attention)
  std::string hidden_act = "silu";
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  std::optional<RopeScalingFile> rope_scaling;  // null or absent: unscaled
  bool tie_word_embeddings = false;
  double attention_dropout = 0.0;
  std::optional<int> bos_token_id, eos_token_id;
};

// The shared fields into `w` (architectures [architecture], torch_dtype float32, use_cache true,
// initializer_range 0.02; rope_scaling null or its type's fields unless the class has none).
// Written with HfConfigWriter::sorted_text, as save_pretrained sorts every config's keys.
void set_decoder_fields(HfConfigWriter& w, const DecoderConfigFile& c, bool has_rope_scaling);

// The shared fields of the file `f` into `c`: the sizes positive integers when present,
// num_key_value_heads positive or null, the others of their type when present (absent: as `c`
// holds them); rope_scaling an object or null. Throws std::runtime_error naming the file and field.
void read_decoder_fields(const HfConfigFields& f, DecoderConfigFile& c);

}  // namespace tptrain::io
