// The token dispatcher of a mixture of experts (Megatron-Core's MoEAlltoAllTokenDispatcher): takes
// each token's k copies to their experts and brings the experts' outputs back.
//
// Sorting: the copies are sorted by expert, token order within an expert, on the host (the
// all-to-all's counts need the positions there, and the order is then the same on every backend).
// Dropless by default; a capacity factor c > 0 keeps the first ceil(c·k·N/E) copies of each expert
// and drops the rest, whose output is 0. A capacity applies to each rank's own tokens.
//
// The tensor group: every tensor rank routes the same N tokens, gathered first with sequence
// parallelism; the experts' outputs are partial sums over the group (each expert's SwiGLU is split
// as the dense one is), so the weighted sum is reduced over it at the exit (all-reduce, or
// reduce-scatter with sequence parallelism), the conjugate of the gather at the entry.
//
// Expert parallelism (parallel.expert = ep): rank r of the expert group holds experts
// [r·E/ep, (r+1)·E/ep). The sorted copies go to their experts' ranks by all-to-all (counts first,
// on the host, then the rows) and the outputs come back by the inverse all-to-all (combine); the
// backward sends the output gradients the same way and returns the input gradients. Received rows
// are grouped by source rank, then expert: an expert runs once per source rank's run of rows.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kokkos_kernels/moe_routing.hpp"
#include "src/model/linear.hpp"
#include "src/parallel/collectives.hpp"

namespace tptrain::model {

// Rows whose number depends on the routing: allocated for the balanced load N·k when the layer is
// built (the most a rank has without expert parallelism, dropless), reallocated larger when a
// micro-batch needs more. Under expert parallelism a rank may receive up to ep·N·k rows; the
// buffers grow to the largest load seen (by half again at least, so that an imbalance that
// creeps up reallocates a few times, not every step), not to that bound.
template <class U>
struct GrowingRows {
  kernels::Matrix<U> storage;
  std::string name;
  std::int64_t cols = 0;
  GrowingRows() = default;
  GrowingRows(std::string label, std::int64_t columns, std::int64_t reserve) : name(std::move(label)), cols(columns) {
    (void)rows(reserve);
  }
  kernels::Matrix<U> rows(std::int64_t n) {
    const auto held = static_cast<std::int64_t>(storage.extent(0));
    if (n > held || storage.extent(1) == 0) {
      util::MemoryCategoryScope as(util::MemoryCategory::activations);
      storage = Matrix(Kokkos::view_alloc(Kokkos::WithoutInitializing, name),
                       held == 0 ? n : std::max<std::int64_t>(n, held * 3 / 2), cols);
    }
    return first_rows(storage, n);
  }

 private:
  using Matrix = kernels::Matrix<U>;
};

template <class T>
struct AllToAllTokenDispatcher {
  using Index = Kokkos::View<int**, Kokkos::LayoutRight, kx::MemSpace>;

  // Where one micro-batch's copies go (one set per micro-batch in flight).
  struct Routes {
    Index row;                 // [N, k]: each copy's row among the sorted copies (-1: dropped)
    std::int64_t tokens = 0;   // n of the micro-batch's N sorted (all of them, but in generation)
    std::int64_t kept = 0;     // sorted copies (rows) on this rank
    std::vector<std::size_t> send_rows, recv_rows;  // [ep]: rows sent to / received from each rank
    std::vector<std::int64_t> rows_by_source_expert;  // [ep · E/ep]: received rows by (source, local expert)
    // The copies routed to each expert [E] and those a capacity dropped: the router's losses and
    // the statistics read them.
    std::vector<std::int64_t> routed;
    std::vector<std::int64_t> routed_by_group;  // [G·E]: by group of group_rows tokens (sort), then expert
    std::int64_t dropped = 0;
  };

  int experts = 0, top_k = 0, local_experts = 0, first_expert = 0;
  double capacity_factor = 0;
  std::int64_t hidden = 0;
  int ep_rank = 0, ep_size = 1;
  Communicator* ep_ = nullptr;  // the expert-parallel group (null: ep = 1)
  SequenceParallelBuffers<T> sp;

