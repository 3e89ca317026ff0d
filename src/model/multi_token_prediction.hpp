// Multi-token prediction (model.mtp_depth = D; DeepSeek-V3 §2.2; its parameters:
// src/model/spec/multi_token_prediction_spec.hpp): D sequential modules on the last pipeline
// stage. With h⁰ the main model's output before its final norm (the stage output), module
// k = 1..D computes, for every position i of a sequence,
//   x_i = eh_proj · [enorm(Emb(t_{i+k})); hnorm(h^{k−1}_i)]        (Megatron's and DeepSeek's
//   h^k = block_k(x)                                                 order of the halves)
//   loss^k_i = CE(OutHead(final_norm_k(h^k_i)), t_{i+k+1})          for i + k + 1 ≤ S (the window)
// with the main model's embedding and output layer (shared: on a last stage of a pipeline the
// copy of embedding/word, its gradient summed with the first stage's). The training loss adds
// λ/D · Σ_k Σ_i loss^k_i over the main loss's denominator (training.mtp_loss_coeff = λ); the
// rows past the window wrap around and their losses are ignored (kernels::shift_tokens,
// roll_rows). The modules compute all N rows of the micro-batch on every tensor rank (no
// sequence parallelism: with it h⁰ is gathered, and its gradient's own rows kept), their blocks
// and norms tensor-parallel as the model's; they are not part of generation or evaluation.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kokkos_kernels/embedding.hpp"
#include "kokkos_kernels/gemm.hpp"
#include "kokkos_kernels/loss_sum.hpp"
#include "kokkos_kernels/token_shift.hpp"
#include "src/model/spec/model_parameters.hpp"
#include "src/model/transformer_layer.hpp"
#include "src/model/vocab_parallel_cross_entropy.hpp"
#include "src/model/workspace.hpp"

namespace tptrain::model {

template <class T>
struct MultiTokenPrediction {
  using Matrix = kernels::Matrix<T>;

  // The modules' shape: the model's, without sequence parallelism (they compute every row).
  static GptShape module_shape(const GptShape& s) {
    GptShape m = s;
    m.sequence_parallel = false;
    return m;
  }

  struct Module {
    int k;  // predicts k + 1 tokens ahead (1-based depth)
    std::unique_ptr<NormSublayer<T>> enorm, hnorm, final_norm;
    Parameter<T> eh_proj;  // [H, 2H], replicated
    std::unique_ptr<TransformerLayer<T>> block;
    Matrix embedded;    // [N, H] Emb(t_{i+k})
    Matrix halves;      // [N, 2H] [enorm(e) | hnorm(h)]
    Matrix input, output, normed;  // [N, H]: x, h^k, final_norm(h^k)
    kernels::Tokens targets;       // [N] t_{i+k+1}, −1 past the window
  };

  GptShape shape;
  int batch;
  std::int64_t N;
  Workspace<T> ws;  // its own: the modules' rows are N where the model's may be n = N/t
  std::vector<Module> modules;
  VocabParallelCrossEntropy<T> head;  // the logits of one module at a time
  Matrix tokens_embedded;             // [N, H] Emb(t_i), rolled by k for module k
  Matrix h0;                          // [N, H] the stage output gathered (sequence parallelism)
  Matrix d_normed, d_output, d_input, d_halves, d_half, d_embedded, d_rolled;  // backward scratch
  Kokkos::View<double, kx::MemSpace> loss_total;  // Σ_k Σ_i loss^k_i since the last take
  double valid_rows = 0;              // rows those losses were summed over
  bool split_sequence;                // the stage output is the rank's token shard (sequence parallelism)

