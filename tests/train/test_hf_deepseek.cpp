// The checkpoint <-> DeepseekV3ForCausalLM table (src/checkpoint/hf_deepseek.hpp, hf_presets.cpp):
// multi-head latent attention's rows under DeepSeek's names with their rotary rows in adjacent-pair
// order, the dense first blocks' SwiGLU, the mixture's router, expert bias, shared and routed
// experts; config.json says the model and reads back under DeepseekV3Config's defaults, and
// configs of models tptrain does not compute are refused by field. The numbers themselves are held
// to an independent PyTorch DeepSeek-V3 by tests/hf/ (cli_hf_reference_deepseek_v3_*).
#include "catch.hpp"

#include <fstream>
#include <map>

#include "data/scratch_dir.hpp"
#include "src/checkpoint/hf_deepseek.hpp"
#include "src/checkpoint/hf_format.hpp"
#include "src/model/spec/model_parameters.hpp"
#include "tests/train/hf_test_util.hpp"

using namespace tptrain;
using Catch::Matchers::Contains;

namespace {

model::GptShape deepseek_shape() {
  model::GptShape s;
  static_cast<model::BlockSpec&>(s) = model::block_preset("deepseek_v3")->spec;
  s.layers = 3, s.hidden = 16, s.heads = 2, s.ffn_hidden = 20, s.seq_length = 8, s.vocab_size = 11;
  s.norm_eps = 1e-6;
  s.q_lora_rank = 6, s.kv_lora_rank = 4, s.qk_nope_head_dim = 2, s.qk_rope_head_dim = 4, s.v_head_dim = 3;
  s.experts = 4, s.experts_per_token = 2, s.moe_ffn_hidden = 5, s.moe_shared_experts = 2, s.moe_dense_layers = 1;
  s.moe_score_function = "sigmoid", s.moe_groups = 2, s.moe_groups_per_token = 1, s.moe_routed_scaling = 2.5;
  return s;
}

const checkpoint::HfPreset& deepseek_preset() { return checkpoint::hf_preset_of(deepseek_shape()); }

std::string write(const test::ScratchDir& dir, const std::string& text) {
  const std::string path = dir.file("config.json");
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST_CASE("hf_deepseek: the deepseek_v3 block is DeepseekV3ForCausalLM, every row by DeepSeek's name",
          "[train][hf]") {
  const model::GptShape s = deepseek_shape();
  const checkpoint::HfPreset& p = deepseek_preset();
  CHECK(std::string(p.architecture) == "DeepseekV3ForCausalLM");
  CHECK(p.config == checkpoint::HfConfigFamily::deepseek);
  const checkpoint::HfFormat f = checkpoint::hf_format(s);
  std::map<std::string, checkpoint::HfTensor> hf;
  for (const auto& t : f.tensors) hf[t.hf_name] = t;
  REQUIRE(hf.size() == f.tensors.size());  // no name twice
  // 3 model-level tensors; per block 2 norms and MLA's 7 (q_a, q_a_layernorm, q_b, kv_a, kv_a_layernorm,
  // kv_b, o); the dense block's gate, up, down; each mixture's router, bias, shared gate, up, down
  // and E experts' gate, up, down.
  CHECK(f.tensors.size() == 3 + 3 * 9 + 3 + 2 * (5 + 4 * 3));
  using V = std::vector<std::uint64_t>;
  const std::string a = "model.layers.2.self_attn.";
  CHECK(hf.at(a + "q_a_proj.weight").checkpoint_name == "layers/2/attn/q_down/weight");
  CHECK(hf.at(a + "q_a_proj.weight").hf_shape() == V{6, 16});
  CHECK(hf.at(a + "q_a_layernorm.weight").hf_shape() == V{6});
  CHECK(hf.at(a + "q_b_proj.weight").hf_shape() == V{2 * 6, 6});  // nh (d_nope + d_R), r_q
  CHECK(hf.at(a + "kv_a_proj_with_mqa.weight").hf_shape() == V{4 + 4, 16});
  CHECK(hf.at(a + "kv_a_layernorm.weight").hf_shape() == V{4});
  CHECK(hf.at(a + "kv_b_proj.weight").hf_shape() == V{2 * (2 + 3), 4});
  CHECK(hf.at(a + "o_proj.weight").hf_shape() == V{16, 2 * 3});
  CHECK(hf.at("model.layers.0.input_layernorm.weight").checkpoint_name == "layers/0/ln_1/weight");
  CHECK(hf.at("model.layers.0.post_attention_layernorm.weight").checkpoint_name == "layers/0/ln_2/weight");
  // Block 0 dense (first_k_dense_replace), gate | up of the checkpoint's [2F, H].
  CHECK((hf.at("model.layers.0.mlp.gate_proj.weight").row_begin == 0 &&
         hf.at("model.layers.0.mlp.up_proj.weight").row_begin == 20));
  CHECK(hf.at("model.layers.0.mlp.down_proj.weight").hf_shape() == V{16, 20});
  CHECK(hf.count("model.layers.0.mlp.gate.weight") == 0);
  CHECK(hf.count("model.layers.1.mlp.gate_proj.weight") == 0);
  // The mixture.
  const std::string m = "model.layers.1.mlp.";
  CHECK(hf.at(m + "gate.weight").checkpoint_name == "layers/1/mlp/router/weight");
  CHECK(hf.at(m + "gate.e_score_correction_bias").checkpoint_name == "layers/1/mlp/router/expert_bias");
  CHECK(hf.at(m + "gate.e_score_correction_bias").hf_shape() == V{4});
  CHECK(hf.at(m + "shared_experts.gate_proj.weight").hf_shape() == V{2 * 5, 16});  // n_s F_e
  CHECK(hf.at(m + "shared_experts.up_proj.weight").row_begin == 10);
  CHECK(hf.at(m + "shared_experts.down_proj.weight").hf_shape() == V{16, 10});
  CHECK(hf.at(m + "experts.3.gate_proj.weight").checkpoint_name == "layers/1/mlp/experts/3/fc/weight");
  CHECK(hf.at(m + "experts.3.up_proj.weight").row_begin == 5);
  CHECK(hf.at(m + "experts.3.down_proj.weight").hf_shape() == V{16, 5});
  CHECK(hf.at("lm_head.weight").hf_shape() == V{11, 16});
  CHECK(f.shape_keys("layers/1/mlp/experts/0/fc/weight") == "model.hidden / hidden_size, model.moe_ffn_hidden / "
                                                             "moe_intermediate_size");
  CHECK_THAT(f.shape_keys("layers/1/attn/kv_down/weight"), Contains("model.kv_lora_rank / kv_lora_rank"));
  CHECK_THAT(f.shape_keys("layers/0/mlp/fc/weight"), Contains("model.ffn_hidden / intermediate_size"));

  // The rotary rows: in each query head the last d_R = 4 of its 6 rows, and kv_a's last 4 of 8,
  // are DeepSeek's adjacent pairs; nothing else moves.
  const checkpoint::HfTensor& q = hf.at(a + "q_b_proj.weight");
  CHECK((q.interleaved.period == 6 && q.interleaved.offset == 2 && q.interleaved.width == 4));
  const checkpoint::HfTensor& kv = hf.at(a + "kv_a_proj_with_mqa.weight");
  CHECK((kv.interleaved.period == 8 && kv.interleaved.offset == 4 && kv.interleaved.width == 4));
  std::vector<float> rows(12 * 6);
  for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i / 6);  // element = its row
  const std::vector<float> out = checkpoint::to_hf(q, rows);
  std::vector<float> hf_rows;
  for (std::size_t r = 0; r < 12; ++r) hf_rows.push_back(out[r * 6]);
  // tptrain's rotate-half rows (i, i + 2) are HF's pairs (2i, 2i + 1): 2 3 4 5 -> 2 4 3 5.
  CHECK(hf_rows == std::vector<float>{0, 1, 2, 4, 3, 5, 6, 7, 8, 10, 9, 11});
  for (const auto& t : f.tensors) {
    const bool rotary = t.hf_name.find("q_b_proj") != std::string::npos ||
                        t.hf_name.find("kv_a_proj_with_mqa") != std::string::npos;
    CHECK((t.interleaved.period != 0) == rotary);
  }

  // Every piece goes back in place, the interleaved ones too.
  CHECK(test::hf_pieces_go_back(f.tensors));

  // Queries projected at once (q_lora_rank = 0): q_proj, interleaved the same way.
  model::GptShape direct = s;
  direct.q_lora_rank = 0;
  const checkpoint::HfFormat d = checkpoint::hf_format(direct);
  bool seen = false;
  for (const auto& t : d.tensors) {
    CHECK(t.hf_name.find("q_a_proj") == std::string::npos);
    if (t.hf_name == a + "q_proj.weight") {
      seen = true;
      CHECK(t.hf_shape() == V{12, 16});
      CHECK(t.interleaved.width == 4);
    }
  }
  CHECK(seen);
}

TEST_CASE("hf_deepseek: the presets tell Llama, Mixtral and DeepSeek-V3 apart by their attention too", "[train][hf]") {
  model::GptShape s = deepseek_shape();
  s.attention = "gqa";  // a mixture of experts with grouped-query attention is Mixtral's block
  CHECK(std::string(checkpoint::hf_preset_of(s).architecture) == "MixtralForCausalLM");
  s = deepseek_shape();
  s.mlp = "swiglu";
  CHECK_THROWS_WITH(checkpoint::hf_preset_of(s), Contains("model.attention = \"mla\", model.mlp = \"swiglu\"") &&
                                                     Contains("DeepseekV3ForCausalLM (model.architecture = "
                                                              "\"deepseek_v3\")"));
  // HF's router scores with a sigmoid.
  s = deepseek_shape();
  s.moe_score_function = "softmax";
  CHECK_THROWS_WITH(checkpoint::hf_format(s), Contains("model.moe_score_function = \"softmax\"") &&
                                                  Contains("DeepseekV3ForCausalLM's router scores each expert with a "
                                                           "sigmoid"));
}

TEST_CASE("hf_deepseek: config.json describes the model and reads back; others are refused by field", "[train][hf]") {
  test::ScratchDir dir("hf_deepseek_config");
  model::GptShape s = deepseek_shape();
  s.position = "yarn";
  s.rope_factor = 40, s.rope_original_max_positions = 4096, s.rope_mscale = 1.0, s.rope_mscale_all_dim = 1.0;
  const std::string text = checkpoint::hf_format(s).config_json;
  for (const char* field :
       {"\"architectures\": [\n    \"DeepseekV3ForCausalLM\"\n  ]", "\"model_type\": \"deepseek_v3\"",
        "\"vocab_size\": 11", "\"hidden_size\": 16", "\"intermediate_size\": 20", "\"moe_intermediate_size\": 5",
        "\"num_hidden_layers\": 3", "\"num_attention_heads\": 2", "\"num_key_value_heads\": 2",
        "\"n_shared_experts\": 2", "\"n_routed_experts\": 4", "\"routed_scaling_factor\": 2.5", "\"kv_lora_rank\": 4",
        "\"q_lora_rank\": 6", "\"qk_rope_head_dim\": 4", "\"v_head_dim\": 3", "\"qk_nope_head_dim\": 2",
        "\"n_group\": 2", "\"topk_group\": 1", "\"num_experts_per_tok\": 2", "\"first_k_dense_replace\": 1",
        "\"norm_topk_prob\": true", "\"scoring_func\": \"sigmoid\"", "\"topk_method\": \"noaux_tc\"",
        "\"hidden_act\": \"silu\"", "\"max_position_embeddings\": 163840", "\"rms_norm_eps\": 1e-06",
        "\"rope_theta\": 10000.0", "\"rope_type\": \"yarn\"", "\"mscale_all_dim\": 1.0", "\"factor\": 40.0",
        "\"tie_word_embeddings\": false", "\"attention_bias\": false", "\"num_nextn_predict_layers\": 0",
        "\"rope_interleave\": true"}) {
    CAPTURE(field);
    CHECK_THAT(text, Contains(field));
  }
  const checkpoint::HfDeepseekConfig c = checkpoint::read_hf_deepseek_config(write(dir, text), deepseek_preset());
  CHECK(checkpoint::hf_config_mismatch(c, s).empty());
  CHECK(c.position == "yarn");
  CHECK(c.rope_interleave);
  CHECK(c.prediction_layers == 0);
  model::GptShape direct = s;
  direct.q_lora_rank = 0;
  CHECK_THAT(checkpoint::hf_format(direct).config_json, Contains("\"q_lora_rank\": null"));

  // Another deck: each difference named with both sides.
  model::GptShape other = s;
  other.moe_groups = 1, other.moe_groups_per_token = 1, other.q_lora_rank = 0, other.moe_shared_experts = 1,
  other.moe_ffn_hidden = 0, other.moe_routed_scaling = 1.0, other.moe_norm_topk_prob = false;
  const std::string diff = checkpoint::hf_config_mismatch(c, other);
  for (const char* line :
       {"config.json n_group = 2, the deck's model.moe_groups = 1",
        "config.json q_lora_rank = 6, the deck's model.q_lora_rank = 0",
        "config.json n_shared_experts = 2, the deck's model.moe_shared_experts = 1",
        "config.json moe_intermediate_size = 5, the deck's routed experts are 20 wide",
        "config.json routed_scaling_factor = 2.5, the deck's model.moe_routed_scaling = 1",
        "config.json norm_topk_prob = true, the deck's model.moe_norm_topk_prob = false"}) {
    CAPTURE(line);
    CHECK_THAT(diff, Contains(line));
  }
  CHECK_THAT(checkpoint::hf_config_mismatch(c, deepseek_shape()),
             Contains("config.json rope_scaling gives \"yarn\" rotary positions, the deck's model.position = \"rope\""));

  // DeepSeek's published form: the older "type", no rope_interleave (true), a prediction module,
  // fp8 quantization, derived head sizes; DeepseekV3Config's defaults for what it leaves out.
  const std::string published =
      R"({"model_type":"deepseek_v3","vocab_size":11,"hidden_size":16,"intermediate_size":20,)"
      R"("moe_intermediate_size":5,"num_hidden_layers":3,"num_attention_heads":2,"num_key_value_heads":2,)"
      R"("n_routed_experts":4,"num_experts_per_tok":2,"kv_lora_rank":4,"q_lora_rank":6,"qk_rope_head_dim":4,)"
      R"("v_head_dim":3,"qk_nope_head_dim":2,"n_shared_experts":2,"n_group":2,"topk_group":1,)"
      R"("first_k_dense_replace":1,"max_position_embeddings":163840,"num_nextn_predict_layers":1,)"
      R"("moe_layer_freq":1,"ep_size":1,"seq_aux":true,"aux_loss_alpha":0.001,"head_dim":4,"qk_head_dim":6,)"
      R"("quantization_config":{"activation_scheme":"dynamic","fmt":"e4m3","quant_method":"fp8",)"
      R"("weight_block_size":[128,128]},)"
      R"("rope_scaling":{"beta_fast":32,"beta_slow":1,"factor":40,"mscale":1.0,"mscale_all_dim":1.0,)"
      R"("original_max_position_embeddings":4096,"type":"yarn"})";
  const checkpoint::HfDeepseekConfig p =
      checkpoint::read_hf_deepseek_config(write(dir, published + "}"), deepseek_preset());
  CHECK(checkpoint::hf_config_mismatch(p, s).empty());
  CHECK(p.prediction_layers == 1);
  CHECK(p.rope_interleave);
  CHECK(p.norm_eps == 1e-6);
  CHECK(p.routed_scaling == 2.5);
  CHECK_FALSE(checkpoint::read_hf_deepseek_config(write(dir, published + R"(,"rope_interleave":false})"),
                                                  deepseek_preset())
                  .rope_interleave);

  const std::vector<std::pair<std::string, std::string>> refused{
      {R"(,"scoring_func":"softmax"})", "scoring_func = \"softmax\": DeepseekV3ForCausalLM scores each expert with a "
                                        "sigmoid"},
      {R"(,"topk_method":"greedy"})", "topk_method = \"greedy\""},
      {R"(,"moe_layer_freq":2})", "moe_layer_freq = 2"},
      {R"(,"num_key_value_heads":1})", "num_key_value_heads = 1: multi-head latent attention"},
      {R"(,"hidden_act":"gelu"})", "hidden_act = \"gelu\""},
      {R"(,"attention_bias":true})", "attention_bias = true"},
      {R"(,"num_experts_per_tok":5})", "num_experts_per_tok = 5 exceeds n_routed_experts = 4"},
      {R"(,"head_dim":6})", "head_dim = 6: DeepseekV3Config's head_dim is the rotary part, qk_rope_head_dim = 4"},
      {R"(,"qk_head_dim":4})", "qk_head_dim = 4"},
      {R"(,"n_shared_experts":-1})", "n_shared_experts = -1: expected an integer >= 0"},
      {R"(,"q_lora_rank":0})", "q_lora_rank = 0: expected a positive integer"},
      {R"(,"quantization_config":{"quant_method":"bitsandbytes"}})", "quantization_config.quant_method = "
                                                                      "\"bitsandbytes\""},
      {R"(,"quantization_config":{"quant_method":"fp8","weight_block_size":[64,64]}})",
       "quantization_config.weight_block_size = [64, 64]: tptrain's reader dequantises blocks of [128, 128]"},
      {R"(,"quantization_config":{"quant_method":"fp8","fmt":"e5m2"}})", "quantization_config.fmt = \"e5m2\""},
      {R"(,"rope_scaling":{"type":"dynamic","factor":2.0}})", "rope_scaling's rope_type is \"dynamic\""},
      {R"(,"model_type":"mixtral"})", "model_type is \"mixtral\""},
      {R"(,"kv_lora_rank":null})", "no kv_lora_rank"},
  };
  for (const auto& [extra, message] : refused) {
    CAPTURE(extra);
    // A JSON object keeps the last of a repeated key: each case overrides the published field.
    CHECK_THROWS_WITH(checkpoint::read_hf_deepseek_config(write(dir, published + extra), deepseek_preset()),
                      Contains(message) && Contains("config.json"));
  }
}