  AllToAllTokenDispatcher(const GptShape& s, std::int64_t tokens, Workspace<T>& ws, int expert_rank)
      : experts(s.experts), top_k(s.experts_per_token), local_experts(model::local_experts(s)),
        first_expert(model::first_expert(s, expert_rank)), capacity_factor(s.moe_capacity_factor), hidden(s.hidden),
        ep_rank(expert_rank), ep_size(s.expert), sp(sequence_parallel_buffers(ws, s, tokens)) {}

  void bind_expert_group(Communicator& ep) {
    if (ep.size() != ep_size || ep.rank() != ep_rank)
      throw std::invalid_argument("tptrain: the expert group is rank " + std::to_string(ep.rank()) + " of " +
                                  std::to_string(ep.size()) + ", the model was built for rank " +
                                  std::to_string(ep_rank) + " of parallel.expert = " + std::to_string(ep_size));
    ep_ = ep.size() > 1 ? &ep : nullptr;
  }
  bool exchanges() const { return ep_ != nullptr; }
  void require_expert_group() const {
    if (ep_size > 1 && ep_ == nullptr)
      throw std::logic_error("tptrain: a mixture of experts over parallel.expert = " + std::to_string(ep_size) +
                             " ranks without its expert group (bind_expert_group)");
  }

  // All N tokens of x (this rank's [n, H] gathered from the tensor group with sequence parallelism).
  template <class XV>
  kernels::Matrix<T> gather_tokens(const Exec& exec, Communicator& tp, const XV& x) {
    if (!sp.enabled()) return x;
    parallel::gather_from_sequence_parallel_region_forward(tp, exec, x, sp.gathered);
    return sp.gathered;
  }

