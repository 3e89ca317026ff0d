// One transformer block — GPT-2's or llama's (GptShape::architecture) — described once (docs/design.md, "The block descriptor"): its
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

#include <cstdint>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "src/model/gpt_shape.hpp"
#include "src/model/parameter_spec.hpp"
#include "src/model/recompute.hpp"

namespace tptrain::model {

// ---- parameters ------------------------------------------------------------------------------

// In checkpoint order, which is also the order of the block's gradient bucket (a changed order
// moves parameters within the bucket's flat buffers, hence the distributed optimizer's shards).
// GPT-2 scales the residual projections' initial values by 1/√(2L).
inline constexpr ParameterRow kBlockParameters[] = {
    // name             shape                                       split                blocks SP sum  decay  init
    {"ln_1/weight",      {ParameterDim::hidden},                    TensorSplit::replicated, 1, true,  false, {Init::constant, 1.0f}},
    {"ln_1/bias",        {ParameterDim::hidden},                    TensorSplit::replicated, 1, true,  false, {Init::constant, 0.0f}},
    {"attn/qkv/weight",  {ParameterDim::qkv, ParameterDim::hidden}, TensorSplit::column,     3, false, true,  {Init::normal, 0.02f}},
    {"attn/qkv/bias",    {ParameterDim::qkv},                       TensorSplit::column,     3, false, false, {Init::constant, 0.0f}},
    {"attn/proj/weight", {ParameterDim::hidden, ParameterDim::hidden}, TensorSplit::row,     1, false, true,  {Init::residual_normal, 0.02f}},
    {"attn/proj/bias",   {ParameterDim::hidden},                    TensorSplit::replicated, 1, true,  false, {Init::constant, 0.0f}},
    {"ln_2/weight",      {ParameterDim::hidden},                    TensorSplit::replicated, 1, true,  false, {Init::constant, 1.0f}},
    {"ln_2/bias",        {ParameterDim::hidden},                    TensorSplit::replicated, 1, true,  false, {Init::constant, 0.0f}},
    {"mlp/fc/weight",    {ParameterDim::ffn, ParameterDim::hidden}, TensorSplit::column,     1, false, true,  {Init::normal, 0.02f}},
    {"mlp/fc/bias",      {ParameterDim::ffn},                       TensorSplit::column,     1, false, false, {Init::constant, 0.0f}},
    {"mlp/proj/weight",  {ParameterDim::hidden, ParameterDim::ffn}, TensorSplit::row,        1, false, true,  {Init::residual_normal, 0.02f}},
    {"mlp/proj/bias",    {ParameterDim::hidden},                    TensorSplit::replicated, 1, true,  false, {Init::constant, 0.0f}},
};
inline constexpr std::size_t kBlockParameterCount = std::size(kBlockParameters);

// The llama block (docs/design.md, "The llama block"): GPT-2's names where the role is the same,
// no biases. ln_1 and ln_2 are RMSNorms (a weight only). attn/qkv/weight stacks
// [Q: nh·d | K: nkv·d | V: nkv·d], each block split over the tensor ranks (a rank holds Q, K and V
// of its heads); mlp/fc/weight stacks [gate: F | up: F], each split, so a rank's gate and up rows
// are the same columns of the MLP. Hugging Face's initializer_range, 0.02, for every matrix.
inline constexpr ParameterRow kLlamaBlockParameters[] = {
    // name             shape                                        split                blocks SP sum  decay  init                  tied   block extents
    {"ln_1/weight",      {ParameterDim::hidden},                     TensorSplit::replicated, 1, true,  false, {Init::constant, 1.0f}},
    {"attn/qkv/weight",  {ParameterDim::qkv, ParameterDim::hidden},  TensorSplit::column,     3, false, true,  {Init::normal, 0.02f}, false,
     {ParameterDim::hidden, ParameterDim::kv, ParameterDim::kv}},
    {"attn/proj/weight", {ParameterDim::hidden, ParameterDim::hidden}, TensorSplit::row,      1, false, true,  {Init::normal, 0.02f}},
    {"ln_2/weight",      {ParameterDim::hidden},                     TensorSplit::replicated, 1, true,  false, {Init::constant, 1.0f}},
    {"mlp/fc/weight",    {ParameterDim::ffn2, ParameterDim::hidden}, TensorSplit::column,     2, false, true,  {Init::normal, 0.02f}, false,
     {ParameterDim::ffn, ParameterDim::ffn}},
    {"mlp/proj/weight",  {ParameterDim::hidden, ParameterDim::ffn},  TensorSplit::row,        1, false, true,  {Init::normal, 0.02f}},
};

// The block table of shape s's architecture, in checkpoint (and bucket) order.
inline std::vector<ParameterRow> block_parameter_rows(const GptShape& s) {
  if (s.llama()) return {std::begin(kLlamaBlockParameters), std::end(kLlamaBlockParameters)};
  return {std::begin(kBlockParameters), std::end(kBlockParameters)};
}

// Block `layer`'s parameters for shape s, in the table's order, named layers/<layer>/<row>.
inline std::vector<ParameterSpec> block_parameters(const GptShape& s, int layer) {
  std::vector<ParameterSpec> out;
  const std::string prefix = "layers/" + std::to_string(layer) + "/";
  for (const ParameterRow& r : block_parameter_rows(s)) out.push_back(spec_of(r, s, prefix));
  return out;
}

// The row of the block parameter `name`: "layers/<i>/<row name>", or the row name itself (a
// part of a block built on its own, as the layer tests do: "attn/qkv/weight"). Throws
// std::logic_error for a name the table lacks, so that a layer cannot make a parameter the
// checkpoint and the planner do not know of.
inline ParameterSpec block_parameter(const GptShape& s, const std::string& name) {
  std::string row = name;
  if (row.rfind("layers/", 0) == 0) {
    const std::size_t slash = row.find('/', 7);
    if (slash != std::string::npos) row = row.substr(slash + 1);
  }
  for (const ParameterRow& r : block_parameter_rows(s))
    if (row == r.name) return spec_of(r, s, name.substr(0, name.size() - row.size()));
  throw std::logic_error("tptrain: the block parameter " + name +
                         " has no row in the block descriptor (src/model/block_descriptor.hpp)");
}

// ---- buffers ---------------------------------------------------------------------------------

// The sizes of a block's buffers, by symbol (docs/planning.md's notation): b micro_batch,
// s seq_length, h hidden, f ffn_hidden, a heads, t tensor, N = b·s tokens, n = N/t with sequence
// parallelism (else N): the rows of the residual stream and the LayerNorms.
enum class BufferDim {
  none,
  b,
  s,
  N,
  n,
  h,
  h_t,    // h/t: the rank's attention heads' width
  qkv_t,  // 3h/t: Q, K and V of the rank's heads (the attention's layout)
  gqa_t,  // (a + 2k)·(h/a)/t: llama's QKV output, k = kv_heads (= 3h/t without grouped-query attention)
  f_t,    // f/t
  f2_t,   // 2f/t: SwiGLU's gate and up
  d_2,    // h/(2a): half a head, the rotary tables' columns
  a_t,    // a/t: the rank's heads
  Na_t,   // N·(a/t): one row of scores per token and local head
  tile,   // min(s, 128): the attention backward's query rows per tile (kernels::attention_backward_tile_rows)
};

// What a buffer's element is: the run's storage type (4 bytes in fp32, 2 in bf16/fp16) or fp32
// whatever it is (statistics and sums).
enum class Element { storage, fp32 };

// How long a buffer lives (the model's Workspace category, src/model/workspace.hpp):
enum class Lifetime {
  input,          // the block's input, kept in every recompute mode: the model's residual stream
  saved,          // kept from the forward for the backward, one set per micro-batch in flight, with
                  // recompute = none or selective; with full one set shared by the stage's blocks
  saved_if_none,  // kept only with recompute = none (the attention scores: the S² part)
  scratch,        // valid within one forward or backward: one buffer per name for the stage
};

struct BufferRow {
  const char* name;        // the Workspace's name: after "layers/<i>" for saved buffers, whole for scratch
  const char* what;
  BufferDim shape[4];
  Element element;
  Lifetime lifetime;
  bool only_16_bit = false;  // allocated only when the storage type is bf16/fp16
  bool only_grouped = false; // allocated only with grouped-query attention (kv_heads < heads)
};

// The buffers of one block (recompute.hpp says what each mode keeps). Not listed: the column-sum
// partials of the bias and LayerNorm gradients (one small stage buffer, column_sums_scratch).
inline constexpr BufferRow kBlockBuffers[] = {
    {"x", "block input (the residual stream)", {BufferDim::n, BufferDim::h}, Element::storage, Lifetime::input},
    {"/ln_1.mean", "ln_1 mean", {BufferDim::n}, Element::fp32, Lifetime::saved},
    {"/ln_1.rstd", "ln_1 1/σ", {BufferDim::n}, Element::fp32, Lifetime::saved},
    {".a", "ln_1 output", {BufferDim::n, BufferDim::h}, Element::storage, Lifetime::saved},
    {"/attn.qkv_out", "QKV output", {BufferDim::N, BufferDim::qkv_t}, Element::storage, Lifetime::saved},
    {"/attn.lse", "attention log Σ exp per score row", {BufferDim::Na_t}, Element::fp32, Lifetime::saved},
    {"/attn.scores", "attention scores Q Kᵀ",
     {BufferDim::b, BufferDim::a_t, BufferDim::s, BufferDim::s}, Element::storage, Lifetime::saved_if_none},
    {"/attn.ctx", "attention context", {BufferDim::N, BufferDim::h_t}, Element::storage, Lifetime::saved},
    {".x1", "x1 = x + attention", {BufferDim::n, BufferDim::h}, Element::storage, Lifetime::saved},
    {"/ln_2.mean", "ln_2 mean", {BufferDim::n}, Element::fp32, Lifetime::saved},
    {"/ln_2.rstd", "ln_2 1/σ", {BufferDim::n}, Element::fp32, Lifetime::saved},
    {".c", "ln_2 output", {BufferDim::n, BufferDim::h}, Element::storage, Lifetime::saved},
    {"/mlp.h", "fc output (GELU input)", {BufferDim::N, BufferDim::f_t}, Element::storage, Lifetime::saved},
    {"/mlp.sigmoid", "GELU sigmoid", {BufferDim::N, BufferDim::f_t}, Element::storage, Lifetime::saved},
    {"attention.probs", "attention probabilities (the softmax's buffer)",
     {BufferDim::b, BufferDim::a_t, BufferDim::s, BufferDim::s}, Element::storage, Lifetime::scratch},
    {"attention.dprobs_tile", "attention probabilities' gradient, one row tile",
     {BufferDim::b, BufferDim::a_t, BufferDim::tile, BufferDim::s}, Element::storage, Lifetime::scratch},
    {"attention.d_qkv", "QKV gradient (its Q block holds the context gradient first)", {BufferDim::N, BufferDim::qkv_t}, Element::storage, Lifetime::scratch},
    {"attention.dk_sum", "dK summed over the backward's row tiles", {BufferDim::N, BufferDim::h_t}, Element::fp32,
     Lifetime::scratch, true},
    {"mlp.a", "GELU output", {BufferDim::N, BufferDim::f_t}, Element::storage, Lifetime::scratch},
    {"mlp.da", "GELU output's gradient", {BufferDim::N, BufferDim::f_t}, Element::storage, Lifetime::scratch},
    {"block.out", "attention output, then MLP output", {BufferDim::n, BufferDim::h}, Element::storage, Lifetime::scratch},
    {"block.grad_1", "block backward buffer 1", {BufferDim::n, BufferDim::h}, Element::storage, Lifetime::scratch},
    {"block.grad_2", "block backward buffer 2", {BufferDim::n, BufferDim::h}, Element::storage, Lifetime::scratch},
};

// The llama block's buffers. The attention kernels (kokkos_kernels/attention.hpp) take Q, K and V
// of the rank's nh/t heads; with grouped-query attention the rank's nkv/t key/value heads are
// expanded into that layout (attention.qkv_expanded, Hugging Face's repeat_kv) and the gradient
// of each group summed back (attention.d_qkv_grouped). The rotary tables cos, sin [s, d/2] are
// computed once per stage.
inline constexpr BufferRow kLlamaBlockBuffers[] = {
    {"x", "block input (the residual stream)", {BufferDim::n, BufferDim::h}, Element::storage, Lifetime::input},
    {"/ln_1.rstd", "ln_1 1/rms", {BufferDim::n}, Element::fp32, Lifetime::saved},
    {".a", "ln_1 output", {BufferDim::n, BufferDim::h}, Element::storage, Lifetime::saved},
    {"/attn.qkv_out", "QKV output, q and k rotated", {BufferDim::N, BufferDim::gqa_t}, Element::storage, Lifetime::saved},
    {"/attn.lse", "attention log Σ exp per score row", {BufferDim::Na_t}, Element::fp32, Lifetime::saved},
    {"/attn.scores", "attention scores Q Kᵀ",
     {BufferDim::b, BufferDim::a_t, BufferDim::s, BufferDim::s}, Element::storage, Lifetime::saved_if_none},
    {"/attn.ctx", "attention context", {BufferDim::N, BufferDim::h_t}, Element::storage, Lifetime::saved},
    {".x1", "x1 = x + attention", {BufferDim::n, BufferDim::h}, Element::storage, Lifetime::saved},
    {"/ln_2.rstd", "ln_2 1/rms", {BufferDim::n}, Element::fp32, Lifetime::saved},
    {".c", "ln_2 output", {BufferDim::n, BufferDim::h}, Element::storage, Lifetime::saved},
    {"/mlp.h", "fc output: gate and up", {BufferDim::N, BufferDim::f2_t}, Element::storage, Lifetime::saved},
    {"rope.cos", "rotary table cos(p·θ^(-2i/d))", {BufferDim::s, BufferDim::d_2}, Element::fp32, Lifetime::scratch},
    {"rope.sin", "rotary table sin(p·θ^(-2i/d))", {BufferDim::s, BufferDim::d_2}, Element::fp32, Lifetime::scratch},
    {"attention.qkv_expanded", "Q, K and V with the key/value heads repeated", {BufferDim::N, BufferDim::qkv_t},
     Element::storage, Lifetime::scratch, false, true},
    {"attention.probs", "attention probabilities (the softmax's buffer)",
     {BufferDim::b, BufferDim::a_t, BufferDim::s, BufferDim::s}, Element::storage, Lifetime::scratch},
    {"attention.dprobs_tile", "attention probabilities' gradient, one row tile",
     {BufferDim::b, BufferDim::a_t, BufferDim::tile, BufferDim::s}, Element::storage, Lifetime::scratch},
    {"attention.d_qkv", "QKV gradient (its Q block holds the context gradient first)", {BufferDim::N, BufferDim::qkv_t}, Element::storage, Lifetime::scratch},
    {"attention.dk_sum", "dK summed over the backward's row tiles", {BufferDim::N, BufferDim::h_t}, Element::fp32,
     Lifetime::scratch, true},
    {"attention.d_qkv_grouped", "QKV gradient summed over each key/value group", {BufferDim::N, BufferDim::gqa_t},
     Element::storage, Lifetime::scratch, false, true},
    {"mlp.a", "silu(gate)·up", {BufferDim::N, BufferDim::f_t}, Element::storage, Lifetime::scratch},
    {"mlp.da", "silu(gate)·up's gradient", {BufferDim::N, BufferDim::f_t}, Element::storage, Lifetime::scratch},
    {"mlp.dh", "gate and up's gradient", {BufferDim::N, BufferDim::f2_t}, Element::storage, Lifetime::scratch},
    {"block.out", "attention output, then MLP output", {BufferDim::n, BufferDim::h}, Element::storage, Lifetime::scratch},
    {"block.grad_1", "block backward buffer 1", {BufferDim::n, BufferDim::h}, Element::storage, Lifetime::scratch},
    {"block.grad_2", "block backward buffer 2", {BufferDim::n, BufferDim::h}, Element::storage, Lifetime::scratch},
};

// The buffer table of shape s's architecture.
inline std::vector<BufferRow> block_buffer_rows(const GptShape& s) {
  if (s.llama()) return {std::begin(kLlamaBlockBuffers), std::end(kLlamaBlockBuffers)};
  return {std::begin(kBlockBuffers), std::end(kBlockBuffers)};
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
  std::int64_t b, s, h, f, a, t;
  bool sequence_parallel;  // the shape splits the sequence (GptShape::splits_sequence)
  std::int64_t k = 0;      // key/value heads; 0: a (no grouped-query attention)
  std::int64_t N() const { return b * s; }
  std::int64_t n() const { return sequence_parallel ? N() / t : N(); }
  std::int64_t kv() const { return k > 0 ? k : a; }
  bool grouped() const { return kv() != a; }
};
inline BlockSizes block_sizes(const GptShape& shape, int micro_batch) {
  return {micro_batch,     shape.seq_length, shape.hidden,           shape.ffn_hidden,
          shape.heads,     shape.tensor,     shape.splits_sequence(), shape.kv_head_count()};
}

inline std::int64_t extent(BufferDim d, const BlockSizes& z) {
  switch (d) {
    case BufferDim::b: return z.b;
    case BufferDim::s: return z.s;
    case BufferDim::N: return z.N();
    case BufferDim::n: return z.n();
    case BufferDim::h: return z.h;
    case BufferDim::h_t: return z.h / z.t;
    case BufferDim::qkv_t: return 3 * z.h / z.t;
    case BufferDim::gqa_t: return (z.a + 2 * z.kv()) * (z.h / z.a) / z.t;
    case BufferDim::f_t: return z.f / z.t;
    case BufferDim::f2_t: return 2 * z.f / z.t;
    case BufferDim::d_2: return z.h / z.a / 2;
    case BufferDim::a_t: return z.a / z.t;
    case BufferDim::Na_t: return z.N() * (z.a / z.t);
    case BufferDim::tile: return z.s < 128 ? z.s : 128;
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
  if (r.only_grouped && !z.grouped()) return 0;
  std::int64_t n = r.element == Element::fp32 ? 4 : element_bytes;
  for (const std::int64_t d : buffer_shape(r, z)) n *= d;
  return n;
}

}  // namespace tptrain::model
