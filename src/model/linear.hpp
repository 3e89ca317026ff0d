// ColumnParallelLinear and RowParallelLinear (Megatron-LM section 3): y = x Wᵀ + b with
// W [out, in] split by output rows (column-parallel) or by input columns (row-parallel).
#pragma once

#include "kokkos_kernels/bias.hpp"
#include "kokkos_kernels/gemm.hpp"
#include "src/model/parameter.hpp"
#include "src/parallel/mappings.hpp"
#include "src/util/phases.hpp"

namespace tptrain::model {

using Exec = kx::ExecSpace;
using parallel::Communicator;
using util::Phase;
using util::PhaseScope;

template <class T>
Parameter<T> make_parameter(std::string name, std::vector<std::int64_t> shape, Sharding sharding,
                            const Communicator& tp, bool weight_decay, float init_std,
                            float init_const = 0.0f) {
  Parameter<T> p;
  p.name = std::move(name);
  p.shape = std::move(shape);
  p.saved_rows = p.shape[0];
  p.sharding = sharding;
  p.tp_rank = tp.rank();
  p.tp_size = tp.size();
  p.weight_decay = weight_decay;
  p.init_std = init_std;
  p.init_const = init_const;
  return p;
}

// Output features split over the TP group: rank r computes its [N, out/tp] slice.
// `blocks` > 1 splits each of that many output blocks separately (QKV: 3 blocks).
template <class T>
struct ColumnParallelLinear {
  Parameter<T> weight;  // [out/tp, in]
  Parameter<T> bias;    // [out/tp]

  ColumnParallelLinear(const std::string& name, std::int64_t in, std::int64_t out, int blocks,
                       const Communicator& tp, float init_std)
      : weight(make_parameter<T>(name + "/weight", {out, in}, Sharding{0, blocks}, tp, true, init_std)),
        bias(make_parameter<T>(name + "/bias", {out}, Sharding{0, blocks}, tp, false, 0.0f)) {}

  template <class XV, class YV>
  void forward(const Exec& exec, Communicator& tp, const XV& x /*[N, in]*/, const YV& y /*[N, out/tp]*/) {
    parallel::copy_to_tp_region_forward(tp, exec, x);  // f: identity
    {
      PhaseScope phase(Phase::gemm);
      kernels::linear_forward(exec, x, weight.w(), y);
    }
    PhaseScope phase(Phase::norms_elementwise);
    kernels::bias_add(exec, y, bias.v());
  }

  template <class DYV, class XV, class DXV>
  void backward(const Exec& exec, Communicator& tp, const DYV& dy /*[N, out/tp]*/, const XV& x /*[N, in]*/,
                const DXV& dx /*[N, in]*/) {
    {
      PhaseScope phase(Phase::norms_elementwise);
      kernels::bias_backward(exec, dy, bias.dv());
    }
    {
      PhaseScope phase(Phase::gemm);
      kernels::linear_backward_weight(exec, dy, x, weight.dw());
      kernels::linear_backward_input(exec, dy, weight.w(), dx);  // partial: this rank's columns
    }
    parallel::copy_to_tp_region_backward(tp, exec, dx);  // f: all-reduce
  }
};

// Input features split over the TP group: rank r holds W[:, in/tp slice] and a [N, in/tp] input
// (the output of a column-parallel layer), so no communication is needed on entry; the partial
// outputs are summed by g. The bias is replicated and added once, after the reduction.
template <class T>
struct RowParallelLinear {
  Parameter<T> weight;  // [out, in/tp]
  Parameter<T> bias;    // [out], replicated

  RowParallelLinear(const std::string& name, std::int64_t in, std::int64_t out, const Communicator& tp,
                    float init_std)
      : weight(make_parameter<T>(name + "/weight", {out, in}, Sharding{1, 1}, tp, true, init_std)),
        bias(make_parameter<T>(name + "/bias", {out}, Sharding{}, tp, false, 0.0f)) {}

  template <class XV, class YV>
  void forward(const Exec& exec, Communicator& tp, const XV& x /*[N, in/tp]*/, const YV& y /*[N, out]*/) {
    {
      PhaseScope phase(Phase::gemm);
      kernels::linear_forward(exec, x, weight.w(), y);
    }
    parallel::reduce_from_tp_region_forward(tp, exec, y);  // g: all-reduce partial sums
    PhaseScope phase(Phase::norms_elementwise);
    kernels::bias_add(exec, y, bias.v());
  }

  template <class DYV, class XV, class DXV>
  void backward(const Exec& exec, Communicator& tp, const DYV& dy /*[N, out]*/, const XV& x /*[N, in/tp]*/,
                const DXV& dx /*[N, in/tp]*/) {
    parallel::reduce_from_tp_region_backward(tp, exec, dy);  // g: identity
    {
      PhaseScope phase(Phase::norms_elementwise);
      kernels::bias_backward(exec, dy, bias.dv());  // same dy on every rank: stays replicated
    }
    PhaseScope phase(Phase::gemm);
    kernels::linear_backward_weight(exec, dy, x, weight.dw());
    kernels::linear_backward_input(exec, dy, weight.w(), dx);
  }
};

}  // namespace tptrain::model
