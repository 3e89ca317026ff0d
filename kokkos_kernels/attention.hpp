// The batched attention core (attention_path.hpp; the model's alternative to flash_attention.hpp,
// the CUDA default): causal multi-head self-attention of the LOCAL heads of a tensor-parallel rank
// over stored S×S scores. The forward and backward drivers check the shapes and run one of two
// GEMM forms: the fixed number of large calls of attention_batched.hpp (unless the process asks
// for causal tiles, attention_path.hpp), or the causal-tile GEMMs of attention_gemm.hpp around the
// fused softmax passes of causal_softmax.hpp (described below; a test reference, and the fallback
// without a pointer-table workspace), with the same results to rounding.
//
// qkv [B*S, nh·d + nkv·d + nkv·dv], nh = nh_local, nkv = the rank's key/value heads
// (AttentionOptions; nh without grouped-query attention), columns [Q of the nh heads | K of the
// nkv | V of the nkv]; Q and K heads have d columns, V heads dv (AttentionOptions::dv: d but in
// multi-head latent attention, DeepSeek-V2/V3: d = 192, dv = 128); head h occupies columns
// h*d .. h*d+d-1 inside its block (h*dv .. in V's), and query head h reads key/value head
// h / (nh/nkv) in place. out, dout [B*S, nh·dv]. Row t = b*S + s. Per (b, h), with
// scale = 1/sqrt(d) and doc_i the first position row i sees (0, or its document's start with
// AttentionOptions::doc):
//   S = Q Kᵀ (over d)                              (GEMM into the probs workspace)
//   P_ij = exp(scale S_ij - lse_i) for doc_i <= j <= i, 0 otherwise,  lse_i = log Σ exp(scale S_ij)
//   O = P V (rows of dv)                           (GEMM into out)
// Backward (the probabilities are recomputed from lse: callers share one probs buffer across
// layers, so nothing of size S² survives between forward and backward):
//   S = Q Kᵀ, P from lse;  dV = Pᵀ dO;  then per query row tile [r0, r1), into a row-tile
//   buffer [B, nh, tile, S] (the only other score-sized memory, tile = causal_tile(S) rows):
//     dP = dO[r0, r1) V[0, r1)ᵀ (over dv)
//     dS_ij = scale P_ij (dP_ij - Σ_l P_il dP_il)  (softmax Jacobian, masked 0)
//     dQ[r0, r1) = dS K[0, r1);  dK[0, r1) += dSᵀ Q[r0, r1)   (rows of d)
//   The tiles run last to first, so the first one (which covers every key row) initialises dK
//   with beta = 0 and the others accumulate with beta = 1: a fixed order, deterministic. With
//   grouped-query attention each GEMM runs once per group member (detail::group_member), over the
//   nkv key/value heads, and dK and dV accumulate over the members in order.
// Results are bitwise reproducible for a fixed team size and a fixed GEMM backend.
//
// Precision: qkv, out, the scores / probabilities and their gradients share one storage type T
// (float, double, kx::bf16 or kx::fp16: Megatron keeps the S×S scores in the compute type); lse
// holds acc_t<T>. dK and dV, sums over query row tiles (or chunks) and group members, are
// accumulated in an fp32 workspace when the caller gives one (dkv_sum; the model does), else in
// dqkv itself, which for 16-bit T rounds them once per term.
// Views: qkv/out/dout/dqkv rank 2, probs rank 4 ([B, nh_local, S, S]) and the backward's
// dprobs_tile rank 4 ([B, nh_local, >= tile, S]), any layout whose last index has stride 1
// (LayoutRight views, row-range subviews): the GEMMs address them through data() and strides.
// lse is rank 1, [B*nh_local*S], entry (b*nh_local + h)*S + i. B*nh_local*S, the number of
// teams, must fit in a league (detail::league_size, std::length_error otherwise); S, d and every
// leading dimension must fit in an int (BLAS); indices are 64-bit. dqkv has qkv's layout; dkv_sum
// [B*S, nkv·d + nkv·dv] (dK columns first, then dV).
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "kokkos_kernels/attention_batched.hpp"
#include "kokkos_kernels/attention_gemm.hpp"
#include "kokkos_kernels/attention_path.hpp"
#include "kokkos_kernels/causal_softmax.hpp"
#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/detail.hpp"
#include "kokkos_kernels/elementwise.hpp"
#include "kokkos_kernels/views.hpp"

