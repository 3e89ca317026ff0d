// Incremental forward of one pipeline stage of a GptModel for generation (docs/design.md,
// "Generation"), for every block specification: n new tokens of one sequence at positions
// [p, p + n) — the prompt as one block (prefill), then one row per generated token — against the
// keys and values of positions [0, p) kept in a KvCache per block (src/model/kv_cache.hpp). It
// runs the model's own layers (the embedding at positions p…, each TransformerLayer::forward with
// a CacheStep, the final norm, the output layer): one forward for training and generation; what
// it owns is the caches, the stage's input/output rows and the last row's logits.
//
// Between stages the caller moves [n, H] tensors, as pipeline_forward does for training:
// a non-first stage reads stage_input(n) (filled by the caller), a non-last stage leaves
// stage_output(n). The last stage leaves the local logits of the block's last row,
// [V_padded/tp] of its vocabulary slice, in last_logits(). Every tensor rank holds the n rows
// whole; the collectives are the training forward's (the embedding's and the row-parallel
// layers' all-reduce over the tensor group, through src/parallel). The model must be built
// without sequence parallelism (generate does).
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "src/model/gpt_model.hpp"
#include "src/model/kv_cache.hpp"

namespace tptrain::model {

template <class T>
class GptInference {
 public:
  // Caches of model.shape().seq_length positions, blocks of at most that many new rows.
  explicit GptInference(GptModel<T>& model) : model_(model), positions_(model.shape().seq_length) {
    const GptShape& s = model.shape();
    if (s.splits_sequence())
      throw std::invalid_argument("tptrain: GptInference: build the generation model without sequence parallelism");
    caches_.reserve(static_cast<std::size_t>(model.local_layers()));
    for (int l = 0; l < model.local_layers(); ++l)
      caches_.push_back(model.layer(l).attn->make_cache("layers/" + std::to_string(model.first_layer() + l),
                                                        positions_, l > 0 ? &caches_[0] : nullptr));
    util::MemoryCategoryScope as(util::MemoryCategory::workspace);
    for (auto& r : residual_) r = kernels::Matrix<T>("inference.residual", positions_, s.hidden);
    if (model.is_last_stage()) {
      final_norm_out_ = kernels::Matrix<T>("inference.ln_f", 1, s.hidden);
      logits_ = kernels::Matrix<T>("inference.logits", 1, s.local_vocab());
    }
  }

  // Tokens cached so far: the position of the next row.
  std::int64_t position() const { return position_; }
  std::int64_t max_positions() const { return positions_; }
  // Forgets the cache: the next forward starts at position 0.
  void reset() { position_ = 0; }
  // The bytes of this rank's caches: 2 (K and V) × layers of the stage × positions × kv_heads/t ×
  // head dim × the element size; with multi-head latent attention layers × positions × (r_kv + d_R)
  // × the element size (KvCache::bytes).
  std::int64_t cache_bytes() const {
    std::int64_t b = 0;
    for (const KvCache<T>& c : caches_) b += c.bytes();
    return b;
  }

  kernels::Matrix<T> stage_input(std::int64_t n) const { return first_rows(residual_[0], n); }
  kernels::Matrix<T> stage_output(std::int64_t n) const { return first_rows(residual_[caches_.size() % 2], n); }
  // [V_padded/tp] local logits of the last row of the last forward (last stage).
  auto last_logits() const { return Kokkos::subview(logits_, 0, Kokkos::ALL()); }

  // The n = tokens.extent(0) new rows at positions [position(), position() + n): embedding
  // (first stage, from `tokens`; other stages read stage_input(n)), the stage's blocks, and on
  // the last stage the final norm and the logits of the last row. Throws std::length_error when
  // the rows do not fit in the cache.
  // Packed documents (data.document_mask, data.reset_positions): doc_start [n], the absolute
  // position of each new row's document start, and positions [n], each row's position in its
  // document (empty views: none; the caller derives them from the tokens, src/data/document_starts.hpp).
  template <class TV>
  void forward(const Exec& exec, const TV& tokens /*[n] on the device*/, const kernels::Tokens& doc_start = {},
               const kernels::Tokens& positions = {}) {
    const std::int64_t n = static_cast<std::int64_t>(tokens.extent(0)), p = position_;
    if (n < 1 || p + n > positions_)
      throw std::length_error("tptrain: GptInference: positions [" + std::to_string(p) + ", " + std::to_string(p + n) +
                              ") do not fit in a cache of " + std::to_string(positions_) + " positions");
    Communicator& tp = model_.tp();
    if (VocabParallelEmbedding<T>* e = model_.embedding()) e->forward(exec, tp, tokens, stage_input(n), p, positions);
    for (std::size_t l = 0; l < caches_.size(); ++l) {
      const CacheStep<T> step{&caches_[l], p, doc_start, positions};
      model_.layer(static_cast<int>(l))
          .forward(exec, tp, first_rows(residual_[l % 2], n), first_rows(residual_[(l + 1) % 2], n), &step);
    }
    if (model_.is_last_stage()) {
      const auto last = Kokkos::subview(stage_output(n), std::make_pair(n - 1, n), Kokkos::ALL());
      model_.final_norm()->forward(exec, last, final_norm_out_);
      parallel::copy_to_tp_region_forward(tp, exec, final_norm_out_);  // f: the output layer is column-parallel
      PhaseScope phase(Phase::gemm);
      kernels::linear_forward(exec, final_norm_out_, model_.output_weight()->value_matrix(), logits_);
    }
    position_ = p + n;
  }

 private:
  GptModel<T>& model_;
  std::int64_t positions_;
  std::int64_t position_ = 0;
  std::vector<KvCache<T>> caches_;  // one per block of the stage
  kernels::Matrix<T> residual_[2];  // [positions, H] ping-pong: block l reads [l % 2], writes [(l + 1) % 2]
  kernels::Matrix<T> final_norm_out_;          // [1, H] the final norm of the last row (last stage)
  kernels::Matrix<T> logits_;       // [1, V_padded/tp] (last stage)
};

}  // namespace tptrain::model
