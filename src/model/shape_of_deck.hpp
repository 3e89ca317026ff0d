// The model shape a deck describes: its [model] section, the model's part of its [parallel]
// section and the attention kernel of its [training] section. Shared by training (the model each
// rank builds) and planning (src/plan), which must not pull in the training layer.
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

// The deck's three parts of a shape, as it read them: what the model is, how the model is laid
// out, which kernels compute it.
inline model::GptShape shape_of(const io::Deck& deck) {
  return model::GptShape(deck.model, deck.parallel,
                         KernelChoice{flash_attention_of(deck.training.attention, deck.parallel.context)});
}

}  // namespace tptrain::model
