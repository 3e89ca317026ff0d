// One transformer block — of any block specification (src/model/spec/block_spec.hpp) — described once (docs/design.md, "The block descriptor"): its
// parameters and the buffers its forward and backward use. What reads it:
//   the layers          make their Parameters from its rows (block_parameter) and list them in
//                       its order (TransformerLayer::parameters), the order of the buckets;
//   the checkpoints     name and shape their datasets from it (model::logical_tensors);
//   the planner         counts a rank's parameters and activation bytes from it
//                       (src/plan/parameter_count.cpp, src/plan/activation_memory.cpp);
//   the tests           hold the model's allocations and the docs' tables to it
//                       (tests/model/test_block_descriptor.cpp).
// Adding a parameter to the block is a row here plus its use in the layer; adding a saved or
// scratch buffer is a row here plus its allocation in the layer.
#pragma once

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "src/model/spec/gpt_shape.hpp"
#include "src/model/spec/parameter_spec.hpp"
#include "src/model/spec/recompute.hpp"
#include "src/model/spec/scratch_phase.hpp"
#include "src/model/spec/sublayer_kinds.hpp"

namespace tptrain::model {

// ---- the blocks' shapes ------------------------------------------------------------------------

// Block `layer`'s shape: s, except that DeepSeek-V3's first model.moe_dense_layers blocks
// (first_k_dense_replace) have a dense SwiGLU of model.ffn_hidden where the others have the
// mixture. Every reader of a block's rows asks for its shape by index (block_parameters,
// block_parameter, the model's layers, the planner).
inline GptShape block_shape(const GptShape& s, int layer) {
  if (layer >= s.moe_dense_layers || !mlp_kind(s).mlp.routed) return s;
  GptShape dense = s;
  dense.mlp = "swiglu";
  return dense;
}
// The dense first blocks among the `count` blocks from `first` on (a pipeline chunk's): those
// below model.moe_dense_layers, with a mixture of experts.
inline int dense_blocks_in(const GptShape& s, int first, int count) {
  const int dense = mlp_kind(s).mlp.routed ? std::min(s.moe_dense_layers, s.layers) : 0;
  return std::clamp(dense - first, 0, count);
}
// The distinct shapes of s's blocks, each with the blocks that have it (a model without dense
// layers: s, all of them).
struct BlockShapeCount {
  GptShape shape;
  int blocks;
};
inline std::vector<BlockShapeCount> block_shapes(const GptShape& s) {
  const int dense = dense_blocks_in(s, 0, s.layers);
  std::vector<BlockShapeCount> out;
  if (dense > 0) out.push_back({block_shape(s, 0), dense});
  if (dense < s.layers) out.push_back({s, s.layers - dense});
  return out;
}
// Block `layer` of name "layers/<layer>/...", or -1 (a row name, or a tensor outside the blocks).
inline int layer_of(const std::string& name) {
  if (name.rfind("layers/", 0) != 0) return -1;
  const std::size_t slash = name.find('/', 7);
  if (slash == std::string::npos || slash == 7) return -1;
  for (std::size_t i = 7; i < slash; ++i)
    if (name[i] < '0' || name[i] > '9') return -1;
  return std::stoi(name.substr(7, slash - 7));
}

// ---- parameters ------------------------------------------------------------------------------

// A block's residual pattern (BlockSpec::residual): how it joins its kinds, as the places they
// fill (sublayer_kind.hpp) in the block's order, which is the checkpoint's and the gradient
// bucket's, with their Hugging Face modules (the norms'; the others' names are whole in their
// kinds' rows). The block's forward and backward for the pattern: transformer_layer.hpp.
struct ResidualPattern {
  const char* name;
  const char* what;
  RowSpan<SublayerPlace> places;
};
// Pre-norm (GPT-2, Llama; Xiong et al. 2020): h = x + attn(ln_1(x)), y = h + mlp(ln_2(h)).
inline constexpr SublayerPlace kPreNormPlaces[] = {
    {SublayerSlot::norm, "ln_1",
     "gpt2=transformer.h.{i}.ln_1 llama=model.layers.{i}.input_layernorm deepseek=model.layers.{i}.input_layernorm"},
    {SublayerSlot::attention, "attn"},
    {SublayerSlot::norm, "ln_2",
     "gpt2=transformer.h.{i}.ln_2 llama=model.layers.{i}.post_attention_layernorm "
     "deepseek=model.layers.{i}.post_attention_layernorm"},
    {SublayerSlot::mlp, "mlp"},
};
inline constexpr ResidualPattern kPreNorm{"pre_norm", "h = x + attn(ln_1(x)), y = h + mlp(ln_2(h))", kPreNormPlaces};
inline constexpr const ResidualPattern* kResidualPatterns[] = {&kPreNorm};

// The pattern shape s's specification names.
inline const ResidualPattern& residual_pattern(const ModelShape& s) {
  for (const ResidualPattern* p : kResidualPatterns)
    if (s.residual == p->name) return *p;
  throw std::logic_error("tptrain: no residual pattern \"" + s.residual +
                         "\" (src/model/spec/block_descriptor.hpp, kResidualPatterns)");
}

// The rows of the kind shape s's specification puts at `place`, placed there (placed_row).
inline std::vector<ParameterRow> kind_parameter_rows(const ModelShape& s, const SublayerPlace& place) {
  std::vector<ParameterRow> rows;
  for (const ParameterRow& r : kind_in(place.slot, s).parameters) rows.push_back(placed_row(r, place));
  return rows;
}
inline std::vector<BufferRow> kind_buffer_rows(const ModelShape& s, const SublayerPlace& place) {
  std::vector<BufferRow> rows;
  for (const BufferRow& r : kind_in(place.slot, s).buffers) rows.push_back(placed_row(r, place));
  return rows;
}

// The tables of the block's rows in checkpoint order, which is also the order of the block's
// gradient bucket (a changed order moves parameters within the bucket's flat buffers, hence the
// distributed optimizer's shards): its kinds' at the places of its residual pattern (pre-norm:
// ln_1, the attention, ln_2, the MLP). A specification holds the rows whose `needs` it meets
// (parameter_spec.hpp): GPT-2 all of its kinds', Llama the weights (and attn/qkv/bias with
// model.qkv_bias).
inline std::vector<std::vector<ParameterRow>> block_parameter_tables(const GptShape& s) {
  std::vector<std::vector<ParameterRow>> tables;
  for (const SublayerPlace& place : residual_pattern(s).places) tables.push_back(kind_parameter_rows(s, place));
  return tables;
}

// The rows shape s's specification holds, in checkpoint (and bucket) order. The rows of each
// expert (ParameterRow::per_expert, consecutive in a table) are expanded expert by expert:
// mlp/experts/0/fc/weight, mlp/experts/0/proj/weight, mlp/experts/1/fc/weight, ...
inline std::vector<ParameterRow> block_parameter_rows(const GptShape& s) {
  std::vector<ParameterRow> rows;
  for (const std::vector<ParameterRow>& table : block_parameter_tables(s)) {
    const std::size_t n = table.size();
    for (std::size_t i = 0; i < n; ++i) {
      const ParameterRow& r = table[i];
      if (!holds(r.needs, s)) continue;
      if (!r.per_expert) {
        rows.push_back(r);
        continue;
      }
      std::size_t end = i;
      while (end < n && table[end].per_expert) ++end;
      for (int e = 0; e < s.experts; ++e)
        for (std::size_t j = i; j < end; ++j) rows.push_back(expert_row(table[j], e));
      i = end - 1;
    }
  }
  return rows;
}

// The rows shape s's specification holds, in the tables' order, each expert's rows once and
// unexpanded ("{e}" left in their names; ParameterRow::per_expert marks them). Every expert's rows
// have the same shapes, so a count over the block is its dense rows plus E (or E / ep, or k) times
// one expert's: the planner counts that way (src/plan/parameter_count.cpp, model_flops.hpp), in
// time and memory independent of model.experts, where block_parameter_rows makes E copies.
inline std::vector<ParameterRow> block_parameter_kinds(const GptShape& s) {
  std::vector<ParameterRow> rows;
  for (const std::vector<ParameterRow>& table : block_parameter_tables(s))
    for (const ParameterRow& r : table)
      if (holds(r.needs, s)) rows.push_back(r);
  return rows;
}

// The expert a block parameter row belongs to ("mlp/experts/<e>/..."), or -1 (a dense row).
inline int expert_of_row(const std::string& row) {
  static const std::string prefix = "mlp/experts/";
  if (row.rfind(prefix, 0) != 0) return -1;
  return std::stoi(row.substr(prefix.size()));
}
// Whether expert-parallel rank `ep_rank` holds block parameter row `row`: every dense row, and
// the rows of its experts [first_expert(ep_rank), + local_experts()).
inline bool held_by_expert_rank(const GptShape& s, const std::string& row, int ep_rank) {
  const int e = expert_of_row(row);
  return e < 0 || (e >= first_expert(s, ep_rank) && e < first_expert(s, ep_rank) + local_experts(s));
}

// Block `layer`'s parameters for shape s, in the table's order, named layers/<layer>/<row>.
inline std::vector<ParameterSpec> block_parameters(const GptShape& s, int layer) {
  std::vector<ParameterSpec> out;
  const std::string prefix = "layers/" + std::to_string(layer) + "/";
  const GptShape block = block_shape(s, layer);
  for (const ParameterRow& r : block_parameter_rows(block)) out.push_back(spec_of(r, block, prefix));
  return out;
}

// The block parameter `name`: "layers/<i>/<row name>" (of block i's shape), or the row name
// itself (a part of a block built on its own, as the layer tests do: "attn/qkv/weight"; of s).
// Nothing when the block does not hold it (a bias its specification leaves out).
inline std::optional<ParameterSpec> block_parameter_if_held(const GptShape& s, const std::string& name) {
  const int layer = layer_of(name);
  const std::string row = layer >= 0 ? name.substr(name.find('/', 7) + 1) : name;
  const GptShape block = layer >= 0 ? block_shape(s, layer) : s;
  for (const ParameterRow& r : block_parameter_rows(block))
    if (row == r.name) return spec_of(r, block, name.substr(0, name.size() - row.size()));
  return std::nullopt;
}
// ... and std::logic_error for a name the table lacks, so that a layer cannot make a parameter
// the checkpoint and the planner do not know of.
inline ParameterSpec block_parameter(const GptShape& s, const std::string& name) {
  if (std::optional<ParameterSpec> p = block_parameter_if_held(s, name)) return *p;
  throw std::logic_error("tptrain: the block parameter " + name +
                         " has no row in the block descriptor (src/model/spec/block_descriptor.hpp)");
}

// ---- buffers ---------------------------------------------------------------------------------

// The buffers of the block's own (recompute.hpp says what each mode keeps): its input, the
// inputs of its sublayers and the stage's scratch between them; its kinds' are theirs
// (sublayer_kinds.hpp), at their places. A specification allocates the rows whose `needs` it
// meets. Not listed: the column-sum partials of the bias and norm gradients (one small stage
// buffer, column_sums_scratch).
inline constexpr BufferRow kBlockBuffers[] = {
    {"x", "block input (the residual stream)", {BufferDim::residual_rows, BufferDim::h}, Element::storage, Lifetime::input},
    {".attn_input", "ln_1 output", {BufferDim::residual_rows, BufferDim::h}, Element::storage, Lifetime::saved},
    {".after_attention", "x + attention", {BufferDim::residual_rows, BufferDim::h}, Element::storage, Lifetime::saved},
    {".mlp_input", "ln_2 output", {BufferDim::residual_rows, BufferDim::h}, Element::storage, Lifetime::saved},
    {"block.sublayer_out", "attention output, then MLP output", {BufferDim::residual_rows, BufferDim::h}, Element::storage, Lifetime::scratch},
    {"block.grad_sublayer_input", "gradient of a sublayer's input", {BufferDim::residual_rows, BufferDim::h}, Element::storage, Lifetime::scratch},
    {"block.grad_after_attention", "gradient of x + attention", {BufferDim::residual_rows, BufferDim::h}, Element::storage, Lifetime::scratch},

};

// The buffer rows shape s's specification allocates: the block's own, then its kinds' at their
// places in the block's order, then the position kind's.
inline std::vector<BufferRow> block_buffer_rows(const GptShape& s) {
  std::vector<BufferRow> all(std::begin(kBlockBuffers), std::end(kBlockBuffers));
  for (const SublayerPlace& place : residual_pattern(s).places)
    for (const BufferRow& r : kind_buffer_rows(s, place)) all.push_back(r);
  for (const BufferRow& r : position_kind(s).buffers) all.push_back(r);  // the rotary tables: the stage's
  std::vector<BufferRow> rows;
  for (const BufferRow& r : all)
    if (holds(r.needs, s)) rows.push_back(r);
  return rows;
}

// Is buffer row r allocated per micro-batch in flight (per layer) under `mode`? The block input
// always is; the saved set unless recompute = full; the scores only with none.
inline bool kept_per_layer(const BufferRow& r, Recompute mode) {
  switch (r.lifetime) {
    case Lifetime::input: return true;
    case Lifetime::saved: return mode != Recompute::full;
    case Lifetime::saved_if_none: return mode == Recompute::none;
    case Lifetime::scratch: return false;
  }
  return false;
}
// With recompute = full: in the working set the stage's blocks share (the saved set).
inline bool in_recompute_working_set(const BufferRow& r, Recompute mode) {
  return mode == Recompute::full && r.lifetime == Lifetime::saved;
}

// The sizes BufferDim stands for, for one micro-batch of a shape.
struct BlockSizes {
  std::int64_t b, local_seq, h, f, a, t;
  bool sequence_parallel;  // the shape splits the sequence (GptShape::splits_sequence)
  std::int64_t k = 0;      // key/value heads; 0: a (no grouped-query attention)
  std::int64_t seq = 0;    // the whole sequence; 0: local_seq (no context parallelism)
  // Multi-head latent attention's latents and head widths (0 without it), and the rotary tables'
  // rotated features (0: a head's, h/a).
  std::int64_t q_lora = 0, kv_lora = 0, nope = 0, rope = 0, v = 0, rotary = 0;
  std::int64_t tokens() const { return b * local_seq; }
  std::int64_t residual_rows() const { return sequence_parallel ? tokens() / t : tokens(); }
  std::int64_t kv() const { return k > 0 ? k : a; }
  bool grouped() const { return kv() != a; }
};
inline BlockSizes block_sizes(const GptShape& shape, int micro_batch) {
  BlockSizes z{micro_batch,  shape.local_seq_length(), shape.hidden,           shape.ffn_hidden,
               shape.heads,  shape.tensor,             shape.splits_sequence(), shape.kv_head_count(),
               shape.seq_length};
  if (shape.latent_attention()) {
    z.q_lora = shape.q_lora_rank;
    z.kv_lora = shape.kv_lora_rank;
    z.nope = shape.qk_nope_head_dim;
    z.rope = shape.qk_rope_head_dim;
    z.v = shape.v_head_dim;
  }
  z.rotary = shape.rotary_dim();
  return z;
}

inline std::int64_t extent(BufferDim d, const BlockSizes& z) {
  switch (d) {
    case BufferDim::b: return z.b;
    case BufferDim::local_seq: return z.local_seq;
    case BufferDim::seq: return z.seq > 0 ? z.seq : z.local_seq;
    case BufferDim::tokens: return z.tokens();
    case BufferDim::residual_rows: return z.residual_rows();
    case BufferDim::h: return z.h;
    case BufferDim::h_t: return z.h / z.t;
    case BufferDim::gqa_t: return (z.a + 2 * z.kv()) * (z.h / z.a) / z.t;
    case BufferDim::kv2_t: return 2 * z.kv() * (z.h / z.a) / z.t;
    case BufferDim::f_t: return z.f / z.t;
    case BufferDim::f2_t: return 2 * z.f / z.t;
    case BufferDim::d_2: return (z.rotary > 0 ? z.rotary : z.h / z.a) / 2;
    case BufferDim::a_t: return z.a / z.t;
    case BufferDim::token_heads_t: return z.tokens() * (z.a / z.t);
    case BufferDim::tile: return z.local_seq < 128 ? z.local_seq : 128;
    case BufferDim::q_lora: return z.q_lora;
    case BufferDim::kv_latent: return z.kv_lora + z.rope;
    case BufferDim::mla_qkv_t: return z.a * (2 * (z.nope + z.rope) + z.v) / z.t;
    case BufferDim::mla_kv_t: return z.a * (z.nope + z.v) / z.t;
    case BufferDim::mla_kv2_t: return z.a * (z.nope + z.rope + z.v) / z.t;
    case BufferDim::mla_q_t: return z.a * (z.nope + z.rope) / z.t;
    case BufferDim::mla_o_t: return z.a * z.v / z.t;
    case BufferDim::none: break;
  }
  return 1;
}

// The buffer's shape (as the Workspace records it) and bytes for storage elements of
// `element_bytes` (4 fp32, 2 bf16/fp16); 0 bytes when not allocated in that precision.
inline std::vector<std::int64_t> buffer_shape(const BufferRow& r, const BlockSizes& z) {
  std::vector<std::int64_t> shape;
  for (const BufferDim d : r.shape)
    if (d != BufferDim::none) shape.push_back(extent(d, z));
  return shape;
}
inline std::int64_t buffer_bytes(const BufferRow& r, const BlockSizes& z, int element_bytes) {
  if (r.only_16_bit && element_bytes >= 4) return 0;
  std::int64_t n = r.element == Element::fp32 ? std::max(4, element_bytes) : element_bytes;  // fp64: acc_t is double
  for (const std::int64_t d : buffer_shape(r, z)) n *= d;
  return n;
}

// The shared region of a block's attention and MLP scratch (ScratchPhase, workspace.hpp): the
// larger part, each of its buffers starting on kPhaseAlignment; the model's blocks share one,
// the largest of its block shapes' (block_shapes).
inline std::int64_t phase_region_bytes(const GptShape& s, const BlockSizes& z, int element_bytes) {
  std::int64_t most = 0;
  for (const BlockShapeCount& b : block_shapes(s)) {
    std::int64_t part[3] = {0, 0, 0};
    for (const BufferRow& r : block_buffer_rows(b.shape))
      if (r.lifetime == Lifetime::scratch && r.phase != ScratchPhase::block)
        part[static_cast<int>(r.phase)] += std::int64_t(phase_aligned(std::size_t(buffer_bytes(r, z, element_bytes))));
    most = std::max({most, part[1], part[2]});
  }
  return most;
}

}  // namespace tptrain::model
