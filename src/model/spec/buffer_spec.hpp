// A buffer of the model described as plain data: the rows of the block descriptor's buffer table
// and of each sublayer kind's (src/model/spec/block_descriptor.hpp), from which the layers allocate,
// the planner counts activation memory and the docs print their tables. No Kokkos, no MPI.
#pragma once

#include <cstdint>

#include "src/model/spec/parameter_spec.hpp"
#include "src/model/spec/scratch_phase.hpp"

namespace tptrain::model {

// The sizes of a block's buffers, each named for what it counts; docs/planning.md writes them in
// its notation (in parentheses): micro_batch b, hidden h, ffn_hidden f, heads a, tensor t.
enum class BufferDim {
  none,
  b,
  local_seq,      // (s) the rank's tokens of a sequence: seq_length, or seq_length / C with context parallelism
  seq,            // (S) seq_length, the whole sequence (the rotary tables: positions are global)
  tokens,         // (N = b·s) the micro-batch's tokens on the rank
  residual_rows,  // (n) the rows of the residual stream and the norms: N, or N/t with sequence parallelism
  h,
  h_t,    // h/t: the rank's attention heads' width
  gqa_t,  // (a + 2k)·(h/a)/t: llama's QKV output, k = kv_heads (= 3h/t without grouped-query attention)
  kv2_t,  // 2k·(h/a)/t: K and V of the rank's key/value heads (ring attention's travelling block)
  f_t,    // f/t
  f2_t,   // 2f/t: SwiGLU's gate and up
  d_2,    // h/(2a): half a head, the rotary tables' columns
  a_t,    // a/t: the rank's heads
  token_heads_t,  // (N·(a/t)) one row of scores per token and local head
  tile,   // min(s, 128): the attention backward's query rows per tile (kernels::attention_backward_tile_rows)
  // Multi-head latent attention's (model.attention = "mla"), with d_q = d_nope + d_R:
  q_lora,     // (r_q) the queries' latent
  kv_latent,  // (r_kv + d_R) the keys' and values' latent and the shared rotary key
  mla_qkv_t,  // (a·(2d_q + d_v)/t) Q, K and V of the rank's heads, packed for the attention core
  mla_kv_t,   // (a·(d_nope + d_v)/t) the latent's up-projection: each head's key part and value
  mla_kv2_t,  // (a·(d_q + d_v)/t) K and V of the rank's heads (ring attention's travelling block)
  mla_q_t,    // (a·d_q/t) the rank's queries
  mla_o_t,    // (a·d_v/t) the rank's attention output
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
  unsigned needs = always;   // the specifications that allocate it (Needs, parameter_spec.hpp)
  ScratchPhase phase = ScratchPhase::block;  // scratch: the part of the block it serves (workspace.hpp)
};

}  // namespace tptrain::model