  // Sorts the copies of the n tokens whose experts are `expert` [n, k]: their rows (r.row, on the
  // device), the copies routed to and kept by each expert (and routed by each group of group_rows
  // tokens: the router's losses'), and the all-to-all's counts.
  void sort(const Exec& exec, Routes& r, const Index& expert, std::int64_t group_rows) {
    const int E = experts, k = top_k;
    const auto n = static_cast<std::int64_t>(expert.extent(0));
    r.tokens = n;
    const Index row = copy_rows(r);
    auto expert_h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), expert);
    r.routed.assign(static_cast<std::size_t>(E), 0);
    r.routed_by_group.assign(static_cast<std::size_t>(group_rows > 0 ? n / group_rows * E : E), 0);
    for (std::int64_t t = 0; t < n; ++t)
      for (int j = 0; j < k; ++j) {
        ++r.routed[static_cast<std::size_t>(expert_h(t, j))];
        ++r.routed_by_group[static_cast<std::size_t>((group_rows > 0 ? t / group_rows : 0) * E + expert_h(t, j))];
      }
    const std::int64_t capacity = expert_capacity(n);
    std::vector<std::int64_t> offset(static_cast<std::size_t>(E) + 1, 0);
    for (int e = 0; e < E; ++e) offset[e + 1] = offset[e] + std::min(r.routed[e], capacity);
    r.kept = offset[E];
    r.dropped = n * k - r.kept;
    auto row_h = Kokkos::create_mirror_view(row);
    std::vector<std::int64_t> next(static_cast<std::size_t>(E), 0);
    for (std::int64_t t = 0; t < n; ++t)
      for (int j = 0; j < k; ++j) {
        const int e = expert_h(t, j);
        const std::int64_t i = next[e]++;
        row_h(t, j) = i < capacity ? static_cast<int>(offset[e] + i) : -1;
      }
    Kokkos::deep_copy(exec, row, row_h);
    exec.fence();  // row_h is a temporary
    // The all-to-all's counts: rows for each expert rank, and the rows each expert gets from each.
    r.send_rows.assign(static_cast<std::size_t>(ep_size), 0);
    std::vector<std::int64_t> per_expert(static_cast<std::size_t>(E));
    for (int e = 0; e < E; ++e) {
      per_expert[e] = offset[e + 1] - offset[e];
      r.send_rows[static_cast<std::size_t>(e / local_experts)] += static_cast<std::size_t>(per_expert[e]);
    }
    r.rows_by_source_expert = ep_ ? parallel::all_to_all_counts(*ep_, per_expert) : per_expert;
    r.recv_rows.assign(static_cast<std::size_t>(ep_size), 0);
    for (int q = 0; q < ep_size; ++q)
      for (int e = 0; e < local_experts; ++e)
        r.recv_rows[q] += static_cast<std::size_t>(r.rows_by_source_expert[q * local_experts + e]);
  }

  // The rows this rank's experts receive.
  std::int64_t received_rows(const Routes& r) const {
    std::int64_t n = 0;
    for (std::int64_t c : r.rows_by_source_expert) n += c;
    return n;
  }

  // The copies of x's tokens in expert order, at their experts' ranks: `in` [received_rows, H]
  // (`sorted` [kept, H] the rank's own copies before the all-to-all).
  template <class XV>
  void dispatch(const Exec& exec, const XV& x, const Routes& r, const kernels::Matrix<T>& sorted,
                const kernels::Matrix<T>& in) {
    {
      PhaseScope phase(Phase::norms_elementwise);
      kernels::moe_permute(exec, x, copy_rows(r), ep_ ? sorted : in);
    }
    if (ep_) exchange(exec, sorted, r.send_rows, in, r.recv_rows);
  }

  // The experts' outputs `out` [received_rows, H] home (into `home` [kept, H]), weighted and
  // summed per token into y with `shared` (the shared experts' output [n, H], a partial sum over
  // tensor as the routed ones are; empty: none), and reduced over the tensor group.
  template <class WV, class YV>
  void combine(const Exec& exec, Communicator& tp, const kernels::Matrix<T>& out, const Routes& r,
               const kernels::Matrix<T>& home, const WV& weight, const YV& y, const kernels::Matrix<T>& shared) {
    if (ep_) exchange(exec, out, r.recv_rows, home, r.send_rows);
    PhaseScope phase(Phase::norms_elementwise);
    if (sp.enabled()) {
      kernels::moe_combine(exec, home, copy_rows(r), weight, sp.partial, true, shared);
      parallel::reduce_scatter_to_sequence_parallel_region_forward(tp, exec, sp.partial, y);
    } else {
      kernels::moe_combine(exec, home, copy_rows(r), weight, y, true, shared);
      parallel::reduce_from_tp_region_forward(tp, exec, y);
    }
  }

  // combine's backward, up to the experts: dy of all N tokens (gathered with sequence
  // parallelism into dy_gathered), each copy's output gradient d_sorted [kept, H], and the
  // weights' gradient dweight [n, k], summed over the tensor group (each rank's outputs were
  // partial sums).
  template <class DYV, class WV>
  void combine_backward(const Exec& exec, Communicator& tp, const DYV& dy,
                                      const kernels::Matrix<T>& dy_gathered, const kernels::Matrix<T>& home,
                                      const Routes& r, const WV& weight, const kernels::Matrix<T>& d_sorted,
                                      const kernels::Matrix<kx::acc_t<T>>& dweight) {
    kernels::Matrix<T> dyg = dy;
    if (sp.enabled()) {
      parallel::reduce_scatter_to_sequence_parallel_region_backward(tp, exec, dy, dy_gathered);  // all-gather
      dyg = dy_gathered;
    }
    {
      PhaseScope phase(Phase::norms_elementwise);
      kernels::moe_combine_backward(exec, dyg, home, copy_rows(r), weight, d_sorted, dweight);
    }
    parallel::all_reduce(tp, exec, dweight, parallel::ReduceOp::sum);
  }

  // The output gradients to the experts' ranks (as dispatch) and the input gradients back
  // (as combine), by the same counts.
  void send_to_experts(const Exec& exec, const kernels::Matrix<T>& d_sorted, const Routes& r,
                       const kernels::Matrix<T>& d_out) {
    if (ep_) exchange(exec, d_sorted, r.send_rows, d_out, r.recv_rows);
  }
  void return_from_experts(const Exec& exec, const kernels::Matrix<T>& d_in, const Routes& r,
                           const kernels::Matrix<T>& d_home) {
    if (ep_) exchange(exec, d_in, r.recv_rows, d_home, r.send_rows);
  }

  // dispatch's backward: each token's input gradient, the sum over its copies and the shared
  // experts' (`shared`; empty: none), into dx_all (all N tokens; the weights only give the shapes).
  template <class WV, class DXV>
  void unpermute(const Exec& exec, const kernels::Matrix<T>& d_home, const Routes& r, const WV& weight,
                 const DXV& dx_all, const kernels::Matrix<T>& shared) {
    PhaseScope phase(Phase::norms_elementwise);
    kernels::moe_combine(exec, d_home, copy_rows(r), weight, dx_all, /*weighted=*/false, shared);
  }

  // The input gradient's reduction over the tensor group (gather_tokens's backward): dx from the
  // partial sums dx_all.
  template <class DXV>
  void reduce_input_gradient(const Exec& exec, Communicator& tp, const kernels::Matrix<T>& dx_all, const DXV& dx) {
    if (sp.enabled())
      parallel::gather_from_sequence_parallel_region_backward_start(tp, exec, dx_all, dx).wait_on(exec);
    else
      parallel::copy_to_tp_region_backward_start(tp, exec, dx).wait_on(exec);
  }

  // f(local expert, first row, end row) for each run of received rows (one source rank's rows for
  // one expert), by source rank, then expert.
  template <class F>
  void for_each_received_run(const Routes& r, F f) const {
    std::int64_t begin = 0;
    for (int q = 0; q < (ep_ ? ep_size : 1); ++q)
      for (int e = 0; e < local_experts; ++e) {
        const std::int64_t rows =
            r.rows_by_source_expert[static_cast<std::size_t>(ep_ ? q * local_experts + e : first_expert + e)];
        if (rows > 0) f(static_cast<std::size_t>(e), begin, begin + rows);
        begin += rows;
      }
  }

  // The copies an expert keeps of n tokens: ceil(c·k·n/E), or all of them (n·k) when dropless or
  // when the capacity is at least that (in double, so that a huge factor means dropless, not an
  // overflowed integer).
  std::int64_t expert_capacity(std::int64_t n) const {
    const std::int64_t copies = n * top_k;
    if (!(capacity_factor > 0)) return copies;
    const double capacity = std::ceil(capacity_factor * double(top_k) * double(n) / double(experts));
    return capacity < double(copies) ? static_cast<std::int64_t>(capacity) : copies;
  }

 private:
  // The rows of the sorted tokens' copies, [n, k].
  static Index copy_rows(const Routes& r) {
    return Kokkos::subview(r.row, std::make_pair(std::int64_t(0), r.tokens), Kokkos::ALL());
  }

  // Rows [n, H] by rank: send_rows[r] rows to rank r, recv_rows[q] from rank q (elements = rows·H).
  void exchange(const Exec& exec, const kernels::Matrix<T>& send, const std::vector<std::size_t>& send_rows,
                const kernels::Matrix<T>& recv, const std::vector<std::size_t>& recv_rows) {
    PhaseScope phase(Phase::ep_comm);
    const auto H = static_cast<std::size_t>(hidden);
    std::vector<std::size_t> sc(send_rows.size()), rc(recv_rows.size());
    for (std::size_t q = 0; q < sc.size(); ++q) {
      sc[q] = send_rows[q] * H;
      rc[q] = recv_rows[q] * H;
    }
    parallel::iall_to_all(*ep_, exec, send, sc, recv, rc).wait_on(exec);
  }
};

}  // namespace tptrain::model
