// The checkpoint <-> LlamaForCausalLM table (src/checkpoint/hf_llama.hpp): the fused attn/qkv and
// mlp/fc rows are HF's q|k|v and gate|up projections, in that order, with grouped-query
// attention's narrower k and v; nothing is transposed or permuted; config.json says the model
// tptrain computes and reads back, and configs of models tptrain does not compute are refused by
// field. The numbers themselves are held to an independent PyTorch Llama by tests/hf/
// (cli_hf_reference_llama_*).
#include "catch.hpp"

#include <fstream>
#include <map>

#include "data/scratch_dir.hpp"
#include "src/model/spec/model_parameters.hpp"
#include "src/checkpoint/hf_format.hpp"
#include "src/checkpoint/hf_llama.hpp"

using namespace tptrain;
using Catch::Matchers::Contains;
using Catch::Matchers::Equals;

namespace {

model::GptShape llama_shape() {
  model::GptShape s;
  static_cast<model::BlockSpec&>(s) = model::block_preset("llama")->spec;
  s.tie_embeddings = false;
  s.layers = 3;
  s.hidden = 16;
  s.heads = 4;  // d = 4
  s.kv_heads = 2;
  s.ffn_hidden = 40;
  s.seq_length = 5;
  s.vocab_size = 11;
  s.norm_eps = 1e-6;
  s.rope_theta = 500000.0;
  return s;
}

const checkpoint::HfPreset& llama_preset() { return checkpoint::hf_preset_of(llama_shape()); }

std::string write(const test::ScratchDir& dir, const std::string& text) {
  const std::string path = dir.file("config.json");
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST_CASE("hf_llama: every model tensor is LlamaForCausalLM's, q|k|v and gate|up split by rows", "[train][hf]") {
  const model::GptShape s = llama_shape();
  const auto tensors = checkpoint::hf_tensors(s, model::HfNaming::llama);
  std::map<std::string, checkpoint::HfTensor> hf;
  for (const auto& t : tensors) hf[t.hf_name] = t;
  REQUIRE(hf.size() == tensors.size());  // no name twice
  // 3 model-level tensors and, per block, 2 norms + q, k, v, o + gate, up, down.
  CHECK(tensors.size() == 3 + 3 * 9);
  using V = std::vector<std::uint64_t>;
  CHECK(hf.at("model.embed_tokens.weight").hf_shape() == V{11, 16});
  CHECK(hf.at("lm_head.weight").hf_shape() == V{11, 16});
  CHECK(hf.at("model.norm.weight").hf_shape() == V{16});
  CHECK(hf.at("model.layers.2.input_layernorm.weight").hf_shape() == V{16});
  CHECK(hf.at("model.layers.2.post_attention_layernorm.weight").hf_shape() == V{16});
  // [Q: nh·d | K: nkv·d | V: nkv·d] = [16 | 8 | 8] rows of the checkpoint's [32, 16].
  const checkpoint::HfTensor& q = hf.at("model.layers.1.self_attn.q_proj.weight");
  const checkpoint::HfTensor& k = hf.at("model.layers.1.self_attn.k_proj.weight");
  const checkpoint::HfTensor& v = hf.at("model.layers.1.self_attn.v_proj.weight");
  CHECK(q.checkpoint_name == "layers/1/attn/qkv/weight");
  CHECK(q.checkpoint_shape == V{32, 16});
  CHECK((q.row_begin == 0 && q.hf_shape() == V{16, 16}));
  CHECK((k.row_begin == 16 && k.hf_shape() == V{8, 16}));
  CHECK((v.row_begin == 24 && v.hf_shape() == V{8, 16}));
  CHECK(hf.at("model.layers.0.self_attn.o_proj.weight").hf_shape() == V{16, 16});
  const checkpoint::HfTensor& gate = hf.at("model.layers.0.mlp.gate_proj.weight");
  const checkpoint::HfTensor& up = hf.at("model.layers.0.mlp.up_proj.weight");
  CHECK(gate.checkpoint_name == "layers/0/mlp/fc/weight");
  CHECK((gate.row_begin == 0 && gate.hf_shape() == V{40, 16}));
  CHECK((up.row_begin == 40 && up.hf_shape() == V{40, 16}));
  CHECK(hf.at("model.layers.0.mlp.down_proj.weight").hf_shape() == V{16, 40});
  for (const auto& t : tensors) CHECK_FALSE(t.transposed);  // nn.Linear's [out, in] in both

  // Tied: no lm_head.weight (save_pretrained leaves a tied weight out); the format names what an
  // lm_head in a file must equal.
  model::GptShape tied = s;
  tied.tie_embeddings = true;
  for (const auto& t : checkpoint::hf_tensors(tied, model::HfNaming::llama)) CHECK(t.hf_name != "lm_head.weight");
  CHECK(checkpoint::hf_format(tied).tied_to == "model.embed_tokens.weight");
  CHECK(checkpoint::hf_format(s).tied_to.empty());
  CHECK(checkpoint::hf_format(s).prefix == "model.");
}

TEST_CASE("hf_llama: the pieces of a fused tensor are its rows, and go back in place", "[train][hf]") {
  const auto tensors = checkpoint::hf_tensors(llama_shape(), model::HfNaming::llama);
  std::map<std::string, std::vector<float>> checkpoint;
  for (const auto& t : tensors) {
    std::uint64_t n = 1;
    for (auto d : t.checkpoint_shape) n *= d;
    std::vector<float>& x = checkpoint[t.checkpoint_name];
    if (x.empty())
      for (std::uint64_t i = 0; i < n; ++i) x.push_back(static_cast<float>(i));
  }
  std::map<std::string, std::vector<float>> rebuilt;
  for (const auto& t : tensors) {
    const std::vector<float>& x = checkpoint.at(t.checkpoint_name);
    const std::vector<float> h = checkpoint::to_hf(t, x);
    const std::uint64_t width = t.checkpoint_shape.size() > 1 ? t.checkpoint_shape[1] : 1;
    REQUIRE(h.size() == t.elements());
    // Element (r, c) of the HF tensor is row row_begin + r of the checkpoint's.
    for (std::uint64_t i = 0; i < h.size(); ++i) REQUIRE(h[i] == x[t.row_begin * width + i]);
    std::vector<float>& back = rebuilt[t.checkpoint_name];
    back.resize(x.size(), -1.0f);
    checkpoint::from_hf(t, h, back);
  }
  CHECK(rebuilt == checkpoint);  // every row written back, by exactly its piece
}

// Llama 3.1's and YaRN's scaled rotary kinds as rope_scaling: written with the kind's keys, read
// back into the kind, compared with the deck key by key.
TEST_CASE("hf_llama: rope_scaling is the scaled rotary kind, written and read back; Mixtral refuses it",
          "[train][hf]") {
  test::ScratchDir dir("hf_llama_rope_scaling");
  model::GptShape s = llama_shape();
  s.position = "llama3";
  s.rope_factor = 8.0;
  s.rope_original_max_positions = 8192;
  std::string text = checkpoint::hf_llama_config(s, checkpoint::hf_preset_of(s));
  CHECK_THAT(text, Contains(R"("rope_scaling": {
    "factor": 8.0,
    "high_freq_factor": 4.0,
    "low_freq_factor": 1.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3"
  })") && Contains("\"max_position_embeddings\": 5"));
  checkpoint::HfLlamaConfig c = checkpoint::read_hf_llama_config(write(dir, text), llama_preset());
  CHECK(c.position == "llama3");
  CHECK(checkpoint::hf_config_mismatch(c, s).empty());
  model::GptShape other = s;
  other.rope_high_freq_factor = 2.0;
  CHECK_THAT(checkpoint::hf_config_mismatch(c, other),
             Equals("config.json rope_scaling.high_freq_factor = 4, the deck's model.rope_high_freq_factor = 2"));
  other = s;
  other.position = "rope";
  CHECK_THAT(checkpoint::hf_config_mismatch(c, other),
             Equals("config.json rope_scaling gives \"llama3\" rotary positions, the deck's model.position = \"rope\""));

