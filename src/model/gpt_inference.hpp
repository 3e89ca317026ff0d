// Incremental forward of one pipeline stage of a GptModel for generation (docs/design.md,
// "Generation"): n new tokens of one sequence at positions [p, p + n) — the prompt as one block
// (prefill), then one row per generated token — against the keys and values of positions [0, p)
// kept in a KvCache per block (src/model/kv_cache.hpp). Forward only; the weights are the
// model's (views, nothing copied).
//
// Between stages the caller moves [n, H] tensors, as pipeline_forward does for training:
// a non-first stage reads stage_input(n) (filled by the caller), a non-last stage leaves
// stage_output(n). The last stage leaves the local logits of the block's last row,
// [V_padded/tp] of its vocabulary slice, in last_logits(). Every tensor rank holds the n rows
// whole; the collectives are the training forward's (the embedding's and the row-parallel
// layers' all-reduce over the tensor group, through src/parallel).
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kokkos_kernels/elementwise.hpp"
#include "kokkos_kernels/embedding.hpp"
#include "kokkos_kernels/gelu.hpp"
#include "kokkos_kernels/layernorm.hpp"
#include "src/model/gpt_model.hpp"
#include "src/model/kv_cache.hpp"

namespace tptrain::model {

template <class T>
class GptInference {
 public:
  using Acc = kx::acc_t<T>;

  // Caches of model.shape().seq_length positions (the position embedding's rows), blocks of at
  // most that many new rows.
  explicit GptInference(GptModel<T>& model) : model_(model), positions_(model.shape().seq_length) {
    const GptShape& s = model.shape();
    if (s.rms() || s.swiglu() || s.rotary() || !s.qkv_bias || !s.linear_bias || s.kv_head_count() != s.heads)
      throw std::invalid_argument("tptrain: the KV cache is built for GPT-2's block so far (LayerNorm, GELU, biases, "
                                  "learned positions, multi-head attention), not for model.architecture = \"" +
                                  s.architecture + "\"; generate --no-kv-cache samples with the full forward for every token");
    const CachedAttentionScratch<T> attention_scratch(s, positions_, positions_);
    for (int l = 0; l < model.local_layers(); ++l) {
      const std::string name = "layers/" + std::to_string(model.first_layer() + l);
      TransformerLayer<T>& layer = model.layer(l);
      blocks_.push_back(Block{CachedAttention<T>(layer.attn, name, positions_, attention_scratch),
                              without_sequence_parallel(layer.mlp.fc), without_sequence_parallel(layer.mlp.proj)});
    }
    util::MemoryCategoryScope as(util::MemoryCategory::workspace);
    for (auto& r : residual_) r = kernels::Matrix<T>("inference.residual", positions_, s.hidden);
    a_ = kernels::Matrix<T>("inference.ln_out", positions_, s.hidden);
    x1_ = kernels::Matrix<T>("inference.x1", positions_, s.hidden);
    out_ = kernels::Matrix<T>("inference.out", positions_, s.hidden);
    h_ = kernels::Matrix<T>("inference.mlp_h", positions_, s.local_ffn());
    act_ = kernels::Matrix<T>("inference.mlp_a", positions_, s.local_ffn());
    sig_ = kernels::Matrix<T>("inference.mlp_sigmoid", positions_, s.local_ffn());
    mean_ = kernels::Vector<Acc>("inference.mean", positions_);
    rstd_ = kernels::Vector<Acc>("inference.rstd", positions_);
    if (model.is_last_stage()) {
      x_f_ = kernels::Matrix<T>("inference.ln_f", 1, s.hidden);
      logits_ = kernels::Matrix<T>("inference.logits", 1, s.local_vocab());
    }
  }

  // Tokens cached so far: the position of the next row.
  std::int64_t position() const { return position_; }
  std::int64_t max_positions() const { return positions_; }
  // Forgets the cache: the next forward starts at position 0.
  void reset() { position_ = 0; }

  kernels::Matrix<T> stage_input(std::int64_t n) const { return rows(residual_[0], n); }
  kernels::Matrix<T> stage_output(std::int64_t n) const { return rows(residual_[blocks_.size() % 2], n); }
  // [V_padded/tp] local logits of the last row of the last forward (last stage).
  auto last_logits() const { return Kokkos::subview(logits_, 0, Kokkos::ALL()); }