  MultiTokenPrediction(const GptShape& s, int micro_batch, const Communicator& tp, Communicator* expert, int ep_rank)
      : shape(module_shape(s)), batch(micro_batch), N(std::int64_t(micro_batch) * s.seq_length),
        ws(std::size_t(phase_region_bytes(shape, block_sizes(shape, micro_batch), int(sizeof(T))))),
        head(shape, N, tp, ws), loss_total("mtp.loss_total"), split_sequence(s.splits_sequence()) {
    const auto spec = [&](const std::string& name) { return model_parameter(shape, name); };
    const std::int64_t H = shape.hidden;
    for (int j = 0; j < s.mtp_depth; ++j) {
      const std::string layer = "layers/" + std::to_string(mtp_layer(s, j));
      Module m;
      m.k = j + 1;
      m.enorm = make_norm<T>(shape, spec, layer + "/enorm", tp, N, ws, N, SavedPlacement{layer + "/enorm"});
      m.hnorm = make_norm<T>(shape, spec, layer + "/hnorm", tp, N, ws, N, SavedPlacement{layer + "/hnorm"});
      m.eh_proj = make_parameter<T>(spec(layer + "/eh_proj/weight"), tp);
      m.block = std::make_unique<TransformerLayer<T>>(layer, block_shape(shape, mtp_layer(s, j)), micro_batch, tp, ws,
                                                      Recompute::selective, ep_rank);
      m.block->bind_expert_group(expert);
      m.final_norm =
          make_norm<T>(shape, spec, layer + "/final_norm", tp, N, ws, N, SavedPlacement{layer + "/final_norm"});
      m.embedded = ws.matrix(layer + ".mtp_embedded", BufferCategory::activation, N, H);
      m.halves = ws.matrix(layer + ".mtp_halves", BufferCategory::activation, N, 2 * H);
      m.input = ws.matrix(layer + ".mtp_input", BufferCategory::activation, N, H);
      m.output = ws.matrix(layer + ".mtp_output", BufferCategory::activation, N, H);
      m.normed = ws.matrix(layer + ".mtp_normed", BufferCategory::activation, N, H);
      m.targets = kernels::Tokens(layer + ".mtp_targets", N);
      modules.push_back(std::move(m));
    }
    for (Module& m : modules) m.block->share_stage_buffers(*modules.front().block, false);
    const BufferCategory scratch = BufferCategory::scratch;
    tokens_embedded = ws.matrix("mtp.tokens_embedded", BufferCategory::activation, N, H);
    if (s.splits_sequence()) h0 = ws.matrix("mtp.h0", BufferCategory::activation, N, H);
    for (const auto& [d, name] : {std::pair{&d_normed, "mtp.d_normed"}, std::pair{&d_output, "mtp.d_output"},
                                  std::pair{&d_input, "mtp.d_input"}, std::pair{&d_half, "mtp.d_half"},
                                  std::pair{&d_embedded, "mtp.d_embedded"}, std::pair{&d_rolled, "mtp.d_rolled"}})
      *d = ws.matrix(name, scratch, N, H);
    d_halves = ws.matrix("mtp.d_halves", scratch, N, 2 * H);
    Kokkos::deep_copy(loss_total, 0.0);
  }

  std::vector<Parameter<T>*> parameters() {  // the checkpoint's order (mtp_parameters)
    std::vector<Parameter<T>*> ps;
    for (Module& m : modules) {
      for (NormSublayer<T>* n : {m.enorm.get(), m.hnorm.get()})
        for (Parameter<T>* p : n->parameters()) ps.push_back(p);
      ps.push_back(&m.eh_proj);
      for (Parameter<T>* p : m.block->parameters()) ps.push_back(p);
      for (Parameter<T>* p : m.final_norm->parameters()) ps.push_back(p);
    }
    return ps;
  }
  std::vector<TransformerLayer<T>*> blocks() {
    std::vector<TransformerLayer<T>*> out;
    for (Module& m : modules) out.push_back(m.block.get());
    return out;
  }

  // The modules' forward from the stage output `stage_output` [rows, H] and the micro-batch's
  // tokens and targets [N]; `count`: add the losses to loss_total (a training forward, not a
  // backward's recomputation).
  void forward(const Exec& exec, Communicator& tp, const Matrix& stage_output, const kernels::Tokens& tokens,
               const kernels::Tokens& targets, const Parameter<T>& word, const Parameter<T>& output_weight,
               const bool count) {
    const Matrix& h_first = gathered(exec, tp, stage_output);
    {
      PhaseScope phase(Phase::norms_elementwise);
      kernels::embedding_forward_masked(exec, tokens, word.value_matrix(), shape.vocab_start(tp.rank()),
                                        tokens_embedded);
    }
    parallel::reduce_from_tp_region_forward(tp, exec, tokens_embedded);
    const std::int64_t H = shape.hidden, S = shape.seq_length;
    const Matrix* h_previous = &h_first;
    for (Module& m : modules) {
      {
        PhaseScope phase(Phase::norms_elementwise);
        kernels::roll_rows(exec, tokens_embedded, m.embedded, S, m.k);
        kernels::shift_tokens(exec, targets, m.targets, S, m.k, -1);
      }
      m.enorm->forward(exec, m.embedded, d_half);  // d_half: scratch until the backward
      m.hnorm->forward(exec, *h_previous, d_rolled);
      {
        PhaseScope phase(Phase::norms_elementwise);
        kernels::copy(exec, d_half, columns(m.halves, 0, H));
        kernels::copy(exec, d_rolled, columns(m.halves, H, 2 * H));
      }
      {
        PhaseScope phase(Phase::gemm);
        kernels::linear_forward(exec, m.halves, m.eh_proj.value_matrix(), m.input);
      }
      m.block->forward(exec, tp, m.input, m.output);
      m.final_norm->forward(exec, m.output, m.normed);
      if (count) {
        head.logits_forward(exec, tp, m.normed, output_weight);
        head.loss_per_token(exec, tp, m.targets);
        PhaseScope phase(Phase::loss);
        kernels::zero_ignored(exec, m.targets, head.loss);
        kernels::accumulate_loss_sum(exec, head.loss, N, loss_total);
        valid_rows += double(batch) * double(S - m.k);
      }
      h_previous = &m.output;
    }
  }

