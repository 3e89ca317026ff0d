// The two linear layers of every dense MLP kind, around its elementwise activation (Megatron-Core's
// linear_fc1 and linear_fc2): fc column-parallel (H -> F/tp, or gate|up's 2F/tp), proj
// row-parallel (F/tp -> H: all-reduce g, or reduce-scatter with sequence parallelism), made from
// the kind's rows ("<name>/fc/weight", ...; their biases where the specification holds them). A
// kind adds its activation, its saved set and its scratch (gelu_mlp.hpp, swiglu_mlp.hpp,
// relu2_mlp.hpp); a shared building block, no kind of its own.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/model/linear.hpp"
#include "src/model/spec/block_descriptor.hpp"
#include "src/model/sublayer.hpp"
#include "src/model/workspace.hpp"

namespace tptrain::model {

template <class T>
struct DenseMlpLayers : MlpSublayer<T> {
  using Matrix = kernels::Matrix<T>;

  ColumnParallelLinear<T> fc;
  RowParallelLinear<T> proj;
  std::int64_t tokens_ = 0;  // N: the micro-batch's tokens (all of them with sequence parallelism)
  GptShape shape_;

  DenseMlpLayers(const std::string& name, const GptShape& s, std::int64_t tokens, const Communicator& tp)
      : fc(linear_of<ColumnParallelLinear<T>>(block_parameter(s, name + "/fc/weight"),
                                               block_parameter_if_held(s, name + "/fc/bias"), tp)),
        proj(linear_of<RowParallelLinear<T>>(block_parameter(s, name + "/proj/weight"),
                                             block_parameter_if_held(s, name + "/proj/bias"), tp)),
        tokens_(tokens), shape_(s) {}
  // Layers given their parameters (a mixture's expert: swiglu_mlp.hpp).
  DenseMlpLayers(const ParameterSpec& fc_spec, const ParameterSpec& proj_spec, const Communicator& tp)
      : fc(fc_spec, tp), proj(proj_spec, tp) {}

  std::vector<Parameter<T>*> parameters() override {
    std::vector<Parameter<T>*> ps = fc.parameters();
    for (Parameter<T>* p : proj.parameters()) ps.push_back(p);
    return ps;
  }
  const Parameter<T>* output_bias() const override { return proj.has_bias ? &proj.bias : nullptr; }

 protected:
  // The stage's column-sum and sequence-parallel buffers, after the kind's own (the workspace
  // keeps its order of allocation).
  void attach_stage_buffers(Workspace<T>& ws) {
    fc.column_scratch = proj.column_scratch = column_sums_scratch(ws, shape_, tokens_);
    fc.sp = proj.sp = sequence_parallel_buffers(ws, shape_, tokens_);
  }
  // The rows a forward computes: the layer's with sequence parallelism (fc gathers them), else
  // x's (fewer in generation: the new tokens, in the leading rows of the buffers).
  std::int64_t forward_rows_of(const Matrix& x, const Matrix& saved_rows) const {
    return fc.sp.enabled() ? static_cast<std::int64_t>(saved_rows.extent(0)) : static_cast<std::int64_t>(x.extent(0));
  }
};

}  // namespace tptrain::model