namespace tptrain::kernels {

namespace detail {

template <class V>
void require_unit_last_stride(const V& v, const char* kernel, const char* what) {
  constexpr int rank = static_cast<int>(V::rank);
  require(v.stride(rank - 1) == 1 || v.extent(rank - 1) <= 1, kernel, what);
}

// Whether `workspace` can hold the batched path's pointer tables for B*nh pairs (an empty
// view cannot: the caller then runs the causal-tile path).
template <class Exec, class WV>
bool holds_pointer_tables(const WV& workspace, std::int64_t B, std::int64_t nh) {
  if (workspace.size() == 0 || !workspace.span_is_contiguous()) return false;
  static_assert(Kokkos::SpaceAccessibility<Exec, typename WV::memory_space>::accessible,
                "tptrain::kernels: the attention workspace must be accessible from Exec");
  const auto bytes = static_cast<std::int64_t>(workspace.span() * sizeof(typename WV::value_type));
  return bytes >= batched_attention_pointer_bytes(B, nh) &&
         reinterpret_cast<std::uintptr_t>(workspace.data()) % alignof(void*) == 0;
}

// Whether two views' spans of memory overlap (host pointers only, nothing read).
template <class VA, class VB>
bool shares_storage(const VA& a, const VB& b) {
  const auto* pa = reinterpret_cast<const unsigned char*>(a.data());
  const auto* pb = reinterpret_cast<const unsigned char*>(b.data());
  const std::size_t na = a.span() * sizeof(typename VA::value_type), nb = b.span() * sizeof(typename VB::value_type);
  return na > 0 && nb > 0 && pa < pb + nb && pb < pa + na;
}

// The backward's head dims from its operands (it is given no d): dv from dout [B*S, nh·dv]; d
// from qkv [B*S, (nh + nkv)·d + nkv·dv] when V has a width of its own (option_dv > 0, which must
// equal dout's), else dv. {0, 0} when the widths fit no such layout.
struct HeadDims {
  std::int64_t d = 0, dv = 0;
};
inline HeadDims backward_head_dims(const std::size_t qkv_columns, const std::size_t dout_columns, const std::int64_t nh,
                                   const std::int64_t nkv, const std::int64_t option_dv) {
  const auto out_columns = static_cast<std::int64_t>(dout_columns);
  if (nh <= 0 || nkv <= 0 || option_dv < 0 || out_columns % nh != 0) return {};
  const std::int64_t dv = out_columns / nh;
  if (dv <= 0 || (option_dv > 0 && option_dv != dv)) return {};
  if (option_dv == 0) return {dv, dv};
  const std::int64_t qk_columns = static_cast<std::int64_t>(qkv_columns) - nkv * dv;
  if (qk_columns <= 0 || qk_columns % (nh + nkv) != 0) return {};
  return {qk_columns / (nh + nkv), dv};
}

}  // namespace detail

// Grouped-query attention, document masks and value heads of their own width (all optional):
// query head h reads key/value head h / (nh_local / kv_heads) of qkv
// [B*S, (nh_local + kv_heads)·d + kv_heads·dv] in place (Hugging Face's repeat_kv without the
// copy), doc[b·S + i] is the first position row i attends to (data.document_mask: the start of
// its document), and V, O, dO and dV have dv columns per head (multi-head latent attention), Q
// and K d. The backward, which is given no d, takes d from qkv's width when dv is set.
struct AttentionOptions {
  std::int64_t kv_heads = 0;          // 0: as many as the query heads
  const std::int32_t* doc = nullptr;  // [B·S], or none
  std::int64_t dv = 0;                // V's head dim; 0: d
  std::int64_t kv_heads_for(std::int64_t nh) const { return kv_heads > 0 ? kv_heads : nh; }
  std::int64_t dv_for(std::int64_t d) const { return dv > 0 ? dv : d; }
};

// Rows of the backward's row-tile buffer dprobs_tile [B, nh_local, tile, S] for sequence length
// S: the causal tile, min(S, 128).
inline std::int64_t attention_backward_tile_rows(std::int64_t S) { return detail::causal_tile(S); }

// Forward. probs is a workspace (its contents afterwards are P, but attention_backward does not
// need them); lse is the only state the backward needs besides qkv.
// kept_scores (may be empty): a [B, nh_local, S, S] buffer that receives the raw scores Q Kᵀ and
// keeps them for the backward (activation recomputation "none"), which then skips its Q Kᵀ GEMM
// (attention_backward_tiled with scores_kept): the S² memory Korthikanti et al.'s selective
// recomputation saves, traded for one GEMM of 2·B·nh·S²·d flops. The backward rebuilds P from the
// same scores either way, so the gradients are bitwise those of the recomputing backward.
//
// workspace (may be empty): the backward's row-tile buffer dprobs_tile, which the batched path
// (attention_path.hpp, attention_batched.hpp) uses for its GEMM pointer tables; without it, or
// when it is too small, the forward takes the causal-tile path.
template <class Exec, class QKV, class OV, class PV, class LV, class KV, class WV>
void attention_forward(const Exec& exec,
                       const QKV& qkv,    // [B*S, (nh + nkv)·d + nkv·dv]
                       const OV& out,     // [B*S, nh·dv] out (overwritten)
                       const PV& probs,   // [B, nh_local, S, S] workspace
                       const LV& lse,     // [B*nh_local*S] out
                       const std::int64_t B, const std::int64_t S, const std::int64_t nh_local,
                       const std::int64_t d, const KV& kept_scores, const WV& workspace,
                       const AttentionOptions& options = {}) {
  detail::check_view<Exec, QKV, 2>();
  detail::check_view<Exec, OV, 2>();
  detail::check_view<Exec, PV, 4>();
  detail::check_view<Exec, LV, 1>();
  detail::check_writable<OV>();
  detail::check_writable<PV>();
  detail::check_writable<LV>();
  using T = typename OV::non_const_value_type;
  using A = kx::acc_t<T>;
  static_assert(std::is_same<typename QKV::non_const_value_type, T>::value &&
                    std::is_same<typename PV::non_const_value_type, T>::value,
                "tptrain::kernels::attention_forward: qkv, out and probs hold one value type");
  static_assert(std::is_same<typename LV::non_const_value_type, A>::value,
                "tptrain::kernels::attention_forward: lse holds acc_t of that type");
  const char* kernel = "attention_forward";
  detail::require(B >= 0 && S >= 0 && nh_local > 0 && d > 0 && options.dv >= 0, kernel,
                  "need B, S, dv >= 0 and nh_local, d > 0");
  const std::int64_t nh = nh_local, hl = nh * d, nkv = options.kv_heads_for(nh), dv = options.dv_for(d);
  detail::require(nh % nkv == 0, kernel, "the key/value heads must divide the query heads");
  detail::require(qkv.extent(0) == static_cast<std::size_t>(B * S) &&
                      qkv.extent(1) == static_cast<std::size_t>((nh + nkv) * d + nkv * dv) &&
                      out.extent(0) == static_cast<std::size_t>(B * S) &&
                      out.extent(1) == static_cast<std::size_t>(nh * dv),
                  kernel,
                  "shapes must be qkv[B*S, (nh_local + kv_heads)*d + kv_heads*dv], out[B*S, nh_local*dv]");
  detail::require(probs.extent(0) == static_cast<std::size_t>(B) &&
                      probs.extent(1) == static_cast<std::size_t>(nh) &&
                      probs.extent(2) == static_cast<std::size_t>(S) &&
                      probs.extent(3) == static_cast<std::size_t>(S),
                  kernel, "probs must be [B, nh_local, S, S]");
  detail::require(lse.extent(0) == static_cast<std::size_t>(B * nh * S), kernel,
                  "lse must be [B*nh_local*S]");
  detail::require_unit_last_stride(qkv, kernel, "qkv rows must be contiguous");
  detail::require_unit_last_stride(out, kernel, "out rows must be contiguous");
  detail::require_unit_last_stride(probs, kernel, "probs rows must be contiguous");
  const bool keep = kept_scores.size() > 0;
  if (keep) {
    detail::check_view<Exec, KV, 4>();
    static_assert(std::is_same<typename KV::value_type, T>::value,
                  "tptrain::kernels::attention_forward: kept_scores holds the value type");
    for (int r = 0; r < 4; ++r)
      detail::require(kept_scores.extent(r) == probs.extent(r) && kept_scores.stride(r) == probs.stride(r), kernel,
                      "kept_scores must have the shape and strides of probs");
  }
  // Every size check before the first launch: a refused shape leaves the outputs untouched.
  detail::league_size<Exec>(B * nh * S, kernel);
  detail::require_blas_int(qkv.stride(0), kernel, "qkv.stride(0)");
  detail::require_blas_int(out.stride(0), kernel, "out.stride(0)");
  detail::require_blas_int(probs.stride(2), kernel, "probs.stride(2)");
  detail::require_blas_int(S, kernel, "S");
  if (B == 0 || S == 0) return;
  if (attention_path<Exec>() != AttentionPath::causal_tiles && detail::holds_pointer_tables<Exec>(workspace, B, nh)) {
    attention_forward_batched(exec, qkv, out, probs, lse, B, S, nh, nkv, d, kept_scores, keep, workspace, options.doc,
                              dv);
    return;
  }
  // Causal tiles: with grouped-query attention each GEMM runs once per group member j, over the
  // nkv key/value heads (detail::group_member).
  const A scale = A(1) / kx::sqrt(static_cast<A>(d));
  const std::int64_t g = nh / nkv;
  const auto Q = detail::qkv_block(qkv, 0, S, d), K = detail::qkv_block(qkv, hl, S, d),
             V = detail::qkv_block(qkv, hl + nkv * d, S, dv);
  const auto P = detail::score_matrices(probs), O = detail::head_columns(out, S, dv);
  const auto scores = keep ? detail::score_matrices(kept_scores) : P;  // keep: the GEMM writes the kept buffer
  for (std::int64_t j = 0; j < g; ++j)
    detail::causal_scores_gemm(exec, detail::group_member(Q, j, g), K, detail::group_member(scores, j, g), S, d, B,
                               nkv);
  if (keep)
    causal_softmax_forward(exec, kept_scores, probs, lse, scale, options.doc);
  else
    causal_softmax_forward(exec, probs, lse, scale, options.doc);
  for (std::int64_t j = 0; j < g; ++j)
    detail::causal_rows_gemm(exec, detail::group_member(P, j, g), V, detail::group_member(O, j, g), S, dv, B, nkv);
}

// The same without a workspace: the causal-tile path.
template <class Exec, class QKV, class OV, class PV, class LV, class KV>
void attention_forward(const Exec& exec, const QKV& qkv, const OV& out, const PV& probs, const LV& lse,
                       const std::int64_t B, const std::int64_t S, const std::int64_t nh_local, const std::int64_t d,
                       const KV& kept_scores) {
  attention_forward(exec, qkv, out, probs, lse, B, S, nh_local, d, kept_scores, PV());
}

// The same without kept scores (the backward recomputes them).
template <class Exec, class QKV, class OV, class PV, class LV>
void attention_forward(const Exec& exec, const QKV& qkv, const OV& out, const PV& probs, const LV& lse,
                       const std::int64_t B, const std::int64_t S, const std::int64_t nh_local, const std::int64_t d) {
  attention_forward(exec, qkv, out, probs, lse, B, S, nh_local, d, PV());
}

// Same, with an internally allocated probs workspace (one S² allocation per call).
template <class Exec, class QKV, class OV, class LV>
void attention_forward(const Exec& exec, const QKV& qkv, const OV& out, const LV& lse,
                       const std::int64_t B, const std::int64_t S, const std::int64_t nh_local,
                       const std::int64_t d) {
  using T = typename OV::non_const_value_type;
  detail::require(B >= 0 && S >= 0 && nh_local > 0, "attention_forward",
                  "need B, S >= 0 and nh_local > 0");
  Kokkos::View<T****, Kokkos::LayoutRight, typename OV::memory_space> probs(
      Kokkos::view_alloc(exec, Kokkos::WithoutInitializing,
                         std::string("tptrain::kernels::attention_forward::probs")),
      B, nh_local, S, S);
  attention_forward(exec, qkv, out, probs, lse, B, S, nh_local, d);
  kx::fence(exec, "tptrain::kernels::attention_forward::free_probs");
}

// Backward with an explicit query row tile (tile_rows >= 1; attention_backward uses
// attention_backward_tile_rows(S)). dqkv is overwritten (all three blocks). probs
// [B, nh_local, S, S] is a workspace (it may be the one attention_forward used; its contents are
// not read); dprobs_tile [B, nh_local, >= min(S, tile_rows), S] is the row-tile workspace.
// B, nh_local, S come from probs, dv = dout.extent(1) / nh_local, d = dv without options.dv, else
// (qkv.extent(1) - kv_heads·dv) / (nh_local + kv_heads).
//
// dkv_sum (16-bit T only; may be empty): an [B*S, kv_heads·(d + dv)] acc_t workspace in which dK
// (columns [0, kv_heads·d)) and dV are summed in fp32 over the query row tiles and the group's
// query heads, and rounded into dqkv once. Without it a 16-bit dK is rounded once per tile and
// group member. dout may be dqkv's Q block (its first nh_local·dv columns) when dv <= d: a tile's
// dO rows are read before its dQ is written, and dK and dV lie beyond them.
// scores_kept: probs holds the raw scores Q Kᵀ that attention_forward kept (kept_scores), so
// the Q Kᵀ GEMM is skipped; P is rebuilt from them in place either way.
template <class Exec, class DOV, class QKV, class LV, class DQKV, class PV, class DPV, class DKV>
void attention_backward_tiled(const Exec& exec,
                              const DOV& dout,          // [B*S, nh·dv]
                              const QKV& qkv,           // [B*S, (nh + nkv)·d + nkv·dv] forward input
                              const LV& lse,            // [B*nh_local*S] from attention_forward
                              const DQKV& dqkv,         // [B*S, (nh + nkv)·d + nkv·dv] out (overwritten)
                              const PV& probs,          // [B, nh_local, S, S] workspace (or kept scores)
                              const DPV& dprobs_tile,   // [B, nh_local, >= tile, S] workspace
                              const std::int64_t tile_rows,
                              const DKV& dkv_sum,       // [B*S, nkv·(d + dv)] acc_t workspace, or empty
                              const bool scores_kept = false, const bool check_only = false,
                              const AttentionOptions& options = {}) {
  detail::check_view<Exec, DOV, 2>();
  detail::check_view<Exec, QKV, 2>();
  detail::check_view<Exec, LV, 1>();
  detail::check_view<Exec, DQKV, 2>();
  detail::check_view<Exec, PV, 4>();
  detail::check_view<Exec, DPV, 4>();
  detail::check_writable<DQKV>();
  detail::check_writable<PV>();
  detail::check_writable<DPV>();
  using T = typename DQKV::non_const_value_type;
  using A = kx::acc_t<T>;
  static_assert(std::is_same<typename DOV::non_const_value_type, T>::value &&
                    std::is_same<typename QKV::non_const_value_type, T>::value &&
                    std::is_same<typename PV::non_const_value_type, T>::value &&
                    std::is_same<typename DPV::non_const_value_type, T>::value,
                "tptrain::kernels::attention_backward: dout, qkv, dqkv, probs and dprobs_tile "
                "hold one value type");
  static_assert(std::is_same<typename LV::non_const_value_type, A>::value,
                "tptrain::kernels::attention_backward: lse holds acc_t of that type");
  const char* kernel = "attention_backward";
  const std::int64_t B = probs.extent(0), nh = probs.extent(1), S = probs.extent(2);
  detail::require(nh > 0 && probs.extent(3) == static_cast<std::size_t>(S), kernel,
                  "probs must be [B, nh_local>0, S, S]");
  const std::int64_t nkv = options.kv_heads_for(nh);
  detail::require(nh % nkv == 0, kernel, "the key/value heads must divide the query heads");
  detail::require(tile_rows >= 1, kernel, "the row tile must be >= 1");
  const std::int64_t tile = kx::min(S, tile_rows);
  detail::require(dprobs_tile.extent(0) == probs.extent(0) &&
                      dprobs_tile.extent(1) == probs.extent(1) &&
                      dprobs_tile.extent(2) >= static_cast<std::size_t>(tile) &&
                      dprobs_tile.extent(3) == probs.extent(3),
                  kernel, "dprobs_tile must be [B, nh_local, >= tile rows, S]");
  const detail::HeadDims dims = detail::backward_head_dims(qkv.extent(1), dout.extent(1), nh, nkv, options.dv);
  detail::require(dims.d > 0, kernel,
                  "dout.extent(1) must be nh_local*dv, and with options.dv qkv.extent(1) "
                  "(nh_local + kv_heads)*d + kv_heads*dv, with d, dv > 0");
  const std::int64_t d = dims.d, dv = dims.dv, hl = nh * d;
  // dO of dv > d columns a head would reach from dqkv's Q block into its K block, which the last
  // row tile's dK GEMM overwrites before the earlier tiles read their dO.
  detail::require(dv <= d || !detail::shares_storage(dout, dqkv), kernel,
                  "with dv > d, dout must not share dqkv's storage");
  const auto rows = static_cast<std::size_t>(B * S);
  const auto width = static_cast<std::size_t>(hl + nkv * (d + dv));
  detail::require(dout.extent(0) == rows && qkv.extent(0) == rows && dqkv.extent(0) == rows &&
                      qkv.extent(1) == width && dqkv.extent(1) == width,
                  kernel,
                  "shapes must be dout[B*S, nh_local*dv], qkv,dqkv[B*S, (nh_local + kv_heads)*d + kv_heads*dv]");
  detail::require(lse.extent(0) == static_cast<std::size_t>(B * nh * S), kernel,
                  "lse must be [B*nh_local*S]");
  static_assert(std::is_same<typename DKV::non_const_value_type, A>::value,
                "tptrain::kernels::attention_backward: dkv_sum holds acc_t of the value type");
  const bool summed = kx::is_half_v<T> && dkv_sum.extent(0) > 0;
  if (summed) {
    detail::check_view<Exec, DKV, 2>();
    detail::require(dkv_sum.extent(0) == rows && dkv_sum.extent(1) == static_cast<std::size_t>(nkv * (d + dv)),
                    kernel, "dkv_sum must be [B*S, kv_heads*(d + dv)]");
    detail::require_unit_last_stride(dkv_sum, kernel, "dkv_sum rows must be contiguous");
    detail::require_blas_int(dkv_sum.stride(0), kernel, "dkv_sum.stride(0)");
  }
  detail::require_unit_last_stride(dout, kernel, "dout rows must be contiguous");
  detail::require_unit_last_stride(qkv, kernel, "qkv rows must be contiguous");
  detail::require_unit_last_stride(dqkv, kernel, "dqkv rows must be contiguous");
  detail::require_unit_last_stride(probs, kernel, "probs rows must be contiguous");
  detail::require_unit_last_stride(dprobs_tile, kernel, "dprobs_tile rows must be contiguous");
  // Every size check before the first launch: a refused shape leaves dqkv untouched.
  detail::league_size<Exec>(B * nh * S, kernel);
  detail::require_blas_int(dout.stride(0), kernel, "dout.stride(0)");
  detail::require_blas_int(qkv.stride(0), kernel, "qkv.stride(0)");
  detail::require_blas_int(dqkv.stride(0), kernel, "dqkv.stride(0)");
  detail::require_blas_int(probs.stride(2), kernel, "probs.stride(2)");
  detail::require_blas_int(dprobs_tile.stride(2), kernel, "dprobs_tile.stride(2)");
  detail::require_blas_int(S, kernel, "S");
  if (B == 0 || S == 0 || check_only) return;
  const A scale = A(1) / kx::sqrt(static_cast<A>(d));
  const std::int64_t g = nh / nkv;
  const auto Q = detail::qkv_block(qkv, 0, S, d), K = detail::qkv_block(qkv, hl, S, d),
             V = detail::qkv_block(qkv, hl + nkv * d, S, dv);
  const auto dQ = detail::qkv_block(dqkv, 0, S, d), dK = detail::qkv_block(dqkv, hl, S, d),
             dV = detail::qkv_block(dqkv, hl + nkv * d, S, dv);
  const auto dO = detail::head_columns(dout, S, dv);
  const auto P = detail::score_matrices(probs), dS = detail::score_matrices(dprobs_tile);
  const auto member = [g](const auto& m, std::int64_t j) { return detail::group_member(m, j, g); };
  // dK and dV of a key/value head sum over the group's members (beta = 1 after the first).
  const auto backward = [&](const auto& dKt, const auto& dVt) {
    if (!scores_kept)
      for (std::int64_t j = 0; j < g; ++j) detail::causal_scores_gemm(exec, member(Q, j), K, member(P, j), S, d, B, nkv);
    causal_softmax_recompute(exec, probs, lse, scale, options.doc);
    for (std::int64_t j = 0; j < g; ++j)
      detail::causal_cols_gemm(exec, member(P, j), member(dO, j), dVt, S, dv, B, nkv, j == 0 ? A(0) : A(1));
    // Query row tiles, last first: the last tile sees every key, so its dK GEMM (beta = 0)
    // initialises all of dK and the earlier, shorter tiles accumulate onto it (beta = 1).
    const std::int64_t tiles = (S + tile - 1) / tile;
    for (std::int64_t t = tiles - 1; t >= 0; --t) {
      const std::int64_t r0 = t * tile, r1 = kx::min(S, r0 + tile), n = r1 - r0;
      for (std::int64_t j = 0; j < g; ++j)
        detail::per_head_gemm(exec, 'N', 'T', n, r1, dv, member(dO, j).at(r0, 0), V, member(dS, j), B, nkv);
      causal_softmax_backward_rows(exec, probs, dprobs_tile, r0, r1, scale, options.doc);
      for (std::int64_t j = 0; j < g; ++j) {
        detail::per_head_gemm(exec, 'N', 'N', n, d, r1, member(dS, j), K, member(dQ, j).at(r0, 0), B, nkv);
        detail::per_head_gemm(exec, 'T', 'N', r1, d, n, member(dS, j), member(Q, j).at(r0, 0), dKt, B, nkv,
                              t == tiles - 1 && j == 0 ? A(0) : A(1));
      }
    }
  };
  if (summed) {
    backward(detail::qkv_block(dkv_sum, 0, S, d), detail::qkv_block(dkv_sum, nkv * d, S, dv));
    convert(exec, dkv_sum, Kokkos::subview(dqkv, Kokkos::ALL(), std::make_pair(hl, hl + nkv * (d + dv))));
  } else {
    backward(dK, dV);
  }
}

// The same without a dK/dV workspace.
template <class Exec, class DOV, class QKV, class LV, class DQKV, class PV, class DPV>
void attention_backward_tiled(const Exec& exec, const DOV& dout, const QKV& qkv, const LV& lse,
                              const DQKV& dqkv, const PV& probs, const DPV& dprobs_tile,
                              const std::int64_t tile_rows) {
  using A = kx::acc_t<typename DQKV::non_const_value_type>;
  attention_backward_tiled(exec, dout, qkv, lse, dqkv, probs, dprobs_tile, tile_rows,
                           Kokkos::View<A**, Kokkos::LayoutRight, typename DQKV::memory_space>());
}

// Backward with the row tile attention_backward_tile_rows(S): dprobs_tile is
// [B, nh_local, >= min(S, 128), S] (a full [B, nh_local, S, S] buffer works too).
// The path is attention_path<Exec>(): batched (attention_batched.hpp) when the buffers allow it
// (S >= 2, probs LayoutRight-contiguous, qkv and dqkv of one row pitch, dprobs_tile large enough
// for the pointer tables, and dv <= d: the batched path keeps dO in dqkv's Q block), else causal
// tiles. dout may be dqkv's Q block (columns [0, nh·dv), dv <= d): both paths read each query row of
// dO before they write its dQ; the model passes it so. kept_scores
// (may be empty): the raw scores attention_forward kept (recompute none); probs is then a free
// workspace (the tiled path does not need it). dkv_sum as for attention_backward_tiled.
template <class Exec, class DOV, class QKV, class LV, class DQKV, class PV, class DPV, class DKV, class KV>
void attention_backward(const Exec& exec,
                        const DOV& dout,            // [B*S, nh·dv]
                        const QKV& qkv,             // [B*S, (nh + nkv)·d + nkv·dv] forward input
                        const LV& lse,              // [B*nh_local*S] from attention_forward
                        const DQKV& dqkv,           // [B*S, (nh + nkv)·d + nkv·dv] out (overwritten)
                        const PV& probs,            // [B, nh_local, S, S] workspace
                        const DPV& dprobs_tile,     // [B, nh_local, tile, S] workspace
                        const DKV& dkv_sum,         // [B*S, nkv·(d + dv)] acc_t workspace, or empty
                        const KV& kept_scores,      // [B, nh_local, S, S] or empty
                        const AttentionOptions& options = {}) {
  const bool kept = kept_scores.size() > 0;
  const std::int64_t B = probs.extent(0), nh = probs.extent(1), S = probs.extent(2);
  // dO [B*S, nh·dv] must fit dqkv's Q block [B*S, nh·d], where the batched path reads it.
  const detail::HeadDims dims =
      detail::backward_head_dims(qkv.extent(1), dout.extent(1), nh, options.kv_heads_for(nh), options.dv);
  const bool batched = attention_path<Exec>() != AttentionPath::causal_tiles && dims.dv <= dims.d && S >= 2 &&
                       probs.span_is_contiguous() &&
                       probs.stride(2) == static_cast<std::size_t>(S) &&
                       probs.stride(1) == static_cast<std::size_t>(S * S) && qkv.stride(0) == dqkv.stride(0) &&
                       detail::holds_pointer_tables<Exec>(dprobs_tile, B, nh);
  if (!batched) {
    if (kept)
      attention_backward_tiled(exec, dout, qkv, lse, dqkv, kept_scores, dprobs_tile, attention_backward_tile_rows(S),
                               dkv_sum, true, false, options);
    else
      attention_backward_tiled(exec, dout, qkv, lse, dqkv, probs, dprobs_tile, attention_backward_tile_rows(S),
                               dkv_sum, false, false, options);
    return;
  }
  // The tiled driver's checks (shapes, types, sizes), with a 1-row tile and nothing run: the
  // batched path then works on shapes that are known good.
  attention_backward_tiled(exec, dout, qkv, lse, dqkv, probs, dprobs_tile, 1, dkv_sum, false, /*check_only=*/true,
                           options);
  if (kept)
    for (int r = 0; r < 4; ++r)
      detail::require(kept_scores.extent(r) == probs.extent(r), "attention_backward",
                      "kept_scores must have the shape of probs");
  if (B == 0 || S == 0) return;
  attention_backward_batched(exec, dout, qkv, lse, dqkv, probs, kept_scores, kept, dprobs_tile,
                             options.kv_heads_for(nh), dkv_sum, options.doc, dims.d, dims.dv);
}

template <class Exec, class DOV, class QKV, class LV, class DQKV, class PV, class DPV>
void attention_backward(const Exec& exec,
                        const DOV& dout,            // [B*S, Hl]
                        const QKV& qkv,             // [B*S, 3*Hl] forward input
                        const LV& lse,              // [B*nh_local*S] from attention_forward
                        const DQKV& dqkv,           // [B*S, 3*Hl] out (overwritten)
                        const PV& probs,            // [B, nh_local, S, S] workspace
                        const DPV& dprobs_tile) {   // [B, nh_local, tile, S] workspace
  using A = kx::acc_t<typename DQKV::non_const_value_type>;
  attention_backward(exec, dout, qkv, lse, dqkv, probs, dprobs_tile,
                     Kokkos::View<A**, Kokkos::LayoutRight, typename DQKV::memory_space>(), PV());
}

// Same, with internally allocated workspaces (an S² and a tile×S allocation per call; pass
// workspaces to the overload above in a training loop).
template <class Exec, class DOV, class QKV, class LV, class DQKV>
void attention_backward(const Exec& exec, const DOV& dout, const QKV& qkv, const LV& lse,
                        const DQKV& dqkv, const std::int64_t B, const std::int64_t S,
                        const std::int64_t nh_local) {
  using T = typename DQKV::non_const_value_type;
  detail::require(B >= 0 && S >= 0 && nh_local > 0, "attention_backward",
                  "need B, S >= 0 and nh_local > 0");
  using W = Kokkos::View<T****, Kokkos::LayoutRight, typename DQKV::memory_space>;
  W probs(Kokkos::view_alloc(exec, Kokkos::WithoutInitializing,
                             std::string("tptrain::kernels::attention_backward::probs")),
          B, nh_local, S, S);
  W dprobs_tile(Kokkos::view_alloc(exec, Kokkos::WithoutInitializing,
                                   std::string("tptrain::kernels::attention_backward::dprobs_tile")),
                B, nh_local, attention_backward_tile_rows(S), S);
  attention_backward(exec, dout, qkv, lse, dqkv, probs, dprobs_tile);
  // The workspaces are freed on return: make sure the kernels using them are done.
  kx::fence(exec, "tptrain::kernels::attention_backward::free_workspaces");
}

}  // namespace tptrain::kernels
