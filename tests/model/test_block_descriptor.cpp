// The block descriptor (src/model/spec/block_descriptor.hpp) against what it describes: the
// Parameters the layers make, every buffer a model stage allocates (name, shape, bytes, category,
// for each recompute mode, precision, sequence parallelism and micro-batches in flight), and the
// docs' tables, which are its rows printed. TPTRAIN_UPDATE_DOCS=1 rewrites those tables in
// place instead of failing (after a change to the descriptor).
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "catch.hpp"
#include "src/model/spec/block_descriptor.hpp"
#include "src/model/spec/model_parameters.hpp"
#include "tests/model/model_test_util.hpp"

using namespace tptrain;
using model::BufferDim;
using model::BufferRow;
using model::Lifetime;
using model::ParameterDim;
using model::ParameterRow;
using model::Recompute;

namespace {

// A shape whose sizes mostly differ, so that a buffer with a wrong extent does not match by
// accident: b 3 (kBatch), s 12, h 32, f 48, a 4; tensor t (1, 2 or 4).
constexpr int kBatch = 3;
model::GptShape distinct_shape(int t, bool sequence_parallel) {
  model::GptShape s;
  s.layers = 4;
  s.hidden = 32;
  s.heads = 4;
  s.ffn_hidden = 48;
  s.seq_length = 12;
  s.vocab_size = 37;
  s.tensor = t;
  s.sequence_parallel = sequence_parallel;
  return s;
}
// Every preset of the block specification (src/model/spec/block_spec.hpp) on that shape, those with rotary
// positions with grouped-query attention (2 key/value heads where the tensor size allows, t <= 2;
// at t = 4 every rank needs a whole key/value head: 4), multi-head latent attention's with and
// without the queries' latent; and GPT-2 untied.
std::vector<model::GptShape> shapes(int t, bool sequence_parallel) {
  std::vector<model::GptShape> out;
  std::size_t n = 0;
  const model::BlockPreset* presets = model::block_presets(n);
  for (std::size_t i = 0; i < n; ++i) {
    model::GptShape s = distinct_shape(t, sequence_parallel);
    static_cast<model::BlockSpec&>(s) = presets[i].spec;
    if (s.latent_attention()) {  // latents r_q 10, r_kv 14; heads of 6 + 4 and 5 features
      s.q_lora_rank = 10;
      s.kv_lora_rank = 14;
      s.qk_nope_head_dim = 6;
      s.qk_rope_head_dim = 4;
      s.v_head_dim = 5;
      out.push_back(s);
      s.q_lora_rank = 0;  // and one query projection
    } else if (s.position == "rope") {
      s.kv_heads = t <= 2 ? 2 : 4;
    }
    out.push_back(s);
  }
  model::GptShape untied = distinct_shape(t, sequence_parallel);
  untied.tie_embeddings = false;
  out.push_back(untied);
  return out;
}

// Every buffer of stage `stage` of a model, against the descriptor: each row where it must be,
// and nothing else besides the stage's and the head's own tensors.
template <class T>
void check_buffers(const model::GptShape& shape, int micro_batch, Recompute mode, model::PipelineStage stage,
                   int slots, parallel::Communicator& tp) {
  model::GptModel<T> m(shape, micro_batch, tp, 1, stage, mode);
  m.reserve_slots(slots);
  std::map<std::string, typename model::Workspace<T>::Entry> entries;
  for (const auto& e : m.workspace().entries()) {
    INFO(e.name);
    CHECK(entries.emplace(e.name, e).second);  // one entry per name
  }
  const model::BlockSizes z = model::block_sizes(shape, micro_batch);
  std::set<std::string> described;
  const auto expect = [&](const std::string& name, const BufferRow& r, model::BufferCategory category) {
    INFO("buffer " << name << " (" << r.what << ")");
    described.insert(name);
    const auto it = entries.find(name);
    if (r.only_16_bit && sizeof(T) >= 4) {
      CHECK(it == entries.end());
      return;
    }
    REQUIRE(it != entries.end());
    CHECK(it->second.shape == model::buffer_shape(r, z));
    CHECK(static_cast<std::int64_t>(it->second.bytes) == model::buffer_bytes(r, z, sizeof(T)));
    CHECK(it->second.category == category);
  };
  for (const BufferRow& r : model::block_buffer_rows(shape)) {
    if (r.lifetime == Lifetime::scratch) {
      expect(r.name, r, model::BufferCategory::scratch);
      continue;
    }
    if (model::in_recompute_working_set(r, mode)) expect(std::string("recompute.block") + r.name, r,
                                                         model::BufferCategory::scratch);
    if (!model::kept_per_layer(r, mode)) continue;
    for (int k = 0; k < slots; ++k)
      for (int l = m.first_layer(); l < m.first_layer() + m.local_layers(); ++l) {
        const std::string slot = k == 0 ? "" : "#" + std::to_string(k);
        if (r.lifetime == Lifetime::input)
          expect("residual." + std::to_string(l) + slot, r, model::BufferCategory::activation);
        else
          expect("layers/" + std::to_string(l) + slot + r.name, r, model::BufferCategory::activation);
      }
  }
  // The rest is the stage's and the head's own: its output (the residual stream after its last
  // block), the gradient ping-pong, the loss head, the shared sequence-parallel and column-sum
  // buffers. Anything else is a block buffer the descriptor lacks.
  const std::string output = "residual." + std::to_string(m.first_layer() + m.local_layers());
  // The attention's and the MLP's scratch: one region, as large as the larger part.
  const auto region = entries.find("block.phase_scratch");
  if (region != entries.end()) {
    described.insert(region->first);
    CHECK(static_cast<std::int64_t>(region->second.bytes) == model::phase_region_bytes(shape, z, sizeof(T)));
  }
  for (const auto& [name, e] : entries) {
    if (described.count(name) != 0) continue;
    const bool own = name.rfind(output, 0) == 0 || name == "residual_grad" || name == "residual_grad_next" || name == "column_sums" ||
                     name.rfind("ln_f.", 0) == 0 || name.rfind("lm_head.", 0) == 0 ||
                     name.rfind("sequence_parallel.", 0) == 0;
    INFO("buffer " << name << " is in no row of the block descriptor (src/model/spec/block_descriptor.hpp)");
    CHECK(own);
  }
}

std::string join(const std::vector<std::string>& parts, const char* separator) {
  std::string s;
  for (const std::string& p : parts) s += (s.empty() ? "" : separator) + p;
  return s;
}

// ---- the docs' tables, printed from the rows -----------------------------------------------------

const char* symbol(ParameterDim d) {
  switch (d) {
    case ParameterDim::hidden: return "H";
    case ParameterDim::hidden2: return "2H";
    case ParameterDim::qkv: return "(nh+2nkv)·d";  // 3H without grouped-query attention
    case ParameterDim::kv: return "nkv·d";
    case ParameterDim::ffn2: return "2F";
    case ParameterDim::ffn: return "F";
    case ParameterDim::vocab: return "V";
    case ParameterDim::seq: return "S";
    case ParameterDim::experts: return "E";
    case ParameterDim::expert_ffn: return "F_e";
    case ParameterDim::expert_ffn2: return "2F_e";
    case ParameterDim::shared_ffn: return "n_s·F_e";
    case ParameterDim::shared_ffn2: return "2n_s·F_e";
    case ParameterDim::q_lora: return "r_q";
    case ParameterDim::kv_lora: return "r_kv";
    case ParameterDim::kv_latent: return "r_kv+d_R";
    case ParameterDim::mla_q: return "nh·d_q";
    case ParameterDim::mla_kv: return "nh·(d_nope+d_v)";
    case ParameterDim::mla_o: return "nh·d_v";
    case ParameterDim::none: break;
  }
  return "";
}

const char* symbol(BufferDim d) {
  switch (d) {
    case BufferDim::b: return "b";
    case BufferDim::local_seq: return "s";
    case BufferDim::seq: return "S";
    case BufferDim::tokens: return "N";
    case BufferDim::residual_rows: return "n";
    case BufferDim::h: return "h";
    case BufferDim::h_t: return "(h/t)";
    case BufferDim::kv2_t: return "(2k·h/a/t)";
    case BufferDim::gqa_t: return "((a+2k)·h/a/t)";
    case BufferDim::f2_t: return "(2f/t)";
    case BufferDim::d_2: return "(d_R/2)";  // d_R = h/a but in MLA
    case BufferDim::f_t: return "(f/t)";
    case BufferDim::a_t: return "(a/t)";
    case BufferDim::token_heads_t: return "N·(a/t)";
    case BufferDim::tile: return "min(s, 128)";
    case BufferDim::q_lora: return "r_q";
    case BufferDim::kv_latent: return "(r_kv+d_R)";
    case BufferDim::mla_qkv_t: return "(a·(2d_q+d_v)/t)";
    case BufferDim::mla_kv_t: return "(a·(d_nope+d_v)/t)";
    case BufferDim::mla_kv2_t: return "(a·(d_q+d_v)/t)";
    case BufferDim::mla_q_t: return "(a·d_q/t)";
    case BufferDim::mla_o_t: return "(a·d_v/t)";
    case BufferDim::none: break;
  }
  return "";
}

std::string shape_text(const ParameterRow& r) {
  std::vector<std::string> dims;
  for (const ParameterDim d : r.shape)
    if (d != ParameterDim::none) dims.push_back(symbol(d));
  return "[" + join(dims, ", ") + "]";
}

std::string split_text(const ParameterRow& r) {
  switch (r.split) {
    case model::TensorSplit::replicated: return "replicated";
    case model::TensorSplit::column:
      return r.blocks == 1 ? "column-parallel: dim 0"
                           : fmt::format("column-parallel: dim 0, each of its {} blocks", r.blocks);
    case model::TensorSplit::row: return "row-parallel: dim 1";
  }
  return "";
}

std::string init_text(const model::Init& i) {
  switch (i.kind) {
    case model::Init::normal: return fmt::format("N(0, {:g}²)", i.value);
    case model::Init::residual_normal: return fmt::format("N(0, ({:g}/√(2L))²)", i.value);
    case model::Init::constant: return fmt::format("{:g}", i.value);
  }
  return "";
}

// When a row is held: its kind's choice (model.mlp = "gelu"; none for the block's own rows) and
// its needs.
std::string held_text(unsigned needs, const model::SublayerKind* kind = nullptr) {
  std::string t = kind ? fmt::format("{} = \"{}\"", model::slot_key(kind->slot), kind->name) : "";
  const std::string more = model::needs_text(needs);
  if (!more.empty()) t += (t.empty() ? "" : " and ") + more;
  return t.empty() ? "always" : "`" + t + "`";
}

std::string parameter_line(const std::string& prefix, const ParameterRow& r, const std::string& held) {
  return fmt::format("| `{}{}` | {} | {} | {} | {} | {} | {} |", prefix, r.name, shape_text(r), split_text(r),
                     r.sequence_parallel_sum ? "yes" : "no", r.weight_decay ? "yes" : "no", init_text(r.init), held);
}

// Every row of the tables, with its prefix (the embedding, the blocks, the head) and when it is
// held, in the model's order: the kinds' rows (the registry's, sublayer_kinds.hpp) at their places.
template <class F>
void for_each_row(F&& f) {
  // A row the slot's kinds share (a norm's weight: the same row, Hugging Face names included)
  // once, held with any of them.
  const auto kinds_at = [&](const model::SublayerPlace& place, const std::string& prefix) {
    std::vector<std::pair<ParameterRow, std::string>> rows;
    for (const model::SublayerKind* k : model::kSublayerKinds)
      if (k->slot == place.slot)
        for (const ParameterRow& r : k->parameters) {
          const ParameterRow placed = model::placed_row(r, place);
          const auto same = std::find_if(rows.begin(), rows.end(), [&](const auto& row) {
            const ParameterRow& a = row.first;
            return std::string(a.name) == placed.name && a.shape[0] == placed.shape[0] &&
                   a.shape[1] == placed.shape[1] && a.split == placed.split &&
                   a.sequence_parallel_sum == placed.sequence_parallel_sum && a.weight_decay == placed.weight_decay &&
                   a.init.kind == placed.init.kind && a.init.value == placed.init.value &&
                   std::string(a.hf) == placed.hf;
          });
          if (same == rows.end()) rows.emplace_back(placed, held_text(r.needs, k));
          else same->second += " or " + held_text(r.needs, k);
        }
    for (const auto& [r, held] : rows) f(prefix, r, held);
  };
  for (const ParameterRow& r : model::kEmbeddingParameters) f("", r, held_text(r.needs));
  kinds_at(model::kEmbeddingPositionPlace, "");
  for (const model::SublayerPlace& place : model::kPreNorm.places) kinds_at(place, "layers/<i>/");
  kinds_at(model::kFinalNormPlace, "");
  for (const ParameterRow& r : model::kHeadParameters) f("", r, held_text(r.needs));
}

// Every buffer row of a block, with when it is allocated (as for_each_row).
template <class F>
void for_each_buffer_row(F&& f) {
  for (const BufferRow& r : model::kBlockBuffers) f(r, held_text(r.needs));
  std::vector<model::SublayerPlace> places(model::kPreNorm.places.begin(), model::kPreNorm.places.end());
  places.push_back(model::kEmbeddingPositionPlace);
  // A row the slot's kinds share (the rotary kinds' tables: the same row) once, held with any of them.
  for (const model::SublayerPlace& place : places) {
    std::vector<std::pair<const BufferRow*, std::string>> rows;
    for (const model::SublayerKind* k : model::kSublayerKinds)
      if (k->slot == place.slot)
        for (const BufferRow& r : k->buffers) {
          const auto same = std::find_if(rows.begin(), rows.end(), [&](const auto& row) { return row.first == &r; });
          if (same == rows.end()) rows.emplace_back(&r, held_text(r.needs, k));
          else same->second += " or " + held_text(r.needs, k);
        }
    for (const auto& [r, held] : rows) f(model::placed_row(*r, place), held);
  }
}

// docs/design.md: every tensor a model may hold, with its descriptor row and the choices of the
// block specification that hold it.
std::string model_tensor_table() {
  std::string t =
      "| tensor | logical shape | tensor-parallel split | gradient summed over the sequence-parallel group "
      "| weight decay | initial value | held when |\n|---|---|---|---|---|---|---|\n";
  for_each_row([&](const std::string& prefix, const ParameterRow& r, const std::string& held) {
    t += parameter_line(prefix, r, held) + "\n";
  });
  return t;
}

// docs/design.md: each row's Hugging Face names, a column per naming family (model::kHfNamings),
// headed by the architectures that use it (src/checkpoint/hf_presets.cpp).
std::string hf_name_table() {
  std::string t = "| tensor | held when | GPT2LMHeadModel | LlamaForCausalLM, Qwen2ForCausalLM, MixtralForCausalLM "
                  "| DeepseekV3ForCausalLM |\n|---|---|---|---|---|\n";
  const auto name = [](const model::HfName& n) {
    if (n.pattern == nullptr) return std::string("—");
    std::string out;
    std::string p = n.pattern;
    for (std::size_t at = 0;;) {
      const std::size_t bar = p.find('|', at);
      out += (out.empty() ? "" : ", ") + std::string("`") + p.substr(at, bar - at) + "`";
      if (bar == std::string::npos) break;
      at = bar + 1;
    }
    return out + (n.transposed ? " (transposed)" : "");
  };
  for_each_row([&](const std::string& prefix, const ParameterRow& r, const std::string& held) {
    t += fmt::format("| `{}{}` | {} |", prefix, r.name, held);
    for (const model::HfNaming family : model::kHfNamings) t += " " + name(model::hf_name(r, family)) + " |";
    t += "\n";
  });
  return t;
}

// docs/checkpoints.md: the datasets under /model.
std::string checkpoint_dataset_table() {
  std::string t = "| dataset under `/model` | shape | held when |\n|---|---|---|\n";
  for_each_row([&](const std::string& prefix, const ParameterRow& r, const std::string& held) {
    t += fmt::format("| `{}{}` | {} | {} |\n", prefix, r.name, shape_text(r), held);
  });
  return t;
}

std::string bytes_text(const BufferRow& r) {
  std::vector<std::string> factors;
  for (const BufferDim d : r.shape)
    if (d != BufferDim::none) factors.push_back(symbol(d));
  factors.push_back(r.element == model::Element::fp32 ? "4" : "e");
  return join(factors, "·");
}

std::string kept_text(const BufferRow& r) {
  switch (r.lifetime) {
    case Lifetime::input: return "none, selective, full";
    case Lifetime::saved: return "none, selective; full: once per stage";
    case Lifetime::saved_if_none: return "none";
    case Lifetime::scratch: break;
  }
  return "";
}

// docs/planning.md: what a block keeps per micro-batch, and its share of the stage's workspace.
std::string block_activation_table() {
  std::string t = "| buffer | bytes | kept with recompute | allocated when |\n|---|---|---|---|\n";
  for_each_buffer_row([&](const BufferRow& r, const std::string& held) {
    if (r.lifetime != Lifetime::scratch)
      t += fmt::format("| {} | {} | {} | {} |\n", r.what, bytes_text(r), kept_text(r), held);
  });
  return t;
}
std::string block_scratch_table() {
  std::string t = "| buffer | bytes | allocated when | part |\n|---|---|---|---|\n";
  for_each_buffer_row([&](const BufferRow& r, const std::string& held) {
    if (r.lifetime == Lifetime::scratch)
      t += fmt::format("| {} | {} | {}{} | {} |\n", r.what, bytes_text(r), held, r.only_16_bit ? " (bf16/fp16 only)" : "",
                       r.phase == model::ScratchPhase::block       ? "block"
                       : r.phase == model::ScratchPhase::attention ? "attention"
                                                                   : "MLP");
  });
  return t;
}

// The text between "<!-- generated: NAME ... -->" and "<!-- end of generated: NAME -->" in
// docs/FILE must be `table`; with TPTRAIN_UPDATE_DOCS set, it becomes it.
void check_generated(const std::string& file, const std::string& name, const std::string& table) {
  const std::string path = std::string(TPTRAIN_SOURCE_DIR) + "/docs/" + file;
  std::ifstream in(path);
  REQUIRE(in);
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string text = buffer.str();
  const std::string begin_mark = "<!-- generated: " + name, end_mark = "<!-- end of generated: " + name + " -->";
  INFO(path << ": the table " << name);
  const std::size_t begin = text.find(begin_mark);
  REQUIRE(begin != std::string::npos);
  const std::size_t start = text.find("-->\n", begin);
  REQUIRE(start != std::string::npos);
  const std::size_t end = text.find(end_mark, start);
  REQUIRE(end != std::string::npos);
  const std::string found = text.substr(start + 4, end - start - 4);
  if (found != table && std::getenv("TPTRAIN_UPDATE_DOCS") != nullptr) {
    text.replace(start + 4, end - start - 4, table);
    std::ofstream(path) << text;
    WARN(path << ": rewrote the table " << name);
    return;
  }
  INFO("expected (TPTRAIN_UPDATE_DOCS=1 writes it):\n" << table);
  CHECK(found == table);
}

}  // namespace

