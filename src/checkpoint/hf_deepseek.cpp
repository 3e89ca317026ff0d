#include "src/checkpoint/hf_deepseek.hpp"

#include <fmt/format.h>

#include <stdexcept>
#include <string_view>
#include <utility>

#include "io/hf_deepseek_config.hpp"
#include "io/path_text.hpp"
#include "io/safetensors.hpp"

namespace tptrain::checkpoint {

namespace {

// DeepSeek-V3's routing as its files name it: what transformers' DeepseekV3TopkRouter computes.
constexpr const char* kSigmoid = "sigmoid";
constexpr const char* kNoAuxTc = "noaux_tc";

// The deck keys / config fields behind each tensor's shape, by the first match of its checkpoint name.
constexpr std::pair<const char*, const char*> kShapeKeys[] = {
    {"embedding/word", "model.vocab_size / vocab_size, model.hidden / hidden_size"},
    {"lm_head/", "model.vocab_size / vocab_size, model.hidden / hidden_size"},
    {"/attn/q_down/", "model.q_lora_rank / q_lora_rank, model.hidden / hidden_size"},
    {"/attn/q_norm/", "model.q_lora_rank / q_lora_rank"},
    {"/attn/q_up/",
     "model.heads / num_attention_heads, model.qk_nope_head_dim / qk_nope_head_dim, model.qk_rope_head_dim / "
     "qk_rope_head_dim, model.q_lora_rank / q_lora_rank"},
    {"/attn/q/",
     "model.heads / num_attention_heads, model.qk_nope_head_dim / qk_nope_head_dim, model.qk_rope_head_dim / "
     "qk_rope_head_dim, model.hidden / hidden_size"},
    {"/attn/kv_down/", "model.kv_lora_rank / kv_lora_rank, model.qk_rope_head_dim / qk_rope_head_dim, model.hidden / "
                       "hidden_size"},
    {"/attn/kv_norm/", "model.kv_lora_rank / kv_lora_rank"},
    {"/attn/kv_up/", "model.heads / num_attention_heads, model.qk_nope_head_dim / qk_nope_head_dim, model.v_head_dim / "
                     "v_head_dim, model.kv_lora_rank / kv_lora_rank"},
    {"/attn/proj/", "model.hidden / hidden_size, model.heads / num_attention_heads, model.v_head_dim / v_head_dim"},
    {"/mlp/router/", "model.experts / n_routed_experts, model.hidden / hidden_size"},
    {"/mlp/shared_experts/", "model.hidden / hidden_size, model.moe_shared_experts / n_shared_experts, "
                             "model.moe_ffn_hidden / moe_intermediate_size"},
    {"/mlp/experts/", "model.hidden / hidden_size, model.moe_ffn_hidden / moe_intermediate_size"},
    {"/mlp/", "model.hidden / hidden_size, model.ffn_hidden / intermediate_size"},
};

}  // namespace

std::string deepseek_shape_keys(const std::string& checkpoint_name) {
  for (const auto& [part, keys] : kShapeKeys)
    if (checkpoint_name.find(part) != std::string::npos) return keys;
  return "model.hidden / hidden_size";  // the norms
}

std::string hf_deepseek_config(const model::GptShape& s, const HfPreset& preset) {
  if (s.moe_score_function != kSigmoid)
    throw std::runtime_error(fmt::format("model.moe_score_function = \"{}\": {}'s router scores each expert with a "
                                         "sigmoid (DeepseekV3Config has no other scoring_func)",
                                         s.moe_score_function, preset.architecture));
  io::DeepseekV3ConfigFile c;
  set_hf_decoder_fields(c, s, preset);
  c.moe_intermediate_size = s.expert_ffn();
  c.num_key_value_heads = s.heads;  // every head its own key and value
  c.n_shared_experts = s.moe_shared_experts;
  c.n_routed_experts = s.experts;
  c.routed_scaling_factor = s.moe_routed_scaling;
  c.kv_lora_rank = s.kv_lora_rank;
  c.q_lora_rank = s.q_lora_rank;
  c.qk_rope_head_dim = s.qk_rope_head_dim;
  c.v_head_dim = s.v_head_dim;
  c.qk_nope_head_dim = s.qk_nope_head_dim;
  c.n_group = s.moe_groups;
  c.topk_group = s.moe_groups_per_token;
  c.num_experts_per_tok = s.experts_per_token;
  c.first_k_dense_replace = s.moe_dense_layers;
  c.norm_topk_prob = s.moe_norm_topk_prob;
  c.num_nextn_predict_layers = s.mtp_depth;  // its modules: model.layers.<L + k> (multi_token_prediction_spec.hpp)
  c.rope_interleave = true;  // export's order: interleave_rotary_rows
  return io::deepseek_v3_config_text(c);
}

HfDeepseekConfig read_hf_deepseek_config(const std::string& path, const HfPreset& preset) {
  const io::DeepseekV3ConfigFile c = io::read_deepseek_v3_config(path);
  const auto fail = [&](const std::string& what) {
    throw std::runtime_error("Hugging Face config " + io::display_path(path) + ": " + what);
  };
  HfDeepseekConfig h;
  static_cast<HfDecoderConfig&>(h) = read_hf_decoder_fields(c, preset, fail);
  for (const auto& [key, value] :
       {std::pair{"moe_intermediate_size", c.moe_intermediate_size}, std::pair{"n_routed_experts", c.n_routed_experts},
        std::pair{"num_experts_per_tok", c.num_experts_per_tok}, std::pair{"kv_lora_rank", c.kv_lora_rank},
        std::pair{"q_lora_rank", c.q_lora_rank}, std::pair{"qk_rope_head_dim", c.qk_rope_head_dim},
        std::pair{"qk_nope_head_dim", c.qk_nope_head_dim}, std::pair{"v_head_dim", c.v_head_dim}})
    if (value == (std::string_view(key) == "q_lora_rank" ? -1 : 0))  // q_lora_rank null (0): one query projection
      fail(std::string("no ") + key + ": a DeepseekV3ForCausalLM config gives its sizes (DeepseekV3Config's default "
                                      "is DeepSeek-V3's own)");
  if (c.attention_bias) fail("attention_bias = true: tptrain's multi-head latent attention has no biases");
  if (c.scoring_func != kSigmoid)
    fail("scoring_func = \"" + c.scoring_func +
         "\": DeepseekV3ForCausalLM scores each expert with a sigmoid (transformers' DeepseekV3TopkRouter; "
         "DeepSeek's code refuses another)");
  if (c.topk_method != kNoAuxTc)
    fail("topk_method = \"" + c.topk_method +
         "\": DeepSeek-V3 chooses its experts by the bias-corrected, group-limited top k (\"noaux_tc\"); "
         "DeepSeek-V2's methods are not DeepseekV3ForCausalLM's");
  if (c.moe_layer_freq != 1)
    fail(fmt::format("moe_layer_freq = {}: tptrain's blocks after first_k_dense_replace all have the mixture",
                     c.moe_layer_freq));
  if (c.num_experts_per_tok > c.n_routed_experts)
    fail(fmt::format("num_experts_per_tok = {} exceeds n_routed_experts = {}: each token goes through k different "
                     "experts of the E",
                     c.num_experts_per_tok, c.n_routed_experts));
  if (c.num_key_value_heads && *c.num_key_value_heads != c.num_attention_heads)
    fail(fmt::format("num_key_value_heads = {}: multi-head latent attention gives each of the num_attention_heads = {} "
                     "heads its own key and value",
                     *c.num_key_value_heads, c.num_attention_heads));
  if (c.head_dim && *c.head_dim != c.qk_rope_head_dim)
    fail(fmt::format("head_dim = {}: DeepseekV3Config's head_dim is the rotary part, qk_rope_head_dim = {}", *c.head_dim,
                     c.qk_rope_head_dim));
  if (c.qk_head_dim && *c.qk_head_dim != c.qk_nope_head_dim + c.qk_rope_head_dim)
    fail(fmt::format("qk_head_dim = {}: a query head is qk_nope_head_dim + qk_rope_head_dim = {} features",
                     *c.qk_head_dim, c.qk_nope_head_dim + c.qk_rope_head_dim));
  if (c.quantization) {
    const io::DeepseekV3ConfigFile::Quantization& q = *c.quantization;
    const std::vector<int> block(2, static_cast<int>(io::kFp8WeightBlockSize));
    if (q.quant_method != "fp8")
      fail("quantization_config.quant_method = \"" + q.quant_method +
           "\": tptrain reads fp8 weights with block scales (DeepSeek-V3's), no other quantisation");
    if (!q.fmt.empty() && q.fmt != "e4m3")
      fail("quantization_config.fmt = \"" + q.fmt + "\": tptrain reads float8 e4m3 weights only");
    if (q.weight_block_size && *q.weight_block_size != block) {
      std::string given;
      for (const int n : *q.weight_block_size) given += (given.empty() ? "" : ", ") + std::to_string(n);
      fail(fmt::format("quantization_config.weight_block_size = [{}]: tptrain's reader dequantises blocks of [{}, {}]",
                       given, block[0], block[1]));
    }
  }
  h.q_lora_rank = c.q_lora_rank;
  h.kv_lora_rank = c.kv_lora_rank;
  h.qk_nope_head_dim = c.qk_nope_head_dim;
  h.qk_rope_head_dim = c.qk_rope_head_dim;
  h.v_head_dim = c.v_head_dim;
  h.experts = c.n_routed_experts;
  h.experts_per_token = c.num_experts_per_tok;
  h.expert_ffn = c.moe_intermediate_size;
  h.shared_experts = c.n_shared_experts;
  h.dense_layers = c.first_k_dense_replace;
  h.groups = c.n_group;
  h.groups_per_token = c.topk_group;
  h.norm_topk_prob = c.norm_topk_prob;
  h.routed_scaling = c.routed_scaling_factor;
  h.prediction_layers = c.num_nextn_predict_layers;
  h.rope_interleave = c.rope_interleave;
  return h;
}

std::string hf_config_mismatch(const HfDeepseekConfig& h, const model::GptShape& s) {
  HfMismatch m;
  hf_decoder_mismatch(h, s, m);
  if (h.q_lora_rank != s.q_lora_rank)
    m.line(fmt::format("config.json q_lora_rank = {}, the deck's model.q_lora_rank = {}",
                       h.q_lora_rank == 0 ? std::string("null") : std::to_string(h.q_lora_rank), s.q_lora_rank));
  m.compare("kv_lora_rank", h.kv_lora_rank, "model.kv_lora_rank", s.kv_lora_rank);
  // A file may hold more prediction modules than the deck (import skips the others), not fewer.
  if (h.prediction_layers < s.mtp_depth)
    m.line(fmt::format("config.json num_nextn_predict_layers = {}, the deck's model.mtp_depth = {}",
                       h.prediction_layers, s.mtp_depth));
  m.compare("qk_nope_head_dim", h.qk_nope_head_dim, "model.qk_nope_head_dim", s.qk_nope_head_dim);
  m.compare("qk_rope_head_dim", h.qk_rope_head_dim, "model.qk_rope_head_dim", s.qk_rope_head_dim);
  m.compare("v_head_dim", h.v_head_dim, "model.v_head_dim", s.v_head_dim);
  m.compare("n_routed_experts", h.experts, "model.experts", s.experts);
  m.compare("num_experts_per_tok", h.experts_per_token, "model.experts_per_token", s.experts_per_token);
  if (h.expert_ffn != s.expert_ffn())
    m.line(fmt::format("config.json moe_intermediate_size = {}, the deck's routed experts are {} wide "
                       "(model.moe_ffn_hidden = {}; 0: model.ffn_hidden)",
                       h.expert_ffn, s.expert_ffn(), s.moe_ffn_hidden));
  m.compare("n_shared_experts", h.shared_experts, "model.moe_shared_experts", s.moe_shared_experts);
  m.compare("first_k_dense_replace", h.dense_layers, "model.moe_dense_layers", s.moe_dense_layers);
  // intermediate_size is the dense blocks' width: a model without them never uses it.
  if (s.moe_dense_layers > 0) m.compare("intermediate_size", h.ffn_hidden, "model.ffn_hidden", s.ffn_hidden);
  m.compare("n_group", h.groups, "model.moe_groups", s.moe_groups);
  m.compare("topk_group", h.groups_per_token, "model.moe_groups_per_token", s.moe_groups_per_token);
  m.compare("norm_topk_prob", h.norm_topk_prob, "model.moe_norm_topk_prob", s.moe_norm_topk_prob);
  m.compare_number("routed_scaling_factor", h.routed_scaling, "model.moe_routed_scaling", s.moe_routed_scaling);
  if (s.moe_score_function != kSigmoid)
    m.line(fmt::format("config.json scores the experts with a sigmoid (scoring_func \"{}\"), the deck's "
                       "model.moe_score_function = \"{}\"",
                       kSigmoid, s.moe_score_function));
  return m.text();
}

void interleave_rotary_rows(std::vector<HfTensor>& tensors, const model::GptShape& s) {
  const auto d_q = static_cast<std::uint64_t>(s.qk_head_dim()), d_r = static_cast<std::uint64_t>(s.qk_rope_head_dim);
  const auto latent = static_cast<std::uint64_t>(s.kv_lora_rank) + d_r;
  for (HfTensor& t : tensors) {
    const std::string row = split_block_name(t.checkpoint_name).row;
    if (row == "attn/q_up/weight" || row == "attn/q/weight") t.interleaved = {d_q, d_q - d_r, d_r};
    if (row == "attn/kv_down/weight") t.interleaved = {latent, latent - d_r, d_r};
  }
}

}  // namespace tptrain::checkpoint
