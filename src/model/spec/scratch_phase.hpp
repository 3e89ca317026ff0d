// Which part of a block a scratch buffer serves (src/model/workspace.hpp, block_descriptor.hpp).
#pragma once

#include <cstddef>

namespace tptrain::model {

// Which part of a block a scratch buffer serves. A block runs its attention, then its MLP (and
// backward the MLP, then the attention), so the two parts' scratch never lives at once: a model
// gives each part's buffers their place in one shared region, as large as the larger part
// (Workspace's phase_bytes). `block` scratch (the block's output and gradient buffers, the rotary
// tables) lives throughout and has an allocation of its own.
enum class ScratchPhase { block, attention, mlp };
inline constexpr std::size_t kPhaseAlignment = 128;  // bytes: each buffer of a part starts on it
inline constexpr std::size_t phase_aligned(std::size_t bytes) {
  return (bytes + kPhaseAlignment - 1) / kPhaseAlignment * kPhaseAlignment;
}

}  // namespace tptrain::model