TEST_CASE("block descriptor: every parameter the layers make is its row, in its order", "[model][mpi]") {
  const int n = test::world_size();
  for (const int t : {1, n}) {
    if (t > 4) continue;
    auto tp = test::tp_group(t);
    for (const bool sp : {false, true}) {
      for (const model::GptShape& shape : shapes(t, sp)) {
      INFO("tensor " << t << (sp ? ", sequence parallel" : "") << ", " << shape.architecture
                     << (shape.tie_embeddings ? ", tied" : ", untied"));
      model::GptModel<float> m(shape, kBatch, *tp, 1);
      const std::vector<model::LogicalTensor> logical = model::logical_tensors(shape);
      const auto params = m.parameters();
      REQUIRE(params.size() == logical.size());
      REQUIRE(logical.size() == model::embedding_parameter_rows(shape).size() +
                                   model::block_parameter_rows(shape).size() * shape.layers +
                                   model::head_parameter_rows(shape).size());
      for (std::size_t i = 0; i < params.size(); ++i) {
        const model::Parameter<float>& p = *params[i];
        const model::ParameterSpec spec = model::model_parameter(shape, logical[i].name);
        INFO(spec.name);
        CHECK(p.name == spec.name);
        CHECK(p.shape == spec.shape);
        CHECK(p.saved_rows == spec.saved_rows);
        CHECK(p.sharding.dim == spec.split_dim());
        CHECK(p.sharding.blocks == spec.blocks);
        for (int b = 0; b < spec.blocks && p.sharding.dim >= 0; ++b)
          CHECK(p.sharding.extent[b] == (spec.block_extents.empty() ? spec.shape[std::size_t(spec.split_dim())] / spec.blocks
                                                                    : spec.block_extents[std::size_t(b)]));
        CHECK(p.local_size() == spec.local_elements(t));
        CHECK(p.weight_decay == spec.weight_decay);
        CHECK(p.init_std == spec.init_std);
        CHECK(p.init_const == spec.init_const);
        CHECK(p.sequence_parallel_gradient == spec.sequence_parallel_gradient);
      }
      }
    }
  }
  // Llama's unequal QKV blocks: [Q 32 | K 16 | V 16] rows of a 4-head, 2-key/value-head model.
  const model::GptShape llama = shapes(1, false).at(1);
  REQUIRE(llama.architecture == "llama");
  const model::ParameterSpec qkv = model::block_parameter(llama, "layers/0/attn/qkv/weight");
  CHECK(qkv.shape == std::vector<std::int64_t>{64, 32});
  CHECK(qkv.block_extents == std::vector<std::int64_t>{32, 16, 16});
  CHECK(model::block_parameter(llama, "layers/0/mlp/fc/weight").block_extents == std::vector<std::int64_t>{48, 48});
  // Each block's bucket holds the block's parameters in the descriptor's order.
  auto self = test::tp_group(1);
  model::GptModel<float> m(distinct_shape(1, false), kBatch, *self, 1);
  for (const auto& bucket : m.buckets()) {
    if (bucket.name.rfind("layers/", 0) != 0) continue;
    const std::vector<ParameterRow> rows = model::block_parameter_rows(distinct_shape(1, false));
    REQUIRE(bucket.params.size() == rows.size());
    for (std::size_t i = 0; i < bucket.params.size(); ++i)
      CHECK(bucket.params[i]->name == bucket.name + "/" + rows[i].name);
  }
}