  // The n = tokens.extent(0) new rows at positions [position(), position() + n): embedding
  // (first stage, from `tokens`; other stages read stage_input(n)), the stage's blocks, and on
  // the last stage ln_f and the logits of the last row. Throws std::length_error when the rows
  // do not fit in the cache.
  template <class TV>
  void forward(const Exec& exec, const TV& tokens /*[n] on the device*/) {
    const std::int64_t n = static_cast<std::int64_t>(tokens.extent(0)), p = position_;
    if (n < 1 || p + n > positions_)
      throw std::length_error("tptrain: GptInference: positions [" + std::to_string(p) + ", " + std::to_string(p + n) +
                              ") do not fit in a cache of " + std::to_string(positions_) + " positions");
    Communicator& tp = model_.tp();
    if (VocabParallelEmbedding<T>* e = model_.embedding()) {
      const auto x = stage_input(n);
      {
        PhaseScope phase(Phase::norms_elementwise);
        kernels::embedding_forward_masked(exec, tokens, e->word.value_matrix(), e->vocab_start, x);
      }
      parallel::reduce_from_tp_region_forward(tp, exec, x);
      PhaseScope phase(Phase::norms_elementwise);
      kernels::position_embedding_add(exec, e->position.value_matrix(), positions_, x, p);
    }
    for (std::size_t l = 0; l < blocks_.size(); ++l)
      block_forward(exec, tp, static_cast<int>(l), rows(residual_[l % 2], n), rows(residual_[(l + 1) % 2], n), p);
    if (model_.is_last_stage()) {
      LayerNorm<T>& ln_f = *model_.final_norm();
      const auto last = Kokkos::subview(stage_output(n), std::make_pair(n - 1, n), Kokkos::ALL());
      {
        PhaseScope phase(Phase::norms_elementwise);
        kernels::layernorm_forward(exec, last, ln_f.weight.value_vector(), ln_f.bias.value_vector(), x_f_,
                                   first(mean_, 1), first(rstd_, 1), Acc(LayerNorm<T>::eps));
      }
      parallel::copy_to_tp_region_forward(tp, exec, x_f_);  // f: the tied output layer is column-parallel
      PhaseScope phase(Phase::gemm);
      kernels::linear_forward(exec, x_f_, model_.output_weight()->value_matrix(), logits_);
    }
    position_ = p + n;
  }

 private:
  struct Block {
    CachedAttention<T> attn;
    ColumnParallelLinear<T> fc;  // skip_bias_add, as in ParallelMLP
    RowParallelLinear<T> proj;
  };

  template <class Layer>
  static Layer without_sequence_parallel(Layer layer) {
    layer.sp = {};
    layer.column_scratch = {};
    return layer;
  }
  static kernels::Matrix<T> rows(const kernels::Matrix<T>& m, std::int64_t n) {
    return Kokkos::subview(m, std::make_pair(std::int64_t(0), n), Kokkos::ALL());
  }
  static auto first(const kernels::Vector<Acc>& v, std::int64_t n) {
    return Kokkos::subview(v, std::make_pair(std::int64_t(0), n));
  }

  // TransformerLayer::forward for the n rows: y = x1 + mlp(ln_2(x1)), x1 = x + attn(ln_1(x)).
  void block_forward(const Exec& exec, Communicator& tp, int l, const kernels::Matrix<T>& x,
                     const kernels::Matrix<T>& y, std::int64_t p) {
    const std::int64_t n = static_cast<std::int64_t>(x.extent(0));
    TransformerLayer<T>& layer = model_.layer(l);
    Block& b = blocks_[static_cast<std::size_t>(l)];
    const auto a = rows(a_, n), x1 = rows(x1_, n), out = rows(out_, n);
    const auto h = rows(h_, n), act = rows(act_, n), sig = rows(sig_, n);
    {
      PhaseScope phase(Phase::norms_elementwise);
      kernels::layernorm_forward(exec, x, layer.ln_1.weight.value_vector(), layer.ln_1.bias.value_vector(), a,
                                 first(mean_, n), first(rstd_, n), Acc(LayerNorm<T>::eps));
    }
    b.attn.forward(exec, tp, a, out, p);
    {
      PhaseScope phase(Phase::norms_elementwise);
      kernels::add_layernorm_forward(exec, x, out, x1, layer.ln_2.weight.value_vector(),
                                     layer.ln_2.bias.value_vector(), a, first(mean_, n), first(rstd_, n),
                                     Acc(LayerNorm<T>::eps));
    }
    b.fc.forward(exec, tp, a, h);
    {
      PhaseScope phase(Phase::norms_elementwise);
      kernels::bias_gelu_forward(exec, h, b.fc.bias.value_vector(), act, sig);
    }
    b.proj.forward(exec, tp, act, out);
    PhaseScope phase(Phase::norms_elementwise);
    kernels::add(exec, x1, out, y);
  }

  GptModel<T>& model_;
  std::int64_t positions_;
  std::int64_t position_ = 0;
  std::vector<Block> blocks_;
  kernels::Matrix<T> residual_[2];  // [positions, H] ping-pong: block l reads [l % 2], writes [(l + 1) % 2]
  kernels::Matrix<T> a_, x1_, out_;  // [positions, H]
  kernels::Matrix<T> h_, act_, sig_;  // [positions, F/tp]
  kernels::Vector<Acc> mean_, rstd_;  // [positions], LayerNorm statistics (not needed after the forward)
  kernels::Matrix<T> x_f_;            // [1, H] ln_f of the last row (last stage)
  kernels::Matrix<T> logits_;         // [1, V_padded/tp] (last stage)
};

}  // namespace tptrain::model
