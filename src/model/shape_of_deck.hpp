// The model shape a deck describes: its [model] keys, the tensor-parallel size and sequence
// parallelism. Shared by training (the model each rank builds) and planning (src/plan), which
// must not pull in the training layer.
#pragma once

#include <string>

#include "io/deck.hpp"
#include "kokkos_kernels/attention_path.hpp"
#include "kokkos_kernels/views.hpp"
#include "src/model/spec/gpt_shape.hpp"

namespace tptrain::model {

// Whether training.attention = `attention` with parallel.context = `context` runs flash attention
// (GptShape::flash_attention): "flash" and "batched" as named; "default" flash under context
// parallelism (ring attention runs flash per block), else the choice of the backend this binary
// runs (`backend_flash`: flash on host backends, batched on GPUs; kernels::default_attention_path).
// Both cores mask documents.
inline bool flash_attention_of(const std::string& attention, int context,
                               bool backend_flash = kernels::default_attention_path<kx::ExecSpace>() ==
                                                    kernels::AttentionPath::flash) {
  return attention == "flash" || (attention != "batched" && (context > 1 || backend_flash));
}

inline model::GptShape shape_of(const io::Deck& deck) {
  model::GptShape s;
  s.layers = deck.model.layers;
  s.hidden = deck.model.hidden;
  s.heads = deck.model.heads;
  model::BlockSpec& spec = s;
  if (const model::BlockPreset* p = model::block_preset(deck.model.architecture)) spec = p->spec;
  // The deck's choices (a loaded deck holds them resolved, the preset's where it left them out).
  s.norm = model::norm_of(deck.model.norm).value_or(s.norm);
  s.mlp = model::mlp_of(deck.model.mlp).value_or(s.mlp);
  s.position = model::position_of(deck.model.position).value_or(s.position);
  s.qkv_bias = deck.model.qkv_bias;
  s.linear_bias = deck.model.linear_bias;
  s.kv_heads = deck.model.kv_width();
  s.tie_embeddings = deck.model.tie_embeddings;
  s.experts = deck.model.experts;
  s.experts_per_token = deck.model.experts_per_token;
  s.moe_capacity_factor = deck.model.moe_capacity_factor;
  s.moe_aux_loss_coeff = deck.training.moe_aux_loss_coeff;
  s.moe_z_loss_coeff = deck.training.moe_z_loss_coeff;
  s.norm_eps = deck.model.norm_eps;
  s.rope_theta = deck.model.rope_theta;
  s.ffn_hidden = deck.model.ffn_width();  // ffn_hidden, resolved in a loaded deck
  s.seq_length = deck.model.seq_length;
  s.vocab_size = deck.model.vocab_size;
  s.vocab_pad_multiple = deck.model.vocab_pad_multiple;
  s.tensor = deck.parallel.tensor;
  s.sequence_parallel = deck.parallel.sequence_parallel;
  s.context = deck.parallel.context;
  s.expert_parallel = deck.parallel.expert;
  s.flash_attention = flash_attention_of(deck.training.attention, deck.parallel.context);
  return s;
}

}  // namespace tptrain::model