TEST_CASE("block descriptor: a name without a row is refused", "[model]") {
  const model::GptShape shape = distinct_shape(1, false);
  CHECK(model::block_parameter(shape, "layers/7/attn/qkv/weight").name == "layers/7/attn/qkv/weight");
  CHECK(model::block_parameter(shape, "attn/qkv/weight").shape == std::vector<std::int64_t>{96, 32});
  CHECK(model::model_parameter(shape, "embedding/word").saved_rows == 37);
  CHECK_THROWS_AS(model::block_parameter(shape, "layers/0/attn/qkv/scale"), std::logic_error);
  CHECK_THROWS_WITH(model::model_parameter(shape, "layers/0/mlp/gate/weight"),
                    test::contains("layers/0/mlp/gate/weight has no row in the block descriptor"));
}

TEST_CASE("block descriptor: every buffer a model stage allocates is its row, or the stage's own",
          "[model][mpi]") {
  const int n = test::world_size();
  for (const int t : {1, n}) {
    if (t > 4) continue;
    auto tp = test::tp_group(t);
    for (const bool sp : {false, true})
      for (const Recompute mode : {Recompute::none, Recompute::selective, Recompute::full})
        for (const int slots : {1, 3})
          for (const int stages : {1, 2})
            for (const model::GptShape& shape : shapes(t, sp)) {
            INFO(shape.architecture << ", tensor " << t << (sp ? ", sequence parallel" : "") << ", recompute " << model::recompute_name(mode)
                           << ", " << slots << " micro-batches in flight, " << stages << " stages");
            for (int stage = 0; stage < stages; ++stage) {
              check_buffers<float>(shape, kBatch, mode, {stage, stages}, slots, *tp);
              check_buffers<kx::bf16>(shape, kBatch, mode, {stage, stages}, slots, *tp);
            }
          }
  }
}

TEST_CASE("block descriptor: the docs' tables are its rows", "[model][docs]") {
  check_generated("design.md", "model tensors", model_tensor_table());
  check_generated("design.md", "Hugging Face names", hf_name_table());
  check_generated("checkpoints.md", "checkpoint datasets", checkpoint_dataset_table());
  check_generated("planning.md", "block activations", block_activation_table());
  check_generated("planning.md", "block workspace", block_scratch_table());
}