  // Gradients of scale · Σ_k Σ_i loss^k_i into the modules' parameters, the word embedding (its
  // rows grouped by `segments`, the input tokens'), the output layer, and d_stage_output [rows, H]
  // (added to).
  void backward(const Exec& exec, Communicator& tp, const Matrix& stage_output, const kernels::TokenSegments& segments,
                Parameter<T>& word, Parameter<T>& output_weight, const kx::acc_t<T> scale,
                const Matrix& d_stage_output) {
    const Matrix& h_first = split_sequence ? h0 : stage_output;
    const std::int64_t H = shape.hidden, S = shape.seq_length;
    kernels::fill(exec, d_embedded, T(0));
    for (std::size_t j = modules.size(); j-- > 0;) {
      Module& m = modules[j];
      head.logits_forward(exec, tp, m.normed, output_weight);
      head.loss_per_token(exec, tp, m.targets);
      head.backward(exec, tp, m.targets, m.normed, output_weight, scale, d_normed, /*ignore_negative=*/true);
      m.final_norm->backward(exec, d_normed, m.output, d_output);
      if (j + 1 < modules.size()) {  // h^k also feeds module k + 1's hnorm: its gradient is in d_h_next
        PhaseScope phase(Phase::norms_elementwise);
        kernels::add_inplace(exec, d_output, d_rolled);
      }
      m.block->set_auxiliary_loss_scale(scale * kx::acc_t<T>(N));
      m.block->backward(exec, tp, d_output, m.input, d_input);
      {
        PhaseScope phase(Phase::gemm);
        kernels::linear_backward_weight(exec, d_input, m.halves, m.eh_proj.grad_matrix());
        kernels::linear_backward_input(exec, d_input, m.eh_proj.value_matrix(), d_halves);
      }
      {
        PhaseScope phase(Phase::norms_elementwise);
        kernels::copy(exec, columns(d_halves, 0, H), d_half);
      }
      m.enorm->backward(exec, d_half, m.embedded, d_output);  // d_output: free again
      {
        PhaseScope phase(Phase::norms_elementwise);
        kernels::roll_rows(exec, d_output, d_input, S, -m.k);  // back to the tokens' own rows
        kernels::add_inplace(exec, d_embedded, d_input);
        kernels::copy(exec, columns(d_halves, H, 2 * H), d_half);
      }
      m.hnorm->backward(exec, d_half, j == 0 ? h_first : modules[j - 1].output, d_rolled);  // d h^{k−1}
    }
    {
      PhaseScope phase(Phase::norms_elementwise);
      kernels::embedding_backward_masked(exec, segments, d_embedded, shape.vocab_start(tp.rank()),
                                         word.grad_matrix());
      // d h⁰: whole on every tensor rank; with sequence parallelism this rank's rows of it.
      const std::int64_t rows = d_stage_output.extent(0), first = split_sequence ? tp.rank() * rows : 0;
      kernels::add_inplace(exec, d_stage_output,
                           Kokkos::subview(d_rolled, std::make_pair(first, first + rows), Kokkos::ALL()));
    }
  }

  // The losses summed since the last call and the rows they were summed over (host; fences).
  std::pair<double, double> take_losses(const Exec& exec) {
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), loss_total);
    exec.fence();
    const std::pair<double, double> out{h(), valid_rows};
    Kokkos::deep_copy(exec, loss_total, 0.0);
    valid_rows = 0;
    return out;
  }


 private:
  static auto columns(const Matrix& m, std::int64_t first, std::int64_t last) {
    return Kokkos::subview(m, Kokkos::ALL(), std::make_pair(first, last));
  }
  const Matrix& gathered(const Exec& exec, Communicator& tp, const Matrix& stage_output) {
    if (!split_sequence) return stage_output;
    parallel::gather_from_sequence_parallel_region_forward(tp, exec, stage_output, h0);
    return h0;
  }
};

}  // namespace tptrain::model
