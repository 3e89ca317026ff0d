// What the config.json files of Hugging Face's decoder-only families share, as tptrain's model
// (LlamaConfig and Qwen2Config, MixtralConfig: src/checkpoint/hf_llama.hpp; DeepseekV3Config:
// src/checkpoint/hf_deepseek.hpp): the sizes, the norm's ε, the tied head and the rotary positions
// (rope_theta, rope_scaling and max_position_embeddings; docs/checkpoints.md, "Llama") — written
// from a shape, read and checked, and compared with a deck once for every family. Their file
// format: io/hf_decoder_config.hpp.
#pragma once

#include <fmt/format.h>

#include <functional>
#include <map>
#include <optional>
#include <string>

#include "io/hf_decoder_config.hpp"
#include "src/checkpoint/hf_presets.hpp"
#include "src/model/spec/gpt_shape.hpp"

namespace tptrain::checkpoint {

// Two configs' ε, θ or scaling factors: the same number, up to the last digits of a decimal round trip.
bool hf_same_number(double a, double b);

// Where a config.json and a deck differ, a line each that names both sides ("config.json n_group =
// 4, the deck's model.moe_groups = 2"); "" when they agree.
class HfMismatch {
 public:
  template <class Hf, class Deck>
  void compare(const char* field, const Hf& hf, const char* key, const Deck& deck) {
    if (hf != deck) differs(field, hf, key, deck);
  }
  // ε, θ, factors: equal up to a decimal round trip (hf_same_number).
  void compare_number(const char* field, double hf, const char* key, double deck) {
    if (!hf_same_number(hf, deck)) differs(field, hf, key, deck);
  }
  void line(const std::string& text) {
    if (!text.empty()) out_ += (out_.empty() ? "" : "\n") + text;
  }
  const std::string& text() const { return out_; }

 private:
  template <class Hf, class Deck>
  void differs(const char* field, const Hf& hf, const char* key, const Deck& deck) {
    line(fmt::format("config.json {} = {}, the deck's {} = {}", field, hf, key, deck));
  }
  std::string out_;
};

// What import needs of the shared fields: the sizes, ε, the tied head, θ, the rotary kind its
// rope_scaling names ("rope": none; "llama3", "yarn") and the values of that kind's deck keys it
// gives, by key ("rope_factor": rope_scaling's factor, ...).
struct HfDecoderConfig {
  int layers = 0, hidden = 0, heads = 0, ffn_hidden = 0, vocab_size = 0;
  double norm_eps = 0, rope_theta = 0;
  bool tie_embeddings = false;
  std::string position = "rope";
  std::map<std::string, double> rope_keys;
};

// The shared fields of shape s under the preset's names: its sizes, ε, θ, the tied head,
// max_position_embeddings (the deck's model.seq_length, the context the model was trained with;
// with YaRN the scaled context model.rope_factor × model.rope_original_max_positions, as Hugging
// Face's newer YaRN reads the factor from their ratio and its older one from rope_scaling) and
// rope_scaling (its kind's keys as Hugging Face's fields, model.rope_factor as "factor", YaRN's
// magnitudes only when given; none for unscaled RoPE).
void set_hf_decoder_fields(io::DecoderConfigFile& c, const model::GptShape& s, const HfPreset& preset);

// The shared fields read back and checked: the preset's model_type, the sizes given (0: "no
// hidden_size"), hidden_act silu, and rope_scaling a type tptrain has ("default" is plain RoPE)
// with the fields that type requires and none it does not model, YaRN's factor the same as
// max_position_embeddings / original_max_position_embeddings. `fail` throws, naming the file.
HfDecoderConfig read_hf_decoder_fields(const io::DecoderConfigFile& c, const HfPreset& preset,
                                       const std::function<void(const std::string&)>& fail);

// The deck's keys against the shared fields but intermediate_size (whose meaning is the family's),
// a line in `m` per difference ("config.json rope_scaling.factor = 8, the deck's model.rope_factor = 4").
void hf_decoder_mismatch(const HfDecoderConfig& h, const model::GptShape& s, HfMismatch& m);

}  // namespace tptrain::checkpoint