  // YaRN: the magnitudes only when given; max_position_embeddings is the scaled context. DeepSeek-V3
  // spells the type "type".
  s.position = "yarn";
  s.rope_factor = 40.0;
  s.rope_original_max_positions = 4096;
  s.rope_mscale = 1.0;
  text = checkpoint::hf_llama_config(s, checkpoint::hf_preset_of(s));
  CHECK_THAT(text, Contains("\"max_position_embeddings\": 163840") && Contains("\"mscale\": 1.0") &&
                       !Contains("mscale_all_dim") && Contains("\"beta_fast\": 32.0") &&
                       Contains("\"rope_type\": \"yarn\""));
  c = checkpoint::read_hf_llama_config(write(dir, text), llama_preset());
  CHECK(c.position == "yarn");
  CHECK(c.rope_keys.at("rope_mscale_all_dim") == 0.0);
  CHECK(checkpoint::hf_config_mismatch(c, s).empty());
  const std::string deepseek = R"({"model_type":"llama","num_hidden_layers":1,"hidden_size":8,"num_attention_heads":2,)"
                               R"("intermediate_size":24,"vocab_size":5,"max_position_embeddings":163840,)"
                               R"("rope_scaling":{"beta_fast":32,"beta_slow":1,"factor":40,"mscale":1.0,)"
                               R"("mscale_all_dim":1.0,"original_max_position_embeddings":4096,"type":"yarn"}})";
  c = checkpoint::read_hf_llama_config(write(dir, deepseek), llama_preset());
  CHECK(c.position == "yarn");
  CHECK(c.rope_keys.at("rope_factor") == 40.0);
  CHECK(c.rope_keys.at("rope_mscale_all_dim") == 1.0);
  CHECK(c.rope_keys.at("rope_original_max_positions") == 4096.0);
  // MixtralConfig has no rope_scaling.
  model::GptShape mixtral = s;
  static_cast<model::BlockSpec&>(mixtral) = model::block_preset("mixtral")->spec;
  mixtral.position = "llama3";
  CHECK_THROWS_WITH(checkpoint::hf_llama_config(mixtral, checkpoint::hf_preset_of(mixtral)),
                    Contains("MixtralForCausalLM has no rope_scaling"));
  // Nor another router than the softmax over every expert, renormalised.
  mixtral.position = "rope";
  mixtral.moe_score_function = "sigmoid";
  mixtral.moe_routed_scaling = 2.5;
  CHECK_THROWS_WITH(checkpoint::hf_llama_config(mixtral, checkpoint::hf_preset_of(mixtral)),
                    Contains("model.moe_score_function = \"sigmoid\", model.moe_routed_scaling = 2.5: "
                             "MixtralForCausalLM's router is a softmax over every expert"));
}

