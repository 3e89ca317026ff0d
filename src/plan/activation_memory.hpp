// Activation memory of one rank, buffer by buffer: tptrain's own inventory (docs/planning.md,
// "Activations"), the formulas the measured memory of a run is checked against. A block's
// buffers come from the block descriptor (src/model/spec/block_descriptor.hpp), so that when the
// block's buffers change, its table row changes and nothing here; the stage's and the head's own
// tensors are one function each.
//
// Notation (bytes): b micro_batch, s the rank's tokens of a sequence (seq_length, or seq_length / C
// with context parallelism: parallel.context = C), h hidden, f ffn_hidden, a heads, k kv_heads, t tensor,
// N = b·s tokens of a micro-batch on the rank, n = N/t with sequence parallelism (else N), e bytes per
// activation element (4 fp32, 2 bf16/fp16); statistics are fp32 (4 bytes) in every precision.
// tptrain has no dropout, so there are no dropout masks (Korthikanti et al. 2022 count them:
// src/plan/korthikanti.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/plan/plan_config.hpp"

namespace tptrain::plan {

// One buffer: what it holds and its bytes.
struct Buffer {
  std::string name;
  std::int64_t bytes = 0;
};
std::int64_t total_bytes(const std::vector<Buffer>& buffers);

// ---- the mixture of experts (model.mlp = "moe"; src/model/mixture_of_experts.hpp) ---------------
// Its buffers at balanced load, every expert receiving N·K/E of the copies: each rank then runs
// R = N·K rows through its experts whatever parallel.expert is (it sends (ep − 1)/ep of its copies
// away and receives as many). N = b·s is every token of the micro-batch on the rank (the router
// and the experts see all N tokens, gathered first with sequence parallelism), K experts_per_token,
// E experts, f/t an expert's SwiGLU columns on the rank; fp32 for the router's and the routes'
// numbers. A skewed routing needs more: a rank may receive up to ep·N·K rows, and the model's row
// buffers grow to the largest load seen.
//
// Kept per layer and micro-batch (the dense MLP's gate|up in their place), recompute none or
// selective; with full once per stage, in the recompute working set:
//   router probabilities [N, E]·4, their log Σ exp [N]·4, the routes' expert and row [N, K]·4 each
//   (int32) and weight [N, K]·4; the expert input rows [R, h]·e, their gate|up [R, 2f/t]·e and the
//   expert outputs back home [R, h]·e.
std::vector<Buffer> moe_saved_buffers(const Config& c);
// Scratch, once per stage (the dense MLP's part of the shared region is not allocated):
//   silu(gate)·up [R, f/t]·e and its gradient [R, f/t]·e, the gate|up gradient [R, 2f/t]·e, the
//   input rows' gradient [R, h]·e; with parallel.expert > 1 also the sorted copies before the
//   dispatch, the expert outputs before the combine and the output gradients' rows, [R, h]·e each;
//   with sequence parallelism the output gradient gathered [N, h]·e; fp32 the routing weights'
//   gradient [N, K], the router logits' gradient [N, E], its statistics [E + 1] and the
//   load-balancing gradient [E].
std::vector<Buffer> moe_scratch(const Config& c);

// ---- kept by one transformer layer for one micro-batch ------------------------------------------
// The block descriptor's buffers (src/model/spec/block_descriptor.hpp, kBlockBuffers: their shapes,
// element types and lifetimes). What one layer keeps for one micro-batch between its forward and
// its backward:
//   none       the block input and the saved set, the attention scores included;
//   selective  the same without the scores (the backward recomputes them);
//   full       the block input only (the backward re-runs the block's forward).
// With a mixture of experts also moe_saved_buffers (none, selective).
std::vector<Buffer> layer_activations(const Config& c);
// With recompute = full: the working set of the layer being recomputed (the selective set),
// allocated once per stage and shared by its layers. Empty otherwise.
std::vector<Buffer> recompute_working_set(const Config& c);

// Micro-batches whose activations stage `stage` of P keeps at once under 1F1B: min(P − stage, M).
// The first stage holds the most.
int micro_batches_in_flight(int stage, int stages, int micro_batches);

// The stage's output [n, h]·e (the last block's output, sent to the next stage), per micro-batch.
std::int64_t stage_output(const Config& c);
// Activations of a stage of `layers` blocks with `in_flight` micro-batches kept:
// in_flight · (layers · layer_activations + stage_output) + recompute_working_set.
std::int64_t stage_activation_bytes(const Config& c, int layers, int in_flight);
// The same for a rank of v chunks of `chunk_layers` blocks each, chunk k keeping slots[k]
// micro-batches (schedule::schedule_memory): Σ_k slots[k] · (chunk_layers · layer_activations +
// stage_output) + recompute_working_set.
std::int64_t chunked_activation_bytes(const Config& c, int chunk_layers, const std::vector<int>& slots);
// The buffers [n, h]·e an interleaved schedule receives gradients into (GptModel::reserve_received_gradients).
std::int64_t received_gradient_bytes(const Config& c, int buffers);

// ---- the last stage's head, once (not per micro-batch in flight) ---------------------------------
std::int64_t final_norm_output(const Config& c);       // ln_f output [n, h]·e
std::int64_t final_norm_statistics(const Config& c);   // 2·n·4 (LayerNorm), n·4 (RMSNorm)
std::int64_t logits_and_gradient(const Config& c);     // [N, V_pad/t]·e, dlogits in place
std::int64_t loss_vectors(const Config& c);            // row max, Σexp, target logit, loss: 4·[N]·4
std::vector<Buffer> head_buffers(const Config& c);

// ---- workspace: scratch shared by all layers of a stage -------------------------------------------
// The block descriptor's scratch buffers: the block's own (its output and gradient buffers, the
// rotary tables, [S, d/2] over the whole sequence), and one region shared by the attention's
// (flash: the QKV gradient, the fp32 dQ sum and D; batched: the probabilities, their row tile, the
// QKV gradient, bf16/fp16 the fp32 dK sum; with context parallelism also ring attention's two K,V
// blocks, its fp32 output sum and three fp32 dK,dV sums) and the MLP's (its activation, SwiGLU's
// gate and up gradient), as large as the larger;
// with a mixture of experts the attention's part alone, and moe_scratch besides;
// besides the column-sum partials of the bias and LayerNorm gradients (under 1 % of a layer's
// activations).
std::vector<Buffer> block_scratch(const Config& c);
std::int64_t stage_gradients(const Config& c);            // the stage's gradient ping-pong 2·[n, h]·e
std::int64_t sequence_parallel_buffers(const Config& c);  // gathered and partial [N, h]·e with SP
std::vector<Buffer> workspace_buffers(const Config& c);   // all three

}  // namespace tptrain::plan
