// Rotary positions (model.position = "rope", "llama3", "yarn"; their tables' rows:
// src/model/spec/rope_kind.hpp): q and k of each head rotated in the attention's QKV output
// (RoPE, rotate-half) by the tables cos, sin [S, d/2] of angles p · ω_i (d: a head's, or multi-head
// latent attention's rotated d_R: GptShape::rotary_dim), ω the kind's frequencies
// (RotaryFrequencies), one pair per stage (every block's the same values; S the whole sequence:
// with context parallelism the rows' positions are global).
#pragma once

#include "kokkos_kernels/rope.hpp"
#include "src/model/spec/sublayer_kinds.hpp"
#include "src/model/sublayer.hpp"
#include "src/model/workspace.hpp"

namespace tptrain::model {

template <class T>
struct RotaryPosition final : PositionSublayer<T> {
  using Matrix = kernels::Matrix<T>;
  kernels::Matrix<kx::acc_t<T>> cos, sin;

  RotaryPosition(const GptShape& s, Workspace<T>& ws)
      : cos(ws.template matrix<kx::acc_t<T>>("rope.cos", BufferCategory::scratch, s.seq_length, s.rotary_dim() / 2)),
        sin(ws.template matrix<kx::acc_t<T>>("rope.sin", BufferCategory::scratch, s.seq_length, s.rotary_dim() / 2)) {
    const RotaryFrequencies& rotary = position_kind(s).rotary;
    kernels::rope_tables(Exec(), cos, sin, rotary.inverse(s, s.rotary_dim()), rotary.amplitude(s));
  }

  void rotate(const Exec& exec, const Matrix& qkv, const kernels::RotaryHeads& heads, const kernels::Tokens& ids,
              std::int64_t first_position) override {
    PhaseScope phase(Phase::norms_elementwise);
    if (first_position >= 0 && ids.size() == 0) kernels::rope_forward_at(exec, qkv, cos, sin, heads, first_position);
    else kernels::rope_forward(exec, qkv, cos, sin, heads, ids);
  }
  void rotate_backward(const Exec& exec, const Matrix& d_qkv, const kernels::RotaryHeads& heads,
                       const kernels::Tokens& ids) override {
    PhaseScope phase(Phase::norms_elementwise);
    kernels::rope_backward(exec, d_qkv, cos, sin, heads, ids);
  }
};

}  // namespace tptrain::model