TEST_CASE("hf_llama: config.json describes the model and reads back; other models are refused", "[train][hf]") {
  test::ScratchDir dir("hf_llama_config");
  const model::GptShape s = llama_shape();
  const std::string text = checkpoint::hf_llama_config(s, checkpoint::hf_preset_of(s));
  CHECK_THAT(text, Contains("\"LlamaForCausalLM\"") && Contains("\"model_type\": \"llama\"") &&
                       Contains("\"num_key_value_heads\": 2") && Contains("\"intermediate_size\": 40") &&
                       Contains("\"rope_theta\": 500000.0") && Contains("\"rms_norm_eps\": 1e-06") &&
                       Contains("\"tie_word_embeddings\": false") && Contains("\"hidden_act\": \"silu\"") &&
                       Contains("\"max_position_embeddings\": 5") && Contains("\"rope_scaling\": null") &&
                       Contains("\"head_dim\": 4"));
  const checkpoint::HfLlamaConfig c = checkpoint::read_hf_llama_config(write(dir, text), llama_preset());
  CHECK(c.layers == 3);
  CHECK(c.kv_heads == 2);
  CHECK(checkpoint::hf_config_mismatch(c, s).empty());
  model::GptShape other = s;
  other.kv_heads = 4;
  other.rope_theta = 10000.0;
  other.tie_embeddings = true;
  const std::string diff = checkpoint::hf_config_mismatch(c, other);
  CHECK_THAT(diff, Contains("config.json num_key_value_heads = 2, the deck's model.kv_heads = 4"));
  CHECK_THAT(diff, Contains("config.json rope_theta = 500000, the deck's model.rope_theta = 10000"));
  CHECK_THAT(diff, Contains("config.json tie_word_embeddings = false, the deck's model.tie_embeddings = true"));
  // LlamaConfig's defaults: num_key_value_heads null or absent is num_attention_heads, rope_theta
  // 10000, rms_norm_eps 1e-6, untied.
  const std::string base = R"({"model_type":"llama","num_hidden_layers":1,"hidden_size":8,"num_attention_heads":2,)"
                           R"("intermediate_size":24,"vocab_size":5,"max_position_embeddings":4)";
  const checkpoint::HfLlamaConfig d = checkpoint::read_hf_llama_config(write(dir, base + R"(,"num_key_value_heads":null})"), llama_preset());
  CHECK(d.kv_heads == 2);
  CHECK(d.rope_theta == 10000.0);
  CHECK(d.norm_eps == 1e-6);
  CHECK_FALSE(d.tie_embeddings);
  const std::vector<std::pair<std::string, std::string>> refused{
      {R"(,"hidden_act":"gelu"})", "hidden_act = \"gelu\""},
      {R"(,"attention_bias":true})", "attention_bias = true"},
      {R"(,"mlp_bias":true})", "mlp_bias = true"},
      {R"(,"rope_scaling":{"rope_type":"llama3","factor":8.0}})", "rope_scaling has no low_freq_factor"},
      {R"(,"rope_scaling":{"rope_type":"linear","factor":2.0}})", "rope_scaling's rope_type is \"linear\""},
      {R"(,"rope_scaling":{"type":"dynamic","factor":2.0}})", "rope_scaling's rope_type is \"dynamic\""},
      {R"(,"rope_scaling":{"rope_type":"yarn","factor":4.0,"attention_factor":1.2}})",
       "rope_scaling.attention_factor = 1.2: tptrain's \"yarn\" scaling has no such field"},
      {R"(,"rope_scaling":{"rope_type":"yarn","factor":4.0,"low_freq_factor":1.0}})",
       "rope_scaling.low_freq_factor = 1: tptrain's \"yarn\" scaling has no such field"},
      {R"(,"rope_scaling":{"rope_type":"yarn","factor":4.0,"truncate":false}})", "rope_scaling.truncate = false"},
      {R"(,"rope_scaling":{"rope_type":"yarn","factor":4.0,"original_max_position_embeddings":2}})",
       "max_position_embeddings / rope_scaling.original_max_position_embeddings = 4 / 2 differs from "
       "rope_scaling.factor = 4"},
      {R"(,"rope_scaling":{"rope_type":"yarn"}})", "rope_scaling has no factor"},
      {R"(,"rope_scaling":[1]})", "rope_scaling = [1]: expected an object or null"},
      {R"(,"rope_scaling":{"rope_type":"llama3","factor":"8"}})", "rope_scaling.factor is not a number"},
      {R"(,"head_dim":8})", "head_dim = 8"},
      {R"(,"num_key_value_heads":0})", "num_key_value_heads = 0: expected a positive integer"},
      {R"(,"rope_theta":"big"})", "rope_theta = \"big\": expected a number"},
  };
  for (const auto& [extra, message] : refused) {
    CAPTURE(extra);
    CHECK_THROWS_WITH(checkpoint::read_hf_llama_config(write(dir, base + extra), llama_preset()), Contains(message) && Contains("config.json"));
  }
  CHECK_THROWS_WITH(checkpoint::read_hf_llama_config(write(dir, R"({"model_type":"gpt2"})"), llama_preset()), Contains("model_type is \"gpt2\""));
  CHECK_THROWS_WITH(checkpoint::read_hf_llama_config(write(dir, R"({"model_type":"llama"})"), llama_preset()), Contains("no num_hidden_layers"));
}
